"""GVQ fitted by passes over batches: the streamed counterpart of
:func:`inference.gvq.em.fit_gvq` (sec. 3.1 of M. Westerdijk, D. Barber and W. Wiegerinck,
"Deterministic generative models for fast feature discovery", Data Mining and Knowledge
Discovery 5(4), 2001), for data too large for memory.

The source of rows is anything :class:`inference.engine.streaming.BatchSource` accepts
(a numpy array or ``np.memmap`` cut into row blocks, a callable returning a fresh
iterator of arrays, a list of arrays), checked batch by batch with errors naming the
batch index.

The association of an example depends only on it and the current F, and the
M-step's least-squares problem only on the sums S^T S and S^T X (the normal
equations of :func:`inference.gvq.algorithm.normal_equations_m_step`). So GVQ-EM is
a :class:`inference.engine.StatisticsAlgorithm` (:func:`stream_statistics`,
:func:`stream_update`) that :func:`inference.engine.passes.run_passes` drives, one
pass per iteration: every batch is associated with the current F (every restart
side by side, vmapped) and its sums are added; F then solves the normal equations.
The error after the M-step, ``mean ||x - s F_new||^2``, comes from the same pass
without a second look at the data: with the residuals r = x - s F of the pass,
sum ||r - s Delta||^2 = sum ||r||^2 - 2 <Delta, S^T r> + <Delta, S^T S Delta>,
Delta = F_new - F (exact algebra; it cancels only to the size of the error itself,
not of ||x||^2).

The fit equals ``fit_gvq`` on data that fit (tested in float64 in
``tests/test_streaming_fits.py``); the differences are listed in
:func:`fit_gvq_stream`'s docstring. Memory: one batch at a time on the device plus
the one being read (:class:`inference.engine.streaming.Pass`), the per-batch arrays
of the association, and sums whose size does not grow with the data.
"""

from __future__ import annotations

import functools
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference.engine import StatisticsAlgorithm, host, warn_not_converged
from inference.engine.passes import run_passes
from inference.engine.protocol import method_options_of
from inference.engine.streaming import Pass, batches, column_pass, dtype_of, reusable
from inference.gvq.algorithm import check_program, restart_features
from inference.gvq.constraints import associate_states, check_constraints
from inference.gvq.result import GVQResult, GVQTrace
from inference.program.kwargs import freeze_options, split_model_kwargs
from ppl_models import gvq
from ppl_models.diagnostics import NumericalWarning
from ppl_models.validation import MissingKeyError, check_positive, check_positive_int

__all__ = ["fit_gvq_stream", "StreamState", "StreamInfo", "stream_statistics", "stream_update"]


class StreamState(NamedTuple):
    """State of the streamed GVQ-EM of one restart: the features, those before the last
    M-step (the ones the last pass associated with) and the error after it."""

    features: jax.Array
    previous_features: jax.Array
    error: jax.Array


class StreamInfo(NamedTuple):
    """Per-pass information: ``objective`` (the error after the M-step), ``converged``."""

    objective: jax.Array
    converged: jax.Array


def _associate(key, rows, features, noise, dynamic_kwargs, *, method, model, latent,
               static_kwargs, association_options):
    kwargs = {**dynamic_kwargs, **dict(static_kwargs), "features": features}
    states, _ = associate_states(model, rows, kwargs, method=method, latent=latent, noise=noise,
                                 rng_key=key, options=association_options,
                                 num_features=features.shape[0])
    return states


def stream_statistics(key, state: StreamState, data, params, valid, *, method, model, latent,
                      static_kwargs, association_options):
    """One batch's sums under the current F: the association's normal-equation sums
    S^T S (n, n), S^T X (n, d), S^T r (n, d) and sum ||r||^2 of the residuals
    r = x - s F over the ``valid`` rows."""
    (rows,) = data
    noise = params[0]
    states = _associate(key, rows, state.features, noise, params[1], method=method, model=model,
                        latent=latent, static_kwargs=static_kwargs,
                        association_options=association_options)
    design = jnp.where(valid[:, None], states, 0).astype(rows.dtype)
    residual = jnp.where(valid[:, None], rows - design @ state.features, 0.0)
    return (design.T @ design, design.T @ rows, design.T @ residual,
            jnp.sum(residual * residual))


