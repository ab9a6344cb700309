"""The chains of the zoo's MCMC baselines as ``arviz.InferenceData``: :func:`to_inference_data`.

Every MCMC baseline (GVQ, clipped Gaussian, mixture, PPCA, MCVQ's PSIS-LOO) runs its
chains through :func:`inference.engine.mcmc.run_nuts`, not NumPyro's ``MCMC`` object,
and keeps what ``arviz.from_numpyro`` reads of such an object as a :class:`NUTSDraws`
(:func:`nuts_draws`): the post-warm-up draws, NumPyro's extra fields per draw
(:data:`SAMPLE_STATS`), the program's arguments, the program's name and the dimension
names of its sites. The record is plain arrays and names, so a result that holds it
saves and loads (:mod:`inference.engine.persistence`). :func:`to_inference_data` is
the one conversion: ``arviz.from_numpyro`` on a stand-in for the ``MCMC`` object, and
the ``log_likelihood`` group from :func:`pointwise_log_likelihood` (enumerated discrete
sites summed out), so ``arviz.loo``, ``arviz.compare``, ``arviz.summary`` and
``arviz.plot_trace`` run on every baseline alike.
"""

from __future__ import annotations

from functools import lru_cache, partial
from types import SimpleNamespace
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["NUTSDraws", "SAMPLE_STATS", "nuts_draws", "pointwise_log_likelihood",
           "resolve_program", "to_inference_data"]

#: NumPyro's extra fields (the names of ``MCMC.get_extra_fields``) kept per draw, as
#: ``arviz.from_numpyro`` reads them into ``sample_stats`` (``potential_energy`` as ``lp``,
#: its negative; ``num_steps`` as ``n_steps`` and ``tree_depth``; ``accept_prob`` as
#: ``acceptance_rate``; the step size as ``step_size``).
SAMPLE_STATS = ("diverging", "energy", "potential_energy", "num_steps", "accept_prob",
                "adapt_state.step_size")
#: Packages whose programs a saved :class:`NUTSDraws` may name (as persistence trusts them).
_TRUSTED_PACKAGES = ("inference", "ppl_models")


class NUTSDraws(NamedTuple):
    """The post-warm-up chains of an MCMC baseline: what ``arviz.from_numpyro`` reads.

    NumPyro's ``MCMC`` object holds the draws, its extra fields, the program and its
    arguments; this record holds the same pieces as arrays and names, so that a result
    keeps them, saves them (:mod:`inference.engine.persistence`) and converts them by
    :func:`to_inference_data`.

    Attributes
    ----------
    samples : dict of arrays (num_chains, num_samples, ...)
        The ``posterior`` group: the program's latent sites.
    sample_stats : dict of arrays (num_chains, num_samples)
        NumPyro's extra fields :data:`SAMPLE_STATS`.
    model_args : tuple
        The program's positional arguments (the data).
    model_kwargs : dict
        Its keyword arguments (arrays, numbers, strings, None, tuples).
    program : str
        ``"module:qualified.name"`` of the program in ``inference`` or ``ppl_models``;
        ``""`` when it has none (then :func:`to_inference_data` needs ``model=``).
    dims : dict
        Variable (site) name -> names of its dimensions after (chain, draw).
    """

    samples: dict
    sample_stats: dict
    model_args: tuple
    model_kwargs: dict
    program: str
    dims: dict


def _program_name(model):
    """(``"module:qualname"`` or ``""``, the keywords of the functools.partial it unwraps)."""
    keywords = {}
    while isinstance(model, partial) and not model.args:
        keywords = {**model.keywords, **keywords}
        model = model.func
    module, name = getattr(model, "__module__", None), getattr(model, "__qualname__", None)
    if isinstance(module, str) and isinstance(name, str):
        try:
            if resolve_program(f"{module}:{name}") is model:
                return f"{module}:{name}", keywords
        except ValueError:
            pass
    return "", keywords


def resolve_program(program: str):
    """The program a :class:`NUTSDraws` names (``"module:qualified.name"``).

    Only modules of ``inference`` and ``ppl_models`` are imported; anything else (or a
    name that is not there) raises ``ValueError``.
    """
    import importlib

    module, _, name = program.partition(":")
    if not name or module.split(".")[0] not in _TRUSTED_PACKAGES:
        raise ValueError(f"the chains' program {program!r} is not a program of "
                         f"{' or '.join(_TRUSTED_PACKAGES)}: pass model= (the program the "
                         "chains sampled)")
    try:
        value = importlib.import_module(module)
        for part in name.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError):
        raise ValueError(f"the chains' program {program!r} does not exist in this version: "
                         "pass model= (the program the chains sampled)") from None
    return value


