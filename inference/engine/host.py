"""Slices, gathers and conversions whose size depends on the data, done on the host.

JAX compiles one program per distinct shape of an operation run outside ``jit``:
``trace[:num_iterations]`` or ``weights[keep]`` with a data-dependent length would
compile a new slice or gather whenever a fit stops at a new iteration or keeps a new
number of components, and a long study (many seeds, many candidate sizes) piles up
those small executables. ``jnp.asarray`` of a numpy array compiles too (a staging copy
per shape, or a conversion when the dtype differs). These helpers copy the values on
the host instead (exactly: no arithmetic) and return a jax array of the same dtype, so
that a repeated fit compiles nothing whatever its outcome.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["array", "head", "take"]


def head(array, length: int):
    """``array[:length]`` (along axis 0) as a jax array, sliced on the host."""
    return jnp.asarray(np.asarray(array)[:length], dtype=array.dtype)


def take(array, index, axis: int = 0):
    """``array`` at the integer indices ``index`` along ``axis``, gathered on the host."""
    return jnp.asarray(np.take(np.asarray(array), np.asarray(index), axis=axis),
                       dtype=array.dtype)


def array(value, dtype=None):
    """``jnp.asarray(value, dtype)`` for host data (numpy, lists), converted on the host.

    ``jnp.asarray`` of a numpy array without a dtype stages it through a small compiled
    program per shape, and a dtype that differs from the array's converts it on the
    device, again per shape; a data-dependent length would compile each time. The
    dtype is the one ``jnp.asarray`` gives (64-bit types become 32-bit without x64).
    """
    value = np.asarray(value)
    dtype = jax.dtypes.canonicalize_dtype(value.dtype if dtype is None else dtype)
    return jnp.asarray(np.asarray(value, dtype), dtype=dtype)
