"""The variational-Bayes mixture's mathematics: its state, the bound, one
coordinate-ascent step (also as the engine's :func:`vb_step`) and the start."""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import digamma, multigammaln

from inference.mixture.seeding import kmeans_plus_plus
from ppl_models.vb_mixture import VBPrior

#: Covariance families: full precision matrices (Wishart) or diagonal ones (Gamma).
COVARIANCES = ("full", "diag")


class VBMixtureState(NamedTuple):
    """Fixed-size state of the VB iteration (k = ``max_components`` slots).

    Attributes
    ----------
    weights : array (k,)
        alpha, zero for pruned slots.
    active : bool array (k,)
        Slots still in the model.
    mean_mean : array (k, d)
        mu_j, the mean of Q(m_j).
    mean_covariance : array (k, d, d)
        S_j, the covariance of Q(m_j).
    wishart_dof : array (k,)
        nu_j of Q(Lambda_j).
    wishart_scale : array (k, d, d)
        W_j of Q(Lambda_j) (E[Lambda_j] = nu_j W_j).
    responsibilities : array (num_examples, k)
        r_ij = Q(y_i = j), zero for pruned slots.
    bound : float
        L(Q) at this state (-inf before the first step).
    iteration : int
    all_pruned : bool
        A step would have pruned every component; it was not applied.
    """

    weights: jax.Array
    active: jax.Array
    mean_mean: jax.Array
    mean_covariance: jax.Array
    wishart_dof: jax.Array
    wishart_scale: jax.Array
    responsibilities: jax.Array
    bound: jax.Array
    iteration: jax.Array
    all_pruned: jax.Array


class VBMixtureInfo(NamedTuple):
    """What one :func:`step` did.

    Attributes
    ----------
    bound : float
        L(Q) after the step.
    bound_change : float
        New minus previous bound.
    num_components : int
        Active components after the step.
    pruned_count : float
        Sum of the expected counts N alpha_j of the components pruned in the step
        (bounds the decrease of L that pruning may cause; module docstring).
    """

    bound: jax.Array
    bound_change: jax.Array
    num_components: jax.Array
    pruned_count: jax.Array


def chol_inverse(matrix):
    """Inverse of symmetric positive-definite matrices (..., d, d) through Cholesky."""
    tril = jnp.linalg.cholesky(matrix)
    eye = jnp.broadcast_to(jnp.eye(matrix.shape[-1], dtype=matrix.dtype), matrix.shape)
    inv_tril = jax.scipy.linalg.solve_triangular(tril, eye, lower=True)
    return jnp.swapaxes(inv_tril, -1, -2) @ inv_tril


def _log_det(matrix):
    tril = jnp.linalg.cholesky(matrix)
    return 2.0 * jnp.sum(jnp.log(jnp.diagonal(tril, axis1=-2, axis2=-1)), axis=-1)


def _expected_log_det(dof, scale, covariance):
    """E[log|Lambda|] under Q(Lambda) (PRML eq. 10.65, B.81).

    ``"full"``: Wishart(dof, scale); ``"diag"``: independent Gamma(dof / 2, rate
    1 / (2 W_dd)) precisions, i.e. one-dimensional Wisharts, on the diagonal.
    """
    d = scale.shape[-1]
    if covariance == "diag":
        return d * (digamma(dof / 2.0) + math.log(2.0)) + _log_det(scale)
    i = jnp.arange(1, d + 1, dtype=scale.dtype)
    return (jnp.sum(digamma((dof[..., None] + 1.0 - i) / 2.0), axis=-1) + d * math.log(2.0)
            + _log_det(scale))


def diagonal_prior(prior, covariance):
    """The prior the family uses: for ``"diag"`` only the diagonal of W0^-1."""
    if covariance == "diag":
        return prior._replace(covariance=jnp.diag(jnp.diagonal(prior.covariance)))
    return prior


def check_covariance(covariance):
    """Raise ValueError unless ``covariance`` is one of :data:`COVARIANCES`."""
    if covariance not in COVARIANCES:
        raise ValueError(f"covariance must be one of {COVARIANCES}; got {covariance!r}")


