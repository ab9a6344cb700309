"""EM in the sigma -> 0 limit for any NumPyro program with binary latent sites: :func:`fit_map_em`.

The learning rule of GVQ (M. Westerdijk, D. Barber and W. Wiegerinck, "Deterministic
generative models for fast feature discovery", Data Mining and Knowledge Discovery
5(4), 2001, sec. 3.1: an E-step that associates every example with its best binary
state, an M-step that refits the parameters to those states) on a user's own
program. The E-step is :func:`inference.map_states` with any association method;
the M-step minimises the mean energy of the examples at their states over the
program's continuous ``numpyro.param`` sites:

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

import warnings
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.distributions import constraints

from inference.association.m_step import (
    ConstraintKey,
    Pattern,
    colouring,
    constrain,
    hessian_support,
    lbfgs,
    mean_energy,
    normal_equations,
    quadratic_misfits,
    quadratic_misfits_of,
    unconstrain,
)
from inference.association.map_states import (
    Plan,
    plan_checks,
    plan_decisions,
    plan_map_states,
    setup_problem,
    solve_problem,
)
from inference.engine.loop import Algorithm, run, select, warn_not_converged
from inference.engine.protocol import Trace, follows_protocol
from inference.program.cache import SignatureCache, sites_key
from inference.program.kwargs import freeze_options, join_args, split_args, split_model_kwargs
from ppl_models.diagnostics import NumericalWarning
from ppl_models.validation import check_positive_int, check_rng_key

__all__ = ["MapEMResult", "fit_map_em", "WithParams", "param_sites", "checked_params"]

_RTOL = 1e-4


class _MapEMResultFields(NamedTuple):
    params: dict
    states: dict
    objective: float
    converged: bool
    num_iterations: int
    trace: Trace
    restart_objectives: jax.Array
    closed_form: bool
    num_changed: jax.Array | None = None


@follows_protocol("mean_energy", "min")
class MapEMResult(_MapEMResultFields):
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
    trace : Trace
        ``trace.objective``: the mean energy after every iteration's M-step (a file saved
        when the trace was the bare array loads with it as ``trace.objective``).
    restart_objectives : array (num_restarts,)
        The final objective of every restart.
    closed_form : bool
        Whether the M-step was solved in closed form (else L-BFGS).
    num_changed : int32 array (num_iterations,)
        Examples whose states changed at each iteration's E-step.
    """

    __slots__ = ()

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls, *args, **kwargs)
        if not isinstance(self.trace, Trace):  # a bare array of objectives
            self = self._replace(trace=Trace(self.trace))
        return self


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
    m_step_failed: jax.Array  # the closed form met a Hessian that is not PSD
    pattern_missed: jax.Array  # the Hessian had a non-zero outside the kept pattern
    num_changed: jax.Array  # examples whose states changed


def checked_params(model, args, kwargs, rng_key, init_params, caller):
    """The program's ``numpyro.param`` sites, checked: ((name, ConstraintKey) sorted,
    name -> first value with ``init_params`` in place). Errors name ``caller``."""
    found = _param_sites(model, args, kwargs, rng_key)
    if not found:
        raise ValueError(f"{caller}: the program has no numpyro.param site; {caller} learns "
                         "the program's parameters, written as numpyro.param(name, init)")
    unknown = sorted(set(init_params) - set(found))
    if unknown:
        raise ValueError(f"init_params: the program has no numpyro.param site {unknown}; its "
                         f"parameters are {sorted(found)}")
    constraints_key = tuple(sorted((name, ConstraintKey(constraint))
                                   for name, (_, constraint) in found.items()))
    first = {name: value for name, (value, _) in found.items()}
    first.update(init_params)
    return constraints_key, first


def _param_sites(model, args, kwargs, rng_key):
    """name -> (initial value, constraint) of the program's ``numpyro.param`` sites."""
    trace = handlers.trace(handlers.seed(model, rng_seed=rng_key)).get_trace(*args, **kwargs)
    return {name: (site["value"], site["kwargs"].get("constraint", constraints.real))
            for name, site in trace.items() if site["type"] == "param"}


