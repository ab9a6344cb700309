"""The clipped-Gaussian model (seed 001): program, handlers, Phi2, the moment fit, MAP and morph."""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro import handlers
from numpyro.infer.util import log_density
from scipy.special import ndtr, owens_t

from inference import fit_clipped_gaussian
from inference.clipped.fit import (
    empirical_moments,
    infer_hidden,
    model_moments,
    moment_error,
    morph,
    program_parameters,
)
from inference.clipped.orthant import (
    bivariate_normal_cdf,
    nearest_correlation,
    pair_density,
    pair_second_moment,
    solve_pair_correlations,
)
from inference.program.handlers import noiseless, observation_noise
from ppl_models import clipped_gaussian as cg
from ppl_models.diagnostics import NumericalWarning
from ppl_models.distributions import ClippedNormal, NoiselessClip


def owen_phi2(h, k, rho):
    """Phi2 from Owen's T function (an independent closed form), float64."""
    if rho == 1.0:
        return ndtr(min(h, k))
    if rho == -1.0:
        return max(0.0, ndtr(h) + ndtr(k) - 1.0)
    root = math.sqrt(1.0 - rho * rho)
    beta = 0.0 if (h * k > 0 or (h * k == 0 and h + k >= 0)) else 0.5
    t_h = owens_t(h, (k - rho * h) / (h * root)) if h != 0 else 0.0
    t_k = owens_t(k, (h - rho * k) / (k * root)) if k != 0 else 0.0
    if h == 0 and k == 0:
        return 0.25 + math.asin(rho) / (2 * math.pi)
    return 0.5 * (ndtr(h) + ndtr(k)) - t_h - t_k - beta


@pytest.mark.slow
def test_phi2_matches_owens_t_everywhere_in_float64():
    rng = np.random.default_rng(0)
    rhos = [-1.0, -0.99999, -0.999, -0.93, -0.924, -0.5, 0.0, 0.2, 0.9, 0.926, 0.99, 0.99999, 1.0]
    h = rng.normal(size=(len(rhos), 60)) * 2.0
    k = rng.normal(size=(len(rhos), 60)) * 2.0
    k[:, :15] = h[:, :15] + rng.normal(size=(len(rhos), 15)) * 1e-3  # h close to k
    rho = np.repeat(np.asarray(rhos)[:, None], 60, axis=1)
    with jax.enable_x64(True):
        got = np.asarray(bivariate_normal_cdf(jnp.asarray(h), jnp.asarray(k), jnp.asarray(rho)))
    want = np.vectorize(owen_phi2)(h, k, rho)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    # float32 (the default dtype) is good to about 1e-6 up to |rho| = 0.999, and at +-1.
    got32 = np.asarray(bivariate_normal_cdf(jnp.asarray(h, jnp.float32),
                                            jnp.asarray(k, jnp.float32),
                                            jnp.asarray(rho, jnp.float32)))
    usable = (np.abs(rho) <= 0.999) | (np.abs(rho) == 1.0)
    np.testing.assert_allclose(got32[usable], want[usable], rtol=0, atol=2e-6)


