"""EM in the sigma -> 0 limit for any NumPyro program with binary latent sites: :func:`fit_map_em`.

The learning rule of Westerdijk and Wiegerinck's GVQ (an E-step that associates every
example with its best binary state, an M-step that refits the parameters to those
states) on a user's own program. The E-step is :func:`inference.map_states` with any
association method; the M-step minimises the mean energy of the examples at their
states over the program's continuous ``numpyro.param`` sites:

* in closed form when that energy is quadratic in the parameters (detected by
  tracing: its second-order expansion matches it at random points), by solving the
  normal equations H delta = -g with the Hessian of the program (a least-squares fit
  for GVQ, with an offset, per-unit weights, whatever the program writes);
* otherwise by L-BFGS (optax) on the parameters in unconstrained space (a
  ``constraint`` on ``numpyro.param`` is honoured), ``m_step_iterations`` steps.

The objective is the mean energy (in the units of ``noise``); with the exhaustive
E-step it never increases. Restarts draw the parameters' initial values from the
program's own initialisers (``numpyro.param(name, init_fn)`` with a callable taking a
key) under a different key, or take ``init_params``; the lowest final objective wins.
The iterations run through the engine (:func:`inference.engine.loop.run`): restarts
side by side, a progress bar, the trace.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree
from numpyro import handlers
from numpyro.distributions import biject_to, constraints

from inference.association.map_states import (
    plan_map_states,
    setup_problem,
    solve_problem,
)
from inference.association.program_sites import program_energy
from inference.engine.loop import Algorithm, run, select, warn_not_converged
from inference.program.kwargs import join_args, split_args, split_model_kwargs
from ppl_models.validation import check_positive_int, check_rng_key

__all__ = ["MapEMResult", "fit_map_em"]

#: Parameters at most for the dense normal equations (else conjugate gradients).
_DENSE_PARAMETERS = 4096
_RTOL = 1e-4


class MapEMResult(NamedTuple):
    """What :func:`fit_map_em` returns (the best restart).

    Attributes
    ----------
    params : dict
        ``numpyro.param`` name -> learned value.
    states : dict
        Binary site name -> the examples' states at the learned parameters.
    objective : float
        The final mean energy.
    converged : bool
    num_iterations : int
    trace : array (num_iterations,)
        Mean energy after every iteration's M-step.
    restart_objectives : array (num_restarts,)
        The final objective of every restart.
    closed_form : bool
        Whether the M-step was solved in closed form (else L-BFGS).
    """

    params: dict
    states: dict
    objective: float
    converged: bool
    num_iterations: int
    trace: jax.Array
    restart_objectives: jax.Array
    closed_form: bool


class _WithParams:
    """``model`` with its ``numpyro.param`` sites set from a first argument (hashable, so
    that the compiled E- and M-steps are the same for every call with this model)."""

    def __init__(self, model):
        self.model = model

    def __call__(self, params, *args, **kwargs):
        return handlers.substitute(self.model, data=params)(*args, **kwargs)

    def __hash__(self):
        return hash((_WithParams, self.model))

    def __eq__(self, other):
        return isinstance(other, _WithParams) and other.model is self.model


class _State(NamedTuple):
    params: dict  # unconstrained values
    states: jax.Array  # (num_examples, n) flat binary states
    objective: jax.Array


class _Info(NamedTuple):
    objective: jax.Array
    converged: jax.Array


def _param_sites(model, args, kwargs, rng_key):
    """name -> (initial value, constraint) of the program's ``numpyro.param`` sites."""
    trace = handlers.trace(handlers.seed(model, rng_seed=rng_key)).get_trace(*args, **kwargs)
    return {name: (site["value"], site["kwargs"].get("constraint", constraints.real))
            for name, site in trace.items() if site["type"] == "param"}


def _constrain(params, constraint_of):
    return {name: biject_to(constraint_of[name])(value) for name, value in params.items()}


def _unconstrain(params, constraint_of):
    return {name: biject_to(constraint_of[name]).inv(value) for name, value in params.items()}