def _expected_log_gaussian(x, state, covariance):
    """E_Q[log N(x_i | m_j, Lambda_j)], (num_examples, k) (module docstring)."""
    d = x.shape[1]
    diff = x[:, None, :] - state.mean_mean[None]                        # (N, k, d)
    scale_tril = jnp.linalg.cholesky(state.wishart_scale)              # (k, d, d)
    quad = jnp.sum(jnp.einsum("kde,nkd->nke", scale_tril, diff) ** 2, axis=-1)
    trace = jnp.sum(state.wishart_scale * state.mean_covariance, axis=(-2, -1))
    return 0.5 * (_expected_log_det(state.wishart_dof, state.wishart_scale, covariance)
                  - d * math.log(2.0 * math.pi) - state.wishart_dof * (quad + trace))


def _kl_means(state, prior):
    """KL(N(mu_j, S_j) || N(m0, beta0^-1 I)) per slot, (k,)."""
    d = state.mean_mean.shape[1]
    beta0 = 1.0 / prior.mean_scale ** 2
    trace = jnp.trace(state.mean_covariance, axis1=-2, axis2=-1)
    dist2 = jnp.sum((state.mean_mean - prior.mean) ** 2, axis=-1)
    return 0.5 * (beta0 * (trace + dist2) - d - _log_det(state.mean_covariance)
                  - d * jnp.log(beta0))


def _wishart_kl(nu, log_det_w, nu0, log_det_w0, e_log_det, trace, d):
    """KL(Wishart(nu, W) || Wishart(nu0, W0)) from log|W|, log|W0|, E[log|Lambda|] and
    tr(W0^-1 W) (PRML eq. B.78-B.82)."""
    log_q = (-0.5 * nu * log_det_w - 0.5 * nu * d * math.log(2.0) - multigammaln(0.5 * nu, d)
             + 0.5 * (nu - d - 1.0) * e_log_det - 0.5 * nu * d)
    log_p = (-0.5 * nu0 * log_det_w0 - 0.5 * nu0 * d * math.log(2.0)
             - multigammaln(0.5 * nu0, d) + 0.5 * (nu0 - d - 1.0) * e_log_det
             - 0.5 * nu * trace)
    return log_q - log_p


def _kl_precisions(state, prior, covariance):
    """KL(Q(Lambda_j) || p(Lambda_j)) per slot, (k,)."""
    nu, scale = state.wishart_dof, state.wishart_scale
    if covariance == "diag":
        w = jnp.diagonal(scale, axis1=-2, axis2=-1)                      # (k, d)
        rate0 = jnp.diagonal(prior.covariance)                           # (d,)
        log_w = jnp.log(w)
        kl = _wishart_kl(nu[:, None], log_w, prior.dof, -jnp.log(rate0),
                         digamma(nu[:, None] / 2.0) + math.log(2.0) + log_w, rate0 * w, 1)
        return jnp.sum(kl, axis=-1)
    d = scale.shape[-1]
    return _wishart_kl(nu, _log_det(scale), prior.dof, -_log_det(prior.covariance),
                       _expected_log_det(nu, scale, covariance),
                       jnp.sum(prior.covariance * scale, axis=(-2, -1)), d)


def _e_step(x, state, prior, covariance):
    """Responsibilities (N, k) and the bound L at them (log domain)."""
    log_rho = jnp.log(state.weights) + _expected_log_gaussian(x, state, covariance)
    log_rho = jnp.where(state.active, log_rho, -jnp.inf)
    log_norm = jax.nn.logsumexp(log_rho, axis=1, keepdims=True)
    resp = jnp.exp(log_rho - log_norm)
    kl = jnp.where(state.active,
                   _kl_means(state, prior) + _kl_precisions(state, prior, covariance), 0.0)
    return resp, jnp.sum(log_norm) - jnp.sum(kl)


