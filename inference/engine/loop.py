"""The one driver of every iterative fit: restarts, convergence, trace, progress, chunks.

A family writes one iteration of its algorithm as a pure, jittable function and
hands it to :func:`run`; this module does the rest, once for every algorithm
(the split of BlackJAX's ``step`` functions from ``run_inference_algorithm``, and of
Optax's pure transformations from the loop that drives them):

* **restarts**: the states of several starts run side by side, vmapped (or mapped
  in batches of ``restart_batch`` starts to bound memory; a single start runs
  unbatched); a start that has converged stays put while the others go on;
* **convergence and trace**: each iteration's ``info`` (a NamedTuple of scalars
  with at least ``objective``) is written into a per-start trace; a start has
  converged when its step says so (an ``info.converged`` field) or, for steps that
  do not say, when the objective changed by at most ``tol`` relative to the
  previous iteration; :func:`select` cuts the trace at the start's
  ``num_iterations`` and :func:`warn_not_converged` gives the one warning;
* **progress bar**: ``progress_bar=True`` ticks a tqdm bar from inside the
  compiled loop (:mod:`inference.engine.progress`);
* **checkpoint / resume**: a fit without checkpoints is one compiled call (start
  and loop); with checkpoints the loop runs to a traced bound ``stop_at``, so one
  compiled program runs every chunk, with a checkpoint after each
  (:func:`inference.engine.checkpoint.run_chunks`); iteration i of a start draws its
  key as ``fold_in(start_key, i)``, so any chunking gives the one-call result bit
  for bit;
* **sharding**: with a device ``mesh`` the whole loop runs under ``shard_map``, the
  data's rows split over the devices; the step receives the shard's validity mask
  and the mesh axis name (:class:`Shard`) and sums its statistics over the devices
  with :func:`inference.engine.sharding.psum`. EM-type algorithms written as
  ``statistics`` + ``update`` (:class:`StatisticsAlgorithm`) get the sum for free,
  and the same pair drives the streamed fits (:mod:`inference.engine.streaming`).

The compiled loop is cached on the algorithm (a hashable NamedTuple of module-level
functions and frozen options) and the shapes, so a second call with new data or keys
of the same shapes compiles nothing.

References
----------
J. Lao, R. Louf et al., "BlackJAX: composable Bayesian inference in JAX", 2024
(the ``init``/``step`` split); D. Phan, N. Pradhan, M. Jankowiak, "Composable effects
for flexible and accelerated probabilistic programming in NumPyro", 2019 (``SVI.run``,
one progress bar and trace for every guide).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference.engine import host
from inference.engine.progress import progress, tick
from ppl_models.diagnostics import ConvergenceWarning

__all__ = ["Algorithm", "StatisticsAlgorithm", "Shard", "Run", "run", "select", "cut",
           "warn_not_converged", "relative_change_converged"]


class Shard(NamedTuple):
    """What a step sees of the sharding: ``valid`` (bool, its rows; False on padding)
    and ``axis_name`` (the mesh axis to ``psum`` over). ``None`` on one device."""

    valid: jax.Array
    axis_name: str


class Algorithm(NamedTuple):
    """An iterative algorithm as one pure step.

    Attributes
    ----------
    step : callable
        ``step(rng_key, state, data, params, *, shard, **options) -> (state, info)``:
        one iteration for one start, jittable. ``data`` is a tuple of arrays whose
        axis 0 is the example axis (split over devices with a mesh), ``params`` a
        pytree replicated on every device, ``shard`` a :class:`Shard` or None.
        ``info`` is a NamedTuple of arrays with at least ``objective``; a field
        ``converged`` (bool) overrides the engine's relative-change test.
    options : tuple of (name, value) pairs
        Static options passed to ``step`` as keywords (hashable: a frozen dict).
    name : str
        The fit's name, for the progress bar, warnings and checkpoints.
    rows : tuple of str
        Fields of the (NamedTuple) state that hold one row per example (axis 0 of
        one start's field): with a mesh they stay split over the devices like the
        data; every other field is the same on every device.
    vectorized : bool
        True: the starts run side by side (``vmap``). False: one after another
        (``lax.map``), each step traced for one start, so that its conditionals
        stay conditionals (``vmap`` turns a ``lax.cond`` on a per-start value into
        a select that computes both branches) and its floats are those of the
        unbatched step.
    """

    step: Callable
    options: tuple = ()
    name: str = "fit"
    rows: tuple = ()
    vectorized: bool = True


class StatisticsAlgorithm(NamedTuple):
    """An EM-type algorithm as sufficient statistics (a sum over examples) and an update.

    Attributes
    ----------
    statistics : callable
        ``statistics(rng_key, state, data, params, valid, **options) -> stats``: a
        pytree of sums over the examples of ``data`` (rows where ``valid`` is False,
        the padding, left out; ``valid`` is None when there is none).
    update : callable
        ``update(state, stats, params, **options) -> (state, info)``: the new
        parameters from the summed statistics (replicated: the same on every device).
    second_pass : callable, optional
        ``second_pass(rng_key, state, stats, data, params, valid, **options) -> extra``:
        a further sum over the examples that needs the first one's total ``stats``
        (a scatter about the new means, say). ``update`` then receives
        ``(stats, extra)``; ``extra`` is zeros where the pass was not made.
    second_pass_needed : callable, optional
        ``second_pass_needed(state, stats, params, **options) -> bool``: whether the
        second pass is needed at all (a streamed fit skips it otherwise); default
        always.
    options, name, rows, vectorized
        As for :class:`Algorithm`.
    """

    statistics: Callable
    update: Callable
    options: tuple = ()
    name: str = "fit"
    rows: tuple = ()
    second_pass: Callable | None = None
    second_pass_needed: Callable | None = None
    vectorized: bool = True


class Run(NamedTuple):
    """What :func:`run` returns, for every start (leading axis: the starts).

    Attributes
    ----------
    state : pytree
        Final state of every start.
    trace : NamedTuple of arrays (num_starts, max_iterations, ...)
        ``info`` of every iteration; entries at and after a start's
        ``num_iterations`` are zeros (cut them with :func:`select` / :func:`cut`).
    num_iterations : int32 array (num_starts,)
        Iterations run by each start.
    converged : bool array (num_starts,)
    """

    state: Any
    trace: Any
    num_iterations: jax.Array
    converged: jax.Array


def relative_change_converged(objective, previous, tol):
    """``|objective - previous| <= tol |previous|`` (False while ``previous`` is infinite)."""
    return jnp.isfinite(previous) & (jnp.abs(objective - previous) <= tol * jnp.abs(previous))


def _step_of(algorithm):
    """The per-start step ``(key, state, data, params, shard) -> (state, info)``."""
    options = dict(algorithm.options)
    if isinstance(algorithm, StatisticsAlgorithm):
        from inference.engine.sharding import psum

        def summed(stats, shard):
            if shard is None:
                return stats
            leaves, treedef = jax.tree.flatten(stats)
            return jax.tree.unflatten(treedef, list(psum(tuple(leaves), shard.axis_name)))

        def step(key, state, data, params, shard):
            valid = None if shard is None else shard.valid
            stats = summed(algorithm.statistics(key, state, data, params, valid, **options),
                           shard)
            if algorithm.second_pass is not None:
                def second():
                    return algorithm.second_pass(key, state, stats, data, params, valid,
                                                 **options)

                needed = (True if algorithm.second_pass_needed is None else
                          algorithm.second_pass_needed(state, stats, params, **options))
                like = jax.eval_shape(second)
                # Each device's part in the conditional, the sum outside it (a collective
                # inside a conditional can hang XLA's CPU runtime).
                extra = jax.lax.cond(needed, second, lambda: jax.tree.map(
                    lambda s: jnp.zeros(s.shape, s.dtype), like))
                stats = (stats, summed(extra, shard))
            return algorithm.update(state, stats, params, **options)

        return step
    return lambda key, state, data, params, shard: algorithm.step(
        key, state, data, params, shard=shard, **options)


def _info_like(algorithm, state, data, params, shard):
    """Shapes of one start's ``info`` (traced only)."""
    one = jax.tree.map(lambda leaf: leaf[0], state)
    key = jax.random.key(0)
    return jax.eval_shape(lambda s: _step_of(algorithm)(key, s, data, params, shard)[1], one)


def start(algorithm, states, keys, data, params, max_iterations, shard=None):
    """The loop carry before the first iteration.

    ``(keys, num_iterations, states, trace, converged, previous_objective, iteration)``.
    """
    num = keys.shape[0]
    like = _info_like(algorithm, states, data, params, shard)
    trace = jax.tree.map(lambda s: jnp.zeros((num, max_iterations, *s.shape), s.dtype), like)
    objective_dtype = like.objective.dtype
    return (keys, jnp.zeros(num, jnp.int32), states, trace, jnp.zeros(num, bool),
            jnp.full(num, jnp.inf, objective_dtype), jnp.zeros((), jnp.int32))


def over_starts(algorithm, fn, args, *, restart_batch=None):
    """``fn`` applied to every start: ``args`` is a tuple of pytrees whose leaves share
    a leading axis of starts.

    All at once (``vmap``), one after another (``lax.map``) for an algorithm that is
    not ``vectorized``, or ``restart_batch`` at a time. A single start runs unbatched:
    XLA compiles a vmap or map of one differently (and more slowly), and the float
    rounding of a single fit stays that of its step alone (a step's ``lax.cond`` stays
    a branch instead of both sides computed).
    """
    if restart_batch is None and jax.tree.leaves(args)[0].shape[0] == 1:
        out = fn(*jax.tree.map(lambda a: a[0], args))
        return jax.tree.map(lambda a: a[None], out)
    if not getattr(algorithm, "vectorized", True):
        return jax.lax.map(lambda a: fn(*a), args)
    if restart_batch is None:
        return jax.vmap(fn)(*args)
    return jax.lax.map(lambda a: fn(*a), args, batch_size=restart_batch)


def advance(algorithm, carry, data, params, tol, stop_at, *, progress_every=0,
            restart_batch=None, shard=None):
    """Iterations of every start until all have converged or the iteration ``stop_at``.

    Pure and jittable; the carry is :func:`start`'s.
    """
    step = _step_of(algorithm)
    max_iterations = jax.tree.leaves(carry[3])[0].shape[1]
    bound = jnp.minimum(stop_at, max_iterations)

    # One start: the loop body never sees it done (the loop stops when every start is),
    # so it needs none of the selects that hold a finished start still among others.
    single = restart_batch is None and carry[0].shape[0] == 1

    def one(key, count, state, previous, done):
        key_i = jax.random.fold_in(key, count)
        if shard is not None:
            key_i = jax.random.fold_in(key_i, jax.lax.axis_index(shard.axis_name))
        new_state, info = step(key_i, state, data, params, shard)
        if hasattr(info, "converged"):
            converged = jnp.asarray(info.converged, bool)
        else:
            converged = relative_change_converged(info.objective, previous, tol)
        if not single:
            new_state = jax.tree.map(lambda old, new: jnp.where(done, old, new), state,
                                     new_state)
        return new_state, info, converged

    def all_starts(keys, counts, states, previous, done):
        return over_starts(algorithm, one, (keys, counts, states, previous, done),
                           restart_batch=restart_batch)

    def write(trace, count, value, done):
        # In place (a dynamic update of one row), not a select over the whole trace: a
        # start that is done writes its row's old value back.
        return trace.at[count].set(jnp.where(done, trace[count], value))

    def cond(carry):
        return (carry[6] < bound) & ~jnp.all(carry[4])

    def body(carry):
        keys, counts, states, trace, done, previous, it = carry
        states, info, converged = all_starts(keys, counts, states, previous, done)
        if single:
            trace = jax.tree.map(lambda t, v: t.at[0, counts[0]].set(v[0]), trace, info)
            previous = info.objective.astype(previous.dtype)
            counts = counts + 1
            done = converged
        else:
            trace = jax.tree.map(lambda t, v: jax.vmap(write)(t, counts, v, done), trace, info)
            previous = jnp.where(done, previous, info.objective.astype(previous.dtype))
            counts = counts + (~done).astype(jnp.int32)
            done = done | converged
        tick(it, progress_every)
        return keys, counts, states, trace, done, previous, it + 1

    return jax.lax.while_loop(cond, body, carry)


@partial(jax.jit, static_argnames=("algorithm", "max_iterations"))
def _start_jit(algorithm, states, keys, data, params, *, max_iterations):
    return start(algorithm, states, keys, data, params, max_iterations)


@partial(jax.jit, static_argnames=("algorithm", "max_iterations", "progress_every",
                                   "restart_batch"))
def _run_jit(algorithm, states, keys, data, params, tol, *, max_iterations, progress_every,
             restart_batch):
    """:func:`start` and :func:`advance` to ``max_iterations`` in one compiled call (the
    fit without checkpoints: one program and one dispatch instead of two)."""
    carry = start(algorithm, states, keys, data, params, max_iterations)
    return advance(algorithm, carry, data, params, tol, max_iterations,
                   progress_every=progress_every, restart_batch=restart_batch)


@partial(jax.jit, static_argnames=("algorithm", "progress_every", "restart_batch"))
def _advance_jit(algorithm, carry, data, params, tol, stop_at, *, progress_every,
                 restart_batch):
    return advance(algorithm, carry, data, params, tol, stop_at,
                   progress_every=progress_every, restart_batch=restart_batch)


def _state_specs(algorithm, states, axis):
    """PartitionSpecs of the stacked states: ``rows`` fields split by examples (axis 1)."""
    from jax.sharding import PartitionSpec as P

    if not algorithm.rows:
        return P()
    return type(states)(*(P(None, axis) if name in algorithm.rows else P()
                          for name in states._fields))


@partial(jax.jit, static_argnames=("algorithm", "max_iterations", "mesh"))
def _run_sharded(algorithm, states, keys, data, valid, params, tol, *, max_iterations, mesh):
    from jax.sharding import PartitionSpec as P

    from inference.engine.sharding import mesh_axis

    axis = mesh_axis(mesh)
    state_specs = _state_specs(algorithm, states, axis)

    def per_shard(data, valid, states, keys, params, tol):
        shard = Shard(valid, axis)
        carry = start(algorithm, states, keys, data, params, max_iterations, shard)
        return advance(algorithm, carry, data, params, tol, max_iterations, shard=shard)

    in_specs = (tuple(P(axis) for _ in data), P(axis), state_specs, P(), P(), P())
    out_specs = (P(), P(), state_specs, P(), P(), P(), P())
    # The outputs' replication is the step's promise (it sums over the mesh axis).
    return jax.shard_map(per_shard, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                         check_vma=False)(data, valid, states, keys, params, tol)


def run(algorithm, states, data, params=(), *, keys, max_iterations: int, tol=0.0,
        progress_bar: bool = False, restart_batch: int | None = None, mesh=None,
        checkpoint=None) -> Run:
    """Run ``algorithm`` from every start in ``states`` until convergence or ``max_iterations``.

    Parameters
    ----------
    algorithm : Algorithm or StatisticsAlgorithm
    states : pytree
        One state per start, stacked on a leading axis (built by the family's ``init``).
    data : tuple of arrays
        The examples (axis 0 of each), shared by the starts.
    params : pytree
        Other inputs shared by the starts (noise, a temperature, a mask of units).
    keys : key array (num_starts,)
        One key per start; iteration i uses ``fold_in(keys[start], i)``.
    max_iterations : int
        Iterations at most per start (the length of the trace).
    tol : float
        Relative change of the objective that ends a start whose step does not
        report its own ``converged``.
    progress_bar : bool
        A tqdm bar over the iterations (of the slowest start).
    restart_batch : int, optional
        Run the starts ``restart_batch`` at a time (``lax.map``) instead of all at
        once (``vmap``): the same result with less memory.
    mesh : jax.sharding.Mesh, optional
        Split the examples over these devices (padded to a multiple of the mesh
        size; the step sees :class:`Shard`). Not with a progress bar or checkpoints.
    checkpoint : inference.engine.checkpoint.Checkpointing, optional
        Where and how often to write the loop carry, and where to resume from.

    Returns
    -------
    Run
    """
    tol = jnp.asarray(tol, jax.tree.leaves(states)[0].dtype
                      if jnp.issubdtype(jax.tree.leaves(states)[0].dtype, jnp.floating)
                      else jnp.float32)
    data = tuple(data)
    if mesh is not None:
        if progress_bar or checkpoint is not None:
            raise ValueError("devices/mesh: the sharded fit runs without a progress bar or "
                             "checkpoints")
        from inference.engine.sharding import mesh_size, pad_examples, shard_examples

        size = mesh_size(mesh)
        padded = [pad_examples(jnp.asarray(a), size)[0] for a in data]
        valid = pad_examples(jnp.zeros(data[0].shape[0]), size)[1]
        placed = shard_examples(mesh, *padded, valid)
        placed = placed if isinstance(placed, tuple) else (placed,)
        if algorithm.rows:  # per-example fields of the states: padded like the data
            states = states._replace(**{
                name: jax.vmap(lambda a: pad_examples(a, size)[0])(getattr(states, name))
                for name in algorithm.rows})
        carry = _run_sharded(algorithm, states, keys, tuple(placed[:-1]), placed[-1], params,
                             tol, max_iterations=max_iterations, mesh=mesh)
        state = carry[2]
        if algorithm.rows:  # drop the padded rows
            num = data[0].shape[0]
            state = state._replace(**{name: getattr(state, name)[:, :num]
                                      for name in algorithm.rows})
        return _finish(carry[:2] + (state,) + carry[3:])
    total = max_iterations
    with progress(total, algorithm.name, progress_bar) as every:
        def advance_fn(carry, stop_at):
            return _advance_jit(algorithm, carry, data, params, tol, stop_at,
                                progress_every=every, restart_batch=restart_batch)

        def start_fn():
            return _start_jit(algorithm, states, keys, data, params,
                              max_iterations=max_iterations)

        if checkpoint is None:
            carry = _run_jit(algorithm, states, keys, data, params, tol,
                             max_iterations=max_iterations, progress_every=every,
                             restart_batch=restart_batch)
        else:
            from inference.engine.checkpoint import run_chunks

            carry = run_chunks(advance_fn, start_fn, total=total,
                               finished=lambda carry: bool(np.all(np.asarray(carry[4]))),
                               **checkpoint.chunk_arguments(algorithm.name))
    return _finish(carry)


def _finish(carry) -> Run:
    _, counts, states, trace, done, _, _ = carry
    return Run(states, trace, counts, done)


def cut(trace, num_iterations):
    """One start's trace (leaves (max_iterations, ...)) cut to its ``num_iterations``.

    Cut on the host (no compilation per length); the leaves come back as JAX arrays.
    """
    count = int(num_iterations)
    return jax.tree.map(lambda leaf: host.head(leaf, count), trace)


def select(result: Run, index):
    """Start ``index`` of ``result``: ``(state, trace cut at its num_iterations,
    num_iterations, converged)``."""
    state, trace, count, converged = _pick(
        (result.state, result.trace, result.num_iterations, result.converged), int(index))
    count, converged = jax.device_get((count, converged))
    return state, cut(trace, count), int(count), bool(converged)


@jax.jit
def _pick(tree, index):
    """Entry ``index`` of every leaf, in one compiled call (a small fit otherwise spends
    much of its time dispatching one indexing operation per leaf)."""
    return jax.tree.map(lambda leaf: leaf[index], tree)


def warn_not_converged(name: str, converged: bool, max_iterations: int, what: str = "",
                       stacklevel: int = 3) -> None:
    """The one non-convergence warning (:class:`ConvergenceWarning`) of every fit."""
    if not converged:
        detail = f" ({what})" if what else ""
        warnings.warn(f"{name}: not converged after {max_iterations} iterations{detail}; "
                      "raise max_iterations", ConvergenceWarning, stacklevel=stacklevel)
