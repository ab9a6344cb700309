"""The online learning rules of the mixture (adaptive EM, CL, FSCL, CL-posterior,
RPCL): their state, one step, a run over a stream and the start.

Section and equation numbers refer to L. Xu, "YING-YANG machine: a Bayesian-Kullback
scheme for unified learnings and new results on vector quantization", Proceedings of
the International Conference on Neural Information Processing (ICONIP'95), 1995.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from inference.mixture.features import component_log_joint, project
from inference.mixture.seeding import kmeans_plus_plus
from ppl_models import mixture
from ppl_models.validation import check_choice

#: Online methods of :func:`step` (module docstring).
METHODS = ("adaptive_em", "cl", "fscl", "cl_posterior", "rpcl")
#: Learning-rate schedules (module docstring).
SCHEDULES = ("constant", "harmonic", "count")
#: Winner (and rival) criteria of the competitive methods.
CRITERIA = ("distance", "frequency", "posterior")
#: How the rival's rate is set (module docstring).
DELEARNING = ("constant", "posterior", "local")
DEFAULT_CRITERION = {"adaptive_em": "posterior", "cl": "distance", "fscl": "frequency",
                      "cl_posterior": "posterior", "rpcl": "posterior"}


class OnlineState(NamedTuple):
    """State of an online mixture learner.

    Attributes
    ----------
    weights : array (k,)
        alpha_y = P_M2(y), summing to 1 over active units (0 for pruned ones).
    means : array (k, d)
    covariances : array (k, d, d)
    counts : array (k,)
        Wins of every unit so far (adaptive EM: the posterior mass absorbed).
    t : scalar
        Examples the parameters summarise: ``prior_count`` plus those absorbed.
    num_steps : int32 scalar
        Steps taken.
    active : bool array (k,)
        False for units pruned by adaptive EM.
    previous_weights, previous_means, previous_covariances : arrays
        The kept copy of the parameters (adaptive EM's "second latest values").
    """

    weights: jax.Array
    means: jax.Array
    covariances: jax.Array
    counts: jax.Array
    t: jax.Array
    num_steps: jax.Array
    active: jax.Array
    previous_weights: jax.Array
    previous_means: jax.Array
    previous_covariances: jax.Array


class OnlineInfo(NamedTuple):
    """Per-step information.

    Attributes
    ----------
    winner : int32
        The winning unit (adaptive EM: the most probable one).
    rival : int32
        The rival (``"rpcl"``), else -1.
    learning_rate, delearning_rate : scalar
        The winner's and the rival's rates used (adaptive EM: the largest |h / a_y|, 0).
    log_likelihood : scalar
        log p(x_t) = logsumexp_y of the program's log joint, before the step.
    num_active : int32
        Active units after the step.
    """

    winner: jax.Array
    rival: jax.Array
    learning_rate: jax.Array
    delearning_rate: jax.Array
    log_likelihood: jax.Array
    num_active: jax.Array


def init(rng_key, x, num_components: int, *, init_method: str = "kmeans++", means=None,
         weights=None, covariances=None, covariance: str = "full",
         prior_count=None) -> OnlineState:
    """Initial state; jittable (``num_components``, ``init_method``, ``covariance`` static).

    Means: ``means`` if given, else k-means++ seeding (``"kmeans++"``) or random
    examples plus noise of 1% of the data's spread (``"random"``, sec. 5.2).
    Weights equal; covariances sigma^2 I with sigma^2 = E_MSE / d, the starting
    means' mean squared quantisation error per dimension (the optimal sigma^2 of
    L_NN, eq. 22; floored at 1e-3 of the data's mean variance). Sec. 5.2's
    (data variance) / k is too broad for a stream when the clusters lie far
    apart: one unit then covers neighbouring clusters, its weight grows, and
    with the posterior winner (eq. 28) it keeps them. ``prior_count`` (default k)
    is t at the start: the pseudo-examples the starting parameters stand for.
    """
    k, dim = num_components, x.shape[1]
    spread = jnp.mean(jnp.var(x, axis=0))
    if means is None:
        key_means, key_noise = jax.random.split(rng_key)
        if init_method == "kmeans++":
            means = kmeans_plus_plus(key_means, x, k)
        else:
            rows = jax.random.choice(key_means, x.shape[0], (k,), replace=False)
            means = x[rows] + 0.01 * jnp.sqrt(spread) * jax.random.normal(key_noise, (k, dim))
    means = jnp.asarray(means, x.dtype)
    weights = jnp.full(k, 1.0 / k, x.dtype) if weights is None else jnp.asarray(weights, x.dtype)
    weights = weights / jnp.sum(weights)
    if covariances is None:  # sigma^2 = E_MSE / d of the starting means (eq. 22's optimum)
        e_mse = jnp.mean(jnp.min(jnp.sum((x[:, None, :] - means[None]) ** 2, -1), axis=1))
        variance = jnp.maximum(e_mse / dim, 1e-3 * spread)
        covariances = jnp.broadcast_to(variance * jnp.eye(dim, dtype=x.dtype), (k, dim, dim))
    covariances = project(jnp.asarray(covariances, x.dtype), covariance)
    t = jnp.asarray(float(k) if prior_count is None else prior_count, x.dtype)
    return OnlineState(weights, means, covariances, jnp.zeros(k, x.dtype), t,
                       jnp.asarray(0, jnp.int32), jnp.ones(k, bool), weights, means, covariances)


def _log_joint(x, weights, means, covariances, active, covariance, reg_covar):
    """The program's log joint (N, k), -inf for inactive units."""
    eye = jnp.eye(means.shape[1], dtype=means.dtype)
    safe = jnp.where(active, weights, 0.0)
    safe = safe / jnp.sum(safe)  # exactly on the simplex (the program may validate it)
    log_joint = component_log_joint(x, safe, means, covariances + reg_covar * eye,
                                     covariance=covariance)
    return jnp.where(active, log_joint, -jnp.inf)


def _scores(x_t, state, criterion, covariance, reg_covar):
    """Winner criterion of every unit (lower wins; +inf if inactive), log joint (k,), log p(x_t)."""
    log_joint = _log_joint(x_t[None], state.weights, state.means, state.covariances,
                           state.active, covariance, reg_covar)[0]
    log_px = jax.nn.logsumexp(log_joint)
    if criterion == "posterior":
        score = -log_joint
    else:
        score = jnp.sum((x_t - state.means) ** 2, axis=1)
        if criterion == "frequency":
            score = score * (state.counts + 1.0) / jnp.sum(state.counts + 1.0)
    return jnp.where(state.active, score, jnp.inf), log_joint, log_px


def _adaptive_em(state, x_t, covariance, reg_covar, old_posterior, num_examples, min_weight):
    log_joint = _log_joint(x_t[None], state.weights, state.means, state.covariances,
                           state.active, covariance, reg_covar)[0]
    log_px = jax.nn.logsumexp(log_joint)
    new_post = jnp.exp(log_joint - log_px)
    if old_posterior == "previous" and num_examples is not None:
        replace = state.num_steps >= num_examples
        old_joint = _log_joint(x_t[None], state.previous_weights, state.previous_means,
                               state.previous_covariances, state.active, covariance,
                               reg_covar)[0]
        old_post = jnp.where(replace, jnp.exp(old_joint - jax.nn.logsumexp(old_joint)), 0.0)
    else:
        replace = jnp.asarray(False)
        old_post = jnp.zeros_like(new_post)
    h = jnp.where(state.active, (new_post - old_post) / state.t, 0.0)
    raw = state.weights + h                                    # a_y of eq. 25
    alive = state.active & (raw / jnp.sum(raw) >= min_weight)
    denom = jnp.where(alive, raw, 1.0)
    ratio, gain = state.weights / denom, h / denom
    means = state.means + gain[:, None] * (x_t - state.means)  # = ratio m + gain x
    diff = x_t - state.means
    outer = project(diff[:, :, None] * diff[:, None, :], covariance)
    cov = ratio[:, None, None] * state.covariances + gain[:, None, None] * outer
    cov = 0.5 * (cov + jnp.swapaxes(cov, -1, -2))
    chol = jnp.linalg.cholesky(cov)
    positive = jnp.all(jnp.isfinite(chol), axis=(1, 2)) & jnp.all(
        jnp.diagonal(chol, axis1=1, axis2=2) > 0, axis=1)
    cov = jnp.where(positive[:, None, None], cov, ratio[:, None, None] * state.covariances)
    weights = jnp.where(alive, raw, 0.0)
    weights = weights / jnp.sum(weights)
    keep = alive[:, None]
    state = state._replace(
        weights=weights, means=jnp.where(keep, means, state.means),
        covariances=jnp.where(keep[..., None], cov, state.covariances),
        counts=state.counts + jnp.where(alive, new_post, 0.0),
        t=state.t + jnp.where(replace, 0.0, 1.0), num_steps=state.num_steps + 1, active=alive,
        previous_weights=state.weights, previous_means=state.means,
        previous_covariances=state.covariances)
    info = OnlineInfo(jnp.argmax(log_joint).astype(jnp.int32), jnp.asarray(-1, jnp.int32),
                      jnp.max(jnp.abs(jnp.where(alive, gain, 0.0))), jnp.zeros((), x_t.dtype),
                      log_px, jnp.sum(alive).astype(jnp.int32))
    return state, info


def step(state: OnlineState, x_t, *, method: str = "rpcl", criterion=None, delearning=None,
         learning_rate=0.05, delearning_rate=0.02, schedule: str = "constant",
         covariance: str = "full", old_posterior: str = "zero", num_examples=None,
         reg_covar=1e-6, min_weight=1e-4):
    """One online step on the example ``x_t`` (d,); returns (state, :class:`OnlineInfo`).

    Pure and jittable with ``method``, ``criterion``, ``delearning``, ``schedule``,
    ``covariance``, ``old_posterior`` and ``num_examples`` static. See the module
    docstring for the methods, criteria, de-learning and schedules. ``criterion``
    None takes the method's (``"cl"`` distance, ``"fscl"`` frequency, the others
    posterior); adaptive EM always uses the posterior. ``delearning`` None is
    ``"local"`` for the posterior criterion, else ``"constant"``. ``num_examples``
    (adaptive EM with ``old_posterior="previous"``) is the size of the data set
    the stream cycles over: from that step on examples are revisits.
    ``reg_covar`` is added to the covariance diagonals when the posterior is
    evaluated; ``min_weight`` is adaptive EM's pruning threshold on alpha_y.
    """
    check_choice(method, "method", METHODS)
    check_choice(covariance, "covariance", mixture.COVARIANCES)
    if method == "adaptive_em":
        check_choice(old_posterior, "old_posterior", ("zero", "previous"))
        return _adaptive_em(state, x_t, covariance, reg_covar, old_posterior, num_examples,
                            min_weight)
    criterion = DEFAULT_CRITERION[method] if criterion is None else criterion
    if delearning is None:
        delearning = "local" if criterion == "posterior" else "constant"
    check_choice(criterion, "criterion", CRITERIA)
    check_choice(delearning, "delearning", DELEARNING)
    check_choice(schedule, "schedule", SCHEDULES)
    score, log_joint, log_px = _scores(x_t, state, criterion, covariance, reg_covar)
    k = score.shape[0]
    c = jnp.argmin(score).astype(jnp.int32)
    n_c = state.counts[c] + 1.0
    if schedule == "count":
        eta, eta_cov = 1.0 / n_c, 1.0 / (n_c + 1.0)
    else:
        factor = 1.0 / (1.0 + learning_rate * state.num_steps) if schedule == "harmonic" else 1.0
        eta = eta_cov = learning_rate * factor
    diff = x_t - state.means[c]
    means = state.means.at[c].add(eta * diff)
    rival, eta_r = jnp.asarray(-1, jnp.int32), jnp.zeros((), x_t.dtype)
    if method == "rpcl" and k > 1:
        rival_score = score.at[c].set(jnp.inf)
        r = jnp.argmin(rival_score).astype(jnp.int32)
        has_rival = jnp.isfinite(rival_score[r])
        if schedule == "count":
            eta_r = delearning_rate / (state.counts[r] + 1.0)
        else:
            eta_r = delearning_rate * factor
        if delearning == "posterior":  # P_new(r|x_t) of eq. "20": the rival's share of c, r
            eta_r = eta_r * jax.nn.sigmoid(log_joint[r] - log_joint[c])
        elif delearning == "local":
            dist = jnp.sum((x_t - state.means[jnp.stack([c, r])]) ** 2, axis=1)
            var = jnp.trace(state.covariances[c]) / x_t.shape[0]
            share = 2.0 * jax.nn.sigmoid((dist[0] - dist[1]) / (2.0 * var))
            eta_r = eta_r * jnp.minimum(1.0, share)
        eta_r = jnp.where(has_rival, eta_r, 0.0)
        means = means.at[r].add(-eta_r * (x_t - state.means[r]))
        rival = jnp.where(has_rival, r, -1).astype(jnp.int32)
    weights, cov = state.weights, state.covariances
    if criterion == "posterior":  # eq. 25 with winner-take-all: h(c|x_t) = 1/t
        weights = (state.t * weights + jax.nn.one_hot(c, k, dtype=weights.dtype)) / (state.t + 1)
        outer = project((diff[:, None] * diff[None, :])[None], covariance)[0]
        cov = cov.at[c].set((1.0 - eta_cov) * cov[c] + eta_cov * outer)
    state = state._replace(weights=weights, means=means, covariances=cov,
                           counts=state.counts.at[c].add(1.0), t=state.t + 1.0,
                           num_steps=state.num_steps + 1)
    info = OnlineInfo(c, rival, jnp.asarray(eta, x_t.dtype), jnp.asarray(eta_r, x_t.dtype),
                      log_px, jnp.sum(state.active).astype(jnp.int32))
    return state, info


@functools.partial(jax.jit, static_argnames=("method", "criterion", "delearning", "schedule",
                                             "covariance", "old_posterior", "num_examples"))
def run(state: OnlineState, stream, *, method: str = "rpcl", criterion=None, delearning=None,
        learning_rate=0.05, delearning_rate=0.02, schedule: str = "constant",
        covariance: str = "full", old_posterior: str = "zero", num_examples=None,
        reg_covar=1e-6, min_weight=1e-4):
    """:func:`step` over every row of ``stream`` (T, d) by ``lax.scan``; jitted.

    Returns (final state, :class:`OnlineInfo` with every field stacked to (T,)).
    """
    def body(state, x_t):
        return step(state, x_t, method=method, criterion=criterion, delearning=delearning,
                    learning_rate=learning_rate, delearning_rate=delearning_rate,
                    schedule=schedule, covariance=covariance, old_posterior=old_posterior,
                    num_examples=num_examples, reg_covar=reg_covar, min_weight=min_weight)

    return jax.lax.scan(body, state, stream)


def stream_order(rng_key, num_examples: int, num_passes: int):
    """Indices (num_passes * num_examples,): one random permutation per pass.

    Pass p uses ``jax.random.permutation(jax.random.fold_in(rng_key, p), num_examples)``.
    """
    return jnp.concatenate([jax.random.permutation(jax.random.fold_in(rng_key, p), num_examples)
                            for p in range(num_passes)])


def assign(x, state, by_posterior, covariance, reg_covar, mask):
    """Hard labels (N,) among the units in ``mask`` and the mixture's log p(x) (N,)."""
    log_joint = _log_joint(x, state.weights, state.means, state.covariances, state.active,
                           covariance, reg_covar)
    log_px = jax.nn.logsumexp(log_joint, axis=1)
    if by_posterior:
        labels = jnp.argmax(jnp.where(mask, log_joint, -jnp.inf), axis=1)
    else:
        distances = jnp.sum((x[:, None, :] - state.means[None]) ** 2, axis=-1)
        labels = jnp.argmin(jnp.where(mask, distances, jnp.inf), axis=1)
    return labels, log_px