@pytest.mark.slow
def test_pair_solve_inverts_the_moment_to_1e_9_in_rho():
    rng = np.random.default_rng(1)
    n = 3000
    h, k = rng.normal(size=n), rng.normal(size=n)
    rho = rng.uniform(-0.95, 0.95, n)
    with jax.enable_x64(True):
        target = pair_second_moment(jnp.asarray(h), jnp.asarray(k), jnp.asarray(rho))
        got, boundary, unsolved = solve_pair_correlations(jnp.asarray(h), jnp.asarray(k), target,
                                                          chunk_size=1024)
        got, boundary = np.asarray(got), np.asarray(boundary)
        reached = np.asarray(pair_second_moment(jnp.asarray(h), jnp.asarray(k), jnp.asarray(got)))
        slope = 4 * np.asarray(pair_density(jnp.asarray(h), jnp.asarray(k), jnp.asarray(rho)))
    assert unsolved == 0
    # Every pair reproduces its moment; where the moment depends on rho at all, rho
    # is recovered to 1e-9 (a pair at the boundary has a moment within rounding of
    # the rho = +-1 limit: measured 11 of 3000 here, their slope below 1e-12).
    np.testing.assert_allclose(reached, np.asarray(target), atol=1e-13)
    informative = slope > 1e-3
    assert informative.mean() > 0.9 and boundary.sum() < 30
    assert np.all(slope[boundary] < 1e-9)
    np.testing.assert_allclose(got[informative], rho[informative], atol=1e-9)
    # Targets beyond what any rho reaches go to the boundary: +1 above, -1 below.
    with jax.enable_x64(True):
        h2 = jnp.asarray([0.3, 0.3])
        k2 = jnp.asarray([-0.2, -0.2])
        top = pair_second_moment(h2[:1], k2[:1], jnp.ones(1))
        bottom = pair_second_moment(h2[:1], k2[:1], -jnp.ones(1))
        got, boundary, _ = solve_pair_correlations(h2, k2, jnp.concatenate([top + 1e-3,
                                                                            bottom - 1e-3]))
    np.testing.assert_array_equal(np.asarray(got), [1.0, -1.0])
    assert np.all(np.asarray(boundary))


def test_clipped_normal_and_its_noiseless_limit():
    loc = jnp.array([0.7, -1.2, 0.0])
    s = jnp.array([1.0, 1.0, -1.0])
    np.testing.assert_allclose(ClippedNormal(loc, 0.5).log_prob(s),
                               np.log(ndtr(np.asarray(s * loc / 0.5, np.float64))), rtol=1e-5)
    # 2 sigma^2 log Phi(s loc / sigma) -> -min(0, s loc)^2 as sigma -> 0.
    limit = NoiselessClip(loc).log_prob(s)
    np.testing.assert_allclose(limit, [0.0, -1.44, 0.0])
    small = 2 * 1e-3 ** 2 * ClippedNormal(loc, 1e-3).log_prob(s)
    np.testing.assert_allclose(small, limit, atol=1e-4)
    draws = ClippedNormal(loc, 0.5).sample(jax.random.key(0), (20000,))
    assert set(np.unique(np.asarray(draws)).tolist()) == {-1.0, 1.0}
    se = np.sqrt(np.asarray(ClippedNormal(loc, 0.5).variance) / 20000)
    assert np.all(np.abs(np.asarray(draws.mean(0) - ClippedNormal(loc, 0.5).mean)) < 5 * se)


@pytest.mark.slow
def test_program_log_density_is_the_probit_model_and_the_handlers_reach_it():
    data = cg.generate(jax.random.key(2), 7, 5, 2)
    y = jax.random.normal(jax.random.key(3), (7, 2))
    kwargs = {"weights": data.weights, "bias": data.bias, "noise": 0.3}
    logp, _ = log_density(cg.model, (data.s,), kwargs, {"y": y})
    loc = np.asarray(y @ data.weights.T + data.bias, np.float64)
    s = np.asarray(data.s, np.float64)
    want = (np.sum(-0.5 * np.asarray(y, np.float64) ** 2 - 0.5 * math.log(2 * math.pi))
            + np.sum(np.log(ndtr(s * loc / 0.3))))
    assert float(logp) == pytest.approx(want, rel=1e-5)
    # observation_noise sets sigma of the clipped site; noiseless gives -sum min(0, s loc)^2.
    logp_set, _ = log_density(observation_noise(cg.model, sigma=0.3), (data.s,),
                              {**kwargs, "noise": 5.0}, {"y": y})
    assert float(logp_set) == pytest.approx(float(logp), rel=1e-6)
    energy, _ = log_density(noiseless(cg.model), (data.s,), kwargs, {"y": y})
    assert float(energy) == pytest.approx(-np.sum(np.minimum(s * loc, 0.0) ** 2), rel=1e-5)


