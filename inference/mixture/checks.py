"""The mixture fit's argument checks, its initial state and its end-of-fit checks."""

from __future__ import annotations

import functools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from inference.engine import host, warn_not_converged
from inference.mixture.features import project
from inference.mixture.mstep import pad
from inference.mixture.result import MODES
from inference.mixture.seeding import kmeans_plus_plus
from inference.mixture.sweep import EMState
from ppl_models import mixture
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import (
    check_bool,
    check_choice,
)


def check_options(mode, covariance, weight_rule, prune, init):
    """The option checks of :func:`fit_mixture` (and of the streaming fit)."""
    check_choice(mode, "mode", MODES)
    check_choice(covariance, "covariance", mixture.COVARIANCES)
    check_choice(weight_rule, "weight_rule", ("ml", "mml"))
    check_choice(init, "init", ("kmeans++", "random"))
    check_bool(prune, "prune")
    if weight_rule == "mml" and (not prune or mode == "nearest"):
        raise ValueError("weight_rule='mml' needs prune=True and mode 'stochastic' or 'map'; "
                         f"got prune={prune!r}, mode={mode!r}")


#: reg_covar above this fraction of the data's mean variance inflates every covariance
#: noticeably: fit_mixture warns (reg_covar is absolute, as in scikit-learn).
REG_COVAR_WARN_FRACTION = 1e-3


def check_reg_covar(reg_covar, spread, name="x", stacklevel=3):
    """Warn when the absolute ``reg_covar`` is not small against the data's mean variance
    ``spread`` (data on a tiny scale, e.g. 1e-6 units): the covariances would then be
    mostly ``reg_covar`` and the clusters smoothed away without any error."""
    if reg_covar and reg_covar > REG_COVAR_WARN_FRACTION * spread:
        warnings.warn(
            f"reg_covar={reg_covar!r} is {reg_covar / spread:.3g} times the mean variance "
            f"{spread:.3g} of {name}: it dominates the fitted covariances. Rescale {name} "
            f"(e.g. standardise it) or pass a reg_covar below {REG_COVAR_WARN_FRACTION:g} x "
            "that variance", NumericalWarning, stacklevel=stacklevel)


def initial_state(seed_x, k, spread, covariance, init, rng_key, init_means, init_weights,
                   init_covariances, weight_rule):
    """The start of a fit (padded, :func:`pad`) and the MML weight offset.

    Means: ``init_means``, or k-means++ / random rows (plus noise of 1% of the
    data's spread) of ``seed_x`` (the data, or a streaming fit's first batch).
    Weights equal and covariances spread / k times I unless given; ``covariance``
    is the family after the k-means override.
    """
    dim, dtype = seed_x.shape[1], seed_x.dtype
    if init_means is None:
        key_means, key_noise = jax.random.split(rng_key)
        if init == "kmeans++":
            means = kmeans_plus_plus(key_means, seed_x, k)
        else:
            rows = jax.random.choice(key_means, seed_x.shape[0], (k,), replace=False)
            means = seed_x[rows] + 0.01 * math.sqrt(spread) * jax.random.normal(key_noise,
                                                                               (k, dim))
    else:
        means = jnp.asarray(init_means, dtype)
        if means.shape != (k, dim) or not bool(jnp.all(jnp.isfinite(means))):
            raise ValueError(f"init_means must be finite with shape ({k}, {dim}); "
                             f"got shape {means.shape}")
    weights = (jnp.full(k, 1.0 / k, dtype) if init_weights is None
               else jnp.asarray(init_weights, dtype))
    if weights.shape != (k,) or not bool(jnp.all(weights > 0)):
        raise ValueError(f"init_weights must be positive with shape ({k},); got {weights}")
    if init_covariances is None:
        cov = jnp.broadcast_to(spread / k * jnp.eye(dim, dtype=dtype), (k, dim, dim))
    else:
        cov = jnp.asarray(init_covariances, dtype)
        if cov.shape != (k, dim, dim):
            raise ValueError(f"init_covariances must have shape ({k}, {dim}, {dim}); "
                             f"got {cov.shape}")
    state = _start_state(weights, means, cov, covariance=covariance)
    per_component = {"full": dim * (dim + 3) // 2, "diag": 2 * dim, "spherical": dim + 1}
    return state, (0.5 * per_component[covariance] if weight_rule == "mml" else 0.0)


@functools.partial(jax.jit, static_argnames=("covariance",))
def _start_state(weights, means, cov, *, covariance):
    """The padded start (:func:`pad`) from checked parameters, in one compiled call."""
    state = EMState(weights / jnp.sum(weights), means, project(cov, covariance),
                   jnp.ones(means.shape[0], bool))
    return pad(state)


def is_prefix(keep):
    """Whether the sorted indices ``keep`` (numpy) are 0, 1, ..., len - 1 (none pruned)."""
    return bool(keep.size) and int(keep[-1]) == keep.size - 1


def take(array, keep):
    """``array[keep]`` for the sorted indices ``keep``: ``array`` itself when it keeps every
    row, else copied on the host (:mod:`inference.engine.host`: the number kept depends on the
    data, and a slice or gather of a new length outside ``jit`` would compile anew)."""
    if keep.size == array.shape[0] and is_prefix(keep):
        return array
    return host.take(array, keep)


def check_end(caller, data_name, state, active, done, k, num, dim, *, mode, prune, min_count,
               variance_threshold, spread, reg_covar, max_iterations, stacklevel=3):
    """After a fit: the surviving components' indices and the collapsed ones among them.

    Raises if pruning discarded every component; warns (ConvergenceWarning) when the
    fit did not converge and when, without pruning, a component's smallest
    covariance eigenvalue is at ``reg_covar``.
    """
    keep = np.flatnonzero(active)
    if keep.size == 0:
        raise ValueError(
            f"{caller}: automatic selection (Xu (1995), sec. 5.2): pruning discarded all "
            f"{k} components (min_count="
            f"{min_count} points each, variance_threshold={variance_threshold}; {data_name} "
            f"has {num} examples in {dim} dimensions); use fewer components, "
            "covariance='diag' or 'spherical', a smaller min_count, or prune=False")
    warn_not_converged(caller, done, max_iterations, f"mode={mode!r}", stacklevel=stacklevel + 1)
    collapsed = np.zeros(0, int)
    if not prune and mode != "nearest":
        smallest = np.asarray(jnp.linalg.eigvalsh(state.covariances))[:, 0]
        collapsed = np.flatnonzero((smallest < variance_threshold * spread + 2 * reg_covar)
                                   & active)
        if collapsed.size:
            warnings.warn(f"{caller}: component(s) {collapsed.tolist()} collapsed (smallest "
                          "covariance eigenvalue at reg_covar); prune=True discards them",
                          ConvergenceWarning, stacklevel=stacklevel)
    return keep, collapsed


