"""The engine's NUTS runner (:func:`inference.engine.mcmc.run_nuts`).

On the conjugate Normal-mean program, mu ~ Normal(0, s0), x_i ~ Normal(mu, 1), the
posterior is Normal with precision n + s0^-2 and mean sum(x) / (n + s0^-2): the draws'
mean must lie within 4 standard errors (the posterior sd over the square root of the
effective sample size) of it. A second call with new data and keys, same shapes,
compiles nothing.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.diagnostics import effective_sample_size

from inference.engine import Chains, run_nuts

PRIOR_SCALE = 3.0
NUM_WARMUP, NUM_SAMPLES = 200, 400


def normal_mean(x, prior_scale):
    mu = numpyro.sample("mu", dist.Normal(0.0, prior_scale))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("x", dist.Normal(mu, 1.0), obs=x)


def data(i):
    return np.asarray(1.5 + jax.random.normal(jax.random.key(i), (25,)), np.float32)


def sample(x, key, num_chains=2, chain_method="sequential"):
    keys = jax.random.split(key, num_chains)
    return run_nuts(normal_mean, keys, (jnp.asarray(x),), {"prior_scale": PRIOR_SCALE},
                    {"mu": jnp.zeros(num_chains)}, num_warmup=NUM_WARMUP,
                    num_samples=NUM_SAMPLES, chain_method=chain_method)


@pytest.mark.parametrize("chain_method", [
    "sequential", pytest.param("vectorized", marks=pytest.mark.slow)])
def test_the_draws_match_the_conjugate_posterior(chain_method):
    x = data(0)
    chains = sample(x, jax.random.key(1), chain_method=chain_method)
    assert isinstance(chains, Chains)
    total = NUM_WARMUP + NUM_SAMPLES
    assert chains.z["mu"].shape == (2, total)
    assert chains.potential_energy.shape == chains.diverging.shape == (2, total)
    assert np.all(np.asarray(chains.num_steps) >= 1)
    precision = x.shape[0] + PRIOR_SCALE ** -2
    mean, sd = x.sum() / precision, precision ** -0.5
    draws = np.asarray(chains.z["mu"][:, NUM_WARMUP:], np.float64)
    ess = float(effective_sample_size(draws))
    assert abs(draws.mean() - mean) < 4 * sd / np.sqrt(ess)
    assert abs(draws.std() - sd) < 0.25 * sd
    assert not np.any(np.asarray(chains.diverging[:, NUM_WARMUP:]))


def test_a_second_call_with_new_data_and_keys_compiles_nothing():
    jax.block_until_ready(sample(data(0), jax.random.key(1)))
    compiled = []

    def listen(event, duration, **kwargs):
        if "backend_compile" in event or "jaxpr_trace" in event:
            compiled.append((event, kwargs.get("fun_name")))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        jax.block_until_ready(sample(data(2), jax.random.key(3)))
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert compiled == []


def test_an_unknown_chain_method_is_refused():
    with pytest.raises(ValueError, match="chain_method"):
        sample(data(0), jax.random.key(1), chain_method="parallel")
