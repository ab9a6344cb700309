"""The result of variational Bayes MCVQ (:func:`inference.mcvq.vb.fit_vb_mcvq`)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from inference.engine.persistence import register_renamed_fields
from inference.engine.protocol import follows_protocol
from ppl_models.mcvq import MCVQPrior

__all__ = ["VBMCVQResult", "VBMCVQTrace"]


class VBMCVQTrace(NamedTuple):
    """Per-iteration arrays of :func:`~inference.mcvq.vb.fit_vb_mcvq`, cut at
    ``num_iterations``: L_T (``objective``), the temperature, the active VQs and the
    active states of every starting slot."""

    objective: jax.Array
    temperature: jax.Array
    num_vqs: jax.Array
    num_states: jax.Array


@follows_protocol("evidence_lower_bound", "max", objective="bound")
class VBMCVQResult(NamedTuple):
    """Result of :func:`fit_vb_mcvq`: the surviving VQs only (k of them).

    States are kept in their J = ``max_states`` slots; removed ones have zero
    weight (``state_active`` False, pi and m 0) and Q equal to the prior.

    Attributes
    ----------
    num_vqs : int
        Surviving VQs k.
    num_states : tuple of int (k,)
        Surviving states of every surviving VQ.
    vq_index : int array (k,)
        Starting slots of the survivors.
    state_active : bool array (k, J)
    alpha : array (k,)
        Type-II ML VQ weights.
    pi : array (k, J)
        Type-II ML state weights.
    g : array (D, k)
        Q(r_d = k).
    m : array (N, k, J)
        Q(s^c_k = j).
    mean_mean, mean_precision : arrays (D, k, J)
        Q(mu_dkj) = N(mean_mean, 1 / mean_precision) (data coordinates).
    precision_shape, precision_rate : arrays (D, k, J)
        Q(tau_dkj) = Gamma(shape, rate).
    mu : array (D, k, J)
        E_Q[mu] (= ``mean_mean``).
    sigma : array (D, k, J)
        E_Q[tau]^-1/2, the expected standard deviation in the precision sense.
    bound : float
        L at the result (the ELBO when the last temperature is 1).
    trace : VBMCVQTrace
        Per-iteration arrays, cut at ``num_iterations``: ``objective``, L_T after every
        iteration; ``temperature``, that iteration's T; ``num_vqs``, the active VQs;
        ``num_states`` (num_iterations, max_vqs), the active states of every starting
        slot (0 once removed).
    num_iterations : int
    converged : bool
        The relative bound change fell to ``tol`` at a constant temperature in an
        iteration that removed nothing.
    monotone : bool
        The bound never fell beyond rounding between iterations at the same
        temperature that removed nothing.
    prior : MCVQPrior
        The hyperparameters used (defaults filled in).
    num_moves : int
        Merge and refresh moves accepted (``moves=True``; ``inference.mcvq.vb_moves``).
    num_causes : int
        Surviving VQs with more than one active state. A one-state VQ has no
        latent choice: it is a constant term (e.g. for pixels that are the same in
        every image), not a cause.
    restart_objectives : array (num_restarts,) or None
        The final bound of every start when ``num_restarts`` > 1 (-inf for a start
        whose pruning removed every VQ or every state of one; the result is the start
        with the highest); None for one start.
    """

    num_vqs: int
    num_states: tuple
    vq_index: jax.Array
    state_active: jax.Array
    alpha: jax.Array
    pi: jax.Array
    g: jax.Array
    m: jax.Array
    mean_mean: jax.Array
    mean_precision: jax.Array
    precision_shape: jax.Array
    precision_rate: jax.Array
    mu: jax.Array
    sigma: jax.Array
    bound: float
    trace: VBMCVQTrace
    num_iterations: int
    converged: bool
    monotone: bool
    prior: MCVQPrior
    num_moves: int
    num_causes: int
    restart_objectives: jax.Array | None = None


#: The per-iteration fields of a VBMCVQResult saved before they became one trace.
_OLD_TRACE_FIELDS = ("bound_trace", "temperature_trace", "num_vqs_trace", "num_states_trace")


def _from_old_fields(values: dict) -> dict:
    """A VBMCVQResult saved with ``bound_trace``, ``temperature_trace``, ``num_vqs_trace``
    and ``num_states_trace``: one :class:`VBMCVQTrace` cut at ``num_iterations``."""
    values = dict(values)
    n = int(values["num_iterations"])
    values["trace"] = VBMCVQTrace(*(np.asarray(values.pop(name))[:n]
                                    for name in _OLD_TRACE_FIELDS))
    return values


register_renamed_fields(VBMCVQResult, {name: name for name in _OLD_TRACE_FIELDS},
                        convert=_from_old_fields)
