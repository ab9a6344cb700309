"""NumPyro's generic inference on the zoo's programs, as baselines.

The custom algorithms are compared against what NumPyro does with the *same*
program, unchanged:

* :func:`map_associate`: MAP association by ``infer_discrete(temperature=0)``
  (Viterbi-style max-product over the enumerated binary units) on the GVQ
  program at finite noise. With a uniform prior on s the MAP state at any
  sigma is the nearest codebook vector, so it must agree with
  ``associate(method="exact")`` (tested); with another prior compare with
  ``associate(..., noise=sigma)``. Exponential in the number of units, like
  exhaustive search, but through NumPyro's generic tensor contraction.
* :func:`gibbs_associate`: NumPyro's discrete Gibbs sampler (``DiscreteGibbs``,
  the discrete half of ``DiscreteHMCGibbs``; with F fixed the program has no
  continuous site for the HMC half) on the finite-noise program, one chain per
  example under ``vmap``, keeping the lowest-energy state sampled. Single-site
  Gibbs at small noise mixes poorly between modes that differ in more than
  one unit; that is the point of the papers' annealing.
* :func:`fit_gvq_svi`: SVI with ``TraceEnum_ELBO`` (the binary units summed
  out exactly) and a point-mass guide on F, i.e. maximum a posteriori F of
  the finite-noise program by stochastic-gradient ascent (Adam).

Both return the result types of the custom algorithms
(:class:`~inference.association.AssociationResult`,
:class:`~inference.gvq.GVQResult`). The program must support
``split_states=True`` (one enumerable site per unit), as
:func:`ppl_models.gvq.model` does.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.contrib.funsor import infer_discrete
from numpyro.infer import SVI, TraceEnum_ELBO
from numpyro.infer.gibbs import DiscreteGibbs
from numpyro.optim import Adam

from inference._jit import split_model_kwargs
from inference.association import AssociationResult, associate
from inference.energy import energy_fn
from inference.gvq import GVQResult, restart_features
from ppl_models import gvq
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import check_data, check_features, check_positive, check_positive_int

__all__ = ["map_associate", "gibbs_associate", "fit_gvq_svi", "MAX_ENUMERATED_FEATURES"]

#: NumPyro's enumeration builds a tensor with one dimension per unit.
MAX_ENUMERATED_FEATURES = 20


def _split_state_values(trace, num_features, num_examples):
    units = [jnp.reshape(trace[f"s_{i}"]["value"], (-1,))[-num_examples:]
             for i in range(num_features)]
    return jnp.stack(units, axis=-1).astype(jnp.int32)


@partial(jax.jit, static_argnames=("model", "static_kwargs"))
def _map_states(features, x, sigma, dynamic_kwargs, *, model, static_kwargs):
    kwargs = {**dynamic_kwargs, **dict(static_kwargs)}
    decoder = infer_discrete(model, first_available_dim=-2, temperature=0)
    trace = handlers.trace(handlers.seed(decoder, 0)).get_trace(
        x, features=features, sigma=sigma, split_states=True, **kwargs)
    states = _split_state_values(trace, features.shape[0], x.shape[0])
    # The sigma -> 0 energy of the decoded states, read from the program like ours.
    row_energy = energy_fn(model, model_kwargs={**kwargs, "features": features})
    return states, jax.vmap(row_energy)(x, states.astype(x.dtype))


def map_associate(
    features,
    x,
    *,
    sigma=0.1,
    model: Callable | None = None,
    model_kwargs: dict | None = None,
) -> AssociationResult:
    """MAP association by NumPyro's ``infer_discrete(temperature=0)``.

    Parameters
    ----------
    features : array (num_features, dim)
    x : array (num_examples, dim)
    sigma : float
        Observation noise of the program while decoding.
    model : callable, optional
        Program with ``split_states`` support; default :func:`ppl_models.gvq.model`.
    model_kwargs : dict, optional
        Further keyword arguments (e.g. ``prior_probs``).

    Returns
    -------
    AssociationResult
        ``states``, their sigma -> 0 ``energy`` (||x - s @ F||^2 for GVQ, read
        from the program like the custom methods), ``converged`` all True.
    """
    features = check_features(features)
    check_positive_int(
        int(features.shape[0]), "features.shape[0] (num_features)",
        maximum=MAX_ENUMERATED_FEATURES, why=" for enumeration (2^num_features states)")
    x = check_data(x, "x", dim=int(features.shape[1]))
    check_positive(sigma, "sigma")
    model = gvq.model if model is None else model
    dynamic, static = split_model_kwargs(model_kwargs)
    states, energy = _map_states(features, x, jnp.asarray(sigma, x.dtype), dynamic, model=model,
                                 static_kwargs=static)
    return AssociationResult(states, energy, jnp.ones(x.shape[0], bool), None)


@partial(jax.jit, static_argnames=("model", "static_kwargs", "num_warmup", "num_samples"))
def _gibbs_states(keys, features, x, sigma, dynamic_kwargs, *, model, static_kwargs, num_warmup,
                  num_samples):
    kwargs = {**dynamic_kwargs, **dict(static_kwargs), "features": features, "sigma": sigma,
              "split_states": True, "enumerate_states": False}
    kernel = DiscreteGibbs(model)
    n = features.shape[0]
    row_energy = energy_fn(model, model_kwargs={**dynamic_kwargs, **dict(static_kwargs),
                                                "features": features})

    def chain(key, x_row):
        state = kernel.init(key, num_warmup, None, (x_row[None],), kwargs)

        def body(carry, _):
            state, best, best_energy = carry
            state = kernel.sample(state, (x_row[None],), kwargs)
            s = jnp.stack([state.z[f"s_{i}"][0] for i in range(n)]).astype(jnp.int32)
            e = row_energy(x_row, s.astype(x_row.dtype))
            better = e < best_energy
            return (state, jnp.where(better, s, best), jnp.where(better, e, best_energy)), None

        init = (state, jnp.zeros(n, jnp.int32), jnp.asarray(jnp.inf, x_row.dtype))
        (state, best, best_energy), _ = jax.lax.scan(body, init, None,
                                                     length=num_warmup + num_samples)
        return best, best_energy

    return jax.vmap(chain)(keys, x)


def gibbs_associate(
    features,
    x,
    *,
    rng_key,
    sigma=0.1,
    num_warmup: int = 50,
    num_samples: int = 50,
    model: Callable | None = None,
    model_kwargs: dict | None = None,
) -> AssociationResult:
    """Association by NumPyro's ``DiscreteGibbs`` on the finite-noise program.

    One chain per example (``vmap``), ``num_warmup + num_samples`` sweeps over
    the units at observation noise ``sigma``; the state with the lowest
    sigma -> 0 energy among all sweeps is returned. ``converged`` is all True
    (a sampler has no convergence criterion of its own).
    """
    features = check_features(features)
    check_positive_int(int(features.shape[0]), "features.shape[0] (num_features)")
    x = check_data(x, "x", dim=int(features.shape[1]))
    check_positive(sigma, "sigma")
    num_warmup = check_positive_int(num_warmup, "num_warmup")
    num_samples = check_positive_int(num_samples, "num_samples")
    model = gvq.model if model is None else model
    dynamic, static = split_model_kwargs(model_kwargs)
    keys = jax.random.split(rng_key, x.shape[0])
    states, energy = _gibbs_states(keys, features, x, jnp.asarray(sigma, x.dtype), dynamic,
                                   model=model, static_kwargs=static, num_warmup=num_warmup,
                                   num_samples=num_samples)
    return AssociationResult(states, energy, jnp.ones(x.shape[0], bool), None)


@partial(jax.jit, static_argnames=("num_steps", "model", "static_kwargs", "learning_rate"))
def _svi_restarts(keys, x, starts, sigma, dynamic_kwargs, *, num_steps, model, static_kwargs,
                  learning_rate):
    kwargs = {**dynamic_kwargs, **dict(static_kwargs), "sigma": sigma, "split_states": True,
              "num_features": starts.shape[1]}

    def one(key, start):
        def point_guide(x=None, **unused):
            loc = numpyro.param("F_loc", start)
            numpyro.sample("F", dist.Delta(loc).to_event(2))

        svi = SVI(model, point_guide, Adam(learning_rate), TraceEnum_ELBO(max_plate_nesting=1))
        state = svi.init(key, x, **kwargs)

        def body(state, _):
            state, loss = svi.update(state, x, **kwargs)
            return state, loss

        state, losses = jax.lax.scan(body, state, None, length=num_steps)
        return svi.get_params(state)["F_loc"], losses

    return jax.vmap(one)(keys, starts)


def fit_gvq_svi(
    x,
    num_features: int,
    *,
    rng_key,
    sigma=0.1,
    num_steps: int = 1500,
    learning_rate: float = 0.05,
    num_restarts: int = 4,
    init_features=None,
    model: Callable | None = None,
    model_kwargs: dict | None = None,
    rtol: float = 1e-4,
) -> GVQResult:
    """Learn F by SVI on the finite-noise program with enumerated binary units.

    The guide is a point mass on F (MAP); ``TraceEnum_ELBO`` sums the 2^n
    states of every example exactly, so the loss is -log p(x, F) up to the
    prior. Restarts use :func:`inference.gvq.initial_features`, the same
    initialisation as :func:`inference.fit_gvq`, and run in parallel.

    Parameters
    ----------
    x : array (num_examples, dim)
    num_features : int
    rng_key : jax.random key
    sigma : float
        Observation noise of the program during learning.
    num_steps : int
        Adam steps per restart.
    learning_rate : float
        Adam step size.
    num_restarts : int
        Parallel restarts; the one with the lowest final loss is returned.
    init_features : array, optional
        (num_features, dim) or (num_restarts, num_features, dim).
    rtol : float
        ``converged`` when the loss changed by less than ``rtol`` (relative)
        over the last tenth of the steps.

    Returns
    -------
    GVQResult
        ``error`` and ``states`` are those of the exact (sigma -> 0) association
        under the learned F, so they compare directly with :func:`fit_gvq`;
        ``error_trace`` holds the per-example loss (-ELBO / num_examples) per step;
        ``num_iterations`` is ``num_steps``; ``restart_errors`` the final losses.
    """
    x = check_data(x, "x")
    num_features = check_positive_int(num_features, "num_features",
                                      maximum=MAX_ENUMERATED_FEATURES,
                                      why=" for enumeration (2^num_features states)")
    num_steps = check_positive_int(num_steps, "num_steps")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    check_positive(sigma, "sigma")
    check_positive(learning_rate, "learning_rate")
    model = gvq.model if model is None else model
    key_init, key_run = jax.random.split(rng_key)
    starts = restart_features(key_init, x, num_features, num_restarts, init_features)
    dynamic, static = split_model_kwargs(model_kwargs)
    features, losses = _svi_restarts(
        jax.random.split(key_run, num_restarts), x, starts, jnp.asarray(sigma, x.dtype), dynamic,
        num_steps=num_steps, model=model, static_kwargs=static, learning_rate=learning_rate)
    final = losses[:, -1]
    if not bool(jnp.all(jnp.isfinite(final))):
        warnings.warn("fit_gvq_svi: some restarts ended with a non-finite loss; they are skipped",
                      NumericalWarning, stacklevel=2)
    best = int(jnp.argmin(jnp.where(jnp.isfinite(final), final, jnp.inf)))
    tail = losses[best, -max(2, num_steps // 10):]
    converged = bool(jnp.abs(tail[-1] - tail[0]) <= rtol * (jnp.abs(tail[-1]) + 1.0))
    if not converged:
        warnings.warn(f"fit_gvq_svi: loss still changing after {num_steps} steps; raise num_steps",
                      ConvergenceWarning, stacklevel=2)
    result = associate(features[best], x, model=model, model_kwargs=model_kwargs, check=False)
    error = jnp.mean(result.energy)
    return GVQResult(
        features=features[best], states=result.states, error=error,
        error_trace=losses[best] / x.shape[0], num_iterations=jnp.asarray(num_steps),
        converged=jnp.asarray(converged), restart_errors=final / x.shape[0],
    )
