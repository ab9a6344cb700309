"""Load the plug-in of every registered model family.

``ppl_models`` registers the model programs (:data:`ppl_models.REGISTRY`); each names
the inference family that fits it (``ModelInfo.family``), whose plug-in module
``inference/<family>/plugin.py`` registers a :class:`ppl_models.registry.Family`.
:func:`load_families` imports those plug-ins, so that the tools that list models (the
CLI, the comparison harness, ``reproduce``, persistence) find every family without a
list of their own.
"""

from __future__ import annotations

import importlib

from ppl_models.registry import FAMILIES, REGISTRY, Family

__all__ = ["load_families"]


def load_families() -> dict[str, Family]:
    """Import the plug-in of every family that a registered model names.

    Returns family name -> :class:`Family`, in the order the registry first names them
    (the order of :data:`ppl_models.MODEL_MODULES`).
    """
    names = list(dict.fromkeys(info.family for info in REGISTRY.values() if info.family))
    for name in names:
        if name not in FAMILIES:
            try:
                importlib.import_module(f"inference.{name}.plugin")
            except ModuleNotFoundError as error:
                if error.name not in (f"inference.{name}", f"inference.{name}.plugin"):
                    raise
                models = sorted(m for m, info in REGISTRY.items() if info.family == name)
                raise ImportError(
                    f"model(s) {models} name the inference family {name!r}, but there is no "
                    f"plug-in inference/{name}/plugin.py (it registers the family with "
                    "ppl_models.registry.register_family)") from error
            if name not in FAMILIES:
                raise ImportError(f"inference/{name}/plugin.py did not register a family "
                                  f"named {name!r} (register_family(Family(name={name!r}, "
                                  "...)))")
    return {name: FAMILIES[name] for name in names}
