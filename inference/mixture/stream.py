"""The mixture's EM by passes over a stream of batches (:func:`fit_mixture_stream`).

For data that do not fit in memory the mixture fit of :mod:`inference.mixture.em`
(Xu (1995), sec. 4-5, eq. 17-22) runs over a *source* of row batches
(:class:`BatchSource`): a numpy array or ``np.memmap`` cut into row blocks (only
one block is read and sent to the device at a time), a zero-argument callable
returning a fresh iterator of arrays, or a re-iterable collection of arrays (EM
reads the data several times, so a one-shot iterator is refused).

:func:`fit_mixture_stream` is :func:`inference.mixture.em.fit_mixture` computed by
passes. The E-step and the M-step's sufficient statistics are sums over
examples (``R^T t(x)`` of the module docstring of :mod:`inference.mixture.em`), so
each EM iteration streams the batches once and adds up every batch's
statistics and objective; the closed-form M-step then runs once on the sums:
the iteration is an engine :class:`~inference.engine.StatisticsAlgorithm`
(:func:`stream_algorithm`) run by :func:`inference.engine.passes.run_passes`, which
reads the batches, keeps the trace and applies the stopping test. All batches
use one fixed shift of the quadratic features (the data's mean,
found by a first pass that also counts and checks the rows). Passes made by a
fit with I iterations: 1 (counts, mean, variance, checks) + I (EM) + 1
(criteria at the final parameters) + one per iteration whose moment-form
covariance would cancel (the exact scatter about the new means, as
``m_step``'s fallback). The result equals the in-memory fit to float rounding
(the sums are grouped differently, and the shift is the float64 mean where the
in-memory fit takes ``jnp.mean``); tested in float64 at 1e-9 (objective and
criteria at 1e-6 where the log-joint itself is ill-conditioned: a tight
component 1000 widths from the data's centre).

Memory: one batch at a time, plus the one being read (the loops wait for the
result of the batch before last, so JAX's asynchronous dispatch cannot queue the
whole source), the first batch (kept for seeding), and the E-step's per-block
arrays; the quadratic features are built per block of a batch and never for the
whole batch. A memmap's pages that were read stay mapped (file-backed page
cache, which the kernel reclaims at will). ``benchmarks/streaming.py`` measures it.

Online learning over the same sources (sec. 6, eq. 25-28) is not here:
:func:`inference.mixture.online_stream.fit_online_stream` runs an online method of
:mod:`inference.mixture.online` over the batches, carrying its state from batch to
batch and pass to pass.

References
----------
L. Xu, "YING-YANG machine: a Bayesian-Kullback scheme for unified learnings and new
results on vector quantization", Proceedings of the International Conference on Neural
Information Processing (ICONIP'95), 1995, sec. 4.1-4.3 (eq. 13-22), 5.2.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference.engine import StatisticsAlgorithm, host, select
from inference.engine.passes import run_passes
from inference.engine.streaming import Pass, batches, check_rows, merge_moments
from inference.mixture.algorithm import EMInfo, MixtureState, initial_states, settled
from inference.mixture.checks import (
    check_end,
    check_options,
    check_reg_covar,
    initial_state,
    scale_from_variances,
)
from inference.mixture.features import feature_width, kind_of, quadratic_features
from inference.mixture.mstep import finish_m_step, moment_form
from inference.mixture.result import MixtureResult, MixtureTrace
from inference.mixture.seeding import distinct_rows
from inference.mixture.starts import best_start, engine_keys, stack_states, start_keys
from inference.mixture.sweep import (
    EMState,
    block_responsibilities,
    block_rows,
    first_argmax,
    log_joint_eta,
)
from ppl_models.validation import (
    MissingKeyError,
    check_nonnegative,
    check_positive_int,
    check_rng_key,
)

__all__ = ["fit_mixture_stream"]


# ---------------------------------------------------------------------------------------
# The streamed EM's statistics, exact pass and update, and the criteria of one batch. Each
# per-batch function takes one batch padded to whole blocks of ``block`` rows and scans
# over its blocks, building the quadratic features of one block at a time (so a batch
# needs no (rows, p) feature array), as ``sweep`` does over the in-memory fit's blocks.


def _blocked(rows, num_valid, block):
    """A padded batch (B, d) as blocks (B / block, block, d) with a validity mask."""
    padded, dim = rows.shape
    valid = (jnp.arange(padded) < num_valid).reshape(-1, block)
    return rows.reshape(-1, block, dim), valid


class StreamParams(NamedTuple):
    """The numbers the streamed EM reads: the features' shift, the number of rows, and
    :class:`inference.mixture.algorithm.Params`' others."""

    shift: jax.Array
    num: jax.Array
    tol: jax.Array
    reg_covar: jax.Array
    min_count: jax.Array
    variance_floor: jax.Array
    weight_offset: jax.Array
    inv_scale: jax.Array


