"""EM, hard-cut EM and k-means on the Gaussian-mixture program (seed 002 sec. 4-5).

One program (``ppl_models.mixture.model``), three limits of the YING-YANG
alternation (``shared/MODELS.md`` 3), :func:`fit_mixture`'s ``mode``:

* ``"stochastic"`` -- SVQ = EM (eq. 17-18): responsibilities P(y | x_i) from the
  program, then weighted means, covariances and weights n_y / N;
* ``"map"`` -- MAP-VQ = hard-cut EM (eq. 19-20): every example goes to its most
  probable component, then the same updates with 0/1 weights;
* ``"nearest"`` -- NN-VQ = k-means (eq. 21-22): the program with spherical,
  equal covariances and equal weights in the sigma -> 0 limit
  (``inference.program.handlers.noiseless``: the energy of component y is
  ||x - m_y||^2), so every example goes to its nearest mean.

The E-step reads the program: it is traced once with ``y`` conditioned to every
component at once (the shape NumPyro's parallel enumeration uses), and the
log-joint log alpha_y + log N(x_i; m_y, Sigma_y) is the sum of the two sites'
log-probabilities (tested against ``TraceEnum_ELBO``). The M-step is closed form.
Covariances use the new means (the exact maximiser; the paper's eq. 18 prints
the old ones) plus ``reg_covar`` on the diagonal, as scikit-learn does.

How it is evaluated: a Gaussian log-density is linear in the sufficient
statistics t(x) = [x_i x_j (i <= j), x, 1] of the example, with coefficients
eta_y (the natural parameters) that :func:`natural_parameters` reads from the
traced site's distribution (``MultivariateNormal`` loc and scale_tril, ``Normal``
loc and scale, or ``noiseless``'s ``NoiselessGaussian`` loc) plus log alpha_y from
the site ``y``. So the whole (N, k) log-joint is one GEMM t(x) @ eta^T, and the
M-step's counts, sums and second moments are one GEMM R^T t(x). Every iteration
is a single pass over blocks of t(x) (computed once per fit, on data centred at
its mean to limit float cancellation) doing both products while the block is in
cache; a covariance whose moment form would lose more than a third of its digits
is recomputed about the new means (:func:`_cancellation_limit`). The same
program read by ``noiseless`` gives k-means its energies, ||x||^2 - 2 x . m_y +
||m_y||^2 in that form. ``component_log_joint`` is tested equal to NumPyro's
log-density of the program.

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

from inference.engine import host
from inference.engine.sharding import (
    mesh_size,
    pad_examples,
    psum,
    resolve_mesh,
    shard_examples,
)
from inference.engine.streaming import is_stream
from inference.program.handlers import NoiselessGaussian, noiseless
from ppl_models import mixture
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import (
    MissingKeyError,
    check_bool,
    check_choice,
    check_data,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_rng_key,
)

__all__ = ["MixtureResult", "fit_mixture", "component_log_joint", "criteria", "MODES",
           "quadratic_features", "natural_parameters"]

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


def _base_density(fn, k):
    """The one-density-per-component base of the traced site ``x``, or ``None``.

    With ``y`` conditioned to all k components at once, the plate expands one
    density per component (batch (k, 1)) to the site's batch (k, N). Peels the
    expansions and ``to_event`` wrappers (``ExpandedDistribution``,
    ``Independent``; the ``noiseless`` handler keeps its expansion lazy) and
    returns ``(family, params)`` read from the base distribution's parameters,
    each (k, d) or (k, d, d):

    * ``("full", (loc, scale_tril))`` -- a ``MultivariateNormal``;
    * ``("diag", (loc, scale))`` -- ``Normal(loc, scale).to_event(1)``, scale (k, d);
    * ``("spherical", (loc, scale))`` -- the same with one scale per component (k,);
    * ``("noiseless", (loc,))`` -- ``NoiselessGaussian(loc).to_event(1)``, the
      sigma -> 0 limit (energy -||x - m_y||^2).

    ``None`` for any other layout; the caller then evaluates ``fn.log_prob``.
    """
    event_dims = 0
    while isinstance(fn, dist.ExpandedDistribution | dist.Independent):
        if isinstance(fn, dist.Independent):
            event_dims += fn.reinterpreted_batch_ndims
        fn = fn.base_dist
    if type(fn) is dist.MultivariateNormal and event_dims == 0:
        dim = fn.event_shape[0]
        if jnp.broadcast_shapes(fn.batch_shape, (k, 1)) != (k, 1):
            return None
        loc = jnp.broadcast_to(fn.loc, (k, 1, dim)).reshape(k, dim)
        tril = jnp.broadcast_to(fn.scale_tril, (k, 1, dim, dim)).reshape(k, dim, dim)
        return "full", (loc, tril)
    if event_dims != 1 or not isinstance(fn, dist.Normal | NoiselessGaussian):
        return None
    if len(fn.batch_shape) != 3 or jnp.broadcast_shapes(fn.batch_shape[:2], (k, 1)) != (k, 1):
        return None
    dim = fn.batch_shape[-1]
    loc = jnp.broadcast_to(fn.loc, (k, 1, dim)).reshape(k, dim)
    if isinstance(fn, NoiselessGaussian):
        return "noiseless", (loc,)
    if jnp.shape(fn.scale)[-1:] in ((), (1,)):  # one scale for all coordinates
        return "spherical", (loc, jnp.broadcast_to(fn.scale, (k, 1, 1)).reshape(k))
    return "diag", (loc, jnp.broadcast_to(fn.scale, (k, 1, dim)).reshape(k, dim))


def _feature_kind(family):
    """Quadratic statistics a family's log-density needs (:func:`quadratic_features`)."""
    return {"full": "full", "diag": "diag"}.get(family, "spherical")


#: Kinds of :func:`quadratic_features`, richest first.
_KINDS = ("full", "diag", "spherical")


def _kind_of(covariance):
    """Features of the program's covariance family (``"nearest"`` runs as spherical)."""
    return covariance if covariance in ("full", "diag") else "spherical"


