"""What :func:`inference.fit_em` returns: :class:`EMResult`."""

from __future__ import annotations

from typing import NamedTuple

import jax

__all__ = ["EMResult", "EMTrace", "objective_of", "OBJECTIVES"]

#: Each E-step's objective: (name, direction: "max" it never decreases, "min" never
#: increases, once the temperature is 1).
OBJECTIVES = {"soft": ("log_likelihood", "max"), "annealed": ("log_likelihood", "max"),
              "mean-field": ("free_energy", "min"), "hard": ("mean_energy", "min")}


def objective_of(e_step: str) -> tuple[str, str]:
    """(objective name, direction) of an E-step."""
    return OBJECTIVES[e_step]


class EMTrace(NamedTuple):
    """The per-iteration values of :func:`inference.fit_em` (the result protocol's trace).

    Attributes
    ----------
    objective : array (num_iterations,)
        The objective after every iteration's M-step (at that iteration's E-step).
    temperature : array (num_iterations,)
        The temperature of every iteration's E-step (1 where not annealed).
    """

    objective: jax.Array
    temperature: jax.Array


class _EMResultFields(NamedTuple):
    params: dict
    states: dict | None
    posteriors: dict | None
    objective: float
    objective_name: str
    direction: str
    converged: bool
    num_iterations: int
    trace: EMTrace
    restart_objectives: jax.Array
    e_step: str
    closed_form: bool
    temperatures: jax.Array
    numerical_issue: str | None = None
    restart_params: dict | None = None


class EMResult(_EMResultFields):
    """What :func:`inference.fit_em` returns (the best restart).

    A point estimate of the parameters, so no ``to_inference_data``: it holds no draws
    (NumPyro's NUTS on the same program gives them; :mod:`inference.engine.inference_data`).

    Attributes
    ----------
    params : dict
        ``numpyro.param`` name -> learned value (constrained).
    states : dict or None
        ``e_step="hard"``: discrete site name -> the examples' states (the site's shape;
        int32; one-hot for a one-hot site). None otherwise.
    posteriors : dict or None
        The soft E-steps: site name -> each example's posterior probabilities at the
        learned parameters, examples first: ``(num_examples, *unit_shape, K)`` for a
        categorical or one-hot site, ``(num_examples, *unit_shape)`` marginals p(s = 1) for
        a Bernoulli site. The exact marginals for ``"soft"`` and ``"annealed"``, the
        factorised q for ``"mean-field"``. None for ``"hard"``.
    objective : float
        The final objective (``objective_name``).
    objective_name : str
        ``"log_likelihood"`` (soft, annealed: log p(x) summed over the examples, with the
        terms outside the example plate), ``"free_energy"`` (mean-field: minus the
        evidence lower bound), ``"mean_energy"`` (hard: the mean over examples of
        -log p(x, z) at the states, in the units of ``noise``).
    direction : str
        ``"max"``: the objective never decreases over the iterations; ``"min"``: never
        increases (for the annealed E-steps, once the temperature has reached 1).
    converged : bool
    num_iterations : int
    trace : EMTrace
        ``trace.objective``: the objective after every iteration's M-step;
        ``trace.temperature``: each iteration's temperature. (A file saved when the trace
        was the bare array of objectives loads with it as ``trace.objective``.)
    restart_objectives : array (num_restarts,)
        Every restart's final objective.
    e_step : str
    closed_form : bool
        Whether the M-step was solved in closed form (else L-BFGS).
    temperatures : array (num_iterations,)
        The temperature of every iteration's E-step (1 where not annealed).
    numerical_issue : str or None
        What was not finite, when the objective was not (a warning said so too).
    restart_params : dict or None
        Every restart's final parameters (constrained), restarts first, in the order of
        ``restart_objectives``: a caller that rejects the best restart (a collapsed
        component, say) can take the next best. None in files saved before it was kept.
    """

    __slots__ = ()

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls, *args, **kwargs)
        if not isinstance(self.trace, EMTrace):  # a bare array of objectives
            self = self._replace(trace=EMTrace(self.trace, self.temperatures))
        return self
