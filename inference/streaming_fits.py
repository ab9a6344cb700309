"""GVQ, the clipped-Gaussian model and MCVQ fitted by passes over batches (issue 9).

The streamed counterparts of :func:`inference.gvq.fit_gvq` (seed 000 sec. 3.1),
:func:`inference.clipped_gaussian.fit_clipped_gaussian` (seed 001 eq. 7-10) and
:func:`inference.mcvq.fit_mcvq` (seed 004 sec. 3), for data too large for memory.
The source of rows is anything :class:`inference.streaming.BatchSource` accepts
(a numpy array or ``np.memmap`` cut into row blocks, a callable returning a fresh
iterator of arrays, a list of arrays; a one-shot iterator only where one pass
suffices), checked batch by batch with errors naming the batch index.

Each algorithm keeps what it must; everything per example is recomputed:

* **GVQ** (:func:`fit_gvq_stream`): the association of an example depends only
  on it and the current F, and the M-step's least-squares problem only on the
  sums S^T S and S^T X (the normal equations of ``inference.gvq._sharded_m_step``).
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
  those moments (``inference.clipped_gaussian._fit_moments``).
* **MCVQ** (:func:`fit_mcvq_stream`): the per-example variational parameters
  m^c are *not* state that the in-memory fit carries across iterations in any
  essential way: every iteration of ``inference.mcvq._step`` recomputes m of
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
pipelining of ``inference.streaming._Pass``), the per-batch arrays of the
association / E-step, and sums whose size does not grow with the data.
"""

from __future__ import annotations

import functools
import itertools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import xlogy

from inference import _host
from inference.streaming import BatchSource, _Pass, batches, is_stream, merge_moments
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import MissingKeyError, check_positive, check_positive_int

__all__ = ["fit_gvq_stream", "fit_clipped_gaussian_stream", "fit_mcvq_stream", "is_stream",
           "is_masked_stream"]


# ---------------------------------------------------------------------------------------
# Shared host helpers.


def _dtype_of(batch):
    """The fit's float dtype for a batch, as ``check_data`` picks it for an array."""
    return (jax.dtypes.canonicalize_dtype(batch.dtype)
            if np.issubdtype(batch.dtype, np.floating) else jnp.result_type(float))


def _reusable(data: BatchSource, fit: str, what: str) -> BatchSource:
    if not data.reusable:
        raise ValueError(
            f"source is a one-shot iterator, but {fit} makes several passes ({what}); pass a "
            "re-iterable source (an array, np.memmap or list of arrays) or a callable that "
            "returns a fresh iterator")
    return data


def _column_pass(data):
    """Rows, float64 column means and variances (Chan's update), sum ||x||^2, first batch."""
    count, mean, m2, squares, first = 0, None, None, 0.0, None
    for batch in data:
        first = batch if first is None else first
        values = np.asarray(batch, np.float64)
        squares += float(np.sum(values * values))
        count, mean, m2 = merge_moments(count, mean, m2, values)
    return count, mean, m2 / count, squares, first


def _check_rows(count, expected, what):
    if count != expected:
        raise ValueError(f"source changed between passes: the {what} pass read {count} rows, "
                         f"the first pass {expected}")


# ---------------------------------------------------------------------------------------
# GVQ (seed 000 sec. 3.1).


@functools.partial(jax.jit, static_argnames=("method", "model", "latent", "static_kwargs",
                                             "options", "num_features"))
