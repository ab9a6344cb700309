"""MCVQ fitted by passes over batches of rows: :func:`fit_mcvq_stream`.

The streamed counterpart of :func:`inference.mcvq.em.fit_mcvq` (the variational EM of
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003, sec. 3) for data too large for
memory. The rows come from anything
:class:`inference.engine.streaming.BatchSource` accepts (a numpy array or ``np.memmap``
cut into row blocks, a callable returning a fresh iterator of arrays, a list of arrays),
with the missing-value mask streamed beside them (:class:`inference.mcvq.sources.MaskedSource`:
``(x, mask)`` pairs or a second source cut like the first); a one-shot iterator is
refused, since the fit reads the data several times. Batches are checked as they come,
with errors naming the batch index.

Why no per-example state is needed: every iteration of the in-memory fit recomputes
the per-example posteriors m^c in closed form (the E-step) from the current g, mu,
sigma, and uses them only through the sums it forms, the statistics
sum_c m^c [o, o x, o x^2] (o the observed indicator, x centred on the observed column
means) and the KL term sum_c KL(m^c || b). So one iteration is one pass: every batch is
E-stepped under the current parameters (jitted, vmapped over the restarts) and adds its
statistics and KL term (:func:`stream_statistics`); then F_T follows from those sums,
and the g-step and M-step from them give the next pass's parameters
(:func:`stream_update`). The two form :data:`STREAM_ALGORITHM`, an
:class:`inference.engine.loop.StatisticsAlgorithm` driven by
:func:`inference.engine.passes.run_passes` (convergence test at a constant temperature,
trace cut at ``num_iterations``, restarts side by side).

Passes over the data: one for the checks, the row count and the observed column means
(the shift of the centred moments); one for the column variances and the rows the start
picks (the start of ``inference.mcvq.em.init``, drawn from the same key, so the two fits
start alike); one for the start's E-step; one per iteration; and one more for m when
``return_m=True``. The result equals ``fit_mcvq``'s (tested in float64 in
``tests/test_streaming_fits.py``); the differences (m only on request, no devices, mesh
or checkpoints) are listed in :func:`fit_mcvq_stream`.

Memory: one batch at a time on the device plus the one being read
(:class:`inference.engine.streaming.Pass`), the batch's E-step arrays, and sums whose size
does not grow with the data.
"""

from __future__ import annotations

import functools
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import xlogy

from inference.engine.loop import StatisticsAlgorithm, select
from inference.engine.passes import run_passes
from inference.engine.streaming import (
    Pass,
    check_rows,
    dtype_of,
)
from inference.mcvq import core
from inference.mcvq.core import e_step, g_step, m_step, natural_parameters, statistics
from inference.mcvq.result import MCVQResult, MCVQTrace
from inference.mcvq.sources import MaskedSource, Packed
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import MissingKeyError, check_positive, check_positive_int

# ---------------------------------------------------------------------------------------
# MCVQ (Ross and Zemel (2003), sec. 3): sources with masks.


def _unpack(packed, shift):
    """The (rows, 3 D) moments [o, o xc, o xc^2] (``inference.mcvq.em._moments`` with a fixed
    shift, the observed mean of all the data)."""
    dim = packed.shape[1] // 2
    x, obs = packed[:, :dim], packed[:, dim:]
    centred = obs * (x - shift)
    return jnp.concatenate([obs, centred, centred * centred], axis=1)


@jax.jit
def _mcvq_batch(packed, num_valid, shift, natural, g, b):
    """E-step of one padded batch under every restart's (natural, g): the statistics
    (restarts, 3, D, K, J) and the KL term sum_c KL(m^c || b) over the valid rows."""
    moments = _unpack(packed, shift)
    valid = (jnp.arange(packed.shape[0]) < num_valid)[:, None, None]

    def one(natural, g):
        m = e_step(moments, natural, g, b)
        kl = jnp.sum(jnp.where(valid, xlogy(m, m) - xlogy(m, b), 0.0))
        return statistics(moments, m), kl

    return jax.vmap(one)(natural, g)


@jax.jit
def _mcvq_states(packed, shift, natural, g, b):
    """m of one padded batch under one start's parameters (the E-step)."""
    return e_step(_unpack(packed, shift), natural, g, b)