def fit_map_em(model: Callable, *args, method: str = "exact", rng_key=None,
               max_iterations: int = 100, tol: float = 1e-6, num_restarts: int = 1,
               init_params: dict | None = None, noise=None, sites=None,
               method_options: dict | None = None, m_step_iterations: int = 50,
               progress_bar: bool = False, **kwargs) -> MapEMResult:
    """Learn the ``numpyro.param`` sites of ``model(*args, **kwargs)`` by EM in the
    sigma -> 0 limit (or at ``noise``), its binary latent sites the hidden states.

    Parameters
    ----------
    model : callable
        A NumPyro program with binary latent sites (see :func:`inference.map_states`)
        and ``numpyro.param`` sites to learn. Every other latent site must be fixed.
    *args, **kwargs
        The program's arguments (the data among them).
    method : str
        The E-step's association method (:func:`inference.map_states`).
    rng_key : jax.random key
        Draws the restarts' initial parameters (the program's initialisers) and the
        randomised E-steps.
    max_iterations : int
    tol : float
        A restart stops when its states no longer change or the objective's relative
        change falls to ``tol``.
    num_restarts : int
        Independent starts; the lowest final objective is returned.
    init_params : dict, optional
        Initial values of some or all parameters, the same for every restart.
    noise : None, float or "program"
        The energy (as :func:`inference.map_states`): ``None`` the sigma -> 0 limit.
    sites : str or sequence of str, optional
        The binary sites (default every latent Bernoulli site).
    method_options : dict, optional
        Options of the association method.
    m_step_iterations : int
        L-BFGS steps per M-step when it has no closed form.
    progress_bar : bool

    Returns
    -------
    MapEMResult
    """
    if rng_key is None:
        raise ValueError("fit_map_em draws its restarts' initial parameters: pass "
                         "rng_key=jax.random.key(...)")
    check_rng_key(rng_key)
    max_iterations = check_positive_int(max_iterations, "max_iterations")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    m_step_iterations = check_positive_int(m_step_iterations, "m_step_iterations")
    key_init, key_run = jax.random.split(rng_key)
    start_keys = jax.random.split(key_init, num_restarts)
    found = _param_sites(model, args, kwargs, start_keys[0])
    if not found:
        raise ValueError("the program has no numpyro.param site: fit_map_em learns the "
                         "program's parameters, written as numpyro.param(name, init)")
    init_params = dict(init_params or {})
    unknown = sorted(set(init_params) - set(found))
    if unknown:
        raise ValueError(f"init_params: the program has no numpyro.param site {unknown}; its "
                         f"parameters are {sorted(found)}")
    constraint_of = {name: constraint for name, (_, constraint) in found.items()}
    starts = []
    for key in start_keys:
        values = {name: value for name, (value, _) in _param_sites(model, args, kwargs,
                                                                   key).items()}
        values.update({name: jnp.asarray(value) for name, value in init_params.items()})
        starts.append(_unconstrain(values, constraint_of))
    wrapped = _WithParams(model)
    first = _constrain(starts[0], constraint_of)
    plan = plan_map_states(wrapped, (first, *args), kwargs, method=method, noise=noise,
                           sites=sites, options=method_options,
                           rng_key=key_run)
    dynamic, static = split_model_kwargs(kwargs)
    traced, static_args = split_args(args)
    constraints_key = tuple(sorted((name, _ConstraintKey(c)) for name, c in
                                   constraint_of.items()))
    options = dict(model=wrapped, static_args=static_args, static_kwargs=static,
                   layout=plan.layout,
                   noise_mode=plan.noise_mode, solve_mode=plan.solve_mode, route=plan.route,
                   method=method, method_options=plan.options, constraints=constraints_key,
                   m_step_iterations=m_step_iterations)
    closed_form = _is_quadratic(starts[0], traced, dynamic, plan, options)
    options["closed_form"] = closed_form
    algorithm = Algorithm(_em_step, options=tuple(options.items()), name="fit_map_em")
    n, num = plan.layout.num_units, plan.layout.num_examples
    dtype = jnp.result_type(float)
    states0 = _State(jax.tree.map(lambda *v: jnp.stack(v), *starts),
                     jnp.full((num_restarts, num, n), -1, jnp.int32),
                     jnp.full(num_restarts, jnp.inf, dtype))
    params = (dynamic, jnp.asarray(plan.noise_value, dtype), jnp.asarray(plan.solve_noise, dtype),
              jnp.asarray(tol, dtype))
    result = run(algorithm, states0, (traced,), params,
                 keys=jax.random.split(key_run, num_restarts), max_iterations=max_iterations,
                 tol=tol, progress_bar=progress_bar)
    finals = result.state.objective
    best = int(jnp.argmin(jnp.where(jnp.isnan(finals), jnp.inf, finals)))
    state, trace, count, converged = select(result, best)
    warn_not_converged("fit_map_em", converged, max_iterations)
    return MapEMResult(_constrain(state.params, constraint_of),
                       plan.layout.unflatten(state.states), float(state.objective), converged,
                       count, trace.objective, finals, closed_form)


class _ConstraintKey:
    """A constraint as a hashable, comparable option (by identity of the object)."""

    def __init__(self, constraint):
        self.constraint = constraint

    def __hash__(self):
        return id(self.constraint)

    def __eq__(self, other):
        return isinstance(other, _ConstraintKey) and other.constraint is self.constraint

    def __lt__(self, other):
        return id(self.constraint) < id(other.constraint)


def _mean_energy(unconstrained, states, args, kwargs, layout, noise_mode, noise_value,
                 constraint_of, model):
    params = _constrain(unconstrained, constraint_of)
    noise = None if noise_mode is None else ("program" if noise_mode == "program"
                                             else noise_value)
    energy = program_energy(model, (params, *args), kwargs, layout, noise)
    return jnp.mean(energy(states.astype(jnp.result_type(float))))


