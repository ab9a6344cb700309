"""Annealed directed belief propagation (DBP) on the directed graph s -> x of GVQ.

Sec. 4.2 and App. D of M. Westerdijk, D. Barber and W. Wiegerinck, "Deterministic
generative models for fast feature discovery", Data Mining and Knowledge Discovery
5(4), 2001. The messages, the annealing of sigma and the Gauss-Hermite integrals
are described in :mod:`inference.association.directed`, which also holds belief
revision (DBR) and the helpers both use.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference.association.base import (
    METHODS,
    AssociationMethod,
    AssociationProblem,
    AssociationResult,
    check_options,
)
from inference.association.directed import prior_offset
from ppl_models.validation import check_positive, check_positive_int

__all__ = ["DBPInfo", "DBPState", "dbp_init", "dbp_step", "run_dbp", "validate_dbp"]

#: App. D: sigma <- sigma / alpha after every iteration, "in our experiments we use alpha = 2".
DBP_ALPHA = 2.0
#: Half the mean feature weight of sec. 4.3.1 (F ~ N(2, 1)); see the module docstring.
DBP_START_SIGMA = 1.0
#: 12 halvings from sigma = 1 end near 5e-4, the order of App. A's final sigma (1e-4).
DBP_NUM_ITERATIONS = 12
#: Gauss-Hermite nodes; the module docstring's table shows where they stop being enough.
DBP_NUM_NODES = 64
#: A rho message that moves by less than this probability in the last iteration has settled.
DBP_TOL = 1e-3


# ----------------------------------------------------------------------------- DBP


class DBPState(NamedTuple):
    """State of annealed directed belief propagation.

    Attributes
    ----------
    messages : array (num_examples, n, d)
        log rho_{j->a}(1) - log rho_{j->a}(0) (normalised: rho(0) + rho(1) = 1);
        entries off the edges (F[j, a] = 0) are unused.
    prior : array (num_examples, n)
        log pi_j(1) - log pi_j(0), the program's prior (0 for p = 1/2).
    beliefs : array (num_examples, n)
        Log-odds of the belief pi(s_j) prod_a lambda_{a->j}(s_j) (eq. 33).
    states : int32 array (num_examples, n)
        s_j = [beliefs_j > 0].
    best_states : int32 array (num_examples, n)
        Lowest-energy states visited.
    best_energy : array (num_examples,)
        Their energies (quadratic form).
    sigma : scalar array
        The noise of the next iteration.
    converged : bool array (num_examples,)
        In the last iteration no lambda was clamped and no rho moved by more
        than ``tol``.
    """

    messages: jax.Array
    prior: jax.Array
    beliefs: jax.Array
    states: jax.Array
    best_states: jax.Array
    best_energy: jax.Array
    sigma: jax.Array
    converged: jax.Array


class DBPInfo(NamedTuple):
    """Per iteration.

    Attributes
    ----------
    energy : array (num_examples,)
        Energy of the current states.
    change : array (num_examples,)
        Largest change of a rho(1) message (a probability).
    clamped : int32 array (num_examples,)
        lambda entries (two per edge) whose quadrature came out <= 0 and were clamped.
    clamped_fraction : array (num_examples,)
        ``clamped`` over the number of entries, 2 x (number of edges).
    sigma : scalar array
        The noise this iteration ran at.
    """

    energy: jax.Array
    change: jax.Array
    clamped: jax.Array
    clamped_fraction: jax.Array
    sigma: jax.Array


def dbp_init(problem: AssociationProblem, *, start_sigma=DBP_START_SIGMA) -> DBPState:
    """rho = the prior pi, states from the prior, sigma = ``start_sigma``.

    The prior is read from the program at noise 1 (``problem.tempered(1.0)``):
    -2 log p(x, s) there is ||x - s @ F||^2 - 2 log p(s) + const.
    """
    features, x = problem.features, problem.x
    dim = features.shape[1]
    prior = -0.5 * prior_offset(problem.tempered(1.0).linear, x, features)
    states = (prior > 0).astype(jnp.int32)
    energy = problem.energy(states)
    return DBPState(
        messages=jnp.repeat(prior[:, :, None], dim, axis=2), prior=prior, beliefs=prior,
        states=states, best_states=states, best_energy=energy,
        sigma=jnp.asarray(start_sigma, x.dtype), converged=jnp.zeros(x.shape[0], bool))


def _exclusive_product(factors, axis):
    """prod over ``axis`` of all the other entries, without division (prefix x suffix)."""
    ones = jnp.ones_like(jax.lax.slice_in_dim(factors, 0, 1, axis=axis))
    before = jnp.cumprod(jnp.concatenate(
        [ones, jax.lax.slice_in_dim(factors, 0, -1, axis=axis)], axis=axis), axis=axis)
    flipped = jnp.flip(factors, axis=axis)
    after = jnp.cumprod(jnp.concatenate(
        [ones, jax.lax.slice_in_dim(flipped, 0, -1, axis=axis)], axis=axis), axis=axis)
    return before * jnp.flip(after, axis=axis)


def dbp_step(state: DBPState, problem: AssociationProblem, *, num_nodes=DBP_NUM_NODES,
             tol=DBP_TOL):
    """One DBP iteration at ``state.sigma``: lambda (eq. 35), rho (eq. 32), states, sigma / 2.

    Returns
    -------
    (DBPState, DBPInfo)
    """
    features, x = problem.features, problem.x
    dtype = x.dtype
    sigma = state.sigma
    nodes, weights = np.polynomial.hermite.hermgauss(num_nodes)
    nodes = jnp.asarray(nodes, dtype)
    weights = jnp.asarray(weights / math.sqrt(math.pi), dtype)
    t = math.sqrt(2.0) * nodes / sigma  # (Q,)
    edges = features != 0  # (n, d)
    num_entries = jnp.maximum(2 * jnp.sum(edges), 1)
    # e^{-i t y F[k, a]}: the factor of s_k = 1 in the product, and of s_j = 1 in front.
    phase = jax.lax.complex(jnp.cos(t[:, None, None] * features),
                            -jnp.sin(t[:, None, None] * features))  # (Q, n, d)
    tiny = jnp.finfo(dtype).tiny

    def update_one(x_row, prior, messages):
        one = jax.nn.sigmoid(messages)
        zero = jax.nn.sigmoid(-messages)
        others = _exclusive_product(zero + one * phase, axis=1)  # (Q, n, d)
        front = weights[:, None] * jax.lax.complex(jnp.cos(t[:, None] * x_row),
                                                   jnp.sin(t[:, None] * x_row))  # (Q, d)
        integrand = front[:, None, :] * others
        lam0 = jnp.real(jnp.sum(integrand, axis=0))  # (n, d)
        lam1 = jnp.real(jnp.sum(integrand * phase, axis=0))
        clamped = jnp.sum(edges & (lam0 <= 0)) + jnp.sum(edges & (lam1 <= 0))
        ratio = jnp.log(jnp.maximum(lam1, tiny)) - jnp.log(jnp.maximum(lam0, tiny))
        ratio = jnp.where(edges, ratio, 0.0)
        beliefs = prior + jnp.sum(ratio, axis=1)
        return beliefs[:, None] - ratio, beliefs, clamped.astype(jnp.int32)

    messages, beliefs, clamped = jax.vmap(update_one)(x, state.prior, state.messages)
    states = (beliefs > 0).astype(jnp.int32)
    energy = problem.energy(states)
    better = energy < state.best_energy
    moved = jnp.abs(jax.nn.sigmoid(messages) - jax.nn.sigmoid(state.messages))
    change = jnp.max(jnp.where(edges, moved, 0.0), axis=(1, 2))
    new_state = DBPState(
        messages=messages, prior=state.prior, beliefs=beliefs, states=states,
        best_states=jnp.where(better[:, None], states, state.best_states),
        best_energy=jnp.where(better, energy, state.best_energy),
        sigma=sigma / DBP_ALPHA, converged=(clamped == 0) & (change <= tol))
    info = DBPInfo(energy, change, clamped, clamped / num_entries, sigma)
    return new_state, info


def run_dbp(problem: AssociationProblem, *, rng_key=None, start_sigma=DBP_START_SIGMA,
            num_iterations=DBP_NUM_ITERATIONS, num_nodes=DBP_NUM_NODES,
            tol=DBP_TOL) -> AssociationResult:
    """Annealed directed belief propagation (module docstring), jittable.

    Parameters
    ----------
    problem : AssociationProblem
    rng_key : ignored
        DBP is deterministic.
    start_sigma : float
        Noise of the first iteration (default 1.0); sigma halves after each.
    num_iterations : int
        Iterations (default 12); the last runs at start_sigma / 2^(num_iterations - 1).
    num_nodes : int
        Gauss-Hermite nodes Q (default 64); see the module docstring for the
        sigma below which they stop being enough.
    tol : float
        Largest change of a rho probability in the last iteration for ``converged``.

    Returns
    -------
    AssociationResult
        ``trace`` (num_iterations,): mean energy of the current states after each.
    """
    del rng_key

    def body(state, _):
        state, info = dbp_step(state, problem, num_nodes=num_nodes, tol=tol)
        return state, jnp.mean(info.energy)

    state, trace = jax.lax.scan(body, dbp_init(problem, start_sigma=start_sigma), None,
                                length=num_iterations)
    best = state.best_states
    return AssociationResult(best, problem.exact_energy(best), state.converged, trace)


def validate_dbp(features, options):
    """Check the options of ``"dbp"`` (names, types, positive values) before ``jit``."""
    check_options(options, start_sigma=(int, float), num_iterations=int, num_nodes=int,
                  tol=(int, float))
    check_positive(options.get("start_sigma", DBP_START_SIGMA), "start_sigma")
    check_positive_int(options.get("num_iterations", DBP_NUM_ITERATIONS), "num_iterations")
    check_positive_int(options.get("num_nodes", DBP_NUM_NODES), "num_nodes")
    check_positive(options.get("tol", DBP_TOL), "tol")


METHODS["dbp"] = AssociationMethod(run=run_dbp, validate=validate_dbp, randomized=False)
