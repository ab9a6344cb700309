"""The means and second moments of binary patterns from one pass over batches.

The clipped-Gaussian fit (:func:`inference.clipped.fit.fit_clipped_gaussian`) needs the
patterns only through <s_a> and <s_a s_b>. :func:`stream_moments` adds sum_mu s_mu and
sum_mu s_mu s_mu^T over the batches of any source that
:class:`inference.engine.streaming.BatchSource` accepts (integer counts, exact; each
batch's product is one jitted matrix product), checking that every batch holds -1 / +1
or 0 / 1 in the same coding as the batches before. Used by the in-memory fit when it is
handed a stream and by :func:`inference.clipped.stream.fit_clipped_gaussian_stream`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from inference.engine.streaming import batches

__all__ = ["stream_moments"]


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


def stream_moments(source, batch_size=None):
    """``(means (N,), second (N, N), num_examples)`` of the patterns of ``source``, one pass.

    ``means`` = <s_a> and ``second`` = <s_a s_b> in the default float dtype (as
    :func:`ppl_models.clipped_gaussian.to_spins` gives), divided from exact integer sums
    as :func:`inference.clipped.fit.empirical_moments` divides them.
    """
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
    dtype = jnp.result_type(float)  # as to_spins: the default float
    # The exact integer sums divided as empirical_moments divides them (the pairwise
    # solve amplifies a last-bit difference up to its tolerance in rho).
    return jnp.asarray(first_sum, dtype) / num, jnp.asarray(second_sum, dtype) / num, num
