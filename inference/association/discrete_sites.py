"""The discrete latent sites of any NumPyro program: binary and categorical, one layout.

:func:`discrete_sites` traces a user's program once and finds the latent sites whose
values are discrete: ``Bernoulli`` (two values), ``Categorical`` (K values) and
``OneHotCategorical`` (K values, written one-hot), of any shape, inside plates, several
per program and mixed. The outermost plate around them is the *example* axis: the
examples are independent given the parameters, so each example's states are
inferred on their own, all examples at once. The states of one example, over all the
sites, are flattened into one vector of ``n`` *units* (:meth:`DiscreteSites.flatten`),
each unit an integer in ``0 .. K_u - 1`` where ``K_u`` is its site's number of values
(:attr:`DiscreteSites.cardinalities`).

:func:`log_joint` returns the program's log-density of flattened states, one value per
example (and the terms outside the example plate), read from the program's own trace
with the states substituted, under a ``noise`` setting: ``"program"`` the program as
written; a positive float sigma, every observed Gaussian site at noise sigma
(:class:`inference.program.handlers.observation_noise`); ``None``, the sigma -> 0 limit
(:class:`inference.program.handlers.noiseless`), where the log-density is minus the
energy.

This is the layout the EM of :func:`inference.fit_em` and the categorical search of
:func:`inference.map_states` work on; the binary-only layout of
:mod:`inference.association.program_sites` stays for the binary association methods.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers

from inference.association.program_sites import (
    check_observed_rows,
    core_distribution,
    example_plate,
    handled_program,
    latent_samples,
    per_example_log_density,
    run_program,
)

__all__ = ["DiscreteSites", "discrete_sites", "discrete_kind", "log_joint",
           "outside_dependence"]

_BERNOULLI = (dist.BernoulliProbs, dist.BernoulliLogits)
_CATEGORICAL = (dist.CategoricalProbs, dist.CategoricalLogits)


def discrete_kind(fn) -> tuple[str, int] | None:
    """``(kind, number of values)`` of a site's distribution: ``("bernoulli", 2)``,
    ``("categorical", K)`` or ``("onehot", K)``; ``None`` for any other distribution."""
    core = core_distribution(fn)
    if isinstance(core, _BERNOULLI):
        return "bernoulli", 2
    if isinstance(core, _CATEGORICAL):
        return "categorical", int(core.probs.shape[-1])
    if "OneHotCategorical" in type(core).__name__ and hasattr(core, "probs"):
        # ppl_models.distributions.OneHotCategorical, or any distribution of that name
        # with ``probs`` (NumPyro itself has none; Pyro's is of this form).
        return "onehot", int(core.probs.shape[-1])
    return None


@dataclass(frozen=True)
class DiscreteSites:
    """Where the discrete states of one example sit in the program's sites.

    Attributes
    ----------
    names : tuple of str
        The discrete sites, in the order their units are flattened.
    kinds : tuple of str
        ``"bernoulli"``, ``"categorical"`` or ``"onehot"`` per site.
    values : tuple of int
        Each site's number of values K (2 for a Bernoulli site).
    plate : str or None
        The example plate; ``None``: the program holds a single example.
    num_examples : int
    axes : tuple of (int or None)
        Each site's example axis in its value (``None`` without a plate).
    shapes : tuple of tuple
        Each site's shape of units for one example (its value's shape without the
        example axis and, for a one-hot site, without the one-hot axis).
    """

    names: tuple
    kinds: tuple
    values: tuple
    plate: str | None
    num_examples: int
    axes: tuple
    shapes: tuple

    @property
    def sizes(self) -> tuple:
        """Units of each site for one example."""
        return tuple(int(np.prod(shape, dtype=int)) for shape in self.shapes)

    @property
    def num_units(self) -> int:
        """n: the discrete units of one example over all the sites."""
        return sum(self.sizes)

    @property
    def cardinalities(self) -> tuple:
        """K_u of every unit, in flattened order (a tuple of n ints)."""
        return tuple(k for k, size in zip(self.values, self.sizes, strict=True)
                     for _ in range(size))

    @property
    def max_values(self) -> int:
        """The largest number of values of a unit (1 without units)."""
        return max(self.values, default=1)

    @property
    def num_joint_states(self) -> int:
        """The joint states of one example's units (a Python int, maybe huge)."""
        total = 1
        for k in self.cardinalities:
            total *= k
        return total

    @property
    def binary(self) -> bool:
        """Whether every site is a Bernoulli site."""
        return all(kind == "bernoulli" for kind in self.kinds)

    def unit_site(self) -> tuple:
        """The index of each unit's site (a tuple of n ints)."""
        return tuple(i for i, size in enumerate(self.sizes) for _ in range(size))

    def flatten(self, values: dict) -> jax.Array:
        """Site name -> value (integers; one-hot for a one-hot site), to the int32
        (num_examples, n) array of every example's units."""
        parts = [jnp.zeros((self.num_examples, 0), jnp.int32)]
        for name, kind, axis in zip(self.names, self.kinds, self.axes, strict=True):
            value = jnp.asarray(values[name])
            if kind == "onehot":
                value = jnp.argmax(value, axis=-1)
            value = value[None] if axis is None else jnp.moveaxis(value, axis, 0)
            parts.append(value.reshape(self.num_examples, -1).astype(jnp.int32))
        return jnp.concatenate(parts, axis=1)

    def unflatten(self, states, dtype=None) -> dict:
        """The inverse of :meth:`flatten`: site name -> value in the site's own shape
        (floats of ``dtype`` for a Bernoulli site, as the binary methods pass them;
        int32 for a categorical site; one-hot floats for a one-hot site)."""
        dtype = dtype or jnp.result_type(float)
        out, start = {}, 0
        for name, kind, k, axis, shape, size in zip(
                self.names, self.kinds, self.values, self.axes, self.shapes, self.sizes,
                strict=True):
            part = states[:, start:start + size].reshape(self.num_examples, *shape)
            if kind == "bernoulli":
                part = part.astype(dtype)
            elif kind == "categorical":
                part = part.astype(jnp.int32)
            else:
                part = jax.nn.one_hot(part, k, dtype=dtype)
            out[name] = part[0] if axis is None else jnp.moveaxis(part, 0, axis)
            start += size
        return out

    def unflatten_marginals(self, marginals) -> dict:
        """Per-unit probabilities (num_examples, n, max_values) to site name -> array:
        for a Bernoulli site the probability of 1, the site's shape with the examples
        first ``(num_examples, *shape)``; for a categorical or one-hot site the probabilities
        of its K values, ``(num_examples, *shape, K)``."""
        out, start = {}, 0
        for name, kind, k, shape, size in zip(self.names, self.kinds, self.values,
                                              self.shapes, self.sizes, strict=True):
            part = marginals[:, start:start + size]
            if kind == "bernoulli":
                out[name] = part[..., 1].reshape(self.num_examples, *shape)
            else:
                out[name] = part[..., :k].reshape(self.num_examples, *shape, k)
            start += size
        return out


