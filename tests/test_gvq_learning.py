"""NUTS on the GVQ features (units enumerated), and ``ppl-zoo compare gvq_learning``."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inference.engine.progress as engine_progress
from inference import associate, fit_gvq
from inference.app.cli import main
from inference.gvq.baselines import (
    MAX_MCMC_FEATURES,
    GVQMCMCResult,
    fit_gvq_mcmc,
    relabel_samples,
)
from inference.gvq.em import m_step, match_features
from ppl_models import gvq
from ppl_models.diagnostics import ConvergenceWarning

#: Tiny planted problem: n = 3, dim 6, 100 examples, noise 0.3.
NOISE = 0.3
#: One compiled chain serves every test (same static settings and shapes).
CHAIN = dict(noise=NOISE, num_warmup=100, num_samples=100)


@pytest.fixture(scope="module")
def tiny():
    return gvq.generate_planted(jax.random.key(5), 100, 3, 6, noise_scale=NOISE)


@pytest.fixture(scope="module")
def least_squares(tiny):
    """F fitted by least squares to the exact association under the planted F, and its error.

    With a N(0, 10) prior and posterior standard deviations near 0.05, the
    posterior mean of F is this estimate up to Monte Carlo error (the prior
    shrinks it by a relative 0.05^2 / 10^2).
    """
    states = associate(tiny.features, tiny.x).states
    features = m_step(tiny.x, states, tiny.features)
    return features, float(jnp.mean(associate(features, tiny.x).energy))


@pytest.fixture(scope="module")
def two_permuted_chains(tiny):
    """Two chains started near the planted F, the second with its rows permuted."""
    return fit_gvq_mcmc(tiny.x, 3, rng_key=jax.random.key(0), num_chains=2,
                        init_features=_permuted_starts(tiny), **CHAIN)


@pytest.mark.slow
def test_mcmc_recovers_planted_features_across_permuted_chains(tiny, least_squares,
                                                                 two_permuted_chains):
    result = two_permuted_chains
    features_ls, error_ls = least_squares
    assert isinstance(result, GVQMCMCResult)
    assert result.samples.shape == (2, 100, 3, 6) and result.log_joint.shape == (2, 100)
    assert result.trace.objective.shape == (2, 200) and int(result.num_iterations) == 200
    # The chains sit in two permutations of one mode: relabelling aligns every sample
    # of one of them (all 100), after which the chains agree.
    assert result.num_relabelled >= 100
    assert float(np.max(result.r_hat)) < 1.1 and bool(result.converged)
    assert result.num_divergent == 0
    assert float(np.min(result.ess)) > 30
    # Posterior standard deviation of an entry is about sigma / sqrt(N / 2) = 0.042;
    # the mean of >= 30 effective samples is within 0.02 of the posterior mean
    # (3 Monte Carlo standard errors, max over 18 entries), itself the least-squares F.
    perm, to_ls = match_features(result.features, features_ls)
    assert to_ls < 0.03
    # ... and within 5 posterior standard deviations (0.21) of the planted F.
    assert match_features(result.features, tiny.features)[1] < 0.21
    # The exact-association error of the posterior mean equals least squares' to 0.5%.
    assert float(result.error) == pytest.approx(error_ls, rel=5e-3)
    # The states are those of exact association under the summary features.
    np.testing.assert_array_equal(np.asarray(result.states),
                                  np.asarray(associate(result.features, tiny.x).states))
    # The posterior spread is the order of sigma / sqrt(N / 2), not zero and not wide.
    spread = float(np.mean(np.std(np.asarray(result.samples), axis=(0, 1))))
    assert 0.02 < spread < 0.1
    # The pivot is the kept sample of highest log joint.
    best = np.unravel_index(np.argmax(np.asarray(result.log_joint)), result.log_joint.shape)
    np.testing.assert_allclose(np.asarray(result.best_features),
                               np.asarray(result.samples)[best], atol=1e-6)


def test_mcmc_chains_in_different_optima_warn_and_chain_summary_keeps_the_best(
        tiny, least_squares):
    """One chain at the planted F, one at a poor fixed point of EM (error 2.6 vs 0.5)."""
    features_ls, error_ls = least_squares
    poor = fit_gvq(tiny.x, 3, rng_key=jax.random.key(1), num_restarts=1)
    assert float(poor.error) > 4 * error_ls  # this start's EM run is stuck
    starts = jnp.stack([tiny.features, poor.features])
    with pytest.warns(ConvergenceWarning, match="R-hat"):
        result = fit_gvq_mcmc(tiny.x, 3, rng_key=jax.random.key(1), num_chains=2,
                              init_features=starts, summary="chain", **CHAIN)
    assert not bool(result.converged) and float(np.max(result.r_hat)) > 1.1
    # The chain holding the best sample is the good one: its mean is least squares' F.
    assert match_features(result.features, features_ls)[1] < 0.03
    assert float(result.error) == pytest.approx(error_ls, rel=5e-3)
    # Averaging both chains mixes the optima and is clearly worse.
    mixed = np.asarray(result.samples).reshape(-1, 3, 6).mean(axis=0)
    assert float(jnp.mean(associate(jnp.asarray(mixed), tiny.x).energy)) > 1.2 * error_ls


@pytest.fixture
def progress_updates(monkeypatch):
    """Record how far fit_gvq_mcmc's progress bar is advanced."""
    counts = []

    class Recorder(engine_progress.tqdm):
        def update(self, n=1):
            counts.append(n)
            return super().update(n)

    monkeypatch.setattr(engine_progress, "tqdm", Recorder)
    return counts