def _parameters(state):
    return EMState(state.weights, state.means, state.covariances, state.active)


def _eta(state, shift, mode, covariance):
    """The program's natural parameters at ``state`` (``inference.mixture.sweep.log_joint_eta``)."""
    x1 = jnp.zeros((1, state.means.shape[1]), state.means.dtype)  # the trace needs a shape only
    return log_joint_eta(x1, _parameters(state), mode, covariance, shift)


def batch_statistics(rng_key, state, data, params, valid, *, mode, covariance, block, prune):
    """E-step and M-step statistics of one batch: ``R^T t(x)`` (k, p) and the summed
    objective (``inference.mixture.sweep.sweep`` on the batch, features built per block,
    so that a batch needs no (rows, p) feature array)."""
    (rows,) = data
    kind = kind_of(covariance)
    eta = _eta(state, params.shift, mode, covariance)
    k, p = eta.shape

    def body(carry, blk):
        stats, total = carry
        xb, valid = blk
        phi = quadratic_features(xb, kind, params.shift)[1]
        resp, labels, value = block_responsibilities(phi, valid, eta, state.active, mode,
                                                      one_hot=False)
        if resp is None:  # hard modes: sum the rows of each component
            block_stats = jax.ops.segment_sum(jnp.where(valid[:, None], phi, 0.0), labels, k)
        else:
            block_stats = resp.T @ phi
        return (stats + block_stats, total + jnp.sum(value)), None

    zero = (jnp.zeros((k, p), eta.dtype), jnp.zeros((), eta.dtype))
    blocks = (rows.reshape(-1, block, rows.shape[1]), valid.reshape(-1, block))
    (stats, total), _ = jax.lax.scan(body, zero, blocks)
    return stats, total


def exact_needed(state, stats, params, *, mode, covariance, block, prune):
    """Whether the moment-form covariances would cancel (``m_step``'s fallback)."""
    return moment_form(stats[0], _parameters(state), params.shift, mode=mode,
                       covariance=covariance)["cancels"]


def batch_exact(rng_key, state, stats, data, params, valid, *, mode, covariance, block,
                prune):
    """The M-step's exact fallback on one batch, with the E-step's parameters and the new
    means of the summed ``stats``.

    ``"nearest"``: sum_n ||x_n - m_{y_n}||^2 over the batch; else the scatter
    sum_n r_ny (x_n - m_y)(x_n - m_y)^T (k, d, d), or its diagonal (k, d)
    (``inference.mixture.sweep.exact_scatter``).
    """
    (rows,) = data
    kind = kind_of(covariance)
    eta = _eta(state, params.shift, mode, covariance)
    means = moment_form(stats[0], _parameters(state), params.shift, mode=mode,
                        covariance=covariance)["means"]
    k, dim = means.shape

    def body(total, blk):
        xb, valid = blk
        phi = quadratic_features(xb, kind, params.shift)[1]
        if mode == "nearest":
            labels = block_responsibilities(phi, valid, eta, state.active, mode,
                                            one_hot=False)[1]
            residual = xb - means[labels]
            return total + jnp.sum(jnp.where(valid, jnp.sum(residual * residual, 1), 0.0)), None
        resp = block_responsibilities(phi, valid, eta, state.active, mode)[0]
        centred = xb[None, :, :] - means[:, None, :]
        if covariance == "full":
            return total + jnp.einsum("nk,kni,knj->kij", resp, centred, centred), None
        return total + jnp.einsum("nk,kni->ki", resp, centred * centred), None

    shape = () if mode == "nearest" else ((k, dim, dim) if covariance == "full" else (k, dim))
    blocks = (rows.reshape(-1, block, dim), valid.reshape(-1, block))
    total, _ = jax.lax.scan(body, jnp.zeros(shape, means.dtype), blocks)
    return total