def discrete_sites(model: Callable, args=(), kwargs=None, sites=None, *,
                   caller: str = "fit_em", allow_none: bool = False) -> DiscreteSites:
    """Find and check the discrete latent sites of ``model(*args, **kwargs)``.

    ``sites``: a site name or a sequence of names; ``None`` takes every latent
    ``Bernoulli``, ``Categorical`` and ``OneHotCategorical`` site. Raises
    ``ValueError`` naming the site for: a program with no discrete latent site, a named
    site that does not exist or is not a discrete latent site, another latent site left
    free (a continuous latent: learn it as ``numpyro.param`` or fix it), discrete sites
    in different example plates, and an observed site whose rows disagree with the
    example plate. ``caller`` names the function in the messages. ``allow_none``: a
    program without discrete latent sites is no error; its layout has no unit and one
    "example", the whole data set.
    """
    kwargs = dict(kwargs or {})
    trace = run_program(model, args, kwargs)
    latent = latent_samples(trace)
    if sites is None:
        names = tuple(name for name, site in latent.items()
                      if discrete_kind(site["fn"]) is not None)
        if not names and not allow_none:
            raise ValueError(
                f"{caller}: the program has no discrete latent site (numpyro.sample with "
                "dist.Bernoulli, dist.Categorical or dist.OneHotCategorical, not observed); "
                f"latent sites found: {sorted(latent) or 'none'}")
    else:
        names = (sites,) if isinstance(sites, str) else tuple(sites)
        if not names or not all(isinstance(name, str) for name in names):
            raise TypeError(f"sites must be a site name or a sequence of names; got {sites!r}")
        for name in names:
            if name not in trace or trace[name]["type"] != "sample":
                sample_sites = sorted(n for n, s in trace.items() if s["type"] == "sample")
                raise ValueError(f"sites: the program has no sample site {name!r}; its sample "
                                 f"sites are {sample_sites}")
            if name not in latent or discrete_kind(trace[name]["fn"]) is None:
                kind = "observed" if trace[name]["is_observed"] else \
                    type(core_distribution(trace[name]["fn"])).__name__
                raise ValueError(f"sites: site {name!r} is not a discrete latent site "
                                 f"({kind})")
    for name, site in latent.items():
        if name not in names:
            kind = type(core_distribution(site["fn"])).__name__
            raise ValueError(
                f"{caller}: latent site {name!r} ({kind}) is left free: {caller} infers the "
                f"discrete sites {list(names)} and learns numpyro.param sites; write "
                f"{name!r} as numpyro.param to learn it, or fix it through the program's "
                "arguments or numpyro.handlers.condition(model, data={"
                f"{name!r}: value}})")
    if not names:
        return DiscreteSites((), (), (), None, 1, (), ())
    plate, num_examples = example_plate(trace, names)
    kinds, values, axes, shapes = [], [], [], []
    for name in names:
        site = trace[name]
        kind, k = discrete_kind(site["fn"])
        kinds.append(kind)
        values.append(k)
        shape = tuple(jnp.shape(site["value"]))
        if kind == "onehot":
            shape = shape[:-1]
        if plate is None:
            axes.append(None)
            shapes.append(shape)
            continue
        frame = next(f for f in site["cond_indep_stack"] if f.name == plate)
        batch_ndim = len(jnp.shape(site["value"])) - site["fn"].event_dim
        axis = batch_ndim + frame.dim
        axes.append(axis)
        shapes.append(tuple(shape[:axis] + shape[axis + 1:]))
    check_observed_rows(trace, plate, num_examples)
    return DiscreteSites(names, tuple(kinds), tuple(values), plate, num_examples,
                         tuple(axes), tuple(shapes))


