"""Every name that ``ppl-zoo list`` prints is importable exactly as printed.

The listing names each model's custom inference and NumPyro baselines by dotted path
(``inference.fit_gvq``, ``inference.gvq.baselines.fit_gvq_svi``); a user who copies one
must be able to import it. The docs' list of baselines (docs/user_guide.md) names the
same paths.
"""

import importlib
import re
from pathlib import Path

from inference.app.cli import main
from inference.app.families import load_families
from ppl_models import REGISTRY

ROOT = Path(__file__).resolve().parent.parent


def _resolve(path):
    """Import ``a.b.c.name``: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            obj = getattr(obj, attribute)
        return obj
    raise ImportError(path)


def _printed_names(capsys):
    assert main(["list"]) == 0
    return re.findall(r"\binference(?:\.\w+)+", capsys.readouterr().out)


def test_every_printed_name_imports_as_printed(capsys):
    names = _printed_names(capsys)
    assert len(names) > 30  # every model's algorithms and baselines
    for name in names:
        assert callable(_resolve(name)), name


def test_baselines_are_the_families_own_functions(capsys):
    """Each printed baseline is the very function the family registers, from
    ``inference.<family>.baselines``."""
    printed = set(_printed_names(capsys))
    families = load_families()
    for info in REGISTRY.values():
        for name, fn in families[info.family].baselines.items():
            path = f"inference.{info.family}.baselines.{name}"
            assert path in printed, path
            assert _resolve(path) is fn, path


def test_the_docs_list_every_baseline():
    guide = (ROOT / "docs" / "user_guide.md").read_text()
    for info in REGISTRY.values():
        for name in load_families()[info.family].baselines:
            assert f"inference.{info.family}.baselines.{name}" in guide or (
                f"inference.{info.family}.baselines" in guide and f"`{name}`" in guide), name
