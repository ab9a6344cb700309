"""What the SVI and MCMC baselines of the mixture share: limits, the program's sites
and parameters, argument checks and the k-means++ start."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from inference.mixture.seeding import kmeans_plus_plus
from ppl_models import mixture
from ppl_models.validation import (
    MissingKeyError,
    check_data,
    check_positive,
    check_positive_int,
    check_rng_key,
)

#: fit_mixture_mcmc refuses more examples: every NUTS gradient sums all k components
#: of every example, up to 2^max_tree_depth gradients per iteration, and the
#: log-likelihood group holds num_chains * num_samples * num_examples numbers.
MAX_MCMC_EXAMPLES = 2000
#: ... and more components (k! symmetric modes; the alignment gets ambiguous).
MAX_MCMC_COMPONENTS = 10
#: Largest split R-hat (over label-invariant summaries) of a converged run
#: (Gelman et al., Bayesian Data Analysis, 3rd ed., sec. 11.4).
R_HAT_THRESHOLD = 1.1
#: Adam's step size decays by a cosine to this fraction of ``learning_rate``.
FINAL_FRACTION = 0.01
#: Draws per batch when the per-example log-likelihood of all draws is computed.
DRAW_BATCH = 64

# --- the program's parameters: sites <-> (weights, means, covariances) -----------------

def site_values(weights, means, covariances, covariance):
    """The program's sample-site values {"alpha", "m", "sd"[, "corr"]} for these parameters."""
    variances = jnp.diagonal(covariances, axis1=-2, axis2=-1)
    sites = {"alpha": weights, "m": means}
    if covariance == "full":
        sd = jnp.sqrt(variances)
        sites["sd"] = sd
        sites["corr"] = jnp.linalg.cholesky(covariances) / sd[..., :, None]
    elif covariance == "diag":
        sites["sd"] = jnp.sqrt(variances)
    else:
        sites["sd"] = jnp.sqrt(jnp.mean(variances, axis=-1))
    return sites


def parameters_from_sites(sites, covariance, dim):
    """(weights, means, covariances (..., k, d, d)) from site values (any leading draw axes)."""
    sd = sites["sd"]
    eye = jnp.eye(dim, dtype=sd.dtype)
    if covariance == "full":
        tril = sd[..., :, None] * sites["corr"]
        cov = tril @ jnp.swapaxes(tril, -1, -2)
    elif covariance == "diag":
        cov = sd[..., :, None] ** 2 * eye
    else:
        cov = sd[..., None, None] ** 2 * eye
    return sites["alpha"], sites["m"], cov


def model_kwargs(covariance, num_components, prior_scale):
    """The keyword arguments of the mixture program for the baselines' fits."""
    return {"covariance": covariance, "num_components": num_components,
            "prior_scale": prior_scale}


# --- argument checks and the shared start ---------------------------------------------

def check_common(x, num_components, covariance, rng_key, prior_scale, caller):
    """Check the arguments every baseline fit shares; returns the checked ``(x, k)``."""
    if rng_key is None:
        raise MissingKeyError(f"{caller} needs an explicit rng_key (e.g. jax.random.key(0))")
    check_rng_key(rng_key)
    if covariance not in mixture.COVARIANCES:
        raise ValueError(f"covariance must be one of {mixture.COVARIANCES}; got {covariance!r}")
    x = check_data(x, "x")
    k = check_positive_int(num_components, "num_components")
    distinct = int(np.unique(np.asarray(x), axis=0).shape[0])
    if k > distinct:
        raise ValueError(f"num_components={k} exceeds the {distinct} distinct example(s) in x")
    if float(jnp.mean(jnp.var(x, axis=0))) == 0.0:
        raise ValueError("x has no spread (every example is the same point): nothing to fit")
    if not isinstance(prior_scale, int | float | np.floating) or isinstance(prior_scale, bool):
        raise TypeError(f"prior_scale must be a positive float; got {prior_scale!r}")
    check_positive(prior_scale, "prior_scale")
    return x, k


def initial_parameters(key, x, k, covariance, init_means, init_weights, init_covariances):
    """The start of :func:`inference.mixture.em.fit_mixture` (``init="kmeans++"``), or the
    given one.

    Means: k-means++ seeding with ``key`` (the first half of the split of the
    ``rng_key`` that fit_mixture uses, so equal keys give equal starts); weights
    equal; covariances (data's mean variance / k) I (paper sec. 5.2).
    """
    num, dim = x.shape
    if init_means is None:
        means = kmeans_plus_plus(key, x, k)
    else:
        means = jnp.asarray(init_means, x.dtype)
        if means.shape != (k, dim) or not bool(jnp.all(jnp.isfinite(means))):
            raise ValueError(f"init_means must be finite with shape ({k}, {dim}); "
                             f"got shape {means.shape}")
    if init_weights is None:
        weights = jnp.full(k, 1.0 / k, x.dtype)
    else:
        weights = jnp.asarray(init_weights, x.dtype)
        if weights.shape != (k,) or not bool(jnp.all(weights > 0)):
            raise ValueError(f"init_weights must be positive with shape ({k},); got {weights}")
        weights = weights / jnp.sum(weights)
    if init_covariances is None:
        spread = jnp.mean(jnp.var(x, axis=0))
        cov = jnp.broadcast_to(spread / k * jnp.eye(dim, dtype=x.dtype), (k, dim, dim))
    else:
        cov = jnp.asarray(init_covariances, x.dtype)
        if cov.shape != (k, dim, dim):
            raise ValueError(f"init_covariances must have shape ({k}, {dim}, {dim}); "
                             f"got {cov.shape}")
        if not (bool(jnp.allclose(cov, jnp.swapaxes(cov, -1, -2), rtol=1e-5, atol=1e-8))
                and bool(jnp.all(jnp.isfinite(jnp.linalg.cholesky(cov))))):
            raise ValueError("init_covariances must be symmetric positive definite matrices")
    return weights, means, cov


# --- SVI -------------------------------------------------------------------------------

