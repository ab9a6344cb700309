"""The result of the GVQ fits (:func:`inference.gvq.em.fit_gvq`, its streamed and SVI forms).

Files saved before ``error_trace`` became ``trace`` (a :class:`GVQTrace` cut at
``num_iterations``) still load: :func:`inference.engine.persistence.register_renamed_fields`
maps the old field and cuts its padded array.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from inference.engine import host
from inference.engine.persistence import register_renamed_fields
from inference.engine.protocol import follows_protocol

__all__ = ["GVQTrace", "GVQSVITrace", "GVQResult"]


class GVQTrace(NamedTuple):
    """Per-iteration arrays of a GVQ fit, cut at its ``num_iterations``.

    Attributes
    ----------
    objective : array (num_iterations,)
        The mean reconstruction error per example after each EM iteration (for
        ``fit_gvq_svi``: the loss per example, -ELBO / num_examples, of each step).
    num_changed : int32 array (num_iterations,) or None
        Examples re-associated by each iteration (None where the fit does not know
        it: the streamed and SVI fits, files saved before the trace was a NamedTuple).
    """

    objective: jax.Array
    num_changed: jax.Array | None = None


class GVQSVITrace(GVQTrace):
    """The trace of :func:`~inference.gvq.baselines.fit_gvq_svi`: ``objective`` is the loss
    per example, -ELBO / num_examples, of each step (a :class:`GVQTrace`)."""

    __slots__ = ()


def _gvq_objective_name(result) -> str:
    return "loss" if isinstance(result.trace, GVQSVITrace) else "mean_squared_error"


@follows_protocol(_gvq_objective_name, "min")
class GVQResult(NamedTuple):
    """Result of :func:`inference.gvq.em.fit_gvq`.

    The result protocol: ``objective`` is the last entry of ``trace.objective``,
    ``objective_name`` ``"mean_squared_error"`` (``error``), or ``"loss"`` for
    :func:`~inference.gvq.baselines.fit_gvq_svi`; ``direction`` ``"min"``.

    Attributes
    ----------
    features : array (num_features, dim)
        Learned F of the best restart.
    states : int32 array (num_examples, num_features)
        Association of every example under the learned F.
    error : float
        Final mean squared reconstruction error per example, ||x - s @ F||^2.
    trace : GVQTrace
        Per-iteration arrays of the best restart (error after each iteration, examples
        re-associated), cut at ``num_iterations``.
    num_iterations : int
        Iterations run by the best restart.
    converged : bool
        Whether the best restart reached a fixed point within ``max_iterations``.
    restart_errors : array (num_restarts,)
        Final error of every restart.
    sets : int32 array (num_examples,) or None
        With ``num_sets``: the set each example uses.
    """

    features: jax.Array
    states: jax.Array
    error: jax.Array
    trace: GVQTrace
    num_iterations: jax.Array
    converged: jax.Array
    restart_errors: jax.Array
    sets: jax.Array | None = None


def _trace_from_padded(fields: dict) -> dict:
    """An old file's ``error_trace`` (padded past convergence with the final error) as a
    :class:`GVQTrace` cut at ``num_iterations``."""
    trace = fields.get("trace")
    if trace is not None and not isinstance(trace, GVQTrace):
        count = int(np.asarray(fields["num_iterations"]))
        fields = dict(fields, trace=GVQTrace(objective=host.head(trace, count)))
    return fields


register_renamed_fields(GVQResult, {"error_trace": "trace"}, convert=_trace_from_padded)