def test_generate_at_zero_noise_is_the_deterministic_clip():
    data = cg.generate(jax.random.key(4), 50, 9, 3)
    clip = np.where(np.asarray(data.y @ data.weights.T + data.bias) >= 0, 1.0, -1.0)
    np.testing.assert_array_equal(np.asarray(data.s), clip)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(data.weights), axis=1), 1.0, rtol=1e-5)


@pytest.mark.slow
def test_arcsine_law_matches_monte_carlo_within_5_standard_errors():
    # Zero bias: <s_a s_b> = (2/pi) asin(C_ab / sqrt(C_aa C_bb)) (eq. 7).
    rng = np.random.default_rng(5)
    w = rng.normal(size=(8, 3))
    num = 40000
    data = cg.generate(jax.random.key(6), num, weights=w, bias=0.0)
    _, second = empirical_moments(data.s)
    cov = w @ w.T
    sd = np.sqrt(np.diag(cov))
    law = 2 / np.pi * np.arcsin(cov / np.outer(sd, sd))
    se = np.sqrt((1 - law ** 2) / num) + 1e-12
    off = ~np.eye(8, dtype=bool)
    z = np.abs(np.asarray(second, np.float64) - law)[off] / se[off]
    assert z.max() < 5, z.max()
    # With biases, eq. 10 (model_moments) against Monte Carlo, means and pairs.
    xi = rng.normal(size=8) * 0.8
    data = cg.generate(jax.random.key(7), num, weights=w, bias=xi)
    means, second = (np.asarray(v, np.float64) for v in empirical_moments(data.s))
    pred_means, pred_second = (np.asarray(v, np.float64) for v in model_moments(w, xi))
    se_m = np.sqrt((1 - pred_means ** 2) / num)
    assert np.max(np.abs(means - pred_means) / se_m) < 5
    se = np.sqrt((1 - pred_second ** 2) / num)[off] + 1e-12
    assert np.max(np.abs(second - pred_second)[off] / se) < 5


def test_zero_bias_fit_is_the_sine_of_the_binary_correlations():
    data = cg.generate(jax.random.key(8), 500, 10, 2, bias=0.0)
    fit = fit_clipped_gaussian(data.s, 2, bias=False)
    _, second = empirical_moments(data.s)
    np.testing.assert_allclose(fit.gaussian_corr, np.sin(np.pi * np.asarray(second) / 2),
                               atol=1e-6)
    np.testing.assert_array_equal(np.asarray(fit.bias), 0.0)
    assert fit.weights.shape == (10, 2)
    recon = np.asarray(fit.weights @ fit.weights.T)
    top = np.asarray(fit.eigenvalues)[:2]
    assert np.trace(recon) == pytest.approx(top.sum(), rel=1e-4)


@pytest.mark.slow
def test_biased_fit_round_trips_a_planted_model():
    num = 10000
    data = cg.generate(jax.random.key(1), num, 30, 3)
    fit = fit_clipped_gaussian(data.s, 3)
    w = np.asarray(data.weights, np.float64)
    xi = np.asarray(data.bias, np.float64)
    truth = w @ w.T
    # Biases: xi = Phi^-1((1 + <s>) / 2); standard error by the delta method.
    p = ndtr(xi)
    se_xi = np.sqrt(p * (1 - p) / num) / (np.exp(-xi ** 2 / 2) / math.sqrt(2 * math.pi))
    assert np.max(np.abs(np.asarray(fit.bias) - xi) / se_xi) < 5
    # C_xx pair by pair within 5 standard errors (delta method through eq. 10).
    rows, cols = np.triu_indices(30, k=1)
    _, second = model_moments(w, xi)
    second = np.asarray(second, np.float64)[rows, cols]
    r = truth[rows, cols]
    density = np.exp(-(xi[rows] ** 2 - 2 * r * xi[rows] * xi[cols] + xi[cols] ** 2)
                     / (2 * (1 - r ** 2))) / (2 * np.pi * np.sqrt(1 - r ** 2))
    se = np.sqrt((1 - second ** 2) / num) / (4 * density)
    z = np.abs(np.asarray(fit.gaussian_corr, np.float64)[rows, cols] - r) / se
    assert np.max(z) < 5, np.max(z)
    # The fitted W spans the planted column space: principal angles below 3 degrees
    # (measured: 0.9, 1.0, 1.3 degrees for this seed).
    q_true, _ = np.linalg.qr(w)
    q_fit, _ = np.linalg.qr(np.asarray(fit.weights, np.float64))
    cosines = np.linalg.svd(q_true.T @ q_fit, compute_uv=False)
    assert np.degrees(np.arccos(np.clip(cosines.min(), -1, 1))) < 3.0


