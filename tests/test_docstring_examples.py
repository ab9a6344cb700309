"""Every public fit, baseline and entry point shows a runnable example in its docstring.

The examples are numpydoc "Examples" sections with doctest lines; pytest runs them
(``--doctest-modules`` over inference/ and ppl_models/), so this test only checks that
each public callable has one.
"""

import inspect
import re

import inference
from inference.app.families import load_families

#: The entry points exported from ``inference`` itself (not through a family plug-in).
TOP_LEVEL = ("map_states", "fit_map_em", "model_selection", "numpyro_map_states", "noiseless",
             "observation_noise")

_EXAMPLES = re.compile(r"^\s*Examples\s*\n\s*-{8,}\s*$", re.MULTILINE)


def public_callables():
    """(qualified name, callable) of every family's fits and baselines and of
    :data:`TOP_LEVEL`."""
    found = {}
    for family_name, family in load_families().items():
        for kind in ("fits", "baselines"):
            for name, fn in getattr(family, kind).items():
                found[f"{family_name}.{kind}.{name}"] = fn
    for name in TOP_LEVEL:
        found[f"inference.{name}"] = getattr(inference, name)
    return found


def has_example(fn) -> bool:
    """A numpydoc "Examples" section with at least one ``>>>`` line after it."""
    doc = inspect.getdoc(fn) or ""
    match = _EXAMPLES.search(doc)
    return match is not None and ">>>" in doc[match.end():]


def test_public_callables_are_found():
    names = public_callables()
    assert "gvq.fits.fit_gvq" in names and "inference.map_states" in names
    assert all(callable(fn) for fn in names.values())


def test_every_public_fit_and_baseline_has_a_doctested_example():
    offenders = sorted(name for name, fn in public_callables().items() if not has_example(fn))
    assert not offenders, (
        f"{len(offenders)} public callables lack a numpydoc 'Examples' section with a "
        f"'>>>' line: {', '.join(offenders)}")