def update(state, stats, params, *, mode, covariance, block, prune):
    """The M-step from the summed statistics (and the exact pass's sums, used where the
    moment form would cancel), and the stopping test.

    The hard modes stop when an iteration leaves the parameters bitwise unchanged
    (the same labels give the same parameters; a stream keeps no label array).
    """
    (moments, total), exact = stats
    parameters = _parameters(state)
    # The M-step's halves apart (an optimisation barrier), as separate programs round the
    # exact pass: fused, their floats differ in the last digit.
    parts = jax.lax.optimization_barrier(
        moment_form(moments, parameters, params.shift, mode=mode, covariance=covariance))
    cov = jax.lax.cond(parts["cancels"], lambda: exact / parts["norm"], lambda: parts["cov"])
    parts = jax.lax.optimization_barrier(dict(parts, cov=cov))
    new = finish_m_step(parts, parameters, params.reg_covar, params.min_count,
                        params.variance_floor, params.weight_offset, mode=mode,
                        covariance=covariance, prune=prune, inv_scale=params.inv_scale)
    objective = total / params.num
    converged = settled(objective, state.objective, params.tol)
    if mode != "stochastic":  # no label changed <=> the parameters stand still
        same = jnp.all(jnp.stack([jnp.array_equal(a, b)
                                  for a, b in zip(new, parameters, strict=True)]))
        converged = converged | (jnp.isfinite(state.objective) & same)
    info = EMInfo(objective, jnp.sum(new.active).astype(jnp.int32), converged)
    return MixtureState(*new, state.labels, objective), info


_eta_jit = jax.jit(_eta, static_argnames=("mode", "covariance"))


def stream_algorithm(*, mode, covariance, block, prune) -> StatisticsAlgorithm:
    """The streamed EM as the engine's :class:`~inference.engine.StatisticsAlgorithm`."""
    return StatisticsAlgorithm(batch_statistics, update, options=(
        ("mode", mode), ("covariance", covariance), ("block", block), ("prune", prune)),
        name="fit_mixture_stream", second_pass=batch_exact, second_pass_needed=exact_needed,
        vectorized=False)


@functools.partial(jax.jit, static_argnames=("kind", "map_is_nearest", "block"))
def _batch_criteria(rows, num_valid, eta_joint, eta_energy, active, log_weights, means, shift,
                    *, kind, map_is_nearest, block):
    """Sums of one batch for the criteria (``inference.mixture.criteria.block_criteria``).

    Returns (sum log p(x), sum [max_y log p(x, y) - log alpha_{label}], sum of squared
    distances to the nearest mean, counts of the MAP labels (k,)), the MAP labels and
    the nearest-mean labels (padded rows included; the caller trims them).
    """
    k = means.shape[0]

    def body(carry, blk):
        xb, valid = blk
        phi = quadratic_features(xb, kind, shift)[1]
        log_joint = jnp.where(active, phi @ eta_joint.T, -jnp.inf)
        labels, top = first_argmax(log_joint)
        if map_is_nearest:
            nearest = labels
        else:
            spherical = phi if kind == "spherical" else quadratic_features(
                xb, "spherical", shift)[1]
            nearest, _ = first_argmax(jnp.where(active, spherical @ eta_energy.T, -jnp.inf))
        residual = xb - means[nearest]
        sums = (jnp.sum(jnp.where(valid, jax.nn.logsumexp(log_joint, axis=1), 0.0)),
                jnp.sum(jnp.where(valid, top - log_weights[labels], 0.0)),
                jnp.sum(jnp.where(valid, jnp.sum(residual * residual, axis=1), 0.0)),
                jax.ops.segment_sum(valid.astype(means.dtype), labels, k))
        carry = jax.tree.map(jnp.add, carry, sums)
        return carry, (labels.astype(jnp.int32), nearest.astype(jnp.int32))

    zero = (jnp.zeros((), means.dtype),) * 3 + (jnp.zeros(k, means.dtype),)
    sums, (labels, nearest) = jax.lax.scan(body, zero, _blocked(rows, num_valid, block))
    return sums, labels.reshape(-1), nearest.reshape(-1)


