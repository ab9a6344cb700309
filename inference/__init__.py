"""Custom inference for the model zoo: handlers, association, EM, and comparisons.

The algorithms read the NumPyro programs of :mod:`ppl_models` through effect
handlers (:mod:`inference.handlers`) and traces (:mod:`inference.energy`).
"""

from inference.association import AssociationResult, associate
from inference.energy import QuadraticEnergy, check_quadratic, quadratic_energy
from inference.handlers import noiseless, observation_noise

__all__ = [
    "AssociationResult",
    "QuadraticEnergy",
    "associate",
    "check_quadratic",
    "noiseless",
    "observation_noise",
    "quadratic_energy",
]

from inference.gvq import GVQResult, fit_gvq  # noqa: E402

__all__ += ["GVQResult", "fit_gvq"]

from inference.clipped_gaussian import ClippedGaussianFit, fit_clipped_gaussian  # noqa: E402

__all__ += ["ClippedGaussianFit", "fit_clipped_gaussian"]

from inference.mixture import MixtureResult, fit_mixture  # noqa: E402

__all__ += ["MixtureResult", "fit_mixture"]

from inference.mixture_selection import compare_criteria, select_num_components  # noqa: E402

__all__ += ["compare_criteria", "select_num_components"]

from inference.mcvq import MCVQResult, fit_mcvq, infer_states, reconstruct  # noqa: E402

__all__ += ["MCVQResult", "fit_mcvq", "infer_states", "reconstruct"]

from inference.vb_mixture import VBMixtureResult, fit_vb_mixture  # noqa: E402

__all__ += ["VBMixtureResult", "fit_vb_mixture"]

from inference.vb_mcvq import VBMCVQResult, fit_vb_mcvq  # noqa: E402

__all__ += ["VBMCVQResult", "fit_vb_mcvq"]

from inference.model_selection import ModelSelectionResult, model_selection  # noqa: E402

__all__ += ["ModelSelectionResult", "model_selection"]

from inference.streaming import (  # noqa: E402
    BatchSource,
    OnlineStreamResult,
    fit_mixture_stream,
    fit_online_stream,
)

__all__ += ["BatchSource", "OnlineStreamResult", "fit_mixture_stream", "fit_online_stream"]

from inference import persistence  # noqa: E402
from inference.persistence import PersistenceError, load  # noqa: E402

persistence.attach_save_methods()
__all__ += ["PersistenceError", "load", "persistence"]

from inference.streaming_fits import (  # noqa: E402
    fit_clipped_gaussian_stream,
    fit_gvq_stream,
    fit_mcvq_stream,
)

__all__ += ["fit_clipped_gaussian_stream", "fit_gvq_stream", "fit_mcvq_stream"]
