"""The E-step of the mixture fit: blocked quadratic features and the blocked sweep
that accumulates the responsibilities' statistics."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference.mixture.features import (
    feature_width,
    kind_of,
    log_joint_parameters,
    quadratic_features,
    trace_components,
)


def first_argmax(values):
    """Index (int32) and value of the first largest entry of every row of ``values`` (N, k).

    ``jnp.argmax``'s (value, index) reduction is several times slower on XLA's CPU
    backend than a max followed by a min over the indices that attain it.
    """
    k = values.shape[1]
    top = jnp.max(values, axis=1, keepdims=True)
    index = jnp.min(jnp.where(values == top, jnp.arange(k, dtype=jnp.int32), k - 1), axis=1)
    return index, top[:, 0]


class EMState(NamedTuple):
    """The mixture fit's parameters, padded to the k components at the start; ``active``
    marks the components not pruned."""

    weights: jax.Array
    means: jax.Array
    covariances: jax.Array
    active: jax.Array


#: Feature entries (rows x p) per block of the E-step sweep (:func:`sweep`), about.
_BLOCK_ENTRIES = 1 << 19


def block_rows(num, width):
    """Rows per block of the sweep over ``num`` examples with ``width`` features each.

    The largest power of two with at most ``_BLOCK_ENTRIES`` feature entries, between
    256 and 16,384 rows (and at most ``num``). A block's features and its (rows, k)
    log-joint stay in cache between the E-step product and the M-step product that
    reuses them, while the block is large enough for XLA to split its products over
    the cores. Measured on 2 cores (N = 200,000, d = 16, k = 32, 20 iterations):
    full covariances (width 153) 0.76 s at 2,048 rows against 1.06 s at 1,024 and
    1.3 s at 4,096 (float32); k-means (width 18) 0.125 s at 16,384 rows against
    0.18 s at 1,024 (float32), 0.19 s against 0.39 s (float64).
    """
    rows = 1 << max(8, min(14, (_BLOCK_ENTRIES // max(width, 1)).bit_length() - 1))
    return max(1, min(rows, num))


#: Pad the rows of an in-memory x on one device to a bucket of a geometric ladder
#: (:func:`bucket_rows`: sizes m 2^e, m in {4, 5, 6, 7}, steps of at most 1.25x) and pass
#: the number of examples as a traced value, so that one set of compiled programs (the
#: k-means++ / k-means start, the EM loop, the criteria) serves every number of examples
#: in a bucket: :func:`inference.mixture.em.fit_mixture` on 150 and on 151 rows, or the
#: folds of a cross-validation and the full data, compile once
#: (``benchmarks/compile_sizes.py``); :func:`inference.mixture.criteria.criteria` too.
#: The padded rows are masked, so the fit is the same up to float rounding (sums over
#: more rows, in another order). Off by default: that rounding moves the stopping
#: iteration of slowly converging float32 fits (tol 1e-7 sits at the last digit), for
#: which the golden recordings (``tests/test_golden.py``) would be recorded again.
BUCKET_ROWS = False


def bucket_rows(num):
    """The bucket of ``num`` (>= 1): the smallest size m 2^e >= num with m in {4, 5, 6, 7}
    (at least 8).

    A geometric ladder of four steps per octave (..., 96, 112, 128, 160, 192, 224, 256,
    320, ...): consecutive sizes differ by at most 1.25x, so the padding costs less
    than a quarter of the rows (about a ninth on average), and a fit compiles one
    program per bucket instead of one per number of examples.
    """
    return ladder(max(int(num), 8))


def ladder(num):
    """The smallest m 2^e >= num with m in {4, 5, 6, 7}, or num itself up to 8."""
    shift = max(int(num).bit_length() - 3, 0)
    return -(-int(num) >> shift) << shift


def pad_rows(x, rows):
    """x (num, d) with zero rows appended up to ``rows``, as a jax array, padded on the host
    (:mod:`inference.engine.host`: ``jnp.pad`` outside ``jit`` compiles per shape)."""
    array = np.asarray(x)
    padded = np.zeros((rows, array.shape[1]), array.dtype)
    padded[:array.shape[0]] = array
    return jnp.asarray(padded, dtype=x.dtype)


class BlockFeatures(NamedTuple):
    """The data's quadratic features, padded to whole blocks (built once per fit)."""

    shift: jax.Array  # (d,) the data's centre
    blocks: jax.Array  # (num_blocks, rows, p) t(x - shift), x padded with zeros (block_rows)
    valid: jax.Array  # (num_blocks, rows) False on padded rows


