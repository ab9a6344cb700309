"""Numerical stress: tiny sigmas, extreme scales, float32/float64, degenerate inputs.

Each case must either work (finite results) or fail with a clear ``ValueError`` /
``TypeError`` naming the argument; project warnings (ZooWarning: not converged,
collapsed, numerical trouble) are allowed and recorded, silent NaN is not.
"""

from __future__ import annotations

import re
import warnings

import jax
import numpy as np
import pytest

from inference import associate, fit_gvq, fit_mixture
from ppl_models import gvq, mixture
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning, ZooWarning

KEY = jax.random.key(0)


def finite_leaves(result):
    for leaf in jax.tree_util.tree_leaves(result):
        if isinstance(leaf, np.ndarray | jax.Array) and np.issubdtype(np.asarray(leaf).dtype,
                                                                      np.floating):
            assert np.all(np.isfinite(np.asarray(leaf))), leaf


def works_or_clear_error(run, names):
    """``run()`` gives finite results, or raises ValueError/TypeError naming one of ``names``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ZooWarning)
        try:
            result = run()
        except (ValueError, TypeError) as error:
            assert re.search("|".join(names), str(error)), str(error)
            return None
    finite_leaves(result)
    return result


@pytest.fixture(scope="module")
def planted():
    return gvq.generate_planted(jax.random.key(3), 30, 5, 6, noise_scale=0.2)


@pytest.mark.parametrize("method", ["mf", "gibbs", "bp"])
def test_annealed_association_down_to_sigma_1e_8(planted, method):
    """Log-domain annealing to sigma = 1e-8 (beta = 5e15): no overflow, energies finite and
    never below exhaustive search's minimum."""
    exact = associate(planted.features, planted.x)
    result = associate(planted.features, planted.x, method, rng_key=KEY, end_sigma=1e-8)
    finite_leaves(result)
    assert set(np.unique(np.asarray(result.states)).tolist()) <= {0, 1}
    assert np.all(np.asarray(result.energy) >= np.asarray(exact.energy) - 1e-3)


@pytest.mark.parametrize("scale", [1e-6, 1e6])
def test_mixture_on_scaled_data(scale):
    """Data scaled by 1e-6 and 1e6 (float32): the default regulariser is relative to the
    data's variances, so the default fit is the unscaled fit, scaled; an absolute
    reg_covar = 1e-6 at 1e-6 (far above the data's variance, ~1e-12) would smooth the
    clusters away, so that fit warns (NumericalWarning naming reg_covar) instead of
    failing silently."""
    x = np.asarray(mixture.generate(jax.random.key(1), 90, 3, 2, separation=6.0).x)
    start = dict(rng_key=KEY, max_iterations=100)
    reference = fit_mixture(x, 3, **start)
    scaled = fit_mixture(scale * x, 3, **start)
    np.testing.assert_allclose(scaled.weights, reference.weights, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(np.asarray(scaled.means) / scale, reference.means,
                               rtol=1e-3, atol=1e-3)
    if scale < 1:
        with pytest.warns(NumericalWarning, match=r"reg_covar=1e-06 is .* times the mean "
                                                  r"variance"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                smoothed = fit_mixture(scale * x, 3, reg_covar=1e-6, prune=False, **start)
        assert np.all(np.isfinite(np.asarray(smoothed.covariances)))
    else:
        fit_mixture(scale * x, 3, reg_covar=1e-6, **start)  # tiny against 1e12: no warning


@pytest.mark.parametrize("scale", [1e-6, 1e6])
def test_gvq_on_scaled_data(planted, scale):
    fit = works_or_clear_error(
        lambda: fit_gvq(scale * np.asarray(planted.x), 5, rng_key=KEY, num_restarts=1,
                        max_iterations=10), ["x"])
    assert fit is not None and fit.error >= 0


@pytest.mark.slow
def test_float64_and_float32_agree_on_gvq(planted):
    x32 = np.asarray(planted.x, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ZooWarning)
        f32 = fit_gvq(x32, 5, rng_key=KEY, num_restarts=1, max_iterations=10)
        with jax.enable_x64(True):
            f64 = fit_gvq(x32.astype(np.float64), 5, rng_key=KEY, num_restarts=1,
                          max_iterations=10)
            assert f64.features.dtype == np.float64
    assert f32.features.dtype == np.float32
    # Both finite and non-negative; the k-means++-style starts differ with the dtype, so
    # the two fits may end in different local optima (values are not compared).
    assert np.isfinite(f32.error) and np.isfinite(f64.error) and min(f32.error, f64.error) >= 0


def test_near_singular_covariance():
    """A column repeated (plus 1e-7 noise): full covariances are near-singular."""
    base = np.asarray(mixture.generate(jax.random.key(2), 90, 3, 2, separation=6.0).x)
    x = np.concatenate([base, base[:, :1] + 1e-7 * np.arange(90)[:, None]], axis=1)
    works_or_clear_error(lambda: fit_mixture(x, 3, rng_key=KEY, max_iterations=30),
                         ["x", "num_components"])


@pytest.mark.slow
def test_one_example_and_one_dimension(planted):
    # One example: association works; a mixture has nothing to fit and says so.
    one = associate(planted.features, np.asarray(planted.x)[:1])
    assert one.states.shape == (1, 5)
    with pytest.raises(ValueError, match=r"^x has no spread"):
        fit_mixture(np.ones((1, 2)), 1, rng_key=KEY)
    # One dimension.
    x1 = np.asarray(mixture.generate(jax.random.key(4), 60, 2, 1, separation=6.0).x)
    fit = works_or_clear_error(lambda: fit_mixture(x1, 2, rng_key=KEY), ["x"])
    assert fit is not None and fit.means.shape == (fit.num_components, 1)
    feats = np.array([[1.0], [2.0]], np.float32)
    result = associate(feats, np.array([[0.0], [1.0], [3.0]], np.float32))
    np.testing.assert_array_equal(np.asarray(result.states), [[0, 0], [1, 0], [1, 1]])


def test_components_that_die_mid_run():
    """Eight components on three clusters: pruning removes some mid-run, no NaN."""
    x = np.asarray(mixture.generate(jax.random.key(5), 120, 3, 2, separation=6.0).x)
    fit = works_or_clear_error(lambda: fit_mixture(x, 8, rng_key=KEY, weight_rule="mml"),
                               ["num_components", "x"])
    assert fit is not None
    counts = np.asarray(fit.trace.num_components)
    assert counts[-1] < 8 and np.all(np.diff(counts) <= 0)
