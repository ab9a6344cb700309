"""EM for probabilistic PCA and its sigma -> 0 limit, as sufficient statistics for the engine.

The program is :func:`ppl_models.ppca.model` (x_n = z_n W + mu + noise, W (q, d)). With
centred examples c_n = x_n - mu (mu: the data mean, the maximum-likelihood mean,
computed once) every variant alternates an E-step per example and an M-step from sums
over the examples (:class:`inference.engine.loop.StatisticsAlgorithm`, so restarts,
convergence, the trace, the progress bar, checkpoints and sharding over devices come
from the engine):

* ``noise=None``, the sigma -> 0 limit, EM for PCA (Roweis 1998, sec. 3):
  E-step z_n = c_n W^T (W W^T)^-1, M-step W = (Z^T Z)^-1 Z^T C. Its fixed points span
  the principal subspace (W is any basis of it, not the principal axes).
* ``noise="ml"``: Tipping & Bishop (1999, sec. 3.2 and appendix B). With
  M = W W^T + sigma^2 I_q: E[z_n] = c_n W^T M^-1, E[z_n^T z_n] = sigma^2 M^-1 + E[z_n]^T E[z_n];
  W_new = (sum E[z^T z])^-1 sum E[z]^T c_n and
  sigma^2_new = (sum ||c_n||^2 - 2 tr(W_new^T sum E[z]^T c_n)
                 + tr(sum E[z^T z] W_new W_new^T)) / (N d).
  Its fixed point is the closed form W^T W = U_q (Lambda_q - sigma^2 I) U_q^T,
  sigma^2 = mean of the d - q discarded eigenvalues of the sample covariance.
* ``noise`` a positive float: the same E-step with sigma held fixed, M-step for W only.

The statistics are Szz = sum E[z]^T E[z] (q, q), Szc = sum E[z]^T c_n (q, d), Scc =
sum ||c_n||^2, Sres = sum c_n . (c_n - E[z_n] W) (= Scc - tr(Szz M), since
W c_n^T = M E[z_n]^T; summed entry by entry, which keeps float32 precision when sigma is
small) and the count. They give the objective of the parameters the iteration started
from, without a d x d matrix:

* limit: the mean squared reconstruction error (1/N) sum ||c_n - proj(c_n)||^2 =
  Sres / N (proj: onto the row space of W);
* ML / fixed noise: the negative mean log-likelihood per example,
  (1/2) [d log 2 pi + (d - q) log sigma^2 + log|M| + Sres / (N sigma^2)]
  (determinant lemma |W^T W + sigma^2 I_d| = sigma^(2(d-q)) |M|), which is
  -log p(x | W, mu, sigma) / N of the collapsed program (a test checks it against
  ``numpyro.infer.util.log_density``).

So ``trace.objective[i]`` is the objective of the parameters *before* iteration i (EM
never increases it); the engine stops when it changes by at most ``tol`` (relative).

Speed: Roweis's EM converges at the rate lambda_(q+1) / lambda_q of the sample
covariance's eigenvalues (a few iterations on data with a clear gap). Tipping &
Bishop's EM is much slower near the limit: along a principal direction of variance
lambda its error shrinks by about 1 - 2 sigma^2 / lambda per iteration, so data with
sigma^2 << lambda need hundreds of iterations (raise ``max_iterations``).

References
----------
S. Roweis, "EM algorithms for PCA and SPCA", NIPS 1998.
M. E. Tipping, C. M. Bishop, "Probabilistic principal component analysis", Journal of
the Royal Statistical Society B 61(3), 611-622, 1999.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference.engine.loop import StatisticsAlgorithm, run, select, warn_not_converged
from inference.engine.passes import run_passes
from inference.engine.protocol import follows_protocol
from inference.engine.sharding import resolve_mesh
from inference.engine.streaming import (
    BatchSource,
    batches,
    column_pass,
    dtype_of,
    is_stream,
    reusable,
)
from ppl_models.diagnostics import NumericalWarning
from ppl_models.validation import (
    check_bool,
    check_data,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_rng_key,
)

__all__ = ["PPCAResult", "PPCATrace", "PPCAState", "fit_ppca", "ppca_algorithm"]

_LOG_2PI = math.log(2.0 * math.pi)


class PPCAState(NamedTuple):
    """One start's parameters: ``weights`` W (q, d) and ``noise_var`` sigma^2 (0 in the limit)."""

    weights: jax.Array
    noise_var: jax.Array


