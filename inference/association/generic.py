"""NumPyro's generic inference for the binary states of a user's program: the peer of
:func:`inference.map_states` on the same program.

:func:`numpyro_map_states` uses NumPyro's own machinery only:

* ``infer_discrete(temperature=0)`` (max-product over the enumerated sites) where an
  example has at most :data:`MAX_ENUMERATED_UNITS` units: the exact MAP state of the
  target energy (the program under ``noiseless``, ``observation_noise`` or as written);
* MCMC where it has more: ``DiscreteHMCGibbs`` (Gibbs updates of the discrete sites,
  alternating with NUTS on the continuous ones, which are fixed here; the default),
  ``MixedHMC`` (Zhou,
  "Mixed Hamiltonian Monte Carlo for mixed discrete and continuous variables",
  NeurIPS 2020) or plain ``DiscreteGibbs``: one chain over all the examples, the
  program sampled at a finite noise (``noise`` when it is a float, else the program as
  written), the state of lowest target energy among the samples kept for every example.

All need every binary site to hold one unit per plate cell (units as separate sites,
or in a plate of their own): NumPyro enumerates no vector-valued ``Bernoulli(p)
.to_event(1)`` site (nor do its discrete samplers), and such a program gets an error
saying so.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp
from numpyro import handlers
from numpyro.contrib.funsor import config_enumerate, infer_discrete
from numpyro.infer import HMC, NUTS, DiscreteHMCGibbs, MixedHMC
from numpyro.infer.gibbs import DiscreteGibbs

from inference.association.map_states import MapStatesResult, plan_map_states
from inference.association.program_sites import handled_program, program_energy, run_program
from inference.program.kwargs import join_args, split_args, split_model_kwargs
from ppl_models.validation import check_positive_int, check_rng_key

__all__ = ["numpyro_map_states", "MAX_ENUMERATED_UNITS", "SAMPLERS"]

#: The samplers, by method name: NumPyro's kernels for programs that cannot be enumerated.
SAMPLERS = ("discrete_hmc_gibbs", "mixed_hmc", "gibbs")

#: Enumeration builds a tensor with one dimension per unit of an example.
MAX_ENUMERATED_UNITS = 20


def numpyro_map_states(model: Callable, *args, method: str = "auto", rng_key=None, noise=None,
                       sites=None, num_warmup: int = 50, num_samples: int = 200,
                       **kwargs) -> MapStatesResult:
    """The MAP binary states of ``model(*args, **kwargs)`` by NumPyro's generic inference.

    Parameters
    ----------
    model, *args, **kwargs, noise, sites
        As for :func:`inference.map_states` (the energies reported are in the same units).
    method : str
        ``"enumerate"``: ``infer_discrete(temperature=0)``, the exact MAP state (every
        binary site one unit per plate cell, at most :data:`MAX_ENUMERATED_UNITS` units
        per example); a sampler (one unit per plate cell): ``"discrete_hmc_gibbs"``
        (``DiscreteHMCGibbs`` around ``NUTS``), ``"mixed_hmc"`` (``MixedHMC`` around
        ``HMC``) or ``"gibbs"`` (``DiscreteGibbs``); ``"auto"`` (default): enumerate
        where the program allows it, else ``"discrete_hmc_gibbs"``.
    rng_key : jax.random key, optional
        Needed by the samplers.
    num_warmup, num_samples : int
        Iterations of the sampler (all samples, warm-up included, are scored).

    Returns
    -------
    MapStatesResult
        ``converged`` is True (enumeration is exact; the sampler has no stopping rule
        of its own); ``trace`` is None.

    Examples
    --------
    GVQ with one enumerable site per unit (``split_states=True``), as the example of
    :func:`inference.map_states`:

    >>> import jax.numpy as jnp
    >>> from ppl_models import gvq
    >>> F = jnp.array([[1.0, 0.0], [0.0, 1.0]])
    >>> x = jnp.array([[0.9, 0.1], [1.1, 0.8], [0.1, -0.1]])
    >>> result = numpyro_map_states(gvq.model, x, features=F, split_states=True)
    >>> result.states["s_0"].tolist(), result.states["s_1"].tolist(), result.energy.shape
    ([1, 1, 0], [0, 1, 0], (3,))
    """
    if method not in ("auto", "enumerate", *SAMPLERS):
        raise ValueError(f"method must be 'auto', 'enumerate' or one of {list(SAMPLERS)}; "
                         f"got {method!r}")
    num_warmup = check_positive_int(num_warmup, "num_warmup")
    num_samples = check_positive_int(num_samples, "num_samples")
    plan = plan_map_states(model, args, kwargs, method="exact", noise=noise, sites=sites)
    layout = plan.layout
    trace = run_program(model, args, kwargs)
    vectors = [name for name in layout.names if trace[name]["fn"].event_dim > 0]
    if vectors:
        raise ValueError(
            f"NumPyro's discrete inference needs one unit per plate cell, and the binary sites "
            f"{vectors} are vector-valued (to_event): neither infer_discrete nor DiscreteGibbs "
            "can enumerate them. Write the units as separate sites (as gvq.model does with "
            "split_states=True) or in a plate of their own")
    if method == "auto":
        method = ("enumerate" if layout.num_units <= MAX_ENUMERATED_UNITS
                  else "discrete_hmc_gibbs")
    if method == "enumerate" and layout.num_units > MAX_ENUMERATED_UNITS:
        raise ValueError(f"method 'enumerate': an example has {layout.num_units} units, more "
                         f"than {MAX_ENUMERATED_UNITS}; use a sampler, one of {list(SAMPLERS)}")
    dynamic, static = split_model_kwargs(kwargs)
    traced, static_args = split_args(args)
    common = dict(model=model, static_args=static_args, static_kwargs=static, layout=layout,
                  noise_mode=plan.noise_mode)
    if method == "enumerate":
        flat, energy = _enumerate(traced, dynamic, plan.noise_value, **common)
    else:
        if rng_key is None:
            raise ValueError(f"method {method!r} samples with NumPyro's MCMC: pass "
                             "rng_key=jax.random.key(...)")
        check_rng_key(rng_key)
        sample_noise = noise if isinstance(noise, float) else None
        flat, energy = _sample(rng_key, traced, dynamic, plan.noise_value,
                               jnp.asarray(sample_noise if sample_noise is not None else 1.0),
                               sample_at_noise=sample_noise is not None, sampler=method,
                               num_warmup=num_warmup, num_samples=num_samples, **common)
    return MapStatesResult(layout.unflatten(flat), energy,
                           jnp.ones(layout.num_examples, bool), None)


def _first_available_dim(trace):
    deepest = max((-frame.dim for site in trace.values() if site["type"] == "sample"
                   for frame in site["cond_indep_stack"]), default=0)
    return -deepest - 1


def _noise_of(noise_mode, noise_value):
    return None if noise_mode is None else ("program" if noise_mode == "program"
                                            else noise_value)


@partial(jax.jit, static_argnames=("model", "static_args", "static_kwargs", "layout",
                                   "noise_mode"))
def _enumerate(args, dynamic, noise_value, *, model, static_args, static_kwargs, layout,
               noise_mode):
    kwargs = {**dynamic, **dict(static_kwargs)}
    args = join_args(args, static_args)
    noise = _noise_of(noise_mode, noise_value)
    handled, _ = handled_program(model, noise)
    plain = run_program(model, args, kwargs)
    decoder = infer_discrete(config_enumerate(handled),
                             first_available_dim=_first_available_dim(plain), temperature=0)
    trace = handlers.trace(handlers.seed(decoder, 0)).get_trace(*args, **kwargs)
    values = {name: jnp.reshape(trace[name]["value"], jnp.shape(plain[name]["value"]))
              for name in layout.names}
    flat = layout.flatten(values).astype(jnp.int32)
    energy = program_energy(model, args, kwargs, layout, noise)
    return flat, energy(flat.astype(jnp.result_type(float)))


@partial(jax.jit, static_argnames=("model", "static_args", "static_kwargs", "layout",
                                   "noise_mode", "sample_at_noise", "sampler", "num_warmup",
                                   "num_samples"))
def _sample(rng_key, args, dynamic, noise_value, sample_noise, *, model, static_args,
            static_kwargs, layout, noise_mode, sample_at_noise, sampler, num_warmup,
            num_samples):
    kwargs = {**dynamic, **dict(static_kwargs)}
    args = join_args(args, static_args)
    sampled, _ = handled_program(model, sample_noise if sample_at_noise else "program")
    if sampler == "discrete_hmc_gibbs":
        kernel = DiscreteHMCGibbs(NUTS(sampled))
    elif sampler == "mixed_hmc":
        kernel = MixedHMC(HMC(sampled, trajectory_length=1.2))
    else:
        kernel = DiscreteGibbs(sampled)
    energy = program_energy(model, args, kwargs, layout, _noise_of(noise_mode, noise_value))
    dtype = jnp.result_type(float)
    state = kernel.init(rng_key, num_warmup, None, args, kwargs)
    n, num = layout.num_units, layout.num_examples

    def body(carry, _):
        state, best, best_energy = carry
        state = kernel.sample(state, args, kwargs)
        flat = layout.flatten({name: state.z[name] for name in layout.names}).astype(jnp.int32)
        current = energy(flat.astype(dtype))
        better = current < best_energy
        return (state, jnp.where(better[:, None], flat, best),
                jnp.where(better, current, best_energy)), None

    init = (state, jnp.zeros((num, n), jnp.int32), jnp.full(num, jnp.inf, dtype))
    (_, best, best_energy), _ = jax.lax.scan(body, init, None, length=num_warmup + num_samples)
    return best, best_energy
