"""The mixture's components as exponential families: quadratic features, natural
parameters and the per-component log joint (read off the NumPyro program)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers

from inference.program.handlers import NoiselessGaussian, noiseless
from ppl_models import mixture


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


def kind_of(covariance):
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


def trace_components(x, weights, means, covariances, covariance, model, limit):
    """Trace ``model`` with ``y`` conditioned to all k components at once (the shape of
    NumPyro's parallel enumeration), under ``noiseless`` when ``limit``."""
    model = mixture.model if model is None else model
    k = means.shape[0]
    program = handlers.condition(model, {"y": jnp.arange(k)[:, None]})
    if limit:
        program = noiseless(program)
    return handlers.trace(program).get_trace(
        x, covariance=covariance, **_program_kwargs(weights, means, covariances, covariance))


def log_joint_parameters(trace, k, kind, shift, limit):
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


def feature_width(kind, dim):
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
    trace = trace_components(x, weights, means, covariances, covariance, model, limit)
    base = _base_density(trace["x"]["fn"], k)
    if base is not None:
        kind = _feature_kind(base[0])
        if features is None or features[1].shape[1] != feature_width(kind, x.shape[1]):
            features = quadratic_features(x, kind)
        eta = log_joint_parameters(trace, k, kind, features[0], limit)
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


def project(cov, covariance):
    """Restrict full covariance matrices (k, d, d) to the family."""
    if covariance == "full":
        return cov
    variances = jnp.diagonal(cov, axis1=-2, axis2=-1)
    if covariance == "spherical":
        variances = jnp.broadcast_to(jnp.mean(variances, -1, keepdims=True), variances.shape)
    return jax.vmap(jnp.diag)(variances)


