"""Pieces shared by the sweeping association methods (BP, BR, MF, Gibbs).

Noise schedules (App. A and C of M. Westerdijk, D. Barber and W. Wiegerinck,
"Deterministic generative models for fast feature discovery", Data Mining and
Knowledge Discovery 5(4), 2001), random sequential visiting orders, and the
bookkeeping of the lowest-energy state visited.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ppl_models.validation import check_positive, check_positive_int

__all__ = ["geometric_schedule", "halving_schedule", "random_orders", "ORDERS", "check_order",
           "Best", "keep_best", "check_schedule_options"]


def geometric_schedule(start_sigma: float, end_sigma: float, num_sweeps: int):
    """Sigmas from ``start_sigma`` to ``end_sigma``, geometrically, one per sweep.

    App. C: sigma <- sigma / alpha with alpha such that the last sweep has
    ``end_sigma``.
    """
    if num_sweeps == 1:
        return jnp.asarray([end_sigma], jnp.float32)
    return jnp.geomspace(start_sigma, end_sigma, num_sweeps).astype(jnp.float32)


def halving_schedule(start_sigma: float, end_sigma: float):
    """App. A: sigma^2 halves after every sweep, from ``start_sigma`` until ``end_sigma``."""
    num = max(1, math.ceil(2 * math.log2(start_sigma / end_sigma)) + 1)
    sigmas = start_sigma * (0.5 ** (0.5 * jnp.arange(num)))
    return jnp.maximum(sigmas, end_sigma).astype(jnp.float32)


def check_schedule_options(start_sigma, end_sigma, num_sweeps=None):
    """Validate a noise schedule: positive sigmas, start >= end, sweeps >= 1."""
    check_positive(start_sigma, "start_sigma")
    check_positive(end_sigma, "end_sigma")
    if float(start_sigma) < float(end_sigma):
        raise ValueError(f"start_sigma must be >= end_sigma; got {start_sigma} < {end_sigma}")
    if num_sweeps is not None:
        check_positive_int(num_sweeps, "num_sweeps")


#: Visiting orders of the sequential sweeps (option ``order`` of bp, br, mf, gibbs, br+mf).
ORDERS = ("shared", "per_example")


def random_orders(rng_key, num_examples: int, num_features: int, order: str = "shared"):
    """Random visiting orders of the units for one sweep, and their ``vmap`` axis.

    ``order="shared"`` (the default) draws one permutation (num_features,) that
    every example uses in this sweep (axis ``None``): each example still sees a
    fresh uniformly random order per sweep, so its own result has the same
    distribution as with independent orders, and the batched update of unit i is
    one contiguous row operation for all examples. ``order="per_example"`` draws
    an independent permutation per example, shape (num_examples, num_features)
    (axis 0), so that results of different examples are independent; each visit
    then gathers and scatters a different unit per example, 10-20x slower on CPU
    (``benchmarks/association.py --profile all``).
    """
    if order == "shared":
        return jax.random.permutation(rng_key, num_features), None
    keys = jax.random.split(rng_key, num_examples)
    return jax.vmap(lambda k: jax.random.permutation(k, num_features))(keys), 0


def check_order(order):
    """Validate the ``order`` option of the sweeping methods."""
    if not isinstance(order, str) or order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}; got {order!r}")


class Best(NamedTuple):
    """Lowest-energy state visited so far, per example."""

    states: jax.Array  # (num_examples, num_features) int32
    energy: jax.Array  # (num_examples,)


def keep_best(best: Best | None, states, energy) -> Best:
    """Update ``best`` with ``states`` where their ``energy`` is lower."""
    states = states.astype(jnp.int32)
    if best is None:
        return Best(states, energy)
    better = energy < best.energy
    return Best(jnp.where(better[:, None], states, best.states),
                jnp.where(better, energy, best.energy))
