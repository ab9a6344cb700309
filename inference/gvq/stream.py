"""GVQ, the clipped-Gaussian model and MCVQ fitted by passes over batches (issue 9).

The streamed counterparts of :func:`inference.gvq.em.fit_gvq` (seed 000 sec. 3.1),
:func:`inference.clipped.fit.fit_clipped_gaussian` (seed 001 eq. 7-10) and
:func:`inference.mcvq.em.fit_mcvq` (seed 004 sec. 3), for data too large for memory.
The source of rows is anything :class:`inference.mixture.stream.BatchSource` accepts
(a numpy array or ``np.memmap`` cut into row blocks, a callable returning a fresh
iterator of arrays, a list of arrays; a one-shot iterator only where one pass
suffices), checked batch by batch with errors naming the batch index.

Each algorithm keeps what it must; everything per example is recomputed:

* **GVQ** (:func:`fit_gvq_stream`): the association of an example depends only
  on it and the current F, and the M-step's least-squares problem only on the
  sums S^T S and S^T X (the normal equations of ``inference.gvq.em._sharded_m_step``).
  One EM iteration is one pass: every batch is associated with the current F
  (the jitted association code of ``fit_gvq``, vmapped over restarts) and its
  sums are added; F then solves the normal equations. The error after the
  M-step, ``mean ||x - s F_new||^2``, comes from the same pass without a second
  look at the data: with the residuals r = x - s F of the pass,
  sum ||r - s Delta||^2 = sum ||r||^2 - 2 <Delta, S^T r> + <Delta, S^T S Delta>,
  Delta = F_new - F (exact algebra; it cancels only to the size of the error
  itself, not of ||x||^2).
* **Clipped Gaussian** (:func:`fit_clipped_gaussian_stream`): the fit needs the
  means and second moments of the patterns only; one pass adds sum_mu s_mu and
  sum_mu s_mu s_mu^T (integers, exact) and the rest is the in-memory code on
  those moments (``inference.clipped.fit._fit_moments``).
* **MCVQ** (:func:`fit_mcvq_stream`): the per-example variational parameters
  m^c are *not* state that the in-memory fit carries across iterations in any
  essential way: every iteration of ``inference.mcvq.em._step`` recomputes m of
  every example in closed form (the E-step) from the new g, mu, sigma, and
  keeps it only to form the statistics sum_c m^c [o, o x, o x^2] and the KL
  term sum_c KL(m^c || b). So the streamed fit keeps no per-example state: each
  pass runs the E-step of every batch under the current parameters and adds the
  batch's statistics and KL term; g, mu, sigma follow from the sums exactly as
  in ``_step``. m itself is returned only on request (one more pass).

Every function equals its in-memory counterpart on data that fit (tested in
float64 in ``tests/test_streaming_fits.py``); the differences (the starts, what
per-example output is returned, options that cannot stream) are listed in each
docstring.

Memory: one batch at a time on the device plus the one being read (the
pipelining of ``inference.mixture.stream._Pass``), the per-batch arrays of the
association / E-step, and sums whose size does not grow with the data.
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from inference.engine.streaming import (
    Pass,
    batches,
    check_rows,
    column_pass,
    dtype_of,
    reusable,
)
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import MissingKeyError, check_positive, check_positive_int

# ---------------------------------------------------------------------------------------
# GVQ (seed 000 sec. 3.1).


@functools.partial(jax.jit, static_argnames=("method", "model", "latent", "static_kwargs",
                                             "options", "num_features"))
def _gvq_batch(keys, rows, num_valid, features, noise, dynamic_kwargs, *, method, model,
               latent, static_kwargs, options, num_features):
    """One padded batch under every restart's F (leading axis): the association's
    normal-equation sums S^T S (n, n), S^T X (n, d), S^T r (n, d) and sum ||r||^2 of the
    residuals r = x - s F over the valid rows, and the states (padded rows included)."""
    from inference.gvq.constraints import associate_states

    valid = jnp.arange(rows.shape[0]) < num_valid

    def one(key, feats):
        kwargs = {**dynamic_kwargs, **dict(static_kwargs), "features": feats}
        states, _ = associate_states(model, rows, kwargs, method=method, latent=latent,
                                     noise=noise, rng_key=key, options=options,
                                     num_features=num_features)
        design = jnp.where(valid[:, None], states, 0).astype(rows.dtype)
        residual = jnp.where(valid[:, None], rows - design @ feats, 0.0)
        return (design.T @ design, design.T @ rows, design.T @ residual,
                jnp.sum(residual * residual), states)

    return jax.vmap(one)(keys, features)


@jax.jit
def _gvq_solve(gram, cross, projected, residual_sum, features, num):
    """The M-step from the sums (``inference.gvq.em._sharded_m_step``'s normal equations:
    pinv with the cutoff of ``lstsq``) and the error after it, per restart (vmapped)."""
    def one(gram, cross, projected, residual_sum, feats):
        dtype = feats.dtype
        cutoff = jnp.finfo(dtype).eps * jnp.maximum(num, feats.shape[0]).astype(dtype)
        solution = jnp.linalg.pinv(gram, rtol=cutoff, hermitian=True) @ cross
        used = jnp.diagonal(gram) > 0
        new = jnp.where(used[:, None], solution, feats)
        delta = new - feats
        total = residual_sum - 2.0 * jnp.sum(delta * projected) + jnp.sum(delta * (gram @ delta))
        return new, jnp.maximum(total, 0.0) / num

    return jax.vmap(one)(gram, cross, projected, residual_sum, features)


def fit_gvq_stream(source, num_features: int, *, method: str = "exact", rng_key=None,
                   num_iterations: int = 100, num_restarts: int = 4, init_features=None,
                   num_sets: int | None = None, sparsity: float | None = None,
                   binary: bool = False, beta: float | None = None, model=None,
                   model_kwargs: dict | None = None, latent: str = "s", noise=None,
                   progress_bar: bool = False, tol: float | None = None, batch_size=None,
                   return_states: bool = False, **options):
    """:func:`inference.gvq.em.fit_gvq` by passes over a source of row batches.

    One EM iteration is one pass (module docstring): every batch is associated
    with the current features by ``fit_gvq``'s association code (every restart
    side by side, vmapped), the normal-equation sums S^T S and S^T X are added
    over the batches, and F solves them. Passes: 1 (checks, count, column
    moments) + one per iteration (+ 1 with ``return_states`` only if the last
    pass was not kept, never in practice: the states are those of the last pass).

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
    num_features, method, rng_key, num_iterations, num_restarts, init_features, \