# ---------------------------------------------------------------------------------------
# Host side: passes over the source.



def _first_pass(source, k):
    """Count, mean and variance (float64, Chan's pairwise update), checks, first batch."""
    count, mean, m2, first, distinct = 0, None, None, None, None
    for batch in source:
        first = batch if first is None else first
        count, mean, m2 = merge_moments(count, mean, m2, batch)
        if distinct is None or distinct.shape[0] < k:  # at least k distinct rows?
            rows = batch if distinct is None else np.concatenate([distinct, batch])
            distinct = distinct_rows(np.asarray(rows), k)
    return count, mean, m2 / count, first, distinct.shape[0]


def fit_mixture_stream(source, num_components: int, *, mode: str = "stochastic",
                       covariance: str = "full", prune: bool = True, rng_key=None,
                       init: str = "kmeans++", init_means=None, init_weights=None,
                       init_covariances=None, max_iterations: int = 200, tol: float = 1e-7,
                       reg_covar: float | None = None, min_count=None,
                       variance_threshold: float = 1e-6, weight_rule: str = "ml",
                       batch_size=None, return_labels: bool = False, num_restarts: int = 1,
                       progress_bar: bool = False) -> MixtureResult:
    """:func:`inference.mixture.em.fit_mixture` by passes over a source of row batches.

    The same algorithm, arguments and result (module docstring); the differences:

    * ``source`` is anything :class:`BatchSource` accepts except a one-shot
      iterator: the fit makes at least three passes (statistics, one EM iteration,
      criteria), so a one-shot iterator raises ``ValueError`` (write it to a
      ``np.memmap`` first, or pass a callable returning a fresh iterator).
    * Initial means (unless ``init_means``): k-means++ seeding (or, with
      ``init="random"``, random rows plus noise) on the **first batch** only, with
      the key ``fit_mixture`` uses; a source whose first batch is all of the data
      seeds exactly as ``fit_mixture``. The first batch should be representative
      (shuffle the rows when writing the file) and needs at least k distinct rows.
      Initial covariances and the pruning floor use the whole data's variance.
    * The hard modes stop when an iteration leaves the parameters bitwise
      unchanged (``fit_mixture``: when no label changes; the same labels give the
      same parameters, and with no label array kept this is the check a stream
      can afford).
    * ``labels`` is ``None`` unless ``return_labels=True`` (an int32 array with one
      entry per row, collected on the host during the criteria pass: for a large
      memmap that is a large array).

    Parameters
    ----------
    source : array, np.memmap, callable or iterable of arrays (:class:`BatchSource`)
        Rows (num_examples, d), numeric; float64 stays float64 only under
        ``jax.enable_x64`` (as ``fit_mixture``).
    batch_size : int, optional
        Rows per batch for an array source (:class:`BatchSource`).
    return_labels : bool
        Collect the label of every row (see above).
    num_restarts : int
        Starts run side by side, every pass reading each batch once for all of them;
        the fit returned is the one with the lowest final objective (``trace.objective``'s
        last entry: L_stocha for ``"stochastic"``), among those without a collapsed
        component when ``prune=False`` (all of them if every start collapsed), as
        :func:`inference.mixture.em.fit_mixture` chooses. The starts' keys are
        ``fit_mixture``'s: ``rng_key`` itself first (so the default 1 is the single fit),
        then keys split off ``jax.random.fold_in(rng_key, 1)``. More than one needs
        means drawn by ``init`` (not ``init_means``). ``restart_objectives`` of the result
        lists every start's final objective.
    progress_bar : bool
        A tqdm bar over the EM passes (the engine's).
    num_components, mode, covariance, prune, rng_key, init, init_means, init_weights, \
init_covariances, max_iterations, tol, reg_covar, min_count, variance_threshold, weight_rule
        As :func:`inference.mixture.em.fit_mixture`.

    Returns
    -------
    MixtureResult

    Examples
    --------
    >>> import jax, numpy as np
    >>> from ppl_models import mixture
    >>> data = mixture.generate(jax.random.key(0), 200, 3, 2, separation=8.0)
    >>> x = np.asarray(data.x)  # or an np.memmap of a file too large for memory
    >>> fit = fit_mixture_stream(x, 3, rng_key=jax.random.key(1), batch_size=50,
    ...                          return_labels=True)
    >>> fit.num_components, bool(fit.converged), fit.labels.shape
    (3, True, (200,))
    >>> len(set(zip(fit.labels.tolist(), data.labels.tolist())))  # the planted clusters
    3
    """
    check_options(mode, covariance, weight_rule, prune, init)
    k = check_positive_int(num_components, "num_components")
    max_iterations = check_positive_int(max_iterations, "max_iterations")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    if init_means is not None and num_restarts > 1:
        raise ValueError(f"num_restarts={num_restarts} needs means drawn by init; "
                         "init_means gives one start (use num_restarts=1)")
    if reg_covar is not None:
        check_nonnegative(reg_covar, "reg_covar")
    data = batches(source, batch_size)
    if not data.reusable:
        raise ValueError(
            "source is a one-shot iterator, but fit_mixture_stream makes several passes "
            f"(statistics, up to max_iterations={max_iterations} EM passes, criteria); pass a "
            "re-iterable source (an array, np.memmap or list of arrays) or a callable that "
            "returns a fresh iterator, or use fit_online_stream for one pass")
    if init_means is None and rng_key is None:
        raise MissingKeyError("rng_key is required unless init_means is given")
    if rng_key is not None:
        check_rng_key(rng_key)

    # Pass 1: check every batch, count rows, the data's mean and variance, the first batch.
    data.check_finite = True
    num, mean, variance, first, distinct = _first_pass(data, k)
    data.check_finite = False  # checked in the first pass; later passes check shapes only
    try:
        return _fit_passes(data, num, mean, variance, first, distinct, k, mode, covariance,
                           prune, rng_key, init, init_means, init_weights, init_covariances,
                           max_iterations, tol, reg_covar, min_count, variance_threshold,
                           weight_rule, return_labels, num_restarts, progress_bar)
    finally:
        data.check_finite = True


