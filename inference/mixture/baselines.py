"""NumPyro's generic inference on the Gaussian-mixture program, as baselines.

Xu (1995; full citation under References) fits the mixture by EM and its hard
limits (:func:`inference.mixture.em.fit_mixture`). Here NumPyro's generic machinery
runs on the *same* program, :func:`ppl_models.mixture.model`, unchanged:
y ~ Categorical(alpha) marked ``infer={"enumerate": "parallel"}``, x | y ~
Normal(m_y, Sigma_y), and the parameters as sample sites with the program's priors,
alpha ~ Dirichlet(1), m ~ Normal(0, ``prior_scale``), standard deviations ``"sd"`` ~
HalfNormal(``prior_scale``) and, for full covariances, Cholesky factors of
correlations ``"corr"`` ~ LKJ(2).

* :func:`fit_mixture_svi`: SVI with ``TraceEnum_ELBO`` (y summed out exactly) and a
  point-mass guide (``AutoDelta``) on alpha, m, sd, corr: the maximum a posteriori
  parameters, by Adam;
* :func:`fit_mixture_mcmc`: NUTS on alpha, m, sd, corr with y summed out (NumPyro
  enumerates it through funsor at every gradient), small data only; its draws
  become an ``arviz.InferenceData`` (``arviz.from_numpyro``: posterior, sample_stats,
  observed_data) whose ``log_likelihood`` group holds log p(x_i | theta) per example
  and draw (:meth:`MixtureMCMCResult.to_inference_data`);
* :func:`mixture_loo`: PSIS-LOO (``arviz.loo``) of the program with k components,
  for choosing k by the expected log predictive density; it returns arviz's
  ``ELPDData`` (``arviz.compare`` ranks a dict of them). :class:`MixtureLOO`, the
  3-tuple it returned before, remains for results saved then.

Every learner is scored alike (``inference.mixture.compare``): the mean
log-likelihood (1/N) sum_i log p(x_i | theta) = -L_stocha (eq. 14-16) of
:func:`inference.mixture.criteria.criteria`, on the learning data and on held-out data.

Label switching: the program is invariant under permutations of the components,
so the posterior has k! symmetric modes and a chain (or chains) may visit more
than one. Only permutation-invariant summaries are computed directly (the mean
log-likelihood, the posterior-predictive density, the sorted weights); component-
wise summaries are taken after aligning every draw to a pivot (:func:`align_draws`).

References
----------
L. Xu, "YING-YANG machine: a Bayesian-Kullback scheme for unified learnings and new
results on vector quantization", Proceedings of the International Conference on Neural
Information Processing (ICONIP'95), 1995, sec. 4 (eq. 13-18). Hoffman, Gelman,
"The No-U-Turn Sampler", JMLR 15 (2014). Kingma, Ba, "Adam", ICLR 2015. Marin, Mengersen, Robert,
"Bayesian modelling and inference on mixtures of distributions", Handbook of
Statistics 25 (2005), sec. 4.1. Vehtari, Gelman, Gabry, "Practical Bayesian model
evaluation using leave-one-out cross-validation and WAIC", Stat. Comput. 27 (2017).
"""

from __future__ import annotations

from inference.mixture.baselines_common import (
    MAX_MCMC_COMPONENTS,
    MAX_MCMC_EXAMPLES,
    R_HAT_THRESHOLD,
)
from inference.mixture.baselines_mcmc import (
    MixtureLOO,
    MixtureMCMCResult,
    align_draws,
    fit_mixture_mcmc,
    mixture_loo,
    pointwise_log_likelihood,
    posterior_predictive_log_likelihood,
)
from inference.mixture.baselines_svi import MixtureSVIResult, fit_mixture_svi

__all__ = ["fit_mixture_svi", "fit_mixture_mcmc", "mixture_loo", "align_draws",
           "posterior_predictive_log_likelihood", "pointwise_log_likelihood",
           "MixtureSVIResult", "MixtureMCMCResult", "MixtureLOO", "MAX_MCMC_EXAMPLES",
           "MAX_MCMC_COMPONENTS", "R_HAT_THRESHOLD"]


