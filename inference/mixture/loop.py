"""The mixture fit's EM loop on one device: start, advance (in checkpoint chunks)
and finish."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from inference.engine.sharding import (
    psum,
)
from inference.mixture.criteria import block_criteria
from inference.mixture.features import kind_of
from inference.mixture.mstep import m_step
from inference.mixture.sweep import block_features, log_joint_eta, sweep


def fit_loop(x, features, state, tol, reg_covar, min_count, variance_floor, weight_offset, *,
              mode, covariance, max_iterations, prune, valid=None, axis_name=None, num=None):
    """The EM loop on the blocked ``features`` of x, then the criteria at the fit.

    Single device: ``valid`` and ``axis_name`` None. Sharded (inside ``shard_map``,
    :mod:`inference.mixture.sharded`): x and ``features`` are one device's rows,
    ``valid`` False on the padding, and the statistics, objective, changed labels
    and exact fallbacks are summed over ``axis_name``; ``num`` is then the number of
    valid rows over all devices.
    """
    carry = _loop_start(x, state, mode=mode, max_iterations=max_iterations)
    carry = _loop_advance(carry, x, features, tol, reg_covar, min_count, variance_floor,
                          weight_offset, max_iterations, mode=mode, covariance=covariance,
                          prune=prune, valid=valid, axis_name=axis_name, num=num)
    return _loop_finish(carry, x, features, mode=mode, covariance=covariance,
                        axis_name=axis_name)


def _loop_start(x, state, *, mode, max_iterations):
    """The EM loop's carry before the first iteration (:func:`fit_loop`):
    (state, it, previous objective, done, objective trace, count trace, labels)."""
    labels0 = jnp.full(x.shape[0] if mode != "stochastic" else 1, -1, jnp.int32)
    return (state, jnp.asarray(0, jnp.int32), jnp.asarray(jnp.inf, x.dtype), jnp.asarray(False),
            jnp.full(max_iterations, jnp.nan, x.dtype), jnp.zeros(max_iterations, jnp.int32),
            labels0)


def _loop_advance(carry, x, features, tol, reg_covar, min_count, variance_floor, weight_offset,
                  stop_at, *, mode, covariance, prune, valid=None, axis_name=None, num=None):
    """EM iterations from ``carry`` until done or at iteration ``stop_at`` (traced).

    ``stop_at`` at most the traces' length (``max_iterations``). It splits the fit
    into chunks for checkpoints (:mod:`inference.engine.checkpoint`); the iterations depend
    only on the carry, so the chunks give the one-chunk result bit for bit.
    """
    rows = x.shape[0]
    bound = jnp.minimum(stop_at, carry[4].shape[0])

    def body(carry):
        state, it, prev, _, objective_trace, count_trace, prev_labels = carry
        eta = log_joint_eta(x, state, mode, covariance, features.shift)
        stats, objective, labels = sweep(features, eta, state.active, mode, rows)
        if axis_name is not None:  # one collective for every sum of the iteration
            changed = (jnp.sum((labels != prev_labels) & valid) if mode != "stochastic"
                       else jnp.zeros((), jnp.int32))
            stats, total, changed = psum((stats, objective * rows, changed), axis_name)
            objective = total / num
        new = m_step(x, stats, labels, state, eta, features, mode, covariance, reg_covar,
                      prune, min_count, variance_floor, weight_offset, axis_name=axis_name)
        change = jnp.abs(prev - objective) / jnp.maximum(jnp.abs(objective), 1e-30)
        # The hard modes reach a fixed point when no assignment changes.
        if mode == "stochastic":
            same, labels = jnp.asarray(False), prev_labels
        elif axis_name is None:
            same = jnp.all(labels == prev_labels)
        else:
            same = changed == 0
        done = (change <= tol) | same
        return (new, it + 1, objective, done, objective_trace.at[it].set(objective),
                count_trace.at[it].set(jnp.sum(new.active).astype(jnp.int32)), labels)

    def running(carry):
        return (~carry[3]) & (carry[1] < bound)

    return jax.lax.while_loop(running, body, carry)


def _loop_finish(carry, x, features, *, mode, covariance, axis_name=None):
    """The outputs of :func:`fit_loop` from the last carry: the criteria at the fit."""
    state, it, _, done, objective_trace, count_trace, _ = carry
    values, labels, nearest = block_criteria(x, features, state.weights, state.means,
                                              state.covariances, state.active, covariance,
                                              map_is_nearest=mode == "nearest",
                                              axis_name=axis_name)
    return state, it, done, objective_trace, count_trace, values, labels, nearest


@functools.partial(jax.jit, static_argnames=("covariance",))
def _features_of(x, *, covariance):
    """The data's blocked quadratic features (:func:`block_features`), built once per fit."""
    return block_features(x, kind_of(covariance))