def _gvq_batch(keys, rows, num_valid, features, noise, dynamic_kwargs, *, method, model,
               latent, static_kwargs, options, num_features):
    """One padded batch under every restart's F (leading axis): the association's
    normal-equation sums S^T S (n, n), S^T X (n, d), S^T r (n, d) and sum ||r||^2 of the
    residuals r = x - s F over the valid rows, and the states (padded rows included)."""
    from inference.gvq_constraints import associate_states

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
    """The M-step from the sums (``inference.gvq._sharded_m_step``'s normal equations:
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
    """:func:`inference.gvq.fit_gvq` by passes over a source of row batches.

    One EM iteration is one pass (module docstring): every batch is associated
    with the current features by ``fit_gvq``'s association code (every restart
    side by side, vmapped), the normal-equation sums S^T S and S^T X are added
    over the batches, and F solves them. Passes: 1 (checks, count, column
    moments) + one per iteration (+ 1 with ``return_states`` only if the last
    pass was not kept, never in practice: the states are those of the last pass).

    Differences from ``fit_gvq``:

    * Initial features (unless ``init_features``): ``fit_gvq``'s draw
      (:func:`inference.gvq.initial_features`, the same keys) needs only the
      column means and standard deviations of x, which the first pass computes,
      so the start is ``fit_gvq``'s own (to rounding). With ``num_sets`` the
      start (:func:`inference.gvq.initial_set_features`) picks example rows:
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
        As :func:`inference.gvq.fit_gvq`.
    binary, beta
        Must be ``False`` / ``None`` (see above).
    batch_size : int, optional
        Rows per batch (:class:`inference.streaming.BatchSource`).
    return_states : bool
        Gather the association of every row (see above).

    Returns
    -------
    inference.gvq.GVQResult
    """
    from inference import gvq as gvq_fit
    from inference._jit import freeze_options, split_model_kwargs
    from ppl_models import gvq

    if rng_key is None:
        raise MissingKeyError("fit_gvq_stream needs an explicit rng_key (e.g. jax.random.key(0))")
    if binary or (model_kwargs or {}).get("binary", False):
        raise ValueError("binary=True does not stream: its M-step is L-BFGS on the energy of "
                         "the whole data set (sec. 5.3), not a solve from sums over batches; "
                         "fit binary data in memory with inference.gvq.fit_gvq")
    num_features = check_positive_int(num_features, "num_features")
    num_iterations = check_positive_int(num_iterations, "num_iterations")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    if noise is not None:
        check_positive(noise, "noise")
    data = _reusable(batches(source, batch_size), "fit_gvq_stream",
                     f"one per EM iteration, up to num_iterations={num_iterations}")
    data.check_finite = True
    num, mean, variance, squares, first = _column_pass(data)
    data.check_finite = False  # checked in the first pass; later passes check shapes only
    try:
        dtype = _dtype_of(first)
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
    from inference.gvq import GVQResult
    from ppl_models import gvq

    passes = _Pass(data, dtype, None, first_rows, block=first_rows)
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
            _check_rows(rows_seen, num, f"EM iteration {it + 1}")
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


# ---------------------------------------------------------------------------------------
# Clipped Gaussian (seed 001 eq. 7-10): one pass of moments.


@jax.jit
def _spin_sums(spins):
    """sum_mu s_mu (N,) and sum_mu s_mu s_mu^T (N, N) of a padded batch (zero rows add 0)."""
    return jnp.sum(spins, axis=0), spins.T @ spins


def _spin_batch(batch, index, coding):
    """A batch of -1/+1 or 0/1 patterns as float spins, checking its values and that its
    coding agrees with the batches before (``ppl_models.clipped_gaussian.to_spins`` per
    batch); returns (spins, coding)."""
    arr = np.asarray(batch)
    if arr.dtype == bool:
        arr = arr.astype(np.int8)
    values = set(np.unique(arr).tolist())
    if not (values <= {-1, 1} or values <= {0, 1}):
        shown = sorted(values)[:6]
        raise ValueError(f"source batch {index} must hold only -1 / +1 or only 0 / 1; got "
                         f"values {shown}{' ...' if len(values) > 6 else ''}")
    this = "spins" if -1 in values else ("binary" if 0 in values else None)
    if this is not None:
        if coding is not None and coding != this:
            raise ValueError(f"source batch {index} holds {'-1' if this == 'spins' else '0'} "
                             f"but an earlier batch held {'0' if this == 'spins' else '-1'}: "
                             "patterns must be all -1 / +1 or all 0 / 1")
        coding = this
    return np.where(arr > 0, 1, -1).astype(np.int8), coding


def fit_clipped_gaussian_stream(source, num_hidden: int, *, bias: bool = True,
                                project: bool = False, constant_columns: str = "error",
                                tol: float = 1e-10, chunk_size: int = 65536, batch_size=None):
    """:func:`inference.clipped_gaussian.fit_clipped_gaussian` from one pass over batches.

    The fit (eq. 7-10 and the eigendecomposition) needs only the means <s_a> and
    second moments <s_a s_b> of the patterns: one pass adds sum_mu s_mu and
    sum_mu s_mu s_mu^T over the batches (integer counts, exact; each batch's product
    is one jitted matrix product), then the in-memory fit runs on those moments.
    The result equals ``fit_clipped_gaussian`` on the concatenated rows (tested in
    float64 to 1e-12). One pass, so a one-shot iterator is fine.

    Parameters
    ----------
    source : array, np.memmap, callable, iterable or iterator of arrays (:class:`BatchSource`)
        Patterns (num_examples, N) of -1 / +1 or of 0 / 1 (the same coding in every
        batch; bool is 0 / 1).
    num_hidden, bias, project, constant_columns, tol, chunk_size
        As :func:`inference.clipped_gaussian.fit_clipped_gaussian`.
    batch_size : int, optional
        Rows per batch (:class:`inference.streaming.BatchSource`).

    Returns
    -------
    inference.clipped_gaussian.ClippedGaussianFit
    """
    from inference import clipped_gaussian as cg

    if constant_columns not in ("error", "independent"):
        raise ValueError(f"constant_columns must be 'error' or 'independent'; "
                         f"got {constant_columns!r}")
    check_positive(tol, "tol")
    data = batches(source, batch_size)
    coding, num, first_sum, second_sum = None, 0, None, None
    for index, batch in enumerate(data):
        spins, coding = _spin_batch(batch, index, coding)
        first, second = _spin_sums(jnp.asarray(spins, jnp.float32))
        # float32 sums of +-1 are exact below 2^24 rows per batch; added as int64 here.
        if spins.shape[0] >= 1 << 24:
            raise ValueError(f"source batch {index} has {spins.shape[0]} rows; batches of at "
                             "most 2^24 - 1 rows keep the float32 sums exact (set batch_size)")
        first = np.asarray(first).astype(np.int64)
        second = np.asarray(second).astype(np.int64)
        first_sum = first if first_sum is None else first_sum + first
        second_sum = second if second_sum is None else second_sum + second
        num += spins.shape[0]
    num_units = first_sum.shape[0]
    num_hidden = check_positive_int(num_hidden, "num_hidden", maximum=num_units,
                                    why=f"the number of units N = {num_units} in source")
    dtype = jnp.result_type(float)  # as to_spins: the default float
    # The exact integer sums divided as empirical_moments divides them (the pairwise
    # solve amplifies a last-bit difference up to its tolerance in rho).
    means = jnp.asarray(first_sum, dtype) / num
    second = jnp.asarray(second_sum, dtype) / num
    return cg._fit_moments(means, second, num, num_hidden, bias=bias, project=project,
                           constant_columns=constant_columns, tol=tol, chunk_size=chunk_size,
                           stacklevel=3)


# ---------------------------------------------------------------------------------------
# MCVQ (seed 004 sec. 3): sources with masks.


def is_masked_stream(x) -> bool:
    """Whether ``x`` is a stream for :func:`fit_mcvq_stream`: :func:`is_stream`, or a list
    or tuple of ``(x_batch, mask_batch)`` pairs."""
    if is_stream(x):
        return True
    return (isinstance(x, list | tuple) and len(x) > 0 and isinstance(x[0], tuple | list)
            and len(x[0]) == 2 and np.ndim(x[0][0]) == 2)


class _MaskedSource:
    """(x, mask) batches of an MCVQ source, checked; iterate for one pass.

    Forms: ``mask`` None and items arrays (all observed); ``mask`` None and items
    ``(x, mask)`` pairs; ``mask`` a second source of the same form as ``source``
    (an array or memmap of x's shape, or batches matching x's row for row).
    """

    def __init__(self, source, mask, batch_size):
        self.batch_size = batch_size
        probe = batches(source, batch_size)
        # Arrays are cut by BatchSource; other sources are read item by item (pairs or
        # arrays) and cut per pass in _pairs.
        self.x_source = probe if probe.kind == "array" else BatchSource(source, None)
        self.x_source.name = "source"
        self.mask_source = None if mask is None else batches(mask, batch_size)
        if self.mask_source is not None:
            self.mask_source.name = "mask"
            if probe.kind != "array":
                self.x_source = probe
        self.reusable = self.x_source.reusable and (
            self.mask_source is None or self.mask_source.reusable)

    def _pairs(self):
        """Checked x and mask sources for one pass, read in lockstep (mask None: all
        observed)."""
        if self.mask_source is not None or self.x_source.kind == "array":
            return self.x_source, self.mask_source
        items = iter(self.x_source._raw())  # the items as given: arrays or (x, mask) pairs
        head = next(items, None)
        if head is None:
            return BatchSource(iter(()), name="source"), None  # raises "source is empty"
        stream = _chain_one(head, items)
        if not (isinstance(head, tuple | list) and len(head) == 2 and np.ndim(head[0]) == 2):
            return BatchSource(stream, self.batch_size, name="source"), None
        left, right = itertools.tee(stream)
        xs = BatchSource((_pair_part(pair, i, 0) for i, pair in enumerate(left)),
                         self.batch_size, name="source")
        masks = BatchSource((_pair_part(pair, i, 1) for i, pair in enumerate(right)),
                            self.batch_size, name="mask")
        return xs, masks

    def __iter__(self):
        """(x with 0 at missing entries as float64-or-native array, bool mask) per batch."""
        xs, masks = self._pairs()
        if masks is None:
            for index, x in enumerate(xs):
                yield index, x, None
            return
        xs.check_finite = False
        mask_iter = iter(masks)
        for index, x in enumerate(xs):
            mask = next(mask_iter, None)
            if mask is None:
                raise ValueError(f"mask ended before source: no mask for source batch {index}")
            if mask.shape != x.shape:
                raise ValueError(f"mask batch {index} has shape {mask.shape}; expected the "
                                 f"shape of source batch {index}, {x.shape}")
            if mask.dtype != bool:
                if not np.all((mask == 0) | (mask == 1)):
                    raise TypeError(f"mask batch {index} must be bool (True = observed); got "
                                    f"dtype {mask.dtype} with values other than 0 / 1")
                mask = mask.astype(bool)
            bad = int(np.sum(~np.isfinite(x) & mask))
            if bad:
                raise ValueError(f"source batch {index} has {bad} NaN or infinite value(s) "
                                 "where mask is True (observed); mark them False in mask")
            yield index, np.where(mask, x, 0), mask
        if next(mask_iter, None) is not None:
            raise ValueError("mask has more batches than source")


def _chain_one(head, rest):
    yield head
    yield from rest


def _pair_part(pair, index, part):
    if not (isinstance(pair, tuple | list) and len(pair) == 2):
        raise TypeError(f"source batch {index} must be an (x, mask) pair like batch 0; got "
                        f"{type(pair).__name__}")
    return pair[part]


class _Packed:
    """Re-iterable (rows, 2 D) arrays [x with 0 at missing, mask as 0 / 1] for ``_Pass``:
    a padded row is all zeros, i.e. unobserved, and adds nothing to any sum."""

    def __init__(self, source):
        self.source = source

    def __iter__(self):
        for _, x, mask in self.source:
            obs = np.ones(x.shape, bool) if mask is None else mask
            yield np.concatenate([np.where(obs, x, 0), obs], axis=1)


def _unpack(packed, shift):
    """The (rows, 3 D) moments [o, o xc, o xc^2] (``inference.mcvq._moments`` with a fixed
    shift, the observed mean of all the data)."""
    dim = packed.shape[1] // 2
    x, obs = packed[:, :dim], packed[:, dim:]
    centred = obs * (x - shift)
    return jnp.concatenate([obs, centred, centred * centred], axis=1)


@jax.jit
def _mcvq_batch(packed, num_valid, shift, natural, g, b):
    """E-step of one padded batch under every restart's (natural, g): the statistics
    (restarts, 3, D, K, J) and the KL term sum_c KL(m^c || b) over the valid rows."""
    from inference.mcvq import _fast_e_step, _statistics

    moments = _unpack(packed, shift)
    valid = (jnp.arange(packed.shape[0]) < num_valid)[:, None, None]

    def one(natural, g):
        m = _fast_e_step(moments, natural, g, b)
        kl = jnp.sum(jnp.where(valid, xlogy(m, m) - xlogy(m, b), 0.0))
        return _statistics(moments, m), kl

    return jax.vmap(one)(natural, g)


@jax.jit
def _mcvq_states(packed, shift, natural, g, b):
    """m of one padded batch under one start's parameters (the E-step)."""
    from inference.mcvq import _fast_e_step

    return _fast_e_step(_unpack(packed, shift), natural, g, b)


