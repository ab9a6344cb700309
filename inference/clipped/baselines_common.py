"""What the SVI and NUTS baselines of the clipped-Gaussian program share: the argument
checks, the initial W and the program's keyword arguments."""

from __future__ import annotations

import math

import jax
import numpy as np

from ppl_models import clipped_gaussian
from ppl_models.validation import (
    MissingKeyError,
    check_data,
    check_positive,
    check_positive_int,
    check_rng_key,
)

__all__ = ["check_arguments", "initial_weights", "program_kwargs"]


def check_arguments(s, num_hidden, rng_key, noise, bias, caller):
    """The checked ``(spins, num_hidden, noise, bias)`` of a baseline (``caller`` names it)."""
    if rng_key is None:
        raise MissingKeyError(f"{caller} needs an explicit rng_key (e.g. jax.random.key(0))")
    check_rng_key(rng_key)
    spins = clipped_gaussian.to_spins(s, "s")
    num_units = spins.shape[1]
    num_hidden = check_positive_int(num_hidden, "num_hidden", maximum=num_units,
                                    why=f" (the number of units N = {num_units} in s)")
    if not isinstance(noise, int | float | np.floating) or isinstance(noise, bool):
        raise TypeError(f"noise must be a positive float; got {noise!r}")
    check_positive(noise, "noise")
    if not isinstance(bias, bool | np.bool_):
        raise TypeError(f"bias must be True or False; got {bias!r}")
    return spins, num_hidden, float(noise), bool(bias)


def initial_weights(rng_key, init_weights, num_units, num_hidden):
    """``init_weights`` checked, or a draw of W from its prior Normal(0, 1/sqrt(P))."""
    if init_weights is None:
        return jax.random.normal(rng_key, (num_units, num_hidden)) / math.sqrt(num_hidden)
    init_weights = check_data(init_weights, "init_weights", dim=num_hidden)
    if init_weights.shape[0] != num_units:
        raise ValueError(f"init_weights must have shape (N, P) = ({num_units}, {num_hidden}); "
                         f"got {init_weights.shape}")
    return init_weights


def program_kwargs(bias):
    """Keyword arguments of the program beyond noise and P: ``bias=0.0`` fixes xi at 0."""
    return {} if bias else {"bias": 0.0}
