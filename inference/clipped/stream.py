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

import jax
import jax.numpy as jnp
import numpy as np

from inference.engine.streaming import (
    batches,
)
from ppl_models.validation import check_positive, check_positive_int

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
    """:func:`inference.clipped.fit.fit_clipped_gaussian` from one pass over batches.

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
        As :func:`inference.clipped.fit.fit_clipped_gaussian`.
    batch_size : int, optional
        Rows per batch (:class:`inference.mixture.stream.BatchSource`).

    Returns
    -------
    inference.clipped.fit.ClippedGaussianFit
    """
    from inference.clipped import fit as cg

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


