"""The most probable states of programs with categorical latents: :func:`map_discrete_states`.

:func:`inference.map_states` sends a program here when some of its discrete latent sites
are categorical (``Categorical`` or one-hot; mixed with ``Bernoulli`` sites or not):

* ``"exact"``: every joint state of an example's units evaluated on the program
  (:func:`inference.association.discrete_tables.log_joint_table`), the best kept: the
  exact answer, for at most ``max_joint_states`` joint states (65,536 by default);
* ``"icm"``: iterated conditional modes (J. Besag, "On the statistical analysis of dirty
  pictures", Journal of the Royal Statistical Society B 48(3), 1986): each unit in turn
  set to its best value given the others, the program evaluated at each of its values,
  until nothing changes; from the all-zero state and ``num_starts - 1`` random states,
  the best end kept. A local optimum, for any number of units.

The binary association methods (BP, belief revision, mean-field, Gibbs, tabu, the
directed methods) need binary units and are refused with an error that names the
categorical sites.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from inference.association.discrete_sites import (
    DiscreteSites,
    discrete_kind,
    discrete_sites,
    log_joint,
    outside_dependence,
)
from inference.association.discrete_tables import (
    MAX_JOINT_STATES,
    coordinate_ascent,
    joint_states,
    log_joint_table,
)
from inference.program.kwargs import join_args

__all__ = ["DISCRETE_METHODS", "map_discrete_states", "has_categorical_sites"]

#: The methods of :func:`inference.map_states` for programs with categorical sites.
DISCRETE_METHODS = ("exact", "icm")
_OPTIONS = {"exact": ("max_joint_states",), "icm": ("num_starts", "max_sweeps")}


def has_categorical_sites(trace, sites=None) -> bool:
    """Whether the traced program has a latent categorical (or one-hot) site among
    ``sites`` (default: all)."""
    wanted = None if sites is None else ({sites} if isinstance(sites, str) else set(sites))
    for name, site in trace.items():
        if site["type"] != "sample" or site["is_observed"]:
            continue
        if wanted is not None and name not in wanted:
            continue
        kind = discrete_kind(site["fn"])
        if kind is not None and kind[0] != "bernoulli":
            return True
    return False


def map_discrete_states(model, args, kwargs, *, method, noise, sites, options, rng_key,
                        traced, dynamic, static_args, static_kwargs):
    """(states dict, energy per example, converged per example) of the program's
    discrete sites (see the module docstring); energies in the units of ``noise`` as
    :func:`inference.map_states` reports them."""
    options = dict(options or {})
    if method not in DISCRETE_METHODS:
        layout = discrete_sites(model, args, kwargs, sites, caller="map_states")
        categorical = [n for n, k in zip(layout.names, layout.kinds, strict=True)
                       if k != "bernoulli"]
        raise ValueError(f"method {method!r} works on binary sites; the program has the "
                         f"categorical sites {categorical}: use method 'exact' (enumeration) "
                         "or 'icm' (coordinate-wise)")
    unknown = sorted(set(options) - set(_OPTIONS[method]))
    if unknown:
        raise ValueError(f"method_options: {unknown} are not options of method {method!r} "
                         f"on categorical sites; its options are {list(_OPTIONS[method])}")
    layout = discrete_sites(model, args, kwargs, sites, caller="map_states")
    coupled = outside_dependence(model, args, kwargs, layout, jax.random.key(0))
    if coupled:
        raise ValueError(f"the sites {coupled} lie outside the example plate "
                         f"{layout.plate!r} and depend on the discrete sites "
                         f"{list(layout.names)}: the examples are coupled, and map_states "
                         "needs them independent given the other sites")
    joint = layout.num_joint_states
    if method == "exact":
        limit = int(options.get("max_joint_states", MAX_JOINT_STATES))
        if joint > limit:
            described = ", ".join(f"{n}: {size} unit(s) of {k} values" for n, size, k in
                                  zip(layout.names, layout.sizes, layout.values, strict=True))
            raise ValueError(f"method 'exact' enumerates the joint states of an example, "
                             f"{joint:.4g} here ({described}), more than "
                             f"max_joint_states={limit}; use method='icm'")
        num_starts, max_sweeps = 1, 1
    else:
        num_starts = int(options.get("num_starts", 4))
        max_sweeps = int(options.get("max_sweeps", 4 * layout.num_units + 8))
        if num_starts < 1 or max_sweeps < 1:
            raise ValueError("method_options: num_starts and max_sweeps must be >= 1")
        if rng_key is None and num_starts > 1:
            rng_key = jax.random.key(0)
    noise_mode = None if noise is None else ("program" if noise == "program" else "float")
    noise_value = jnp.asarray(noise if isinstance(noise, float) else 1.0)
    key = jax.random.key(0) if rng_key is None else rng_key
    flat, log_p, converged = _solve(traced, dynamic, noise_value, key, model=model,
                                    static_args=static_args, static_kwargs=static_kwargs,
                                    layout=layout, noise_mode=noise_mode, method=method,
                                    num_starts=num_starts, max_sweeps=max_sweeps)
    factor = 2.0 * noise_value ** 2 if noise_mode == "float" else 1.0
    states = layout.unflatten(flat)
    states = {name: (value.astype(jnp.int32) if kind == "bernoulli" else value)
              for (name, value), kind in zip(states.items(), layout.kinds, strict=True)}
    return states, -factor * log_p, converged


@partial(jax.jit, static_argnames=("model", "static_args", "static_kwargs", "layout",
                                   "noise_mode", "method", "num_starts", "max_sweeps"))
def _solve(traced, dynamic, noise_value, rng_key, *, model, static_args, static_kwargs,
           layout: DiscreteSites, noise_mode, method, num_starts, max_sweeps):
    args = join_args(traced, static_args)
    kwargs = {**dynamic, **dict(static_kwargs)}
    noise = {None: None, "program": "program"}.get(noise_mode, noise_value)
    evaluate = log_joint(model, args, kwargs, layout, noise)
    if method == "exact":
        states = jnp.asarray(joint_states(layout))
        table = log_joint_table(evaluate, layout, states)
        table = jnp.where(jnp.isnan(table), -jnp.inf, table)
        best = states[jnp.argmax(table, axis=0)]
        return best, jnp.max(table, axis=0), jnp.ones(layout.num_examples, bool)
    cards = jnp.asarray(layout.cardinalities, jnp.int32)
    draws = jax.random.uniform(rng_key, (num_starts, layout.num_examples, layout.num_units))
    starts = jnp.minimum(jnp.floor(draws * cards).astype(jnp.int32), cards - 1)
    starts = starts.at[0].set(0)
    ends, values, converged = jax.lax.map(
        lambda s: coordinate_ascent(evaluate, layout, s, max_sweeps), starts)
    values = jnp.where(jnp.isnan(values), -jnp.inf, values)
    best = jnp.argmax(values, axis=0)  # (examples,)
    pick = jnp.arange(layout.num_examples)
    return ends[best, pick], values[best, pick], converged[best, pick]
