"""The result protocol every fit's result follows, and the one rule for renamed arguments.

Every fit of the zoo returns a NamedTuple with the same core, whatever the family
(the trace of NumPyro's ``SVI.run`` and the ``State``/``Info`` split of BlackJAX give
every algorithm one shape of result; this is that shape for the zoo's fits):

* ``converged`` (bool) and ``num_iterations`` (int; draws per chain for a sampler, 1
  for a closed-form fit);
* ``trace``, a NamedTuple whose field ``objective`` holds the objective after every
  iteration (one row per chain for a sampler), beside any per-iteration fields of the
  family's own (temperature, active components, ...);
* ``objective`` (the final value), ``objective_name`` (what it is: ``"log_likelihood"``,
  ``"free_energy"``, ``"mean_energy"``, ...) and ``direction``: ``"max"`` when a larger
  value is a better fit (the fit raises it), ``"min"`` when a smaller one is;
* ``save(path)`` and ``load(path)`` (:mod:`inference.engine.persistence`), and
  ``to_inference_data()`` where the result holds posterior draws.

A family's own names for its objective (``error``, ``L_stocha``, ``bound``, ``energy``:
the papers' symbols) stay as fields of its result, beside ``objective``.
:func:`follows_protocol` gives a result class the three objective attributes.

Arguments renamed to the one vocabulary keep working for one release with a
:class:`ZooDeprecationWarning` naming the new spelling (:func:`renamed_argument`).

References
----------
D. Phan, N. Pradhan, M. Jankowiak, "Composable effects for flexible and accelerated
probabilistic programming in NumPyro", 2019 (``SVI.run``: one trace for every guide);
J. Lao, R. Louf et al., "BlackJAX: composable Bayesian inference in JAX", 2024.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np

__all__ = ["DIRECTIONS", "PROTOCOL_FIELDS", "Trace", "ZooDeprecationWarning",
           "follows_protocol", "sampler_protocol", "closed_form_protocol",
           "method_options_of", "renamed_argument"]

#: The values of ``direction``: "max", a larger objective is a better fit; "min", a
#: smaller one is.
DIRECTIONS = ("max", "min")
#: The attributes every fit's result has.
PROTOCOL_FIELDS = ("converged", "num_iterations", "trace", "objective", "objective_name",
                   "direction", "save", "load")


class ZooDeprecationWarning(DeprecationWarning):
    """A spelling that still works for one release; the message names the new one.

    A ``DeprecationWarning``, not a :class:`~ppl_models.diagnostics.ZooWarning`: code that
    turns the zoo's warnings into errors keeps running through the release of grace.
    """


class Trace(NamedTuple):
    """The trace of a fit whose family keeps no other per-iteration values.

    Attributes
    ----------
    objective : array (num_iterations,) or (num_chains, num_iterations)
        The objective after every iteration (every draw of every chain for a sampler).
    """

    objective: jax.Array


def _final(values):
    """The last finite entry of an objective trace (of the last row), as a float; nan for
    an empty one."""
    if values is None:
        return float("nan")
    values = np.asarray(values, dtype=float)
    if values.ndim > 1:
        values = values.reshape(-1, values.shape[-1])[-1]
    values = values.reshape(-1)
    return float(values[-1]) if values.size else float("nan")


def follows_protocol(objective_name: str | Callable, direction: str | Callable, *,
                     objective: str | Callable | None = None):
    """Class decorator: give a NamedTuple result class the protocol's objective attributes.

    Parameters
    ----------
    objective_name : str or callable
        What the objective is; a callable ``fn(result) -> str`` when it depends on the
        fit's options (a mixture's ``mode``, say).
    direction : str or callable
        ``"max"`` or ``"min"`` (:data:`DIRECTIONS`), or ``fn(result) -> str``.
    objective : str or callable, optional
        The final objective: the name of the family's own field that holds it (``"error"``,
        ``"bound"``), ``fn(result) -> float``, or None for the last entry of
        ``trace.objective``. Ignored when the class has a field ``objective``.

    Examples
    --------
    >>> from typing import NamedTuple
    >>> @follows_protocol("error", "min")
    ... class Fit(NamedTuple):
    ...     trace: Trace
    >>> fit = Fit(Trace(np.array([3.0, 2.0])))
    >>> fit.objective, fit.objective_name, fit.direction
    (2.0, 'error', 'min')
    """
    for value in (direction,):
        if not callable(value) and value not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}; got {value!r}")

    def attribute(value):
        return property(value) if callable(value) else value

    def decorate(cls):
        cls.objective_name = attribute(objective_name)
        cls.direction = attribute(direction)
        if "objective" not in cls._fields:
            if objective is None:
                cls.objective = property(lambda self: _final(self.trace.objective))
            elif callable(objective):
                cls.objective = property(objective)
            else:
                cls.objective = property(lambda self: float(np.asarray(
                    getattr(self, objective), dtype=float).reshape(-1)[-1]))
        return cls

    return decorate


def sampler_protocol(cls):
    """Class decorator for a sampler's result with a ``potential_energy`` field (num_chains,
    num_warmup + num_samples): the protocol's objective is that, -log density of every draw,
    warm-up included, and ``num_iterations`` its length per chain (0 where the result was
    saved before it was kept, None)."""
    cls = follows_protocol("potential_energy", "min")(cls)
    cls.trace = property(lambda self: Trace(self.potential_energy),
                         doc="The result protocol's trace: objective = potential_energy.")
    cls.num_iterations = property(
        lambda self: 0 if self.potential_energy is None
        else int(np.shape(self.potential_energy)[-1]),
        doc="Iterations of every chain, warm-up included (the result protocol's count).")
    return cls


def closed_form_protocol(objective_name: str, objective_fn: Callable):
    """Class decorator for a closed-form fit's result: always ``converged``, one
    iteration, a one-entry trace holding ``objective_fn(result)``, to be minimised."""
    def decorate(cls):
        cls.converged = property(lambda self: True, doc="Always True: a closed-form fit.")
        cls.num_iterations = property(lambda self: 1, doc="1: a closed-form fit.")
        cls.trace = property(lambda self: Trace(np.asarray([objective_fn(self)], np.float32)),
                             doc=f"One entry: the {objective_name.replace('_', ' ')}.")
        return follows_protocol(objective_name, "min")(cls)
    return decorate


def renamed_argument(fn_name: str, old: str, new: str, value, current=None):
    """The value of an argument given under its old name ``old``: warns once with a
    :class:`ZooDeprecationWarning` naming ``new``; raises ``TypeError`` when both were
    given (``current`` is not None)."""
    if current is not None:
        raise TypeError(f"{fn_name}: pass {new}= only ({old}= is its old name); got both")
    warnings.warn(f"{fn_name}: {old}= is deprecated and will be removed in the next release; "
                  f"use {new}= instead", ZooDeprecationWarning, stacklevel=3)
    return value


def method_options_of(fn_name: str, method_options, keywords: dict) -> dict:
    """The method options of a search (``associate``, ``map_states``): the one dict
    ``method_options``; options given as keywords (the old form) are merged in with a
    :class:`ZooDeprecationWarning` naming ``method_options``."""
    if method_options is not None and not isinstance(method_options, dict):
        raise TypeError(f"method_options must be a dict of the method's options; got "
                        f"{type(method_options).__name__}")
    options = dict(method_options or {})
    if keywords:
        clash = sorted(set(keywords) & set(options))
        if clash:
            raise TypeError(f"{fn_name}: {clash} given both as keywords and in method_options")
        warnings.warn(f"{fn_name}: method options as keywords ({', '.join(sorted(keywords))}) "
                      "are deprecated and will be removed in the next release; use "
                      f"method_options={{...}} instead", ZooDeprecationWarning, stacklevel=3)
        options.update(keywords)
    return options