def fit_map_em(model: Callable, *args, method: str = "exact", rng_key=None,
               max_iterations: int = 100, tol: float = 1e-6, num_restarts: int = 1,
               init_params: dict | None = None, noise=None, sites=None,
               method_options: dict | None = None, m_step: str = "auto",
               m_step_iterations: int = 50, progress_bar: bool = False,
               **kwargs) -> MapEMResult:
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
    m_step : str
        ``"auto"`` (default): in closed form when the mean energy is quadratic in the
        parameters (detected by tracing), else L-BFGS; ``"closed"``: in closed form, an
        error when it is not quadratic; ``"lbfgs"``: L-BFGS always.
    m_step_iterations : int
        L-BFGS steps per M-step when it has no closed form.
    progress_bar : bool

    Returns
    -------
    MapEMResult

    The program's structure (its parameters, binary sites, how the E-step runs, whether
    the M-step has a closed form and the sparsity of its Hessian) is worked out on the
    first call and kept for later calls with the same program and argument shapes; every
    call checks it again at its own values, in the compiled call that draws the initial
    parameters, and works it out afresh where it no longer holds.

    Examples
    --------
    Two features learned from the four binary combinations (exact E-step, closed-form
    M-step):

    >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> def program(x):
    ...     features = numpyro.param("features", jnp.eye(2) + 0.3)
    ...     with numpyro.plate("data", x.shape[0]):
    ...         s = numpyro.sample("s", dist.Bernoulli(0.5).expand([2]).to_event(1))
    ...         numpyro.sample("x", dist.Normal(s @ features, 0.1).to_event(1), obs=x)
    >>> x = jnp.array([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [2.0, 2.0]])
    >>> fit = fit_map_em(program, x, rng_key=jax.random.key(0))
    >>> fit.params["features"].round(3).tolist(), bool(fit.converged), fit.closed_form
    ([[2.0, 0.0], [0.0, 2.0]], True, True)
    """
    if rng_key is None:
        raise ValueError("fit_map_em draws its restarts' initial parameters: pass "
                         "rng_key=jax.random.key(...)")
    check_rng_key(rng_key)
    max_iterations = check_positive_int(max_iterations, "max_iterations")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    m_step_iterations = check_positive_int(m_step_iterations, "m_step_iterations")
    if m_step not in ("auto", "closed", "lbfgs"):
        raise ValueError(f"m_step must be 'auto', 'closed' or 'lbfgs'; got {m_step!r}")
    key_init, key_run = jax.random.split(rng_key)
    start_keys = jax.random.split(key_init, num_restarts)
    init_params = {name: jnp.asarray(value) for name, value in dict(init_params or {}).items()}
    dynamic, static = split_model_kwargs(kwargs)
    traced, static_args = split_args(args)
    wrapped = _WithParams(model)
    key = _fit_key(model, traced, dynamic, static_args, static, init_params,
                   (method, noise, sites, freeze_options(dict(method_options or {})), m_step))
    prepared = _FITS.get(key)
    for attempt in range(2):
        if prepared is None:
            prepared = _prepare(model, args, kwargs, start_keys[0], init_params, method=method,
                                noise=noise, sites=sites, method_options=method_options,
                                m_step=m_step, rng_key=key_run)
        starts, checks, misfits = _starts_and_checks(
            start_keys, traced, dynamic, init_params, prepared.plan.solve_noise,
            model=wrapped, static_args=static_args, static_kwargs=static,
            layout=prepared.plan.layout, noise_mode=prepared.plan.solve_mode,
            constraints=prepared.constraints, check_quadratic=prepared.closed_form)
        if attempt or (plan_decisions(checks) == prepared.plan.decisions
                       and (not prepared.closed_form or _quadratic(misfits))):
            break
        prepared = None  # the kept structure does not hold at these values: work it out
    plan = prepared.plan
    n, num = plan.layout.num_units, plan.layout.num_examples
    dtype = jnp.result_type(float)
    states0 = _State(starts, jnp.full((num_restarts, num, n), -1, jnp.int32),
                     jnp.full(num_restarts, jnp.inf, dtype))
    params = (dynamic, jnp.asarray(plan.noise_value, dtype), jnp.asarray(plan.solve_noise, dtype),
              jnp.asarray(tol, dtype))
    while True:
        _FITS.put(key, prepared)
        options = dict(model=wrapped, static_args=static_args, static_kwargs=static,
                       layout=plan.layout, noise_mode=plan.noise_mode,
                       solve_mode=plan.solve_mode, route=plan.route, method=method,
                       method_options=plan.options, constraints=prepared.constraints,
                       m_step_iterations=m_step_iterations, closed_form=prepared.closed_form,
                       pattern=prepared.pattern)
        algorithm = Algorithm(_em_step, options=tuple(options.items()), name="fit_map_em")
        result = run(algorithm, states0, (traced,), params,
                     keys=jax.random.split(key_run, num_restarts),
                     max_iterations=max_iterations, tol=tol, progress_bar=progress_bar)
        if prepared.pattern is None or not np.any(np.asarray(result.trace.pattern_missed)):
            break
        # A Hessian entry outside the sparsity found at the probes: fit again with the
        # dense Hessian (and keep that for this program).
        prepared = prepared._replace(pattern=None)
    finals = result.state.objective
    best = int(jnp.argmin(jnp.where(jnp.isnan(finals), jnp.inf, finals)))
    state, trace, count, converged = select(result, best)
    if not bool(jnp.isfinite(state.objective)):
        warnings.warn("fit_map_em: every restart ended with a non-finite mean energy; check "
                      "the program's parameters and their initial values", NumericalWarning,
                      stacklevel=2)
    failed = int(np.sum(np.asarray(trace.m_step_failed)))
    if failed:
        warnings.warn(f"fit_map_em: the closed-form M-step met a Hessian that is not positive "
                      f"semi-definite at {failed} of {count} iterations and kept the "
                      "parameters there; pass m_step='lbfgs'", NumericalWarning, stacklevel=2)
    warn_not_converged("fit_map_em", converged, max_iterations)
    constraint_of = {name: c.constraint for name, c in prepared.constraints}
    return MapEMResult(constrain(state.params, constraint_of),
                       plan.layout.unflatten(state.states), float(state.objective), converged,
                       count, trace.objective, finals, prepared.closed_form, trace.num_changed)


class _Prepared(NamedTuple):
    """What a fit works out from the program's structure (kept per program and shapes)."""

    constraints: tuple  # (name, ConstraintKey) of every numpyro.param site, sorted
    plan: Plan  # the E-step's plan at the first start
    closed_form: bool
    pattern: Pattern | None  # the Hessian's sparsity and its columns' colouring