def bound(x, state: VBMixtureState, prior: VBPrior, covariance: str = "full"):
    """L(Q) for the state's Q(m), Q(Lambda), weights and the optimal Q(y) (module docstring).

    Parameters
    ----------
    x : array (num_examples, d)
    state : VBMixtureState
    prior : VBPrior
    covariance : {"full", "diag"}

    Returns
    -------
    float
    """
    check_covariance(covariance)
    return _e_step(x, state, diagonal_prior(prior, covariance), covariance)[1]


def _update_parameters(x, resp, state, prior, covariance):
    """Steps 1-3 of the module docstring with the responsibilities fixed."""
    d = x.shape[1]
    counts = jnp.sum(resp, axis=0)                                      # (k,)
    safe = jnp.maximum(counts, jnp.finfo(x.dtype).tiny)
    xbar = (resp.T @ x) / safe[:, None]                                 # (k, d)
    diff = x[:, None, :] - xbar[None]                                   # (N, k, d)
    scatter = jnp.einsum("nk,nkd,nke->kde", resp, diff, diff)
    # 1. Q(Lambda) given Q(m): the expected scatter about m_j.
    offset = xbar - state.mean_mean
    rate = (prior.covariance + scatter + counts[:, None, None]
            * (offset[:, :, None] * offset[:, None, :] + state.mean_covariance))
    rate = 0.5 * (rate + jnp.swapaxes(rate, -1, -2))
    if covariance == "diag":   # independent Gamma precisions: only the diagonal scatter
        rate = rate * jnp.eye(d, dtype=x.dtype)
    wishart_scale = chol_inverse(rate)
    wishart_dof = prior.dof + counts
    # 2. Q(m) given Q(Lambda).
    beta0 = 1.0 / prior.mean_scale ** 2
    expected_precision = wishart_dof[:, None, None] * wishart_scale
    mean_precision = beta0 * jnp.eye(d, dtype=x.dtype) + counts[:, None, None] * expected_precision
    mean_covariance = chol_inverse(mean_precision)
    target = beta0 * prior.mean + counts[:, None] * jnp.einsum("kde,ke->kd",
                                                               expected_precision, xbar)
    mean_mean = jnp.einsum("kde,ke->kd", mean_covariance, target)
    # 3. Type-II maximum likelihood weights.
    weights = counts / x.shape[0]
    return state._replace(weights=weights, mean_mean=mean_mean, mean_covariance=mean_covariance,
                          wishart_dof=wishart_dof, wishart_scale=wishart_scale), counts


def _reset_to_prior(state, keep, prior):
    """Slots where ``keep`` is False get Q equal to the prior and weight 0."""
    d = state.mean_mean.shape[1]
    prior_scale = chol_inverse(prior.covariance)
    prior_mean_cov = prior.mean_scale ** 2 * jnp.eye(d, dtype=state.mean_mean.dtype)
    keep2, keep3 = keep[:, None], keep[:, None, None]
    return state._replace(
        weights=jnp.where(keep, state.weights, 0.0),
        mean_mean=jnp.where(keep2, state.mean_mean, prior.mean),
        mean_covariance=jnp.where(keep3, state.mean_covariance, prior_mean_cov),
        wishart_dof=jnp.where(keep, state.wishart_dof, prior.dof),
        wishart_scale=jnp.where(keep3, state.wishart_scale, prior_scale))


def step(state: VBMixtureState, x, prior: VBPrior, prune_threshold, covariance: str = "full"):
    """One VB iteration: Q(Lambda), Q(m), alpha, pruning, Q(y) (module docstring, steps 1-5).

    Deterministic, so it takes no key. Pure and jittable.

    Parameters
    ----------
    state : VBMixtureState
    x : array (num_examples, d)
    prior : VBPrior
    prune_threshold : float
        Active components with alpha_j below it are removed.
    covariance : {"full", "diag"}
        Family (static under ``jit``).

    Returns
    -------
    (VBMixtureState, VBMixtureInfo)
    """
    check_covariance(covariance)
    prior = diagonal_prior(prior, covariance)
    updated, counts = _update_parameters(x, state.responsibilities, state, prior, covariance)
    prune = state.active & (updated.weights < prune_threshold)
    all_pruned = jnp.all(prune | ~state.active)
    prune = prune & ~all_pruned
    active = state.active & ~prune
    updated = _reset_to_prior(updated._replace(active=active), active, prior)
    updated = updated._replace(weights=updated.weights / jnp.sum(updated.weights))
    resp, new_bound = _e_step(x, updated, prior, covariance)
    new_state = updated._replace(responsibilities=resp, bound=new_bound,
                                 iteration=state.iteration + 1,
                                 all_pruned=state.all_pruned | all_pruned)
    info = VBMixtureInfo(new_bound, new_bound - state.bound, jnp.sum(active),
                         jnp.sum(jnp.where(prune, counts, 0.0)))
    return new_state, info


