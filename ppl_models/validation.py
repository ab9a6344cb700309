"""Argument checks shared by the models and the inference code.

Every public function validates its input and raises ``ValueError`` or
``TypeError`` naming the argument, what was expected and what was given.
A randomised function called without its ``rng_key`` raises
:class:`MissingKeyError`, which is both (so ``except ValueError`` and
``except TypeError`` catch it alike). Checks run only on concrete arrays:
inside ``jit`` they are skipped.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["MissingKeyError", "check_data", "check_positive_int", "check_positive", "check_finite",
           "check_probability", "check_features", "check_fraction", "check_tolerance",
           "check_choice", "check_rng_key", "check_bool", "check_nonnegative", "is_traced"]


class MissingKeyError(ValueError, TypeError):
    """A randomised function was called without its ``rng_key`` (None).

    Derives from both ``ValueError`` and ``TypeError``: a missing key is a missing
    argument (TypeError, as Python raises for one) of a value the call cannot do
    without (ValueError), and callers written against either keep working.
    """


def is_traced(value) -> bool:
    """True when ``value`` is a JAX tracer (we are inside ``jit``/``vmap``)."""
    return isinstance(value, jax.core.Tracer)


def check_data(x, name: str = "x", *, dim: int | None = None, min_examples: int = 1):
    """Return ``x`` as a 2-D float array (num_examples, dim) after checking it.

    Raises ``ValueError`` when ``x`` is not 2-D, has fewer than ``min_examples``
    rows, a different number of columns than ``dim``, or any NaN/inf.
    """
    if is_traced(x):
        return x
    try:
        arr = np.asarray(x)
    except Exception as err:  # pragma: no cover - exotic input
        raise TypeError(f"{name} must be an array of numbers; got {type(x).__name__}") from err
    if arr.dtype == object or np.issubdtype(arr.dtype, np.complexfloating) or not (
            np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{name} must be a real numeric array; got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D with shape (num_examples, dim); got shape {arr.shape}"
        )
    if arr.shape[0] < min_examples:
        raise ValueError(
            f"{name} must have at least {min_examples} example(s) (rows); got shape {arr.shape}"
        )
    if arr.shape[1] < 1:
        raise ValueError(
            f"{name} must have at least one dimension (column); got shape {arr.shape}")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(
            f"{name} must have {dim} columns to match the features; got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise ValueError(
            f"{name} contains {bad} NaN or infinite value(s); all entries must be finite")
    if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating):
        return x  # already on the device: no second copy
    # float64 data stays float64 only where JAX has 64-bit floats enabled
    # (canonicalize_dtype), so that numpy's default dtype raises no warning.
    dtype = (jax.dtypes.canonicalize_dtype(arr.dtype) if np.issubdtype(arr.dtype, np.floating)
             else jnp.result_type(float))
    return jnp.asarray(arr, dtype=dtype)


def check_features(features, name: str = "features"):
    """Return the feature matrix F (num_features, dim) as a float array after checking it."""
    return check_data(features, name)


def check_positive_int(value, name: str, *, maximum: int | None = None, why: str = "") -> int:
    """Return ``value`` as an int >= 1, or raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an integer; got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{name} must be at least 1; got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}{why}; got {value}")
    return int(value)


def _check_values(value, name: str, valid, expected: str):
    """Raise ``ValueError`` unless ``valid(array)`` holds everywhere (concrete input only)."""
    if is_traced(value):
        return value
    arr = np.asarray(value, dtype=float)
    with np.errstate(invalid="ignore"):
        ok = np.all(valid(arr))
    if not ok:
        raise ValueError(f"{name} must be {expected}; got {value!r}")
    return value


def check_finite(value, name: str):
    """Check that a concrete scalar or array is finite; return it."""
    return _check_values(value, name, np.isfinite, "finite")


def check_probability(value, name: str):
    """Check that a concrete scalar or array lies in [0, 1]; return it."""
    return _check_values(value, name, lambda a: (a >= 0) & (a <= 1), "in [0, 1]")


def check_fraction(value, name: str) -> float:
    """Check that ``value`` is one number strictly between 0 and 1; return it as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise TypeError(f"{name} must be a number in (0, 1); got {value!r}")
    if not 0.0 < float(value) < 1.0:
        raise ValueError(f"{name} must lie strictly between 0 and 1; got {value!r}")
    return float(value)


def check_tolerance(value, name: str = "tol") -> float:
    """Check that ``value`` is one positive, finite number (a tolerance); return it as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise TypeError(f"{name} must be a positive number; got {value!r}")
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be positive and finite; got {value!r}")
    return float(value)


def check_positive(value, name: str):
    """Check that a concrete scalar or array is positive and finite; return it."""
    return _check_values(value, name, lambda a: np.isfinite(a) & (a > 0),
                         "positive and finite")


def check_choice(value, name: str, choices):
    """Return ``value`` when it is one of ``choices`` (strings), else raise naming ``name``.

    A non-string raises ``TypeError``, an unknown string ``ValueError``; both list
    the valid choices.
    """
    valid = tuple(choices)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {valid} (a string); got {value!r} "
                        f"({type(value).__name__})")
    if value not in valid:
        raise ValueError(f"{name} must be one of {valid}; got {value!r}")
    return value


def check_rng_key(value, name: str = "rng_key"):
    """Return ``value`` when it is a JAX random key, else raise ``TypeError`` naming ``name``.

    Accepts typed keys (``jax.random.key``, scalar) and raw uint32 keys of shape
    (2,) (``jax.random.PRNGKey``). ``None``, ints, floats and batches of keys
    raise: ``fit_*`` functions take one key and split it themselves.
    """
    if is_traced(value):
        return value
    expected = "a single jax.random key (e.g. jax.random.key(0))"
    if value is None:
        raise MissingKeyError(f"{name} must be {expected}; got None")
    if isinstance(value, bool | int | float | str):
        raise TypeError(f"{name} must be {expected}; got {value!r}")
    dtype = getattr(value, "dtype", None)
    shape = getattr(value, "shape", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        if shape != ():
            raise TypeError(f"{name} must be {expected}; got a batch of keys of shape {shape}")
        return value
    if dtype is not None and dtype == np.uint32 and shape == (2,):
        return value
    raise TypeError(f"{name} must be {expected}; got {type(value).__name__}"
                    + (f" of dtype {dtype} and shape {shape}" if dtype is not None else ""))


def check_bool(value, name: str) -> bool:
    """Return ``value`` when it is a bool (Python or NumPy), else raise ``TypeError``."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be True or False; got {value!r} ({type(value).__name__})")
    return bool(value)


def check_nonnegative(value, name: str) -> float:
    """Check that ``value`` is one finite number >= 0 (a tolerance that may be 0); return it."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise TypeError(f"{name} must be a non-negative number; got {value!r} "
                        f"({type(value).__name__})")
    if not (np.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a non-negative finite number; got {value!r}")
    return float(value)