#: Prepared fits of recent calls, by program, argument shapes and settings.
_FITS = SignatureCache(32)


def _fit_key(model, traced, dynamic, static_args, static_kwargs, init_params, settings):
    method, noise, sites, options, m_step = settings
    if isinstance(noise, str):
        return None  # "program": its solve noise is read from the program's values
    settings = (method, noise is None, sites_key(sites), options, m_step)
    return SignatureCache.signature(model, (traced, dynamic, init_params),
                                    (static_args, static_kwargs), settings)


def _prepare(model, args, kwargs, first_key, init_params, *, method, noise, sites,
             method_options, m_step, rng_key) -> _Prepared:
    """Check the program and work out its structure (eagerly, with clear errors)."""
    constraints_key, first = checked_params(model, args, kwargs, first_key, init_params,
                                            "fit_map_em")
    wrapped = _WithParams(model)
    plan = plan_map_states(wrapped, (first, *args), kwargs, method=method, noise=noise,
                           sites=sites, options=method_options, rng_key=rng_key)
    dynamic, static = split_model_kwargs(kwargs)
    traced, static_args = split_args(args)
    constraint_of = {name: c.constraint for name, c in constraints_key}
    unconstrained = unconstrain(first, constraint_of)
    common = dict(model=wrapped, static_args=static_args, static_kwargs=static,
                  layout=plan.layout, noise_mode=plan.noise_mode, constraints=constraints_key)
    real = all(isinstance(c.constraint, type(constraints.real)) for _, c in constraints_key)
    closed_form = False
    if m_step != "lbfgs" and real:
        closed_form = _quadratic(quadratic_misfits(unconstrained, traced, dynamic,
                                                    plan.noise_value, **common))
    if m_step == "closed" and not closed_form:
        raise ValueError("m_step='closed': the program's mean energy is not quadratic in its "
                         f"parameters {sorted(first)} (or some carry a constraint); pass "
                         "m_step='auto' or 'lbfgs'")
    pattern = None
    if closed_form:
        support = hessian_support(unconstrained, traced, dynamic, plan.noise_value, **common)
        pattern = colouring(np.asarray(support))
    return _Prepared(constraints_key, plan, closed_form, pattern)