def test_bumps_give_exactly_two_nonzero_gaussian_eigenvalues():
    n = 256
    shifts = (np.arange(n)[None, :] - np.arange(n)[:, None]) % n
    exact = np.where(shifts < n // 2, 1.0, -1.0)  # every bump position once
    fit = fit_clipped_gaussian(exact, 2, bias=False)
    eigenvalues = np.asarray(fit.eigenvalues, np.float64)
    assert np.sum(eigenvalues > 1e-6 * eigenvalues[0]) == 2
    assert eigenvalues[:2] == pytest.approx([n / 2, n / 2], rel=1e-4)
    binary = np.linalg.eigvalsh(np.asarray(fit.binary_corr, np.float64))
    assert np.sum(binary > 1e-6 * binary.max()) == n // 2  # C_ss: a continuum of N/2
    assert not fit.has_negative_eigenvalues


# The default run checks the closed form with 4 units; the slow run with 6 and 8 as well.
@pytest.mark.parametrize("num_units", [4, pytest.param(6, marks=pytest.mark.slow),
                                       pytest.param(8, marks=pytest.mark.slow)])
def test_sum_constraint_has_a_negative_gaussian_eigenvalue(num_units):
    patterns = np.asarray(cg.sum_constraint_patterns(num_units))
    fit = fit_clipped_gaussian(patterns, 2, bias=False)
    c = math.sin(-math.pi / (2 * (num_units - 1)))  # C_ss_ab = -1/(N-1) off the diagonal
    assert fit.has_negative_eigenvalues
    assert fit.min_eigenvalue == pytest.approx(1 + (num_units - 1) * c, abs=1e-6)
    # One copy of each pattern is too few to rule out sampling noise (no warning);
    # the same distribution seen in 100 copies of every pattern is a clear shortcoming.
    assert fit.eigenvalue_noise > -fit.min_eigenvalue
    many = np.tile(patterns, (100, 1))
    with pytest.warns(NumericalWarning, match="negative eigenvalue"):
        fit = fit_clipped_gaussian(many, 2, bias=False)
    assert fit.eigenvalue_noise < -fit.min_eigenvalue
    with pytest.warns(NumericalWarning, match="projected"):
        projected = fit_clipped_gaussian(many, 2, bias=False, project=True)
    assert projected.projected
    assert np.min(np.asarray(projected.eigenvalues)) > -1e-6
    np.testing.assert_allclose(np.diag(np.asarray(projected.gaussian_corr)), 1.0, atol=1e-6)


def test_nearest_correlation_matches_highams_example():
    # Higham (2002), sec. 4: the nearest correlation matrix to [[1,1,0],[1,1,1],[0,1,1]].
    with jax.enable_x64(True):
        out, _, converged = nearest_correlation(
            jnp.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 1.0, 1.0]]), tol=1e-12)
        out = np.asarray(out)
    assert bool(converged)
    want = np.array([[1.0, 0.7607, 0.1573], [0.7607, 1.0, 0.7607], [0.1573, 0.7607, 1.0]])
    np.testing.assert_allclose(out, want, atol=1e-4)


