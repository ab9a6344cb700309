"""Gaussian mixtures as YING-YANG machines (seed 002): EM, hard-cut EM, k-means, criteria."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.contrib.funsor import enum
from numpyro.contrib.funsor import log_density as enum_log_density
from numpyro.infer.util import log_density
from sklearn.cluster import KMeans
from sklearn.mixture import GaussianMixture

from inference.mixture import component_log_joint, criteria, fit_mixture
from ppl_models import mixture as mx
from ppl_models.diagnostics import ConvergenceWarning


@pytest.fixture(scope="module")
def data64():
    with jax.enable_x64(True):
        d = mx.generate(jax.random.key(0), 600, 4, 3, separation=3.0)
        x = np.asarray(d.x, np.float64)
    rng = np.random.default_rng(0)
    start = x[rng.choice(600, 4, replace=False)]
    return x, start


@pytest.mark.parametrize("covariance", ["full", "diag", "spherical"])
def test_em_equals_scikit_learn_from_the_same_start(data64, covariance):
    x, start = data64
    weights, cov = np.full(4, 0.25), np.stack([np.eye(3)] * 4)
    precisions = {"full": np.linalg.inv(cov), "diag": np.ones((4, 3)),
                  "spherical": np.ones(4)}[covariance]
    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ours = fit_mixture(x, 4, mode="stochastic", covariance=covariance, prune=False,
                           init_means=start, init_weights=weights, init_covariances=cov,
                           max_iterations=15, tol=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn's own not-converged note
        peer = GaussianMixture(4, covariance_type=covariance, max_iter=15, tol=0.0,
                               weights_init=weights, means_init=start,
                               precisions_init=precisions, reg_covar=1e-6).fit(x)
    assert ours.num_iterations == 15
    np.testing.assert_allclose(np.asarray(ours.means), peer.means_, atol=1e-10)
    np.testing.assert_allclose(np.asarray(ours.weights), peer.weights_, atol=1e-10)
    assert -ours.L_stocha == pytest.approx(peer.score(x), abs=1e-10)


def test_nearest_mode_is_kmeans_lloyd(data64):
    x, start = data64
    with jax.enable_x64(True):
        ours = fit_mixture(x, 4, mode="nearest", init_means=start, prune=False)
    peer = KMeans(4, init=start, n_init=1, algorithm="lloyd", tol=0.0, max_iter=300).fit(x)
    np.testing.assert_allclose(np.asarray(ours.means), peer.cluster_centers_, atol=1e-10)
    np.testing.assert_array_equal(np.asarray(ours.labels), peer.labels_)
    e_mse = np.mean(np.min(((x[:, None] - np.asarray(ours.means)[None]) ** 2).sum(-1), 1))
    assert e_mse * x.shape[0] == pytest.approx(peer.inertia_, rel=1e-12)
    assert ours.J == pytest.approx(np.log(4) + 1.5 * np.log(e_mse), rel=1e-12)


def test_criteria_order_along_the_papers_chain_and_objectives_never_increase(data64):
    x, start = data64
    with jax.enable_x64(True):
        nn = fit_mixture(x, 4, mode="nearest", init_means=start)
        hard = fit_mixture(x, 4, mode="map", init_means=nn.means, init_weights=nn.weights,
                           init_covariances=nn.covariances)
        soft = fit_mixture(x, 4, mode="stochastic", init_means=hard.means,
                           init_weights=hard.weights, init_covariances=hard.covariances)
    assert soft.L_stocha <= hard.L_map <= nn.L_NN
    # At one set of parameters the three criteria order the same way.
    assert soft.L_stocha <= soft.L_map <= soft.L_NN
    for result in (nn, hard, soft):
        trace = np.asarray(result.objective_trace)
        assert np.all(np.diff(trace) <= 1e-12 * np.abs(trace[:-1])), result.mode


def test_e_step_is_the_programs_enumerated_posterior(data64):
    x, start = data64
    x = x[:40]
    with jax.enable_x64(True):
        weights = jnp.asarray([0.1, 0.2, 0.3, 0.4], jnp.float64)
        cov = jnp.stack([jnp.eye(3, dtype=jnp.float64) * s for s in (0.5, 1.0, 1.5, 2.0)])
        table = np.asarray(component_log_joint(x, weights, start, cov))
        params = {"weights": weights, "means": jnp.asarray(start),
                  "scale_tril": jnp.linalg.cholesky(cov)}
        # Each entry is NumPyro's log-density of one example with y fixed ...
        for i, j in [(0, 0), (5, 2), (39, 3)]:
            single, _ = log_density(mx.model, (x[i:i + 1],), params, {"y": jnp.asarray([j])})
            assert table[i, j] == pytest.approx(float(single), rel=1e-12)
        # ... and summing y out by enumeration gives the mixture log-likelihood.
        total, _ = enum_log_density(enum(mx.model, first_available_dim=-2), (x,), params, {})
    assert float(total) == pytest.approx(np.sum(np.logaddexp.reduce(table, axis=1)), rel=1e-12)


def test_collapsing_components_are_pruned_mid_run():
    rng = np.random.default_rng(1)
    blobs = np.concatenate([rng.normal(size=(150, 2)), rng.normal(size=(150, 2)) + 8.0])
    x = np.concatenate([blobs, [[30.0, 30.0], [30.0, 30.0]]])  # two copies of one far point
    start = np.array([[0.0, 0.0], [8.0, 8.0], [30.0, 30.0]])
    result = fit_mixture(x, 3, mode="map", init_means=start, init_covariances=np.stack(
        [np.eye(2)] * 3))
    assert result.num_components == 2  # fewer points than d + 1: singular, discarded
    counts = np.asarray(result.num_components_trace)
    assert counts[0] == 2 and np.all(np.diff(counts) <= 0)
    with pytest.warns(ConvergenceWarning, match="collapsed"):
        kept = fit_mixture(x, 3, mode="map", init_means=start, prune=False,
                           init_covariances=np.stack([np.eye(2)] * 3))
    assert kept.num_components == 3


def test_generator_and_program_sizes():
    d = mx.generate(jax.random.key(3), 300, 5, 4, separation=6.0)
    assert d.x.shape == (300, 4) and d.means.shape == (5, 4) and d.covariances.shape == (5, 4, 4)
    gaps = np.linalg.norm(np.asarray(d.means)[:, None] - np.asarray(d.means)[None], axis=-1)
    assert np.min(gaps + np.eye(5) * 1e9) == pytest.approx(6.0, rel=1e-5)
    np.testing.assert_allclose(np.asarray(d.weights).sum(), 1.0, rtol=1e-6)
    assert np.all(np.linalg.eigvalsh(np.asarray(d.covariances)) > 0)
    values = criteria(d.x, d.weights, d.means, d.covariances)
    assert values["L_stocha"] <= values["L_map"]


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_components=0), "num_components"),
    (dict(num_components=7), "distinct"),
    (dict(mode="soft"), "mode"),
    (dict(covariance="tied"), "covariance"),
    (dict(x=np.full((6, 2), 3.0), num_components=1), "no spread"),
    (dict(x=np.array([[0.0, np.nan]] * 6)), "NaN"),
    (dict(x=np.zeros((6, 0))), "at least one dimension"),
    (dict(rng_key=None), "rng_key"),
    (dict(init_means=np.zeros((3, 2))), "init_means"),
])
def test_bad_input(kwargs, match):
    x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [5.0, 5.0], [6.0, 5.0], [5.0, 6.0]])
    args = dict(x=x, num_components=2, rng_key=jax.random.key(0)) | kwargs
    with pytest.raises(ValueError, match=match):
        fit_mixture(args.pop("x"), args.pop("num_components"), **args)