def log_joint(model, args, kwargs, layout: DiscreteSites, noise):
    """``log_joint(states) -> (per_example, outside)``: the program's log-density of the
    flattened int ``states`` (num_examples, n) under the ``noise`` setting (module
    docstring), summed per example ((num_examples,)), and the scalar sum of the terms
    outside the example plate. Pure and jittable (one trace of the program per call).
    """
    handled = handled_program(model, noise)[0]
    kwargs = dict(kwargs or {})
    dtype = jnp.result_type(float)

    def evaluate(states):
        trace = run_program(handled, args, kwargs, layout.unflatten(states, dtype))
        return per_example_log_density(trace, layout.plate, layout.num_examples, dtype)

    return evaluate


def outside_dependence(model, args, kwargs, layout: DiscreteSites, rng_key):
    """The sites outside the example plate whose log-density changes with the states."""
    if layout.plate is None or not layout.num_units:
        return []
    cards = np.asarray(layout.cardinalities)
    draws = np.floor(np.asarray(jax.random.uniform(
        rng_key, (3, layout.num_examples, layout.num_units))) * cards).astype(np.int32)
    values = []
    for probe in [np.zeros_like(draws[0]), *draws]:
        trace = handlers.trace(handlers.substitute(handlers.seed(model, rng_seed=0),
                                                   data=layout.unflatten(jnp.asarray(probe))))
        trace = trace.get_trace(*args, **kwargs)
        values.append({name: float(jnp.sum(site["fn"].log_prob(site["value"])))
                       for name, site in trace.items()
                       if site["type"] == "sample" and not any(
                           f.name == layout.plate for f in site["cond_indep_stack"])})
    return sorted(name for name in values[0]
                  if any(abs(v[name] - values[0][name]) > 1e-6 * (1 + abs(values[0][name]))
                         for v in values[1:]))