@functools.partial(jax.jit, static_argnames=("mode", "max_iterations"))
def _start_single(x, state, *, mode, max_iterations):
    return _loop_start(x, state, mode=mode, max_iterations=max_iterations)


@functools.partial(jax.jit, static_argnames=("mode", "covariance", "prune"))
def _advance_single(carry, x, features, tol, reg_covar, min_count, variance_floor,
                    weight_offset, stop_at, *, mode, covariance, prune):
    """:func:`_loop_advance` on one device: every iteration is one sweep over the
    features (E-step and the M-step's statistics, :func:`sweep`), then the
    closed-form M-step."""
    return _loop_advance(carry, x, features, tol, reg_covar, min_count, variance_floor,
                         weight_offset, stop_at, mode=mode, covariance=covariance, prune=prune)


@functools.partial(jax.jit, static_argnames=("mode", "covariance"))
def _finish_single(carry, x, features, *, mode, covariance):
    return _loop_finish(carry, x, features, mode=mode, covariance=covariance)


def run_em(x, state, tol, reg_covar, min_count, variance_floor, weight_offset, *, mode,
         covariance, max_iterations, prune, checkpoint=None):
    """:func:`fit_loop` on one device, the data's quadratic features computed once, the
    loop through :func:`inference.engine.checkpoint.run_chunks`.

    ``checkpoint``: None (one chunk), or a dict of ``run_chunks``'s ``kind``,
    ``options``, ``checkpoint_path``, ``checkpoint_every`` and ``resume_from``.
    """
    from inference.engine.checkpoint import run_chunks

    features = _features_of(x, covariance=covariance)
    settings = dict(mode=mode, covariance=covariance, prune=prune)
    carry = run_chunks(
        lambda carry, stop_at: _advance_single(carry, x, features, tol, reg_covar, min_count,
                                               variance_floor, weight_offset, stop_at,
                                               **settings),
        lambda: _start_single(x, state, mode=mode, max_iterations=max_iterations),
        total=max_iterations, finished=lambda carry: bool(carry[3]),
        **(checkpoint or dict(kind="fit_mixture", options={})))
    return _finish_single(carry, x, features, mode=mode, covariance=covariance)



def checkpoint_settings(checkpoint_path, checkpoint_every, resume_from, *, mesh, devices, x,
                         state, rng_key, options):
    """``run_em``'s ``checkpoint`` dict (None without checkpoint options), after validation.

    The saved options are the fit's, x's shape and dtype, the SHA-256 of x and of the
    initial state (which ``rng_key``, ``init`` and the ``init_*`` arrays determine).
    """
    from inference.engine import checkpoint

    if (checkpoint_path, resume_from) == (None, None):
        checkpoint.check_checkpoint_options(checkpoint_path, checkpoint_every, resume_from)
        return None
    if mesh is not None:
        raise ValueError("checkpoint_path/checkpoint_every/resume_from: checkpoints need the "
                         f"single-device fit; got devices={devices!r}, mesh={mesh!r}")
    path, every, resume, saved = checkpoint.prepare(
        checkpoint_path, checkpoint_every, resume_from,
        dict(options, rng_key=checkpoint.jsonable(rng_key)), data=(x,),
        initial_state=tuple(state))
    return dict(kind="fit_mixture", options=saved, checkpoint_path=path,
                checkpoint_every=every, resume_from=resume)


