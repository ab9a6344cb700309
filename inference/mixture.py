"""EM, hard-cut EM and k-means on the Gaussian-mixture program (seed 002 sec. 4-5).

One program (``ppl_models.mixture.model``), three limits of the YING-YANG
alternation (``shared/MODELS.md`` 3), :func:`fit_mixture`'s ``mode``:

* ``"stochastic"`` -- SVQ = EM (eq. 17-18): responsibilities P(y | x_i) from the
  program, then weighted means, covariances and weights n_y / N;
* ``"map"`` -- MAP-VQ = hard-cut EM (eq. 19-20): every example goes to its most
  probable component, then the same updates with 0/1 weights;
* ``"nearest"`` -- NN-VQ = k-means (eq. 21-22): the program with spherical,
  equal covariances and equal weights in the sigma -> 0 limit
  (``inference.handlers.noiseless``: the energy of component y is
  ||x - m_y||^2), so every example goes to its nearest mean.

The E-step reads the program: it is traced once with ``y`` conditioned to every
component at once (the shape NumPyro's parallel enumeration uses), and the
log-joint log alpha_y + log N(x_i; m_y, Sigma_y) is the sum of the two sites'
log-probabilities (tested against ``TraceEnum_ELBO``). The M-step is closed form.
Covariances use the new means (the exact maximiser; the paper's eq. 18 prints
the old ones) plus ``reg_covar`` on the diagonal, as scikit-learn does.

Criteria, computed for every fit at its final parameters (natural logarithms,
per example; the paper's constants -d log h - log N, common to every k, are
left out, b_0 = (d/2) log 2 pi is kept):

* ``L_stocha`` (eq. 14-16) at the posterior responsibilities: minus the mean
  log-likelihood;
* ``L_map`` (eq. 20): the same free energy at the 0/1 assignment to the most
  probable component, with the weights of the assignment (its -sum alpha log
  alpha term);
* ``L_NN`` (eq. 22): nearest-mean assignment, equal weights, one variance
  sigma^2 = E_MSE / d at its optimum; and ``J = log k + (d/2) log E_MSE`` (eq. 24).

For the fits chained as the paper orders them (k-means, then hard-cut EM from
its result, then EM from that) L_stocha <= L_map <= L_NN (tested).

Automatic selection (sec. 5.2, ``prune=True``): after every M-step a component
is discarded when its (soft) count n_y falls below ``min_count`` (default
d + 1 for full covariances, where fewer points make Sigma_y singular; 2
otherwise), or the smallest eigenvalue of its covariance falls below
``variance_threshold`` times the data's mean variance (collapse onto a point
or a subspace), or its weight reaches zero; its weight becomes 0 and it takes
no further part. The result's ``num_components_trace`` records the surviving
count per iteration. Started large, this literal rule rarely removes a
redundant component (it keeps its points and stays non-singular);
``weight_rule="mml"`` is a named variant that does (see :func:`fit_mixture`
and ``examples/yingyang_selection.py``).

References
----------
Xu (1995), YING-YANG machine, sec. 4.1-4.3 (eq. 13-22), 5.1 (eq. 24), 5.2.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers

from inference.handlers import noiseless
from ppl_models import mixture
from ppl_models.diagnostics import ConvergenceWarning
from ppl_models.validation import check_data, check_positive, check_positive_int

__all__ = ["MixtureResult", "fit_mixture", "component_log_joint", "criteria", "MODES"]

#: The three limits of the program that :func:`fit_mixture` implements.
MODES = ("stochastic", "map", "nearest")


class MixtureResult(NamedTuple):
    """Result of :func:`fit_mixture`.

    Attributes
    ----------
    weights : array (k,)
        Mixing weights of the surviving components.
    means : array (k, d)
    covariances : array (k, d, d)
    num_components : int
        Surviving components k (of ``num_start`` at the start).
    labels : int32 array (num_examples,)
        Most probable surviving component of every example (index into the arrays above).
    L_stocha, L_map, L_NN, J : float
        The criteria at the final parameters (module docstring).
    objective_trace : array (num_iterations,)
        The objective each iteration lowers: L_stocha (``"stochastic"``), the hard
        free energy (``"map"``) or E_MSE (``"nearest"``), before each update.
    num_components_trace : int array (num_iterations,)
        Surviving components after each iteration's pruning.
    num_iterations : int
    converged : bool
    num_start : int
    mode, covariance : str
    collapsed : tuple of int
        Surviving components whose smallest covariance eigenvalue sank to the
        variance threshold (held up only by ``reg_covar``): a degenerate,
        unboundedly likely fit. Empty with ``prune=True``, which discards them.
    """

    weights: jax.Array
    means: jax.Array
    covariances: jax.Array
    num_components: int
    labels: jax.Array
    L_stocha: float
    L_map: float
    L_NN: float
    J: float
    objective_trace: jax.Array
    num_components_trace: jax.Array
    num_iterations: int
    converged: bool
    num_start: int
    mode: str
    covariance: str
    collapsed: tuple = ()


def _program_kwargs(weights, means, covariances, covariance):
    """The program's parameters for full covariance matrices of the given family."""
    if covariance == "full":
        return {"weights": weights, "means": means,
                "scale_tril": jnp.linalg.cholesky(covariances)}
    variances = jnp.diagonal(covariances, axis1=-2, axis2=-1)
    if covariance == "spherical":
        return {"weights": weights, "means": means, "scales": jnp.sqrt(variances[:, 0])}
    return {"weights": weights, "means": means, "scales": jnp.sqrt(variances)}


