"""Streams of row batches: the source, the pipelined pass, and running column moments.

Every streamed fit of the zoo (the mixture's EM by passes and online learning, GVQ,
the clipped-Gaussian model, MCVQ) reads its data from a :class:`BatchSource`: a
numpy array or ``np.memmap`` cut into row blocks (only one block is read and sent
to the device at a time), a zero-argument callable returning a fresh iterator of
arrays, a re-iterable collection of arrays, or a one-shot iterator (one pass only).
:class:`Pass` sends one pass's batches to the device, padded to a few compiled
shapes, with at most two batches alive at once; :func:`merge_moments` and
:func:`column_pass` keep float64 column moments over a pass (Chan's pairwise
update).

References
----------
T. F. Chan, G. H. Golub, R. J. LeVeque, "Updating formulae and a pairwise algorithm
for computing sample variances", COMPSTAT 1982.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from ppl_models.validation import check_positive_int

__all__ = ["BatchSource", "Pass", "batches", "check_rows", "column_pass", "dtype_of",
           "is_stream", "merge_moments", "reusable"]


#: Default entries (rows x columns) of one batch cut from an array source: 4M
#: entries, 16 MB of float32 (about 260,000 rows of 16 columns).
_DEFAULT_BATCH_ENTRIES = 1 << 22


class BatchSource:
    """Row batches of a data set, validated one by one; iterate for one pass.

    Parameters
    ----------
    source : array, callable, iterable or iterator
        * an array with ``shape`` and row slicing (numpy array, ``np.memmap``, a
          JAX array, an HDF5 dataset): cut into blocks of ``batch_size`` rows, each
          read only when its turn comes;
        * a zero-argument callable returning a fresh iterable of 2-D arrays, called
          once per pass;
        * a re-iterable collection of 2-D arrays (a list or tuple: ``iter()`` gives a
          new iterator each time);
        * a one-shot iterator or generator: one pass only (:attr:`reusable` False).
    batch_size : int, optional
        Rows per batch. Arrays: default about 4M entries per batch
        (``_DEFAULT_BATCH_ENTRIES``). Other sources: batches larger than it are split
        into blocks of ``batch_size`` rows; by default batches are used as given.
    name : str
        Argument name used in error messages.

    Every batch is checked as it is read: 2-D, a real numeric dtype of the same
    kind (float, integer, ...) as the first batch, the same number of columns as
    the first batch, and (with ``check_finite``) no NaN or inf. Errors name the
    batch index and both shapes. Batches with no rows are skipped.

    Examples
    --------
    >>> import numpy as np
    >>> source = BatchSource(np.arange(10.0).reshape(5, 2), batch_size=2)
    >>> [b.shape for b in source]
    [(2, 2), (2, 2), (1, 2)]
    """

    def __init__(self, source, batch_size=None, *, name: str = "source"):
        self.name = name
        self.batch_size = None if batch_size is None else check_positive_int(
            batch_size, "batch_size")
        self.check_finite = True
        if hasattr(source, "shape") and hasattr(source, "__getitem__") and not callable(source):
            shape = tuple(source.shape)
            if len(shape) != 2:
                raise ValueError(f"{name} must be 2-D with shape (num_examples, dim); "
                                 f"got shape {shape}")
            if shape[0] == 0:
                raise ValueError(f"{name} is empty: shape {shape}")
            self.kind = "array"
            if self.batch_size is None:
                self.batch_size = max(1, _DEFAULT_BATCH_ENTRIES // max(shape[1], 1))
        elif callable(source):
            self.kind = "callable"
        elif isinstance(source, Iterator):
            self.kind = "iterator"
        elif isinstance(source, Iterable) and not isinstance(source, str | bytes | dict):
            self.kind = "iterable"
        else:
            raise TypeError(f"{name} must be an array, a callable returning an iterator of "
                            "arrays, or an iterable of 2-D arrays; got "
                            f"{type(source).__name__}")
        self.source = source
        self._used = False
        self._passes = 0  # passes begun so far

    @property
    def reusable(self) -> bool:
        """Whether the source can be iterated more than once (not a one-shot iterator)."""
        return self.kind != "iterator"

    def _raw(self):
        """The source's arrays for one pass, before checks."""
        if self.kind == "array":
            num = self.source.shape[0]
            for start in range(0, num, self.batch_size):
                yield self.source[start:start + self.batch_size]
            return
        if self.kind == "iterator":
            if self._used:
                raise ValueError(
                    f"{self.name} is a one-shot iterator and has already been consumed; "
                    "several passes need a re-iterable source (an array, np.memmap or "
                    "list of arrays) or a callable returning a fresh iterator")
            self._used = True
            iterable = self.source
        elif self.kind == "callable":
            iterable = self.source()
            if isinstance(iterable, np.ndarray) or not isinstance(iterable, Iterable):
                raise TypeError(f"{self.name}() must return an iterable of 2-D arrays; got "
                                f"{type(iterable).__name__}")
        else:
            iterable = self.source
        for batch in iterable:
            if self.batch_size is None or np.shape(batch)[0] <= self.batch_size:
                yield batch
            else:
                for start in range(0, np.shape(batch)[0], self.batch_size):
                    yield batch[start:start + self.batch_size]

    def __iter__(self) -> Iterator[np.ndarray]:
        """One pass: the checked batches as numpy arrays (views where the source allows)."""
        first = None
        for index, batch in enumerate(self._raw()):
            try:
                arr = np.asarray(batch)
            except Exception as err:
                raise TypeError(f"{self.name} batch {index} is not an array of numbers; got "
                                f"{type(batch).__name__}") from err
            if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number)
                                           or arr.dtype == bool) or np.iscomplexobj(arr):
                raise TypeError(f"{self.name} batch {index} must be a real numeric array; "
                                f"got dtype {arr.dtype}")
            if first is None:
                if arr.ndim != 2 or arr.shape[1] < 1:
                    raise ValueError(f"{self.name} batch {index} must be 2-D with shape "
                                     f"(num_rows, dim), dim >= 1; got shape {arr.shape}")
                first = (index, arr.shape, arr.dtype)
            elif arr.ndim != 2 or arr.shape[1] != first[1][1]:
                raise ValueError(f"{self.name} batch {index} has shape {arr.shape}; expected "
                                 f"2-D with {first[1][1]} columns like batch {first[0]} "
                                 f"(shape {first[1]})")
            elif arr.dtype.kind != first[2].kind:
                raise TypeError(f"{self.name} batch {index} has dtype {arr.dtype}; expected "
                                f"the kind of batch {first[0]}'s dtype {first[2]}")
            if arr.shape[0] == 0:
                continue
            if self.check_finite and not np.all(np.isfinite(arr)):
                bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
                raise ValueError(f"{self.name} batch {index} (shape {arr.shape}) contains "
                                 f"{bad} NaN or infinite value(s); all entries must be finite")
            yield arr
        self._passes += 1
        if first is None:
            if self._passes > 1:
                raise ValueError(
                    f"{self.name} gave no batches on pass {self._passes} (earlier passes "
                    "read rows): it changed between passes; a callable must return a fresh "
                    "iterator on every call")
            raise ValueError(f"{self.name} is empty: it gave no batches")


