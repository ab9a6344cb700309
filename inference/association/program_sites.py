"""The binary latent sites of any NumPyro program, and the program's energy of their states.

:func:`binary_sites` traces a user's program once and finds the sites that
:func:`inference.association.map_states.map_states` optimises: every latent
``Bernoulli`` site (or the ones named), of any shape, inside plates. The outermost
plate around them is the *example* axis: examples are independent given everything
else, so each example's states are optimised on their own, all examples at once. The
states of one example, over all the sites, are flattened into one vector of ``n``
binary units (:meth:`BinarySites.flatten`), in the order the sites are named.

Every other latent site must be fixed, by the program's arguments or by
``numpyro.handlers.condition``: a latent continuous (or categorical) site left free
is an error naming it, as is a site name that does not exist, a program with no
binary latent site, and an observed site whose rows disagree with the example plate.

:func:`program_energy` returns the energy of flattened states, one value per example,
read from the program's own log-density (a trace with the states substituted), in
the units of the ``noise`` setting:

* ``None``: the sigma -> 0 limit under :class:`inference.program.handlers.noiseless`,
  E = -log p there (for GVQ, ||x - s F||^2); the program needs an observed Gaussian
  site;
* a positive float sigma: E = -2 sigma^2 log p(x, s) with the observed Gaussian
  sites at noise sigma (:class:`inference.program.handlers.observation_noise`);
* ``"program"``: E = -log p(x, s) of the program as written.

Sites outside the example plate (priors of fixed parameters, global factors) add the
same constant to every example's state and are left out of the per-example energy;
one that depends on the binary states would couple the examples, and is an error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers

from inference.program.handlers import (
    NoiselessGaussian,
    map_gaussian,
    noiseless,
    observation_noise,
)

__all__ = ["BinarySites", "binary_sites", "program_energy", "gaussian_observation",
           "run_program", "core_distribution", "latent_samples", "example_plate",
           "check_observed_rows", "per_example_log_density", "handled_program"]

#: Wrappers that keep a distribution's support (unwrapped to find a Bernoulli core).
_WRAPPERS = (dist.Independent, dist.ExpandedDistribution, dist.MaskedDistribution)


def _core(fn):
    while isinstance(fn, _WRAPPERS):
        fn = fn.base_dist
    return fn


def _is_bernoulli(fn) -> bool:
    return isinstance(_core(fn), dist.BernoulliProbs | dist.BernoulliLogits)


@dataclass(frozen=True)
class BinarySites:
    """Where the binary states of one example sit in the program's sites.

    Attributes
    ----------
    names : tuple of str
        The binary sites, in the order their units are flattened.
    plate : str or None
        The example plate (the outermost plate around the sites); ``None``: the
        program holds a single example.
    num_examples : int
    axes : tuple of (int or None)
        Each site's example axis in its value (``None`` without a plate).
    shapes : tuple of tuple
        Each site's shape for one example (the value's shape without the example axis).
    """

    names: tuple
    plate: str | None
    num_examples: int
    axes: tuple
    shapes: tuple

    @property
    def sizes(self) -> tuple:
        return tuple(int(np.prod(shape, dtype=int)) for shape in self.shapes)

    @property
    def num_units(self) -> int:
        """n: the binary units of one example over all the sites."""
        return sum(self.sizes)

    def flatten(self, values: dict) -> jax.Array:
        """Site name -> value, to the (num_examples, n) array of every example's units."""
        parts = []
        for name, axis in zip(self.names, self.axes, strict=True):
            value = jnp.asarray(values[name])
            value = value[None] if axis is None else jnp.moveaxis(value, axis, 0)
            parts.append(value.reshape(self.num_examples, -1))
        return jnp.concatenate(parts, axis=1)

    def unflatten(self, states) -> dict:
        """The inverse of :meth:`flatten`: site name -> value in the site's own shape."""
        out, start = {}, 0
        for name, axis, shape, size in zip(self.names, self.axes, self.shapes, self.sizes,
                                           strict=True):
            part = states[:, start:start + size].reshape(self.num_examples, *shape)
            out[name] = part[0] if axis is None else jnp.moveaxis(part, 0, axis)
            start += size
        return out


def run_program(model, args, kwargs, values=None, rng_seed=0):
    """The trace of ``model(*args, **kwargs)`` with ``values`` substituted (site -> value)."""
    seeded = handlers.seed(model, rng_seed=rng_seed)
    if values:
        seeded = handlers.substitute(seeded, data=values)
    return handlers.trace(seeded).get_trace(*args, **kwargs)


def _latent_samples(trace):
    return {name: site for name, site in trace.items()
            if site["type"] == "sample" and not site["is_observed"]
            and not site.get("infer", {}).get("is_auxiliary", False)}


