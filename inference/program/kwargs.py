"""Helpers to jit functions that take a NumPyro program and its keyword arguments.

The program and its structural keywords (sizes, flags) are static arguments of
``jax.jit``; array-valued keywords (features, noise, prior probabilities) are
traced, so changing their values does not recompile.
"""

from __future__ import annotations

import numbers

import jax
import numpy as np

__all__ = ["split_model_kwargs", "split_args", "join_args", "freeze_options"]


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


def _traceable(value) -> bool:
    leaves = jax.tree.leaves(value)
    return bool(leaves) and all(
        isinstance(leaf, jax.Array | np.ndarray) or (
            isinstance(leaf, numbers.Real) and not isinstance(leaf, bool | numbers.Integral))
        for leaf in leaves)


def split_args(args: tuple):
    """Split a program's positional ``args`` into (a tuple with the traced ones, None
    elsewhere; a hashable tuple of (position, value) for the others).

    Arrays, floats and containers of them are traced; integers, flags, strings and
    None are static (a size that the program uses as a shape stays a Python int).
    """
    dynamic, static = [], []
    for index, value in enumerate(args):
        if _traceable(value):
            dynamic.append(value)
            continue
        try:
            hash(value)
        except TypeError as err:
            raise TypeError(
                f"argument {index} of the program must be an array, a number, a container "
                f"of arrays or a hashable value; got {type(value).__name__}") from err
        dynamic.append(None)
        static.append((index, value))
    return tuple(dynamic), tuple(static)


def join_args(dynamic: tuple, static: tuple) -> tuple:
    """The positional arguments back from :func:`split_args`'s two parts."""
    args = list(dynamic)
    for index, value in static:
        args[index] = value
    return tuple(args)


def freeze_options(options: dict) -> tuple:
    """Method options as a hashable, sorted tuple of (name, value) pairs."""
    frozen = tuple(sorted(options.items()))
    try:
        hash(frozen)
    except TypeError as err:
        raise TypeError(f"method options must be hashable values; got {options!r}") from err
    return frozen
