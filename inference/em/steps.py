"""The pieces of the generic EM (:func:`inference.fit_em`): E-steps and the M-step's objective.

One EM iteration on a program's discrete units (:mod:`inference.association.discrete_sites`)
and continuous ``numpyro.param`` sites, for one restart, pure and jittable:

* E-step, by ``e_step``:

  - ``"soft"``: the exact posterior of each example's joint state, by enumeration
    (:func:`inference.association.discrete_tables.log_joint_table`);
  - ``"annealed"``: the same posterior at a temperature T, p(z | x)^(1/T) normalised,
    the posterior of the program under ``numpyro.handlers.scale(model, 1 / T)`` (every
    log-density term divided by T), T falling from hot to 1 over the iterations;
  - ``"mean-field"``: a factorised posterior over the units, updated unit by unit
    (:func:`inference.association.discrete_tables.mean_field_sweeps` on the pairwise
    tables, or by enumeration where the log-density is not pairwise); optionally
    annealed too;
  - ``"hard"``: the most probable joint state, by enumeration or by coordinate ascent
    from the previous states.

* M-step: the parameters maximise the expected log-joint ``Q(theta)`` under the
  E-step's posterior (its states for ``"hard"``): block by block in closed form where
  ``Q`` has a shape that allows it (quadratic in real parameters, normalised expected
  counts for a simplex, a power law in a positive parameter:
  :mod:`inference.em.closed_form`), the other parameters by a monotone L-BFGS
  (:func:`inference.em.lbfgs.minimize`) from their current values.

References
----------
A. P. Dempster, N. M. Laird and D. B. Rubin, "Maximum likelihood from incomplete data via
the EM algorithm", Journal of the Royal Statistical Society B 39(1), 1977; R. M. Neal and
G. E. Hinton, "A view of the EM algorithm that justifies incremental, sparse, and other
variants", in Learning in Graphical Models, 1998 (the free energy that the E- and
M-steps both lower).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from numpyro import handlers

from inference.association.discrete_sites import DiscreteSites, log_joint
from inference.association.discrete_tables import (
    coordinate_ascent,
    entropy,
    joint_states,
    log_joint_table,
    mean_field_sweeps,
    pairwise_tables,
    pairwise_value,
    table_posterior,
    unit_mask,
)
from inference.association.m_step import constrain, unconstrain
from inference.em.closed_form import closed_form_m_step
from inference.em.lbfgs import minimize
from inference.program.kwargs import join_args

__all__ = ["EMState", "EMInfo", "Setting", "em_step", "evaluator", "m_step_objective",
           "constrained_objective", "weights_from_states", "weights_from_marginals",
           "marginals_of", "e_step",
           "enumerated_mean_field"]


class Setting(NamedTuple):
    """The static part of a fit (hashable: the compiled step is kept per setting)."""

    model: object  # WithParams
    static_args: tuple
    static_kwargs: tuple
    layout: DiscreteSites
    noise_mode: str | None  # None (the limit), "float" or "program"
    e_step: str  # "soft", "annealed", "mean-field", "hard"
    route: str  # "enumerate" or "pairwise" (mean-field) / "icm" (hard)
    constraints: tuple  # (name, ConstraintKey), sorted
    closed_form: bool  # every parameter in a closed-form block (checks: allowed at all)
    m_step_iterations: int
    num_sweeps: int
    blocks: tuple = ()  # ((kind, sites, exponents), ...): inference.em.closed_form


class EMState(NamedTuple):
    params: dict  # unconstrained
    weights: jax.Array  # enumerate: unused (0); mean-field: q (N, n, K); hard: states (N, n)
    objective: jax.Array
    iteration: jax.Array


class EMInfo(NamedTuple):
    objective: jax.Array
    converged: jax.Array
    temperature: jax.Array
    m_step_failed: jax.Array


def evaluator(setting: Setting, theta, data, dynamic, noise_value, temperature=None):
    """``log_joint`` of the program at constrained parameters ``theta``; with a
    ``temperature`` T, of the tempered program ``numpyro.handlers.scale(model, 1 / T)``
    (every log-density term divided by T: the annealed posterior is its posterior)."""
    args = join_args(data, setting.static_args)
    kwargs = {**dynamic, **dict(setting.static_kwargs)}
    noise = {None: None, "program": "program"}.get(setting.noise_mode, noise_value)
    model = setting.model
    if temperature is not None:
        model = handlers.scale(model, scale=1.0 / temperature)
    return log_joint(model, (theta, *args), kwargs, setting.layout, noise)


def _constraint_of(setting):
    return {name: key.constraint for name, key in setting.constraints}


def _states(setting):
    return jnp.asarray(joint_states(setting.layout))


def _outside(evaluate, layout):
    return evaluate(jnp.zeros((layout.num_examples, layout.num_units), jnp.int32))[1]


def weights_from_states(setting: Setting, states):
    """The M-step weights that put each example at ``states`` (N, n)."""
    if setting.e_step == "hard":
        return states
    q = jax.nn.one_hot(states, setting.layout.max_values)
    return weights_from_marginals(setting, q)


def weights_from_marginals(setting: Setting, q):
    """The M-step weights of a factorised posterior q (N, n, K)."""
    if setting.e_step == "hard":
        return jnp.argmax(q, axis=-1).astype(jnp.int32)
    if setting.e_step == "mean-field":
        return q
    # Enumeration: each joint state's weight is the product of its units' probabilities.
    return jnp.prod(_gather(q, _states(setting)), axis=-1)  # (J, N)


def _gather(q, states):
    """q_u(z_ju) for every joint state j, example and unit: (J, N, n)."""
    return jnp.take_along_axis(q[None], states[:, None, :, None], axis=-1)[..., 0]


def expected_log_joint(setting: Setting, weights, evaluate):
    """Q: the sum over examples of E[L_i] under the M-step ``weights``, plus the terms
    outside the example plate."""
    layout = setting.layout
    outside = _outside(evaluate, layout)
    if setting.e_step == "hard":
        return jnp.sum(evaluate(weights)[0]) + outside
    if setting.e_step == "mean-field" and setting.route == "pairwise":
        return jnp.sum(pairwise_value(pairwise_tables(evaluate, layout), weights)) + outside
    if setting.e_step == "mean-field":
        weights = jnp.prod(_gather(weights, _states(setting)), axis=-1)
    table = log_joint_table(evaluate, layout, _states(setting))
    return jnp.sum(jnp.where(weights > 0, weights * table, 0.0)) + outside


def constrained_objective(setting: Setting, weights, data, dynamic, noise_value):
    """``f(constrained params)``: minus Q per example."""
    num = setting.layout.num_examples

    def objective(theta):
        evaluate = evaluator(setting, theta, data, dynamic, noise_value)
        return -expected_log_joint(setting, weights, evaluate) / num

    return objective


def m_step_objective(setting: Setting, weights, data, dynamic, noise_value):
    """``f(unconstrained params)``: minus Q per example (the M-step minimises it)."""
    constraint_of = _constraint_of(setting)
    f = constrained_objective(setting, weights, data, dynamic, noise_value)

    def objective(unconstrained):
        return f(constrain(unconstrained, constraint_of))

    return objective


def m_step(setting: Setting, params, weights, data, dynamic, noise_value):
    """The M-step from ``params`` (unconstrained): (new params, solved). The closed-form
    blocks first (:func:`inference.em.closed_form.closed_form_m_step`), then L-BFGS on the
    other parameters, the blocks' held at their new values."""
    constraint_of = _constraint_of(setting)
    solved = jnp.asarray(True)
    covered = [n for _, sites, _ in setting.blocks for n in sites]
    if covered:
        f = constrained_objective(setting, weights, data, dynamic, noise_value)
        before = constrain(params, constraint_of)
        theta, solved = closed_form_m_step(f, before, setting.blocks)
        # Each block raises Q in exact arithmetic; near the maximiser rounding can lower
        # it by a little, and a step that does is not taken (EM stays monotone).
        better = f(theta) <= f(before)
        theta = jax.tree.map(lambda new, old: jnp.where(better, new, old), theta, before)
        new = unconstrain({n: theta[n] for n in covered},
                          {n: constraint_of[n] for n in covered})
        params = {**params, **new}
    rest = sorted(n for n in params if n not in covered)
    if rest:
        objective = m_step_objective(setting, weights, data, dynamic, noise_value)
        fixed = {n: params[n] for n in covered}
        found = minimize(lambda sub: objective({**fixed, **sub}),
                         {n: params[n] for n in rest}, setting.m_step_iterations)
        params = {**params, **found}
    return params, solved


