"""The result of the MCVQ fits (:func:`inference.mcvq.em.fit_mcvq`, streamed or in memory)."""

from __future__ import annotations

from typing import NamedTuple

import jax

from inference.engine.protocol import follows_protocol

__all__ = ["MCVQResult", "MCVQTrace"]


class MCVQTrace(NamedTuple):
    """Per-iteration record of an MCVQ fit, cut at ``num_iterations``: F_T (``objective``)
    and the temperature of every iteration."""

    objective: jax.Array
    temperature: jax.Array


@follows_protocol("free_energy", "min")
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
    trace : MCVQTrace
        Per iteration: ``objective``, F_T after each iteration at that iteration's
        temperature (module docstring of :mod:`inference.mcvq.core`), non-increasing
        where the temperature stays the same, and ``temperature``.
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
    trace: MCVQTrace
    num_iterations: int
    converged: bool
    variance_floor: float
    restart_free_energies: jax.Array | None = None
    best_restart: int = 0
    restart_converged: jax.Array | None = None


def _from_old_fields(fields: dict) -> dict:
    """A file saved before the rename: the two trace arrays become one :class:`MCVQTrace`."""
    fields = dict(fields)
    objective = fields.pop("free_energy_trace", None)
    temperature = fields.pop("temperature_trace", None)
    if objective is not None and "trace" not in fields:
        fields["trace"] = MCVQTrace(objective, temperature)
    return fields


def register_renames() -> None:
    """Let MCVQ results saved with ``free_energy_trace`` / ``temperature_trace`` load
    (:func:`inference.engine.persistence.register_renamed_fields`)."""
    from inference.engine.persistence import register_renamed_fields

    register_renamed_fields(MCVQResult, {"free_energy_trace": "free_energy_trace",
                                         "temperature_trace": "temperature_trace"},
                            convert=_from_old_fields)


register_renames()