def test_nearest_correlation_converges_in_float32_at_its_default_tolerance():
    """The default tol is 4 n float32 epsilons, which the projections meet (1e-9 was
    met only where rounding happened to cancel); the result is float64's to 1e-5."""
    c = np.array([[1.0, 0.9, -0.9], [0.9, 1.0, 0.9], [-0.9, 0.9, 1.0]])
    out, iterations, converged = nearest_correlation(jnp.asarray(c, jnp.float32))
    assert bool(converged) and int(iterations) < 100 and out.dtype == jnp.float32
    with jax.enable_x64(True):
        exact, _, converged64 = nearest_correlation(jnp.asarray(c, jnp.float64))
        exact = np.asarray(exact)
    assert bool(converged64)
    np.testing.assert_allclose(np.asarray(out), exact, atol=1e-5)
    assert np.linalg.eigvalsh(np.asarray(out, np.float64)).min() > -1e-5  # PSD to ~tol


@pytest.mark.slow
def test_zero_one_input_equals_spin_input_and_constant_columns():
    data = cg.generate(jax.random.key(9), 400, 6, 2)
    spins = np.asarray(data.s)
    fit = fit_clipped_gaussian(spins, 2)
    fit01 = fit_clipped_gaussian((spins > 0).astype(int), 2)
    np.testing.assert_allclose(fit.gaussian_corr, fit01.gaussian_corr, atol=1e-6)
    with_constant = np.concatenate([spins, np.ones((400, 1))], axis=1)
    with pytest.raises(ValueError, match=r"constant column\(s\) \[6\]"):
        fit_clipped_gaussian(with_constant, 2)
    fit_c = fit_clipped_gaussian(with_constant, 2, constant_columns="independent")
    corr = np.asarray(fit_c.gaussian_corr)
    np.testing.assert_allclose(corr[6], 0.0)  # no part in C_xx: no eigenvalue, zero W row
    np.testing.assert_allclose(np.asarray(fit_c.weights)[6], 0.0)
    np.testing.assert_allclose(corr[:6, :6], fit.gaussian_corr, atol=1e-6)
    assert float(fit_c.means[6]) == pytest.approx(1 - 1 / 400)
    np.testing.assert_array_equal(fit_c.constant_columns, [6])


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(s=[[1, 0, 2], [0, 1, 1]]), ValueError, "only -1 / \\+1 or only 0 / 1"),
    (dict(s=[[1, -1, 0], [-1, 1, 1]]), ValueError, "only -1 / \\+1 or only 0 / 1"),
    (dict(s=[1, -1, 1]), ValueError, "2-D"),
    (dict(s=np.zeros((0, 3))), ValueError, "empty"),
    (dict(num_hidden=4), ValueError, "num_hidden"),
    (dict(num_hidden=0), ValueError, "num_hidden"),
    (dict(constant_columns="drop"), ValueError, "constant_columns"),
    (dict(s=[["a", "b", "c"]]), TypeError, "numeric"),
])
def test_bad_input(kwargs, error, match):
    args = dict(s=[[1, -1, 1], [-1, -1, 1], [1, 1, -1]], num_hidden=2) | kwargs
    with pytest.raises(error, match=match):
        fit_clipped_gaussian(args.pop("s"), args.pop("num_hidden"), **args)


