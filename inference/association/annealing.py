"""Annealed mean-field and Gibbs association for GVQ.

The methods of sec. 4.1.3 and App. C of M. Westerdijk, D. Barber and W. Wiegerinck,
"Deterministic generative models for fast feature discovery", Data Mining and
Knowledge Discovery 5(4), 2001. Both work on the annealed distribution
p_sigma(s | x) ∝ exp(-E_sigma(s) / (2 sigma^2)) whose energy E_sigma is read from
the program under ``observation_noise(sigma=sigma)`` at every sweep
(``AssociationProblem.tempered``), while sigma falls geometrically from
``start_sigma`` (paper: 100) to ``end_sigma`` (paper: 1e-4). Units are visited in a
fresh random order every sweep, one order shared by all examples of the batch
unless ``order="per_example"`` (see ``inference.association.sweeps.random_orders``).

* ``"mf"``: mean-field fixed-point updates (eq. 28, its signs written for the
  energy E_x(s) = sum_i h_i s_i + sum_{i<j} w_ij s_i s_j that association minimises)
  mu_i <- sigmoid(-(h_i + sum_{l != i} w_il mu_l) / (2 sigma^2)),
  starting from mu_i = 1/2 + small noise; the state is mu thresholded at 1/2.
  As sigma -> 0 this is the threshold rule of eq. 29.
* ``"gibbs"``: samples s_i from p(s_i = 1 | s_-i) = sigmoid(-Delta_i / (2 sigma^2)),
  Delta_i the energy change of switching unit i on. Delta_i is computed from
  the residual r = x - s @ F, kept up to date with one O(dim) update per flip:
  Delta_i = ||f_i||^2 - 2 f_i . (r + s_i f_i) + b_i, where b_i is whatever the
  program adds to the Gaussian term (a prior on s; zero for plain GVQ), read
  from the program's linear coefficients.

Both keep the lowest-energy state visited (the target energy: the sigma -> 0
limit unless ``associate(noise=...)``). ``converged`` means the final sweep
changed no state.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from inference.association.base import (
    METHODS,
    AssociationMethod,
    AssociationProblem,
    AssociationResult,
    check_options,
)
from inference.association.sweeps import (
    Best,
    check_order,
    check_schedule_options,
    geometric_schedule,
    keep_best,
    random_orders,
)

__all__ = ["MFState", "GibbsState", "SweepInfo", "mf_init", "mf_step", "run_mf",
           "gibbs_init", "gibbs_step", "run_gibbs"]

#: App. C: sigma is annealed from 100 down to 1e-4.
START_SIGMA, END_SIGMA = 100.0, 1e-4
#: Sweeps of the schedule (the paper does not give a number; 60 keeps the ratio
#: between successive sigmas at about 1.27).
NUM_SWEEPS = 60


class MFState(NamedTuple):
    """Mean-field state: ``mu`` and the best state visited.

    ``mu`` is stored units-major, shape (n, num_examples): a sequential sweep
    updates one unit for every example at a time, and in this layout that unit's
    parameters are one contiguous row (several times faster than (num_examples, n)
    on CPU, ``benchmarks/association.py --profile``).
    """

    mu: jax.Array
    best: Best


class GibbsState(NamedTuple):
    """Gibbs state: ``states`` (num_examples, n) int32, ``residual`` x - s @ F, best visited."""

    states: jax.Array
    residual: jax.Array
    best: Best


class SweepInfo(NamedTuple):
    """Per-sweep information: mean ``energy`` of the current states, and per example
    whether its state ``changed`` (num_examples,) in the sweep."""

    energy: jax.Array
    changed: jax.Array


def _field_scale(sigma):
    return 1.0 / (2.0 * jnp.square(sigma))


def mf_init(rng_key, problem: AssociationProblem) -> MFState:
    """mu = 1/2 + uniform noise in (-0.01, 0.01) (App. C)."""
    shape = problem.energy.linear.shape[::-1]
    mu = 0.5 + 0.01 * jax.random.uniform(rng_key, shape, minval=-1.0, maxval=1.0)
    states = (mu.T > 0.5).astype(jnp.int32)
    return MFState(mu, keep_best(None, states, problem.energy(states)))


def mf_step(rng_key, state: MFState, problem: AssociationProblem, sigma, order="shared"):
    """One sequential mean-field sweep at noise ``sigma``; returns (state, SweepInfo)."""
    energy = problem.tempered(sigma)
    W = energy.couplings
    beta = _field_scale(sigma)
    n, num_examples = state.mu.shape
    orders, axis = random_orders(rng_key, num_examples, n, order)

    def sweep(mu, h, order):  # mu, h: (n, examples) or, under vmap, (n,)
        def visit(k, mu):
            i = order[k]
            return mu.at[i].set(jax.nn.sigmoid(-beta * (h[i] + W[i] @ mu)))

        return jax.lax.fori_loop(0, n, visit, mu)

    h = energy.linear.T
    if axis is None:
        mu = sweep(state.mu, h, orders)
    else:
        # One order per example: vmap over examples-major copies (a vmap over axis 1
        # would move the data inside every visit).
        mu = jax.vmap(sweep)(state.mu.T, energy.linear, orders).T
    old = (state.mu > 0.5).T
    states = (mu > 0.5).T
    current = problem.energy(states)
    changed = jnp.any(states != old, axis=1)
    states = states.astype(jnp.int32)
    return MFState(mu, keep_best(state.best, states, current)), SweepInfo(jnp.mean(current),
                                                                           changed)


def _run_schedule(init_state, step, problem, rng_key, sigmas, order):
    def body(state, inputs):
        key, sigma = inputs
        state, info = step(key, state, problem, sigma, order)
        return state, (info.energy, info.changed)

    keys = jax.random.split(rng_key, sigmas.shape[0])
    state, (trace, changed) = jax.lax.scan(body, init_state, (keys, sigmas))
    return state, trace, ~changed[-1]


def run_mf(problem: AssociationProblem, *, rng_key, start_sigma=START_SIGMA,
           end_sigma=END_SIGMA, num_sweeps=NUM_SWEEPS, order="shared") -> AssociationResult:
    """Annealed mean-field association (see the module docstring)."""
    key_init, key_run = jax.random.split(rng_key)
    sigmas = geometric_schedule(start_sigma, end_sigma, num_sweeps)
    state, trace, converged = _run_schedule(mf_init(key_init, problem), mf_step, problem,
                                            key_run, sigmas, order)
    best = state.best
    return AssociationResult(best.states, problem.exact_energy(best.states), converged, trace)


def _gaussian_linear(problem: AssociationProblem):
    """Linear coefficients of ||x - s F||^2: -2 x . f_i + ||f_i||^2, shape (N, n)."""
    F = problem.features
    return -2.0 * problem.x @ F.T + jnp.sum(F * F, axis=1)


def gibbs_init(rng_key, problem: AssociationProblem) -> GibbsState:
    """Uniformly random initial states and their residuals."""
    states = jax.random.bernoulli(rng_key, 0.5, problem.energy.linear.shape).astype(jnp.int32)
    residual = problem.x - states.astype(problem.x.dtype) @ problem.features
    return GibbsState(states, residual, keep_best(None, states, problem.energy(states)))


def gibbs_step(rng_key, state: GibbsState, problem: AssociationProblem, sigma,
               order="shared"):
    """One sequential Gibbs sweep at noise ``sigma``; returns (state, SweepInfo)."""
    F = problem.features
    norms = jnp.sum(F * F, axis=1)
    # Whatever the program adds to the Gaussian term (a prior on s), in energy units.
    bias = problem.tempered(sigma).linear - _gaussian_linear(problem)
    beta = _field_scale(sigma)
    num_examples, n = state.states.shape
    key_order, key_uniform = jax.random.split(rng_key)
    orders, axis = random_orders(key_order, num_examples, n, order)
    uniforms = jax.random.uniform(key_uniform, (num_examples, n))

    def sweep_one(s, r, b, order, u):
        def visit(k, carry):
            s, r = carry
            i = order[k]
            f = F[i]
            without_i = r + s[i] * f  # residual with unit i off: O(dim)
            delta = norms[i] - 2.0 * f @ without_i + b[i]
            new = (u[k] < jax.nn.sigmoid(-beta * delta)).astype(s.dtype)
            return s.at[i].set(new), without_i - new * f

        return jax.lax.fori_loop(0, n, visit, (s, r))

    states, residual = jax.vmap(sweep_one, (0, 0, 0, axis, 0))(
        state.states, state.residual, bias, orders, uniforms)
    current = problem.energy(states)
    changed = jnp.any(states != state.states, axis=1)
    new_state = GibbsState(states, residual, keep_best(state.best, states, current))
    return new_state, SweepInfo(jnp.mean(current), changed)


def run_gibbs(problem: AssociationProblem, *, rng_key, start_sigma=START_SIGMA,
              end_sigma=END_SIGMA, num_sweeps=NUM_SWEEPS, order="shared") -> AssociationResult:
    """Annealed Gibbs sampling association (see the module docstring)."""
    key_init, key_run = jax.random.split(rng_key)
    sigmas = geometric_schedule(start_sigma, end_sigma, num_sweeps)
    state, trace, converged = _run_schedule(gibbs_init(key_init, problem), gibbs_step,
                                            problem, key_run, sigmas, order)
    best = state.best
    return AssociationResult(best.states, problem.exact_energy(best.states), converged, trace)


def validate_annealed(features, options):
    """Options of "mf" and "gibbs": start_sigma, end_sigma, num_sweeps, order."""
    check_options(options, start_sigma=(int, float), end_sigma=(int, float), num_sweeps=int,
                  order=str)
    check_order(options.get("order", "shared"))
    check_schedule_options(options.get("start_sigma", START_SIGMA),
                           options.get("end_sigma", END_SIGMA),
                           options.get("num_sweeps", NUM_SWEEPS))


METHODS["mf"] = AssociationMethod(run_mf, validate_annealed, randomized=True)
METHODS["gibbs"] = AssociationMethod(run_gibbs, validate_annealed, randomized=True)
