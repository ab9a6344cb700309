"""NumPyro's generic inference on the zoo's programs, as baselines.

The custom algorithms are compared against what NumPyro does with the *same*
program, unchanged:

* :func:`map_associate`: MAP association by ``infer_discrete(temperature=0)``
  (Viterbi-style max-product over the enumerated binary units) on the GVQ
  program at finite noise. With a uniform prior on s the MAP state at any
  sigma is the nearest codebook vector, so it must agree with
  ``associate(method="exact")`` (tested); with another prior compare with
  ``associate(..., noise=sigma)``. Exponential in the number of units, like
  exhaustive search, but through NumPyro's generic tensor contraction.
* :func:`gibbs_associate`: NumPyro's discrete Gibbs sampler (``DiscreteGibbs``,
  the discrete half of ``DiscreteHMCGibbs``; with F fixed the program has no
  continuous site for the HMC half) on the finite-noise program, one chain per
  example under ``vmap``, keeping the lowest-energy state sampled. Single-site
  Gibbs at small noise mixes poorly between modes that differ in more than
  one unit; that is the point of the annealing in Westerdijk, Barber and
  Wiegerinck (2001).
* :func:`fit_gvq_svi`: SVI with ``TraceEnum_ELBO`` (the binary units summed
  out exactly) and a point-mass guide on F, i.e. maximum a posteriori F of
  the finite-noise program by stochastic-gradient ascent (Adam).
* :func:`fit_gvq_mcmc`: NUTS on F with the binary units summed out exactly
  (NumPyro's enumeration of discrete sites in MCMC, through funsor), i.e. the
  full posterior p(F | x) of the finite-noise program; the posterior is
  summarised after undoing label switching (pivotal relabelling).

They return the result types of the custom algorithms
(:class:`~inference.association.core.AssociationResult`,
:class:`~inference.gvq.result.GVQResult`), or for MCMC :class:`GVQMCMCResult`, whose
leading fields are those of ``GVQResult``. They live in
:mod:`inference.gvq.baselines_association`, :mod:`inference.gvq.baselines_svi` and
:mod:`inference.gvq.baselines_mcmc`; this module gathers them. The program must support
``split_states=True`` (one enumerable site per unit), as
:func:`ppl_models.gvq.model` does.
"""

from inference.gvq.baselines_association import (
    MAX_ENUMERATED_FEATURES,
    gibbs_associate,
    map_associate,
)
from inference.gvq.baselines_mcmc import (
    MAX_MCMC_FEATURES,
    R_HAT_THRESHOLD,
    GVQMCMCResult,
    fit_gvq_mcmc,
    relabel_samples,
)
from inference.gvq.baselines_svi import fit_gvq_svi

__all__ = ["map_associate", "gibbs_associate", "fit_gvq_svi", "fit_gvq_mcmc",
           "GVQMCMCResult", "relabel_samples", "MAX_ENUMERATED_FEATURES", "MAX_MCMC_FEATURES",
           "R_HAT_THRESHOLD"]
