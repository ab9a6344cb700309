"""How :func:`inference.fit_em` fits a program: its checks, its route and its starts.

:func:`prepare` traces the program once (eagerly, with errors that name the site) and
decides the route of the E-step (enumeration, pairwise tables for mean-field, coordinate
ascent for a hard E-step too large to enumerate) and whether the M-step has a closed
form; :func:`starts` draws every restart's start in one compiled call and checks those
decisions again at the call's values; :func:`finish` gives the best restart's posteriors.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers

from inference.association.discrete_sites import (
    DiscreteSites,
    discrete_sites,
    outside_dependence,
)
from inference.association.discrete_tables import (
    PAIRWISE_RTOL,
    pairwise_misfit,
    pairwise_tables,
    unit_mask,
)
from inference.association.m_step import constrain, unconstrain
from inference.association.map_em import WithParams, checked_params
from inference.em.closed_form import (
    block_checks,
    candidate_blocks,
    choose_blocks,
    hessian_support,
    with_patterns,
)
from inference.em.steps import (
    Setting,
    constrained_objective,
    e_step,
    evaluator,
    marginals_of,
    weights_from_marginals,
    weights_from_states,
)
from inference.program.kwargs import join_args, split_args, split_model_kwargs

__all__ = ["decisions", "measures", "quadratic_support", "candidate_blocks", "prepare",
           "structure_checks",
           "first_params", "initial_params", "starts", "finish", "nonfinite_sites"]


def decisions(checks, check_setting: Setting, measure):
    """(mean-field on the pairwise tables, the M-step's closed-form blocks) from
    :func:`structure_checks`' pairwise misfit and ``measure(blocks)``, its block tests."""
    misfit = float(np.asarray(checks))
    blocks = ()
    if check_setting.closed_form:
        blocks = choose_blocks(measure, {n: c.constraint for n, c in
                                         check_setting.constraints})
    return check_setting.e_step == "mean-field" and misfit <= PAIRWISE_RTOL, blocks


def measures(unconstrained, traced, dynamic, noise_value, rng_key, check_setting):
    """``measure(blocks)`` for :func:`decisions` at these values."""
    def measure(blocks):
        return structure_checks(unconstrained, traced, dynamic, noise_value, rng_key,
                                setting=check_setting, blocks=blocks)[1]
    return measure


@partial(jax.jit, static_argnames=("setting", "sites"))
def quadratic_support(unconstrained, traced, dynamic, noise_value, rng_key, *, setting,
                      sites):
    """Where the M-step objective's Hessian in the quadratic block's ``sites`` can be
    non-zero: the union over two random states of each example."""
    constraint_of = {n: c.constraint for n, c in setting.constraints}
    theta = constrain(unconstrained, constraint_of)
    hard = setting._replace(e_step="hard")
    found = []
    for draw in (3, 4):
        states = random_states(jax.random.fold_in(rng_key, draw), setting.layout)
        objective = constrained_objective(hard, states, traced, dynamic, noise_value)
        found.append(hessian_support(objective, theta, sites))
    return None if found[0] is None else found[0] | found[1]


def prepare(model, args, kwargs, first_key, init_params, noise, *, e_step, sites, search,
             m_step, m_step_iterations, num_sweeps, max_joint_states, traced, dynamic,
             noise_value) -> tuple[Setting, Setting]:
    """Check the program and work out how to fit it (eagerly, with clear errors):
    (the fit's setting, the setting of its :func:`structure_checks`)."""
    constraints_key, first = checked_params(model, args, kwargs, first_key, init_params,
                                            "fit_em")
    wrapped = WithParams(model)
    full = (first, *args)
    layout = discrete_sites(wrapped, full, kwargs, sites, allow_none=True)
    coupled = outside_dependence(wrapped, full, kwargs, layout, first_key)
    if coupled:
        raise ValueError(f"fit_em: the sites {coupled} lie outside the example plate "
                         f"{layout.plate!r} and depend on the discrete sites "
                         f"{list(layout.names)}: the examples are coupled, and EM needs them "
                         "independent given the parameters")
    joint = layout.num_joint_states
    described = ", ".join(f"{name}: {size} unit(s) of {k} values" for name, size, k in
                          zip(layout.names, layout.sizes, layout.values, strict=True))
    fits = joint <= max_joint_states
    if e_step in ("soft", "annealed") and not fits:
        raise ValueError(
            f"e_step={e_step!r} enumerates the joint states of an example's units, "
            f"{joint:.4g} here ({described}), more than max_joint_states="
            f"{max_joint_states}; use e_step='mean-field' (a factorised posterior) or "
            "e_step='hard' with search='icm', or raise max_joint_states")
    if search == "exact" and e_step == "hard" and not fits:
        raise ValueError(
            f"search='exact' enumerates {joint:.4g} joint states of an example ({described}), "
            f"more than max_joint_states={max_joint_states}; use search='icm'")
    static = split_model_kwargs(kwargs)[1]
    static_args = split_args(args)[1]
    noise_mode = None if noise is None else ("program" if noise == "program" else "float")
    route = "enumerate"
    # closed_form=True here asks the checks for the closed-form tests (m_step allows).
    base = Setting(wrapped, static_args, static, layout, noise_mode, e_step, route,
                   constraints_key, m_step != "lbfgs", m_step_iterations, num_sweeps)
    start = first_params(first_key, traced, dynamic, init_params, setting=base)
    checks = structure_checks(start, traced, dynamic, noise_value, first_key, setting=base)[0]
    pairwise, blocks = decisions(checks, base, measures(start, traced, dynamic, noise_value,
                                                        first_key, base))
    blocks = with_patterns(blocks, lambda sites: quadratic_support(
        start, traced, dynamic, noise_value, first_key, setting=base, sites=sites))
    misfit = float(np.asarray(checks))
    if pairwise:
        route = "pairwise"
    elif e_step == "mean-field" and not fits:
        raise ValueError(
            f"e_step='mean-field' needs the program's log-density pairwise in the units "
            f"(each term coupling at most two of them; it misses that by {misfit:.3g} of its "
            f"scale) or the joint states few enough to enumerate ({joint:.4g} here, "
            f"{described}; max_joint_states={max_joint_states})")
    elif e_step == "hard" and (search == "icm" or (search == "auto" and not fits)):
        route = "icm"
    covered = {name for _, sites, _ in blocks for name in sites}
    rest = sorted(set(first) - covered)
    if m_step == "closed" and rest:
        raise ValueError(f"m_step='closed': the expected log-joint has no closed-form "
                         f"maximiser in the parameters {rest} (it is not quadratic in a "
                         "real parameter, log-linear in a simplex, or a power law in a "
                         "positive one); pass m_step='auto' or 'lbfgs'")
    return base._replace(route=route, closed_form=not rest, blocks=blocks), base


@partial(jax.jit, static_argnames=("setting", "blocks"))
def structure_checks(unconstrained, traced, dynamic, noise_value, rng_key, *, setting,
                     blocks=()):
    """(pairwise misfit of the log-density in the units, the closed-form tests of the
    M-step's objective for ``blocks``: :func:`inference.em.closed_form.block_checks`) at
    ``unconstrained`` parameters and random states. With ``blocks``, only their tests."""
    layout = setting.layout
    constraint_of = {n: c.constraint for n, c in setting.constraints}
    theta = constrain(unconstrained, constraint_of)
    misfit = jnp.zeros(())
    if blocks:
        states = random_states(jax.random.fold_in(rng_key, 1), layout)
        hard = setting._replace(e_step="hard")
        objective = constrained_objective(hard, states, traced, dynamic, noise_value)
        return misfit, block_checks(objective, theta, blocks, jax.random.fold_in(rng_key, 2))
    evaluate = evaluator(setting, theta, traced, dynamic, noise_value)
    if layout.num_units and setting.e_step == "mean-field":
        misfit = pairwise_misfit(pairwise_tables(evaluate, layout), evaluate, layout, rng_key)
    return misfit, ()


def random_states(rng_key, layout: DiscreteSites):
    cards = jnp.asarray(layout.cardinalities, jnp.int32).reshape(1, -1)
    draws = jax.random.uniform(rng_key, (layout.num_examples, layout.num_units))
    return jnp.minimum(jnp.floor(draws * cards).astype(jnp.int32), cards - 1)


@partial(jax.jit, static_argnames=("setting",))
def first_params(key, traced, dynamic, init_params, *, setting):
    """The first restart's initial parameters (unconstrained), compiled."""
    return initial_params(key, traced, dynamic, init_params, setting)


def initial_params(key, traced, dynamic, init_params, setting: Setting):
    """A start's initial parameters (unconstrained): the program's initialisers under
    ``key``, ``init_params`` in place of some."""
    model = setting.model.model
    args = join_args(traced, setting.static_args)
    kwargs = {**dynamic, **dict(setting.static_kwargs)}
    trace = handlers.trace(handlers.seed(model, rng_seed=key)).get_trace(*args, **kwargs)
    values = {name: site["value"] for name, site in trace.items() if site["type"] == "param"}
    values.update(init_params)
    return unconstrain(values, {n: c.constraint for n, c in setting.constraints})


@partial(jax.jit, static_argnames=("setting", "init"))
def starts(keys, traced, dynamic, init_params, noise_value, *, setting, init):
    """Every restart's start: unconstrained parameters (the program's initial values,
    ``init_params`` in place) and the weights of its first M-step (random states, random
    posteriors, or the E-step at the initial parameters for ``init="program"``)."""
    layout = setting.layout
    mask = jnp.asarray(unit_mask(layout))

    def one(key):
        key_params, key_states = jax.random.split(key)
        params = initial_params(key_params, traced, dynamic, init_params, setting)
        if init == "posteriors":
            q = jax.random.dirichlet(key_states, jnp.ones(layout.max_values),
                                     (layout.num_examples, layout.num_units))
            q = jnp.where(mask, q, 0.0)
            q = q / jnp.sum(q, axis=-1, keepdims=True)
            weights = weights_from_marginals(setting, q)
        else:
            states = random_states(key_states, layout)
            q = jax.nn.one_hot(states, layout.max_values)
            weights = weights_from_states(setting, states)
        if init == "program":  # the E-step at the program's own values
            constraint_of = {n: c.constraint for n, c in setting.constraints}
            evaluate = evaluator(setting, constrain(params, constraint_of), traced, dynamic,
                                 noise_value)
            uniform = jnp.where(mask, 1.0, 0.0) / jnp.sum(mask, axis=-1, keepdims=True)
            uniform = jnp.broadcast_to(uniform, (layout.num_examples, *uniform.shape))
            previous = weights_from_marginals(setting, uniform)
            weights = e_step(setting._replace(num_sweeps=1), evaluate, previous, 1.0,
                             noise_value)[0]
        return params, weights

    return jax.vmap(one)(keys)


@partial(jax.jit, static_argnames=("setting",))
def finish(weights, *, setting):
    """Per-unit marginals (N, n, K) of the best restart's last E-step (taken at its final
    parameters)."""
    return marginals_of(setting, weights)


def nonfinite_sites(setting: Setting, params, weights, args, kwargs):
    """Which sites' log-densities are not finite at ``params`` (a message)."""
    layout = setting.layout
    if setting.e_step == "hard":
        states = weights
    else:
        states = jnp.argmax(marginals_of(setting, weights), axis=-1).astype(jnp.int32)
    try:
        trace = handlers.trace(handlers.substitute(handlers.seed(
            setting.model, rng_seed=0), data=layout.unflatten(states))).get_trace(
            params, *args, **kwargs)
    except Exception as error:  # noqa: BLE001 - reported, not raised
        return f"the program fails at them: {error}"
    bad = sorted(name for name, site in trace.items() if site["type"] == "sample"
                 and not bool(jnp.all(jnp.isfinite(site["fn"].log_prob(site["value"])))))
    bad_params = sorted(name for name, value in params.items()
                        if not bool(jnp.all(jnp.isfinite(value))))
    parts = []
    if bad:
        parts.append(f"non-finite log-density at sites {bad}")
    if bad_params:
        parts.append(f"non-finite parameters {bad_params}")
    return "; ".join(parts) or "the objective alone is not finite"