class PPCATrace(NamedTuple):
    """Per-iteration values of a fit (arrays cut at ``num_iterations``).

    Attributes
    ----------
    objective : array (num_iterations,)
        Of the parameters each iteration started from: mean squared reconstruction
        error (limit) or negative mean log-likelihood per example (ML, fixed noise).
    noise : array (num_iterations,)
        sigma after the iteration (0 in the limit).
    change : array (num_iterations,)
        ||W_new - W||_F / ||W||_F.
    """

    objective: jax.Array
    noise: jax.Array
    change: jax.Array


@follows_protocol(lambda result: "mean_squared_error" if result.noise == 0 else
                  "negative_mean_log_likelihood", "min")
class PPCAResult(NamedTuple):
    """Result of :func:`fit_ppca`.

    Attributes
    ----------
    weights : array (q, d)
        W, rows = components (identified up to W -> Q W, Q orthogonal; in the limit any
        basis of the principal subspace).
    mean : array (d,)
        mu, the data mean.
    noise : float
        sigma (fitted for ``"ml"``, as given for a fixed noise, 0.0 in the limit).
    converged : bool
    num_iterations : int
    trace : PPCATrace
    """

    weights: jax.Array
    mean: jax.Array
    noise: float
    converged: bool
    num_iterations: int
    trace: PPCATrace


def _masked(rows, mean, valid):
    centred = rows - mean
    return centred if valid is None else jnp.where(valid[:, None], centred, 0.0)


def _statistics(rng_key, state, data, params, valid, *, mode):
    """E-step sums over the examples: (Szz, Szc, Scc, Sres, count)."""
    (x,) = data
    mean = params[0]
    centred = _masked(x, mean, valid)
    w = state.weights
    gram = w @ w.T + state.noise_var * jnp.eye(w.shape[0], dtype=w.dtype)  # M (or W W^T)
    z = jnp.linalg.solve(gram, w @ centred.T).T  # (N, q): c_n W^T M^-1
    count = (jnp.asarray(x.shape[0], x.dtype) if valid is None
             else jnp.sum(valid).astype(x.dtype))
    # sum c_n . (c_n - E[z_n] W) = Scc - tr(Szz M), summed per entry (no cancellation of sums)
    residual = jnp.sum(centred * (centred - z @ w))
    return z.T @ z, z.T @ centred, jnp.sum(centred * centred), residual, count


def _update(state, stats, params, *, mode):
    """M-step from the summed statistics, and the objective of ``state``."""
    szz, szc, scc, residual, count = stats
    w, noise_var = state.weights, state.noise_var
    num_components, dim = w.shape
    eye = jnp.eye(num_components, dtype=w.dtype)
    gram = w @ w.T + noise_var * eye
    if mode == "limit":
        objective = residual / count
        new_w = jnp.linalg.solve(szz, szc)
        new_var = jnp.zeros_like(noise_var)
    else:
        _, log_det = jnp.linalg.slogdet(gram)
        objective = 0.5 * (dim * _LOG_2PI + (dim - num_components) * jnp.log(noise_var)
                           + log_det + residual / (count * noise_var))
        ezz = count * noise_var * jnp.linalg.inv(gram) + szz  # sum E[z^T z]
        new_w = jnp.linalg.solve(ezz, szc)
        if mode == "ml":
            new_var = (scc - 2.0 * jnp.sum(new_w * szc) + jnp.sum(ezz * (new_w @ new_w.T))) / (
                count * dim)
        else:
            new_var = params[1]
    change = jnp.linalg.norm(new_w - w) / jnp.linalg.norm(w)
    info = PPCATrace(objective, jnp.sqrt(new_var), change)
    return PPCAState(new_w, new_var.astype(noise_var.dtype)), info


def ppca_algorithm(mode: str) -> StatisticsAlgorithm:
    """The engine's algorithm for ``mode`` in ("limit", "ml", "fixed") (module docstring)."""
    return StatisticsAlgorithm(_statistics, _update, (("mode", mode),), "fit_ppca")


_ALGORITHMS = {mode: ppca_algorithm(mode) for mode in ("limit", "ml", "fixed")}


