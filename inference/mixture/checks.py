"""The mixture fit's argument checks, its initial state and its end-of-fit checks."""

from __future__ import annotations

import functools
import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference.engine import host, warn_not_converged
from inference.mixture.features import project
from inference.mixture.mstep import pad, scaled_smallest
from inference.mixture.result import MODES
from inference.mixture.seeding import kmeans_plus_plus, kmeans_start
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
    check_choice(init, "init", ("kmeans", "kmeans++", "random"))
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


#: The default covariance regulariser, relative: reg_covar=None adds this fraction of the
#: data's variance along every coordinate to the covariances' diagonals (of the mean
#: variance for spherical covariances). On standardised data it equals scikit-learn's
#: absolute default 1e-6; on raw data it is the same regulariser in the data's own units.
RELATIVE_REG_COVAR = 1e-6


class Scale(NamedTuple):
    """The data's units for the covariance regulariser and the collapse test.

    Attributes
    ----------
    reg : numpy array (d,)
        Added to every covariance's diagonal.
    inv_scale : numpy array (d,)
        One over the standard deviation per coordinate (0 where the data is constant);
        the collapse test reads eigenvalues of diag(inv_scale) Sigma diag(inv_scale).
    floor : float
        A component whose smallest eigenvalue in those units is below ``floor`` has
        collapsed: ``variance_threshold`` plus twice the regulariser in those units
        (its variance is then held up by the regulariser alone).
    """

    reg: np.ndarray
    inv_scale: np.ndarray
    floor: float


def data_scale(x, covariance, reg_covar, variance_threshold):
    """The :class:`Scale` of ``x`` (num_examples, d) for a fit with ``covariance``.

    ``"full"``/``"diag"``: per-coordinate variances, so that rescaling one feature
    changes neither the regulariser's effect nor the collapse test; ``"spherical"``
    (and k-means): the mean variance for every coordinate, as one sigma^2 must be.
    ``reg_covar=None``: :data:`RELATIVE_REG_COVAR` times those variances; a number:
    that absolute value on every coordinate (scikit-learn's meaning).
    """
    return scale_from_variances(np.var(np.asarray(x, np.float64), axis=0), covariance,
                                reg_covar, variance_threshold)


def scale_from_variances(variances, covariance, reg_covar, variance_threshold):
    """:func:`data_scale` from the data's per-coordinate variances (d,)."""
    variances = np.asarray(variances, np.float64)
    spread = float(np.mean(variances))
    if covariance == "spherical":
        variances = np.full_like(variances, spread)
    constant = variances <= 1e-12 * max(float(np.max(variances)), 1e-300)
    units = np.where(constant, spread, variances)
    reg = (RELATIVE_REG_COVAR * units if reg_covar is None
           else np.full_like(units, float(reg_covar)))
    inv_scale = np.where(constant, 0.0, 1.0 / np.sqrt(units))
    floor = float(variance_threshold) + 2.0 * float(np.min(reg / units))
    return Scale(reg, inv_scale, floor)


def initial_state(seed_x, k, spread, covariance, init, rng_key, init_means, init_weights,
                   init_covariances, weight_rule, reg=None, padded=None):
    """The start of a fit (padded, :func:`pad`) and the MML weight offset.

    Means: ``init_means``, or (``init="kmeans"``) the k-means clusters' weights, means
    and covariances plus ``reg`` (:func:`inference.mixture.seeding.kmeans_start`), or
    k-means++ / random rows (plus noise of 1% of the
    data's spread) of ``seed_x`` (the data, or a streaming fit's first batch).
    Weights equal and covariances spread / k times I unless given; ``covariance``
    is the family after the k-means override. ``padded`` (optional): ``(rows, num)``,
    ``seed_x`` padded past its ``num`` examples (:func:`inference.mixture.algorithm.
    pad_rows`), on which ``"kmeans"`` and ``"kmeans++"`` draw the same means with
    programs that depend on the padded size only.
    """
    dim, dtype = seed_x.shape[1], seed_x.dtype
    rows, num = (seed_x, None) if padded is None else padded
    if init_means is None and init == "kmeans":
        weights, means, cov = kmeans_start(rng_key, rows, k, 0.0 if reg is None else reg,
                                           num=num)
        init_weights = weights if init_weights is None else init_weights
        init_covariances = cov if init_covariances is None else init_covariances
    elif init_means is None:
        key_means, key_noise = jax.random.split(rng_key)
        if init == "kmeans++":
            means = kmeans_plus_plus(key_means, rows, k, num=num)
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


@jax.jit
def has_cholesky(covariances):
    """(k,) whether each covariance (k, d, d) has a finite Cholesky factor in its dtype."""
    return jnp.all(jnp.isfinite(jnp.linalg.cholesky(covariances)), axis=(1, 2))


#: :func:`inference.mixture.mstep.scaled_smallest`, compiled once per shape.
scaled_smallest_jit = jax.jit(scaled_smallest)
#: The same over a leading axis of starts.
scaled_smallest_starts = jax.jit(jax.vmap(scaled_smallest, (0, None)))


def check_end(caller, data_name, state, active, done, k, num, dim, *, mode, prune, min_count,
               variance_threshold, spread, reg_covar, max_iterations, stacklevel=3, scale=None):
    """After a fit: the surviving components' indices and the collapsed ones among them.

    Raises if pruning discarded every component; warns (ConvergenceWarning) when the
    fit did not converge and when a surviving component has collapsed: without
    pruning, its smallest covariance eigenvalue is at the regulariser (in the data's
    units when ``scale``, a :class:`Scale`, is given; else against
    ``variance_threshold * spread + 2 * reg_covar``); in any mode, its covariance has
    no Cholesky factor in the fit's float type.
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
    if mode != "nearest":
        singular = ~np.asarray(has_cholesky(state.covariances))
        if prune:
            low = np.zeros_like(singular)
        elif scale is None:
            smallest = np.asarray(jnp.linalg.eigvalsh(state.covariances))[:, 0]
            low = smallest < variance_threshold * spread + 2 * reg_covar
        else:
            smallest = np.asarray(scaled_smallest_jit(
                state.covariances, jnp.asarray(scale.inv_scale, state.covariances.dtype)))
            low = smallest < scale.floor
        collapsed = np.flatnonzero((low | singular) & active)
        if collapsed.size:
            why = ("smallest covariance eigenvalue at reg_covar); prune=True discards them"
                   if not prune else f"covariance has no Cholesky factor in "
                   f"{state.covariances.dtype}); raise reg_covar or variance_threshold")
            warnings.warn(f"{caller}: component(s) {collapsed.tolist()} collapsed ({why}",
                          ConvergenceWarning, stacklevel=stacklevel)
    return keep, collapsed