def _is_quadratic(unconstrained, args, dynamic, plan, options):
    """Whether the mean energy is quadratic in the parameters (all unconstrained), at the
    first start and random binary states: value, gradient and Hessian at a point give it
    exactly at three random other points."""
    if any(not isinstance(key.constraint, type(constraints.real))
           for _, key in options["constraints"]):
        return False
    errors = _quadratic_misfits(unconstrained, args, dynamic, plan.noise_value,
                                model=options["model"], static_args=options["static_args"],
                                static_kwargs=options["static_kwargs"],
                                layout=plan.layout, noise_mode=plan.noise_mode,
                                constraints=options["constraints"])
    return bool(jnp.all(jnp.isfinite(errors)) and float(jnp.max(errors)) <= _RTOL)


@partial(jax.jit, static_argnames=("model", "static_args", "static_kwargs", "layout",
                                   "noise_mode", "constraints"))
def _quadratic_misfits(unconstrained, args, dynamic, noise_value, *, model, static_args,
                       static_kwargs, layout, noise_mode, constraints):
    kwargs = {**dynamic, **dict(static_kwargs)}
    args = join_args(args, static_args)
    constraint_of = {name: key.constraint for name, key in constraints}
    states = jax.random.bernoulli(jax.random.key(1), 0.5,
                                  (layout.num_examples, layout.num_units))
    flat, unravel = ravel_pytree(unconstrained)

    def f(vector):
        return _mean_energy(unravel(vector), states, args, kwargs, layout, noise_mode,
                            noise_value, constraint_of, model)

    value, gradient = jax.value_and_grad(f)(flat)
    directions = jax.random.normal(jax.random.key(2), (3, flat.shape[0]), flat.dtype)
    directions = directions * (1.0 + jnp.abs(flat))

    def misfit(delta):
        curvature = jax.jvp(jax.grad(f), (flat,), (delta,))[1] @ delta
        predicted = value + gradient @ delta + 0.5 * curvature
        actual = f(flat + delta)
        return jnp.abs(actual - predicted) / (1.0 + jnp.abs(actual) + jnp.abs(predicted))

    return jax.vmap(misfit)(directions)


def _em_step(rng_key, state, data, params, shard=None, *, model, static_args, static_kwargs,
             layout,
             noise_mode, solve_mode, route, method, method_options, constraints,
             m_step_iterations, closed_form):
    """One EM iteration for one restart: map_states at the current parameters, then the
    M-step on those states."""
    del shard
    dynamic, noise_value, solve_noise, tol = params
    kwargs = {**dynamic, **dict(static_kwargs)}
    data = join_args(data[0], static_args)
    constraint_of = {name: key.constraint for name, key in constraints}
    current = _constrain(state.params, constraint_of)
    args = (current, *data)
    setup = setup_problem(model, args, kwargs, layout, solve_mode, solve_noise)
    flat, _, _, _ = solve_problem(model, args, kwargs, layout, solve_mode, solve_noise,
                                  rng_key, setup, method=method, route=route,
                                  options=method_options)
    states = flat.astype(jnp.int32)

    def objective(unconstrained):
        return _mean_energy(unconstrained, states, data, kwargs, layout, noise_mode,
                            noise_value, constraint_of, model)

    if closed_form:
        new = _normal_equations(objective, state.params)
    else:
        new = _lbfgs(objective, state.params, m_step_iterations)
    value = objective(new)
    same = jnp.all(states == state.states)
    change = jnp.abs(state.objective - value) / jnp.maximum(jnp.abs(value), 1e-30)
    converged = same | (jnp.isfinite(state.objective) & (change <= tol))
    return _State(new, states, value), _Info(value, converged)


def _normal_equations(objective, params):
    """The minimiser of a quadratic ``objective``: params - H^+ g (a pseudo-inverse, so
    that parameters the states leave undetermined stay where they are)."""
    flat, unravel = ravel_pytree(params)

    def f(vector):
        return objective(unravel(vector))

    gradient = jax.grad(f)(flat)
    if flat.shape[0] <= _DENSE_PARAMETERS:
        hessian = jax.hessian(f)(flat)
        hessian = 0.5 * (hessian + hessian.T)
        values, vectors = jnp.linalg.eigh(hessian)
        cutoff = jnp.max(jnp.abs(values)) * flat.shape[0] * jnp.finfo(flat.dtype).eps * 10
        inverse = jnp.where(values > cutoff, 1.0 / jnp.where(values > cutoff, values, 1.0),
                            0.0)
        delta = -(vectors * inverse) @ (vectors.T @ gradient)
    else:
        def hvp(vector):
            return jax.jvp(jax.grad(f), (flat,), (vector,))[1]

        delta = jax.scipy.sparse.linalg.cg(hvp, -gradient, maxiter=flat.shape[0])[0]
    return unravel(flat + delta)


def _lbfgs(objective, params, num_steps):
    """``num_steps`` of L-BFGS (optax, with its zoom line search) from ``params``."""
    solver = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(objective)

    def body(carry, _):
        params, opt_state = carry
        value, grad = value_and_grad(params, state=opt_state)
        updates, opt_state = solver.update(grad, opt_state, params, value=value, grad=grad,
                                           value_fn=objective)
        return (optax.apply_updates(params, updates), opt_state), None

    (params, _), _ = jax.lax.scan(body, (params, solver.init(params)), None, length=num_steps)
    return params