def _check_noise(noise):
    """("limit" | "ml" | "fixed", sigma or None)."""
    if noise is None:
        return "limit", None
    if isinstance(noise, str):
        if noise != "ml":
            raise ValueError(f"noise must be None (the sigma -> 0 limit), 'ml' or a positive "
                             f"number; got {noise!r}")
        return "ml", None
    if isinstance(noise, bool) or not isinstance(noise, int | float | np.floating | np.integer):
        raise TypeError(f"noise must be None, 'ml' or a positive number; got {noise!r} "
                        f"({type(noise).__name__})")
    check_positive(noise, "noise")
    return "fixed", float(noise)


def fit_ppca(x, num_components: int, *, noise=None, rng_key, max_iterations: int = 200,
             tol: float = 1e-6, num_restarts: int = 1, init_weights=None,
             progress_bar: bool = False, devices=None, mesh=None, checkpoint_path=None,
             checkpoint_every: int | None = None, resume_from=None,
             batch_size: int | None = None) -> PPCAResult:
    """Fit probabilistic PCA (or PCA, its sigma -> 0 limit) by EM.

    The generic call: with ``noise="ml"`` this fit reaches the maximum of the likelihood
    that ``fit_em(ppca_program, x, num_components)`` climbs directly, on the marginal
    program (z integrated out, no discrete site; W, mu and sigma as ``numpyro.param``
    sites: :func:`inference.em.programs.ppca_program`): the same W^T W + sigma^2 I,
    sigma^2 and log-likelihood, to 1e-6 relative (``tests/test_em_families.py``). This fit
    takes closed-form steps over z; ``fit_em`` takes L-BFGS steps on the marginal
    likelihood.

    Parameters
    ----------
    x : array (num_examples, d), or a stream of batches
        The data, finite. A stream (a list of arrays, an ``np.memmap``, a callable
        returning a fresh iterator of batches, a
        :class:`inference.engine.streaming.BatchSource`) is read once for the mean and
        once per iteration (:func:`inference.engine.passes.run_passes`); it takes no
        ``devices``, ``mesh`` or checkpoint options.
    num_components : int
        q: at most d (at most d - 1 for ``noise="ml"``, which needs a discarded
        direction to estimate sigma) and at most num_examples - 1 (the rank of the
        centred data).
    noise : None, "ml" or float
        ``None``: the sigma -> 0 limit (Roweis's EM for PCA); ``"ml"``: maximum-
        likelihood W and sigma (Tipping & Bishop's EM); a positive float: sigma held
        fixed, EM for W.
    rng_key : jax.random key
        Draws the initial W of every start (Normal(0, 1) entries scaled by the data's
        standard deviation); for ``"ml"`` sigma^2 starts at the data's mean variance.
    max_iterations : int
        EM iterations at most per start.
    tol : float
        Relative change of the objective that ends a start (>= 0).
    num_restarts : int
        Starts, run side by side (vmapped); the one with the lowest final objective is kept.
    init_weights : array (q, d), optional
        The initial W of every start instead of a random one.
    progress_bar : bool
        A tqdm bar over the iterations.
    devices, mesh
        Split the examples over devices (:func:`inference.engine.sharding.resolve_mesh`);
        not with a progress bar or checkpoints.
    checkpoint_path, checkpoint_every, resume_from
        Checkpoint the loop every ``checkpoint_every`` iterations / resume
        (:mod:`inference.engine.checkpoint`).
    batch_size : int, optional
        Rows per batch of a stream (default: the batches as they come).

    Returns
    -------
    PPCAResult

    Warns
    -----
    ConvergenceWarning
        When the kept start did not converge in ``max_iterations``.
    NumericalWarning
        When W or sigma is not finite.

    Examples
    --------
    >>> import jax
    >>> from inference.ppca.compare import largest_angle
    >>> from ppl_models import ppca
    >>> data = ppca.generate(jax.random.key(0), 300, 5, 2, noise=0.1)
    >>> fit = fit_ppca(data.x, 2, noise="ml", rng_key=jax.random.key(1), max_iterations=1000)
    >>> fit.weights.shape, bool(fit.converged), round(float(fit.noise), 1)  # sigma = 0.1
    ((2, 5), True, 0.1)
    >>> largest_angle(fit.weights, data.weights) < 0.05  # the planted subspace (radians)
    True
    """
    check_rng_key(rng_key)
    mode, sigma = _check_noise(noise)
    stream = is_stream(x)
    if stream:
        if (devices, mesh, checkpoint_path, checkpoint_every, resume_from) != (None,) * 5:
            raise ValueError("x: a stream of batches takes no devices, mesh or checkpoint "
                             "options (pass an in-memory array for those)")
        if batch_size is not None:
            batch_size = check_positive_int(batch_size, "batch_size")
        source = x if isinstance(x, BatchSource) else BatchSource(x, batch_size, name="x")
        data = reusable(batches(source, batch_size), "fit_ppca", "one per EM iteration")
        num_examples, stream_mean, stream_var, _, first = column_pass(data)
        dim = int(np.shape(first)[1])
    else:
        if batch_size is not None:
            raise ValueError(f"batch_size applies to a stream of batches; x is one array "
                             f"(got batch_size={batch_size!r})")
        x = check_data(x, "x", min_examples=2)
        num_examples, dim = x.shape
    limit = dim - 1 if mode == "ml" else dim
    why = (" (d - 1: sigma is estimated from the discarded directions)" if mode == "ml"
           else " (the dimension d of x)")
    num_components = check_positive_int(num_components, "num_components", maximum=limit, why=why)
    if num_components > num_examples - 1:
        raise ValueError(f"num_components must be at most num_examples - 1 = {num_examples - 1} "
                         f"(the rank of the centred x); got {num_components}")
    max_iterations = check_positive_int(max_iterations, "max_iterations")
    tol = check_nonnegative(tol, "tol")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    check_bool(progress_bar, "progress_bar")
    dtype = dtype_of(first) if stream else x.dtype
    if init_weights is not None:
        init_weights = check_data(init_weights, "init_weights", dim=dim)
        if init_weights.shape[0] != num_components:
            raise ValueError(f"init_weights must have shape (q, d) = ({num_components}, {dim}); "
                             f"got {init_weights.shape}")
    mesh = resolve_mesh(devices, mesh)
    checkpoint = None
    if not stream:
        from inference.engine.checkpoint import checkpointing, jsonable

        options = dict(num_components=num_components, noise=noise, tol=tol,
                       max_iterations=max_iterations, num_restarts=num_restarts,
                       rng_key=jsonable(rng_key))
        checkpoint = checkpointing(checkpoint_path, checkpoint_every, resume_from, options,
                                   data=(x,), init_weights=() if init_weights is None
                                   else (init_weights,))
    if stream:
        mean = jnp.asarray(stream_mean, dtype)
        scale = jnp.asarray(np.sqrt(np.mean(stream_var)), dtype)
    else:
        mean = jnp.mean(x, axis=0)
        scale = jnp.sqrt(jnp.mean(jnp.var(x, axis=0)))
    keys = jax.random.split(rng_key, num_restarts)
    if init_weights is None:
        weights = jax.vmap(lambda k: jax.random.normal(k, (num_components, dim), dtype))(keys)
        weights = weights * scale
    else:
        weights = jnp.broadcast_to(init_weights.astype(dtype), (num_restarts, num_components, dim))
    start_var = {"limit": 0.0, "ml": None, "fixed": (sigma or 0.0) ** 2}[mode]
    noise_var = jnp.square(scale) if start_var is None else jnp.asarray(start_var, dtype)
    states = PPCAState(weights, jnp.broadcast_to(noise_var.astype(dtype), (num_restarts,)))
    params = (mean, jnp.asarray((sigma or 0.0) ** 2, dtype))
    if stream:
        out = run_passes(_ALGORITHMS[mode], states, data, params, keys=keys,
                         max_iterations=max_iterations, tol=tol, dtype=dtype,
                         progress_bar=progress_bar)
    else:
        out = run(_ALGORITHMS[mode], states, (x,), params, keys=keys,
                  max_iterations=max_iterations, tol=tol, progress_bar=progress_bar, mesh=mesh,
                  checkpoint=checkpoint)
    final = np.asarray(out.trace.objective)[np.arange(num_restarts),
                                            np.maximum(np.asarray(out.num_iterations) - 1, 0)]
    best = int(np.argmin(np.where(np.isfinite(final), final, np.inf)))
    state, trace, count, converged = select(out, best)
    noise_value = float(np.sqrt(max(float(state.noise_var), 0.0)))
    if not (bool(jnp.all(jnp.isfinite(state.weights))) and math.isfinite(noise_value)):
        warnings.warn("fit_ppca: W or sigma is not finite; check x for near-duplicate columns "
                      "or lower num_components", NumericalWarning, stacklevel=2)
    warn_not_converged("fit_ppca", converged, max_iterations, f"noise={noise!r}")
    return PPCAResult(state.weights, mean, noise_value, converged, count, trace)