def _permuted_starts(tiny):
    noise = 0.2 * jax.random.normal(jax.random.key(9), (2, 3, 6))
    return jnp.stack([tiny.features + noise[0], tiny.features[jnp.array([2, 0, 1])] + noise[1]])


@pytest.mark.slow
def test_mcmc_progress_bar_counts_every_iteration_and_changes_nothing(
        tiny, two_permuted_chains, progress_updates):
    """The bar is advanced from inside the jitted chain; the draws are the same."""
    result = fit_gvq_mcmc(tiny.x, 3, rng_key=jax.random.key(0), num_chains=2,
                          init_features=_permuted_starts(tiny), progress_bar=True, **CHAIN)
    assert sum(progress_updates) == 2 * 200
    np.testing.assert_array_equal(np.asarray(result.samples),
                                  np.asarray(two_permuted_chains.samples))


@pytest.mark.slow
def test_mcmc_vectorized_chains(tiny, least_squares, two_permuted_chains, progress_updates):
    """Chains under vmap: the same algorithm, compiled differently.

    Rounding differs between the two compilations and NUTS amplifies it (a tree
    doubling decided the other way sends a chain elsewhere within a few draws), so
    the runs are compared as samplers of one posterior, not draw by draw: both
    aligned on the sequential run's pivot, their posterior means agree within
    4 Monte Carlo standard errors of a difference (posterior sd 0.042, >= 30
    effective draws per run: 4 * 0.042 * sqrt(2 / 30) = 0.044) and their spreads
    within a third.
    """
    result = fit_gvq_mcmc(tiny.x, 3, rng_key=jax.random.key(0), num_chains=2,
                          init_features=_permuted_starts(tiny), chain_method="vectorized",
                          progress_bar=True, **CHAIN)
    assert sum(progress_updates) == 2 * 200
    assert result.samples.shape == two_permuted_chains.samples.shape
    assert float(np.max(result.r_hat)) < 1.1 and result.num_relabelled >= 100
    assert float(np.min(result.ess)) > 30
    pivot = two_permuted_chains.best_features
    vectorized, _ = relabel_samples(np.asarray(result.samples), pivot)
    sequential, _ = relabel_samples(np.asarray(two_permuted_chains.samples), pivot)
    assert np.max(np.abs(vectorized.mean(axis=(0, 1)) - sequential.mean(axis=(0, 1)))) < 0.044
    spread_ratio = np.mean(vectorized.std(axis=(0, 1))) / np.mean(sequential.std(axis=(0, 1)))
    assert 0.67 < spread_ratio < 1.5
    assert match_features(result.features, least_squares[0])[1] < 0.03


