"""Searches over a program's binary states that evaluate the program itself, for any
energy (not only a quadratic one): the exhaustive search of :func:`inference.map_states`
with ``method="exact"`` on a non-quadratic program, and its single-site annealed Gibbs
sampler with ``method="gibbs"``.

``energy(states)`` is a pure function of the flattened states (num_examples, n) that
returns one energy per example (:func:`inference.association.program_sites.program_energy`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from inference.association.annealing import END_SIGMA, NUM_SWEEPS, START_SIGMA
from inference.association.sweeps import geometric_schedule, keep_best

__all__ = ["brute_force", "generic_gibbs", "BRUTE_BLOCK"]

#: Elements of the (candidate states x examples) block of the brute-force search.
BRUTE_BLOCK = 1 << 18


def brute_force(energy, num_examples, n, dtype, chunk_size=None):
    """Every example's best of the 2^n joint states, the program evaluated at each."""
    total = 1 << n
    chunk = chunk_size or max(1, BRUTE_BLOCK // max(num_examples, 1))
    chunk = min(total, 1 << (int(chunk).bit_length() - 1))
    bits = jnp.arange(n, dtype=jnp.int32)

    def body(carry, k):
        best_energy, best_index = carry
        index = k * chunk + jnp.arange(chunk, dtype=jnp.int32)
        candidates = ((index[:, None] >> bits) & 1).astype(dtype)  # (chunk, n)
        energies = jax.vmap(lambda c: energy(jnp.broadcast_to(c, (num_examples, n))))(
            candidates)  # (chunk, examples)
        energies = jnp.where(jnp.isnan(energies), jnp.inf, energies)
        lowest = jnp.min(energies, axis=0)
        first = jnp.argmin(energies, axis=0).astype(jnp.int32)
        better = lowest < best_energy
        return (jnp.where(better, lowest, best_energy),
                jnp.where(better, k * chunk + first, best_index)), None

    init = (jnp.full(num_examples, jnp.inf, dtype), jnp.zeros(num_examples, jnp.int32))
    (_, best_index), _ = jax.lax.scan(body, init, jnp.arange(total // chunk, dtype=jnp.int32))
    return (best_index[:, None] >> bits) & 1


def generic_gibbs(energy, rng_key, num_examples, n, dtype, *, start_sigma=START_SIGMA,
                   end_sigma=END_SIGMA, num_sweeps=NUM_SWEEPS, order="shared"):
    """Annealed single-site Gibbs sampling on any energy: unit i of every example is
    drawn from p(s_i = 1 | rest) = sigmoid(-(E(s_i=1) - E(s_i=0)) / (2 sigma^2)), the
    program evaluated with the unit off and on; sigma falls geometrically and the
    lowest-energy state visited is kept."""
    del order  # one random order per sweep, shared by the examples
    sigmas = geometric_schedule(start_sigma, end_sigma, num_sweeps).astype(dtype)
    key_init, key_run = jax.random.split(rng_key)
    states = jax.random.bernoulli(key_init, 0.5, (num_examples, n)).astype(dtype)
    best = keep_best(None, states.astype(jnp.int32), energy(states))

    def sweep(carry, inputs):
        states, best = carry
        sigma, key = inputs
        key_order, key_uniform = jax.random.split(key)
        order = jax.random.permutation(key_order, n)
        uniforms = jax.random.uniform(key_uniform, (n, num_examples), dtype)

        def visit(k, states):
            i = order[k]
            off = energy(states.at[:, i].set(0.0))
            on = energy(states.at[:, i].set(1.0))
            p_on = jax.nn.sigmoid(-(on - off) / (2.0 * jnp.square(sigma)))
            return states.at[:, i].set((uniforms[k] < p_on).astype(dtype))

        new = jax.lax.fori_loop(0, n, visit, states)
        current = energy(new)
        changed = jnp.any(new != states, axis=1)
        return (new, keep_best(best, new.astype(jnp.int32), current)), (jnp.mean(current),
                                                                         changed)

    keys = jax.random.split(key_run, sigmas.shape[0])
    (_, best), (trace, changed) = jax.lax.scan(sweep, (states, best), (sigmas, keys))
    return best.states, energy(best.states.astype(dtype)), ~changed[-1], trace

