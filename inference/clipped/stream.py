"""The clipped-Gaussian model fitted in one pass over batches: :func:`fit_clipped_gaussian_stream`.

The streamed counterpart of :func:`inference.clipped.fit.fit_clipped_gaussian`
(eq. 7-10 of D. D. Lee and H. Sompolinsky, "Learning a continuous hidden variable
model for binary data", Advances in Neural Information Processing Systems 11
(NIPS 1998), 1999), for patterns too many for memory. The fit needs the patterns
only through their means <s_a> and second moments <s_a s_b>, so one pass suffices and
nothing per pattern is kept: every batch adds sum_mu s_mu and sum_mu s_mu s_mu^T
(integer counts, exact; :func:`inference.clipped.batch_moments.stream_moments`) and
the in-memory fit then runs on the moments. The result equals the in-memory fit on
the concatenated rows bit for bit (tested in float64 in ``tests/test_streaming_fits.py``).

The source of rows is anything :class:`inference.engine.streaming.BatchSource` accepts
(a numpy array or ``np.memmap`` cut into row blocks, a callable returning a fresh
iterator of arrays, a list of arrays, or a one-shot iterator, since one pass
suffices), checked batch by batch with errors naming the batch index: every batch
must hold -1 / +1 or 0 / 1, in the same coding as the batches before. Memory: one
batch at a time plus two sums of N and N x N numbers.
"""

from __future__ import annotations

from inference.clipped.fit import fit_clipped_gaussian
from inference.engine.streaming import batches

__all__ = ["fit_clipped_gaussian_stream"]


def fit_clipped_gaussian_stream(source, num_hidden: int, *, bias: bool = True,
                                project: bool = False, constant_columns: str = "error",
                                tol: float = 1e-10, chunk_size: int = 65536, batch_size=None):
    """:func:`inference.clipped.fit.fit_clipped_gaussian` from one pass over batches.

    One pass adds sum_mu s_mu and sum_mu s_mu s_mu^T over the batches (integer
    counts, exact; each batch's product is one jitted matrix product), then the fit
    (eq. 7-10 and the eigendecomposition) runs on the means and second moments. The
    result equals ``fit_clipped_gaussian`` on the concatenated rows, bit for bit. One
    pass, so a one-shot iterator is fine.

    Parameters
    ----------
    source : array, np.memmap, callable, iterable or iterator of arrays (:class:`BatchSource`)
        Patterns (num_examples, N) of -1 / +1 or of 0 / 1 (the same coding in every
        batch; bool is 0 / 1).
    num_hidden, bias, project, constant_columns, tol, chunk_size
        As :func:`inference.clipped.fit.fit_clipped_gaussian`.
    batch_size : int, optional
        Rows per batch (:class:`inference.engine.streaming.BatchSource`).

    Returns
    -------
    inference.clipped.fit.ClippedGaussianFit

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from ppl_models import clipped_gaussian
    >>> from inference.clipped.fit import fit_clipped_gaussian
    >>> s = clipped_gaussian.generate(jax.random.key(0), 2000, 8, 2).s
    >>> batches = [s[i:i + 500] for i in range(0, 2000, 500)]  # or a memmap, a callable
    >>> fit = fit_clipped_gaussian_stream(batches, 2)
    >>> fit.weights.shape, fit.num_examples
    ((8, 2), 2000)
    >>> bool(jnp.array_equal(fit.weights, fit_clipped_gaussian(s, 2).weights))  # in memory
    True
    """
    return fit_clipped_gaussian(batches(source, batch_size), num_hidden, bias=bias,
                                project=project, constant_columns=constant_columns, tol=tol,
                                chunk_size=chunk_size)