def test_relabel_samples_undoes_permutations():
    pivot = jnp.arange(12.0).reshape(4, 3)
    perms = np.array([[0, 1, 2, 3], [1, 0, 3, 2], [3, 2, 1, 0]])
    samples = np.asarray(pivot)[perms] + 0.01
    relabelled, moved = relabel_samples(samples, pivot)
    np.testing.assert_allclose(relabelled, np.broadcast_to(np.asarray(pivot) + 0.01, (3, 4, 3)))
    assert moved == 2
    with pytest.raises(ValueError, match="pivot's shape"):
        relabel_samples(samples[:, :3], pivot)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_features": MAX_MCMC_FEATURES + 1}, ValueError, "num_features must be at most 8"),
        ({"num_features": 0}, ValueError, "num_features must be at least 1"),
        ({"num_samples": 0}, ValueError, "num_samples must be at least 1"),
        ({"num_samples": 3}, ValueError, "num_samples must be at least 4"),
        ({"num_samples": 10.5}, TypeError, "num_samples must be an integer"),
        ({"num_warmup": 0}, ValueError, "num_warmup must be at least 1"),
        ({"num_chains": 0}, ValueError, "num_chains must be at least 1"),
        ({"summary": "median"}, ValueError, "summary must be"),
        ({"chain_method": "parallel"}, ValueError, "chain_method must be"),
        ({"noise": -1.0}, ValueError, "noise must be positive"),
        ({"target_accept_prob": 1.5}, ValueError, "target_accept_prob must be in"),
        ({"rng_key": None}, ValueError, "explicit rng_key"),
        ({"model_kwargs": {"features": np.ones((3, 6))}}, ValueError, "must not fix 'features'"),
        ({"init_features": np.ones((2, 6))}, ValueError, "init_features must have shape"),
    ],
)
def test_mcmc_bad_input(tiny, kwargs, error, match):
    call = {"num_features": 3, "rng_key": jax.random.key(0), **kwargs}
    with pytest.raises(error, match=match):
        fit_gvq_mcmc(tiny.x, **call)


def test_mcmc_bad_data():
    with pytest.raises(ValueError, match="x must be 2-D"):
        fit_gvq_mcmc(np.ones(5), 2, rng_key=jax.random.key(0))
    with pytest.raises(ValueError, match="NaN"):
        fit_gvq_mcmc(np.full((4, 2), np.nan), 2, rng_key=jax.random.key(0))


@pytest.mark.slow
def test_compare_gvq_learning_quick_cli(tmp_path, capsys):
    status = main(["compare", "gvq_learning", "--quick", "--no-progress",
                   "--output-dir", str(tmp_path)])
    assert status == 0
    out = capsys.readouterr().out
    learners = ["planted features", "EM, exact association", "EM, BR association",
                "EM, MF association", "EM, BR+MF association", "SVI TraceEnum_ELBO", "NUTS"]
    for learner in learners:
        assert learner in out
    report = json.load(open(tmp_path / "gvq_learning_comparison.json"))
    assert len(report["rows"]) == len(learners)
    planted = report["rows"][0]
    assert planted["implementation"] == "reference"
    # The noise floor: dim * sigma^2 = 12 * 0.1 = 1.2, within 3 standard errors
    # (the per-example error is sigma^2 chi^2_12, sd sqrt(24) 0.1 / sqrt(200) = 0.035).
    assert planted["objective"] == pytest.approx(1.2, abs=0.11)
    # EM with exact association finds the planted features here (up to the noise), and
    # fits the noise slightly better than they do.
    em = next(row for row in report["rows"] if row["algorithm"] == "EM, exact association")
    assert em["feature_error"] < 0.2
    assert -0.05 < em["gap_to_planted"] <= 0.0
    assert em["own_error"] == pytest.approx(em["objective"], rel=1e-5)
    # Every learner is reported with a finite error no better than 10% below the floor,
    # a time and an iteration count.
    for row in report["rows"][1:]:
        assert np.isfinite(row["objective"]) and row["gap_to_planted"] > -0.1
        assert row["time_s"] > 0 and row["first_call_s"] > 0 and row["iterations"] >= 1
    nuts = next(row for row in report["rows"] if row["algorithm"].startswith("NUTS"))
    assert nuts["iterations"] == 100 and nuts["mcmc_chains"] == 2
    assert nuts["mcmc_gradients"] >= 2 * 100
    assert (tmp_path / "gvq_learning_comparison.png").stat().st_size > 1000
