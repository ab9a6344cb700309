"""The most probable binary states of any NumPyro program: :func:`map_states`.

The association methods of generative vector quantisation (sec. 4 of M. Westerdijk,
D. Barber and W. Wiegerinck, "Deterministic generative models for fast feature
discovery", Data Mining and Knowledge Discovery 5(4), 2001; every method of
:data:`inference.association.base.METHODS`) run on a user's own program, not only
on GVQ: the program is traced, its binary latent sites are found
(:mod:`inference.association.program_sites`), and its energy of their states is read
from its own log-density.

* ``"exact"`` works on any energy: when the energy is quadratic in the binary units
  (checked at random states) the fast exhaustive search over the quadratic form
  (:func:`inference.association.base.exact_search`), else a brute-force search that
  evaluates the program at every one of the 2^n joint states of an example (n <= 24).
* ``"gibbs"`` works on any energy: the quadratic sampler when the program is a
  Gaussian layer x ~ N(s F, sigma) plus a factorised prior (the GVQ case), else
  single-site annealed Gibbs sampling that evaluates the program's energy with each
  unit off and on.
* ``"bp"``, ``"br"``, ``"mf"``, ``"br+mf"``, ``"dbp"``, ``"dbr"``, ``"tabu"`` need the quadratic
  form E = c + h.s + 1/2 s^T W s, read by autodiff; a program whose energy is not
  quadratic gets an error naming its sites and the methods that apply. The directed
  methods (and the quadratic Gibbs sampler) also need an observed Gaussian site whose
  mean is affine in the units, at one noise level, and a prior that couples no two
  units: their graph is that layer's F.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from inference.association.base import (
    MAX_EXACT_FEATURES,
    METHODS,
    AssociationProblem,
    exact_search,
)
from inference.association.discrete_map import has_categorical_sites, map_discrete_states
from inference.association.program_search import brute_force, generic_gibbs
from inference.association.program_sites import (
    BinarySites,
    binary_sites,
    gaussian_observation,
    has_gaussian_observation,
    program_energy,
    run_program,
)
from inference.program.cache import SignatureCache, sites_key
from inference.program.energy import QuadraticEnergy
from inference.program.handlers import map_gaussian
from inference.program.kwargs import freeze_options, join_args, split_args, split_model_kwargs
from ppl_models.distributions import ClippedNormal
from ppl_models.validation import MissingKeyError, check_positive, check_rng_key

__all__ = ["MapStatesResult", "map_states", "Plan", "plan_map_states", "setup_problem",
           "solve_problem", "QUADRATIC_METHODS", "ANY_ENERGY_METHODS"]

#: Methods that work on any energy, and those that need it quadratic in the units.
ANY_ENERGY_METHODS = ("exact", "gibbs")
QUADRATIC_METHODS = ("bp", "br", "mf", "br+mf", "dbp", "dbr", "tabu")
#: Relative misfit above which an energy is not quadratic (or a mean not affine).
_RTOL = 1e-4


class MapStatesResult(NamedTuple):
    """What :func:`map_states` returns.

    Attributes
    ----------
    states : dict
        Site name -> int32 array of the site's shape: the best state found.
    energy : array (num_examples,)
        Its energy, from the program (units of the ``noise`` setting).
    converged : array (num_examples,), bool
        Whether the method reached its stopping rule (always True for ``"exact"``).
    trace : array or None
        Per sweep or iteration of the iterative methods (mean energy for the annealed
        ones); None for ``"exact"``.
    """

    states: dict
    energy: jax.Array
    converged: jax.Array
    trace: jax.Array | None = None


def _check_noise(noise):
    if noise is None or (isinstance(noise, str) and noise == "program"):
        return noise
    if isinstance(noise, str):
        raise ValueError(f"noise must be None (the sigma -> 0 limit), a positive float or "
                         f"'program'; got {noise!r}")
    return float(check_positive(noise, "noise"))


def map_states(model: Callable, *args, method: str = "exact", rng_key=None, noise=None,
               sites=None, method_options: dict | None = None, **kwargs) -> MapStatesResult:
    """The most probable values of the binary latent sites of ``model(*args, **kwargs)``.

    Parameters
    ----------
    model : callable
        Any NumPyro program. Its binary latent sites may have any shape and sit in
        plates; the outermost plate around them is the example axis (examples are
        optimised independently, all at once). Every other latent site must be fixed
        by the arguments or by ``numpyro.handlers.condition``; ``numpyro.param``
        sites keep their values (substitute your own with
        ``numpyro.handlers.substitute``).
    *args, **kwargs
        The program's arguments.
    method : str
        ``"exact"`` or ``"gibbs"`` (any energy); ``"bp"``, ``"br"``, ``"mf"``,
        ``"br+mf"``, ``"dbp"``, ``"dbr"``, ``"tabu"`` (an energy quadratic in the units).
        A program with categorical latent sites (``Categorical``, one-hot; with or
        without Bernoulli sites): ``"exact"`` (every joint state of an example, at most
        65,536 by default, ``method_options={"max_joint_states": ...}``) or ``"icm"``
        (iterated conditional modes from several starts, ``num_starts``,
        ``max_sweeps``); see :mod:`inference.association.discrete_map`.
    rng_key : jax.random key, optional
        Needed by the randomised methods (``"gibbs"``, ``"mf"``, ``"bp"``, ``"br"``,
        ``"br+mf"``, ``"tabu"``).
    noise : None, float or "program"
        ``None``: the sigma -> 0 limit (the program runs under ``noiseless``; it needs
        an observed Gaussian site). A positive float: the MAP state with the observed
        Gaussian sites at that noise, E = -2 noise^2 log p. ``"program"``: the MAP
        state of the program as written, E = -log p (the only choice for a program
        without a Gaussian observation).
    sites : str or sequence of str, optional
        The binary sites to optimise; default every latent ``Bernoulli`` site.
    method_options : dict, optional
        The method's options (e.g. ``num_sweeps`` for ``"gibbs"``, ``chunk_size`` for
        ``"exact"``), as :func:`inference.association.core.associate` takes them.

    Returns
    -------
    MapStatesResult
        ``states`` (site -> array), ``energy`` (per example), ``converged``, ``trace``.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
    >>> def program(x, features):
    ...     with numpyro.plate("data", x.shape[0]):
    ...         s = numpyro.sample("s", dist.Bernoulli(0.5).expand([2]).to_event(1))
    ...         numpyro.sample("x", dist.Normal(s @ features, 0.1).to_event(1), obs=x)
    >>> F = jnp.array([[1.0, 0.0], [0.0, 1.0]])
    >>> x = jnp.array([[0.9, 0.1], [1.1, 0.8]])
    >>> map_states(program, x, F).states["s"].tolist()
    [[1, 0], [1, 1]]
    """
    traced, static_args = split_args(args)
    dynamic, static = split_model_kwargs(kwargs)
    key = _plan_key(model, traced, dynamic, static_args, static, method, noise, sites,
                    method_options)
    plan = _PLANS.get(key)
    cached = plan is not None
    if not cached and (_CATEGORICAL.get(key) or (
            _CATEGORICAL.get(key) is None and _categorical(model, args, kwargs, sites, key))):
        noise = _check_noise(noise)
        if rng_key is not None:
            check_rng_key(rng_key)
        states, energy, converged = map_discrete_states(
            model, args, kwargs, method=method, noise=noise, sites=sites,
            options=method_options, rng_key=rng_key, traced=traced, dynamic=dynamic,
            static_args=static_args, static_kwargs=static)
        return MapStatesResult(states, energy, converged, None)
    noise = _check_call(method, noise, rng_key)
    if not cached:
        plan = plan_map_states(model, args, kwargs, method=method, noise=noise, sites=sites,
                               options=method_options, rng_key=rng_key)
    common = dict(model=model, static_args=static_args, static_kwargs=static,
                  layout=plan.layout)
    solved = _fused(traced, dynamic, plan.solve_noise, rng_key, noise_mode=plan.solve_mode,
                    method=method, route=plan.route, options=plan.options, **common)
    flat, energy, converged, trace, checks = solved
    if cached and plan_decisions(checks) != plan.decisions:
        # The program's checks at these values disagree with the plan made for the
        # same shapes: plan afresh (raising the error that applies, if one does).
        plan = plan_map_states(model, args, kwargs, method=method, noise=noise, sites=sites,
                               options=method_options, rng_key=rng_key)
        flat, energy, converged, trace, _ = _fused(
            traced, dynamic, plan.solve_noise, rng_key, noise_mode=plan.solve_mode,
            method=method, route=plan.route, options=plan.options, **common)
    _PLANS.put(key, plan)
    if plan.solve_mode != plan.noise_mode:  # the energies of the program as written
        energy = _program_energies(traced, dynamic, flat.astype(jnp.result_type(float)),
                                   noise_mode=plan.noise_mode, **common)
    return MapStatesResult(plan.layout.unflatten(flat.astype(jnp.int32)), energy, converged,
                           trace)


#: Plans of recent calls, by program and argument shapes (see :func:`_plan_key`).
_PLANS = SignatureCache(64)
#: Whether the program of a signature has categorical sites (the route of
#: :func:`inference.association.discrete_map.map_discrete_states`).
_CATEGORICAL = SignatureCache(64)


def _categorical(model, args, kwargs, sites, key) -> bool:
    found = has_categorical_sites(run_program(model, args, dict(kwargs or {})), sites)
    _CATEGORICAL.put(key, found)
    return found


def _plan_key(model, traced, dynamic, static_args, static_kwargs, method, noise, sites,
              options):
    """What a plan depends on besides the values of the arrays: the program, its static
    arguments, the structure, shapes and dtypes of its array arguments, and the call's
    settings. None when some part is not hashable, or with ``noise="program"`` (whose
    solve noise is read from the program's values)."""
    if isinstance(noise, str):
        return None
    try:
        settings = (method, noise is None, sites_key(sites),
                    freeze_options(dict(options or {})))
    except TypeError:
        return None
    return SignatureCache.signature(model, (traced, dynamic), (static_args, static_kwargs),
                                    settings)


def _check_call(method, noise, rng_key):
    """The checks of a call's settings that need no trace of the program."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}; got {method!r}")
    noise = _check_noise(noise)
    if METHODS[method].randomized and rng_key is None:
        raise MissingKeyError(f"method {method!r} is randomised: pass rng_key=jax.random.key(...)")
    if rng_key is not None:
        check_rng_key(rng_key)
    return noise


class Plan(NamedTuple):
    """How :func:`map_states` solves a program (:func:`plan_map_states`).

    ``layout``: the binary sites; ``route``: ``"quadratic"`` (a method of
    :data:`METHODS` on the quadratic form), ``"brute"`` (exhaustive, the program
    evaluated) or ``"generic"`` (Gibbs on the program); ``noise_mode``/``noise_value``:
    the energy reported (None, ``"float"`` or ``"program"``); ``solve_mode``/
    ``solve_noise``: the energy solved (the program's own noise for ``"program"``
    with one noise level); ``setup``: the forms at the solve noise; ``options``: the
    method's options, frozen; ``decisions``: the checks' outcomes at the solve noise
    (:func:`plan_decisions`), which a cached plan must meet again.
    """

    layout: BinarySites
    route: str
    noise_mode: str | None
    noise_value: float
    solve_mode: str | None
    solve_noise: float
    setup: Any
    options: tuple
    decisions: tuple = ()


def plan_map_states(model, args, kwargs, *, method, noise, sites=None, options=None,
                    rng_key=None) -> Plan:
    """Check the arguments and the program, and choose how to solve it (see
    :func:`map_states` for the arguments and the errors)."""
    noise = _check_call(method, noise, rng_key)
    options = dict(options or {})
    spec = METHODS[method]
    kwargs = dict(kwargs or {})
    layout = binary_sites(model, args, kwargs, sites)
    if noise != "program" and not has_gaussian_observation(run_program(model, args, kwargs)):
        raise ValueError(
            f"noise={noise!r} sets the noise of the program's observed Gaussian sites, and "
            "the program has none; pass noise='program' for the MAP state of the program as "
            "written")
    dynamic, static = split_model_kwargs(kwargs)
    traced, static_args = split_args(args)
    noise_mode = None if noise is None else ("program" if noise == "program" else "float")
    noise_value = noise if isinstance(noise, float) else 1.0
    common = dict(model=model, static_args=static_args, static_kwargs=static, layout=layout)
    setup, checks = _setup(traced, dynamic, noise_value, noise_mode=noise_mode, **common)
    outside_ok, quadratic, _, _ = decisions = plan_decisions(checks)
    if not outside_ok:
        raise ValueError("a site outside the example plate depends on the binary sites "
                         f"{list(layout.names)}: the examples are coupled, and map_states "
                         "needs them independent given the other sites")
    solve_setup, solve_mode, solve_noise = setup, noise_mode, noise_value
    if noise == "program" and quadratic:
        # With one noise sigma_0 on every observed Gaussian site, -log p is the energy at
        # noise sigma_0 divided by 2 sigma_0^2: the quadratic methods run on that problem
        # (its Gaussian layer and annealing family), the energies reported stay -log p.
        sigma0 = _uniform_noise(run_program(model, args, kwargs))
        if sigma0 is not None:
            solve_mode, solve_noise = "float", sigma0
            solve_setup, checks = _setup(traced, dynamic, solve_noise, noise_mode=solve_mode,
                                         **common)
            decisions = plan_decisions(checks)
    directed, factorised = decisions[2], decisions[3]
    n = layout.num_units
    if method in QUADRATIC_METHODS and not quadratic:
        raise ValueError(
            f"method {method!r} needs an energy quadratic in the binary sites "
            f"{list(layout.names)}, and the program's is not (the quadratic form misses it "
            f"by {float(setup.misfit):.3g} of its scale); methods that apply: "
            f"{list(ANY_ENERGY_METHODS)}")
    if method in ("dbp", "dbr") and not factorised:
        others = [m for m in (*ANY_ENERGY_METHODS, *QUADRATIC_METHODS) if m not in ("dbp", "dbr")]
        raise ValueError(
            f"method {method!r} runs on a directed graph: an observed Gaussian site whose "
            f"mean is affine in the binary sites {list(layout.names)}, one noise level, and "
            "a prior that couples no two units; the program's energy is not of that form "
            f"(under noise={noise!r}); methods that apply: {others}")
    if method == "exact" and n > MAX_EXACT_FEATURES:
        raise ValueError(f"method 'exact' searches all 2^n joint states of an example; the "
                         f"binary sites {list(layout.names)} hold n = {n} units per example, "
                         f"more than {MAX_EXACT_FEATURES}")
    if spec.validate is not None:
        spec.validate(solve_setup.layer[0] if directed else jnp.zeros((n, 1)), options)
    if method == "gibbs" and not (quadratic and factorised):
        route = "generic"
    elif method == "exact" and not quadratic:
        route = "brute"
    else:
        route = "quadratic"
    if route != "quadratic" and solve_mode != noise_mode:
        solve_setup, solve_mode, solve_noise = setup, noise_mode, noise_value
        decisions = plan_decisions(plan_checks(setup))
    return Plan(layout, route, noise_mode, noise_value, solve_mode, solve_noise, solve_setup,
                freeze_options(options), decisions)


class _Setup(NamedTuple):
    quadratic: QuadraticEnergy  # the target energy's quadratic form
    misfit: jax.Array  # its largest error at random states, relative to scale
    limit: QuadraticEnergy | None  # the sigma -> 0 form (None without a Gaussian site)
    at_one: QuadraticEnergy | None  # the form at noise 1
    layer: tuple | None  # (F, x, misfit) of the observed Gaussian sites
    outside_change: jax.Array
    energy_scale: jax.Array


def _energy_of(model, args, kwargs, layout, noise_mode, noise_value):
    noise = None if noise_mode is None else ("program" if noise_mode == "program"
                                             else noise_value)
    return program_energy(model, args, kwargs, layout, noise)


def _quadratic_form(energy, num_examples, n, dtype):
    """(h, W, c) of ``energy`` by autodiff at s = 0 (W from the first example)."""
    zeros = jnp.zeros((num_examples, n), dtype)
    constant = energy(zeros)
    gradient = jax.grad(lambda s: jnp.sum(energy(s)))(zeros)
    hessian = jax.hessian(lambda row: energy(zeros.at[0].set(row))[0])(jnp.zeros(n, dtype))
    hessian = 0.5 * (hessian + hessian.T)
    diagonal = jnp.diagonal(hessian)
    return QuadraticEnergy(gradient + 0.5 * diagonal, hessian - jnp.diag(diagonal), constant)


@partial(jax.jit, static_argnames=("model", "static_args", "static_kwargs", "layout",
                                   "noise_mode"))
def _setup(args, dynamic, noise_value, *, model, static_args, static_kwargs, layout,
           noise_mode):
    setup = setup_problem(model, join_args(args, static_args),
                          {**dynamic, **dict(static_kwargs)}, layout, noise_mode, noise_value)
    return setup, plan_checks(setup)


def plan_checks(setup: _Setup) -> jax.Array:
    """The checks' measures, each passed at or below 1: the coupling of the examples
    through sites outside their plate, the quadratic form's misfit, the Gaussian layer's
    misfit (its mean affine in the units), and the excess of the annealing family's
    couplings over the layer's (a prior that couples no two units). Jittable."""
    outside = setup.outside_change / (_RTOL * (1.0 + setup.energy_scale))
    quadratic = setup.misfit / _RTOL
    if setup.layer is None:
        return jnp.stack([outside, quadratic, jnp.inf, jnp.inf])
    features = setup.layer[0]
    gaussian = 2.0 * features @ features.T
    gaussian = gaussian - jnp.diag(jnp.diagonal(gaussian))
    bound = _RTOL * (1.0 + jnp.max(jnp.abs(gaussian)))
    excess = jnp.max(jnp.stack([jnp.max(jnp.abs(form.couplings - gaussian))
                                for form in (setup.quadratic, setup.limit, setup.at_one)]))
    return jnp.stack([outside, quadratic, setup.layer[2] / _RTOL, excess / bound])


def plan_decisions(checks) -> tuple:
    """(examples independent, energy quadratic, Gaussian layer affine, prior
    factorised) from :func:`plan_checks`' measures (a NaN fails its check)."""
    values = np.asarray(checks)
    passed = [bool(v <= 1.0) for v in values]
    return passed[0], passed[1], passed[2], passed[2] and passed[3] and passed[1]


def setup_problem(model, args, kwargs, layout, noise_mode, noise_value) -> _Setup:
    """The program's quadratic forms, its Gaussian layer and the checks' misfits (pure,
    jittable; :func:`map_states` and the EM drivers decide from them how to solve)."""
    dtype = jnp.result_type(float)
    n, num = layout.num_units, layout.num_examples
    energy = _energy_of(model, args, kwargs, layout, noise_mode, noise_value)
    form = _quadratic_form(energy, num, n, dtype)
    probe = jax.random.bernoulli(jax.random.key(0), 0.5, (8, num, n)).astype(dtype)
    exact = jax.vmap(energy)(probe)
    approx = jax.vmap(form)(probe)
    scale = jnp.max(jnp.abs(exact)) + 1.0
    misfit = jnp.max(jnp.abs(exact - approx)) / scale
    misfit = jnp.where(jnp.isfinite(misfit), misfit, jnp.inf)
    outside = program_energy(model, args, kwargs, layout, "program", with_outside=True)
    outs = jax.vmap(lambda s: outside(s)[1])(jnp.concatenate([probe, jnp.zeros_like(probe[:1])]))
    outside_change = jnp.max(jnp.abs(outs - outs[-1]))
    layer = gaussian_observation(model, args, kwargs, layout)
    limit = at_one = None
    if layer is not None:
        limit = _quadratic_form(program_energy(model, args, kwargs, layout, None), num, n, dtype)
        at_one = _quadratic_form(program_energy(model, args, kwargs, layout, 1.0), num, n,
                                 dtype)
    return _Setup(form, misfit, limit, at_one, layer, outside_change, scale)


def _uniform_noise(trace):
    """The one noise sigma_0 of every observed Gaussian site of the program, or None."""
    scales = []
    for site in trace.values():
        if site["type"] == "sample" and site["is_observed"]:
            found = map_gaussian(site["fn"], lambda normal: normal)
            if found is not None:
                scales.append(np.asarray(_normal_scale(site["fn"])).ravel())
    if not scales:
        return None
    scales = np.concatenate(scales)
    if not np.all(scales == scales[0]) or not scales[0] > 0:
        return None
    return float(scales[0])


def _normal_scale(fn):
    while not isinstance(fn, dist.Normal | ClippedNormal):
        fn = fn.base_dist
    if isinstance(fn, ClippedNormal):
        return np.nan
    return fn.scale


@partial(jax.jit, static_argnames=("model", "static_args", "static_kwargs", "layout",
                                   "noise_mode"))
def _program_energies(args, dynamic, states, *, model, static_args, static_kwargs, layout,
                      noise_mode):
    kwargs = {**dynamic, **dict(static_kwargs)}
    return _energy_of(model, join_args(args, static_args), kwargs, layout, noise_mode,
                      1.0)(states)


@partial(jax.jit, static_argnames=("model", "static_args", "static_kwargs", "layout",
                                   "noise_mode", "method", "route", "options"))
def _fused(args, dynamic, noise_value, rng_key, *, model, static_args, static_kwargs, layout,
           noise_mode, method, route, options):
    """The forms, the checks and the method in one compiled call: (flat states,
    energies, converged, trace, the checks' measures)."""
    args = join_args(args, static_args)
    kwargs = {**dynamic, **dict(static_kwargs)}
    setup = setup_problem(model, args, kwargs, layout, noise_mode, noise_value)
    solved = solve_problem(model, args, kwargs, layout, noise_mode, noise_value, rng_key,
                           setup, method=method, route=route, options=options)
    return (*solved, plan_checks(setup))


def solve_problem(model, args, kwargs, layout, noise_mode, noise_value, rng_key, setup, *,
                  method, route, options):
    """Run ``method`` by ``route`` (``"quadratic"``, ``"brute"`` or ``"generic"``) on the
    program; returns (flat states, energies, converged, trace). Pure and jittable."""
    energy = _energy_of(model, args, kwargs, layout, noise_mode, noise_value)
    options = dict(options)
    dtype = jnp.result_type(float)
    if route == "brute":
        states = brute_force(energy, layout.num_examples, layout.num_units, dtype,
                              options.get("chunk_size"))
        return states, energy(states.astype(dtype)), jnp.ones(layout.num_examples, bool), None
    if route == "generic":
        return generic_gibbs(energy, rng_key, layout.num_examples, layout.num_units, dtype,
                              **options)
    if method == "exact":
        states, _ = exact_search(setup.quadratic, chunk_size=options.get("chunk_size"))
        return states, energy(states.astype(dtype)), jnp.ones(layout.num_examples, bool), None
    if setup.layer is not None:
        features, x = setup.layer[0], setup.layer[1]
        limit, slope = setup.limit, jax.tree.map(jnp.subtract, setup.at_one, setup.limit)
    else:  # no Gaussian layer: a fixed energy, annealed in temperature only
        n = layout.num_units
        features, x = jnp.zeros((n, 1), dtype), jnp.zeros((layout.num_examples, 1), dtype)
        limit, slope = setup.quadratic, jax.tree.map(jnp.zeros_like, setup.quadratic)
    problem = AssociationProblem(setup.quadratic, features, x, limit, slope,
                                 lambda s: energy(s.astype(dtype)))
    result = METHODS[method].run(problem, rng_key=rng_key, **options)
    return result.states, result.energy, result.converged, result.trace