num_sets, sparsity, model, model_kwargs, latent, noise, progress_bar, tol, **options
        As :func:`inference.gvq.em.fit_gvq`.
    binary, beta
        Must be ``False`` / ``None`` (see above).
    batch_size : int, optional
        Rows per batch (:class:`inference.mixture.stream.BatchSource`).
    return_states : bool
        Gather the association of every row (see above).

    Returns
    -------
    inference.gvq.em.GVQResult
    """
    from inference.gvq import em as gvq_fit
    from inference.program.kwargs import freeze_options, split_model_kwargs
    from ppl_models import gvq

    if rng_key is None:
        raise MissingKeyError("fit_gvq_stream needs an explicit rng_key (e.g. jax.random.key(0))")
    if binary or (model_kwargs or {}).get("binary", False):
        raise ValueError("binary=True does not stream: its M-step is L-BFGS on the energy of "
                         "the whole data set (sec. 5.3), not a solve from sums over batches; "
                         "fit binary data in memory with inference.gvq.em.fit_gvq")
    num_features = check_positive_int(num_features, "num_features")
    num_iterations = check_positive_int(num_iterations, "num_iterations")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    if noise is not None:
        check_positive(noise, "noise")
    data = reusable(batches(source, batch_size), "fit_gvq_stream",
                     f"one per EM iteration, up to num_iterations={num_iterations}")
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
        _, _, kwargs, method = gvq_fit._check_constraints(
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
        starts = gvq_fit.restart_features(key_init, seed_rows, num_features, num_restarts,
                                          init_features, num_sets=kwargs.get("num_sets"))
        gvq_fit._check_constraints(starts[0], first, method=method, model_kwargs=kwargs,
                                   rng_key=rng_key, options=options)
        gvq_fit._check_program(model, first, kwargs, starts[0], latent, noise)
        if tol is None:
            tol = 1e-5 if method != "exact" else 0.0
        if not isinstance(tol, int | float) or not tol >= 0:
            raise ValueError(f"tol must be a non-negative number; got {tol!r}")
        dynamic, static = split_model_kwargs(kwargs)
        common = dict(method=method, model=model, latent=latent, static_kwargs=static,
                      options=freeze_options(options), num_features=num_features)
        return _gvq_passes(data, num, squares, first.shape[0], dtype, keys, starts, noise,
                           dynamic, common, tol, num_iterations, progress_bar, return_states,
                           kwargs.get("num_sets"))
    finally:
        data.check_finite = True


def _gvq_passes(data, num, squares, first_rows, dtype, keys, starts, noise, dynamic, common,
                tol, num_iterations, progress_bar, return_states, num_sets):
    """:func:`fit_gvq_stream` after its checks: the EM passes and the result."""
    from inference.gvq.em import GVQResult
    from ppl_models import gvq

    passes = Pass(data, dtype, first_rows, block=first_rows)
    num_restarts = starts.shape[0]
    features = starts
    errors = np.full(num_restarts, squares / num)  # the all-zero states' error (fit_gvq's init)
    done = np.zeros(num_restarts, bool)
    counts = np.zeros(num_restarts, np.int32)
    trace = np.zeros((num_restarts, num_iterations))
    states_parts = None
    noise = None if noise is None else jnp.asarray(noise, dtype)
    bar = None
    if progress_bar:
        from tqdm.auto import tqdm
        bar = tqdm(total=num_iterations, desc="GVQ-EM (stream)", leave=False)
    try:
        for it in range(num_iterations):
            iteration_keys = jax.vmap(jax.random.fold_in, (0, None))(keys, it)
            sums, rows_seen, parts = None, 0, []
            for index, (rows, count) in enumerate(passes):
                batch_keys = jax.vmap(jax.random.fold_in, (0, None))(iteration_keys, index)
                *batch_sums, states = _gvq_batch(batch_keys, rows, count, features, noise,
                                                 dynamic, **common)
                sums = batch_sums if sums is None else [a + b for a, b in zip(sums, batch_sums,
                                                                              strict=True)]
                passes.done(sums[-1])
                if return_states:
                    parts.append(np.asarray(states[:, :count]))
                rows_seen += count
            check_rows(rows_seen, num, f"EM iteration {it + 1}")
            new, new_errors = _gvq_solve(*sums, features, jnp.asarray(num))
            new_errors = np.asarray(new_errors, np.float64)
            same = np.asarray(jnp.all(new == features, axis=(1, 2)))
            settled = np.abs(errors - new_errors) <= tol * errors
            running = ~done
            keep = jnp.asarray(running)[:, None, None]
            features = jnp.where(keep, new, features)
            errors = np.where(running, new_errors, errors)
            counts = counts + running
            trace[:, it] = errors
            if return_states:
                fresh = np.concatenate(parts, axis=1)
                states_parts = fresh if states_parts is None else np.where(
                    running[:, None, None], fresh, states_parts)
            done = done | (running & (same | settled))
            if bar is not None:
                bar.update(1)
                bar.set_postfix(error=f"{float(np.min(errors)):.4g}")
            if done.all():
                break
    finally:
        if bar is not None:
            bar.close()
    for r in range(num_restarts):  # entries after a restart stopped repeat its final error
        trace[r, counts[r]:] = errors[r]
    finite = np.isfinite(errors)
    if not finite.all():
        warnings.warn("fit_gvq_stream: some restarts ended with a non-finite error; they are "
                      "skipped", NumericalWarning, stacklevel=3)
    best = int(np.argmin(np.where(finite, errors, np.inf)))
    converged = bool(done[best])
    if not converged:
        warnings.warn(
            f"fit_gvq_stream: not converged after {num_iterations} iterations (features still "
            "changing); raise num_iterations", ConvergenceWarning, stacklevel=3)
    states = sets = None
    if return_states:
        states = jnp.asarray(states_parts[best], jnp.int32)
        if num_sets is not None:
            sets = gvq.set_units(states, num_sets)[0]
    return GVQResult(
        features=features[best], states=states, error=jnp.asarray(errors[best], dtype),
        error_trace=jnp.asarray(trace[best], dtype), num_iterations=jnp.asarray(counts[best]),
        converged=jnp.asarray(converged), restart_errors=jnp.asarray(errors, dtype), sets=sets)