def _mcvq_update(stats, mu, sigma, shift, a, temperature, floor):
    """g-step and M-step from the statistics (``inference.mcvq.em.step``) of one start."""
    g = g_step(stats, natural_parameters(mu, sigma, shift), a, temperature)
    mu, sigma = m_step(stats, mu, sigma, shift, floor)
    return g, mu, sigma


def _mcvq_energy(stats, natural, g, kl_m, a, temperature):
    """F_T from the statistics and the summed KL of m (``inference.mcvq.em._fast_free_energy``)."""
    expected = jnp.sum(stats * natural, axis=(0, 3))
    return kl_m + temperature * jnp.sum(xlogy(g, g) - xlogy(g, a)) + jnp.sum(g * expected)


class StreamState(NamedTuple):
    """One start of the streamed fit: the parameters of the last iteration with the
    statistics and KL of their E-step (g, mu, sigma, stats, kl), the parameters the next
    pass's E-step uses (the g-step and M-step from those statistics at the next
    temperature), the iteration and the last F_T."""

    g: jax.Array
    mu: jax.Array
    sigma: jax.Array
    stats: jax.Array
    kl: jax.Array
    next_g: jax.Array
    next_mu: jax.Array
    next_sigma: jax.Array
    iteration: jax.Array
    previous: jax.Array


class StreamInfo(NamedTuple):
    """One pass: F_T (``objective``), its temperature, the rows read and convergence."""

    objective: jax.Array
    temperature: jax.Array
    rows: jax.Array
    converged: jax.Array


def stream_statistics(rng_key, state: StreamState, data, params, valid):
    """The E-step of one padded batch under the state's next parameters: its statistics
    sum_c m^c [o, o xc, o xc^2], KL(m^c || b) and row count over the ``valid`` rows."""
    del rng_key
    (packed,) = data
    shift, a, b = params[:3]
    moments = _unpack(packed, shift)
    m = e_step(moments, natural_parameters(state.next_mu, state.next_sigma, shift), state.next_g, b)
    kl = jnp.sum(jnp.where(valid[:, None, None], xlogy(m, m) - xlogy(m, b), 0.0))
    return statistics(moments, m), kl, jnp.sum(valid.astype(jnp.int32))


def stream_update(state: StreamState, stats, params):
    """F_T of the pass (``inference.mcvq.em.engine_step``'s convergence test), and the
    parameters of the next pass from its statistics."""
    shift, a, b, temperatures, floor, tol = params
    stats, kl, rows = stats
    it = state.iteration
    temperature = temperatures[it]
    natural = natural_parameters(state.next_mu, state.next_sigma, shift)
    energy = _mcvq_energy(stats, natural, state.next_g, kl, a, temperature)
    same = (it > 0) & (temperature == temperatures[jnp.maximum(it - 1, 0)])
    change = jnp.abs(state.previous - energy) / jnp.maximum(jnp.abs(energy), 1.0)
    following = temperatures[jnp.minimum(it + 1, temperatures.shape[0] - 1)]
    nxt = _mcvq_update(stats, state.next_mu, state.next_sigma, shift, a, following, floor)
    return (StreamState(state.next_g, state.next_mu, state.next_sigma, stats, kl, *nxt, it + 1,
                        energy),
            StreamInfo(energy, temperature, rows, same & (change <= tol)))


#: The streamed variational EM as an engine statistics + update algorithm.
STREAM_ALGORITHM = StatisticsAlgorithm(stream_statistics, stream_update,
                                       name="fit_mcvq_stream")


@jax.jit
def _stream_starts(g, mu, sigma, stats, kl, shift, a, temperature, floor):
    """The streamed fit's start states (stacked): the start, its E-step's sums and the
    parameters of the first pass."""
    def one(g, mu, sigma, stats, kl):
        nxt = _mcvq_update(stats, mu, sigma, shift, a, temperature, floor)
        return StreamState(g, mu, sigma, stats, kl, *nxt, jnp.zeros((), jnp.int32),
                           jnp.asarray(jnp.inf, g.dtype))

    return jax.vmap(one)(g, mu, sigma, stats, kl)


@jax.jit
def _natural_of(mu, sigma, shift):
    """The natural parameters of every start (``inference.mcvq.em._natural``, vmapped)."""
    return jax.vmap(natural_parameters, (0, 0, None))(mu, sigma, shift)