def _quadratic(misfits) -> bool:
    misfits = np.asarray(misfits)
    return bool(np.all(np.isfinite(misfits)) and np.max(misfits) <= _RTOL)


def _initial_values(keys, args, dynamic, init_params, model, static_args, static_kwargs,
                    constraint_of):
    """The restarts' initial parameters (unconstrained, stacked): the program's own
    initialisers under each key, ``init_params`` in place of some."""
    args = join_args(args, static_args)
    kwargs = {**dynamic, **dict(static_kwargs)}

    def one(key):
        trace = handlers.trace(handlers.seed(model.model, rng_seed=key)).get_trace(*args,
                                                                                    **kwargs)
        values = {name: site["value"] for name, site in trace.items()
                  if site["type"] == "param"}
        values.update(init_params)
        return unconstrain(values, constraint_of)

    return jax.vmap(one)(keys)


@partial(jax.jit, static_argnames=("model", "static_args", "static_kwargs", "layout",
                                   "noise_mode", "constraints", "check_quadratic"))
def _starts_and_checks(keys, args, dynamic, init_params, noise_value, *, model, static_args,
                       static_kwargs, layout, noise_mode, constraints, check_quadratic):
    """The initial parameters, and the checks of the kept structure at the first start:
    the E-step's (:func:`inference.association.map_states.plan_checks`) and the M-step's
    quadratic misfits (zeros when the M-step is L-BFGS)."""
    constraint_of = {name: c.constraint for name, c in constraints}
    starts = _initial_values(keys, args, dynamic, init_params, model, static_args,
                             static_kwargs, constraint_of)
    first = jax.tree.map(lambda leaf: leaf[0], starts)
    full = join_args(args, static_args)
    kwargs = {**dynamic, **dict(static_kwargs)}
    setup = setup_problem(model, (constrain(first, constraint_of), *full), kwargs, layout,
                          noise_mode, noise_value)
    misfits = jnp.zeros(3)
    if check_quadratic:
        misfits = quadratic_misfits_of(first, args, dynamic, noise_value, model, static_args,
                                       static_kwargs, layout, noise_mode, constraint_of)
    return starts, plan_checks(setup), misfits


def _em_step(rng_key, state, data, params, shard=None, *, model, static_args, static_kwargs,
             layout, noise_mode, solve_mode, route, method, method_options, constraints,
             m_step_iterations, closed_form, pattern):
    """One EM iteration for one restart: map_states at the current parameters, then the
    M-step on those states."""
    del shard
    dynamic, noise_value, solve_noise, tol = params
    kwargs = {**dynamic, **dict(static_kwargs)}
    data = join_args(data[0], static_args)
    constraint_of = {name: key.constraint for name, key in constraints}
    current = constrain(state.params, constraint_of)
    args = (current, *data)
    setup = setup_problem(model, args, kwargs, layout, solve_mode, solve_noise)
    flat, _, _, _ = solve_problem(model, args, kwargs, layout, solve_mode, solve_noise,
                                  rng_key, setup, method=method, route=route,
                                  options=method_options)
    states = flat.astype(jnp.int32)

    def objective(unconstrained):
        return mean_energy(unconstrained, states, data, kwargs, layout, noise_mode,
                            noise_value, constraint_of, model)

    missed = jnp.asarray(False)
    if closed_form:
        new, solved, missed = normal_equations(objective, state.params, pattern)
    else:
        new, solved = lbfgs(objective, state.params, m_step_iterations), jnp.asarray(True)
    value = objective(new)
    same = jnp.all(states == state.states)
    change = jnp.abs(state.objective - value) / jnp.maximum(jnp.abs(value), 1e-30)
    converged = same | (jnp.isfinite(state.objective) & (change <= tol))
    changed = jnp.sum(jnp.any(states != state.states, axis=1)).astype(jnp.int32)
    return _State(new, states, value), _Info(value, converged, ~solved, missed, changed)




# Public names for the generic EM of :mod:`inference.em`, which learns the same
# ``numpyro.param`` sites the same way.
WithParams = _WithParams
param_sites = _param_sites
