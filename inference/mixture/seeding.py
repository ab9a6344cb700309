"""k-means++ seeding, shared by every mixture fit (and by MCVQ's VB moves), and the
k-means start of :func:`inference.mixture.em.fit_mixture`.

References
----------
D. Arthur, S. Vassilvitskii, "k-means++: the advantages of careful seeding", SODA 2007;
S. P. Lloyd, "Least squares quantization in PCM", IEEE Transactions on Information
Theory, 1982.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np


def kmeans_plus_plus(rng_key, x, k, num=None):
    """k-means++ seeding (Arthur and Vassilvitskii 2007).

    The first centre is drawn op by op; the loop over the others is one module-level
    jitted function (:func:`_kmeans_plus_plus_loop`), compiled once per shape. (A
    ``fori_loop`` called here directly would be staged out with a new body closure on
    every call, and so compiled again on every fit.)

    ``num`` (optional): x is padded past its first ``num`` rows, the examples (a
    fit's bucketed rows); the whole draw is then one jitted call with ``num`` traced,
    so one program serves every ``num`` of a padded size, and draws the same centres
    as on the ``num`` rows alone (the padding has probability zero).
    """
    keys = jax.random.split(rng_key, k)
    if num is not None:
        return _kmeans_plus_plus_masked(keys, x, jnp.asarray(num, jnp.int32))
    return _kmeans_plus_plus_loop(keys, x, *_first_centre(keys, x, None))


def _first_centre(keys, x, num):
    """The first of the ``keys.shape[0]`` centres, drawn uniformly among the examples
    (the first ``num`` rows, or all), and every row's squared distance to it (0 for a
    padded row): ``(centres, nearest)``."""
    first = x[jax.random.randint(keys[0], (), 0, x.shape[0] if num is None else num)]
    centres = jnp.zeros((keys.shape[0], x.shape[1]), x.dtype).at[0].set(first)
    nearest = jnp.sum((x - first) ** 2, axis=1)
    if num is not None:
        nearest = jnp.where(jnp.arange(x.shape[0]) < num, nearest, 0.0)
    return centres, nearest


@jax.jit
def _kmeans_plus_plus_masked(keys, x, num):
    """:func:`kmeans_plus_plus` on the first ``num`` rows of the padded x."""
    return _kmeans_plus_plus_loop(keys, x, *_first_centre(keys, x, num))


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


def kmeans_start(rng_key, x, k, reg, max_iterations=100, num=None):
    """The start scikit-learn's ``GaussianMixture`` takes by default (``init_params=
    "kmeans"``): k-means++ seeds refined by Lloyd's k-means to a fixed point (at most
    ``max_iterations`` sweeps), then weights, means and full covariances of the hard
    clusters, ``reg`` (scalar or (d,)) added to the diagonals. The seeds are greedy
    k-means++ (each centre the best of 2 + log k candidates drawn as in k-means++,
    by the potential it leaves; Arthur and Vassilvitskii (2007), sec. 6, as
    scikit-learn's ``KMeans`` draws them).

    ``num`` (optional): x is padded past its first ``num`` rows, the examples (a fit's
    bucketed rows, :func:`inference.mixture.algorithm.layout`); ``num`` is then traced,
    so one program serves every ``num`` of a padded size, and the padding takes no part
    (probability zero, no cluster): the same draws and clusters, up to the rounding of
    sums over more rows.

    Returns ``(weights (k,), means (k, d), covariances (k, d, d))``. A cluster left
    with fewer than two points gets the data's per-coordinate variances / k.
    """
    if num is not None:
        num = jnp.asarray(num, jnp.int32)
        seeds = _greedy_kmeans_plus_plus_masked(jax.random.split(rng_key, k), x, num,
                                                num_trials=2 + int(np.log(k)))
        return _lloyd_masked(x, seeds, jnp.asarray(reg, x.dtype), num,
                             max_iterations=max_iterations)
    seeds = _greedy_kmeans_plus_plus(jax.random.split(rng_key, k), x,
                                     num_trials=2 + int(np.log(k)))
    return _lloyd(x, seeds, jnp.asarray(reg, x.dtype), max_iterations=max_iterations)


def _greedy_centres(keys, x, num, num_trials):
    """Greedy k-means++ centres (:func:`kmeans_start`), one key per centre; ``num``: the
    examples are the first ``num`` rows (traced) of a padded x, or None for all rows."""
    k = keys.shape[0]
    centres, nearest = _first_centre(keys, x, num)

    def body(i, carry):
        centres, nearest = carry
        p = nearest / jnp.maximum(jnp.sum(nearest), 1e-30)
        picks = jax.random.choice(keys[i], x.shape[0], (num_trials,), p=p)
        candidates = jnp.minimum(nearest[None, :], jnp.sum(
            (x[None, :, :] - x[picks][:, None, :]) ** 2, axis=2))
        best = jnp.argmin(jnp.sum(candidates, axis=1))
        return centres.at[i].set(x[picks[best]]), candidates[best]

    centres, _ = jax.lax.fori_loop(1, k, body, (centres, nearest))
    return centres


@functools.partial(jax.jit, static_argnames=("num_trials",))
def _greedy_kmeans_plus_plus(keys, x, *, num_trials):
    """Greedy k-means++ centres (:func:`kmeans_start`): one key per centre."""
    return _greedy_centres(keys, x, None, num_trials)


@functools.partial(jax.jit, static_argnames=("num_trials",))
def _greedy_kmeans_plus_plus_masked(keys, x, num, *, num_trials):
    """:func:`_greedy_kmeans_plus_plus` on the first ``num`` rows (traced) of the padded x."""
    return _greedy_centres(keys, x, num, num_trials)


def _lloyd_fit(x, means, reg, num, max_iterations):
    """Lloyd's iterations from ``means`` and the clusters' moments (:func:`kmeans_start`);
    ``num``: the examples are the first ``num`` rows (traced) of a padded x (no cluster
    holds a padded row), or None for all rows."""
    k, dim = means.shape
    if num is None:
        valid = None
        centre = jnp.mean(x, axis=0)
        z = x - centre  # centred: the moments below lose fewer digits
    else:
        valid = (jnp.arange(x.shape[0]) < num)[:, None]
        count = num.astype(x.dtype)
        centre = jnp.sum(jnp.where(valid, x, 0.0), axis=0) / count
        z = jnp.where(valid, x - centre, 0.0)

    def assign(means):
        distance = (jnp.sum(means * means, axis=1)[None, :] - 2.0 * z @ means.T)
        return jnp.argmin(distance, axis=1)

    def one_hot_of(labels):
        one_hot = jax.nn.one_hot(labels, k, dtype=x.dtype)
        return one_hot if valid is None else jnp.where(valid, one_hot, 0.0)

    def update(labels, means):
        one_hot = one_hot_of(labels)
        counts = jnp.sum(one_hot, axis=0)
        sums = one_hot.T @ z
        return counts, jnp.where(counts[:, None] > 0, sums / jnp.maximum(counts, 1.0)[:, None],
                                 means)

    def cond(carry):
        i, labels, previous, _ = carry
        changed = labels != previous
        return (i < max_iterations) & jnp.any(changed if valid is None
                                               else changed & valid[:, 0])

    def body(carry):
        i, labels, _, means = carry
        _, means = update(labels, means)
        return i + 1, assign(means), labels, means

    means = means - centre
    labels = assign(means)
    _, labels, _, means = jax.lax.while_loop(
        cond, body, (0, labels, jnp.full_like(labels, -1), means))
    counts, means = update(labels, means)
    one_hot = one_hot_of(labels)
    residual = z[:, None, :] - means[None, :, :]
    scatter = jnp.einsum("nk,nki,nkj->kij", one_hot, residual, residual)
    # the data's variance (z is centred over the examples)
    variance = jnp.var(x, axis=0) if valid is None else jnp.sum(z * z, axis=0) / count
    fallback = jnp.diag(variance / k)
    cov = jnp.where((counts >= 2)[:, None, None],
                    scatter / jnp.maximum(counts, 1.0)[:, None, None], fallback)
    cov = cov + reg * jnp.eye(dim, dtype=x.dtype)
    weights = jnp.maximum(counts, 1.0) / jnp.sum(jnp.maximum(counts, 1.0))
    return weights, means + centre, cov


@functools.partial(jax.jit, static_argnames=("max_iterations",))
def _lloyd(x, means, reg, *, max_iterations):
    """Lloyd's iterations from ``means`` and the clusters' moments (:func:`kmeans_start`)."""
    return _lloyd_fit(x, means, reg, None, max_iterations)


@functools.partial(jax.jit, static_argnames=("max_iterations",))
def _lloyd_masked(x, means, reg, num, *, max_iterations):
    """:func:`_lloyd` on the first ``num`` rows (traced) of the padded x."""
    return _lloyd_fit(x, means, reg, num, max_iterations)


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


def distinct_rows(rows, k):
    """Up to k distinct rows of ``rows``; sorts a prefix first (4 k rows, at least 1024),
    all rows only when the prefix has fewer than k
    (:func:`has_distinct_rows`)."""
    found = np.unique(rows[:max(4 * k, 1024)], axis=0)
    if found.shape[0] < k and rows.shape[0] > max(4 * k, 1024):
        found = np.unique(rows, axis=0)
    return found[:k]