def init(rng_key, x, max_components: int, prior: VBPrior,
         covariance: str = "full") -> VBMixtureState:
    """Initial state: k-means++ centres, hard nearest-centre responsibilities.

    Q(m_j) starts as a point mass at centre j (S_j = 0) and Q(Lambda_j), alpha as
    the prior and 1/k; the first :func:`step` replaces all of them. Slots whose
    centre receives no example (duplicate rows) get weight 0 there and are pruned.

    Parameters
    ----------
    rng_key : jax.random key
    x : array (num_examples, d)
    max_components : int
        Number of slots k (static).
    prior : VBPrior
    covariance : {"full", "diag"}

    Returns
    -------
    VBMixtureState
    """
    check_covariance(covariance)
    prior = diagonal_prior(prior, covariance)
    k, d = max_components, x.shape[1]
    centres = kmeans_plus_plus(rng_key, x, k)
    dist2 = jnp.sum((x[:, None, :] - centres[None]) ** 2, axis=-1)
    resp = jax.nn.one_hot(jnp.argmin(dist2, axis=1), k, dtype=x.dtype)
    return VBMixtureState(
        weights=jnp.full(k, 1.0 / k, x.dtype), active=jnp.ones(k, bool), mean_mean=centres,
        mean_covariance=jnp.zeros((k, d, d), x.dtype),
        wishart_dof=jnp.full(k, prior.dof, x.dtype),
        wishart_scale=jnp.broadcast_to(chol_inverse(prior.covariance), (k, d, d)),
        responsibilities=resp, bound=jnp.array(-jnp.inf, x.dtype),
        iteration=jnp.array(0, jnp.int32), all_pruned=jnp.array(False))


class VBStepInfo(NamedTuple):
    """One iteration's record for the engine (:func:`vb_step`): ``objective`` (the bound
    L(Q)), ``num_components``, ``pruned_count`` (:class:`VBMixtureInfo`) and
    ``converged`` (the run stops: the bound settled with nothing pruned, every component
    would be pruned, or the bound is not finite)."""

    objective: jax.Array
    num_components: jax.Array
    pruned_count: jax.Array
    converged: jax.Array


def vb_step(rng_key, state, data, params, *, shard, covariance):
    """:func:`step` as an :class:`inference.engine.Algorithm` step (deterministic:
    ``rng_key`` unused). ``params`` = (prior, prune_threshold, scale): the run stops once
    the bound changes by at most ``scale`` (``tol`` times the number of examples) in an
    iteration that pruned nothing, from the second iteration on."""
    (x,) = data
    prior, prune_threshold, scale = params
    new, info = step(state, x, prior, prune_threshold, covariance)
    settled = ((jnp.abs(info.bound_change) <= scale) & (info.pruned_count == 0)
               & (new.iteration >= 2))
    done = settled | new.all_pruned | ~jnp.isfinite(info.bound)
    return new, VBStepInfo(info.bound, info.num_components.astype(jnp.int32),
                           info.pruned_count, done)


@functools.partial(jax.jit, static_argnames=("max_components", "covariance"))
def initial_states(rng_key, x, prior, *, max_components, covariance):
    """:func:`init`, stacked as the engine's one start."""
    return jax.tree.map(lambda leaf: leaf[None],
                        init(rng_key, x, max_components, prior, covariance))