def nuts_draws(chains, num_warmup: int, model, model_args=(), model_kwargs=None, *,
               samples=None, dims=None) -> NUTSDraws:
    """The :class:`NUTSDraws` of :func:`run_nuts`'s ``chains`` after ``num_warmup`` iterations.

    Parameters
    ----------
    chains : inference.engine.mcmc.Chains
    num_warmup : int
        Iterations dropped from the front of every chain.
    model : callable
        The program the chains sampled (a ``functools.partial`` is unwrapped: its keywords
        join ``model_kwargs``).
    model_args, model_kwargs
        Its arguments, static and traced alike.
    samples : dict of arrays (num_chains, num_samples, ...), optional
        The posterior draws (default: the kept ``chains.z``), e.g. relabelled ones.
    dims : dict, optional
        Variable name -> dimension names (:class:`NUTSDraws`).
    """
    program, keywords = _program_name(model)
    if samples is None:
        samples = {name: value[:, num_warmup:] for name, value in chains.z.items()}
    stats = dict(zip(SAMPLE_STATS, (chains.diverging, chains.energy, chains.potential_energy,
                                    chains.num_steps, chains.accept_prob, chains.step_size),
                     strict=True))
    return NUTSDraws(
        samples={name: np.asarray(value) for name, value in samples.items()},
        sample_stats={name: np.asarray(value[:, num_warmup:]) for name, value in stats.items()
                      if value is not None},
        model_args=tuple(model_args), model_kwargs={**keywords, **dict(model_kwargs or {})},
        program=program, dims={name: list(names) for name, names in (dims or {}).items()})


class _RecordedMCMC:
    """What ``arviz.from_numpyro`` reads of ``numpyro.infer.MCMC``, from a :class:`NUTSDraws`."""

    thinning = 1

    def __init__(self, draws: NUTSDraws, model):
        self.sampler = SimpleNamespace(model=model)
        self._args, self._kwargs = tuple(draws.model_args), dict(draws.model_kwargs)
        self._samples, self._fields = draws.samples, draws.sample_stats
        self.num_chains, self.num_samples = np.shape(next(iter(draws.samples.values())))[:2]

    @staticmethod
    def _group(values, group_by_chain):
        return {name: np.asarray(v) if group_by_chain else np.reshape(v, (-1, *np.shape(v)[2:]))
                for name, v in values.items()}

    def get_samples(self, group_by_chain=False):
        return self._group(self._samples, group_by_chain)

    def get_extra_fields(self, group_by_chain=False):
        return self._group(self._fields, group_by_chain)


class _Facts(NamedTuple):
    observed: tuple  # observed sites, in program order
    enumerated: bool  # some site marked for parallel enumeration
    plate_ndim: int  # plate dimensions of the first observed site


def _trace(model, key, model_args, dynamic, static, data=None, enumerate_from=None):
    from numpyro import handlers
    from numpyro.contrib.funsor import enum

    program = model if data is None else handlers.substitute(model, data=data)
    if enumerate_from is not None:
        program = enum(program, first_available_dim=enumerate_from)
    if key is not None:
        program = handlers.seed(program, key)
    return handlers.trace(program).get_trace(*model_args, **dynamic, **dict(static))


@lru_cache(maxsize=64)
def _facts(model, static, avals) -> _Facts:
    """What the program's trace says of its sites (traced abstractly, once per program,
    structural arguments and shapes ``avals``)."""
    found = []

    def look(model_args, dynamic):
        trace = _trace(model, jax.random.PRNGKey(0), model_args, dynamic, static)
        sites = [site for site in trace.values() if site["type"] == "sample"]
        observed = [site for site in sites if site["is_observed"]]
        found.append(_Facts(
            tuple(site["name"] for site in observed),
            any(site["infer"].get("enumerate") == "parallel" for site in sites),
            max((-f.dim for f in observed[0]["cond_indep_stack"]), default=0) if observed
            else 0))
        return 0

    jax.eval_shape(look, avals[0], dict(avals[1]))
    return found[0]


@partial(jax.jit, static_argnames=("model", "static"))
def _observations(model_args, dynamic, *, model, static):
    """The observed sites' values (a trace of the program, its latent sites drawn)."""
    trace = _trace(model, jax.random.PRNGKey(0), model_args, dynamic, static)
    return {name: site["value"] for name, site in trace.items()
            if site["type"] == "sample" and site["is_observed"]}


def _log_likelihood_one(sites, model_args, dynamic, *, model, static, facts):
    if not facts.enumerated:  # as numpyro.infer.log_likelihood
        trace = _trace(model, None, model_args, dynamic, static, data=sites)
        return {name: trace[name]["fn"].log_prob(trace[name]["value"])
                for name in facts.observed}
    trace = _trace(model, None, model_args, dynamic, static, data=sites,
                   enumerate_from=-facts.plate_ndim - 1)
    terms = [site["fn"].log_prob(site["value"]) for site in trace.values()
             if site["type"] == "sample" and (site["is_observed"] or site["infer"].get(
                 "enumerate") == "parallel")]
    total = sum(jnp.broadcast_arrays(*terms))
    summed = jax.nn.logsumexp(total, axis=tuple(range(total.ndim - facts.plate_ndim)))
    return {facts.observed[0]: summed}


@partial(jax.jit, static_argnames=("model", "static", "facts"))
def _log_likelihood_draws(flat, model_args, dynamic, *, model, static, facts):
    one = partial(_log_likelihood_one, model=model, static=static, facts=facts)
    return jax.lax.map(lambda sites: one(sites, model_args, dynamic), flat, batch_size=16)


