"""The result of :func:`inference.mixture.em.fit_mixture` and the modes it fits."""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from inference.engine.persistence import register_renamed_fields
from inference.engine.protocol import follows_protocol

#: The three limits of the program that :func:`fit_mixture` implements.
MODES = ("stochastic", "map", "nearest")


class MixtureTrace(NamedTuple):
    """Per-iteration arrays of a mixture fit, cut at ``num_iterations``."""

    objective: jax.Array
    num_components: jax.Array


def _cut(values, names):
    """Old fields ``<name>_trace`` (padded or cut) -> ``(array cut at num_iterations, ...)``."""
    n = int(values["num_iterations"])
    return tuple(np.asarray(values.pop(f"{name}_trace"))[:n] for name in names)


def _old_mixture_result(values):
    """A MixtureResult saved with ``objective_trace``/``num_components_trace``."""
    values["trace"] = MixtureTrace(*_cut(values, ("objective", "num_components")))
    return values


#: What ``trace.objective`` is in each mode (the result protocol's ``objective_name``).
OBJECTIVE_NAMES = {"stochastic": "L_stocha", "map": "hard_free_energy",
                   "nearest": "mean_squared_error"}


@follows_protocol(lambda result: OBJECTIVE_NAMES[result.mode], "min")
class MixtureResult(NamedTuple):
    """Result of :func:`fit_mixture`.

    Attributes
    ----------
    weights : array (k,)
        Mixing weights of the surviving components.
    means : array (k, d)
    covariances : array (k, d, d)
    num_components : int
        Surviving components k (of ``num_start`` at the start).
    labels : int32 array (num_examples,)
        Most probable surviving component of every example (index into the arrays above).
    L_stocha, L_map, L_NN, J : float
        The criteria at the final parameters (module docstring).
    trace : MixtureTrace
        Per-iteration arrays (num_iterations,): ``objective``, the objective each
        iteration lowers: L_stocha (``"stochastic"``), the hard free energy
        (``"map"``) or E_MSE (``"nearest"``), before each update; ``num_components``,
        the surviving components after each iteration's pruning.
    num_iterations : int
    converged : bool
    num_start : int
    mode, covariance : str
    collapsed : tuple of int
        Surviving components whose smallest covariance eigenvalue, in the data's units,
        sank to the variance threshold (held up only by ``reg_covar``): a degenerate,
        unboundedly likely fit; ``prune=True`` discards those. Also, in any mode,
        components whose covariance has no Cholesky factor in the fit's float type.
    restart_objectives : array (num_restarts,) or None
        The final objective of every start of a streamed fit with ``num_restarts`` > 1
        (:func:`inference.mixture.stream.fit_mixture_stream`; the result is the best of
        them); None for one start and for the in-memory fit.
    """

    weights: jax.Array
    means: jax.Array
    covariances: jax.Array
    num_components: int
    labels: jax.Array
    L_stocha: float
    L_map: float
    L_NN: float
    J: float
    trace: MixtureTrace
    num_iterations: int
    converged: bool
    num_start: int
    mode: str
    covariance: str
    collapsed: tuple = ()
    restart_objectives: jax.Array | None = None


register_renamed_fields(MixtureResult, {"objective_trace": "objective_trace",
                                        "num_components_trace": "num_components_trace"},
                        convert=_old_mixture_result)