def stream_update(state: StreamState, stats, params, **unused):
    """The M-step from the sums (the normal equations of
    :func:`inference.gvq.algorithm.normal_equations_m_step`: pinv with the cutoff of
    ``lstsq``) and the error after it, without a second look at the data. Converged when F
    is bitwise unchanged or the error changed by at most ``tol`` relative."""
    gram, cross, projected, residual_sum = stats
    _, _, tol, num = params
    feats = state.features
    dtype = feats.dtype
    cutoff = jnp.finfo(dtype).eps * jnp.maximum(num, feats.shape[0]).astype(dtype)
    solution = jnp.linalg.pinv(gram, rtol=cutoff, hermitian=True) @ cross
    used = jnp.diagonal(gram) > 0
    new = jnp.where(used[:, None], solution, feats)
    delta = new - feats
    total = residual_sum - 2.0 * jnp.sum(delta * projected) + jnp.sum(delta * (gram @ delta))
    error = jnp.maximum(total, 0.0) / num
    same = jnp.all(new == feats)
    settled = jnp.abs(state.error - error) <= tol * state.error
    converged = same | settled
    return StreamState(new, feats, error), StreamInfo(error, converged)


@functools.partial(jax.jit, static_argnames=("method", "model", "latent", "static_kwargs",
                                             "association_options"))
def _final_states(keys, rows, features, noise, dynamic_kwargs, **static):
    """The association of one batch under every restart's ``features`` (vmapped)."""
    return jax.vmap(lambda k, f: _associate(k, rows, f, noise, dynamic_kwargs, **static))(
        keys, features)


