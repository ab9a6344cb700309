"""NumPyro's generic association on the GVQ program, as baselines (see
:mod:`inference.gvq.baselines`): :func:`map_associate` (``infer_discrete`` at
temperature 0) and :func:`gibbs_associate` (``DiscreteGibbs``).

They return :class:`~inference.association.core.AssociationResult`. The program must
support ``split_states=True`` (one enumerable site per unit), as
:func:`ppl_models.gvq.model` does.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp
from numpyro import handlers
from numpyro.contrib.funsor import infer_discrete
from numpyro.infer.gibbs import DiscreteGibbs

from inference.association.core import AssociationResult
from inference.program.energy import energy_fn
from inference.program.kwargs import split_model_kwargs
from ppl_models import gvq
from ppl_models.validation import (
    check_data,
    check_features,
    check_positive,
    check_positive_int,
    check_rng_key,
)

__all__ = ["map_associate", "gibbs_associate", "MAX_ENUMERATED_FEATURES"]

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
    noise=0.1,
    model: Callable | None = None,
    model_kwargs: dict | None = None,
) -> AssociationResult:
    """MAP association by NumPyro's ``infer_discrete(temperature=0)``.

    Parameters
    ----------
    features : array (num_features, dim)
    x : array (num_examples, dim)
    noise : float
        Observation noise of the program (its ``sigma``) while decoding.
    model : callable, optional
        Program with ``split_states`` support; default :func:`ppl_models.gvq.model`.
    model_kwargs : dict, optional
        Further keyword arguments (e.g. ``prior_probs``).

    Returns
    -------
    AssociationResult
        ``states``, their sigma -> 0 ``energy`` (||x - s @ F||^2 for GVQ, read
        from the program like the custom methods), ``converged`` all True.

    Examples
    --------
    >>> import jax
    >>> from inference import associate
    >>> from ppl_models import gvq
    >>> data = gvq.generate_planted(jax.random.key(0), 50, 4, 8)
    >>> result = map_associate(data.features, data.x)
    >>> exact = associate(data.features, data.x)
    >>> result.states.shape, bool((result.states == exact.states).all())
    ((50, 4), True)
    """
    features = check_features(features)
    check_positive_int(
        int(features.shape[0]), "features.shape[0] (num_features)",
        maximum=MAX_ENUMERATED_FEATURES, why=" for enumeration (2^num_features states)")
    x = check_data(x, "x", dim=int(features.shape[1]))
    check_positive(noise, "noise")
    model = gvq.model if model is None else model
    dynamic, static = split_model_kwargs(model_kwargs)
    states, energy = _map_states(features, x, jnp.asarray(noise, x.dtype), dynamic, model=model,
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
    noise=0.1,
    num_warmup: int = 50,
    num_samples: int = 50,
    model: Callable | None = None,
    model_kwargs: dict | None = None,
) -> AssociationResult:
    """Association by NumPyro's ``DiscreteGibbs`` on the finite-noise program.

    One chain per example (``vmap``), ``num_warmup + num_samples`` sweeps over
    the units at observation noise ``noise`` (the program's ``sigma``); the state with the lowest
    sigma -> 0 energy among all sweeps is returned. ``converged`` is all True
    (a sampler has no convergence criterion of its own).

    Examples
    --------
    >>> import jax
    >>> from ppl_models import gvq
    >>> data = gvq.generate_planted(jax.random.key(0), 50, 4, 8)
    >>> result = gibbs_associate(data.features, data.x, rng_key=jax.random.key(1), noise=2.0)
    >>> found = (result.states == data.states).all(axis=1)  # the planted states
    >>> result.states.shape, bool(found.mean() > 0.9)
    ((50, 4), True)
    """
    features = check_features(features)
    check_positive_int(int(features.shape[0]), "features.shape[0] (num_features)")
    x = check_data(x, "x", dim=int(features.shape[1]))
    check_positive(noise, "noise")
    num_warmup = check_positive_int(num_warmup, "num_warmup")
    num_samples = check_positive_int(num_samples, "num_samples")
    check_rng_key(rng_key)
    model = gvq.model if model is None else model
    dynamic, static = split_model_kwargs(model_kwargs)
    keys = jax.random.split(rng_key, x.shape[0])
    states, energy = _gibbs_states(keys, features, x, jnp.asarray(noise, x.dtype), dynamic,
                                   model=model, static_kwargs=static, num_warmup=num_warmup,
                                   num_samples=num_samples)
    return AssociationResult(states, energy, jnp.ones(x.shape[0], bool), None)