@pytest.mark.slow
def test_map_hidden_causes_are_stationary_and_reproduce_the_patterns():
    data = cg.generate(jax.random.key(10), 40, 12, 2)
    noise = 0.05
    y = infer_hidden(data.s, data.weights, data.bias, noise=noise)
    kwargs = {"weights": data.weights, "bias": data.bias, "noise": noise}

    def logp(y_all):
        return log_density(cg.model, (data.s,), kwargs, {"y": y_all})[0]

    grad = jax.grad(logp)(y)
    start_grad = jax.grad(logp)(jnp.zeros_like(y))
    assert float(jnp.max(jnp.abs(grad))) < 1e-3 * float(jnp.max(jnp.abs(start_grad)))
    # Noise-free patterns lie in a cell of hidden space: the MAP y clips back to them
    # (up to units whose hyperplane passes within about sigma of y).
    clip = np.where(np.asarray(y @ data.weights.T + data.bias) >= 0, 1.0, -1.0)
    assert np.mean(clip == np.asarray(data.s)) > 0.97


@pytest.mark.slow
def test_morph_runs_between_the_two_patterns_in_hidden_space():
    data = cg.generate(jax.random.key(11), 30, 16, 2)
    frames, hidden = morph(data.s[0], data.s[1], 7, weights=data.weights, bias=data.bias)
    assert frames.shape == (7, 16) and hidden.shape == (7, 2)
    assert set(np.unique(np.asarray(frames)).tolist()) <= {-1.0, 1.0}
    ends = infer_hidden(data.s[:2], data.weights, data.bias)
    np.testing.assert_allclose(hidden[0], ends[0], atol=1e-5)
    np.testing.assert_allclose(hidden[-1], ends[1], atol=1e-5)
    clip = np.where(np.asarray(hidden @ data.weights.T + data.bias) >= 0, 1.0, -1.0)
    np.testing.assert_array_equal(np.asarray(frames), clip)
    # Consecutive frames differ by few flips: the clip of a straight line in hidden
    # space crosses each unit's hyperplane at most once.
    flips = np.abs(np.diff(np.asarray(frames), axis=0)).sum(axis=0) / 2
    assert np.all(flips <= 1)
    with pytest.raises(ValueError, match="steps"):
        morph(data.s[0], data.s[1], 1, weights=data.weights, bias=data.bias)


@pytest.mark.slow
def test_program_parameters_keep_the_fitted_marginals_and_moment_error_has_a_floor():
    data = cg.generate(jax.random.key(12), 6000, 10, 2)
    fit = fit_clipped_gaussian(data.s[:3000], 2)
    params = program_parameters(fit, 0.1)
    means, _ = model_moments(params["weights"], params["bias"], 0.1)
    np.testing.assert_allclose(means, fit.means, atol=1e-5)
    score = moment_error(model_moments(**params), data.s[3000:])
    truth = moment_error(model_moments(data.weights, data.bias), data.s[3000:])
    # The planted model sits near the sampling floor; the fit within a few times it.
    assert truth["corr_rmse"] < 2 * truth["noise_floor_corr"]
    assert score["corr_rmse"] < 4 * truth["noise_floor_corr"]
    with pytest.raises(ValueError, match="units"):
        moment_error(model_moments(**params), data.s[3000:, :5])


def test_fit_flags_fewer_positive_eigenvalues_than_hidden_units():
    n = 16
    shifts = (np.arange(n)[None, :] - np.arange(n)[:, None]) % n
    exact = np.where(shifts < n // 2, 1.0, -1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit_clipped_gaussian(exact, 2, bias=False)  # rank 2: no warning
    with pytest.warns(NumericalWarning, match="only 2 positive"):
        fit = fit_clipped_gaussian(exact, 3, bias=False)
    np.testing.assert_allclose(np.asarray(fit.weights)[:, 2], 0.0, atol=1e-6)


def test_model_samples_through_numpyro_trace_have_the_documented_sites():
    data = cg.generate(jax.random.key(13), 4, 5, 2)
    trace = handlers.trace(handlers.seed(cg.model, 0)).get_trace(data.s, num_hidden=2)
    assert trace["W"]["fn"].event_shape == (5, 2) and trace["xi"]["fn"].event_shape == (5,)
    assert trace["y"]["value"].shape == (4, 2) and trace["s"]["is_observed"]
    with pytest.raises(ValueError, match="give s or num_examples"):
        cg.model()