def binary_sites(model: Callable, args=(), kwargs=None, sites=None) -> BinarySites:
    """Find and check the binary latent sites of ``model(*args, **kwargs)``.

    ``sites``: a site name or a sequence of names; ``None`` takes every latent
    ``Bernoulli`` site. Raises ``ValueError`` naming the site (or ``sites``) for: a
    program with no binary latent site, a named site that does not exist or is not a
    latent Bernoulli site, another latent site left unfixed, binary sites in different
    example plates, and an observed site whose rows disagree with the example plate.
    """
    kwargs = dict(kwargs or {})
    trace = run_program(model, args, kwargs)
    latent = _latent_samples(trace)
    if sites is None:
        names = tuple(name for name, site in latent.items() if _is_bernoulli(site["fn"]))
        if not names:
            raise ValueError("the program has no latent Bernoulli site; map_states looks for "
                             "binary latent sites (numpyro.sample with dist.Bernoulli, not "
                             "observed); latent sites found: "
                             f"{sorted(latent) or 'none'}")
    else:
        names = (sites,) if isinstance(sites, str) else tuple(sites)
        if not names or not all(isinstance(name, str) for name in names):
            raise TypeError(f"sites must be a site name or a sequence of names; got {sites!r}")
        for name in names:
            if name not in trace or trace[name]["type"] != "sample":
                sample_sites = sorted(n for n, s in trace.items() if s["type"] == "sample")
                raise ValueError(f"sites: the program has no sample site {name!r}; its sample "
                                 f"sites are {sample_sites}")
            if name not in latent or not _is_bernoulli(trace[name]["fn"]):
                kind = "observed" if trace[name]["is_observed"] else \
                    type(_core(trace[name]["fn"])).__name__
                raise ValueError(f"sites: site {name!r} is not a latent Bernoulli site "
                                 f"({kind})")
    for name, site in latent.items():
        if name not in names:
            kind = type(_core(site["fn"])).__name__
            raise ValueError(
                f"latent site {name!r} ({kind}) is not fixed: map_states optimises only the "
                f"binary sites {list(names)}; pass its value through the program's arguments "
                "or with numpyro.handlers.condition(model, data={" f"{name!r}: value}})")
    plate, num_examples = _example_plate(trace, names)
    axes, shapes = [], []
    for name in names:
        value = jnp.shape(trace[name]["value"])
        if plate is None:
            axes.append(None)
            shapes.append(tuple(value))
            continue
        site = trace[name]
        frame = next(f for f in site["cond_indep_stack"] if f.name == plate)
        batch_ndim = len(value) - site["fn"].event_dim
        axis = batch_ndim + frame.dim
        axes.append(axis)
        shapes.append(tuple(value[:axis] + value[axis + 1:]))
    _check_observed_rows(trace, plate, num_examples)
    return BinarySites(names, plate, num_examples, tuple(axes), tuple(shapes))


def _example_plate(trace, names):
    """The outermost plate around the binary sites and its size (None, 1 without plates)."""
    outer = {}
    for name in names:
        stack = trace[name]["cond_indep_stack"]
        outer[name] = stack[-1] if stack else None  # innermost first, outermost last
    frames = {frame.name if frame is not None else None for frame in outer.values()}
    if len(frames) > 1:
        described = {name: (f.name if f is not None else "no plate") for name, f in outer.items()}
        raise ValueError("the latent discrete sites must share their outermost plate (the example "
                         f"axis); their outermost plates are {described}")
    frame = next(iter(outer.values()))
    if frame is None:
        return None, 1
    return frame.name, int(frame.size)


def _check_observed_rows(trace, plate, num_examples):
    """An observed site in the example plate must have one row per example."""
    if plate is None:
        return
    for name, site in trace.items():
        if site["type"] != "sample" or not site["is_observed"]:
            continue
        frame = next((f for f in site["cond_indep_stack"] if f.name == plate), None)
        if frame is None:
            continue
        shape = jnp.shape(site["value"])
        axis = len(shape) - site["fn"].event_dim + frame.dim
        rows = shape[axis] if 0 <= axis < len(shape) else 1
        if rows != num_examples:
            raise ValueError(f"observed site {name!r} has {rows} rows along the example "
                             f"plate {plate!r}, which has {num_examples}: the program's "
                             "outermost plate disagrees with the data")


def has_gaussian_observation(trace) -> bool:
    """Whether some observed site has a ``Normal`` core (the noise settings act on it)."""
    return any(site["type"] == "sample" and site["is_observed"]
               and map_gaussian(site["fn"], lambda normal: normal) is not None
               for site in trace.values())


def handled_program(model, noise):
    """The program under the ``noise`` setting and the factor that turns its log-density
    into an energy: (handled model, E = -factor log p)."""
    if noise is None:
        return noiseless(model), 1.0
    if isinstance(noise, str):
        return model, 1.0
    return observation_noise(model, sigma=noise), 2.0 * jnp.square(jnp.asarray(noise))


