"""EM-type algorithms over a stream of batches: one pass over the data per iteration.

An algorithm written as sufficient statistics and an update
(:class:`inference.engine.loop.StatisticsAlgorithm`) needs only sums over the
examples, so it runs on data that never fit in memory: every iteration reads the
batches of a :class:`inference.engine.streaming.BatchSource` once, adds each batch's
statistics (every start's, vmapped), and then updates the parameters from the sums,
exactly as :func:`inference.engine.loop.run` does on one array. Convergence, the
trace, the progress bar and the warning follow the in-memory driver's rules.

Batch b of iteration i draws its key as ``fold_in(fold_in(start_key, i), b)``; the
in-memory driver draws one key per iteration, so randomised statistics follow a
different (equally valid) path; deterministic ones give the in-memory result up to
the order of float additions.

An online algorithm (:class:`OnlineAlgorithm`) is no sum: its state moves with every
batch, carried from batch to batch and from pass to pass. :func:`run_online_passes`
drives it over the same sources, one pass an iteration, with the same stopping test
on the pass's mean objective.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference.engine.loop import (
    Run,
    StatisticsAlgorithm,
    over_starts,
    relative_change_converged,
)
from inference.engine.progress import advance_bar, progress
from inference.engine.streaming import Pass, batches

__all__ = ["run_passes", "OnlineAlgorithm", "OnlineRun", "run_online_passes"]


def _each(algorithm, fn, *args):
    """``fn`` over the starts (leading axis of ``args``), as the in-memory loop runs them."""
    return over_starts(algorithm, fn, args)


@partial(jax.jit, static_argnames=("algorithm",))
def _batch_statistics(algorithm, keys, states, rows, valid, params):
    options = dict(algorithm.options)

    def one(key, state):
        return algorithm.statistics(key, state, (rows,), params, valid, **options)

    return _each(algorithm, one, keys, states)


def _second_sums(algorithm, keys, states, total, rows, valid, params):
    options = dict(algorithm.options)

    def one(key, state, stats):
        return algorithm.second_pass(key, state, stats, (rows,), params, valid, **options)

    return _each(algorithm, one, keys, states, total)


_batch_second = jax.jit(_second_sums, static_argnames=("algorithm",))


@partial(jax.jit, static_argnames=("algorithm",))
def _second_needed(algorithm, states, total, params, done):
    """Whether some start that goes on needs the second pass."""
    if algorithm.second_pass_needed is None:
        return jnp.any(~done)
    options = dict(algorithm.options)

    def one(state, stats):
        return jnp.asarray(algorithm.second_pass_needed(state, stats, params, **options))

    return jnp.any(_each(algorithm, one, states, total) & ~done)


@partial(jax.jit, static_argnames=("algorithm",))
def _second_zeros(algorithm, keys, states, total, rows, valid, params):
    like = jax.eval_shape(lambda: _second_sums(algorithm, keys, states, total, rows, valid,
                                               params))
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), like)


@partial(jax.jit, static_argnames=("algorithm",))
def _add(algorithm, total, stats):
    return jax.tree.map(jnp.add, total, stats)


@partial(jax.jit, static_argnames=("algorithm",))
def _update(algorithm, states, stats, params, previous, done, tol):
    options = dict(algorithm.options)

    def one(state, stats, previous, done):
        new_state, info = algorithm.update(state, stats, params, **options)
        if hasattr(info, "converged"):
            converged = jnp.asarray(info.converged, bool)
        else:
            converged = relative_change_converged(info.objective, previous, tol)
        new_state = jax.tree.map(lambda old, new: jnp.where(done, old, new), state, new_state)
        return new_state, info, converged

    return _each(algorithm, one, states, stats, previous, done)


def _batches_for(source, batch_size, max_iterations, why):
    """The batches of ``source``; a ValueError (saying ``why``) when it is a one-shot
    iterator and more than one pass will read it."""
    data = batches(source, batch_size)
    if not data.reusable and max_iterations > 1:
        raise ValueError(f"source is a one-shot iterator, but {why}; pass an array, "
                         "np.memmap, list of arrays or a callable that returns a fresh iterator")
    return data


def run_passes(algorithm: StatisticsAlgorithm, states, source, params=(), *, keys,
               max_iterations: int, tol=0.0, batch_size=None, dtype=None,
               progress_bar: bool = False, block=None) -> Run:
    """Run ``algorithm`` from every start in ``states``, one pass over ``source`` per iteration.

    Parameters
    ----------
    algorithm : StatisticsAlgorithm
    states : pytree
        One state per start, stacked on a leading axis; no per-example fields.
    source : BatchSource or anything :func:`inference.engine.streaming.batches` takes
        The examples, read once per iteration (a one-shot iterator is refused).
    params : pytree
        Inputs shared by the starts.
    keys : key array (num_starts,)
    max_iterations : int
    tol : float
        Relative change of the objective that ends a start (unless its update
        reports ``converged``).
    batch_size : int, optional
        Rows per batch (see :class:`~inference.engine.streaming.BatchSource`).
    dtype : dtype, optional
        The float type the batches are sent in; default that of the first state leaf.
    progress_bar : bool
        A tqdm bar over the passes.
    block : int, optional
        Batches are padded with zero rows (``valid`` False) to whole blocks of this
        many rows (:class:`~inference.engine.streaming.Pass`); default one block of
        the batch size.

    A ``second_pass`` of the algorithm reads the batches once more in an iteration
    where some start needs it.

    Returns
    -------
    Run
        As :func:`inference.engine.loop.run` returns it.
    """
    if not isinstance(algorithm, StatisticsAlgorithm):
        raise TypeError("run_passes needs a StatisticsAlgorithm (statistics + update); got "
                        f"{type(algorithm).__name__}")
    data = _batches_for(source, batch_size, max_iterations,
                        "an EM fit reads the data once per iteration")
    if dtype is None:
        dtype = jax.tree.leaves(states)[0].dtype
    batch_rows = data.batch_size or next(iter(data)).shape[0]
    num = keys.shape[0]
    done = jnp.zeros(num, bool)
    counts = np.zeros(num, np.int32)
    previous = jnp.full(num, jnp.inf, dtype)
    tol = jnp.asarray(tol, dtype)
    infos, dones = [], []
    with progress(max_iterations, algorithm.name, progress_bar) as every:
        for iteration in range(max_iterations):
            total = None
            passes = Pass(data, dtype, batch_rows, block=block or batch_rows)
            for index, (padded, rows) in enumerate(passes):
                valid = jnp.arange(padded.shape[0]) < rows
                batch_keys = _batch_keys(keys, iteration, index)
                stats = _batch_statistics(algorithm, batch_keys, states, padded, valid, params)
                total = stats if total is None else _add(algorithm, total, stats)
                passes.done(total)
            if algorithm.second_pass is not None:
                total = (total, _second(algorithm, passes, keys, iteration, states, total,
                                        params, done, padded, valid))
            states, info, converged = _update(algorithm, states, total, params, previous, done,
                                              tol)
            infos.append(info)
            dones.append(np.asarray(done))
            previous = jnp.where(done, previous, info.objective.astype(dtype))
            counts = counts + ~dones[-1]
            done = done | converged
            if every:
                advance_bar(1)
            if bool(jnp.all(done)):
                break
    return Run(states, _stack(infos, dones, max_iterations), jnp.asarray(counts), done)


def _second(algorithm, passes, keys, iteration, states, total, params, done, rows, valid):
    """The second pass's sums (zeros when no start that goes on needs it); ``rows`` and
    ``valid`` are the last batch of the first pass (for the shapes of the zeros)."""
    if not bool(_second_needed(algorithm, states, total, params, done)):
        keys_0 = _batch_keys(keys, iteration, 0)
        return _second_zeros(algorithm, keys_0, states, total, rows, valid, params)
    extra = None
    for index, (padded, count) in enumerate(passes):
        batch_valid = jnp.arange(padded.shape[0]) < count
        batch_keys = _batch_keys(keys, iteration, index)
        sums = _batch_second(algorithm, batch_keys, states, total, padded, batch_valid, params)
        extra = sums if extra is None else _add(algorithm, extra, sums)
        passes.done(extra)
    return extra


@jax.jit
def _batch_keys(keys, iteration, index):
    return jax.vmap(lambda k: jax.random.fold_in(jax.random.fold_in(k, iteration), index))(keys)


def _stack(infos, dones, max_iterations):
    """The per-iteration infos as a trace (num_starts, max_iterations, ...): iteration i of a
    start is kept while it had not converged (a prefix of its row), the rest is zeros."""

    def leaf(*values):
        kept = [np.where(done.reshape(done.shape + (1,) * (np.ndim(v) - 1)), 0, v)
                for v, done in zip(values, dones, strict=True)]
        stacked = np.stack(kept, axis=1)
        widths = [(0, 0), (0, max_iterations - stacked.shape[1])] + [(0, 0)] * (stacked.ndim - 2)
        return jax.device_put(np.pad(stacked, widths))

    return jax.tree.map(lambda *values: leaf(*[np.asarray(v) for v in values]), *infos)


# ---------------------------------------------------------------------------------------
# Online algorithms: the state moves with every batch.


class OnlineAlgorithm(NamedTuple):
    """An online algorithm over a stream of batches.

    Attributes
    ----------
    step : callable
        ``step(state, rows, valid, params, **options) -> (state, info)``: the state
        after the rows of one padded batch, in order (rows where ``valid`` is False, the
        padding, leave it unchanged), jittable; ``info`` a NamedTuple of scalars with at
        least ``objective``, the batch's mean over its valid rows.
    options : tuple of (name, value) pairs
        Static options passed to ``step`` as keywords.
    name : str
        The fit's name, for the progress bar.
    """

    step: Callable
    options: tuple = ()
    name: str = "fit"


class OnlineRun(NamedTuple):
    """What :func:`run_online_passes` returns (one start).

    Attributes
    ----------
    state : pytree
        The state after the last batch.
    trace : NamedTuple of arrays (num_batches,)
        ``info`` of every batch of every pass run, in order.
    objective : array (num_iterations,)
        Every pass's objective: the mean of its batches' objectives weighted by rows.
    num_iterations : int
        Passes run.
    converged : bool
    """

    state: Any
    trace: Any
    objective: jax.Array
    num_iterations: int
    converged: bool


@partial(jax.jit, static_argnames=("algorithm",))
def _online_step(algorithm, state, rows, count, params, total):
    """One batch: the algorithm's step and the pass's row-weighted objective sum."""
    valid = jnp.arange(rows.shape[0]) < count
    state, info = algorithm.step(state, rows, valid, params, **dict(algorithm.options))
    return state, info, total + count * info.objective


def run_online_passes(algorithm: OnlineAlgorithm, state, source, params=(), *,
                      max_iterations: int, tol=0.0, batch_size=None, dtype=None,
                      progress_bar: bool = False, block: int = 1,
                      first_pass=None) -> OnlineRun:
    """Run ``algorithm`` from ``state`` over ``source``, batch after batch, one pass per
    iteration, the state carried across batches and passes.

    A pass's objective is the row-weighted mean of its batches' ``info.objective``;
    the run stops after a pass whose objective changed by at most ``tol`` relative to
    the pass before (never with ``tol`` = 0: every pass runs).

    Parameters
    ----------
    algorithm : OnlineAlgorithm
    state : pytree
        The start (one, not stacked).
    source : BatchSource or anything :func:`inference.engine.streaming.batches` takes
        A one-shot iterator only with ``max_iterations`` = 1.
    params : pytree
        Inputs of every step (traced).
    max_iterations : int
    tol : float
    batch_size : int, optional
        Rows per batch (:class:`~inference.engine.streaming.BatchSource`).
    dtype : dtype, optional
        The float type the batches are sent in; default that of the first state leaf.
    progress_bar : bool
        A tqdm bar over the passes.
    block : int
        Batches are padded with zero rows to whole blocks of this many rows
        (:class:`~inference.engine.streaming.Pass`; default 1: a step per row needs
        no blocks). A batch with as many rows as the first keeps its shape, others
        are padded to a power of two.
    first_pass : iterable of arrays, optional
        The first pass's batches when the caller has begun reading ``source`` (its
        first batch, to start from, followed by the rest of the same iterator); later
        passes read ``source`` anew.

    Returns
    -------
    OnlineRun
    """
    if not isinstance(algorithm, OnlineAlgorithm):
        raise TypeError("run_online_passes needs an OnlineAlgorithm; got "
                        f"{type(algorithm).__name__}")
    data = _batches_for(source, batch_size, max_iterations,
                        "max_iterations > 1 passes read it again")
    if dtype is None:
        dtype = jax.tree.leaves(state)[0].dtype
    tol = float(tol)
    infos, objectives = [], []
    batch_rows, converged = None, False  # the first batch's rows: every pass's shape
    with progress(max_iterations, algorithm.name, progress_bar) as every:
        for iteration in range(max_iterations):
            source_pass = first_pass if iteration == 0 and first_pass is not None else data
            if batch_rows is None:
                source_pass = iter(source_pass)
                first = next(source_pass)
                batch_rows = first.shape[0]
                source_pass = _chain(first, source_pass)
            passes = Pass(source_pass, dtype, batch_rows, block=block)
            total, num = jnp.zeros((), dtype), 0
            for rows, count in passes:
                state, info, total = _online_step(algorithm, state, rows, count, params,
                                                  total)
                passes.done(total)
                infos.append(info)
                num += count
            objectives.append(total / num)
            if every:
                advance_bar(1)
            if tol > 0 and len(objectives) > 1:
                converged = bool(relative_change_converged(objectives[-1], objectives[-2],
                                                           tol))
                if converged:
                    break
    trace = jax.tree.map(lambda *values: jnp.stack(values), *infos)
    return OnlineRun(state, trace, jnp.stack(objectives), len(objectives), converged)


def _chain(first, rest):
    yield first
    yield from rest