#: Rows of x per block when a component density is evaluated for every example.
_BLOCK = 2048


def _blocked_log_prob(fn, x, k):
    """``fn.log_prob(x)`` of the traced site ``x``, (k, N), a block of examples at a time.

    The site's distribution is the plate's expansion (batch (k, N)) of one density
    per component (batch (k, 1)); evaluating the expansion at once would build
    (k, N, d) intermediates (memory-bound at large N), so the per-component base
    density is evaluated on blocks of ``_BLOCK`` rows instead. A full-covariance
    Gaussian goes through its precision Cholesky factors P_y = L_y^-1:
    ||P_y (x_i - m_y)||^2 for every y is one matmul x_i @ [P_1^T ... P_k^T] (as
    scikit-learn does per component), where NumPyro's own ``log_prob`` would solve
    a triangular system per example and component.
    """
    base = fn
    while isinstance(base, dist.ExpandedDistribution):
        base = base.base_dist
    if base.batch_shape != (k, 1):  # not the one-density-per-component layout
        return fn.log_prob(x)
    batch_size = min(_BLOCK, x.shape[0])
    if type(base) is dist.MultivariateNormal:
        dim = x.shape[-1]
        loc = jnp.broadcast_to(base.loc, (k, 1, dim)).reshape(k, dim)
        scale_tril = jnp.broadcast_to(base.scale_tril, (k, 1, dim, dim)).reshape(k, dim, dim)
        eye = jnp.broadcast_to(jnp.eye(dim, dtype=scale_tril.dtype), scale_tril.shape)
        precision_tril = jax.scipy.linalg.solve_triangular(scale_tril, eye, lower=True)
        whiten = jnp.transpose(precision_tril, (2, 0, 1)).reshape(dim, k * dim)
        shift = jnp.einsum("yij,yj->yi", precision_tril, loc)

        def mahalanobis(row):  # (d,) -> (k,); lax.map vmaps it over blocks of rows
            white = (row @ whiten).reshape(k, dim) - shift
            return jnp.sum(white * white, axis=-1)

        squared = jax.lax.map(mahalanobis, x, batch_size=batch_size)
        half_log_det = jnp.sum(jnp.log(jnp.abs(jnp.diagonal(scale_tril, axis1=-2, axis2=-1))),
                               axis=-1)
        return (-0.5 * squared - half_log_det - 0.5 * dim * math.log(2 * math.pi)).T
    return jax.lax.map(lambda row: base.log_prob(row)[:, 0], x, batch_size=batch_size).T


def component_log_joint(x, weights, means, covariances, *, covariance="full", model=None,
                        limit=False):
    """log alpha_y + log N(x_i; m_y, Sigma_y) for every example and component, (N, k).

    Traces ``model`` (default ``ppl_models.mixture.model``) with ``y`` conditioned
    to all components at once. ``limit=True`` applies ``noiseless``: the result is
    then -||x_i - m_y||^2 (spherical covariance required).
    """
    model = mixture.model if model is None else model
    k = means.shape[0]
    program = handlers.condition(model, {"y": jnp.arange(k)[:, None]})
    if limit:
        program = noiseless(program)
    trace = handlers.trace(program).get_trace(
        x, covariance=covariance, **_program_kwargs(weights, means, covariances, covariance))
    site_x, site_y = trace["x"], trace["y"]
    log_joint = _blocked_log_prob(site_x["fn"], x, k)
    if site_x["scale"] is not None:
        log_joint = site_x["scale"] * log_joint
    if not limit:
        log_joint = log_joint + site_y["fn"].log_prob(site_y["value"])
    return jnp.broadcast_to(log_joint, (k, x.shape[0])).T


