"""Online learning of the Gaussian-mixture program: adaptive EM and competitive learning.

The online methods of sec. 6 of Xu (1995) (full citation under References below),
on the program :func:`ppl_models.mixture.model`. Every method is a pure, jittable
:func:`step` that takes one example x_t of a stream, with :func:`run` (a
``lax.scan`` over a stream) and the driver :func:`fit_online` (shuffled passes
over a data set run through the engine, one pass an iteration,
:mod:`inference.mixture.online_passes`; traced every ``trace_every`` steps).
Posteriors are read from the program through :func:`inference.mixture.features.component_log_joint`.

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
  (x - m_y)^T Sigma_y^{-1} (x - m_y) + log|Sigma_y| - 2 log alpha_y (minus twice the
  program's log joint, up to a constant; the factor 2 on log alpha_y is the zoo's
  correction of the paper's eq. 28). The winner's covariance and the
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
L. Xu, "YING-YANG machine: a Bayesian-Kullback scheme for unified learnings and new
results on vector quantization", Proceedings of the International Conference on Neural
Information Processing (ICONIP'95), 1995, sec. 6.1 (eq. 25), 6.2 (eq. 27-28,
"20").
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

from inference.engine import Algorithm, host, select, warn_not_converged
from inference.engine import run as run_engine
from inference.engine.persistence import register_renamed_fields
from inference.engine.protocol import follows_protocol
from inference.mixture.online_passes import PassState, num_slots, pass_step
from inference.mixture.online_rules import (
    CRITERIA,
    DEFAULT_CRITERION,
    DELEARNING,
    METHODS,
    SCHEDULES,
    OnlineInfo,
    OnlineState,
    assign,
    init,
    run,
    step,
    stream_order,
)
from ppl_models import mixture
from ppl_models.diagnostics import NumericalWarning
from ppl_models.validation import (
    MissingKeyError,
    check_choice,
    check_data,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_rng_key,
)

__all__ = ["METHODS", "SCHEDULES", "CRITERIA", "DELEARNING", "OnlineState", "OnlineInfo",
           "OnlineResult", "OnlineTrace", "init", "step", "run", "stream_order", "fit_online"]


class OnlineTrace(NamedTuple):
    """The trace points of :func:`fit_online` (one per pass by default)."""

    objective: jax.Array
    error: jax.Array
    num_used: jax.Array
    steps: jax.Array


@follows_protocol("mean_log_likelihood", "max")
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
    trace : OnlineTrace
        The trace points, one every ``trace_every`` steps and one at the end (with
        the default ``trace_every``, one per pass: one per iteration):
        ``objective``, the mean log-likelihood of the data under the mixture of the
        active units; ``error``, E_MSE, the mean squared distance of the examples
        to their assigned unit; ``num_used``, units with share >= ``min_share``;
        ``steps``, the online steps taken.
    num_iterations : int
        Passes run.
    converged : bool
        The mean log-likelihood changed by at most ``tol`` (relative) over the last
        pass; always False with ``tol`` = 0 (every pass runs).
    num_steps : int
    nonfinite : bool
        True when a parameter became non-finite (a NumericalWarning says so).
    num_start : int
    method, criterion, schedule, covariance : str
    restart_objectives : array (num_restarts,) or None
        The final mean log-likelihood of every start when ``num_restarts`` > 1 (the
        result is the start with the highest); None for one start.
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
    trace: OnlineTrace
    num_iterations: int
    converged: bool
    num_steps: int
    nonfinite: bool
    num_start: int
    method: str
    criterion: str
    schedule: str
    covariance: str
    restart_objectives: jax.Array | None = None


def _old_online_result(values):
    """An OnlineResult saved with ``error_trace``, ``log_likelihood_trace``,
    ``num_used_trace`` and ``trace_steps`` (before the passes ran through the engine):
    one :class:`OnlineTrace`; every pass ran, none converged by a test."""
    values["trace"] = OnlineTrace(*(values.pop(name) for name in (
        "log_likelihood_trace", "error_trace", "num_used_trace", "trace_steps")))
    values["num_iterations"] = int(values["num_steps"]) // int(np.shape(values["labels"])[0])
    values["converged"] = False
    return values


register_renamed_fields(OnlineResult, {"error_trace": "error_trace"},
                        convert=_old_online_result)

init_jit = jax.jit(init, static_argnames=("num_components", "init_method", "covariance"))


@functools.partial(jax.jit, static_argnames=("by_posterior", "covariance"))
def _summary(x, state, start_means, min_share, reg_covar, *, by_posterior, covariance):
    """Shares, used units, labels among them, distances to the data, finiteness."""
    k = state.means.shape[0]
    labels, _ = assign(x, state, by_posterior, covariance, reg_covar, state.active)
    shares = jnp.bincount(labels, length=k) / x.shape[0]
    used = state.active & (shares >= min_share)
    # min_share <= 1/k always leaves one; otherwise keep the unit with the largest share.
    used = jnp.where(jnp.any(used), used, jnp.arange(k) == jnp.argmax(shares))
    labels, _ = assign(x, state, by_posterior, covariance, reg_covar, used)
    distance = jnp.sqrt(jnp.min(jnp.sum((state.means[:, None] - x[None]) ** 2, -1), axis=1))
    finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(a)) for a in
                                (state.weights, state.means, state.covariances)]))
    return {"shares": shares, "used": used, "labels": labels, "distance": distance,
            "displacement": jnp.linalg.norm(state.means - start_means, axis=1),
            "finite": finite}


def used_weights(weights, used, keep):
    """The weights of the used units (indices ``keep``, mask ``used``), renormalised.

    Computed on all k units (a fixed shape: nothing is compiled anew when a fit keeps
    a new number of units; the unused weights are zeroed out of the sum) and the used
    ones taken on the host. XLA's CPU backend adds up to 32 numbers in order, so the
    zeros change nothing there; beyond that, the sum may differ from one over the used
    weights alone by float rounding.
    """
    total = jnp.sum(jnp.where(host.array(used), weights, jnp.zeros((), weights.dtype)))
    return host.take(weights / jnp.maximum(total, 1e-30), keep)


def check_options(method, schedule, covariance, init, criterion, delearning):
    """Check the choices of an online fit; returns ``(criterion, delearning)`` with the
    method's defaults filled in."""
    check_choice(method, "method", METHODS)
    check_choice(schedule, "schedule", SCHEDULES)
    check_choice(covariance, "covariance", mixture.COVARIANCES)
    check_choice(init, "init", ("kmeans++", "random"))
    criterion = DEFAULT_CRITERION[method] if criterion is None else criterion
    check_choice(criterion, "criterion", CRITERIA)
    delearning = ("local" if criterion == "posterior" else "constant") if (
        delearning is None) else delearning
    check_choice(delearning, "delearning", DELEARNING)
    if method == "adaptive_em" and criterion != "posterior":
        raise ValueError(f"criterion must be 'posterior' (or None) for method='adaptive_em'; "
                         f"got {criterion!r}")
    return criterion, delearning


