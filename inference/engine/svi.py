"""SVI on the engine: one step, one start and one read-out for every SVI baseline.

NumPyro's ``SVI.update`` is already a pure step on a state that carries its own random
key and optimiser state, so an SVI fit is an :class:`~inference.engine.Algorithm` whose
step is ``svi.update`` and whose objective is the loss. What differs between the
baselines is only how the ``SVI`` object (model, guide, optimiser, loss) and the
arguments of its model are made from the data and the parameters; a family writes that
once, as a module-level function::

    make(data, params, start, **options) -> SVIProblem(svi, args, kwargs)

(``start``: one start's initial values for the guide, or None where only the shapes
matter: inside a step the SVI object is rebuilt for its constraint maps and the guide's
prototype, and the start it would set is never used), and :class:`SVIFit` gives the rest:

* :meth:`SVIFit.algorithm`, the engine's :class:`~inference.engine.Algorithm` (the step
  :func:`svi_step`; ``info`` is :class:`SVIInfo`, never converged: the SVI runs exactly
  ``num_steps``);
* :meth:`SVIFit.states`, every start's SVI state before the first step (``svi.init``);
* :meth:`SVIFit.run`, the fit through :func:`inference.engine.run` (progress bar,
  checkpoints and resume from the engine);
* :meth:`SVIFit.read`, what the family wants from the final states (by default the
  parameters, ``svi.get_params``).

One start runs unbatched (as the engine runs it), several side by side (``vmap``). A
baseline whose step does more than ``svi.update`` (a convergence test of its own, a
record of the parameters) calls :func:`svi_update` inside its own step.

References
----------
E. Bingham, J. P. Chen, M. Jankowiak et al., "Pyro: deep universal probabilistic
programming", JMLR 2019, and D. Phan, N. Pradhan, M. Jankowiak, "Composable effects for
flexible and accelerated probabilistic programming in NumPyro", 2019 (``SVI`` as an
``init`` / ``update`` pair on an explicit state).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from inference.engine.checkpoint import svi_ready, svi_start
from inference.engine.loop import Algorithm, run

__all__ = ["SVIFit", "SVIInfo", "SVIProblem", "best_svi_start", "svi_init", "svi_parameters",
           "svi_ready_problem", "svi_step", "svi_update"]


def best_svi_start(fitted, num_examples, num_restarts):
    """The kept start of SVI runs side by side (the "best of" rule): ``(index, final loss
    per example of every start)``, the index of the least finite final loss; ``(0, None)``
    for one start."""
    if num_restarts == 1:
        return 0, None
    finals = fitted.trace.objective[:, -1] / num_examples
    return int(jnp.argmin(jnp.where(jnp.isfinite(finals), finals, jnp.inf))), finals


class SVIProblem(NamedTuple):
    """What a family's ``make`` returns: the ``SVI`` object and the positional and
    keyword arguments of its model and guide."""

    svi: Any
    args: tuple
    kwargs: dict


class SVIInfo(NamedTuple):
    """Per-step information: ``objective``, the loss (-ELBO) before the step's update,
    and ``converged`` (never for :func:`svi_step`: the SVI runs for exactly
    ``num_steps``; a family's own step may report a test of its own at the last step)."""

    objective: jax.Array
    converged: jax.Array


def svi_ready_problem(make: Callable, svi_state, data, params, **options) -> SVIProblem:
    """The family's problem for a step from ``svi_state``, its ``svi.init`` traced only
    (:func:`inference.engine.checkpoint.svi_ready`)."""
    problem = make(data, params, None, **options)
    svi_ready(problem.svi, svi_state, *problem.args, **problem.kwargs)
    return problem


def svi_update(make: Callable, svi_state, data, params, **options):
    """One ``svi.update``: ``(problem, new SVI state, loss)``."""
    problem = svi_ready_problem(make, svi_state, data, params, **options)
    svi_state, loss = problem.svi.update(svi_state, *problem.args, **problem.kwargs)
    return problem, svi_state, loss


def svi_step(rng_key, state, data, params, *, shard, make, **options):
    """One SVI step as an :class:`~inference.engine.Algorithm` step. The SVI state
    carries its own key (NumPyro splits it every step), so ``rng_key`` is unused, and
    the data are not split over devices (``shard`` is None)."""
    del rng_key, shard
    _, state, loss = svi_update(make, state, data, params, **options)
    return state, SVIInfo(loss, jnp.asarray(False))


def svi_init(make: Callable, rng_key, data, params, start=None, **options):
    """One start's SVI state before the first step (``svi.init``), its weakly typed
    leaves made strong (:func:`inference.engine.checkpoint.svi_start`), so that a state
    reloaded from a checkpoint reuses the compiled loop."""
    problem = make(data, params, start, **options)
    return svi_start(problem.svi.init(rng_key, *problem.args, **problem.kwargs), 1,
                     jax.tree.leaves(data)[0].dtype)[0]


def svi_parameters(problem: SVIProblem, svi_state, data, params):
    """The default read-out: the (constrained) parameters, ``svi.get_params``."""
    del data, params
    return problem.svi.get_params(svi_state)


def _per_start(function, num_starts, *arrays):
    """``function`` on every start: unbatched for one (as the engine runs it), else vmapped.
    ``arrays`` have a leading starts axis (None: shared)."""
    if num_starts == 1:
        one = [None if a is None else jax.tree.map(lambda leaf: leaf[0], a) for a in arrays]
        return jax.tree.map(lambda leaf: leaf[None], function(*one))
    axes = tuple(None if a is None else 0 for a in arrays)
    return jax.vmap(function, in_axes=axes)(*arrays)


@partial(jax.jit, static_argnames=("fit",))
def _states(fit, keys, data, params, starts):
    options = dict(fit.options)
    return _per_start(lambda key, start: svi_init(fit.make, key, data, params, start, **options),
                      keys.shape[0], keys, starts)


@partial(jax.jit, static_argnames=("fit", "read"))
def _read(fit, states, data, params, read):
    options = dict(fit.options)

    def one(state):
        return read(svi_ready_problem(fit.make, state, data, params, **options), state, data,
                    params)

    return _per_start(one, jax.tree.leaves(states)[0].shape[0], states)


class SVIFit(NamedTuple):
    """An SVI baseline for the engine, built from how its family makes the SVI.

    Attributes
    ----------
    make : callable
        ``make(data, params, start, **options) -> SVIProblem``, a module-level function
        (the compiled loop is cached on it).
    name : str
        The fit's name (progress bar, checkpoints).
    options : tuple of (name, value) pairs
        Static options of ``make`` (hashable).
    """

    make: Callable
    name: str
    options: tuple = ()

    def algorithm(self) -> Algorithm:
        """The engine's :class:`~inference.engine.Algorithm`: the step :func:`svi_step`."""
        return Algorithm(svi_step, options=(("make", self.make), *self.options), name=self.name)

    def states(self, keys, data, params, starts=None):
        """Every start's SVI state before the first step, stacked: one per key of
        ``keys`` (num_starts,), from ``starts`` (a leading starts axis; None: ``make``'s
        own start from ``params``)."""
        return _states(self, keys, tuple(data), params, starts)

    def run(self, keys, data, params, *, num_steps: int, starts=None, progress_bar=False,
            checkpoint=None):
        """All ``num_steps`` steps of every start through :func:`inference.engine.run`;
        its :class:`~inference.engine.Run` (``trace.objective``: the losses)."""
        data = tuple(data)
        return run(self.algorithm(), self.states(keys, data, params, starts), data, params,
                   keys=keys, max_iterations=num_steps, progress_bar=progress_bar,
                   checkpoint=checkpoint)

    def read(self, states, data, params, read: Callable = svi_parameters):
        """``read(problem, svi_state, data, params)`` of every start's SVI state (stacked
        on a leading axis), ``svi.init`` traced only; by default the parameters. ``read``
        is a module-level function (compiled once)."""
        return _read(self, states, tuple(data), params, read)