def _fit_passes(data, num, mean, variance, first, distinct, k, mode, covariance, prune,
                rng_key, init, init_means, init_weights, init_covariances, max_iterations, tol,
                reg_covar, min_count, variance_threshold, weight_rule, return_labels,
                num_restarts=1, progress_bar=False):
    """:func:`fit_mixture_stream` after its first pass: the start, EM passes, criteria."""
    dim = mean.shape[0]
    if distinct < k:
        raise ValueError(f"num_components={k} exceeds the {distinct} distinct example(s) in "
                         "source")
    dtype = (jax.dtypes.canonicalize_dtype(first.dtype) if np.issubdtype(first.dtype, np.floating)
             else jnp.result_type(float))
    spread = float(np.asarray(np.mean(variance), dtype))
    if spread == 0.0:
        raise ValueError("source has no spread (every example is the same point): nothing "
                         "to fit")
    if reg_covar is not None:
        check_reg_covar(reg_covar, spread, "source", stacklevel=4)
    if mode == "nearest":
        covariance = "spherical"
    scale = scale_from_variances(variance, covariance, reg_covar, variance_threshold)
    min_count = (dim + 1 if covariance == "full" else 2) if min_count is None else min_count
    shift = jnp.asarray(mean, dtype)
    if (init_means is None and init == "kmeans++"
            and distinct_rows(np.asarray(first), k).shape[0] < k):
        raise ValueError(f"the first batch of source has fewer than num_components={k} "
                         "distinct rows to seed from; pass init_means or larger batches")
    seed_x = jnp.asarray(np.asarray(first, dtype))
    starts = [initial_state(seed_x, k, spread, covariance, init, key, init_means, init_weights,
                            init_covariances, weight_rule, reg=scale.reg)
              for key in start_keys(rng_key, num_restarts)]
    weight_offset = starts[0][1]
    state = starts[0][0] if num_restarts == 1 else stack_states([start for start, _ in starts])
    kind = kind_of(covariance)
    block = block_rows(first.shape[0], feature_width(kind, dim))
    params = StreamParams(shift, *(jnp.asarray(value, dtype) for value in (
        num, tol, scale.reg, min_count, scale.floor, weight_offset, scale.inv_scale)))
    states = initial_states(state, labels=1)
    fitted = run_passes(stream_algorithm(mode=mode, covariance=covariance, block=block,
                                         prune=prune),
                        states, data, params, keys=engine_keys(num_restarts),
                        max_iterations=max_iterations, tol=tol, dtype=dtype, block=block,
                        progress_bar=progress_bar)
    best, restart_objectives = 0, None
    if num_restarts > 1:
        best = best_start(fitted.state, scale, mode=mode, prune=prune)
        restart_objectives = fitted.state.objective
    final, trace, iterations, done = select(fitted, best)
    done = bool(done)
    state = EMState(final.weights, final.means, final.covariances, final.active)
    passes = Pass(data, dtype, first.shape[0], block=block)

    # The criteria at the final parameters, over one more pass.
    kp = state.means.shape[0]
    active = state.active
    equal = jnp.where(active, 1.0, 0.0).astype(dtype) / jnp.maximum(jnp.sum(active), 1)
    eye = jnp.broadcast_to(jnp.eye(dim, dtype=dtype), (kp, dim, dim))
    eta_joint = _eta_jit(state, shift, mode="stochastic", covariance=covariance)
    eta_energy = _eta_jit(EMState(equal, state.means, eye, active), shift, mode="nearest",
                          covariance="spherical")
    log_weights = jnp.log(jnp.where(state.weights > 0, state.weights, 1.0))
    sums, labels_parts, rows_seen = None, [], 0
    for rows, count in passes:
        batch_sums, labels, nearest = _batch_criteria(
            rows, count, eta_joint, eta_energy, active, log_weights, state.means, shift,
            kind=kind, map_is_nearest=mode == "nearest", block=block)
        sums = batch_sums if sums is None else jax.tree.map(jnp.add, sums, batch_sums)
        passes.done(sums)
        if return_labels:
            labels_parts.append(np.asarray(nearest if mode == "nearest" else labels)[:count])
        rows_seen += count
    check_rows(rows_seen, num, "criteria")
    sum_log_px, sum_top, sum_squared, label_counts = sums
    hard = label_counts / num
    l_map = (-sum_top / num
             - jnp.sum(jnp.where(hard > 0, hard * jnp.log(jnp.where(hard > 0, hard, 1.0)), 0.0)))
    e_mse = sum_squared / num
    b0 = 0.5 * dim * math.log(2 * math.pi)
    log_k = jnp.log(jnp.maximum(jnp.sum(active), 1).astype(dtype))
    values = {"L_stocha": -sum_log_px / num, "L_map": l_map,
              "L_NN": 0.5 * dim + log_k + 0.5 * dim * jnp.log(e_mse / dim) + b0,
              "J": log_k + 0.5 * dim * jnp.log(e_mse)}
    values = {name: float(value) for name, value in values.items()}

    active = np.asarray(active)
    keep, collapsed = check_end("fit_mixture_stream", "source", state, active, bool(done), k,
                                 num, dim, mode=mode, prune=prune, min_count=min_count,
                                 variance_threshold=variance_threshold, spread=spread,
                                 reg_covar=reg_covar, max_iterations=max_iterations,
                                 stacklevel=4, scale=scale)
    labels = None
    if return_labels:
        rank = np.asarray(np.cumsum(active) - 1, np.int32)
        labels = jnp.asarray(rank[np.concatenate(labels_parts)])
    return MixtureResult(
        weights=host.take(state.weights, keep), means=host.take(state.means, keep),
        covariances=host.take(state.covariances, keep), num_components=int(keep.size),
        labels=labels,
        L_stocha=values["L_stocha"], L_map=values["L_map"], L_NN=values["L_NN"], J=values["J"],
        trace=MixtureTrace(trace.objective, trace.num_components),
        num_iterations=iterations,
        converged=bool(done), num_start=k, mode=mode, covariance=covariance,
        collapsed=tuple(int(np.searchsorted(keep, c)) for c in collapsed),
        restart_objectives=restart_objectives)