def quadratic_features(x, kind, shift=None):
    """Sufficient statistics t(x) of a Gaussian family, one row per example (N, p).

    ``t(x) = [quadratic statistics of z, z, 1]`` with ``z = x - shift``: for
    ``kind="full"`` the products z_i z_j, i <= j (row-major upper triangle,
    d (d + 1) / 2 of them), for ``kind="diag"`` the squares z_i^2 (d), for
    ``kind="spherical"`` their sum ||z||^2 (1). Every
    Gaussian log-density, and every statistic of the M-step (counts, sums,
    second moments), is linear in t(x): evaluating all k components is the one
    product ``t(x) @ eta^T``, and the M-step's statistics are ``R^T t(x)``.
    ``shift`` (default the mean of x) centres the data, so that the float
    cancellation in ``z^T Lambda z - 2 z^T Lambda mu + mu^T Lambda mu`` and in
    ``E[z z^T] - mu mu^T`` is relative to the spread of the data about its
    centre, not to its distance from the origin.

    Returns
    -------
    shift : array (d,)
    features : array (N, p)
    """
    x = jnp.asarray(x)
    shift = jnp.mean(x, axis=0) if shift is None else jnp.asarray(shift, x.dtype)
    z = x - shift
    if kind == "full":  # row-major upper triangle, as np.triu_indices (static slices)
        quad = jnp.concatenate([z[:, i:i + 1] * z[:, i:] for i in range(x.shape[1])], axis=1)
    elif kind == "diag":
        quad = z * z
    else:
        quad = jnp.sum(z * z, axis=1, keepdims=True)
    ones = jnp.ones((x.shape[0], 1), x.dtype)
    return shift, jnp.concatenate([quad, z, ones], axis=1)


def natural_parameters(family, params, kind, shift):
    """eta (k, p) with log p_y(x) = t(x) . eta_y for the base densities of :func:`_base_density`.

    ``t`` is :func:`quadratic_features` of the given ``kind`` and ``shift``. For a
    ``MultivariateNormal(m, scale_tril=L)``, with P = L^-1 (the precision Cholesky
    factor, Lambda = P^T P) and mu = m - shift: the coefficient of z_i^2 is
    -Lambda_ii / 2, of z_i z_j (i < j) -Lambda_ij, of z the vector Lambda mu, and
    the constant -||P mu||^2 / 2 - sum log |L_ii| - (d / 2) log 2 pi. A diagonal
    ``Normal(m, s)``: -1 / (2 s^2), mu / s^2 and -sum mu^2 / (2 s^2) - sum log s
    - (d / 2) log 2 pi (spherical: the one coefficient of ||z||^2). The noiseless
    limit (energy units): -1, 2 mu and -||mu||^2.
    """
    loc = params[0]
    k, dim = loc.shape
    mu = loc - shift
    if family == "full":
        tril = params[1]
        eye = jnp.broadcast_to(jnp.eye(dim, dtype=tril.dtype), tril.shape)
        precision_tril = jax.scipy.linalg.solve_triangular(tril, eye, lower=True)
        precision = jnp.swapaxes(precision_tril, -1, -2) @ precision_tril
        white = jnp.einsum("yij,yj->yi", precision_tril, mu)
        linear = jnp.einsum("yji,yj->yi", precision_tril, white)
        half_log_det = jnp.sum(jnp.log(jnp.abs(jnp.diagonal(tril, axis1=-2, axis2=-1))), -1)
        constant = (-0.5 * jnp.sum(white * white, -1) - half_log_det
                    - 0.5 * dim * math.log(2 * math.pi))
        rows, cols = np.triu_indices(dim)
        quad = jnp.where(rows == cols, -0.5, -1.0) * precision[:, rows, cols]
        if kind != "full":
            raise ValueError("a full-covariance density needs kind='full' features")
    else:
        if family == "noiseless":
            inverse = jnp.full_like(mu, 2.0)  # -||z - mu||^2 = 2 sigma^2 log N at sigma^2 = 1/2
            constant = -jnp.sum(mu * mu, -1)
        else:
            scale = jnp.broadcast_to(params[1].reshape(k, -1), (k, dim))
            inverse = 1.0 / jnp.square(scale)
            constant = (-0.5 * jnp.sum(inverse * mu * mu, -1)
                        - jnp.sum(jnp.log(scale), -1) - 0.5 * dim * math.log(2 * math.pi))
        linear = inverse * mu
        diagonal = -0.5 * inverse
        if kind == "full":
            rows, cols = np.triu_indices(dim)
            quad = jnp.where(rows == cols, diagonal[:, rows], 0.0)
        elif kind == "diag":
            quad = diagonal
        elif family in ("spherical", "noiseless"):  # one coefficient of ||z||^2
            quad = diagonal[:, :1]
        else:
            raise ValueError(f"a {family} density needs kind='diag' or 'full' features")
    return jnp.concatenate([quad, linear, constant[:, None]], axis=1)


def _trace_components(x, weights, means, covariances, covariance, model, limit):
    """Trace ``model`` with ``y`` conditioned to all k components at once (the shape of
    NumPyro's parallel enumeration), under ``noiseless`` when ``limit``."""
    model = mixture.model if model is None else model
    k = means.shape[0]
    program = handlers.condition(model, {"y": jnp.arange(k)[:, None]})
    if limit:
        program = noiseless(program)
    return handlers.trace(program).get_trace(
        x, covariance=covariance, **_program_kwargs(weights, means, covariances, covariance))


def _log_joint_parameters(trace, k, kind, shift, limit):
    """eta (k, p) with log p(x_i, y) = t(x_i) . eta_y for the traced sites, or ``None``.

    Reads the site ``x``'s per-component base density (:func:`_base_density`) and
    its scale, and adds the site ``y``'s log-probability of each component to the
    constant (unless ``limit``: ``noiseless`` scales it by zero). ``None`` when a
    site is not of that layout (the caller then evaluates the sites directly).
    """
    site_x, site_y = trace["x"], trace["y"]
    base = _base_density(site_x["fn"], k)
    if base is None:
        return None
    sufficient = {"full": ("full",), "diag": ("full", "diag")}.get(base[0], _KINDS)
    if kind not in sufficient:
        return None
    eta = natural_parameters(base[0], base[1], kind, shift)
    if site_x["scale"] is not None:
        if jnp.ndim(site_x["scale"]) != 0:
            return None
        eta = site_x["scale"] * eta
    if not limit:
        prior = site_y["fn"]
        while isinstance(prior, dist.ExpandedDistribution):
            prior = prior.base_dist
        log_prior = prior.log_prob(site_y["value"])
        if jnp.shape(log_prior) != (k, 1):
            return None
        if site_y["scale"] is not None:
            log_prior = site_y["scale"] * log_prior
        eta = eta.at[:, -1].add(log_prior[:, 0])
    return eta