def _project(cov, covariance):
    """Restrict full covariance matrices (k, d, d) to the family."""
    if covariance == "full":
        return cov
    variances = jnp.diagonal(cov, axis1=-2, axis2=-1)
    if covariance == "spherical":
        variances = jnp.broadcast_to(jnp.mean(variances, -1, keepdims=True), variances.shape)
    return jax.vmap(jnp.diag)(variances)


class _State(NamedTuple):
    weights: jax.Array
    means: jax.Array
    covariances: jax.Array
    active: jax.Array


def _e_step(x, state, mode, covariance):
    """Responsibilities (N, k) and the objective at the current parameters."""
    if mode == "nearest":
        energy = -component_log_joint(x, state.weights, state.means, state.covariances,
                                      covariance="spherical", limit=True)
        energy = jnp.where(state.active, energy, jnp.inf)
        labels = jnp.argmin(energy, axis=1)
        resp = jax.nn.one_hot(labels, energy.shape[1], dtype=x.dtype)
        return resp, jnp.mean(jnp.min(energy, axis=1))
    log_joint = component_log_joint(x, state.weights, state.means, state.covariances,
                                    covariance=covariance)
    log_joint = jnp.where(state.active, log_joint, -jnp.inf)
    log_px = jax.nn.logsumexp(log_joint, axis=1, keepdims=True)
    if mode == "stochastic":
        return jnp.exp(log_joint - log_px), -jnp.mean(log_px)
    labels = jnp.argmax(log_joint, axis=1)
    resp = jax.nn.one_hot(labels, log_joint.shape[1], dtype=x.dtype)
    return resp, -jnp.mean(jnp.take_along_axis(log_joint, labels[:, None], axis=1))