def e_step(setting: Setting, evaluate, previous, temperature, noise_value):
    """The E-step at the current parameters: (the M-step weights, the fit's objective).

    ``evaluate`` is the program's log-joint there, tempered by ``temperature`` T for the
    annealed E-steps (the program under ``numpyro.handlers.scale(model, 1 / T)``); the
    posterior is that program's, and the objective is the untempered one (every term of
    the tempered log-joint times T): the log-likelihood (soft, annealed), the free energy
    (mean-field), the mean energy of the states (hard; -log p, times 2 sigma^2 for a
    float noise). ``previous``: the last E-step's weights (where the mean-field sweeps
    and the coordinate ascent start)."""
    layout = setting.layout
    outside = temperature * _outside(evaluate, layout)
    if setting.e_step in ("soft", "annealed"):
        table = log_joint_table(evaluate, layout, _states(setting))
        posterior, _ = table_posterior(table)
        return posterior, jnp.sum(table_posterior(temperature * table)[1]) + outside
    if setting.e_step == "mean-field":
        mask = unit_mask(layout)
        if setting.route == "pairwise":
            tables = pairwise_tables(evaluate, layout)
            q = mean_field_sweeps(tables, previous, mask, setting.num_sweeps)
            expected = jnp.sum(pairwise_value(tables, q))
        else:
            states = _states(setting)
            table = log_joint_table(evaluate, layout, states)
            q = enumerated_mean_field(table, states, previous, mask, setting.num_sweeps)
            weight = jnp.prod(_gather(q, states), axis=-1)
            expected = jnp.sum(jnp.where(weight > 0, weight * table, 0.0))
        return q, -(temperature * expected + outside + jnp.sum(entropy(q)))
    if setting.route == "enumerate":
        table = log_joint_table(evaluate, layout, _states(setting))
        table = jnp.where(jnp.isnan(table), -jnp.inf, table)
        best = jnp.argmax(table, axis=0)
        states = _states(setting)[best]
        values = jnp.take_along_axis(table, best[None], axis=0)[0]
    else:
        states, values, _ = coordinate_ascent(evaluate, layout, previous,
                                              4 * layout.num_units + 8)
    factor = 2.0 * jnp.square(noise_value) if setting.noise_mode == "float" else 1.0
    return states, -factor * jnp.mean(values)