@jax.jit
def _mcvq_update(stats, mu, sigma, shift, a, temperature, floor):
    """g-step and M-step from the statistics (``inference.mcvq._step``), per restart."""
    from inference.mcvq import _fast_g_step, _fast_m_step, _natural

    def one(stats, mu, sigma):
        g = _fast_g_step(stats, _natural(mu, sigma, shift), a, temperature)
        mu, sigma = _fast_m_step(stats, mu, sigma, shift, floor)
        return g, mu, sigma, _natural(mu, sigma, shift)

    return jax.vmap(one)(stats, mu, sigma)


@jax.jit
def _mcvq_energy(stats, natural, g, kl_m, a, temperature):
    """F_T from the statistics and the summed KL of m (``inference.mcvq._fast_free_energy``)."""
    def one(stats, natural, g, kl_m):
        expected = jnp.sum(stats * natural, axis=(0, 3))
        return kl_m + temperature * jnp.sum(xlogy(g, g) - xlogy(g, a)) + jnp.sum(g * expected)

    return jax.vmap(one)(stats, natural, g, kl_m)


@functools.partial(jax.jit, static_argnames=("num_vqs", "num_states"))
def _mcvq_start(key, picked, std, a, *, num_vqs, num_states):
    """``inference.mcvq._init``'s mu, sigma and g from the same uniform draw: ``picked``
    (K, J, D) are the chosen rows with missing entries filled by the column mean,
    ``std`` (D,) the floored column standard deviation."""
    dim = std.shape[0]
    dtype = std.dtype
    sizes = (num_vqs * num_states, dim * num_vqs * num_states, dim * num_vqs)
    tiny = jnp.finfo(dtype).tiny
    u = jax.random.uniform(key, (sum(sizes),), dtype, minval=tiny, maxval=1.0 - 1e-7)
    _, u_mu, u_g = jnp.split(u, np.cumsum(sizes)[:-1])
    mu = jnp.moveaxis(picked, -1, 0)  # (D, K, J)
    mu = mu + 0.1 * std[:, None, None] * jax.scipy.special.ndtri(u_mu).reshape(mu.shape)
    sigma = jnp.broadcast_to(std[:, None, None], mu.shape)
    gumbel = -jnp.log(-jnp.log(u_g.reshape(a.shape)))
    part = jax.nn.one_hot(jnp.argmax(jnp.log(a) + gumbel, axis=-1), num_vqs, dtype=dtype)
    g = a * (0.9 * part + 0.1 / num_vqs)
    return g / jnp.sum(g, axis=-1, keepdims=True), mu, sigma