def check_rate(value, name, *, lower_open=True, upper=1.0):
    """Check a learning rate or fraction: a number in (0, upper] (or [0, upper])."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise TypeError(f"{name} must be a number; got {value!r} ({type(value).__name__})")
    value = float(value)
    low_ok = value > 0 if lower_open else value >= 0
    if not (math.isfinite(value) and low_ok and value <= upper):
        bound = "(0, 1]" if lower_open else "[0, 1]"
        raise ValueError(f"{name} must lie in {bound}; got {value}")
    return value


def fit_online(x, num_components: int, *, method: str = "rpcl", rng_key=None,
               max_iterations: int = 1, tol: float = 0.0, learning_rate: float = 0.05,
               delearning_rate: float = 0.02, schedule: str = "constant", criterion=None,
               delearning=None,
               covariance: str = "full", old_posterior: str = "zero",
               init: str = "kmeans++", init_means=None, prior_count=None,
               trace_every=None, min_share: float = 0.01, reg_covar: float = 1e-6,
               min_weight: float = 1e-4, progress_bar: bool = False,
               num_restarts: int = 1) -> OnlineResult:
    """Learn a mixture online from a shuffled stream of the examples of ``x``.

    Parameters
    ----------
    x : array (num_examples, d)
    num_components : int
        Units k at the start (at most the number of distinct examples).
    method : {"adaptive_em", "cl", "fscl", "cl_posterior", "rpcl"}
    rng_key : jax.random key
        Shuffles every pass (:func:`stream_order`) and, unless ``init_means`` is
        given, draws the initial means: ``jax.random.split(rng_key)`` gives the keys of
        the means and of the orders. With ``num_restarts`` > 1, start i is the fit with
        ``rng_key=jax.random.split(rng_key, num_restarts)[i]``.
    max_iterations : int
        Passes over the data at most (each in a fresh random order); the stream
        has up to max_iterations * num_examples steps.
    tol : float
        Stop after a pass that changed the mean log-likelihood by at most ``tol``
        relative to the pass before; 0 (the default) runs every pass.
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
    progress_bar : bool
        A tqdm bar over the passes (the engine's).
    num_restarts : int
        Starts run one after another in one compiled loop, each with its own initial
        means and orders (keys split off ``rng_key``; the default 1 uses ``rng_key``
        itself); the fit returned is the one with the highest final objective (the
        mean log-likelihood after its last pass, ``trace.objective[-1]``).
        ``restart_objectives`` lists every start's. With ``init_means`` the starts
        share their means and differ in their orders.

    Returns
    -------
    OnlineResult

    Examples
    --------
    >>> import jax
    >>> from ppl_models import mixture
    >>> data = mixture.generate(jax.random.key(0), 400, 3, 2, separation=8.0, unequal=False)
    >>> rpcl = fit_online(data.x, 6, method="rpcl", rng_key=jax.random.key(2), max_iterations=5)
    >>> cl = fit_online(data.x, 6, method="cl", rng_key=jax.random.key(2), max_iterations=5)
    >>> rpcl.num_components, cl.num_components  # RPCL drives the 3 extra units off the data
    (3, 6)
    >>> rpcl.num_steps, rpcl.trace.num_used.tolist()  # 5 passes of 400 steps
    (2000, [3, 3, 3, 3, 3])
    """
    check_choice(old_posterior, "old_posterior", ("zero", "previous"))
    criterion, delearning = check_options(method, schedule, covariance, init, criterion,
                                          delearning)
    x = check_data(x, "x")
    num, dim = x.shape
    k = check_positive_int(num_components, "num_components")
    distinct = int(np.unique(np.asarray(x), axis=0).shape[0])
    if k > distinct:
        raise ValueError(f"num_components={k} exceeds the {distinct} distinct example(s) in x")
    if float(jnp.mean(jnp.var(x, axis=0))) == 0.0:
        raise ValueError("x has no spread (every example is the same point): nothing to fit")
    max_iterations = check_positive_int(max_iterations, "max_iterations")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    tol = check_nonnegative(tol, "tol")
    learning_rate = check_rate(learning_rate, "learning_rate")
    delearning_rate = check_rate(delearning_rate, "delearning_rate", lower_open=False)
    min_share = check_rate(min_share, "min_share", lower_open=False)
    min_weight = check_rate(min_weight, "min_weight")
    if reg_covar:
        check_positive(reg_covar, "reg_covar")
    if prior_count is not None:
        check_positive(prior_count, "prior_count")
    total = num * max_iterations
    trace_every = num if trace_every is None else check_positive_int(trace_every, "trace_every")
    trace_every = min(trace_every, total)
    if rng_key is None:
        raise MissingKeyError("rng_key is required (it shuffles the stream)")
    check_rng_key(rng_key)
    start_keys = rng_key[None] if num_restarts == 1 else jax.random.split(rng_key, num_restarts)
    key_init, key_order = (jnp.stack(keys) for keys in zip(
        *(jax.random.split(key) for key in start_keys), strict=True))
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
    states = [init_jit(key, x, k, init_method=init, means=init_means, covariance=covariance,
                       prior_count=prior_count) for key in key_init]
    slots = num_slots(num, trace_every)
    # The starts run one after another (lax.map), each rounding as it would alone.
    algorithm = Algorithm(pass_step, name="fit_online", options=(
        ("trace_every", trace_every), ("slots", slots), ("by_posterior", by_posterior),
        ("options", options)), vectorized=False)
    starts = jax.tree.map(lambda *leaves: jnp.stack(leaves), *(
        PassState(state, jnp.zeros((), jnp.int32), jnp.asarray(-jnp.inf, x.dtype),
                  jnp.asarray(index, jnp.int32)) for index, state in enumerate(states)))
    fitted = run_engine(algorithm, starts, (x,),
                        (key_order[0] if num_restarts == 1 else key_order, min_share, tol,
                         max_iterations, numbers),
                        keys=key_order, max_iterations=max_iterations,
                        progress_bar=progress_bar)
    best, restart_objectives = 0, None
    if num_restarts > 1:
        restart_objectives = fitted.state.previous
        finals = np.asarray(restart_objectives, np.float64)
        best = int(np.argmax(np.where(np.isnan(finals), -np.inf, finals)))
    start_means = states[best].means
    final, passes, num_iterations, converged = select(fitted, best)
    state = final.online
    recorded = np.asarray(passes.recorded)
    trace = OnlineTrace(*(host.array(np.asarray(field)[recorded]) for field in (
        passes.log_likelihood, passes.error, passes.num_used, passes.steps)))
    if tol > 0:
        warn_not_converged("fit_online", converged, max_iterations, f"tol={tol}")
    summary = _summary(x, state, start_means, min_share, float(reg_covar),
                       by_posterior=by_posterior, covariance=covariance)
    used = np.asarray(summary["used"])
    keep = np.flatnonzero(used)
    remap = np.full(k, -1, np.int32)
    remap[keep] = np.arange(keep.size, dtype=np.int32)
    weights = used_weights(state.weights, used, keep)
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
        win_counts=state.counts, trace=trace, num_iterations=num_iterations,
        converged=converged, num_steps=int(state.num_steps),
        nonfinite=nonfinite, num_start=k, method=method, criterion=criterion,
        schedule=schedule, covariance=covariance, restart_objectives=restart_objectives)