def _split(draws: NUTSDraws):
    """(model_args as arrays, dynamic kwargs, static kwargs, abstract values for _facts)."""
    from inference.program.kwargs import split_model_kwargs

    dynamic, static = split_model_kwargs(draws.model_kwargs)
    model_args = jax.tree.map(jnp.asarray, tuple(draws.model_args))
    dynamic = jax.tree.map(jnp.asarray, dynamic)
    aval = partial(jax.tree.map, lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype))
    avals = (aval(model_args), tuple((name, aval(v)) for name, v in dynamic.items()))
    return model_args, dynamic, static, avals


def pointwise_log_likelihood(draws: NUTSDraws, model=None) -> dict:
    """log p(observation | draw) of every observed site, per draw and plate entry.

    NumPyro's ``log_likelihood`` for the draws of a program without enumerated sites
    (one entry per observed site). Where discrete sites are marked for parallel
    enumeration (NumPyro's ``log_likelihood`` would need them sampled), they are summed
    out instead: under NumPyro's ``enum`` handler the log densities of the enumerated and
    the observed sites are added and reduced by log-sum-exp over the enumeration
    dimensions, leaving the plate dimensions of the first observed site, under whose name
    the result goes. The enumerated sites must be local to the plate entries (one per
    example, as the units of GVQ and the labels of the mixture are).

    Parameters
    ----------
    draws : NUTSDraws
    model : callable, optional
        The program (default: the one ``draws.program`` names).

    Returns
    -------
    dict of arrays (num_chains, num_samples, plate shape...)
    """
    model = resolve_program(draws.program) if model is None else model
    model_args, dynamic, static, avals = _split(draws)
    facts = _facts(model, static, avals)
    lead = np.shape(next(iter(draws.samples.values())))[:2]
    flat = {name: jnp.reshape(jnp.asarray(v), (-1, *np.shape(v)[2:]))
            for name, v in draws.samples.items()}
    values = _log_likelihood_draws(flat, model_args, dynamic, model=model, static=static,
                                   facts=facts)
    return {name: np.asarray(v).reshape(*lead, *np.shape(v)[1:]) for name, v in values.items()}


def _replay(observed: dict):
    """A program of the observed sites alone, with the values ``observed`` holds: what
    ``arviz.from_numpyro`` traces for ``observed_data`` (the program itself, traced
    eagerly with its latent sites drawn, costs seconds of one-off compilations)."""
    import numpyro
    import numpyro.distributions as dist

    def program(*args, **kwargs):
        for name, value in observed.items():
            numpyro.sample(name, dist.Delta(value, event_dim=np.ndim(value)), obs=value)

    return program


def to_inference_data(draws: NUTSDraws | None, model=None, *, log_likelihood=None,
                      coords=None, result=None):
    """An ``arviz.InferenceData`` of the chains, built by ``arviz.from_numpyro``.

    Groups: ``posterior`` (``draws.samples``), ``sample_stats`` (NumPyro's extra fields:
    ``diverging``, ``energy``, ``lp``, ``n_steps``, ``tree_depth``, ``acceptance_rate``,
    ``step_size``), ``log_likelihood`` (per observation of the observed site,
    :func:`pointwise_log_likelihood`), ``observed_data``, with the named dimensions ``draws.dims``.
    ``arviz.from_numpyro`` reads the draws, the extra fields and the observations through
    a stand-in for NumPyro's ``MCMC`` object (the chains ran through :func:`run_nuts`);
    the program is evaluated by compiled traces of it, once per program and shapes.

    Parameters
    ----------
    draws : NUTSDraws
    model : callable, optional
        The program (default: the one ``draws.program`` names).
    log_likelihood : dict of arrays (num_chains, num_samples, ...), optional
        The ``log_likelihood`` group, when the caller has it already.
    coords : dict, optional
        Dimension name -> coordinate values (default 0, 1, ...).
    result : NamedTuple, optional
        The result that holds ``draws``, named in the error where ``draws`` is None (a
        result saved before the chains were kept).

    Returns
    -------
    arviz.InferenceData
    """
    import arviz as az
    import numpyro

    if draws is None:
        name = type(result).__name__ if result is not None else "the result"
        raise ValueError(f"this {name} has no draws record (mcmc is None: saved before the "
                         "chains' extra fields were kept); fit it again")

    model = resolve_program(draws.program) if model is None else model
    model_args, dynamic, static, _ = _split(draws)
    observed = jax.device_get(_observations(model_args, dynamic, model=model, static=static))
    if log_likelihood is None:
        log_likelihood = pointwise_log_likelihood(draws, model)
    recorded = _RecordedMCMC(draws._replace(model_args=(), model_kwargs={}), _replay(observed))
    dims = dict(draws.dims)
    idata = az.from_numpyro(recorded, log_likelihood=False, dims=dims, coords=coords,
                            pred_dims={})
    idata.add_groups(log_likelihood=az.dict_to_dataset(
        {name: np.asarray(v) for name, v in log_likelihood.items()}, library=numpyro,
        dims=dims, coords=coords, skip_event_dims=True))
    return idata