@functools.partial(jax.jit, static_argnames=("num_vqs", "num_states", "num"))
def _mcvq_rows(key, dtype_probe, *, num_vqs, num_states, num):
    """The example indices (K, J) ``inference.mcvq._init`` picks from ``num`` rows."""
    dim = dtype_probe.shape[0]
    sizes = (num_vqs * num_states, dim * num_vqs * num_states, dim * num_vqs)
    tiny = jnp.finfo(dtype_probe.dtype).tiny
    u = jax.random.uniform(key, (sum(sizes),), dtype_probe.dtype, minval=tiny,
                           maxval=1.0 - 1e-7)
    u_rows = u[:sizes[0]]
    return jnp.minimum((u_rows * num).astype(jnp.int32), num - 1).reshape(num_vqs, num_states)


def fit_mcvq_stream(source, num_vqs: int, num_states: int, *, mask=None, rng_key=None,
                    temperature_schedule=None, num_iterations: int = 100,
                    initial_temperature: float | None = None, variance_floor: float = 1e-3,
                    tol: float = 1e-6, a=None, b=None, num_restarts: int = 1, batch_size=None,
                    return_m: bool = False):
    """:func:`inference.mcvq.fit_mcvq` by passes over a source of row batches.

    Design (module docstring): the in-memory fit's per-example state m^c is the
    closed-form E-step of the current parameters, kept only for its sums, so no
    per-example state is kept here. Each iteration is one pass: ``_step``'s g-step
    and M-step from the statistics of the last pass, then the E-step of every batch
    under the new parameters (jitted, vmapped over the batch's examples and over
    the restarts) adding the batch's statistics sum_c m^c [o, o xc, o xc^2] and
    KL(m^c || b); F_T follows from those sums. The result equals ``fit_mcvq``'s
    (same start, same iterations, same stopping; tested in float64 to 1e-9).

    Passes: 1 (checks, counts, observed column means: the shift of the centred
    moments), 1 (column variances, the rows the start picks), 1 (the E-step of
    the start), one per iteration, and one more with ``return_m``.

    The start is ``fit_mcvq``'s (``inference.mcvq.init``) from the whole data:
    its column statistics come from the first two passes and the examples it picks
    (by index, from the same random draw) are gathered in the second.

    Differences from ``fit_mcvq``: ``m`` is ``None`` unless ``return_m=True``
    (an (N, K, J) array on the host, filled by one more pass: the E-step of the
    kept start, which is the ``m`` ``fit_mcvq`` returns); all restarts run side by
    side on every batch (``restart_batch_size`` does not apply); no devices, mesh
    or checkpoints. A one-shot iterator cannot be used (several passes).

    Parameters
    ----------
    source : array, np.memmap, callable or iterable (:class:`BatchSource`)
        Rows (N, D). Items may be arrays (every entry observed, all finite) or
        ``(x_batch, mask_batch)`` pairs (a list of pairs, or a callable returning
        an iterator of pairs): the mask streams with its batch, and x may hold
        anything (NaN included) where the mask is False.
    mask : array, np.memmap, callable or iterable, optional
        Instead of pairs: a second source cut like ``source`` (an array or memmap of
        x's shape, or batches matching x's row for row), True where observed.
    num_vqs, num_states, rng_key, temperature_schedule, num_iterations, \
initial_temperature, variance_floor, tol, a, b, num_restarts
        As :func:`inference.mcvq.fit_mcvq` (the default ``initial_temperature`` is
        max(N - 1, 1) with N counted by the first pass).
    batch_size : int, optional
        Rows per batch (:class:`inference.streaming.BatchSource`).
    return_m : bool
        Compute m of every example (see above).

    Returns
    -------
    inference.mcvq.MCVQResult
    """
    from inference import mcvq as mcvq_fit

    num_vqs = check_positive_int(num_vqs, "num_vqs")
    num_states = check_positive_int(num_states, "num_states")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    if rng_key is None:
        raise MissingKeyError("fit_mcvq_stream needs an explicit rng_key (e.g. jax.random.key(0))")
    check_positive(variance_floor, "variance_floor")
    check_positive(tol, "tol") if tol else None
    data = _MaskedSource(source, mask, batch_size)
    if not data.reusable:
        raise ValueError(
            "source (or mask) is a one-shot iterator, but fit_mcvq_stream makes several passes "
            "(statistics, start, one per iteration); pass a re-iterable source (an array, "
            "np.memmap or list of batches) or a callable that returns a fresh iterator")

    # Pass 1: checks, counts and the observed column sums.
    num, obs_count, obs_sum, first = 0, None, None, None
    for index, x, obs in data:
        obs = np.ones(x.shape, bool) if obs is None else obs
        empty = np.flatnonzero(~obs.any(axis=1))
        if empty.size:
            raise ValueError(f"mask leaves example(s) {(empty[:10] + num).tolist()} (rows of "
                             f"source; batch {index}) without any observed entry; drop them")
        if first is None:
            first = x
            obs_count = np.zeros(x.shape[1])
            obs_sum = np.zeros(x.shape[1])
        obs_count += obs.sum(axis=0)
        obs_sum += np.where(obs, x, 0).astype(np.float64).sum(axis=0)
        num += x.shape[0]
    empty_cols = np.flatnonzero(obs_count == 0)
    if empty_cols.size:
        raise ValueError(f"mask leaves dimension(s) {empty_cols[:10].tolist()} (columns of "
                         "source) without any observed entry; drop them")
    dtype = _dtype_of(first)
    dim = first.shape[1]
    col_mean = obs_sum / obs_count
    temperatures, num_iterations = mcvq_fit.schedule(temperature_schedule, num_iterations,
                                                     initial_temperature, num)
    a, b = mcvq_fit._priors(a, b, dim, num_vqs, num_states, dtype)
    keys = rng_key[None] if num_restarts == 1 else jax.random.split(rng_key, num_restarts)

    # Pass 2: column variances and the rows picked by the start.
    picks = np.stack([np.asarray(_mcvq_rows(key, jnp.zeros(dim, dtype), num_vqs=num_vqs,
                                            num_states=num_states, num=num)) for key in keys])
    picked = np.zeros((*picks.shape, dim))
    obs_m2, offset = np.zeros(dim), 0
    for _, x, obs in data:
        obs = np.ones(x.shape, bool) if obs is None else obs
        centred = np.where(obs, np.asarray(x, np.float64) - col_mean, 0.0)
        obs_m2 += (centred * centred).sum(axis=0)
        here = (picks >= offset) & (picks < offset + x.shape[0])
        if here.any():
            local = picks[here] - offset
            picked[here] = np.where(obs[local], x[local], col_mean)
        offset += x.shape[0]
    _check_rows(offset, num, "start")
    variance = obs_m2 / obs_count
    spread = float(np.mean(variance))
    floor = variance_floor * (spread if spread > 0 else 1.0)
    std = jnp.asarray(np.sqrt(np.maximum(variance, floor)), dtype)
    shift = jnp.asarray(col_mean, dtype)
    starts = [_mcvq_start(key, jnp.asarray(p, dtype), std, a, num_vqs=num_vqs,
                          num_states=num_states) for key, p in zip(keys, picked, strict=True)]
    g, mu, sigma = (jnp.stack(parts) for parts in zip(*starts, strict=True))
    natural = jax.vmap(mcvq_fit._natural, (0, 0, None))(mu, sigma, shift)

    passes = _Pass(_Packed(data), dtype, None, first.shape[0], block=first.shape[0])

    def e_pass(natural, g, what):
        stats = kl = None
        rows_seen = 0
        for packed, count in passes:
            s, k = _mcvq_batch(packed, count, shift, natural, g, b)
            stats, kl = (s, k) if stats is None else (stats + s, kl + k)
            passes.done(kl)
            rows_seen += count
        _check_rows(rows_seen, num, what)
        return stats, kl

    # Pass 3: the start's E-step (its statistics); then one pass per iteration.
    stats, kl_m = e_pass(natural, g, "start E-step")
    floor_d = jnp.asarray(floor, dtype)
    tol_d = jnp.asarray(tol, dtype)
    temps = jnp.asarray(temperatures, dtype)
    previous = jnp.full(num_restarts, jnp.inf, dtype)
    done = np.zeros(num_restarts, bool)
    counts = np.zeros(num_restarts, np.int64)
    energies = np.full((num_restarts, num_iterations), np.nan)
    for it in range(num_iterations):
        temperature = temps[it]
        new_g, new_mu, new_sigma, new_natural = _mcvq_update(stats, mu, sigma, shift, a,
                                                             temperature, floor_d)
        new_stats, new_kl = e_pass(new_natural, new_g, f"iteration {it + 1}")
        energy = _mcvq_energy(new_stats, new_natural, new_g, new_kl, a, temperature)
        same = it > 0 and bool(temperature == temps[max(it - 1, 0)])
        change = jnp.abs(previous - energy) / jnp.maximum(jnp.abs(energy), 1.0)
        finished = np.asarray(same & (change <= tol_d))
        running = ~done
        keep = jnp.asarray(running)

        def pick(new, old, keep=keep):
            return jnp.where(keep.reshape((-1,) + (1,) * (new.ndim - 1)), new, old)

        g, mu, sigma, natural = (pick(n, o) for n, o in ((new_g, g), (new_mu, mu),
                                                          (new_sigma, sigma),
                                                          (new_natural, natural)))
        stats, kl_m, previous = pick(new_stats, stats), pick(new_kl, kl_m), pick(energy,
                                                                                  previous)
        energies[running, it] = np.asarray(energy, np.float64)[running]
        counts = counts + running
        done = done | (running & finished)
        if done.all():
            break

    finals = _mcvq_energy(stats, natural, g, kl_m, a, temps[num_iterations - 1])
    best = int(jnp.argmin(jnp.where(jnp.isnan(finals), jnp.inf, finals)))
    it = int(counts[best])
    trace = _host.array(energies[best, :it], dtype)  # on the host: its length varies
    if not bool(np.all(np.isfinite(np.asarray(trace)))):
        warnings.warn("fit_mcvq_stream: the free energy became non-finite; check the data scale "
                      "and variance_floor", NumericalWarning, stacklevel=2)
    if not done[best]:
        warnings.warn(f"fit_mcvq_stream: not converged after {it} iterations (tol={tol}); raise "
                      "num_iterations or lengthen the schedule at T = 1",
                      ConvergenceWarning, stacklevel=2)
    m = None
    if return_m:
        parts = []
        for packed, count in passes:
            states = _mcvq_states(packed, shift, natural[best], g[best], b)
            passes.done(states)
            parts.append(np.asarray(states[:count]))
        m = jnp.asarray(np.concatenate(parts), dtype)
    return mcvq_fit.MCVQResult(
        g=g[best], m=m, mu=mu[best], sigma=sigma[best], a=a, b=b, free_energy_trace=trace,
        temperature_trace=_host.head(temps, it), num_iterations=it, converged=bool(done[best]),
        variance_floor=floor, restart_free_energies=finals, best_restart=best,
        restart_converged=jnp.asarray(done))