def _feature_width(kind, dim):
    """Columns p of :func:`quadratic_features`."""
    return {"full": dim * (dim + 1) // 2, "diag": dim, "spherical": 1}[kind] + dim + 1


def component_log_joint(x, weights, means, covariances, *, covariance="full", model=None,
                        limit=False, features=None):
    """log alpha_y + log N(x_i; m_y, Sigma_y) for every example and component, (N, k).

    Traces ``model`` (default ``ppl_models.mixture.model``) with ``y`` conditioned
    to all components at once and evaluates the sites it records. When the site
    ``x`` is one Gaussian density per component (:func:`_base_density`), all N k
    values are one GEMM ``t(x) @ eta^T``: the data's sufficient statistics
    (:func:`quadratic_features`; pass ``features`` = (shift, t(x)) when evaluating
    the same x repeatedly) against the natural parameters read from the traced
    distributions (:func:`natural_parameters`, plus log alpha_y from the site
    ``y``), where evaluating the site's expansion would build (k, N, d)
    intermediates and solve a triangular system per example and component
    (tested equal to NumPyro's ``log_density``). ``limit=True`` applies
    ``noiseless``: the result is then -||x_i - m_y||^2 (spherical covariance
    required). Any other layout is evaluated by the sites' ``log_prob``.
    """
    k = means.shape[0]
    trace = _trace_components(x, weights, means, covariances, covariance, model, limit)
    base = _base_density(trace["x"]["fn"], k)
    if base is not None:
        kind = _feature_kind(base[0])
        if features is None or features[1].shape[1] != _feature_width(kind, x.shape[1]):
            features = quadratic_features(x, kind)
        eta = _log_joint_parameters(trace, k, kind, features[0], limit)
        if eta is not None:
            return features[1] @ eta.astype(features[1].dtype).T
    site_x, site_y = trace["x"], trace["y"]
    log_joint = site_x["fn"].log_prob(x)
    if site_x["scale"] is not None:
        log_joint = site_x["scale"] * log_joint
    if not limit:
        log_prior = site_y["fn"].log_prob(site_y["value"])
        if site_y["scale"] is not None:
            log_prior = site_y["scale"] * log_prior
        log_joint = log_joint + log_prior
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


#: Feature entries (rows x p) per block of the E-step sweep (:func:`_sweep`), about.
_BLOCK_ENTRIES = 1 << 19


def _block_rows(num, width):
    """Rows per block of the sweep over ``num`` examples with ``width`` features each.

    The largest power of two with at most ``_BLOCK_ENTRIES`` feature entries, between
    256 and 16,384 rows (and at most ``num``). A block's features and its (rows, k)
    log-joint stay in cache between the E-step product and the M-step product that
    reuses them, while the block is large enough for XLA to split its products over
    the cores. Measured on 2 cores (N = 200,000, d = 16, k = 32, 20 iterations):
    full covariances (width 153) 0.76 s at 2,048 rows against 1.06 s at 1,024 and
    1.3 s at 4,096 (float32); k-means (width 18) 0.125 s at 16,384 rows against
    0.18 s at 1,024 (float32), 0.19 s against 0.39 s (float64).
    """
    rows = 1 << max(8, min(14, (_BLOCK_ENTRIES // max(width, 1)).bit_length() - 1))
    return max(1, min(rows, num))


class _Features(NamedTuple):
    """The data's quadratic features, padded to whole blocks (built once per fit)."""

    shift: jax.Array  # (d,) the data's centre
    blocks: jax.Array  # (num_blocks, rows, p) t(x - shift), x padded with zeros (_block_rows)
    valid: jax.Array  # (num_blocks, rows) False on padded rows


def _block_features(x, kind, shift=None, valid=None):
    """:func:`quadratic_features` of x cut into blocks of :func:`_block_rows` rows.

    ``shift`` defaults to the mean of x; ``valid`` (rows,) marks rows that are
    padding already (one device's rows of a sharded fit) as False. Rows added to
    fill the last block are masked too.
    """
    num, dim = x.shape
    block = _block_rows(num, _feature_width(kind, dim))
    num_blocks = -(-num // block)
    extra = num_blocks * block - num
    shift = jnp.mean(x, axis=0) if shift is None else shift
    if kind == "full":
        # Block by block: a block's d (d + 1) / 2 products per row stay in cache (2x
        # faster than over the whole array at N = 200,000, d = 16).
        rows = jnp.pad(x, ((0, extra), (0, 0))).reshape(num_blocks, block, -1)
        phi = jax.lax.map(lambda rows: quadratic_features(rows, kind, shift)[1], rows)
    else:
        # Narrow features in one fused pass over x, then padded: a loop over blocks of
        # a padded copy of x made inside the same jit costs XLA a copy of that array
        # per block (1.6-3x slower at N = 200,000, d = 16).
        phi = jnp.pad(quadratic_features(x, kind, shift)[1], ((0, extra), (0, 0)))
        phi = phi.reshape(num_blocks, block, -1)
    valid = jnp.ones(num, bool) if valid is None else valid
    return _Features(shift, phi, jnp.pad(valid, (0, extra)).reshape(num_blocks, block))


def _log_joint_eta(x, state, mode, covariance, shift):
    """The program's natural parameters eta (k, p) at the current parameters.

    ``"nearest"`` reads the noiseless program (minus the energies ||x - m_y||^2).
    """
    limit = mode == "nearest"
    covariance = "spherical" if limit else covariance
    k = state.means.shape[0]
    trace = _trace_components(x, state.weights, state.means, state.covariances, covariance,
                              None, limit)
    eta = _log_joint_parameters(trace, k, _kind_of(covariance), shift, limit)
    if eta is None:  # the mixture program's sites always have the per-component layout
        raise NotImplementedError("the traced mixture program has an unexpected site layout")
    return eta.astype(x.dtype)


def _block_responsibilities(phi, valid, eta, active, mode, one_hot=True):
    """E-step on one block: responsibilities (B, k), labels (B,) and per-row objective (B,).

    The log-joint of every row and component is ``phi @ eta^T``. ``"stochastic"``:
    the posterior (log-sum-exp); ``"map"``: 0/1 on the most probable component;
    ``"nearest"``: 0/1 on the nearest mean (the noiseless program's largest value).
    Padded rows get zero responsibility and objective. The hard modes return
    ``None`` for the 0/1 responsibilities unless ``one_hot``.
    """
    log_joint = jnp.where(active, phi @ eta.T, -jnp.inf)
    k = eta.shape[0]
    if mode == "stochastic":
        top = jnp.max(log_joint, axis=1, keepdims=True)
        weights = jnp.exp(log_joint - top)
        total = jnp.sum(weights, axis=1, keepdims=True)
        resp = weights * (valid[:, None] / total)
        value = -(jnp.log(total[:, 0]) + top[:, 0])
        labels = None
    else:  # the first most probable component, as argmax (whose XLA CPU reduction is slow)
        labels, top = _first_argmax(log_joint)
        resp = None
        if one_hot:
            resp = ((labels[:, None] == jnp.arange(k)) & valid[:, None]).astype(phi.dtype)
        value = -top
    return resp, labels, jnp.where(valid, value, 0.0)


def _sweep(features, eta, active, mode, num):
    """E-step and the M-step's statistics in one pass over blocks of examples.

    Returns ``R^T t(x)`` (k, p) (counts, sums and second moments of every
    component), the objective (mean over examples: minus the log-likelihood, the
    hard free energy or E_MSE) and, for the hard modes, the labels (num,).
    """
    k, p = eta.shape

    def body(carry, block):
        stats, total = carry
        phi, valid = block
        resp, labels, value = _block_responsibilities(phi, valid, eta, active, mode,
                                                      one_hot=False)
        if resp is None:  # hard modes: sum the rows of each component (cheaper than R^T phi)
            block_stats = jax.ops.segment_sum(jnp.where(valid[:, None], phi, 0.0), labels, k)
        else:
            block_stats = resp.T @ phi
        carry = (stats + block_stats, total + jnp.sum(value))
        return carry, (None if labels is None else labels.astype(jnp.int32))

    zero = (jnp.zeros((k, p), eta.dtype), jnp.zeros((), eta.dtype))
    (stats, total), labels = jax.lax.scan(body, zero, (features.blocks, features.valid))
    labels = None if labels is None else labels.reshape(-1)[:num]
    return stats, total / num, labels


def _cancellation_limit(dtype):
    """Largest ratio E_y[z_i^2] / Var_y(z_i) at which the M-step trusts the moment form.

    z is the example about the data's centre; the ratio is per component y and
    coordinate i. Var = E[z z^T] - E[z] E[z]^T loses log2(ratio) bits to
    cancellation; above eps^(-1/3) (203 in float32, 1.7e5 in float64: a third of
    the digits) :func:`_m_step` recomputes the scatter about the new means.
    """
    return float(jnp.finfo(dtype).eps) ** (-1.0 / 3.0)


def _exact_scatter(x, features, eta, active, mode, means, covariance):
    """sum_n r_ny (x_n - m_y)(x_n - m_y)^T (k, d, d), or its diagonal (k, d), centred exactly.

    The responsibilities are recomputed block by block from ``eta`` (the E-step's
    parameters), so that the centred (k, block, d) array stays small. The fallback of
    :func:`_m_step` where the moment form would cancel (a component far from the
    data's centre relative to its width). In a sharded fit, x and ``features`` are
    one device's rows (padding masked by ``features.valid``): its part of the sum.
    """
    num_blocks, block, _ = features.blocks.shape
    dim = x.shape[1]
    rows = jnp.pad(x, ((0, num_blocks * block - x.shape[0]), (0, 0)))
    rows = rows.reshape(num_blocks, block, dim)

    def scatter(total, blk):
        xb, phi, valid = blk
        resp = _block_responsibilities(phi, valid, eta, active, mode)[0]
        centred = xb[None, :, :] - means[:, None, :]
        if covariance == "full":
            return total + jnp.einsum("nk,kni,knj->kij", resp, centred, centred), None
        return total + jnp.einsum("nk,kni->ki", resp, centred * centred), None

    shape = (means.shape[0], dim, dim) if covariance == "full" else means.shape
    total, _ = jax.lax.scan(scatter, jnp.zeros(shape, x.dtype),
                            (rows, features.blocks, features.valid))
    return total


def _moment_form(stats, state, shift, *, mode, covariance):
    """New means and the moment-form covariances from the summed statistics.

    ``stats = R^T t(x)`` (:func:`_sweep`) holds the counts n_y, the sums and the
    second moments about the data's centre ``shift``, so
    Sigma_y = E_y[z z^T] - E_y[z] E_y[z]^T at the new means (the exact maximiser).
    Returns a dict with ``counts``, ``means``, the moment form ``cov`` ((k, d, d) for
    full covariances, (k, d) for diagonal and spherical, the total squared error
    sum_y n_y (E_y||z||^2 - ||E_y z||^2) for ``"nearest"``), ``norm`` (the divisor
    of an exact scatter) and ``cancels``: whether the difference is not to be
    trusted for some active component, because it loses a third of its digits
    (:func:`_cancellation_limit`) or, for full covariances, because its smallest
    eigenvalue is within the rounding error of the moments (d eps max_i E[z_i^2]),
    where the moment form can even be indefinite.
    """
    dim = state.means.shape[1]
    dtype = state.means.dtype
    k = stats.shape[0]
    counts = stats[:, -1]
    safe = jnp.where(counts > 0, counts, 1.0)
    centred = stats[:, -1 - dim:-1] / safe[:, None]
    means = jnp.where(counts[:, None] > 0, centred + shift, state.means)
    second = stats[:, :-1 - dim] / safe[:, None]
    tiny = jnp.finfo(dtype).tiny
    doubtful = jnp.zeros(k, bool)
    if mode == "nearest":  # one shared variance, equal weights (eq. 21-22)
        spread = second[:, 0] - jnp.sum(centred * centred, axis=1)
        ratio = second[:, 0] / jnp.maximum(spread, tiny)
        cov, norm = jnp.sum(counts * spread), jnp.ones((), dtype)
    else:
        if covariance == "full":
            rows, cols = np.triu_indices(dim)
            moments = jnp.zeros((k, dim, dim), dtype).at[:, rows, cols].set(second)
            moments = moments.at[:, cols, rows].set(second)
            cov = moments - centred[:, :, None] * centred[:, None, :]
            square = jnp.diagonal(moments, axis1=-2, axis2=-1)
            variances = jnp.diagonal(cov, axis1=-2, axis2=-1)
            norm = safe[:, None, None]
            rounding = dim * float(jnp.finfo(dtype).eps) * jnp.max(square, axis=1)
            doubtful = jnp.linalg.eigvalsh(cov)[:, 0] <= rounding
        elif covariance == "diag":
            square = second
            cov = variances = second - centred * centred
            norm = safe[:, None]
        else:  # spherical: second = E||z||^2, its variance the trace over d (_project)
            square = second
            variances = second - jnp.sum(centred * centred, axis=1, keepdims=True)
            cov = jnp.broadcast_to(variances / dim, (k, dim))
            norm = safe[:, None]
        ratio = jnp.max(square / jnp.maximum(variances, tiny), axis=1)
    cancels = jnp.any(state.active & (counts > 0)
                      & ((ratio > _cancellation_limit(dtype)) | doubtful))
    return {"counts": counts, "means": means, "cov": cov, "norm": norm, "cancels": cancels}


def _finish_m_step(parts, state, reg_covar, min_count, variance_floor, weight_offset, *, mode,
                   covariance, prune):
    """Covariances, pruning and weights from :func:`_moment_form`'s ``parts``.

    ``parts["cov"]`` is the moment form or, where it would cancel, the exact
    scatter divided by ``parts["norm"]`` (the caller substitutes it).
    """
    k, dim = state.means.shape
    counts, means, cov = parts["counts"], parts["means"], parts["cov"]
    eye = jnp.eye(dim, dtype=state.means.dtype)
    if mode == "nearest":
        variance = cov / (jnp.maximum(jnp.sum(counts), 1.0) * dim)
        cov = jnp.broadcast_to((variance + reg_covar) * eye, (k, dim, dim))
    else:
        if covariance != "full":
            cov = jax.vmap(jnp.diag)(cov)
        cov = _project(cov, covariance) + reg_covar * eye
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


def _m_step(x, stats, labels, state, eta, features, mode, covariance, reg_covar, prune,
            min_count, variance_floor, weight_offset, axis_name=None):
    """Weights, means and covariances from the sweep's statistics (eq. 17-18, 19-20, 21-22).

    The moment form (:func:`_moment_form`) where it can be trusted; else the
    scatter recomputed about the new means (:func:`_exact_scatter`), or for
    k-means the total squared error sum_n ||x_n - m_{y_n}||^2 from the
    assignment. ``axis_name`` (the sharded fit, inside ``shard_map``): x,
    ``labels`` and ``features`` are one device's rows (``features.valid`` False on
    padded ones), ``stats`` already summed over the devices; the exact fallbacks
    are summed over the devices too.
    """
    num = x.shape[0]
    parts = _moment_form(stats, state, features.shift, mode=mode, covariance=covariance)
    means = parts["means"]
    if mode == "nearest":
        def exact():
            residual = x - means[labels]
            if axis_name is None:
                return jnp.sum(residual * residual)
            valid = features.valid.reshape(-1)[:num]
            return jnp.sum(jnp.where(valid[:, None], residual * residual, 0.0))
    else:
        def exact():
            return _exact_scatter(x, features, eta, state.active, mode, means, covariance)
    if axis_name is None:
        cov = jax.lax.cond(parts["cancels"],
                           lambda: exact() / (1.0 if mode == "nearest" else parts["norm"]),
                           lambda: parts["cov"])
    else:
        # Sharded: each device's part of the exact sum in the branch, the sum over the
        # devices outside it, every iteration (XLA's CPU runtime can hang on a
        # collective inside a conditional); the devices hold the same statistics, so
        # they take the same branch.
        shape = jax.eval_shape(exact)
        local = jax.lax.cond(parts["cancels"], exact,
                             lambda: jnp.zeros(shape.shape, shape.dtype))
        summed = psum(local, axis_name)
        if mode != "nearest":
            summed = summed / parts["norm"]
        cov = jnp.where(parts["cancels"], summed, parts["cov"])
    return _finish_m_step({**parts, "cov": cov}, state, reg_covar, min_count, variance_floor,
                          weight_offset, mode=mode, covariance=covariance, prune=prune)


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


def _fit_loop(x, features, state, tol, reg_covar, min_count, variance_floor, weight_offset, *,
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
    """The EM loop's carry before the first iteration (:func:`_fit_loop`):
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
        eta = _log_joint_eta(x, state, mode, covariance, features.shift)
        stats, objective, labels = _sweep(features, eta, state.active, mode, rows)
        if axis_name is not None:  # one collective for every sum of the iteration
            changed = (jnp.sum((labels != prev_labels) & valid) if mode != "stochastic"
                       else jnp.zeros((), jnp.int32))
            stats, total, changed = psum((stats, objective * rows, changed), axis_name)
            objective = total / num
        new = _m_step(x, stats, labels, state, eta, features, mode, covariance, reg_covar,
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
    """The outputs of :func:`_fit_loop` from the last carry: the criteria at the fit."""
    state, it, _, done, objective_trace, count_trace, _ = carry
    values, labels, nearest = _block_criteria(x, features, state.weights, state.means,
                                              state.covariances, state.active, covariance,
                                              map_is_nearest=mode == "nearest",
                                              axis_name=axis_name)
    return state, it, done, objective_trace, count_trace, values, labels, nearest


@functools.partial(jax.jit, static_argnames=("covariance",))
def _features_of(x, *, covariance):
    """The data's blocked quadratic features (:func:`_block_features`), built once per fit."""
    return _block_features(x, _kind_of(covariance))


@functools.partial(jax.jit, static_argnames=("mode", "max_iterations"))
def _start_single(x, state, *, mode, max_iterations):
    return _loop_start(x, state, mode=mode, max_iterations=max_iterations)


@functools.partial(jax.jit, static_argnames=("mode", "covariance", "prune"))
def _advance_single(carry, x, features, tol, reg_covar, min_count, variance_floor,
                    weight_offset, stop_at, *, mode, covariance, prune):
    """:func:`_loop_advance` on one device: every iteration is one sweep over the
    features (E-step and the M-step's statistics, :func:`_sweep`), then the
    closed-form M-step."""
    return _loop_advance(carry, x, features, tol, reg_covar, min_count, variance_floor,
                         weight_offset, stop_at, mode=mode, covariance=covariance, prune=prune)


@functools.partial(jax.jit, static_argnames=("mode", "covariance"))
def _finish_single(carry, x, features, *, mode, covariance):
    return _loop_finish(carry, x, features, mode=mode, covariance=covariance)


def _run(x, state, tol, reg_covar, min_count, variance_floor, weight_offset, *, mode,
         covariance, max_iterations, prune, checkpoint=None):
    """:func:`_fit_loop` on one device, the data's quadratic features computed once, the
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



def _checkpoint_settings(checkpoint_path, checkpoint_every, resume_from, *, mesh, devices, x,
                         state, rng_key, options):
    """``_run``'s ``checkpoint`` dict (None without checkpoint options), after validation.

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


def criteria(x, weights, means, covariances, covariance="full"):
    """L_stocha, L_map, L_NN and J of a mixture on data x (module docstring), as floats."""
    values, _, _ = _criteria(jnp.asarray(x), weights, means, covariances, covariance)
    return {name: float(value) for name, value in values.items()}


def _first_argmax(values):
    """Index (int32) and value of the first largest entry of every row of ``values`` (N, k).

    ``jnp.argmax``'s (value, index) reduction is several times slower on XLA's CPU
    backend than a max followed by a min over the indices that attain it.
    """
    k = values.shape[1]
    top = jnp.max(values, axis=1, keepdims=True)
    index = jnp.min(jnp.where(values == top, jnp.arange(k, dtype=jnp.int32), k - 1), axis=1)
    return index, top[:, 0]


@functools.partial(jax.jit, static_argnums=4)
def _criteria(x, weights, means, covariances, covariance):
    """:func:`criteria` as arrays, with the MAP labels and the nearest-mean labels."""
    features = _block_features(x, _kind_of(covariance))
    return _block_criteria(x, features, weights, means, covariances,
                           jnp.ones(means.shape[0], bool), covariance)


def _block_criteria(x, features, weights, means, covariances, active, covariance,
                    map_is_nearest=False, axis_name=None):
    """:func:`criteria` of the ``active`` components from the data's blocked features.

    ``features`` are :func:`_block_features` of x for the covariance family (the
    sweep's, reused by the fit). Inactive components take no part: no probability,
    no nearest mean, and k in J and L_NN counts the active ones only. Returns the
    values, the MAP labels and the nearest-mean labels (indices among all
    components). ``map_is_nearest`` (static): the mixture has equal weights and one
    shared spherical covariance, as every k-means fit ends with, so its most
    probable component is the nearest mean and the energies need no second product.
    ``axis_name`` (the sharded fit, inside ``shard_map``): x and ``features`` are one
    device's rows, ``features.valid`` False on padded ones; the means over examples
    are summed over the devices, the labels are the device's rows.
    """
    num, dim = x.shape
    k = means.shape[0]
    shift = features.shift
    eye = jnp.broadcast_to(jnp.eye(dim, dtype=x.dtype), (k, dim, dim))
    kind = _kind_of(covariance)
    equal = jnp.where(active, 1.0, 0.0).astype(x.dtype) / jnp.maximum(jnp.sum(active), 1)

    def parameters(w, m, c, family, limit):
        """The program's eta (k, p) for one block's features, or None (evaluate sites)."""
        trace = _trace_components(x[:1], w, m, c, family, None, limit)
        eta = _log_joint_parameters(trace, k, _kind_of(family), shift, limit)
        return None if eta is None else eta.astype(x.dtype)

    # The natural parameters once, not per block (a Cholesky per component for "full").
    eta_joint = parameters(weights, means, covariances, covariance, False)
    eta_energy = parameters(equal, means, eye, "spherical", True)

    centres = means - shift  # the means in the features' coordinates z = x - shift

    def per_block(phi):  # one block of examples: the features stay in cache
        # The block's z = x - shift, read from its features (the last d columns before
        # the constant) rather than from a padded copy of x, which a loop over blocks
        # inside this jit would copy once per block.
        z = phi[:, -1 - dim:-1]
        if eta_joint is None:
            log_joint = component_log_joint(z + shift, weights, means, covariances,
                                            covariance=covariance, features=(shift, phi))
        else:
            log_joint = phi @ eta_joint.T
        log_joint = jnp.where(active, log_joint, -jnp.inf)
        labels, top = _first_argmax(log_joint)
        # Nearest means from the noiseless program's energies; E_MSE exactly from them.
        if map_is_nearest:
            nearest = labels
        else:
            spherical = (phi if kind == "spherical"
                         else quadratic_features(z, "spherical", jnp.zeros_like(shift))[1])
            if eta_energy is None:
                minus_energy = component_log_joint(z + shift, equal, means, eye,
                                                   covariance="spherical", limit=True,
                                                   features=(shift, spherical))
            else:
                minus_energy = spherical @ eta_energy.T
            nearest, _ = _first_argmax(jnp.where(active, minus_energy, -jnp.inf))
        residual = z - centres[nearest]
        return (jax.nn.logsumexp(log_joint, axis=1), labels, top, nearest,
                jnp.sum(residual * residual, axis=1))

    log_px, labels, top, nearest, squared = (
        value.reshape(-1)[:num] for value in jax.lax.map(per_block, features.blocks))
    log_weights = jnp.log(jnp.where(weights > 0, weights, 1.0))
    if axis_name is None:
        l_stocha = -jnp.mean(log_px)
        hard = jnp.bincount(labels, length=k) / num
        map_term = jnp.mean(top - log_weights[labels])
        e_mse = jnp.mean(squared)
    else:  # one device's rows: sums over the valid ones, added over the devices at once
        valid = features.valid.reshape(-1)[:num]

        def total(value):
            return jnp.sum(jnp.where(valid, value, 0.0))

        count, log_px, map_term, squared, hard = psum(
            (jnp.sum(valid).astype(x.dtype), total(log_px), total(top - log_weights[labels]),
             total(squared), jnp.bincount(labels, weights=valid.astype(x.dtype), length=k)),
            axis_name)
        l_stocha, map_term, e_mse, hard = -log_px / count, map_term / count, squared / count, \
            hard / count
    l_map = (-map_term
             - jnp.sum(jnp.where(hard > 0, hard * jnp.log(jnp.where(hard > 0, hard, 1.0)), 0.0)))
    b0 = 0.5 * dim * math.log(2 * math.pi)
    log_k = jnp.log(jnp.maximum(jnp.sum(active), 1).astype(x.dtype))
    l_nn = 0.5 * dim + log_k + 0.5 * dim * jnp.log(e_mse / dim) + b0
    j = log_k + 0.5 * dim * jnp.log(e_mse)
    values = {"L_stocha": l_stocha, "L_map": l_map, "L_NN": l_nn, "J": j, "E_MSE": e_mse}
    return values, labels.astype(jnp.int32), nearest.astype(jnp.int32)


def _kmeans_plus_plus(rng_key, x, k):
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
    """Centres 1 .. k - 1 of :func:`_kmeans_plus_plus`, each drawn with probability
    proportional to the squared distance to the nearest centre so far."""

    def body(i, carry):
        centres, nearest = carry
        p = nearest / jnp.maximum(jnp.sum(nearest), 1e-30)
        pick = x[jax.random.choice(keys[i], x.shape[0], p=p)]
        return centres.at[i].set(pick), jnp.minimum(nearest, jnp.sum((x - pick) ** 2, axis=1))

    centres, _ = jax.lax.fori_loop(1, centres.shape[0], body, (centres, nearest))
    return centres


def _has_distinct_rows(x, k):
    """Whether x (numpy, (N, d)) has at least k distinct rows.

    Counts the distinct rows of a prefix first (4 k rows, at least 1024) and sorts
    all N rows only when the prefix has fewer than k: on ordinary data the check
    costs microseconds instead of a sort of the whole array.
    """
    prefix = x[:max(4 * k, 1024)]
    if np.unique(prefix, axis=0).shape[0] >= k:
        return True
    return prefix.shape[0] < x.shape[0] and np.unique(x, axis=0).shape[0] >= k


def _check_options(mode, covariance, weight_rule, prune, init):
    """The option checks of :func:`fit_mixture` (and of the streaming fit)."""
    check_choice(mode, "mode", MODES)
    check_choice(covariance, "covariance", mixture.COVARIANCES)
    check_choice(weight_rule, "weight_rule", ("ml", "mml"))
    check_choice(init, "init", ("kmeans++", "random"))
    check_bool(prune, "prune")
    if weight_rule == "mml" and (not prune or mode == "nearest"):
        raise ValueError("weight_rule='mml' needs prune=True and mode 'stochastic' or 'map'; "
                         f"got prune={prune!r}, mode={mode!r}")


#: reg_covar above this fraction of the data's mean variance inflates every covariance
#: noticeably: fit_mixture warns (reg_covar is absolute, as in scikit-learn).
REG_COVAR_WARN_FRACTION = 1e-3


def _check_reg_covar(reg_covar, spread, name="x", stacklevel=3):
    """Warn when the absolute ``reg_covar`` is not small against the data's mean variance
    ``spread`` (data on a tiny scale, e.g. 1e-6 units): the covariances would then be
    mostly ``reg_covar`` and the clusters smoothed away without any error."""
    if reg_covar and reg_covar > REG_COVAR_WARN_FRACTION * spread:
        warnings.warn(
            f"reg_covar={reg_covar!r} is {reg_covar / spread:.3g} times the mean variance "
            f"{spread:.3g} of {name}: it dominates the fitted covariances. Rescale {name} "
            f"(e.g. standardise it) or pass a reg_covar below {REG_COVAR_WARN_FRACTION:g} x "
            "that variance", NumericalWarning, stacklevel=stacklevel)


def _initial_state(seed_x, k, spread, covariance, init, rng_key, init_means, init_weights,
                   init_covariances, weight_rule):
    """The start of a fit (padded, :func:`_pad`) and the MML weight offset.

    Means: ``init_means``, or k-means++ / random rows (plus noise of 1% of the
    data's spread) of ``seed_x`` (the data, or a streaming fit's first batch).
    Weights equal and covariances spread / k times I unless given; ``covariance``
    is the family after the k-means override.
    """
    dim, dtype = seed_x.shape[1], seed_x.dtype
    if init_means is None:
        key_means, key_noise = jax.random.split(rng_key)
        if init == "kmeans++":
            means = _kmeans_plus_plus(key_means, seed_x, k)
        else:
            rows = jax.random.choice(key_means, seed_x.shape[0], (k,), replace=False)
            means = seed_x[rows] + 0.01 * math.sqrt(spread) * jax.random.normal(key_noise,
                                                                               (k, dim))
    else:
        means = jnp.asarray(init_means, dtype)
        if means.shape != (k, dim) or not bool(jnp.all(jnp.isfinite(means))):
            raise ValueError(f"init_means must be finite with shape ({k}, {dim}); "
                             f"got shape {means.shape}")
    weights = (jnp.full(k, 1.0 / k, dtype) if init_weights is None
               else jnp.asarray(init_weights, dtype))
    if weights.shape != (k,) or not bool(jnp.all(weights > 0)):
        raise ValueError(f"init_weights must be positive with shape ({k},); got {weights}")
    if init_covariances is None:
        cov = jnp.broadcast_to(spread / k * jnp.eye(dim, dtype=dtype), (k, dim, dim))
    else:
        cov = jnp.asarray(init_covariances, dtype)
        if cov.shape != (k, dim, dim):
            raise ValueError(f"init_covariances must have shape ({k}, {dim}, {dim}); "
                             f"got {cov.shape}")
    state = _start_state(weights, means, cov, covariance=covariance)
    per_component = {"full": dim * (dim + 3) // 2, "diag": 2 * dim, "spherical": dim + 1}
    return state, (0.5 * per_component[covariance] if weight_rule == "mml" else 0.0)


@functools.partial(jax.jit, static_argnames=("covariance",))
def _start_state(weights, means, cov, *, covariance):
    """The padded start (:func:`_pad`) from checked parameters, in one compiled call."""
    state = _State(weights / jnp.sum(weights), means, _project(cov, covariance),
                   jnp.ones(means.shape[0], bool))
    return _pad(state)


def _is_prefix(keep):
    """Whether the sorted indices ``keep`` (numpy) are 0, 1, ..., len - 1 (none pruned)."""
    return bool(keep.size) and int(keep[-1]) == keep.size - 1


def _take(array, keep):
    """``array[keep]`` for the sorted indices ``keep``: ``array`` itself when it keeps every
    row, else copied on the host (:mod:`inference.engine.host`: the number kept depends on the
    data, and a slice or gather of a new length outside ``jit`` would compile anew)."""
    if keep.size == array.shape[0] and _is_prefix(keep):
        return array
    return host.take(array, keep)


def _check_end(caller, data_name, state, active, done, k, num, dim, *, mode, prune, min_count,
               variance_threshold, spread, reg_covar, max_iterations, stacklevel=3):
    """After a fit: the surviving components' indices and the collapsed ones among them.

    Raises if pruning discarded every component; warns (ConvergenceWarning) when the
    fit did not converge and when, without pruning, a component's smallest
    covariance eigenvalue is at ``reg_covar``.
    """
    keep = np.flatnonzero(active)
    if keep.size == 0:
        raise ValueError(
            f"{caller}: the sec. 5.2 pruning discarded all {k} components (min_count="
            f"{min_count} points each, variance_threshold={variance_threshold}; {data_name} "
            f"has {num} examples in {dim} dimensions); use fewer components, "
            "covariance='diag' or 'spherical', a smaller min_count, or prune=False")
    if not done:
        warnings.warn(f"{caller}: not converged after {max_iterations} iterations "
                      f"(mode={mode!r}); raise max_iterations", ConvergenceWarning,
                      stacklevel=stacklevel)
    collapsed = np.zeros(0, int)
    if not prune and mode != "nearest":
        smallest = np.asarray(jnp.linalg.eigvalsh(state.covariances))[:, 0]
        collapsed = np.flatnonzero((smallest < variance_threshold * spread + 2 * reg_covar)
                                   & active)
        if collapsed.size:
            warnings.warn(f"{caller}: component(s) {collapsed.tolist()} collapsed (smallest "
                          "covariance eigenvalue at reg_covar); prune=True discards them",
                          ConvergenceWarning, stacklevel=stacklevel)
    return keep, collapsed


def fit_mixture(x, num_components: int, *, mode: str = "stochastic", covariance: str = "full",
                prune: bool = True, rng_key=None, init: str = "kmeans++", init_means=None,
                init_weights=None, init_covariances=None, max_iterations: int = 200,
                tol: float = 1e-7, reg_covar: float = 1e-6, min_count=None,
                variance_threshold: float = 1e-6, weight_rule: str = "ml", devices=None,
                mesh=None, batch_size=None, checkpoint_path=None,
                checkpoint_every: int | None = None, resume_from=None) -> MixtureResult:
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
    devices : None, int or sequence of jax.Device
        Split the examples over these devices (:func:`inference.engine.sharding.resolve_mesh`):
        ``None`` uses all of ``jax.devices()`` when there are several (else the plain
        single-device path), an int the first that many. Every iteration's sweep
        runs on each device's rows and its statistics are summed over the devices
        (``shard_map`` and ``psum``); the result equals the single-device fit up to
        float rounding. Any number of examples works: x is padded with masked rows
        to a multiple of the device count. The initial means (k-means++) and the
        input checks run on the whole x as before.
    mesh : jax.sharding.Mesh, optional
        A mesh of your own instead of ``devices`` (one axis, or one named ``"data"``).
    batch_size : int, optional
        Rows per batch when x is read as a stream (below).
    checkpoint_path : str or os.PathLike, optional
        Write a checkpoint (the EM loop's carry and the options, with the SHA-256 of
        x) to this ``.npz`` file every ``checkpoint_every`` iterations
        (:mod:`inference.engine.checkpoint`; atomic: a killed process leaves the last one
        intact). In-memory x on one device only (not streams, ``devices`` or ``mesh``).
    checkpoint_every : int, optional
        Iterations per checkpoint (a positive int; needs ``checkpoint_path``).
    resume_from : str or os.PathLike, optional
        Continue from a checkpoint written by ``fit_mixture`` with the same x and
        options (else ``ValueError`` naming the option). The result is bit-identical
        to the uninterrupted fit; a checkpoint of a finished fit returns at once.

    ``x`` may also be a stream too large for memory: an ``np.memmap``, a callable
    returning a fresh iterator of (rows, d) batches, a list of batches or a
    :class:`inference.mixture.stream.BatchSource`. The fit then runs by passes over the
    batches (:func:`inference.mixture.stream.fit_mixture_stream`): the same algorithm and
    result, except that ``labels`` is None (call that function with
    ``return_labels=True`` for them). Streams are not split over devices.

    Returns
    -------
    MixtureResult
    """
    _check_options(mode, covariance, weight_rule, prune, init)
    from inference.mixture import stream as streaming  # here: streaming imports this module

    if is_stream(x):
        if devices is not None or mesh is not None:
            raise ValueError("devices= and mesh= apply to an in-memory x, not to a stream "
                             f"of batches; got devices={devices!r}, mesh={mesh!r}")
        if (checkpoint_path, checkpoint_every, resume_from) != (None, None, None):
            raise ValueError("checkpoint_path/checkpoint_every/resume_from apply to an "
                             "in-memory x, not to a stream of batches")
        return streaming.fit_mixture_stream(
            x, num_components, mode=mode, covariance=covariance, prune=prune,
            rng_key=rng_key, init=init, init_means=init_means, init_weights=init_weights,
            init_covariances=init_covariances, max_iterations=max_iterations, tol=tol,
            reg_covar=reg_covar, min_count=min_count, variance_threshold=variance_threshold,
            weight_rule=weight_rule, batch_size=batch_size)
    if batch_size is not None:
        raise ValueError(f"batch_size applies to a stream of batches; x is one array "
                         f"(got batch_size={batch_size!r})")
    mesh = resolve_mesh(devices, mesh)
    x = check_data(x, "x")
    num, dim = x.shape
    k = check_positive_int(num_components, "num_components")
    if not _has_distinct_rows(np.asarray(x), k):
        distinct = int(np.unique(np.asarray(x), axis=0).shape[0])
        raise ValueError(f"num_components={k} exceeds the {distinct} distinct example(s) in x")
    spread = float(jnp.mean(jnp.var(x, axis=0)))
    if spread == 0.0:
        raise ValueError("x has no spread (every example is the same point): nothing to fit")
    max_iterations = check_positive_int(max_iterations, "max_iterations")
    check_positive(reg_covar, "reg_covar") if reg_covar else None
    _check_reg_covar(reg_covar, spread)
    check_nonnegative(tol, "tol")
    check_nonnegative(variance_threshold, "variance_threshold")
    if min_count is not None:
        check_nonnegative(min_count, "min_count")
    if rng_key is not None:
        check_rng_key(rng_key)
    if mode == "nearest":
        covariance = "spherical"
    # After the override: k-means fits spherical clusters, so d + 1 points are not needed.
    min_count = (dim + 1 if covariance == "full" else 2) if min_count is None else min_count
    if init_means is None and rng_key is None:
        raise MissingKeyError("rng_key is required unless init_means is given")
    state, weight_offset = _initial_state(x, k, spread, covariance, init, rng_key, init_means,
                                          init_weights, init_covariances, weight_rule)
    options = dict(mode=mode, covariance=covariance, max_iterations=max_iterations, prune=prune)
    checkpoint = _checkpoint_settings(
        checkpoint_path, checkpoint_every, resume_from, mesh=mesh, devices=devices, x=x,
        state=state, rng_key=rng_key,
        options=dict(options, num_components=k, tol=tol, reg_covar=reg_covar,
                     min_count=min_count, variance_threshold=variance_threshold,
                     weight_rule=weight_rule, init=init))
    if mesh is None:
        state, it, done, objective_trace, count_trace, values, labels, nearest = _run(
            x, state, tol, reg_covar, min_count, variance_threshold * spread, weight_offset,
            checkpoint=checkpoint, **options)
    else:
        padded, valid = shard_examples(mesh, *pad_examples(x, mesh_size(mesh)))
        from inference.mixture.sharded import _run_sharded  # imports this module

        state, it, done, objective_trace, count_trace, values, labels, nearest = _run_sharded(
            padded, valid, state, tol, reg_covar, min_count, variance_threshold * spread,
            weight_offset, mesh=mesh, **options)
        labels, nearest = labels[:num], nearest[:num]
    it, done, values, active = jax.device_get((it, done, values, state.active))
    it = int(it)
    keep, collapsed = _check_end("fit_mixture", "x", state, active, bool(done), k, num, dim,
                                 mode=mode, prune=prune, min_count=min_count,
                                 variance_threshold=variance_threshold, spread=spread,
                                 reg_covar=reg_covar, max_iterations=max_iterations)
    weights, means, cov = (_take(state.weights, keep), _take(state.means, keep),
                           _take(state.covariances, keep))
    values = {name: float(value) for name, value in values.items()}
    # Labels index the surviving components (the fit's criteria are over those only).
    labels = nearest if mode == "nearest" else labels
    if not _is_prefix(keep):
        labels = host.take(np.asarray(np.cumsum(active) - 1, np.int32), labels)
    traces = (objective_trace, count_trace)
    if it < max_iterations:
        traces = tuple(host.head(trace, it) for trace in traces)
    return MixtureResult(
        weights=weights, means=means, covariances=cov, num_components=int(keep.size),
        labels=labels, L_stocha=values["L_stocha"], L_map=values["L_map"],
        L_NN=values["L_NN"], J=values["J"], objective_trace=traces[0],
        num_components_trace=traces[1], num_iterations=it, converged=bool(done),
        num_start=k, mode=mode, covariance=covariance,
        collapsed=tuple(int(np.searchsorted(keep, c)) for c in collapsed))