@jax.jit
def _stream_finals(states, shift, a, temperature):
    """F_T of every start's last parameters at ``temperature``."""
    def one(state):
        return _mcvq_energy(state.stats, natural_parameters(state.mu, state.sigma, shift), state.g,
                            state.kl, a, temperature)

    return jax.vmap(one)(states)


@functools.partial(jax.jit, static_argnames=("num_vqs", "num_states"))
def _mcvq_start(key, picked, std, a, *, num_vqs, num_states):
    """``inference.mcvq.em._init``'s mu, sigma and g from the same uniform draw: ``picked``
    (K, J, D) are the chosen rows with missing entries filled by the column mean,
    ``std`` (D,) the floored column standard deviation."""
    dim = std.shape[0]
    dtype = std.dtype
    sizes = (num_vqs * num_states, dim * num_vqs * num_states, dim * num_vqs)
    tiny = jnp.finfo(dtype).tiny
    u = jax.random.uniform(key, (sum(sizes),), dtype, minval=tiny, maxval=1.0 - 1e-7)
    _, u_mu, u_g = jnp.split(u, np.cumsum(sizes)[:-1])
    mu = jnp.moveaxis(picked, -1, 0)  # (D, K, J)
    mu = mu + 0.1 * std[:, None, None] * jax.scipy.special.ndtri(u_mu).reshape(mu.shape)
    sigma = jnp.broadcast_to(std[:, None, None], mu.shape)
    gumbel = -jnp.log(-jnp.log(u_g.reshape(a.shape)))
    part = jax.nn.one_hot(jnp.argmax(jnp.log(a) + gumbel, axis=-1), num_vqs, dtype=dtype)
    g = a * (0.9 * part + 0.1 / num_vqs)
    return g / jnp.sum(g, axis=-1, keepdims=True), mu, sigma


@functools.partial(jax.jit, static_argnames=("num_vqs", "num_states", "num"))
def _mcvq_rows(key, dtype_probe, *, num_vqs, num_states, num):
    """The example indices (K, J) ``inference.mcvq.em._init`` picks from ``num`` rows."""
    dim = dtype_probe.shape[0]
    sizes = (num_vqs * num_states, dim * num_vqs * num_states, dim * num_vqs)
    tiny = jnp.finfo(dtype_probe.dtype).tiny
    u = jax.random.uniform(key, (sum(sizes),), dtype_probe.dtype, minval=tiny,
                           maxval=1.0 - 1e-7)
    u_rows = u[:sizes[0]]
    return jnp.minimum((u_rows * num).astype(jnp.int32), num - 1).reshape(num_vqs, num_states)


