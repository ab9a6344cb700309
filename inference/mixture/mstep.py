"""The M-step of the mixture fit: the moment form of the statistics, its exact
fallback, pruning and the padded state.

Equation numbers refer to L. Xu, "YING-YANG machine: a Bayesian-Kullback scheme for
unified learnings and new results on vector quantization", Proceedings of the
International Conference on Neural Information Processing (ICONIP'95), 1995.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from inference.engine.sharding import (
    psum,
)
from inference.mixture.features import project
from inference.mixture.sweep import EMState, cancellation_limit, exact_scatter


def moment_form(stats, state, shift, *, mode, covariance):
    """New means and the moment-form covariances from the summed statistics.

    ``stats = R^T t(x)`` (:func:`sweep`) holds the counts n_y, the sums and the
    second moments about the data's centre ``shift``, so
    Sigma_y = E_y[z z^T] - E_y[z] E_y[z]^T at the new means (the exact maximiser).
    Returns a dict with ``counts``, ``means``, the moment form ``cov`` ((k, d, d) for
    full covariances, (k, d) for diagonal and spherical, the total squared error
    sum_y n_y (E_y||z||^2 - ||E_y z||^2) for ``"nearest"``), ``norm`` (the divisor
    of an exact scatter) and ``cancels``: whether the difference is not to be
    trusted for some active component, because it loses a third of its digits
    (:func:`cancellation_limit`) or, for full covariances, because its smallest
    eigenvalue is within the rounding error of the moments (d eps max_i E[z_i^2]),
    where the moment form can even be indefinite.
    """
    dim = state.means.shape[1]
    dtype = state.means.dtype
    k = stats.shape[0]
    counts = stats[:, -1]
    safe = jnp.where(counts > 0, counts, 1.0)
    centred = stats[:, -1 - dim:-1] / safe[:, None]
    means = jnp.where(counts[:, None] > 0, centred + shift, state.means)
    second = stats[:, :-1 - dim] / safe[:, None]
    tiny = jnp.finfo(dtype).tiny
    doubtful = jnp.zeros(k, bool)
    if mode == "nearest":  # one shared variance, equal weights (eq. 21-22)
        spread = second[:, 0] - jnp.sum(centred * centred, axis=1)
        ratio = second[:, 0] / jnp.maximum(spread, tiny)
        cov, norm = jnp.sum(counts * spread), jnp.ones((), dtype)
    else:
        if covariance == "full":
            rows, cols = np.triu_indices(dim)
            moments = jnp.zeros((k, dim, dim), dtype).at[:, rows, cols].set(second)
            moments = moments.at[:, cols, rows].set(second)
            cov = moments - centred[:, :, None] * centred[:, None, :]
            square = jnp.diagonal(moments, axis1=-2, axis2=-1)
            variances = jnp.diagonal(cov, axis1=-2, axis2=-1)
            norm = safe[:, None, None]
            rounding = dim * float(jnp.finfo(dtype).eps) * jnp.max(square, axis=1)
            doubtful = jnp.linalg.eigvalsh(cov)[:, 0] <= rounding
        elif covariance == "diag":
            square = second
            cov = variances = second - centred * centred
            norm = safe[:, None]
        else:  # spherical: second = E||z||^2, its variance the trace over d (project)
            square = second
            variances = second - jnp.sum(centred * centred, axis=1, keepdims=True)
            cov = jnp.broadcast_to(variances / dim, (k, dim))
            norm = safe[:, None]
        ratio = jnp.max(square / jnp.maximum(variances, tiny), axis=1)
    cancels = jnp.any(state.active & (counts > 0)
                      & ((ratio > cancellation_limit(dtype)) | doubtful))
    return {"counts": counts, "means": means, "cov": cov, "norm": norm, "cancels": cancels}


def finish_m_step(parts, state, reg_covar, min_count, variance_floor, weight_offset, *, mode,
                   covariance, prune, inv_scale=None):
    """Covariances, pruning and weights from :func:`moment_form`'s ``parts``.

    ``parts["cov"]`` is the moment form or, where it would cancel, the exact
    scatter divided by ``parts["norm"]`` (the caller substitutes it). ``reg_covar`` is
    a scalar or a (d,) vector added to the diagonal. ``inv_scale`` (d,), optional:
    the pruning test reads the smallest eigenvalue of the covariance in the data's
    units, diag(inv_scale) Sigma diag(inv_scale) (:func:`scaled_smallest`), against
    ``variance_floor``; without it, of Sigma itself.
    """
    k, dim = state.means.shape
    counts, means, cov = parts["counts"], parts["means"], parts["cov"]
    eye = jnp.eye(dim, dtype=state.means.dtype)
    if mode == "nearest":
        variance = cov / (jnp.maximum(jnp.sum(counts), 1.0) * dim)
        cov = jnp.broadcast_to((variance + reg_covar) * eye, (k, dim, dim))
    else:
        if covariance != "full":
            cov = jax.vmap(jnp.diag)(cov)
        cov = project(cov, covariance) + reg_covar * eye
    active = state.active
    if prune:
        smallest = scaled_smallest(cov, inv_scale)
        active = active & (counts >= min_count) & (smallest >= variance_floor)
    cov = jnp.where(active[:, None, None], cov, eye)  # keep dead components valid
    if mode == "nearest":
        weights = jnp.where(active, 1.0, 0.0)
    else:  # n_y (eq. 17), or max(n_y - p/2, 0) for weight_rule="mml"
        weights = jnp.where(active, jnp.maximum(counts - weight_offset, 0.0), 0.0)
        if prune:
            active = active & (weights > 0)
    weights = weights / jnp.maximum(jnp.sum(weights), 1e-30)
    return EMState(weights, jnp.where(active[:, None], means, state.means), cov, active)


def scaled_smallest(cov, inv_scale=None):
    """(k,) smallest eigenvalue of every covariance (k, d, d) in the data's units.

    ``inv_scale`` (d,): one over the data's standard deviation per dimension (0 for a
    dimension where the data does not vary: it is left out, as an eigenvalue 1). The
    test is then invariant to rescaling any coordinate, so a feature measured in
    thousands does not hide the collapse of one measured in thousandths.
    """
    if inv_scale is None:
        return jnp.linalg.eigvalsh(cov)[:, 0]
    constant = jnp.diag((inv_scale == 0).astype(cov.dtype))
    scaled = cov * inv_scale[:, None] * inv_scale[None, :] + constant
    return jnp.linalg.eigvalsh(scaled)[:, 0]


def m_step(x, stats, labels, state, eta, features, mode, covariance, reg_covar, prune,
            min_count, variance_floor, weight_offset, axis_name=None, num=None, inv_scale=None):
    """Weights, means and covariances from the sweep's statistics (eq. 17-18, 19-20, 21-22).

    The moment form (:func:`moment_form`) where it can be trusted; else the
    scatter recomputed about the new means (:func:`exact_scatter`), or for
    k-means the total squared error sum_n ||x_n - m_{y_n}||^2 from the
    assignment. ``axis_name`` (the sharded fit, inside ``shard_map``): x,
    ``labels`` and ``features`` are one device's rows (``features.valid`` False on
    padded ones), ``stats`` already summed over the devices; the exact fallbacks
    are summed over the devices too. x and ``labels`` may be padded to whole blocks;
    on one device ``num`` (static) is then the number of examples, the first rows, and
    ``num=None`` masks the padding by ``features.valid`` (the fit's bucketed rows).
    """
    rows = x.shape[0]
    parts = moment_form(stats, state, features.shift, mode=mode, covariance=covariance)
    means = parts["means"]
    if mode == "nearest":
        def exact():
            if axis_name is None and num is not None:
                residual = x[:num] - means[labels[:num]]
                return jnp.sum(residual * residual)
            residual = x - means[labels]
            valid = features.valid.reshape(-1)[:rows]
            return jnp.sum(jnp.where(valid[:, None], residual * residual, 0.0))
    else:
        def exact():
            return exact_scatter(x, features, eta, state.active, mode, means, covariance)
    if axis_name is None:
        cov = jax.lax.cond(parts["cancels"],
                           lambda: exact() / (1.0 if mode == "nearest" else parts["norm"]),
                           lambda: parts["cov"])
    else:
        # Sharded: each device's part of the exact sum in the branch, the sum over the
        # devices outside it, every iteration (XLA's CPU runtime can hang on a
        # collective inside a conditional); the devices hold the same statistics, so
        # they take the same branch.
        shape = jax.eval_shape(exact)
        local = jax.lax.cond(parts["cancels"], exact,
                             lambda: jnp.zeros(shape.shape, shape.dtype))
        summed = psum(local, axis_name)
        if mode != "nearest":
            summed = summed / parts["norm"]
        cov = jnp.where(parts["cancels"], summed, parts["cov"])
    return finish_m_step({**parts, "cov": cov}, state, reg_covar, min_count, variance_floor,
                          weight_offset, mode=mode, covariance=covariance, prune=prune,
                          inv_scale=inv_scale)


def _bucket(k):
    """The compiled number of components for ``k``: a power of two up to 16, else k.

    A fit with k components runs as one of this many, the rest inactive from the
    start (the state pruning leaves behind: zero weight, no responsibility), so
    that fits over a range of k, as in model selection, share a few compilations.
    """
    return 1 << (k - 1).bit_length() if k <= 16 else k


def pad(state):
    """Append inactive components to ``state`` up to ``_bucket(k)``."""
    k, dim = state.means.shape
    extra = _bucket(k) - k
    if not extra:
        return state
    eye = jnp.broadcast_to(jnp.eye(dim, dtype=state.means.dtype), (extra, dim, dim))
    return EMState(jnp.concatenate([state.weights, jnp.zeros(extra, state.weights.dtype)]),
                  jnp.concatenate([state.means, jnp.broadcast_to(state.means[:1], (extra, dim))]),
                  jnp.concatenate([state.covariances, eye]),
                  jnp.concatenate([state.active, jnp.zeros(extra, bool)]))