def is_stream(x) -> bool:
    """Whether ``x`` is a batch source for the streaming fits rather than one data array.

    True for a :class:`BatchSource`, an ``np.memmap``, a callable, an iterator, and a
    list or tuple whose first item is 2-D (a list of batches); False for arrays and
    for nested lists of numbers (one array). The test of the public fits' dispatch.
    """
    if isinstance(x, BatchSource | np.memmap | Iterator) or callable(x):
        return True
    return isinstance(x, list | tuple) and len(x) > 0 and np.ndim(x[0]) == 2


def batches(source, batch_size=None) -> BatchSource:
    """A :class:`BatchSource` over ``source`` (returned unchanged if it already is one)."""
    if isinstance(source, BatchSource):
        return source
    return BatchSource(source, batch_size)




class Pass:
    """Pads and sends the batches of one pass to the device, in the fit's dtype.

    A batch of r rows is padded with zero rows to whole blocks of ``block`` rows;
    batches with as many blocks as the first batch share its compiled shape, others
    are padded to a power of two of blocks (a memmap source compiles two shapes: the
    full batches and the last one).
    """

    def __init__(self, source, dtype, batch_rows, *, block):
        self.source, self.dtype = source, dtype
        self.block = block
        self.first_blocks = -(-batch_rows // self.block)

    def __iter__(self):
        """(padded batch on the device, its number of rows), one batch at a time.

        JAX dispatches asynchronously, so a loop over the batches would read them all
        before the first is processed, holding every batch in memory at once. Before a
        batch is read the caller's result of the batch before the last
        (:meth:`done`) is waited for: at most two batches are alive, one computed
        while the next is read.
        """
        self._pending = []
        for batch in self.source:
            if len(self._pending) > 1:
                jax.block_until_ready(self._pending.pop(0))
            rows = batch.shape[0]
            num_blocks = -(-rows // self.block)
            if num_blocks != self.first_blocks:
                num_blocks = 1 << (num_blocks - 1).bit_length()
            padded = num_blocks * self.block
            host = np.asarray(batch, self.dtype)
            if padded != rows:
                host = np.concatenate([host, np.zeros((padded - rows, host.shape[1]),
                                                      self.dtype)])
            yield jnp.asarray(host), rows

    def done(self, result):
        """Register the device result computed from the last batch yielded."""
        self._pending.append(result)


def merge_moments(count, mean, m2, values):
    """Add a batch ``values`` (rows, d) to running column moments: Chan's pairwise update
    in float64. ``(count, mean, m2)`` start as ``(0, None, None)``; the variance is
    ``m2 / count``. Returns the new ``(count, mean, m2)``."""
    values = np.asarray(values, np.float64)
    n_b = values.shape[0]
    mean_b = values.mean(axis=0)
    m2_b = ((values - mean_b) ** 2).sum(axis=0)
    if mean is None:
        return n_b, mean_b, m2_b
    delta = mean_b - mean
    total = count + n_b
    return (total, mean + delta * (n_b / total),
            m2 + m2_b + delta * delta * (count * n_b / total))



# ---------------------------------------------------------------------------------------
# Shared host helpers.


def dtype_of(batch):
    """The fit's float dtype for a batch, as ``check_data`` picks it for an array."""
    return (jax.dtypes.canonicalize_dtype(batch.dtype)
            if np.issubdtype(batch.dtype, np.floating) else jnp.result_type(float))


def reusable(data: BatchSource, fit: str, what: str) -> BatchSource:
    if not data.reusable:
        raise ValueError(
            f"source is a one-shot iterator, but {fit} makes several passes ({what}); pass a "
            "re-iterable source (an array, np.memmap or list of arrays) or a callable that "
            "returns a fresh iterator")
    return data


def column_pass(data):
    """Rows, float64 column means and variances (Chan's update), sum ||x||^2, first batch."""
    count, mean, m2, squares, first = 0, None, None, 0.0, None
    for batch in data:
        first = batch if first is None else first
        values = np.asarray(batch, np.float64)
        squares += float(np.sum(values * values))
        count, mean, m2 = merge_moments(count, mean, m2, values)
    return count, mean, m2 / count, squares, first


def check_rows(count, expected, what):
    if count != expected:
        raise ValueError(f"source changed between passes: the {what} pass read {count} rows, "
                         f"the first pass {expected}")
