"""A NumPyro program's densities on one flat unconstrained vector, for samplers that
need a log prior and a log likelihood separately (:mod:`inference.program.evidence`).

Every discrete latent site is summed out by enumeration; the continuous latent sites
are mapped to one unconstrained vector u. The program's array arguments are traced:
the functions built for one data set are cached per (program, argument signature) and
serve every data set of the same shapes with the same other arguments.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro import handlers
from numpyro.contrib.funsor import config_enumerate
from numpyro.distributions.transforms import biject_to
from numpyro.infer.util import initialize_model, log_density

from ppl_models.validation import check_positive_int, check_rng_key

__all__ = ["ProgramDensities", "finite_or_minus_inf", "program_and_data", "program_densities"]


class ProgramDensities(NamedTuple):
    """A program's densities on one flat unconstrained vector u (:func:`program_densities`).

    Attributes
    ----------
    log_prior : callable u -> float
        log p(theta(u)) + log abs(det(d theta / d u)) of the continuous latent sites.
    log_likelihood : callable u -> float
        log p(x | theta(u)), discrete latent sites summed out (log joint - log prior).
    draw_prior : callable (key, num_particles) -> array (num_particles, dim)
        Draws of u whose density is exp(log_prior).
    unravel : callable u -> dict
        The unconstrained value of every continuous latent site (``ravel_pytree``'s inverse).
    """

    log_prior: Callable
    log_likelihood: Callable
    draw_prior: Callable
    unravel: Callable


def finite_or_minus_inf(value):
    """The value where finite, -inf elsewhere (NaN included): zero weight."""
    return jnp.where(jnp.isfinite(value), value, -jnp.inf)


def _sample_sites(model, args, kwargs, rng_key):
    """(name, observed, discrete, enumerable, distribution) of every sample site of one
    trace, read abstractly (``jax.eval_shape``: nothing is computed)."""
    sites = []

    def read(key):
        trace = handlers.trace(handlers.seed(model, key)).get_trace(*args, **kwargs)
        sites.extend((name, site["is_observed"], site["fn"].is_discrete,
                      site["fn"].has_enumerate_support, type(site["fn"]).__name__)
                     for name, site in trace.items() if site["type"] == "sample")
        return jnp.zeros(())

    jax.eval_shape(read, rng_key)
    return sites


def _unconstrain(params, log_dets):
    """A ``substitute_fn``: theta = T(u) for the sites in ``params``, log |dT/du| kept."""

    def substitute_fn(site):
        if site["type"] != "sample" or site["name"] not in params:
            return None
        u = params[site["name"]]
        transform = biject_to(site["fn"].support)
        value = transform(u)
        log_dets.append(jnp.sum(transform.log_abs_det_jacobian(u, value)))
        return value

    return substitute_fn


def _is_array(leaf):
    return isinstance(leaf, np.ndarray | jax.Array)


class _Arguments(NamedTuple):
    """A program's arguments split into traced arrays and the static rest."""

    dynamic: list          # the array leaves, in order
    merge: Callable        # dynamic leaves -> (args, kwargs)
    signature: object      # hashable: structure, static values, shapes and dtypes (or None)


def _split_arguments(args, kwargs) -> _Arguments:
    """Arrays (numpy or JAX) among the arguments are traced; everything else (ints,
    strings, None, Python floats) is static, part of the compiled program."""
    leaves, treedef = jax.tree.flatten((tuple(args), dict(kwargs)))
    mask = tuple(_is_array(leaf) for leaf in leaves)
    static = tuple(None if m else leaf for m, leaf in zip(mask, leaves, strict=True))
    dynamic = [jnp.asarray(leaf) for leaf, m in zip(leaves, mask, strict=True) if m]

    def merge(values):
        it = iter(values)
        return jax.tree.unflatten(treedef, [next(it) if m else s
                                            for m, s in zip(mask, static, strict=True)])

    signature = (treedef, static, mask, tuple((v.shape, str(v.dtype)) for v in dynamic))
    try:
        hash(signature)
    except TypeError:  # an unhashable static argument: compiled afresh every call
        signature = None
    return _Arguments(dynamic, merge, signature)


class _Program(NamedTuple):
    """A program's densities as functions of (u, data), data = (array arguments, key):
    one per program and argument signature, so that new data of the same shapes reuse
    every compiled function."""

    log_prior: Callable        # (u, data) -> float
    log_likelihood: Callable   # (u, data) -> float
    draw: Callable             # (key, num_particles, data) -> (num_particles, dim), jitted
    unravel: Callable


#: (model, argument signature) -> _Program, most recently used last.
_PROGRAMS: dict = {}
_MAX_PROGRAMS = 32


def _build_program(model, arguments, key_trace, key_init, key_prior) -> _Program:
    # The cached closures hold only ``merge`` (structure and static values), never the
    # first call's arrays: a cached program keeps no data set alive.
    merge = arguments.merge
    args, kwargs = merge(arguments.dynamic)
    sites = _sample_sites(model, args, kwargs, key_trace)
    discrete = [name for name, observed, is_discrete, *_ in sites if is_discrete and not observed]
    for name, observed, is_discrete, enumerable, kind in sites:
        if is_discrete and not observed and not enumerable:
            raise ValueError(
                f"the discrete latent site {name!r} ({kind}) cannot be enumerated (no finite "
                "support); log_evidence sums discrete sites out by enumeration")
    names = sorted(name for name, observed, is_discrete, *_ in sites
                   if not is_discrete and not observed)
    if not names:
        raise ValueError("the program has no continuous latent site: nothing to integrate "
                         "(its evidence is its likelihood)")
    if not any(observed for _, observed, *_ in sites):
        raise ValueError("the program has no observed site: pass the observed data through "
                         "the model's arguments")
    enumerated = config_enumerate(model)
    # A batch of one key: NumPyro then looks for a valid initial point in one compiled
    # loop instead of op by op (seconds less for an enumerated program).
    info = initialize_model(key_init[None], enumerated, model_args=args, model_kwargs=kwargs,
                            validate_grad=False, dynamic_args=True)
    potential_fn = info.potential_fn  # (*args, **kwargs) -> (params -> potential energy)
    u0, unravel = ravel_pytree({name: info.param_info.z[name][0] for name in names})
    visible = set(names)

    def prior_with_key(u, data, key):
        # Only the continuous latent sites are visible: their log density at theta = T(u),
        # each site's transform read from the trace itself (a support may depend on theta),
        # plus log |dT/du| as NumPyro's potential energy adds it.
        args, kwargs = merge(data[0])
        log_dets = []
        program = handlers.substitute(
            handlers.block(handlers.seed(model, key), hide_fn=lambda s: s["name"] not in visible),
            substitute_fn=_unconstrain(unravel(u), log_dets))
        log_p, _ = log_density(program, args, kwargs, {})
        return log_p + sum(log_dets)

    def log_prior(u, data):
        return finite_or_minus_inf(prior_with_key(u, data, data[1]))

    def log_likelihood(u, data):
        args, kwargs = merge(data[0])
        log_joint = -potential_fn(*args, **kwargs)(unravel(u))
        return finite_or_minus_inf(log_joint - prior_with_key(u, data, data[1]))

    if discrete:  # the prior of theta must not move with the discrete draws
        keys = jax.random.split(key_prior, 3)
        first = (arguments.dynamic, key_prior)
        values = np.asarray(jax.jit(jax.vmap(lambda k: prior_with_key(u0, first, k)))(keys))
        if np.all(np.isfinite(values)) and np.ptp(values) > 1e-4 * (1.0 + np.abs(values[0])):
            raise ValueError(
                f"the prior of the continuous latent site(s) {names} depends on the discrete "
                f"site(s) {discrete}: log_evidence needs p(theta) free of them")

    def draw_one(key, data):
        args, kwargs = merge(data[0])
        trace = handlers.trace(handlers.seed(model, key)).get_trace(*args, **kwargs)
        draws = {name: biject_to(trace[name]["fn"].support).inv(trace[name]["value"])
                 for name in names}
        return ravel_pytree(draws)[0]

    @functools.partial(jax.jit, static_argnums=1)
    def draw(key, num_particles, data):
        return jax.vmap(draw_one, in_axes=(0, None))(jax.random.split(key, num_particles), data)

    return _Program(log_prior, log_likelihood, draw, unravel)


def _program(model, arguments, rng_key) -> _Program:
    """The cached :class:`_Program` of ``model`` at these arguments' signature (built,
    checked and cached on first use)."""
    key_trace, key_init, key_prior = jax.random.split(rng_key, 3)
    cache_key = None if arguments.signature is None else (model, arguments.signature)
    try:
        found = _PROGRAMS.pop(cache_key, None) if cache_key is not None else None
    except TypeError:  # an unhashable model object
        cache_key, found = None, None
    if found is None:
        found = _build_program(model, arguments, key_trace, key_init, key_prior)
    if cache_key is not None:
        _PROGRAMS[cache_key] = found
        while len(_PROGRAMS) > _MAX_PROGRAMS:
            _PROGRAMS.pop(next(iter(_PROGRAMS)))
    return found


def program_and_data(model, model_args, model_kwargs, rng_key):
    """The cached :class:`_Program` of ``model`` and its data argument (the arrays among
    the arguments, and the key of the prior's trace)."""
    if not callable(model):
        raise TypeError(f"model must be a NumPyro program (a callable); got {model!r}")
    arguments = _split_arguments(model_args, model_kwargs)
    program = _program(model, arguments, rng_key)
    return program, (arguments.dynamic, jax.random.split(rng_key, 3)[2])


def program_densities(model, *model_args, rng_key, **model_kwargs) -> ProgramDensities:
    """Log prior, log likelihood and prior draws of a program, on a flat unconstrained vector.

    The program is read through NumPyro: every discrete latent site is summed out by
    parallel enumeration (``config_enumerate``), NumPyro's potential energy gives the log
    joint log p(x, theta) + log|J| on the unconstrained space, the log prior of the
    continuous latent sites (same Jacobian) is read from a trace in which only those
    sites are visible, and the log likelihood is their difference. Observed data enter
    through ``model_args`` / ``model_kwargs``: their arrays are traced, so a second call
    with data of the same shapes (and the same other arguments) reuses the functions
    compiled for the first.

    Parameters
    ----------
    model : callable
        The NumPyro program.
    *model_args, **model_kwargs
        Its arguments, the observed data among them.
    rng_key : jax.random key
        Initialises NumPyro (the values it draws do not enter the densities).

    Returns
    -------
    ProgramDensities
        ``(log_prior, log_likelihood, draw_prior, unravel)``; see its attributes.

    Raises
    ------
    ValueError
        When the program has no continuous latent site, no observed site, a discrete
        latent site that cannot be enumerated (named), or a continuous site whose prior
        depends on a discrete one.
    """
    check_rng_key(rng_key)
    program, data = program_and_data(model, model_args, model_kwargs, rng_key)

    def draw_prior(key, num_particles):
        return program.draw(key, check_positive_int(num_particles, "num_particles"), data)

    return ProgramDensities(lambda u: program.log_prior(u, data),
                            lambda u: program.log_likelihood(u, data), draw_prior,
                            program.unravel)
