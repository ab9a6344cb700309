"""Exact association: exhaustive search against brute force and against NumPyro's MAP."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inference import associate
from inference.gvq.baselines import map_associate
from ppl_models import gvq


def brute_force(features, x, log_prior=None, sigma=None):
    """Minimum of ||x - sF||^2 (- 2 sigma^2 log p(s)) over all states, in numpy float64."""
    features, x = np.asarray(features, float), np.asarray(x, float)
    states = np.array(list(itertools.product([0, 1], repeat=features.shape[0])), float)
    energies = ((x[:, None, :] - (states @ features)[None]) ** 2).sum(-1)
    if log_prior is not None:
        energies = energies - 2 * sigma**2 * (states @ log_prior[0] + (1 - states) @ log_prior[1])
    best = energies.argmin(1)
    return states[best].astype(int), energies.min(1), energies


@pytest.mark.parametrize("num_features", [1, 3, 8])
def test_exact_matches_brute_force_on_random_features(num_features):
    key_f, key_x = jax.random.split(jax.random.key(num_features))
    features = jax.random.normal(key_f, (num_features, 6))
    x = 2.0 * jax.random.normal(key_x, (50, 6))
    result = associate(features, x)
    states, energies, _ = brute_force(features, x)
    np.testing.assert_array_equal(np.asarray(result.states), states)
    np.testing.assert_allclose(result.energy, energies, rtol=1e-5, atol=1e-5)
    assert result.states.dtype == jnp.int32 and result.converged.all() and result.trace is None


def test_chunking_does_not_change_the_answer():
    data = gvq.generate_planted(jax.random.key(5), 30, 7, 6, noise_scale=1.0)
    full = associate(data.features, data.x)
    chunked = associate(data.features, data.x, chunk_size=4)  # 32 chunks of 4 states
    np.testing.assert_array_equal(full.states, chunked.states)
    np.testing.assert_allclose(full.energy, chunked.energy, rtol=1e-6)


def test_twenty_features():
    """n = 20: 2^20 states per example, searched in bounded-memory chunks."""
    key_f, key_x = jax.random.split(jax.random.key(20))
    features = jax.random.normal(key_f, (20, 5))
    x = 3.0 * jax.random.normal(key_x, (3, 5))
    result = associate(features, x, chunk_size=1 << 16)
    # Check against brute force in numpy, one example at a time.
    states = ((np.arange(1 << 20)[:, None] >> np.arange(20)) & 1).astype(np.float64)
    codebook = states @ np.asarray(features, np.float64)
    for i in range(3):
        energies = ((np.asarray(x[i], np.float64) - codebook) ** 2).sum(-1)
        assert float(result.energy[i]) == pytest.approx(energies.min(), rel=1e-4, abs=1e-4)


@pytest.mark.parametrize("num_features", [2, 5, 8])
def test_infer_discrete_map_agrees_with_exact_on_every_example(num_features):
    data = gvq.generate_planted(jax.random.key(30 + num_features), 60, num_features, 10,
                                noise_scale=0.3)
    ours = associate(data.features, data.x)
    numpyro_map = map_associate(data.features, data.x, noise=0.3)
    np.testing.assert_array_equal(np.asarray(ours.states), np.asarray(numpyro_map.states))
    np.testing.assert_allclose(ours.energy, numpyro_map.energy, rtol=1e-6)


def test_finite_noise_map_with_a_nonuniform_prior_agrees_with_infer_discrete():
    """noise=sigma: the prior on s counts; infer_discrete on the same program agrees."""
    n, sigma = 5, 1.0
    probs = jnp.array([0.05, 0.1, 0.2, 0.5, 0.9])
    data = gvq.generate_planted(jax.random.key(40), 80, n, 4, noise_scale=sigma,
                                prior_probs=0.5)
    kwargs = {"prior_probs": probs}
    ours = associate(data.features, data.x, noise=sigma, model_kwargs=kwargs)
    numpyro_map = map_associate(data.features, data.x, noise=sigma, model_kwargs=kwargs)
    np.testing.assert_array_equal(np.asarray(ours.states), np.asarray(numpyro_map.states))
    log_prior = (np.log(np.asarray(probs, float)), np.log1p(-np.asarray(probs, float)))
    states, _, _ = brute_force(data.features, data.x, log_prior, sigma)
    np.testing.assert_array_equal(np.asarray(ours.states), states)
    # The prior must matter here, or this test could not tell the two energies apart.
    limit = associate(data.features, data.x)
    assert np.any(np.asarray(limit.states) != np.asarray(ours.states))
