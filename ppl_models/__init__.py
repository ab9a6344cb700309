"""NumPyro programs of the model zoo, their data generators and metadata.

Each module holds one model family as an ordinary NumPyro program with finite
observation noise; :data:`REGISTRY` maps model names to their :class:`ModelInfo`.
"""

from ppl_models import clipped_gaussian, gvq, mcvq, mixture, vb_mixture
from ppl_models.registry import REGISTRY, ModelInfo, register

__all__ = ["REGISTRY", "ModelInfo", "register", "clipped_gaussian", "gvq", "mcvq", "mixture",
           "vb_mixture"]
