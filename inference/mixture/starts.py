"""The starts of the mixture's EM fits, shared by the in-memory and the streamed fit.

:func:`inference.mixture.em.fit_mixture` and
:func:`inference.mixture.stream.fit_mixture_stream` draw their starts' means from the
same keys, run the starts side by side (a leading axis of starts on the engine's state)
and keep the same best start, so a stream of the rows of x gives the fit of x.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from inference.mixture.checks import scaled_smallest_starts

__all__ = ["best_start", "engine_keys", "stack_states", "start_keys"]


@functools.cache
def engine_keys(num_restarts=1):
    """The engine's keys of the starts (the fit draws nothing at random once started)."""
    return jax.random.split(jax.random.key(0), num_restarts)


def start_keys(rng_key, num_restarts):
    """The keys of the starts' means: ``rng_key`` itself first (the single-start fit),
    then keys split off ``fold_in(rng_key, 1)``; Nones without a key (``init_means``)."""
    if rng_key is None:
        return [None] * num_restarts
    if num_restarts == 1:
        return [rng_key]
    return [rng_key, *jax.random.split(jax.random.fold_in(rng_key, 1), num_restarts - 1)]


@jax.jit
def _stack_jit(states):
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *states)


def stack_states(states):
    """The padded starts as one state with a leading axis of starts."""
    return _stack_jit(tuple(states))


def best_start(states, scale, *, mode, prune):
    """Index of the start with the lowest final objective, among those without a
    collapsed component when any (``prune=False``; pruned fits have none)."""
    objective = np.asarray(states.objective, np.float64)
    objective = np.where(np.isfinite(objective), objective, np.inf)
    if not prune and mode != "nearest":
        smallest = np.asarray(scaled_smallest_starts(
            states.covariances, jnp.asarray(scale.inv_scale, states.covariances.dtype)))
        healthy = ~np.any((smallest < scale.floor) & np.asarray(states.active), axis=1)
        if healthy.any():
            objective = np.where(healthy, objective, np.inf)
    return int(np.argmin(objective))
