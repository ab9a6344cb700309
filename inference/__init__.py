"""Custom inference for the model zoo: handlers, association, EM, and comparisons.

The algorithms read the NumPyro programs of :mod:`ppl_models` through effect
handlers (:mod:`inference.program.handlers`) and traces (:mod:`inference.program.energy`).
"""

from inference.association.core import AssociationResult, associate
from inference.program.energy import QuadraticEnergy, check_quadratic, quadratic_energy
from inference.program.handlers import noiseless, observation_noise

__all__ = [
    "AssociationResult",
    "QuadraticEnergy",
    "associate",
    "check_quadratic",
    "noiseless",
    "observation_noise",
    "quadratic_energy",
]

from inference.gvq.em import GVQResult, fit_gvq  # noqa: E402

__all__ += ["GVQResult", "fit_gvq"]

from inference.clipped.fit import ClippedGaussianFit, fit_clipped_gaussian  # noqa: E402

__all__ += ["ClippedGaussianFit", "fit_clipped_gaussian"]

from inference.mixture.em import MixtureResult, fit_mixture  # noqa: E402

__all__ += ["MixtureResult", "fit_mixture"]

from inference.mixture.selection import compare_criteria, select_num_components  # noqa: E402

__all__ += ["compare_criteria", "select_num_components"]

from inference.mcvq.em import MCVQResult, fit_mcvq, infer_states, reconstruct  # noqa: E402

__all__ += ["MCVQResult", "fit_mcvq", "infer_states", "reconstruct"]

from inference.mixture.vb import VBMixtureResult, fit_vb_mixture  # noqa: E402

__all__ += ["VBMixtureResult", "fit_vb_mixture"]

from inference.mcvq.vb import VBMCVQResult, fit_vb_mcvq  # noqa: E402

__all__ += ["VBMCVQResult", "fit_vb_mcvq"]

from inference.app.selection import ModelSelectionResult, model_selection  # noqa: E402

__all__ += ["ModelSelectionResult", "model_selection"]

from inference.engine.streaming import BatchSource  # noqa: E402
from inference.mixture.stream import (  # noqa: E402
    OnlineStreamResult,
    fit_mixture_stream,
    fit_online_stream,
)

__all__ += ["BatchSource", "OnlineStreamResult", "fit_mixture_stream", "fit_online_stream"]

from inference.engine import persistence  # noqa: E402
from inference.engine.persistence import PersistenceError, load  # noqa: E402

persistence.attach_save_methods()
__all__ += ["PersistenceError", "load", "persistence"]

from inference.clipped.stream import fit_clipped_gaussian_stream  # noqa: E402
from inference.gvq.stream import fit_gvq_stream  # noqa: E402
from inference.mcvq.stream import fit_mcvq_stream  # noqa: E402

__all__ += ["fit_clipped_gaussian_stream", "fit_gvq_stream", "fit_mcvq_stream"]
