"""Helpers to jit functions that take a NumPyro program and its keyword arguments.

The program and its structural keywords (sizes, flags) are static arguments of
``jax.jit``; array-valued keywords (features, noise, prior probabilities) are
traced, so changing their values does not recompile.
"""

from __future__ import annotations

import numbers

import jax
import numpy as np

__all__ = ["split_model_kwargs", "freeze_options"]


def split_model_kwargs(model_kwargs: dict | None):
    """Split ``model_kwargs`` into (dynamic dict of arrays, static hashable tuple)."""
    dynamic, static = {}, []
    for key, value in sorted((model_kwargs or {}).items()):
        if isinstance(value, jax.Array | np.ndarray) or (
            isinstance(value, numbers.Real) and not isinstance(value, bool | numbers.Integral)
        ):
            dynamic[key] = value
        else:
            try:
                hash(value)
            except TypeError as err:
                raise TypeError(
                    f"model_kwargs[{key!r}] must be an array, a number or a hashable value; "
                    f"got {type(value).__name__}"
                ) from err
            static.append((key, value))
    return dynamic, tuple(static)


def freeze_options(options: dict) -> tuple:
    """Method options as a hashable, sorted tuple of (name, value) pairs."""
    frozen = tuple(sorted(options.items()))
    try:
        hash(frozen)
    except TypeError as err:
        raise TypeError(f"method options must be hashable values; got {options!r}") from err
    return frozen