def _per_example(trace, plate, num_examples, dtype):
    """(sum of each example's log-density terms, the terms outside the example plate)."""
    per_example = jnp.zeros(num_examples, dtype)
    outside = jnp.zeros((), dtype)
    for site in trace.values():
        if site["type"] != "sample":
            continue
        logp = site["fn"].log_prob(site["value"])
        if site["scale"] is not None:
            logp = logp * site["scale"]
        frame = None if plate is None else next(
            (f for f in site["cond_indep_stack"] if f.name == plate), None)
        if plate is None:
            per_example = per_example + jnp.sum(logp)
        elif frame is None:
            outside = outside + jnp.sum(logp)
        else:
            axis = jnp.ndim(logp) + frame.dim
            logp = jnp.moveaxis(jnp.asarray(logp), axis, 0).reshape(num_examples, -1)
            per_example = per_example + jnp.sum(logp, axis=1)
    return per_example, outside


def program_energy(model, args, kwargs, layout: BinarySites, noise, *, with_outside=False):
    """``energy(states)`` -> (num_examples,): the program's energy of the flattened
    binary ``states`` (num_examples, n), in the units of ``noise`` (module docstring).

    Pure and jittable (one trace of the program per call). ``with_outside``: return
    ``(energy, outside)``, ``outside`` the scalar log-density of the sites outside the
    example plate (a check that it does not depend on the states).
    """
    handled, factor = handled_program(model, noise)
    kwargs = dict(kwargs or {})

    def energy(states):
        values = layout.unflatten(states)
        trace = run_program(handled, args, kwargs, values)
        dtype = jnp.result_type(float)
        per_example, outside = _per_example(trace, layout.plate, layout.num_examples, dtype)
        if with_outside:
            return -factor * per_example, outside
        return -factor * per_example

    return energy


def gaussian_observation(model, args, kwargs, layout: BinarySites):
    """The observed Gaussian sites as one directed layer: ``(F, x, misfit)``, with the
    noiseless energy ||x - s F||^2 per example, or ``None`` when the program has no
    observed Gaussian site in the example plate. Jittable.

    F (n, D) is the Jacobian of the sites' means (flattened per example and
    concatenated) with respect to one example's units, x (num_examples, D) the
    observations minus the means at s = 0. ``misfit``: the largest difference between
    the means and x - (x - s F) at three random binary states, relative to their
    scale; F describes the program only when it is small (the means are affine in s).
    """
    kwargs = dict(kwargs or {})

    def parts_at(states):
        trace = run_program(noiseless(model), args, kwargs, layout.unflatten(states))
        values, means = [], []
        for site in trace.values():
            if site["type"] != "sample" or not site["is_observed"]:
                continue
            if not isinstance(_core(site["fn"]), NoiselessGaussian):  # a Normal core
                continue
            loc = jnp.broadcast_to(_core(site["fn"]).loc, jnp.shape(site["value"]))
            value = jnp.asarray(site["value"], loc.dtype)
            frame = None if layout.plate is None else next(
                (f for f in site["cond_indep_stack"] if f.name == layout.plate), None)
            if frame is None:
                if layout.plate is not None:
                    continue  # outside the examples: no part of an example's layer
                values.append(value.reshape(1, -1))
                means.append(loc.reshape(1, -1))
                continue
            axis = jnp.ndim(value) - site["fn"].event_dim + frame.dim
            values.append(jnp.moveaxis(value, axis, 0).reshape(layout.num_examples, -1))
            means.append(jnp.moveaxis(loc, axis, 0).reshape(layout.num_examples, -1))
        if not values:
            return None
        return jnp.concatenate(values, axis=1), jnp.concatenate(means, axis=1)

    dtype = jnp.result_type(float)
    zeros = jnp.zeros((layout.num_examples, layout.num_units), dtype)
    parts = parts_at(zeros)
    if parts is None:
        return None
    observed, at_zero = parts

    def mean_of_first(row):
        return parts_at(zeros.at[0].set(row))[1][0]

    features = jax.jacfwd(mean_of_first)(jnp.zeros(layout.num_units, dtype)).T  # (n, D)
    probe = jax.random.bernoulli(jax.random.key(0), 0.5, (3, *zeros.shape)).astype(dtype)

    def misfit(states):
        expected = at_zero + states @ features
        return jnp.max(jnp.abs(parts_at(states)[1] - expected)) / (
            jnp.max(jnp.abs(expected)) + 1.0)

    return features, observed - at_zero, jnp.max(jax.vmap(misfit)(probe))


# Public names of the helpers that the discrete (categorical and binary) layout of
# :mod:`inference.association.discrete_sites` shares with the binary one.
core_distribution = _core
latent_samples = _latent_samples
example_plate = _example_plate
check_observed_rows = _check_observed_rows
per_example_log_density = _per_example
