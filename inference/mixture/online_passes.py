"""One pass of an online mixture learner over a shuffled data set, as an engine step.

:func:`inference.mixture.online.fit_online` runs its passes through the engine
(:func:`inference.engine.run`): one engine iteration is one pass, :func:`pass_step`, a
``lax.scan`` of the online rule (:func:`inference.mixture.online_rules.step`) over the
pass's rows in a fresh random order. Its objective is the mean log-likelihood of the
data set under the mixture of the active units at the end of the pass.

Besides the objective, a pass records the trace points of the fit: one every
``trace_every`` steps counted from the start of the first pass, and one at the end of
the run (the last pass, or the pass that converged). A pass holds at most ``slots``
of them (``recorded`` marks the ones it wrote, in order); the driver strings the
recorded ones of every pass together.

:func:`inference.mixture.online_stream.fit_online_stream` runs the same rule over a
stream of batches through :func:`inference.engine.passes.run_online_passes`:
:func:`batch_step` is one batch, the rule's ``lax.scan`` over its rows in order.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from inference.engine import relative_change_converged
from inference.mixture.online_rules import OnlineState, assign, step

__all__ = ["PassState", "PassInfo", "pass_step", "num_slots", "BatchInfo", "batch_step"]


class PassState(NamedTuple):
    """The engine's state of the online fit: the learner's state, the passes done
    (``passes``, which draws the pass's order), the previous pass's objective and the
    index of the start (``start``: which of several orders' keys it reads)."""

    online: OnlineState
    passes: jax.Array
    previous: jax.Array
    start: jax.Array


class PassInfo(NamedTuple):
    """What one pass reports: ``objective`` (mean log-likelihood after the pass), the
    trace points it recorded (arrays (slots,): ``error``, E_MSE to the assigned unit;
    ``log_likelihood``; ``num_used``, units with share >= ``min_share``; ``steps``, the
    online steps taken so far; ``recorded``, which slots hold a point) and ``converged``
    (the objective changed by at most ``tol`` relative to the previous pass; never
    with ``tol`` = 0)."""

    objective: jax.Array
    error: jax.Array
    log_likelihood: jax.Array
    num_used: jax.Array
    steps: jax.Array
    recorded: jax.Array
    converged: jax.Array


def num_slots(num_examples: int, trace_every: int) -> int:
    """Trace points one pass may record: those strictly inside it, plus its end."""
    return (num_examples - 1) // trace_every + 2


def _trace_point(x, online, min_share, reg_covar, by_posterior, covariance):
    """(E_MSE, mean log-likelihood, units used, steps) of ``online`` on ``x``."""
    labels, log_px = assign(x, online, by_posterior, covariance, reg_covar, online.active)
    e_mse = jnp.mean(jnp.sum((x - online.means[labels]) ** 2, axis=1))
    shares = jnp.bincount(labels, length=online.means.shape[0]) / x.shape[0]
    used = jnp.sum(online.active & (shares >= min_share)).astype(jnp.int32)
    return e_mse, jnp.mean(log_px), used, online.num_steps


def pass_step(rng_key, state, data, params, *, shard, trace_every, slots, by_posterior,
              options):
    """One pass over the rows of ``data`` = (x,) in the order
    ``permutation(fold_in(key_order, pass), num_examples)`` (that of
    :func:`inference.mixture.online_rules.stream_order`), as an
    :class:`~inference.engine.Algorithm` step (``rng_key`` unused: the order comes from
    ``key_order``). ``params`` = (key_order, min_share, tol, max_iterations, numbers),
    ``numbers`` the rule's rates (a dict); ``options`` the rule's static options.
    ``key_order`` is one key, or one per start (restarts), of which start
    ``state.start`` reads its own."""
    (x,) = data
    key_order, min_share, tol, max_iterations, numbers = params
    if key_order.ndim:  # one key per start
        key_order = key_order[state.start]
    opts = dict(options)
    num = x.shape[0]
    done = state.passes * num  # steps before this pass
    rows = x[jax.random.permutation(jax.random.fold_in(key_order, state.passes), num)]

    def point(online):
        return _trace_point(x, online, min_share, numbers["reg_covar"], by_posterior,
                            opts["covariance"])

    like = jax.eval_shape(point, state.online)
    empty = tuple(jnp.zeros(slots, leaf.dtype) for leaf in like)

    def write(records, count, values):
        return tuple(r.at[count].set(v) for r, v in zip(records, values, strict=True))

    def one(carry, inputs):
        online, records, count = carry
        index, x_t = inputs
        online, _ = step(online, x_t, **opts, **numbers)
        inside = ((done + index + 1) % trace_every == 0) & (index + 1 < num)
        records, count = jax.lax.cond(
            inside, lambda: (write(records, count, point(online)), count + 1),
            lambda: (records, count))
        return (online, records, count), None

    (online, records, count), _ = jax.lax.scan(
        one, (state.online, empty, jnp.zeros((), jnp.int32)), (jnp.arange(num), rows))
    end = point(online)
    objective = end[1]
    converged = (tol > 0) & relative_change_converged(objective, state.previous, tol)
    at_end = (((done + num) % trace_every == 0) | (state.passes + 1 >= max_iterations)
              | converged)
    records = tuple(jnp.where(at_end, r.at[count].set(v), r)
                    for r, v in zip(records, end, strict=True))
    recorded = jnp.arange(slots) < count + at_end.astype(jnp.int32)
    info = PassInfo(objective, *records, recorded, converged)
    return (PassState(online, state.passes + 1, objective.astype(state.previous.dtype),
                      state.start), info)


class BatchInfo(NamedTuple):
    """What one batch of the streamed fit reports: ``objective``, the mean
    log-likelihood of its examples, each under the parameters just before its step (the
    prequential log-likelihood), and ``num_active``, the active units after it."""

    objective: jax.Array
    num_active: jax.Array


def batch_step(state, rows, valid, numbers, *, options):
    """The online rule over the rows of one padded batch, in order (``lax.scan``), as an
    :class:`~inference.engine.passes.OnlineAlgorithm` step: padded rows (``valid``
    False) leave the state unchanged, as the padding of a pass's last chunk.
    ``numbers`` are the rule's rates (a dict), ``options`` its static options."""
    opts = dict(options)

    def one(state, inputs):
        x_t, ok = inputs
        new, info = step(state, x_t, **opts, **numbers)
        return jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, state), info.log_likelihood

    state, log_px = jax.lax.scan(one, state, (rows, valid))
    objective = jnp.sum(jnp.where(valid, log_px, 0.0)) / jnp.sum(valid)
    return state, BatchInfo(objective, jnp.sum(state.active))
