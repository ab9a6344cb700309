"""Variational Bayes for the Gaussian mixture, with pruning (Corduneanu & Bishop 2001).

The program is ``ppl_models.vb_mixture.model``: Wishart(nu0, W0) priors on the
precisions Lambda_j, Normal(m0, beta0^-1 I) priors on the means m_j, fixed
mixing weights alpha. Variational Bayes approximates the posterior by the
factorised

    Q(m, Lambda, y) = prod_j N(m_j; mu_j, S_j) Wishart(Lambda_j; nu_j, W_j) prod_i Q(y_i)

and maximises the lower bound L(Q) <= log p(x | alpha) on the evidence over Q
*and* over alpha (type-II maximum likelihood; Corduneanu & Bishop sec. 3).
Started with a generous number of components, the weights of the unneeded ones
shrink to zero; a component whose weight falls below ``prune_threshold`` is
removed (Corduneanu & Bishop sec. 3-4), so the run selects the number of
components.

One :func:`step` performs, in this order, coordinate ascent on L (each update
maximises L in its own factor with the others fixed, so none lowers L):

1. Q(Lambda_j): nu_j = nu0 + N_j, W_j^-1 = W0^-1 + sum_i r_ij (x_i - mu_j)(x_i -
   mu_j)^T + N_j S_j, with N_j = sum_i r_ij (Corduneanu & Bishop sec. 3,
   written with the current Q(m_j));
2. Q(m_j): S_j^-1 = beta0 I + N_j nu_j W_j, mu_j = S_j (beta0 m0 + nu_j W_j sum_i
   r_ij x_i) (same section);
3. alpha_j = N_j / N (the maximiser of L over alpha; sec. 3);
4. pruning: an active component with alpha_j < ``prune_threshold`` is removed:
   alpha_j = 0, its Q(m_j), Q(Lambda_j) reset to the prior (its KL terms vanish)
   and the other weights renormalised;
5. Q(y_i = j) = r_ij proportional to alpha_j exp(E[log N(x_i | m_j, Lambda_j)])
   over the active components, in the log domain (PRML eq. 10.46-10.49), and the
   bound L at the new Q.

The bound (PRML sec. 10.2.2, eq. 10.70-10.77, with the Normal-Wishart terms
replaced by the independent Normal and Wishart ones of the factorised Q) is,
at the optimal Q(y) of step 5,

    L = sum_i log sum_j alpha_j exp(E_Q[log N(x_i | m_j, Lambda_j)])
        - sum_j KL(Q(m_j) || p(m_j)) - sum_j KL(Q(Lambda_j) || p(Lambda_j)),

    E_Q[log N(x | m_j, Lambda_j)] = (E[log|Lambda_j|] - d log 2 pi
        - nu_j ((x - mu_j)^T W_j (x - mu_j) + tr(W_j S_j))) / 2,

with E[log|Lambda_j|] from PRML eq. 10.65 / B.81. It equals the ELBO of the
same Q under the program, which ``tests/test_vb_mixture.py`` checks against
NumPyro's ``Trace_ELBO``. So L never decreases from one iteration to the next,
except by pruning: removing a component with expected count n = N alpha_j lowers
the log-sum-exp term by at most n / (1 - n) (and raises L by its KL terms), so
pruning a component of zero weight never lowers L, and with the default
threshold (1e-5) the possible loss is at most about N 1e-5 nats (0.003 for
N = 300, against a bound of order -N; over 10 planted runs with N = 600 the
largest expected count pruned at once was 0.006). The result reports the count
pruned per iteration and flags (``monotone``) a decrease that this does not
explain.

``covariance="diag"`` is the same algorithm with independent Gamma priors on
diagonal precisions (Corduneanu & Bishop's one-dimensional case, applied per
dimension): a Gamma(a, b) precision is a one-dimensional Wishart(2 a, 1 / (2 b)),
so the updates are the ones above with the scatter matrices' off-diagonal parts
dropped, and E[log|Lambda|] and the KL term become sums over dimensions.

The state has a fixed size (``max_components`` slots with an ``active`` mask),
so :func:`init` and :func:`step` are pure and jittable and the driver
:func:`fit_vb_mixture` runs the step through the engine (:func:`inference.engine.run`:
the convergence test is the step's own, the trace is cut at convergence).

References
----------
Corduneanu, A. and Bishop, C. M. (2001), "Variational Bayesian model selection
for mixture distributions", AISTATS, sec. 2-4 (updates, type-II ML weights,
pruning). Bishop, C. M. (2006), Pattern Recognition and Machine Learning,
sec. 10.2 (the bound's terms, eq. 10.64-10.77) and appendix B (Wishart moments).
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference.engine import Algorithm, host, run, select, warn_not_converged
from inference.engine.persistence import register_renamed_fields
from inference.engine.protocol import follows_protocol
from inference.mixture.vb_maths import (
    COVARIANCES,
    VBMixtureInfo,
    VBMixtureState,
    bound,
    check_covariance,
    chol_inverse,
    diagonal_prior,
    init,
    initial_states,
    step,
    vb_step,
)
from ppl_models.diagnostics import NumericalWarning
from ppl_models.validation import (
    MissingKeyError,
    check_data,
    check_fraction,
    check_positive_int,
    check_rng_key,
    check_tolerance,
)
from ppl_models.vb_mixture import VBPrior, prior_from_data

__all__ = ["COVARIANCES", "VBMixtureState", "VBMixtureInfo", "VBMixtureResult", "VBMixtureTrace",
           "init", "step",
           "bound", "fit_vb_mixture"]


class VBMixtureTrace(NamedTuple):
    """Per-iteration arrays of :func:`fit_vb_mixture`, cut at ``num_iterations``."""

    objective: jax.Array
    num_components: jax.Array
    pruned_count: jax.Array


@follows_protocol("evidence_lower_bound", "max", objective="bound")
class VBMixtureResult(NamedTuple):
    """Result of :func:`fit_vb_mixture`: the surviving components only.

    Attributes
    ----------
    weights : array (k,)
        Type-II maximum-likelihood mixing weights alpha of the k survivors.
    means : array (k, d)
        E_Q[m_j] = mu_j.
    mean_covariances : array (k, d, d)
        S_j, the covariance of Q(m_j).
    wishart_dof : array (k,)
        nu_j of Q(Lambda_j).
    wishart_scale : array (k, d, d)
        W_j of Q(Lambda_j).
    precisions : array (k, d, d)
        E_Q[Lambda_j] = nu_j W_j.
    covariances : array (k, d, d)
        E_Q[Lambda_j]^-1 = W_j^-1 / nu_j (scikit-learn's ``covariances_``).
    responsibilities : array (num_examples, k)
        Q(y_i = j).
    labels : int32 array (num_examples,)
        Most probable surviving component of every example.
    num_components : int
        Surviving components k.
    num_start : int
        ``max_components``.
    component_index : int array (k,)
        Starting slots of the survivors.
    bound : float
        L(Q) at the result.
    trace : VBMixtureTrace
        Per-iteration arrays (num_iterations,): ``objective``, L(Q) after every
        iteration (non-decreasing up to pruning; module docstring);
        ``num_components``, the active components after every iteration;
        ``pruned_count``, the expected count N alpha_j removed by pruning.
    num_iterations : int
    converged : bool
        The per-example bound change fell below ``tol`` with nothing pruned.
    monotone : bool
        No decrease of the bound beyond rounding and the pruning allowance.
    prior : VBPrior
        The hyperparameters used (defaults filled in; for ``"diag"`` the diagonal
        of W0^-1 only).
    covariance : str
        ``"full"`` or ``"diag"`` (then W_j is diagonal and Q(tau_jd) = Gamma(nu_j / 2,
        rate 1 / (2 W_j,dd)) for the program's site "tau").
    restart_objectives : array (num_restarts,) or None
        The final bound L(Q) of every start when ``num_restarts`` > 1 (-inf for a start
        whose pruning removed every component; the result is the start with the
        highest); None for one start.
    """

    weights: jax.Array
    means: jax.Array
    mean_covariances: jax.Array
    wishart_dof: jax.Array
    wishart_scale: jax.Array
    precisions: jax.Array
    covariances: jax.Array
    responsibilities: jax.Array
    labels: jax.Array
    num_components: int
    num_start: int
    component_index: jax.Array
    bound: float
    trace: VBMixtureTrace
    num_iterations: int
    converged: bool
    monotone: bool
    prior: VBPrior
    covariance: str
    restart_objectives: jax.Array | None = None



def _old_vb_mixture_result(values):
    """A VBMixtureResult saved with ``bound_trace``, ``num_components_trace`` and
    ``pruned_count_trace``: one :class:`VBMixtureTrace` cut at ``num_iterations``."""
    n = int(values["num_iterations"])
    values["trace"] = VBMixtureTrace(*(np.asarray(values.pop(name))[:n] for name in (
        "bound_trace", "num_components_trace", "pruned_count_trace")))
    return values


register_renamed_fields(VBMixtureResult, {"bound_trace": "bound_trace"},
                        convert=_old_vb_mixture_result)

def fit_vb_mixture(x, max_components: int, *, rng_key, covariance: str = "full",
                   prune_threshold: float = 1e-5,
                   max_iterations: int = 500, tol: float = 1e-7, mean_prior_mean=None,
                   mean_prior_scale=None, dof_prior=None,
                   covariance_prior=None, progress_bar: bool = False,
                   num_restarts: int = 1) -> VBMixtureResult:
    """Variational Bayes Gaussian mixture with type-II ML weights and pruning.

    Parameters
    ----------
    x : array (num_examples, d)
        Data (finite).
    max_components : int
        Components at the start (generous: unneeded ones are pruned); at most
        ``num_examples``.
    rng_key : jax.random key
        For the k-means++ start (of the first start; see ``num_restarts``).
    covariance : {"full", "diag"}
        ``"full"``: Wishart priors and posteriors on full precision matrices;
        ``"diag"``: independent Gamma(nu0 / 2, rate (W0^-1)_dd / 2) priors on the
        diagonal precisions (only the diagonal of ``covariance_prior`` is used;
        ``ppl_models.vb_mixture.model(covariance="diag")``).
    prune_threshold : float in (0, 1)
        A component whose weight alpha_j falls below it is removed. The default
        1e-5 keeps the bound's possible loss from a pruning (at most about N
        alpha_j nats; module docstring) negligible against the bound (order -N).
    max_iterations : int
    tol : float
        Convergence when the bound changes by less than ``tol`` per example
        in an iteration that pruned nothing.
    mean_prior_mean, mean_prior_scale, dof_prior, covariance_prior : optional
        Hyperparameters m0 (d,), beta0^-1/2 > 0, nu0 > d - 1, W0^-1 (positive
        scalar or positive-definite (d, d)); ``None`` derives them from the data
        (``ppl_models.vb_mixture.prior_from_data``).
    progress_bar : bool
        A tqdm bar over the iterations (the engine's).
    num_restarts : int
        k-means++ starts run side by side (``vmap``) in one compiled loop; the fit
        returned is the one with the highest final bound L(Q) among those whose pruning
        left a component. One start (the default) is drawn from ``rng_key`` itself,
        more from ``jax.random.split(rng_key, num_restarts)`` (start i is the fit with
        ``rng_key`` that key, up to float rounding); ``restart_objectives`` lists every
        start's bound.

    Returns
    -------
    VBMixtureResult

    Raises
    ------
    ValueError
        Bad data (not 2-D, empty, NaN/inf), ``max_components`` < 1 or above
        ``num_examples``, ``prune_threshold`` outside (0, 1), ``max_iterations``
        < 1, ``tol`` not positive, a bad hyperparameter, or a run whose pruning
        would remove every component (threshold above every weight).
    TypeError
        Wrong argument types, or no ``rng_key``.

    Warns
    -----
    ConvergenceWarning
        ``max_iterations`` reached before convergence (``converged=False``).
    NumericalWarning
        Non-finite bound, or a decrease of the bound that pruning does not explain
        (``monotone=False``).

    References
    ----------
    Corduneanu & Bishop (2001) sec. 3-4; Bishop PRML sec. 10.2.

    Examples
    --------
    >>> import jax
    >>> from ppl_models import mixture
    >>> data = mixture.generate(jax.random.key(0), 300, 3, 2, separation=8.0)
    >>> fit = fit_vb_mixture(data.x, 6, rng_key=jax.random.key(1))
    >>> fit.num_components
    3
    """
    x = check_data(x, "x")
    check_covariance(covariance)
    num_examples = x.shape[0]
    max_components = check_positive_int(
        max_components, "max_components", maximum=num_examples,
        why=" (the number of examples, rows of x)")
    if rng_key is None:
        raise MissingKeyError("rng_key must be a jax.random key; got None")
    check_rng_key(rng_key)
    prune_threshold = check_fraction(prune_threshold, "prune_threshold")
    max_iterations = check_positive_int(max_iterations, "max_iterations")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    tol = check_tolerance(tol, "tol")
    prior = prior_from_data(x, mean_prior_mean=mean_prior_mean,
                            mean_prior_scale=mean_prior_scale, dof_prior=dof_prior,
                            covariance_prior=covariance_prior)
    prior = diagonal_prior(VBPrior(
        jnp.asarray(prior.mean, x.dtype), jnp.asarray(prior.mean_scale, x.dtype),
        jnp.asarray(prior.dof, x.dtype), jnp.asarray(prior.covariance, x.dtype)), covariance)
    start_keys = [rng_key] if num_restarts == 1 else list(jax.random.split(rng_key, num_restarts))
    states = jax.tree.map(lambda *leaves: jnp.concatenate(leaves), *(
        initial_states(key, x, prior, max_components=max_components, covariance=covariance)
        for key in start_keys))
    fitted = run(Algorithm(vb_step, options=(("covariance", covariance),),
                           name="fit_vb_mixture"),
                 states, (x,), (prior, jnp.asarray(prune_threshold, x.dtype),
                                jnp.asarray(tol, x.dtype) * num_examples),
                 keys=jax.random.split(rng_key, num_restarts), max_iterations=max_iterations,
                 progress_bar=progress_bar)
    best, restart_objectives = 0, None
    if num_restarts > 1:  # the highest bound; a start that pruned everything never wins
        restart_objectives = jnp.where(fitted.state.all_pruned, -jnp.inf, fitted.state.bound)
        finals = np.asarray(restart_objectives, np.float64)
        best = int(np.argmax(np.where(np.isnan(finals), -np.inf, finals)))
    # The trace's used length and the surviving components depend on the data: they are
    # cut on the host (inference.engine.host), so that a repeated fit compiles nothing new.
    state, trace, num_iterations, _ = select(fitted, best)
    if bool(state.all_pruned):
        raise ValueError(
            f"prune_threshold={prune_threshold} would prune every component (all weights "
            f"fell below it at iteration {int(state.iteration)}); lower it")
    bounds, counts, pruned = trace.objective, trace.num_components, trace.pruned_count
    bounds_np, pruned_np = np.asarray(bounds), np.asarray(pruned)
    finite = bool(np.all(np.isfinite(bounds_np)))
    change = np.diff(np.asarray(bounds_np, dtype=np.float64))
    allowance = np.asarray(pruned_np[1:], np.float64)
    allowance = allowance / np.maximum(1.0 - allowance, 1e-12) * (allowance < 1)
    allowance = np.where(pruned_np[1:] >= 1, np.inf, allowance)
    rounding = 64 * float(jnp.finfo(x.dtype).eps) * np.abs(np.asarray(bounds_np[1:], np.float64))
    monotone = finite and bool(np.all(change >= -(allowance + rounding)))
    converged = (finite and num_iterations >= 2 and float(pruned_np[-1]) == 0.0
                 and abs(float(change[-1])) <= tol * num_examples)
    if not finite:
        warnings.warn(f"fit_vb_mixture: the bound became non-finite at iteration "
                      f"{int(np.argmin(np.isfinite(bounds_np))) + 1}",
                      NumericalWarning, stacklevel=2)
    elif not monotone:
        worst = float(np.min(change))
        warnings.warn(f"fit_vb_mixture: the bound decreased by {-worst:.3g}, more than "
                      "rounding and pruning explain", NumericalWarning, stacklevel=2)
    if finite:
        warn_not_converged("fit_vb_mixture", converged, num_iterations, f"tol={tol}")
    keep = np.flatnonzero(np.asarray(state.active))
    resp = host.take(state.responsibilities, keep, axis=1)
    # Precisions and covariances of every component (a fixed shape; component by
    # component, the same values as for the survivors alone), then the survivors'.
    precisions = state.wishart_dof[:, None, None] * state.wishart_scale
    covariances = chol_inverse(precisions)
    return VBMixtureResult(
        weights=host.take(state.weights, keep), means=host.take(state.mean_mean, keep),
        mean_covariances=host.take(state.mean_covariance, keep),
        wishart_dof=host.take(state.wishart_dof, keep),
        wishart_scale=host.take(state.wishart_scale, keep),
        precisions=host.take(precisions, keep), covariances=host.take(covariances, keep),
        responsibilities=resp,
        labels=host.array(np.argmax(np.asarray(resp), axis=1), np.int32),
        num_components=int(keep.size),
        num_start=max_components, component_index=host.array(keep),
        bound=float(state.bound), trace=VBMixtureTrace(bounds, counts, pruned),
        num_iterations=num_iterations, converged=converged,
        monotone=monotone, prior=prior, covariance=covariance,
        restart_objectives=restart_objectives)