def fit_mcvq_stream(source, num_vqs: int, num_states: int, *, mask=None, rng_key=None,
                    temperature_schedule=None, max_iterations: int = 100,
                    initial_temperature: float | None = None, variance_floor: float = 1e-3,
                    tol: float = 1e-6, a=None, b=None, num_restarts: int = 1, batch_size=None,
                    return_m: bool = False, progress_bar: bool = False):
    """:func:`inference.mcvq.em.fit_mcvq` by passes over a source of row batches.

    Design (module docstring): the in-memory fit's per-example state m^c is the
    closed-form E-step of the current parameters, kept only for its sums, so no
    per-example state is kept here. Each iteration is one pass: ``_step``'s g-step
    and M-step from the statistics of the last pass, then the E-step of every batch
    under the new parameters (jitted, vmapped over the batch's examples and over
    the restarts) adding the batch's statistics sum_c m^c [o, o xc, o xc^2] and
    KL(m^c || b); F_T follows from those sums. The result equals ``fit_mcvq``'s
    (same start, same iterations, same stopping; tested in float64 to 1e-9).

    Passes: 1 (checks, counts, observed column means: the shift of the centred
    moments), 1 (column variances, the rows the start picks), 1 (the E-step of
    the start), one per iteration, and one more with ``return_m``.

    The start is ``fit_mcvq``'s (``inference.mcvq.em.init``) from the whole data:
    its column statistics come from the first two passes and the examples it picks
    (by index, from the same random draw) are gathered in the second.

    Differences from ``fit_mcvq``: ``m`` is ``None`` unless ``return_m=True``
    (an (N, K, J) array on the host, filled by one more pass: the E-step of the
    kept start, which is the ``m`` ``fit_mcvq`` returns); all restarts run side by
    side on every batch (``restart_batch_size`` does not apply); no devices, mesh
    or checkpoints. A one-shot iterator cannot be used (several passes).

    Parameters
    ----------
    source : array, np.memmap, callable or iterable (:class:`BatchSource`)
        Rows (N, D). Items may be arrays (every entry observed, all finite) or
        ``(x_batch, mask_batch)`` pairs (a list of pairs, or a callable returning
        an iterator of pairs): the mask streams with its batch, and x may hold
        anything (NaN included) where the mask is False.
    mask : array, np.memmap, callable or iterable, optional
        Instead of pairs: a second source cut like ``source`` (an array or memmap of
        x's shape, or batches matching x's row for row), True where observed.
    num_vqs, num_states, rng_key, temperature_schedule, max_iterations, \
initial_temperature, variance_floor, tol, a, b, num_restarts
        As :func:`inference.mcvq.em.fit_mcvq` (the default ``initial_temperature`` is
        max(N - 1, 1) with N counted by the first pass).
    batch_size : int, optional
        Rows per batch (:class:`inference.mixture.stream.BatchSource`).
    return_m : bool
        Compute m of every example (see above).
    progress_bar : bool
        A tqdm bar over the passes of the iterations (the engine's).

    Returns
    -------
    inference.mcvq.em.MCVQResult

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpy as np
    >>> from ppl_models import mcvq
    >>> from inference.mcvq.core import reconstruct
    >>> data = mcvq.generate(jax.random.key(2), num_examples=60, dim=9, num_vqs=3,
    ...                      num_states=3)
    >>> x = np.asarray(data.x)  # or an np.memmap, a list of (x, mask) batches, a callable
    >>> result = fit_mcvq_stream(x, 3, 4, rng_key=jax.random.key(10), max_iterations=80,
    ...                          batch_size=20, return_m=True)
    >>> bool(result.converged), result.g.shape, result.m.shape
    (True, (9, 3), (60, 3, 4))
    >>> x_hat = reconstruct(result.g, result.m, result.mu)  # error below the noise sd 0.3
    >>> bool(jnp.sqrt(jnp.mean((x_hat - x) ** 2)) < 0.3)
    True
    """
    num_vqs = check_positive_int(num_vqs, "num_vqs")
    num_states = check_positive_int(num_states, "num_states")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    if rng_key is None:
        raise MissingKeyError("fit_mcvq_stream needs an explicit rng_key (e.g. jax.random.key(0))")
    check_positive(variance_floor, "variance_floor")
    check_positive(tol, "tol") if tol else None
    data = MaskedSource(source, mask, batch_size)
    if not data.reusable:
        raise ValueError(
            "source (or mask) is a one-shot iterator, but fit_mcvq_stream makes several passes "
            "(statistics, start, one per iteration); pass a re-iterable source (an array, "
            "np.memmap or list of batches) or a callable that returns a fresh iterator")

    # Pass 1: checks, counts and the observed column sums.
    num, obs_count, obs_sum, first = 0, None, None, None
    for index, x, obs in data:
        obs = np.ones(x.shape, bool) if obs is None else obs
        empty = np.flatnonzero(~obs.any(axis=1))
        if empty.size:
            raise ValueError(f"mask leaves example(s) {(empty[:10] + num).tolist()} (rows of "
                             f"source; batch {index}) without any observed entry; drop them")
        if first is None:
            first = x
            obs_count = np.zeros(x.shape[1])
            obs_sum = np.zeros(x.shape[1])
        obs_count += obs.sum(axis=0)
        obs_sum += np.where(obs, x, 0).astype(np.float64).sum(axis=0)
        num += x.shape[0]
    empty_cols = np.flatnonzero(obs_count == 0)
    if empty_cols.size:
        raise ValueError(f"mask leaves dimension(s) {empty_cols[:10].tolist()} (columns of "
                         "source) without any observed entry; drop them")
    dtype = dtype_of(first)
    dim = first.shape[1]
    col_mean = obs_sum / obs_count
    temperatures, num_iterations = core.schedule(temperature_schedule, max_iterations,
                                                     initial_temperature, num)
    a, b = core.priors(a, b, dim, num_vqs, num_states, dtype)
    keys = rng_key[None] if num_restarts == 1 else jax.random.split(rng_key, num_restarts)

    # Pass 2: column variances and the rows picked by the start.
    picks = np.stack([np.asarray(_mcvq_rows(key, jnp.zeros(dim, dtype), num_vqs=num_vqs,
                                            num_states=num_states, num=num)) for key in keys])
    picked = np.zeros((*picks.shape, dim))
    obs_m2, offset = np.zeros(dim), 0
    for _, x, obs in data:
        obs = np.ones(x.shape, bool) if obs is None else obs
        centred = np.where(obs, np.asarray(x, np.float64) - col_mean, 0.0)
        obs_m2 += (centred * centred).sum(axis=0)
        here = (picks >= offset) & (picks < offset + x.shape[0])
        if here.any():
            local = picks[here] - offset
            picked[here] = np.where(obs[local], x[local], col_mean)
        offset += x.shape[0]
    check_rows(offset, num, "start")
    variance = obs_m2 / obs_count
    spread = float(np.mean(variance))
    floor = variance_floor * (spread if spread > 0 else 1.0)
    std = jnp.asarray(np.sqrt(np.maximum(variance, floor)), dtype)
    shift = jnp.asarray(col_mean, dtype)
    starts = [_mcvq_start(key, jnp.asarray(p, dtype), std, a, num_vqs=num_vqs,
                          num_states=num_states) for key, p in zip(keys, picked, strict=True)]
    g, mu, sigma = (jnp.stack(parts) for parts in zip(*starts, strict=True))
    natural = jax.vmap(core.natural_parameters, (0, 0, None))(mu, sigma, shift)

    passes = Pass(Packed(data), dtype, first.shape[0], block=first.shape[0])

    def e_pass(natural, g, what):
        stats = kl = None
        rows_seen = 0
        for packed, count in passes:
            s, k = _mcvq_batch(packed, count, shift, natural, g, b)
            stats, kl = (s, k) if stats is None else (stats + s, kl + k)
            passes.done(kl)
            rows_seen += count
        check_rows(rows_seen, num, what)
        return stats, kl

    # Pass 3: the start's E-step (its statistics); then one pass per iteration.
    stats, kl_m = e_pass(natural, g, "start E-step")
    floor_d = jnp.asarray(floor, dtype)
    temps = jnp.asarray(temperatures, dtype)
    params = (shift, a, b, temps, floor_d, jnp.asarray(tol, dtype))
    starts = _stream_starts(g, mu, sigma, stats, kl_m, shift, a, temps[0], floor_d)
    runs = run_passes(STREAM_ALGORITHM, starts, Packed(data), params, keys=keys,
                      max_iterations=num_iterations, tol=tol, dtype=dtype,
                      progress_bar=progress_bar)
    for count, rows in zip(np.asarray(runs.num_iterations), np.asarray(runs.trace.rows),
                           strict=True):
        for it in range(int(count)):
            check_rows(int(rows[it]), num, f"iteration {it + 1}")
    finals = _stream_finals(runs.state, shift, a, temps[num_iterations - 1])
    best = int(jnp.argmin(jnp.where(jnp.isnan(finals), jnp.inf, finals)))
    state, trace, it, converged = select(runs, best)
    if not bool(np.all(np.isfinite(np.asarray(trace.objective)))):  # host: length varies
        warnings.warn("fit_mcvq_stream: the free energy became non-finite; check the data scale "
                      "and variance_floor", NumericalWarning, stacklevel=2)
    if not converged:
        warnings.warn(f"fit_mcvq_stream: not converged after {it} iterations (tol={tol}); raise "
                      "max_iterations or lengthen the schedule at T = 1",
                      ConvergenceWarning, stacklevel=2)
    m = None
    if return_m:
        natural = _natural_of(runs.state.mu, runs.state.sigma, shift)[best]
        parts = []
        for packed, count in passes:
            states = _mcvq_states(packed, shift, natural, state.g, b)
            passes.done(states)
            parts.append(np.asarray(states[:count]))
        m = jnp.asarray(np.concatenate(parts), dtype)
    return MCVQResult(
        g=state.g, m=m, mu=state.mu, sigma=state.sigma, a=a, b=b,
        trace=MCVQTrace(trace.objective, trace.temperature),
        num_iterations=it, converged=converged, variance_floor=floor,
        restart_free_energies=finals, best_restart=best, restart_converged=runs.converged)


