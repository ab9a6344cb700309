"""The MCVQ baselines and their scoring (the program of :mod:`ppl_models.mcvq`).

* :mod:`inference.mcvq.baselines_svi`: NumPyro's SVI on the MCVQ program with r and s
  enumerated (:func:`fit_mcvq_svi`, the exact likelihood) or with the paper's mean-field
  guide (:func:`fit_mcvq_meanfield_svi`, the exact free energy), and
  :func:`enumerated_loss`;
* :mod:`inference.mcvq.scoring`: the exact log-likelihood by enumeration
  (:func:`exact_log_likelihood`), the variational baseline :func:`fit_variational`
  (the best factorised (g, m) for fixed parameters) and :func:`score_mcvq`, the same
  measures for every learner.

This module gathers their public names.
"""

from inference.mcvq.baselines_svi import (
    MCVQSVIResult,
    enumerated_loss,
    fit_mcvq_meanfield_svi,
    fit_mcvq_svi,
)
from inference.mcvq.scoring import (
    MAX_ENUMERATED_CELLS,
    MAX_ENUMERATED_TERMS,
    MCVQScore,
    check_enumerable,
    exact_log_likelihood,
    fit_variational,
    score_mcvq,
)

__all__ = ["fit_mcvq_svi", "fit_mcvq_meanfield_svi", "exact_log_likelihood", "fit_variational",
           "score_mcvq", "check_enumerable", "enumerated_loss", "MCVQSVIResult", "MCVQScore",
           "MAX_ENUMERATED_TERMS", "MAX_ENUMERATED_CELLS"]
