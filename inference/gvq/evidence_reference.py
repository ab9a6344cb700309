"""A starting distribution for GVQ's reference evidence: Gaussians at the posterior's modes.

The evidence of the GVQ program (F ~ Normal(0, feature_scale^2), s_i ~ Bernoulli(1/2)
summed out, x ~ Normal(s F, sigma^2 I) at a fixed sigma) is hard for tempered SMC
started from the prior. F's prior is hundreds of times wider than its posterior, and
the posterior has many modes of very unequal mass: a mode that uses the n features
like fewer of them (one feature doing the work of two) can sit thousands of nats below
the best one. Particles that leave the prior settle in whichever mode they meet first;
on 200 x 6 planted data with 3 features, four repeats gave -8,167, -8,174, -8,162 and
-29,333 nats, while the EM fit's log-likelihood alone is -222.

:func:`mode_reference` builds q instead: the EM features moved to the nearest mode of
the log posterior (BFGS), a Laplace covariance there (the inverse Hessian, widened by
``inflate`` in scale), and one equally weighted component for each of the n!
permutations of the features (the program is symmetric under them, so every mode comes
n! times). :func:`inference.program.evidence.log_evidence` with ``reference=q`` tempers
from q to the posterior, which is still an estimate of log p(x), unbiased in p(x) for
any q with full support; when q sits at the modes that carry the mass it needs few
steps and its repeats agree. Its error is then what the repeats show, plus the mass of
modes far from q that the moves never reach (the EM fit is the best of several starts,
and the posterior of the planted n is dominated by its global mode).

References
----------
P. Del Moral, A. Doucet, A. Jasra, "Sequential Monte Carlo samplers", Journal of the
Royal Statistical Society B 68(3), 411-436 (2006): any normalised initial distribution.
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.scipy.optimize import minimize

from ppl_models.validation import check_positive, check_positive_int

__all__ = ["mode_reference", "log_posterior", "MAX_PERMUTATIONS"]

#: Most permutation components of q (n! up to n = 5); beyond, the identity only.
MAX_PERMUTATIONS = 120


def mode_reference(log_density, features, *, data=None, inflate: float = 2.0,
                   max_permutations: int = MAX_PERMUTATIONS):
    """q: a mixture of Gaussians at the posterior's mode near ``features`` and its
    permutations (module docstring).

    Parameters
    ----------
    log_density : callable
        The log posterior up to a constant, log p(u) + log p(x | u), of the flat vector
        u = F.ravel(): ``log_density(u)``, or ``log_density(u, data)`` when ``data`` is
        given (e.g. :func:`log_posterior` of a program's cached densities, with the data
        of :func:`inference.program.densities.program_and_data`). In the second form the
        search and the Hessian are compiled once per function and data shapes and reused
        by later calls; a closure over the data, new at every call, is compiled anew.
    features : array (n, d)
        A fit's F (e.g. EM's), where the search for the mode starts.
    data : pytree of arrays, optional
        The second argument of ``log_density``; traced, not a compile-time constant.
    inflate : float
        Scale factor on the Laplace standard deviations (default 2: q somewhat wider
        than the posterior, whose tails tempering fills in more cheaply than it fills
        gaps).
    max_permutations : int
        Use all n! row permutations up to this many, else only F itself.

    Returns
    -------
    numpyro.distributions.MixtureSameFamily
        Event shape (n d,).
    """
    features = jnp.asarray(features)
    if features.ndim != 2:
        raise ValueError(f"features must have shape (n, d); got {features.shape}")
    check_positive(inflate, "inflate")
    max_permutations = check_positive_int(max_permutations, "max_permutations")
    n, d = features.shape
    if data is None:
        def density(u, _):
            return log_density(u)
    else:
        density = log_density
    mode, covariance = _laplace(density, features.ravel(), data)
    covariance = covariance * inflate ** 2
    orders = (list(itertools.permutations(range(n))) if math.factorial(n) <= max_permutations
              else [tuple(range(n))])
    index = np.asarray([(np.asarray(p)[:, None] * d + np.arange(d)).ravel() for p in orders])
    locs = mode[index]                                            # (M, n d)
    covariances = covariance[index[:, :, None], index[:, None, :]]
    trils = jnp.linalg.cholesky(0.5 * (covariances + jnp.swapaxes(covariances, 1, 2)))
    return dist.MixtureSameFamily(dist.Categorical(logits=jnp.zeros(len(orders))),
                                  dist.MultivariateNormal(locs, scale_tril=trils))


@functools.lru_cache(maxsize=32)
def log_posterior(log_prior, log_likelihood):
    """(u, data) -> log_prior(u, data) + log_likelihood(u, data), one function object per
    pair (cached), so that :func:`mode_reference` compiles once per program."""

    def density(u, data):
        return log_prior(u, data) + log_likelihood(u, data)

    return density


@functools.partial(jax.jit, static_argnums=0)
def _laplace(log_density, u0, data):
    """(mode, inverse Hessian of -log_density there), one compiled computation per
    ``log_density`` and shapes: BFGS from u0 (kept if BFGS does not improve on it), then
    the eigen-clipped inverse Hessian."""

    def negative(u):
        return -log_density(u, data)

    found = minimize(negative, u0, method="BFGS", options={"maxiter": 500})
    mode = jnp.where(jnp.isfinite(found.fun) & (found.fun <= negative(u0)), found.x, u0)
    hessian = jax.hessian(negative)(mode)
    values, vectors = jnp.linalg.eigh(0.5 * (hessian + hessian.T))
    # A flat or negative direction (not a strict maximum) gets the largest variance
    # any proper direction has, rather than an infinite one.
    floor = jnp.maximum(jnp.max(values) * 1e-8, 1e-12)
    smallest = jnp.min(jnp.where(values > floor, values, jnp.inf))
    values = jnp.where(values > floor, values, smallest)
    values = jnp.where(jnp.isfinite(values), values, 1.0)
    return mode, (vectors / values) @ vectors.T