def block_features(x, kind, shift=None, valid=None, block=None):
    """:func:`quadratic_features` of x cut into blocks of :func:`block_rows` rows.

    ``shift`` defaults to the mean of x; ``valid`` (rows,) marks rows that are
    padding already (one device's rows of a sharded fit) as False. Rows added to
    fill the last block are masked too. ``block`` (static) overrides the rows per block.
    """
    num, dim = x.shape
    block = block_rows(num, feature_width(kind, dim)) if block is None else block
    num_blocks = -(-num // block)
    extra = num_blocks * block - num
    shift = jnp.mean(x, axis=0) if shift is None else shift
    if kind == "full":
        # Block by block: a block's d (d + 1) / 2 products per row stay in cache (2x
        # faster than over the whole array at N = 200,000, d = 16).
        rows = jnp.pad(x, ((0, extra), (0, 0))).reshape(num_blocks, block, -1)
        phi = jax.lax.map(lambda rows: quadratic_features(rows, kind, shift)[1], rows)
    else:
        # Narrow features in one fused pass over x, then padded: a loop over blocks of
        # a padded copy of x made inside the same jit costs XLA a copy of that array
        # per block (1.6-3x slower at N = 200,000, d = 16).
        phi = jnp.pad(quadratic_features(x, kind, shift)[1], ((0, extra), (0, 0)))
        phi = phi.reshape(num_blocks, block, -1)
    valid = jnp.ones(num, bool) if valid is None else valid
    return BlockFeatures(shift, phi, jnp.pad(valid, (0, extra)).reshape(num_blocks, block))


def log_joint_eta(x, state, mode, covariance, shift):
    """The program's natural parameters eta (k, p) at the current parameters.

    ``"nearest"`` reads the noiseless program (minus the energies ||x - m_y||^2).
    """
    limit = mode == "nearest"
    covariance = "spherical" if limit else covariance
    k = state.means.shape[0]
    trace = trace_components(x, state.weights, state.means, state.covariances, covariance,
                              None, limit)
    eta = log_joint_parameters(trace, k, kind_of(covariance), shift, limit)
    if eta is None:  # the mixture program's sites always have the per-component layout
        raise NotImplementedError("the traced mixture program has an unexpected site layout")
    return eta.astype(x.dtype)


def block_responsibilities(phi, valid, eta, active, mode, one_hot=True):
    """E-step on one block: responsibilities (B, k), labels (B,) and per-row objective (B,).

    The log-joint of every row and component is ``phi @ eta^T``. ``"stochastic"``:
    the posterior (log-sum-exp); ``"map"``: 0/1 on the most probable component;
    ``"nearest"``: 0/1 on the nearest mean (the noiseless program's largest value).
    Padded rows get zero responsibility and objective. The hard modes return
    ``None`` for the 0/1 responsibilities unless ``one_hot``.
    """
    log_joint = jnp.where(active, phi @ eta.T, -jnp.inf)
    k = eta.shape[0]
    if mode == "stochastic":
        top = jnp.max(log_joint, axis=1, keepdims=True)
        weights = jnp.exp(log_joint - top)
        total = jnp.sum(weights, axis=1, keepdims=True)
        resp = weights * (valid[:, None] / total)
        value = -(jnp.log(total[:, 0]) + top[:, 0])
        labels = None
    else:  # the first most probable component, as argmax (whose XLA CPU reduction is slow)
        labels, top = first_argmax(log_joint)
        resp = None
        if one_hot:
            resp = ((labels[:, None] == jnp.arange(k)) & valid[:, None]).astype(phi.dtype)
        value = -top
    return resp, labels, jnp.where(valid, value, 0.0)


def sweep(features, eta, active, mode, num):
    """E-step and the M-step's statistics in one pass over blocks of examples.

    Returns ``R^T t(x)`` (k, p) (counts, sums and second moments of every
    component), the objective (mean over examples: minus the log-likelihood, the
    hard free energy or E_MSE) and, for the hard modes, the labels (num,).
    """
    stats, total, labels = sweep_sums(features, eta, active, mode)
    return stats, total / num, None if labels is None else labels[:num]


def sweep_sums(features, eta, active, mode):
    """:func:`sweep`'s sums: ``R^T t(x)`` (k, p), the objective summed over the valid
    examples, and for the hard modes the labels of every row of the blocks (padding
    included; None for ``"stochastic"``)."""
    k, p = eta.shape

    def body(carry, block):
        stats, total = carry
        phi, valid = block
        resp, labels, value = block_responsibilities(phi, valid, eta, active, mode,
                                                      one_hot=False)
        if resp is None:  # hard modes: sum the rows of each component (cheaper than R^T phi)
            block_stats = jax.ops.segment_sum(jnp.where(valid[:, None], phi, 0.0), labels, k)
        else:
            block_stats = resp.T @ phi
        carry = (stats + block_stats, total + jnp.sum(value))
        return carry, (None if labels is None else labels.astype(jnp.int32))

    zero = (jnp.zeros((k, p), eta.dtype), jnp.zeros((), eta.dtype))
    (stats, total), labels = jax.lax.scan(body, zero, (features.blocks, features.valid))
    return stats, total, None if labels is None else labels.reshape(-1)


def cancellation_limit(dtype):
    """Largest ratio E_y[z_i^2] / Var_y(z_i) at which the M-step trusts the moment form.

    z is the example about the data's centre; the ratio is per component y and
    coordinate i. Var = E[z z^T] - E[z] E[z]^T loses log2(ratio) bits to
    cancellation; above eps^(-1/3) (203 in float32, 1.7e5 in float64: a third of
    the digits) :func:`m_step` recomputes the scatter about the new means.
    """
    return float(jnp.finfo(dtype).eps) ** (-1.0 / 3.0)


def exact_scatter(x, features, eta, active, mode, means, covariance):
    """sum_n r_ny (x_n - m_y)(x_n - m_y)^T (k, d, d), or its diagonal (k, d), centred exactly.

    The responsibilities are recomputed block by block from ``eta`` (the E-step's
    parameters), so that the centred (k, block, d) array stays small. The fallback of
    :func:`m_step` where the moment form would cancel (a component far from the
    data's centre relative to its width). In a sharded fit, x and ``features`` are
    one device's rows (padding masked by ``features.valid``): its part of the sum.
    """
    num_blocks, block, _ = features.blocks.shape
    dim = x.shape[1]
    rows = jnp.pad(x, ((0, num_blocks * block - x.shape[0]), (0, 0)))
    rows = rows.reshape(num_blocks, block, dim)

    def scatter(total, blk):
        xb, phi, valid = blk
        resp = block_responsibilities(phi, valid, eta, active, mode)[0]
        centred = xb[None, :, :] - means[:, None, :]
        if covariance == "full":
            return total + jnp.einsum("nk,kni,knj->kij", resp, centred, centred), None
        return total + jnp.einsum("nk,kni->ki", resp, centred * centred), None

    shape = (means.shape[0], dim, dim) if covariance == "full" else means.shape
    total, _ = jax.lax.scan(scatter, jnp.zeros(shape, x.dtype),
                            (rows, features.blocks, features.valid))
    return total