def fit_gvq_stream(source, num_features: int, *, method: str = "exact", rng_key=None,
                   max_iterations: int = 100, num_restarts: int = 4, init_features=None,
                   num_sets: int | None = None, sparsity: float | None = None,
                   binary: bool = False, beta: float | None = None, model=None,
                   model_kwargs: dict | None = None, latent: str = "s", noise=None,
                   progress_bar: bool = False, tol: float | None = None, batch_size=None,
                   return_states: bool = False, method_options: dict | None = None,
                   **options):
    """:func:`inference.gvq.em.fit_gvq` by passes over a source of row batches.

    One EM iteration is one pass (module docstring): every batch is associated
    with the current features by ``fit_gvq``'s association code (every restart
    side by side, vmapped), the normal-equation sums S^T S and S^T X are added
    over the batches, and F solves them. Passes: 1 (checks, count, column
    moments) + one per iteration (+ 1 with ``return_states``: the last pass's
    association again, with the same features and keys).

    Differences from ``fit_gvq``:

    * Initial features (unless ``init_features``): ``fit_gvq``'s draw
      (:func:`inference.gvq.em.initial_features`, the same keys) needs only the
      column means and standard deviations of x, which the first pass computes,
      so the start is ``fit_gvq``'s own (to rounding). With ``num_sets`` the
      start (:func:`inference.gvq.em.initial_set_features`) picks example rows:
      they are drawn from the **first batch** (the whole data's column spread
      only enters its noise scale; a first batch that is all of the data gives
      ``fit_gvq``'s start). Pass ``init_features`` for full control.
    * Stopping: a restart stops when an iteration leaves F bitwise unchanged
      (no association changed, the test ``fit_gvq`` makes on its stored states:
      the same states give the same F; with no per-example array kept this is
      the test a stream can afford; in the degenerate case of different states
      with the same least-squares F it stops one iteration earlier, at the same
      fixed point) or when the error changes by at most ``tol`` relative.
    * The M-step solves the normal equations with a pseudo-inverse (as the
      sharded ``fit_gvq``) where ``fit_gvq`` calls ``lstsq`` on the design: the
      same minimum-norm answer, to rounding.
    * ``states`` is ``None`` unless ``return_states=True`` (an int32 array
      (num_examples, num_features) gathered on the host from the last pass, as
      ``fit_gvq`` returns it); ``sets`` likewise.
    * Randomised association methods draw their random numbers per batch (the
      restart's key folded with the iteration and the batch index), so they follow
      a different, equally valid path than ``fit_gvq`` (as the sharded fit does).

    Options that cannot stream raise ``ValueError`` naming them:
    ``binary=True`` (the M-step of sec. 5.3 is L-BFGS on the whole data's
    energy: every L-BFGS iteration would be a pass, so it is not EM by passes
    over sufficient statistics), a one-shot iterator as ``source`` (EM needs
    several passes). The restarts do stream: each keeps its own sums and the one
    with the least final error (computed from the sums, as in memory) is returned.

    Parameters
    ----------
    source : array, np.memmap, callable or iterable of arrays (:class:`BatchSource`)
        Rows (num_examples, dim); float64 stays float64 only under ``jax.enable_x64``.
    num_features, method, rng_key, max_iterations, num_restarts, init_features, \
num_sets, sparsity, model, model_kwargs, latent, noise, progress_bar, tol, \
method_options, **options
        As :func:`inference.gvq.em.fit_gvq`.
    binary, beta
        Must be ``False`` / ``None`` (see above).
    batch_size : int, optional
        Rows per batch (:class:`inference.engine.streaming.BatchSource`).
    return_states : bool
        Gather the association of every row (see above).

    Returns
    -------
    inference.gvq.result.GVQResult

    Examples
    --------
    >>> import jax
    >>> from inference.gvq.em import match_features
    >>> from ppl_models import gvq
    >>> data = gvq.generate_planted(jax.random.key(0), 200, 4, 8, noise_scale=0.1)
    >>> batches = [data.x[:100], data.x[100:]]  # or an np.memmap with batch_size=
    >>> fit = fit_gvq_stream(batches, 4, rng_key=jax.random.key(1))
    >>> bool(fit.converged), fit.states is None
    (True, True)
    >>> bool(match_features(fit.features, data.features)[1] < 0.05)  # the planted F
    True
    """
    options = method_options_of("fit_gvq_stream", method_options, options)
    if rng_key is None:
        raise MissingKeyError("fit_gvq_stream needs an explicit rng_key (e.g. jax.random.key(0))")
    if binary or (model_kwargs or {}).get("binary", False):
        raise ValueError("binary=True does not stream: its M-step is L-BFGS on the energy of "
                         "the whole data set (Westerdijk, Barber and Wiegerinck (2001), "
                         "sec. 5.3), not a solve from sums over batches; "
                         "fit binary data in memory with inference.gvq.em.fit_gvq")
    num_features = check_positive_int(num_features, "num_features")
    max_iterations = check_positive_int(max_iterations, "max_iterations")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    if noise is not None:
        check_positive(noise, "noise")
    data = reusable(batches(source, batch_size), "fit_gvq_stream",
                    f"one per EM iteration, up to max_iterations={max_iterations}")
    data.check_finite = True
    num, mean, variance, squares, first = column_pass(data)
    data.check_finite = False  # checked in the first pass; later passes check shapes only
    try:
        dtype = dtype_of(first)
        first = jnp.asarray(np.asarray(first, dtype))
        if init_features is not None:
            init_features = np.asarray(init_features)
            features_shape = init_features.shape[-2:]
            if init_features.ndim not in (2, 3) or features_shape[1] != first.shape[1]:
                raise ValueError(f"init_features must have shape ({num_features}, "
                                 f"{first.shape[1]}) or ({num_restarts}, {num_features}, "
                                 f"{first.shape[1]}); got {init_features.shape}")
        _, _, kwargs, method = check_constraints(
            None, first, num_sets=num_sets, sparsity=sparsity, method=method,
            model_kwargs=model_kwargs, rng_key=rng_key, options=options,
            num_features=num_features)
        model = gvq.model if model is None else model
        key_init, key_run = jax.random.split(rng_key)
        keys = jax.random.split(key_run, num_restarts)
        if kwargs.get("num_sets") is None:
            # initial_features reads only the column mean and std: two rows mean -+ std
            # have exactly those (to rounding), so the draw is fit_gvq's own.
            std = np.sqrt(variance)
            seed_rows = jnp.asarray(np.stack([mean - std, mean + std]), dtype)
        else:
            seed_rows = first
        starts = restart_features(key_init, seed_rows, num_features, num_restarts,
                                  init_features, num_sets=kwargs.get("num_sets"))
        check_constraints(starts[0], first, method=method, model_kwargs=kwargs,
                          rng_key=rng_key, options=options)
        check_program(model, first, kwargs, starts[0], latent, noise)
        if tol is None:
            tol = 1e-5 if method != "exact" else 0.0
        if not isinstance(tol, int | float) or not tol >= 0:
            raise ValueError(f"tol must be a non-negative number; got {tol!r}")
        dynamic, static = split_model_kwargs(kwargs)
        static_options = dict(method=method, model=model, latent=latent, static_kwargs=static,
                              association_options=freeze_options(options))
        algorithm = StatisticsAlgorithm(stream_statistics, stream_update,
                                        options=tuple(static_options.items()),
                                        name="fit_gvq_stream")
        # the all-zero states' error (fit_gvq's init)
        error0 = jnp.full(num_restarts, squares / num, dtype)
        states = StreamState(starts, starts, error0)
        noise = None if noise is None else jnp.asarray(noise, dtype)
        params = (noise, dynamic, tol, jnp.asarray(num))
        fitted = run_passes(algorithm, states, data, params, keys=keys,
                            max_iterations=max_iterations, tol=tol, dtype=dtype,
                            batch_size=first.shape[0], progress_bar=progress_bar)
        errors = fitted.state.error
        finite = np.isfinite(np.asarray(errors))
        if not finite.all():
            warnings.warn("fit_gvq_stream: some restarts ended with a non-finite error; they "
                          "are skipped", NumericalWarning, stacklevel=2)
        best = int(np.argmin(np.where(finite, np.asarray(errors), np.inf)))
        count = int(fitted.num_iterations[best])
        converged = bool(fitted.converged[best])
        warn_not_converged("fit_gvq_stream", converged, max_iterations, "features still changing")
        states = sets = None
        if return_states:
            states = _last_pass_states(data, dtype, first.shape[0], keys, fitted, noise,
                                       dynamic, static_options)[best]
            states = jnp.asarray(states, jnp.int32)
            if kwargs.get("num_sets") is not None:
                sets = gvq.set_units(states, kwargs["num_sets"])[0]
        objective = host.head(fitted.trace.objective[best], count)
        return GVQResult(
            features=fitted.state.features[best], states=states, error=errors[best],
            trace=GVQTrace(objective), num_iterations=fitted.num_iterations[best],
            converged=jnp.asarray(converged), restart_errors=errors, sets=sets)
    finally:
        data.check_finite = True


def _last_pass_states(data, dtype, first_rows, keys, fitted, noise, dynamic, static_options):
    """Every restart's association in its last pass (numpy, (restarts, N, n)): the
    features before its last M-step and the keys that pass drew (iteration
    ``num_iterations - 1``, batch b: ``fold_in(fold_in(key, iteration), b)``)."""
    last = jnp.maximum(fitted.num_iterations - 1, 0)
    parts = []
    for index, (rows, count) in enumerate(Pass(data, dtype, first_rows, block=first_rows)):
        batch_keys = jax.vmap(lambda k, i, b=index: jax.random.fold_in(
            jax.random.fold_in(k, i), b))(keys, last)
        states = _final_states(batch_keys, rows, fitted.state.previous_features, noise, dynamic,
                               **static_options)
        parts.append(np.asarray(states[:, :count]))
    return np.concatenate(parts, axis=1)
