"""The result of :func:`inference.mixture.em.fit_mixture` and the modes it fits."""

from __future__ import annotations

from typing import NamedTuple

import jax

#: The three limits of the program that :func:`fit_mixture` implements.
MODES = ("stochastic", "map", "nearest")


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
    objective_trace : array (num_iterations,)
        The objective each iteration lowers: L_stocha (``"stochastic"``), the hard
        free energy (``"map"``) or E_MSE (``"nearest"``), before each update.
    num_components_trace : int array (num_iterations,)
        Surviving components after each iteration's pruning.
    num_iterations : int
    converged : bool
    num_start : int
    mode, covariance : str
    collapsed : tuple of int
        Surviving components whose smallest covariance eigenvalue sank to the
        variance threshold (held up only by ``reg_covar``): a degenerate,
        unboundedly likely fit. Empty with ``prune=True``, which discards them.
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
    objective_trace: jax.Array
    num_components_trace: jax.Array
    num_iterations: int
    converged: bool
    num_start: int
    mode: str
    covariance: str
    collapsed: tuple = ()