def enumerated_mean_field(table, states, q, mask, num_sweeps):
    """Mean-field sweeps on an enumerated log-joint (J, N): unit u's field is the
    expectation of L over the other units' q with z_u = v."""
    n, k = q.shape[1], q.shape[2]
    values = jax.nn.one_hot(states, k, dtype=q.dtype)  # (J, n, K)
    mask = jnp.asarray(mask)
    # Impossible joint states (-inf) weigh a finite floor, so that a zero weight times
    # them is zero, not NaN, and a value possible only there gets no probability.
    table = jnp.where(jnp.isnan(table) | jnp.isneginf(table), -1e30, table)

    def update(u, q):
        logs = jnp.log(jnp.where(_gather(q, states) > 0, _gather(q, states), 1e-300))
        logs = logs.at[..., u].set(0.0)
        others = jnp.exp(jnp.sum(logs, axis=-1))  # (J, N)
        field = jnp.einsum("jn,jk,jn->nk", others, values[:, u], table)
        field = jnp.where(mask[u], field, -jnp.inf)
        return q.at[:, u].set(jax.nn.softmax(field, axis=-1))

    def sweep(q, _):
        return jax.lax.fori_loop(0, n, update, q), None

    return jax.lax.scan(sweep, q, None, length=num_sweeps)[0]


def marginals_of(setting: Setting, weights):
    """Per-unit posterior probabilities (N, n, K) from the E-step's weights."""
    layout = setting.layout
    if setting.e_step == "mean-field":
        return weights
    if setting.e_step == "hard":
        return jax.nn.one_hot(weights, layout.max_values)
    values = jax.nn.one_hot(_states(setting), layout.max_values, dtype=weights.dtype)
    return jnp.einsum("jn,juk->nuk", weights, values)


def em_step(rng_key, state, data, params, shard=None, *, setting):
    """One EM iteration for one restart (the engine's step): the M-step on the last
    E-step's weights, then the E-step at the new parameters, which also gives the
    objective there. A start's first iteration is its M-step from random states."""
    del rng_key, shard
    dynamic, noise_value, temperatures, tol = params
    constraint_of = _constraint_of(setting)
    count = temperatures.shape[0]
    temperature = temperatures[jnp.minimum(state.iteration, count - 1)]
    new, solved = m_step(setting, state.params, state.weights, data[0], dynamic, noise_value)
    tempered = setting.e_step in ("annealed", "mean-field")
    evaluate = evaluator(setting, constrain(new, constraint_of), data[0], dynamic, noise_value,
                         temperature if tempered else None)
    weights, value = e_step(setting, evaluate, state.weights,
                            temperature if tempered else 1.0, noise_value)
    change = jnp.abs(state.objective - value) / jnp.maximum(jnp.abs(value), 1e-30)
    settled = jnp.isfinite(state.objective) & (change <= tol)
    if setting.e_step == "hard":
        settled = settled | jnp.all(weights == state.weights)
    converged = settled & (temperature == 1.0)
    return (EMState(new, weights, value, state.iteration + 1),
            EMInfo(value, converged, temperature, ~solved))
