"""k-means++ seeding, shared by every mixture fit (and by MCVQ's VB moves)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def kmeans_plus_plus(rng_key, x, k):
    """k-means++ seeding (Arthur and Vassilvitskii 2007).

    The first centre is drawn op by op; the loop over the others is one module-level
    jitted function (:func:`_kmeans_plus_plus_loop`), compiled once per shape. (A
    ``fori_loop`` called here directly would be staged out with a new body closure on
    every call, and so compiled again on every fit.)
    """
    keys = jax.random.split(rng_key, k)
    first = x[jax.random.randint(keys[0], (), 0, x.shape[0])]
    centres = jnp.zeros((k, x.shape[1]), x.dtype).at[0].set(first)
    nearest = jnp.sum((x - first) ** 2, axis=1)
    return _kmeans_plus_plus_loop(keys, x, centres, nearest)


@jax.jit
def _kmeans_plus_plus_loop(keys, x, centres, nearest):
    """Centres 1 .. k - 1 of :func:`kmeans_plus_plus`, each drawn with probability
    proportional to the squared distance to the nearest centre so far."""

    def body(i, carry):
        centres, nearest = carry
        p = nearest / jnp.maximum(jnp.sum(nearest), 1e-30)
        pick = x[jax.random.choice(keys[i], x.shape[0], p=p)]
        return centres.at[i].set(pick), jnp.minimum(nearest, jnp.sum((x - pick) ** 2, axis=1))

    centres, _ = jax.lax.fori_loop(1, centres.shape[0], body, (centres, nearest))
    return centres


def has_distinct_rows(x, k):
    """Whether x (numpy, (N, d)) has at least k distinct rows.

    Counts the distinct rows of a prefix first (4 k rows, at least 1024) and sorts
    all N rows only when the prefix has fewer than k: on ordinary data the check
    costs microseconds instead of a sort of the whole array.
    """
    prefix = x[:max(4 * k, 1024)]
    if np.unique(prefix, axis=0).shape[0] >= k:
        return True
    return prefix.shape[0] < x.shape[0] and np.unique(x, axis=0).shape[0] >= k