def _m_step(x, resp, state, mode, covariance, reg_covar, prune, min_count, variance_floor,
            weight_offset=0.0):
    counts = jnp.sum(resp, axis=0)
    safe = jnp.where(counts > 0, counts, 1.0)
    means = jnp.where(counts[:, None] > 0, (resp.T @ x) / safe[:, None], state.means)
    # sum_n r_ny (x_n - m_y)(x_n - m_y)^T, accumulated over blocks of examples so that
    # the centred (k, block, d) array stays small (the whole (k, N, d) one is memory-
    # bound); padded rows have r = 0. Only the diagonal where the family keeps no more.
    num, dim = x.shape
    block = min(2048, num)
    num_blocks = -(-num // block)
    pad = ((0, num_blocks * block - num), (0, 0))
    blocks = (jnp.pad(x, pad).reshape(num_blocks, block, dim),
              jnp.pad(resp, pad).reshape(num_blocks, block, resp.shape[1]))

    def scatter(total, xr):
        centred = xr[0][None, :, :] - means[:, None, :]
        if covariance == "full":
            return total + jnp.einsum("nk,kni,knj->kij", xr[1], centred, centred), None
        return total + jnp.einsum("nk,kni->ki", xr[1], centred * centred), None

    shape = (means.shape[0], dim, dim) if covariance == "full" else means.shape
    cov, _ = jax.lax.scan(scatter, jnp.zeros(shape, x.dtype), blocks)
    if covariance != "full":
        cov = jax.vmap(jnp.diag)(cov)
    cov = cov / safe[:, None, None]
    eye = jnp.eye(dim, dtype=x.dtype)
    cov = _project(cov, covariance) + reg_covar * eye
    if mode == "nearest":  # one shared variance, equal weights (eq. 21-22)
        num = jnp.maximum(jnp.sum(counts), 1.0)
        variance = jnp.sum(counts * jnp.trace(cov - reg_covar * eye, axis1=1, axis2=2)) / (
            num * x.shape[1])
        cov = jnp.broadcast_to((variance + reg_covar) * eye, cov.shape)
    active = state.active
    if prune:
        smallest = jnp.linalg.eigvalsh(cov)[:, 0]
        active = active & (counts >= min_count) & (smallest >= variance_floor)
    cov = jnp.where(active[:, None, None], cov, eye)  # keep dead components valid
    if mode == "nearest":
        weights = jnp.where(active, 1.0, 0.0)
    else:  # n_y (eq. 17), or max(n_y - p/2, 0) for weight_rule="mml"
        weights = jnp.where(active, jnp.maximum(counts - weight_offset, 0.0), 0.0)
        if prune:
            active = active & (weights > 0)
    weights = weights / jnp.maximum(jnp.sum(weights), 1e-30)
    return _State(weights, jnp.where(active[:, None], means, state.means), cov, active)


def _bucket(k):
    """The compiled number of components for ``k``: a power of two up to 16, else k.

    A fit with k components runs as one of this many, the rest inactive from the
    start (the state pruning leaves behind: zero weight, no responsibility), so
    that fits over a range of k, as in model selection, share a few compilations.
    """
    return 1 << (k - 1).bit_length() if k <= 16 else k


def _pad(state):
    """Append inactive components to ``state`` up to ``_bucket(k)``."""
    k, dim = state.means.shape
    extra = _bucket(k) - k
    if not extra:
        return state
    eye = jnp.broadcast_to(jnp.eye(dim, dtype=state.means.dtype), (extra, dim, dim))
    return _State(jnp.concatenate([state.weights, jnp.zeros(extra, state.weights.dtype)]),
                  jnp.concatenate([state.means, jnp.broadcast_to(state.means[:1], (extra, dim))]),
                  jnp.concatenate([state.covariances, eye]),
                  jnp.concatenate([state.active, jnp.zeros(extra, bool)]))


@functools.partial(jax.jit, static_argnames=("mode", "covariance", "max_iterations", "prune"))
def _run(x, state, tol, reg_covar, min_count, variance_floor, weight_offset, *, mode,
         covariance,
         max_iterations, prune):
    trace0 = jnp.full(max_iterations, jnp.nan, x.dtype)
    count0 = jnp.zeros(max_iterations, jnp.int32)

    def body(carry):
        state, it, prev, _, objective_trace, count_trace, prev_resp = carry
        resp, objective = _e_step(x, state, mode, covariance)
        new = _m_step(x, resp, state, mode, covariance, reg_covar, prune, min_count,
                      variance_floor, weight_offset)
        change = jnp.abs(prev - objective) / jnp.maximum(jnp.abs(objective), 1e-30)
        same = jnp.all(resp == prev_resp) if mode != "stochastic" else jnp.asarray(False)
        done = (change <= tol) | same
        return (new, it + 1, objective, done, objective_trace.at[it].set(objective),
                count_trace.at[it].set(jnp.sum(new.active).astype(jnp.int32)), resp)

    def running(carry):
        return (~carry[3]) & (carry[1] < max_iterations)

    resp0 = jnp.full((x.shape[0], state.means.shape[0]), -1.0, x.dtype)
    init = (state, 0, jnp.asarray(jnp.inf, x.dtype), jnp.asarray(False), trace0, count0, resp0)
    state, it, _, done, objective_trace, count_trace, _ = jax.lax.while_loop(
        running, body, init)
    return state, it, done, objective_trace, count_trace


def criteria(x, weights, means, covariances, covariance="full"):
    """L_stocha, L_map, L_NN and J of a mixture on data x (module docstring), as floats."""
    values, _, _ = _criteria(jnp.asarray(x), weights, means, covariances, covariance)
    return {name: float(value) for name, value in values.items()}


@functools.partial(jax.jit, static_argnums=4)
def _criteria(x, weights, means, covariances, covariance):
    """:func:`criteria` as arrays, with the MAP labels and the nearest-mean labels."""
    num, dim = x.shape
    k = means.shape[0]
    log_joint = component_log_joint(x, weights, means, covariances, covariance=covariance)
    l_stocha = -jnp.mean(jax.nn.logsumexp(log_joint, axis=1))
    labels = jnp.argmax(log_joint, axis=1)
    hard = jnp.bincount(labels, length=k) / num
    log_normal = log_joint - jnp.log(jnp.where(weights > 0, weights, 1.0))
    l_map = (-jnp.mean(jnp.take_along_axis(log_normal, labels[:, None], axis=1))
             - jnp.sum(jnp.where(hard > 0, hard * jnp.log(jnp.where(hard > 0, hard, 1.0)), 0.0)))
    distances = jax.lax.map(lambda row: jnp.sum((row - means) ** 2, axis=-1), x,
                            batch_size=min(_BLOCK, num))
    e_mse = jnp.mean(jnp.min(distances, axis=1))
    b0 = 0.5 * dim * math.log(2 * math.pi)
    l_nn = 0.5 * dim + math.log(k) + 0.5 * dim * jnp.log(e_mse / dim) + b0
    j = math.log(k) + 0.5 * dim * jnp.log(e_mse)
    values = {"L_stocha": l_stocha, "L_map": l_map, "L_NN": l_nn, "J": j, "E_MSE": e_mse}
    return values, labels.astype(jnp.int32), jnp.argmin(distances, axis=1).astype(jnp.int32)


@functools.partial(jax.jit, static_argnums=2)
def _kmeans_plus_plus(rng_key, x, k):
    """k-means++ seeding (Arthur and Vassilvitskii 2007), jitted (compiled once per shape)."""
    keys = jax.random.split(rng_key, k)
    first = x[jax.random.randint(keys[0], (), 0, x.shape[0])]
    centres = jnp.zeros((k, x.shape[1]), x.dtype).at[0].set(first)
    nearest = jnp.sum((x - first) ** 2, axis=1)

    def body(i, carry):
        centres, nearest = carry
        p = nearest / jnp.maximum(jnp.sum(nearest), 1e-30)
        pick = x[jax.random.choice(keys[i], x.shape[0], p=p)]
        return centres.at[i].set(pick), jnp.minimum(nearest, jnp.sum((x - pick) ** 2, axis=1))

    centres, _ = jax.lax.fori_loop(1, k, body, (centres, nearest))
    return centres


def fit_mixture(x, num_components: int, *, mode: str = "stochastic", covariance: str = "full",
                prune: bool = True, rng_key=None, init: str = "kmeans++", init_means=None,
                init_weights=None, init_covariances=None, max_iterations: int = 200,
                tol: float = 1e-7, reg_covar: float = 1e-6, min_count=None,
                variance_threshold: float = 1e-6, weight_rule: str = "ml") -> MixtureResult:
    """Fit the Gaussian-mixture program by EM, hard-cut EM or k-means (module docstring).

    Parameters
    ----------
    x : array (num_examples, d)
    num_components : int
        Components at the start (k >= 1, at most the number of distinct examples).
    mode : {"stochastic", "map", "nearest"}
    covariance : {"full", "diag", "spherical"}
        Family of Sigma_y (``"nearest"`` always uses one shared sigma^2 I).
    prune : bool
        Discard collapsing components (sec. 5.2). Without pruning a collapsing
        component stays, held up by ``reg_covar``, and a warning says so.
    rng_key : jax.random key
        For the initial means (required unless ``init_means`` is given).
    init : {"kmeans++", "random"}
        Initial means: k-means++ seeding, or random examples plus small noise
        (the paper's sec. 5.2 start). Initial covariances: the data's mean
        variance / k times I (sec. 5.2); initial weights equal.
    init_means, init_weights, init_covariances : arrays, optional
        Explicit start (k, d), (k,), (k, d, d).
    max_iterations, tol : int, float
        Stop after ``max_iterations`` or when the objective changes by at most
        ``tol`` relative (or, for the hard modes, no assignment changes).
    reg_covar : float
        Added to every covariance's diagonal (scikit-learn's default 1e-6).
    min_count : float, optional
        Pruning threshold on n_y (default d + 1 for full covariances, else 2).
    variance_threshold : float
        Pruning threshold on the smallest covariance eigenvalue, relative to the
        data's mean variance.
    weight_rule : {"ml", "mml"}
        ``"ml"``: alpha_y = n_y / N (eq. 17, the paper). ``"mml"``: a named
        variant, not the paper's: alpha_y proportional to max(n_y - p/2, 0) with
        p the free parameters of one component (mean and covariance), the
        minimum-message-length update of Figueiredo and Jain (2002). A component
        that does not pay for its parameters loses weight, then its points, and
        is discarded when its weight reaches zero (sec. 5.2's rule). Needs
        ``prune=True`` and a mode other than ``"nearest"`` (equal weights).

    Returns
    -------
    MixtureResult
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
    if covariance not in mixture.COVARIANCES:
        raise ValueError(f"covariance must be one of {mixture.COVARIANCES}; got {covariance!r}")
    if weight_rule not in ("ml", "mml"):
        raise ValueError(f"weight_rule must be 'ml' or 'mml'; got {weight_rule!r}")
    if weight_rule == "mml" and (not prune or mode == "nearest"):
        raise ValueError("weight_rule='mml' needs prune=True and mode 'stochastic' or 'map'; "
                         f"got prune={prune!r}, mode={mode!r}")
    if init not in ("kmeans++", "random"):
        raise ValueError(f"init must be 'kmeans++' or 'random'; got {init!r}")
    x = check_data(x, "x")
    num, dim = x.shape
    k = check_positive_int(num_components, "num_components")
    distinct = int(np.unique(np.asarray(x), axis=0).shape[0])
    if k > distinct:
        raise ValueError(f"num_components={k} exceeds the {distinct} distinct example(s) in x")
    spread = float(jnp.mean(jnp.var(x, axis=0)))
    if spread == 0.0:
        raise ValueError("x has no spread (every example is the same point): nothing to fit")
    max_iterations = check_positive_int(max_iterations, "max_iterations")
    check_positive(reg_covar, "reg_covar") if reg_covar else None
    min_count = (dim + 1 if covariance == "full" else 2) if min_count is None else min_count
    if mode == "nearest":
        covariance = "spherical"
    if init_means is None:
        if rng_key is None:
            raise ValueError("rng_key is required unless init_means is given")
        key_means, key_noise = jax.random.split(rng_key)
        if init == "kmeans++":
            means = _kmeans_plus_plus(key_means, x, k)
        else:
            rows = jax.random.choice(key_means, num, (k,), replace=False)
            means = x[rows] + 0.01 * math.sqrt(spread) * jax.random.normal(key_noise, (k, dim))
    else:
        means = jnp.asarray(init_means, x.dtype)
        if means.shape != (k, dim) or not bool(jnp.all(jnp.isfinite(means))):
            raise ValueError(f"init_means must be finite with shape ({k}, {dim}); "
                             f"got shape {means.shape}")
    weights = (jnp.full(k, 1.0 / k, x.dtype) if init_weights is None
               else jnp.asarray(init_weights, x.dtype))
    if weights.shape != (k,) or not bool(jnp.all(weights > 0)):
        raise ValueError(f"init_weights must be positive with shape ({k},); got {weights}")
    weights = weights / jnp.sum(weights)
    if init_covariances is None:
        cov = jnp.broadcast_to(spread / k * jnp.eye(dim, dtype=x.dtype), (k, dim, dim))
    else:
        cov = jnp.asarray(init_covariances, x.dtype)
        if cov.shape != (k, dim, dim):
            raise ValueError(f"init_covariances must have shape ({k}, {dim}, {dim}); "
                             f"got {cov.shape}")
    state = _pad(_State(weights, means, _project(cov, covariance), jnp.ones(k, bool)))
    per_component = {"full": dim * (dim + 3) // 2, "diag": 2 * dim, "spherical": dim + 1}
    weight_offset = 0.5 * per_component[covariance] if weight_rule == "mml" else 0.0
    state, it, done, objective_trace, count_trace = _run(
        x, state, tol, reg_covar, min_count, variance_threshold * spread, weight_offset,
        mode=mode,
        covariance=covariance, max_iterations=max_iterations, prune=prune)
    it = int(it)
    active = np.asarray(state.active)
    if not bool(done):
        warnings.warn(f"fit_mixture: not converged after {max_iterations} iterations "
                      f"(mode={mode!r}); raise max_iterations", ConvergenceWarning, stacklevel=2)
    collapsed = np.zeros(0, int)
    if not prune and mode != "nearest":
        smallest = np.asarray(jnp.linalg.eigvalsh(state.covariances))[:, 0]
        collapsed = np.flatnonzero((smallest < variance_threshold * spread + 2 * reg_covar)
                                   & active)
        if collapsed.size:
            warnings.warn(f"fit_mixture: component(s) {collapsed.tolist()} collapsed (smallest "
                          "covariance eigenvalue at reg_covar); prune=True discards them",
                          ConvergenceWarning, stacklevel=2)
    keep = np.flatnonzero(active)
    weights, means, cov = state.weights[keep], state.means[keep], state.covariances[keep]
    values, labels, nearest = _criteria(x, weights, means, cov, covariance)
    values = {name: float(value) for name, value in values.items()}
    if mode == "nearest":
        labels = nearest
    return MixtureResult(
        weights=weights, means=means, covariances=cov, num_components=int(keep.size),
        labels=labels, L_stocha=values["L_stocha"], L_map=values["L_map"],
        L_NN=values["L_NN"], J=values["J"], objective_trace=objective_trace[:it],
        num_components_trace=count_trace[:it], num_iterations=it, converged=bool(done),
        num_start=k, mode=mode, covariance=covariance,
        collapsed=tuple(int(np.searchsorted(keep, c)) for c in collapsed))

