"""NumPyro programs of the model zoo, their data generators and metadata.

Each module holds one model family as an ordinary NumPyro program with finite
observation noise and registers it (:func:`ppl_models.registry.register`);
:data:`REGISTRY` maps model names to their :class:`ModelInfo`. A new model's module
is added to :data:`MODEL_MODULES`.
"""

import importlib
import importlib.metadata

from ppl_models.registry import (
    FAMILIES,
    REGISTRY,
    Family,
    ModelInfo,
    Selection,
    register,
    register_family,
)

try:
    __version__ = importlib.metadata.version("ppl-zoo")
except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
    __version__ = "0+unknown"

#: The model modules, imported (and so registered) with the package.
MODEL_MODULES = ("gvq", "clipped_gaussian", "mixture", "vb_mixture", "mcvq", "ppca")

for _name in MODEL_MODULES:
    importlib.import_module(f"ppl_models.{_name}")

from ppl_models import clipped_gaussian, gvq, mcvq, mixture, vb_mixture  # noqa: E402

__all__ = ["FAMILIES", "MODEL_MODULES", "REGISTRY", "Family", "ModelInfo", "Selection", "register",
           "register_family", "clipped_gaussian", "gvq", "mcvq", "mixture", "vb_mixture"]
