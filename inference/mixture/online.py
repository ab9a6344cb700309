"""Online learning of the Gaussian-mixture program: adaptive EM and competitive learning.

Seed 002 sec. 6 (``shared/MODELS.md`` 3). Every method is a pure, jittable
:func:`step` that takes one example x_t of a stream, with :func:`run` (a
``lax.scan`` over a stream) and the driver :func:`fit_online` (shuffled passes
over a data set, traced every ``trace_every`` steps). Posteriors are read from
the program through :func:`inference.mixture.features.component_log_joint`.

Methods (``METHODS``):

* ``"adaptive_em"`` -- eq. 25. With P^(t+1)(y|x_t) the posterior of x_t under the
  current parameters and h(y|x_t) = [P^(t+1)(y|x_t) - P^(t)(y|x_t)] / t::

      a_y = alpha_y + h,  m_y <- (alpha_y / a_y) m_y + (h / a_y) x_t,
      Sigma_y <- (alpha_y / a_y) Sigma_y + (h / a_y) (x_t - m_y)(x_t - m_y)^T,

  where t is the number of examples the parameters summarise (``state.t``:
  ``prior_count`` pseudo-examples for the start plus the examples absorbed).
  P^(t)(y|x_t) is the posterior x_t had when it last entered the statistics.

  ``old_posterior="zero"`` (the default) is the paper's trick P^(t) = 0: every
  example enters as a new one. Then sum_y a_y = 1 + 1/t and the weights are
  renormalised, which makes eq. 25 exact for a data set grown by one example
  (alpha, m, Sigma are the running weighted statistics of all examples seen,
  each weighted by its posterior at its visit; stochastic-approximation EM
  with step 1/t), and t grows by one.

  ``old_posterior="previous"`` is the paper's adaptive estimate: P^(t)(y|x_t)
  is the posterior of x_t under the "second latest values", the parameters
  before the last step (``state.previous_*``). While the stream has not yet
  cycled (the first ``num_examples`` steps; always, if ``num_examples`` is None)
  every example is new and P^(t) = 0 exactly; afterwards x_t's old contribution
  is replaced by its new one (sum_y h = 0, t stays). Measured and tested: after
  the first pass it does not move the parameters any more. h is then the
  change of x_t's posterior caused by the last step, so it is 0 whenever the
  parameters stand still: every parameter value is a fixed point. The same
  holds for any P^(t) computed from the method's own past parameters (a copy
  kept once per pass included), which is why "zero" is the default.
  In both, a weight that would fall below
  ``min_weight`` prunes its unit: weight 0, parameters frozen, no further part
  (the paper's footnote 4: discard the code book m_y when P(y) = 0); a
  covariance that would lose positive definiteness (negative h) keeps only
  its first term (alpha_y / a_y) Sigma_y.
* ``"cl"`` -- classical competitive learning: winner c = argmin_y ||x_t - m_y||^2,
  m_c <- m_c + eta (x_t - m_c); weights and covariances stay as started.
* ``"fscl"`` -- frequency-sensitive CL (Ahalt et al. 1990): winner by
  f_y ||x_t - m_y||^2, f_y = (n_y + 1) / sum_r (n_r + 1) the unit's win frequency.
* ``"cl_posterior"`` -- eq. 27-28: winner c = argmax_y P(y | x_t) = argmin_y
  (x - m_y)^T Sigma_y^{-1} (x - m_y) + log|Sigma_y| - 2 log alpha_y (the program's
  log joint; MODELS.md's corrected factor 2). The winner's covariance and the
  weights adapt too, eq. 25 with winner-take-all (h(c|x_t) = 1/t):
  Sigma_c <- (1 - eta_S) Sigma_c + eta_S (x_t - m_c)(x_t - m_c)^T and
  alpha <- (t alpha + e_c) / (t + 1) (the win frequency, ``prior_count``
  pseudo-examples at the start weights).
* ``"rpcl"`` -- rival penalised CL (Xu, Krzyzak and Oja 1993; the paper's eq.
  "20" of sec. 6.2): winner c and rival r (the second best) by ``criterion``
  (``"posterior"``, the default, as eq. 28 and the paper's improvement;
  ``"frequency"``, the original RPCL; or ``"distance"``); the winner learns
  as in CL, the rival de-learns: m_r <- m_r - eta_r (x_t - m_r). With the
  posterior criterion the winner's covariance and the weights adapt as in
  ``"cl_posterior"``. Extra units are pushed off the data and stop winning,
  which selects the number of clusters. The rival's rate (``delearning``):

  - ``"constant"`` (the original RPCL; default for the distance and frequency
    criteria): eta_r = ``delearning_rate`` (times the schedule's decay);
  - ``"local"`` (default for the posterior criterion): eta_r times
    min(1, 2 sigmoid((||x_t - m_c||^2 - ||x_t - m_r||^2) / (2 sigma_c^2))),
    sigma_c^2 = tr(Sigma_c) / d: the rival's share P_new(r|x_t) of eq. "20"
    under CL's assumptions (equal weights, Sigma = sigma_c^2 I), doubled so
    that a rival as near as the winner de-learns at the full rate. A rival
    inside the winner's cluster is pushed out; the unit of a cluster several
    sigma away is hardly touched. With ``"constant"`` every data point pushes
    its rival, usually the unit of a neighbouring cluster, so good units are
    biased away from their clusters by about (eta_r / eta) times the distance
    between clusters, and may be pushed off altogether;
  - ``"posterior"``: eta_r times the rival's share under the program's full
    posterior (eq. "20" with P_new). Extra units whose covariance has shrunk
    stop being pushed, and stay inside the data, winning nothing.

Learning rates (``schedule``): ``"constant"`` eta = ``learning_rate``, eta_r =
``delearning_rate``; ``"harmonic"`` both times 1 / (1 + learning_rate * s) at
step s = 0, 1, ... (Robbins-Monro: sum eta = inf, sum eta^2 < inf; about 1/s
late); ``"count"`` eta = 1 / n_c with n_c the winner's wins including this one
(the paper's beta_c / t of eq. 27; m_c is then exactly the running mean of the
examples c has won) and eta_r = ``delearning_rate`` / (n_r + 1). The
covariance rate eta_S is eta, except under ``"count"``, where it is 1 / (n_c + 1)
(the starting covariance counts as one pseudo-example, so a first win cannot
make Sigma_c singular). Not offered: the paper's adaptive estimate
beta_c [1 - P^(t)(c|x_t)] / t.

References
----------
Xu (1995), YING-YANG machine, sec. 6.1 (eq. 25), 6.2 (eq. 27-28, "20").
Xu, Krzyzak and Oja (1993), Rival penalized competitive learning, IEEE TNN 4(4).
Ahalt, Krishnamurthy, Chen and Melton (1990), Competitive learning algorithms
for vector quantization, Neural Networks 3(3).
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference.engine import host
from inference.mixture.features import component_log_joint, project
from inference.mixture.seeding import kmeans_plus_plus
from ppl_models import mixture
from ppl_models.diagnostics import NumericalWarning
from ppl_models.validation import (
    MissingKeyError,
    check_choice,
    check_data,
    check_positive,
    check_positive_int,
    check_rng_key,
)

__all__ = ["METHODS", "SCHEDULES", "CRITERIA", "DELEARNING", "OnlineState", "OnlineInfo",
           "OnlineResult", "init", "step", "run", "stream_order", "fit_online"]

#: Online methods of :func:`step` (module docstring).
METHODS = ("adaptive_em", "cl", "fscl", "cl_posterior", "rpcl")
#: Learning-rate schedules (module docstring).
SCHEDULES = ("constant", "harmonic", "count")
#: Winner (and rival) criteria of the competitive methods.
CRITERIA = ("distance", "frequency", "posterior")
#: How the rival's rate is set (module docstring).
DELEARNING = ("constant", "posterior", "local")
_DEFAULT_CRITERION = {"adaptive_em": "posterior", "cl": "distance", "fscl": "frequency",
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


class OnlineResult(NamedTuple):
    """Result of :func:`fit_online`.

    Attributes
    ----------
    weights : array (m,)
        Weights of the m used units, renormalised.
    means : array (m, d)
    covariances : array (m, d, d)
    num_components : int
        m, the used units: active units whose share of the data under the final
        hard assignment (over all k units) is at least ``min_share``.
    labels : int32 array (num_examples,)
        Hard assignment of every example among the used units (index into the
        arrays above): by posterior for ``"adaptive_em"``, ``"cl_posterior"`` and
        ``"rpcl"`` with the posterior criterion, else to the nearest mean.
    used : bool array (k,)
    shares : array (k,)
        Share of the data every starting unit wins under the final assignment.
    all_weights, all_means, all_covariances : arrays (k,), (k, d), (k, d, d)
        Every starting unit, used or not.
    distance_to_data : array (k,)
        Distance of every unit's mean to its nearest example (how far RPCL drove
        the extra units off the data).
    displacement : array (k,)
        ||m_y(end) - m_y(start)|| for every unit.
    win_counts : array (k,)
    error_trace : array (num_traces,)
        E_MSE, the mean squared distance of the examples to their assigned unit,
        after every ``trace_every`` steps (and at the end).
    log_likelihood_trace : array (num_traces,)
        Mean log-likelihood of the data under the mixture of the active units.
    num_used_trace : int array (num_traces,)
        Units with share >= ``min_share`` at every trace point.
    trace_steps : int array (num_traces,)
    num_steps : int
    nonfinite : bool
        True when a parameter became non-finite (a NumericalWarning says so).
    num_start : int
    method, criterion, schedule, covariance : str
    """

    weights: jax.Array
    means: jax.Array
    covariances: jax.Array
    num_components: int
    labels: jax.Array
    used: jax.Array
    shares: jax.Array
    all_weights: jax.Array
    all_means: jax.Array
    all_covariances: jax.Array
    distance_to_data: jax.Array
    displacement: jax.Array
    win_counts: jax.Array
    error_trace: jax.Array
    log_likelihood_trace: jax.Array
    num_used_trace: jax.Array
    trace_steps: jax.Array
    num_steps: int
    nonfinite: bool
    num_start: int
    method: str
    criterion: str
    schedule: str
    covariance: str


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
    _choice(method, "method", METHODS)
    _choice(covariance, "covariance", mixture.COVARIANCES)
    if method == "adaptive_em":
        _choice(old_posterior, "old_posterior", ("zero", "previous"))
        return _adaptive_em(state, x_t, covariance, reg_covar, old_posterior, num_examples,
                            min_weight)
    criterion = _DEFAULT_CRITERION[method] if criterion is None else criterion
    if delearning is None:
        delearning = "local" if criterion == "posterior" else "constant"
    _choice(criterion, "criterion", CRITERIA)
    _choice(delearning, "delearning", DELEARNING)
    _choice(schedule, "schedule", SCHEDULES)
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


def _assign(x, state, by_posterior, covariance, reg_covar, mask):
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


_init_jit = jax.jit(init, static_argnames=("num_components", "init_method", "covariance"))
_stream_jit = jax.jit(lambda key, x, num_passes: x[stream_order(key, x.shape[0], num_passes)],
                      static_argnames=("num_passes",))


@functools.partial(jax.jit, static_argnames=("num_chunks", "trace_every", "by_posterior",
                                             "options"))
def _fit(x, stream, state, min_share, numbers, *, num_chunks, trace_every, by_posterior,
         options):
    """The stream in chunks of ``trace_every`` steps (scan in scan), traced after each chunk."""
    opts = dict(options)
    total = stream.shape[0]
    pad = num_chunks * trace_every - total
    stream = jnp.concatenate([stream, jnp.zeros((pad, x.shape[1]), x.dtype)])
    valid = jnp.arange(num_chunks * trace_every) < total
    chunks = (stream.reshape(num_chunks, trace_every, -1), valid.reshape(num_chunks, -1))

    def one(state, inputs):
        x_t, ok = inputs
        new, _ = step(state, x_t, **opts, **numbers)
        return jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, state), None

    def chunk(state, inputs):
        state, _ = jax.lax.scan(one, state, inputs)
        labels, log_px = _assign(x, state, by_posterior, opts["covariance"],
                                 numbers["reg_covar"], state.active)
        e_mse = jnp.mean(jnp.sum((x - state.means[labels]) ** 2, axis=1))
        shares = jnp.bincount(labels, length=state.means.shape[0]) / x.shape[0]
        used = jnp.sum(state.active & (shares >= min_share)).astype(jnp.int32)
        return state, (e_mse, jnp.mean(log_px), used, state.num_steps)

    return jax.lax.scan(chunk, state, chunks)


@functools.partial(jax.jit, static_argnames=("by_posterior", "covariance"))
def _summary(x, state, start_means, min_share, reg_covar, *, by_posterior, covariance):
    """Shares, used units, labels among them, distances to the data, finiteness."""
    k = state.means.shape[0]
    labels, _ = _assign(x, state, by_posterior, covariance, reg_covar, state.active)
    shares = jnp.bincount(labels, length=k) / x.shape[0]
    used = state.active & (shares >= min_share)
    # min_share <= 1/k always leaves one; otherwise keep the unit with the largest share.
    used = jnp.where(jnp.any(used), used, jnp.arange(k) == jnp.argmax(shares))
    labels, _ = _assign(x, state, by_posterior, covariance, reg_covar, used)
    distance = jnp.sqrt(jnp.min(jnp.sum((state.means[:, None] - x[None]) ** 2, -1), axis=1))
    finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(a)) for a in
                                (state.weights, state.means, state.covariances)]))
    return {"shares": shares, "used": used, "labels": labels, "distance": distance,
            "displacement": jnp.linalg.norm(state.means - start_means, axis=1),
            "finite": finite}


def _used_weights(weights, used, keep):
    """The weights of the used units (indices ``keep``, mask ``used``), renormalised.

    Computed on all k units (a fixed shape: nothing is compiled anew when a fit keeps
    a new number of units; the unused weights are zeroed out of the sum) and the used
    ones taken on the host. XLA's CPU backend adds up to 32 numbers in order, so the
    zeros change nothing there; beyond that, the sum may differ from one over the used
    weights alone by float rounding.
    """
    total = jnp.sum(jnp.where(host.array(used), weights, jnp.zeros((), weights.dtype)))
    return host.take(weights / jnp.maximum(total, 1e-30), keep)


def _check_rate(value, name, *, lower_open=True, upper=1.0):
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise TypeError(f"{name} must be a number; got {value!r} ({type(value).__name__})")
    value = float(value)
    low_ok = value > 0 if lower_open else value >= 0
    if not (math.isfinite(value) and low_ok and value <= upper):
        bound = "(0, 1]" if lower_open else "[0, 1]"
        raise ValueError(f"{name} must lie in {bound}; got {value}")
    return value


_choice = check_choice  # the shared check (ppl_models.validation)


def fit_online(x, num_components: int, *, method: str = "rpcl", rng_key=None,
               num_passes: int = 1, learning_rate: float = 0.05,
               delearning_rate: float = 0.02, schedule: str = "constant", criterion=None,
               delearning=None,
               covariance: str = "full", old_posterior: str = "zero",
               init: str = "kmeans++", init_means=None, prior_count=None,
               trace_every=None, min_share: float = 0.01, reg_covar: float = 1e-6,
               min_weight: float = 1e-4) -> OnlineResult:
    """Learn a mixture online from a shuffled stream of the examples of ``x``.

    Parameters
    ----------
    x : array (num_examples, d)
    num_components : int
        Units k at the start (at most the number of distinct examples).
    method : {"adaptive_em", "cl", "fscl", "cl_posterior", "rpcl"}
    rng_key : jax.random key
        Shuffles every pass (:func:`stream_order`) and, unless ``init_means`` is
        given, draws the initial means.
    num_passes : int
        Passes over the data; the stream has num_passes * num_examples steps.
    learning_rate, delearning_rate : float
        Winner's rate in (0, 1] and rival's rate in [0, 1] (``"rpcl"``); see
        ``schedule``. Unused by adaptive EM, whose rate is h / a_y (eq. 25).
    schedule : {"constant", "harmonic", "count"}
    criterion : {"distance", "frequency", "posterior"}, optional
        Winner and rival criterion of the competitive methods (default: the method's).
    covariance : {"full", "diag", "spherical"}
    delearning : {"constant", "local", "posterior"}, optional
        How the rival's rate is set (module docstring); default ``"local"`` for the
        posterior criterion, else ``"constant"``.
    old_posterior : {"zero", "previous"}
        Adaptive EM's P^(t)(y|x_t): 0 (every visit a new example), or the posterior
        under the parameters before the last step from the second pass on
        (module docstring).
    init : {"kmeans++", "random"}
    init_means : array (k, d), optional
    prior_count : float, optional
        Pseudo-examples the starting parameters stand for (default k).
    trace_every : int, optional
        Steps between trace points (default: one pass).
    min_share : float
        A unit is used when it wins at least this share of the data at the end.
    reg_covar : float
        Added to covariance diagonals when the posterior is evaluated.
    min_weight : float
        Adaptive EM prunes a unit whose weight falls below it.

    Returns
    -------
    OnlineResult
    """
    _choice(method, "method", METHODS)
    _choice(schedule, "schedule", SCHEDULES)
    _choice(covariance, "covariance", mixture.COVARIANCES)
    _choice(old_posterior, "old_posterior", ("zero", "previous"))
    _choice(init, "init", ("kmeans++", "random"))
    criterion = _DEFAULT_CRITERION[method] if criterion is None else criterion
    _choice(criterion, "criterion", CRITERIA)
    delearning = ("local" if criterion == "posterior" else "constant") if (
        delearning is None) else delearning
    _choice(delearning, "delearning", DELEARNING)
    if method == "adaptive_em" and criterion != "posterior":
        raise ValueError(f"criterion must be 'posterior' (or None) for method='adaptive_em'; "
                         f"got {criterion!r}")
    x = check_data(x, "x")
    num, dim = x.shape
    k = check_positive_int(num_components, "num_components")
    distinct = int(np.unique(np.asarray(x), axis=0).shape[0])
    if k > distinct:
        raise ValueError(f"num_components={k} exceeds the {distinct} distinct example(s) in x")
    if float(jnp.mean(jnp.var(x, axis=0))) == 0.0:
        raise ValueError("x has no spread (every example is the same point): nothing to fit")
    num_passes = check_positive_int(num_passes, "num_passes")
    learning_rate = _check_rate(learning_rate, "learning_rate")
    delearning_rate = _check_rate(delearning_rate, "delearning_rate", lower_open=False)
    min_share = _check_rate(min_share, "min_share", lower_open=False)
    min_weight = _check_rate(min_weight, "min_weight")
    if reg_covar:
        check_positive(reg_covar, "reg_covar")
    if prior_count is not None:
        check_positive(prior_count, "prior_count")
    total = num * num_passes
    trace_every = num if trace_every is None else check_positive_int(trace_every, "trace_every")
    trace_every = min(trace_every, total)
    if rng_key is None:
        raise MissingKeyError("rng_key is required (it shuffles the stream)")
    check_rng_key(rng_key)
    key_init, key_order = jax.random.split(rng_key)
    if init_means is not None:
        init_means = jnp.asarray(init_means, x.dtype)
        if init_means.shape != (k, dim) or not bool(jnp.all(jnp.isfinite(init_means))):
            raise ValueError(f"init_means must be finite with shape ({k}, {dim}); "
                             f"got shape {init_means.shape}")
    by_posterior = method == "adaptive_em" or criterion == "posterior"
    options = (("covariance", covariance), ("criterion", criterion), ("delearning", delearning),
               ("method", method), ("num_examples", num), ("old_posterior", old_posterior),
               ("schedule", schedule))
    numbers = {"learning_rate": learning_rate, "delearning_rate": delearning_rate,
               "reg_covar": float(reg_covar), "min_weight": min_weight}
    state = _init_jit(key_init, x, k, init_method=init, means=init_means,
                      covariance=covariance, prior_count=prior_count)
    start_means = state.means
    stream = _stream_jit(key_order, x, num_passes=num_passes)
    state, (e_trace, ll_trace, used_trace, steps) = _fit(
        x, stream, state, min_share, numbers, num_chunks=-(-total // trace_every),
        trace_every=trace_every, by_posterior=by_posterior, options=options)
    summary = _summary(x, state, start_means, min_share, float(reg_covar),
                       by_posterior=by_posterior, covariance=covariance)
    used = np.asarray(summary["used"])
    keep = np.flatnonzero(used)
    remap = np.full(k, -1, np.int32)
    remap[keep] = np.arange(keep.size, dtype=np.int32)
    weights = _used_weights(state.weights, used, keep)
    nonfinite = not bool(summary["finite"])
    if nonfinite:
        warnings.warn(f"fit_online: non-finite parameters after {method!r}; lower the learning "
                      "rates or raise reg_covar", NumericalWarning, stacklevel=2)
    return OnlineResult(
        weights=weights, means=host.take(state.means, keep),
        covariances=host.take(state.covariances, keep),
        num_components=int(keep.size), labels=host.array(remap)[summary["labels"]],
        used=host.array(used), shares=summary["shares"], all_weights=state.weights,
        all_means=state.means, all_covariances=state.covariances,
        distance_to_data=summary["distance"], displacement=summary["displacement"],
        win_counts=state.counts, error_trace=e_trace, log_likelihood_trace=ll_trace,
        num_used_trace=used_trace, trace_steps=steps, num_steps=int(state.num_steps),
        nonfinite=nonfinite, num_start=k, method=method, criterion=criterion,
        schedule=schedule, covariance=covariance)
