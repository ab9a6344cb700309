"""The result of the MCVQ fits (:func:`inference.mcvq.em.fit_mcvq`, streamed or in memory)."""

from __future__ import annotations

from typing import NamedTuple

import jax

__all__ = ["MCVQResult"]


class MCVQResult(NamedTuple):
    """Result of :func:`fit_mcvq`.

    Attributes
    ----------
    g : array (D, K)
        Q(r_d = k): which VQ explains each dimension.
    m : array (N, K, J)
        Q(s^c_k = j) of every training example, matched to the final parameters.
    mu, sigma : arrays (D, K, J)
    a : array (D, K)
    b : array (K, J)
        The selection priors used (fixed, not learnt; uniform unless given).
    free_energy_trace : array (num_iterations,)
        F_T after each iteration at that iteration's temperature (module docstring);
        non-increasing where the temperature stays the same.
    temperature_trace : array (num_iterations,)
    num_iterations : int
    converged : bool
        The relative change of F_T fell to ``tol`` at a constant temperature.
    variance_floor : float
        The absolute floor on sigma^2 that was used.
    restart_free_energies : array (num_restarts,)
        Final F_T of every start, all at the last temperature of the schedule
        (the result is the start with the lowest); one entry without restarts.
    best_restart : int
        Index of the kept start (0 without restarts).
    restart_converged : bool array (num_restarts,)
        The ``converged`` flag of every start.
    """

    g: jax.Array
    m: jax.Array
    mu: jax.Array
    sigma: jax.Array
    a: jax.Array
    b: jax.Array
    free_energy_trace: jax.Array
    temperature_trace: jax.Array
    num_iterations: int
    converged: bool
    variance_floor: float
    restart_free_energies: jax.Array | None = None
    best_restart: int = 0
    restart_converged: jax.Array | None = None
