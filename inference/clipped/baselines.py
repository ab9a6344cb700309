"""NumPyro's generic inference on the clipped-Gaussian program, as baselines.

Lee and Sompolinsky (1999; full citation under References) learn W by moment
matching (:func:`inference.clipped.fit.fit_clipped_gaussian`). Here NumPyro's
generic machinery runs on the *same* program,
:func:`ppl_models.clipped_gaussian.model`, unchanged (its likelihood is never
re-typed here): the finite-noise probit layer P(s_a = +1 | y) =
Phi((W y + xi)_a / sigma) with W ~ Normal(0, 1/sqrt(P)), xi ~ Normal(0, 1) and
one hidden y ~ Normal(0, I_P) per pattern.

* :func:`fit_clipped_svi` (:mod:`inference.clipped.baselines_svi`): stochastic
  variational inference, W (and xi) as point estimates and a mean-field Gaussian over
  every pattern's y, run through the engine;
* :func:`fit_clipped_mcmc` (:mod:`inference.clipped.baselines_mcmc`): NUTS over W, xi
  and all y (small problems only), summarised by its posterior-predictive moments.

Every learner is scored alike (``inference.clipped.compare``,
``benchmarks/clipped.py``): ``moment_error(model_moments(W, xi, sigma), s_heldout)``,
the predicted means and pair moments <s_a s_b> of the program against held-out
patterns.

Symmetry: the program is invariant under W -> W Q, y -> Q^T y for any
orthogonal Q (the priors on y and W are isotropic), so W is identified only up
to a rotation of its columns. Only rotation-invariant summaries mean anything:
W W^T, the column space of W, and the predicted moments; a posterior *mean* of
W averages over rotations and tends to zero.

References
----------
D. D. Lee and H. Sompolinsky, "Learning a continuous hidden variable model for binary
data", Advances in Neural Information Processing Systems 11 (NIPS 1998), 1999.
Hoffman, Gelman, "The No-U-Turn Sampler", JMLR 15 (2014). Kingma, Ba, "Adam",
ICLR 2015.
"""

from __future__ import annotations

from inference.clipped.baselines_mcmc import (
    MAX_MCMC_DIMENSION,
    R_HAT_THRESHOLD,
    ClippedMCMCResult,
    fit_clipped_mcmc,
)
from inference.clipped.baselines_svi import ClippedSVIResult, ClippedSVITrace, fit_clipped_svi

__all__ = ["fit_clipped_svi", "fit_clipped_mcmc", "ClippedSVIResult", "ClippedSVITrace",
           "ClippedMCMCResult", "MAX_MCMC_DIMENSION", "R_HAT_THRESHOLD"]
