"""The families' own fits are cases of the generic EM (:func:`inference.fit_em`) on the
zoo's own programs (:mod:`inference.em.programs`), from the same start:

* ``fit_mixture(mode="stochastic")`` (EM) is ``fit_em(e_step="soft")``, ``mode="map"``
  (hard-cut EM) is ``fit_em(e_step="hard")`` and ``mode="nearest"`` (k-means) is
  ``fit_em(e_step="hard", noise=None)`` on the mixture program with equal weights;
* ``fit_mcvq`` with one VQ is ``fit_em(e_step="mean-field")`` on the MCVQ program; with
  several VQs the two are variational EM on the same program in different families of
  posteriors, and the free energy that ``fit_em`` lowers is ``fit_mcvq``'s where the
  families meet (:func:`test_mcvq_free_energy_is_fit_ems_with_one_selection_posterior`
  says why they cannot be equal);
* ``fit_ppca(noise="ml")`` (Tipping and Bishop's EM) and ``fit_em`` on the marginal PPCA
  program reach the same maximum-likelihood covariance, noise and log-likelihood.

Everything runs in float64 (``jax.enable_x64`` inside each test), where the agreement
is the point. The tolerances: where ``fit_em``'s M-step is its monotone L-BFGS (some
parameter carries a constraint: weights, standard deviations), it accepts a step only
where the objective falls in floating point, so it pins the maximiser only to about the
square root of the float's resolution (sqrt(2.2e-16) = 1.5e-8) relative, times the
problem's conditioning (measured: 1e-8 to 1e-7). So the parameters, and the objectives
along the way (first order in the parameters there), agree to 1e-6 relative; the
objectives at a fixed point, flat there, to 1e-9. Where the M-step is in closed form
(k-means' means) they agree to rounding.

Both fits of a pair start at the same parameters: ``fit_em(init="program",
init_params=...)`` begins with the E-step there, as the family's fit does.

References
----------
L. Xu, "YING-YANG machine: a Bayesian-Kullback scheme for unified learnings and new
results on vector quantization", Proc. ICONIP, 1995; D. A. Ross and R. S. Zemel,
"Multiple cause vector quantization", NIPS 15, 2003; M. E. Tipping and C. M. Bishop,
"Probabilistic principal component analysis", Journal of the Royal Statistical Society
B 61(3), 1999.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import xlogy
from numpyro.infer.util import log_density

from inference import fit_em
from inference.em.programs import mcvq_program, mixture_program, ppca_program
from inference.mcvq.core import free_energy, init, likelihood_terms, priors
from inference.mcvq.em import fit_mcvq
from inference.mixture.em import fit_mixture
from inference.ppca.em import fit_ppca
from ppl_models import mcvq, mixture, ppca
from ppl_models.diagnostics import ConvergenceWarning

#: Parameters through fit_em's L-BFGS M-step: sqrt(float64 resolution) times the
#: conditioning (module docstring).
PARAMS_RTOL = 1e-6
#: Objectives at matching parameters: second order in the parameters' difference.
OBJECTIVE_RTOL = 1e-9
#: L-BFGS steps of fit_em's M-step on the mixture (default 30): with the weights learned
#: too, 30 steps leave it short of the maximiser (variances 8e-4 relative off at the
#: hard-cut fixed point below), 100 reach it to 1e-8.
MIXTURE_M_STEPS = 100

K = 3  # mixture components
START = [0, 5, 10]  # the examples that are the mixtures' initial means


def quietly(fit, *args, **kwargs):
    """``fit`` with its not-converged warning silenced (the runs here stop at a fixed
    number of iterations on purpose)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return fit(*args, **kwargs)


@pytest.fixture(scope="module")
def x_mixture():
    """60 examples of three overlapping components in two dimensions, standardised
    (fit_em's L-BFGS M-step, which moves the unconstrained parameters by about one unit
    in its first step, needs more steps on the raw draws, whose spread is about 12)."""
    with jax.enable_x64(True):
        x = np.asarray(mixture.generate(jax.random.key(3), 60, K, 2, separation=2.0).x,
                       np.float64)
    return (x - x.mean(axis=0)) / x.std(axis=0)


def diagonal(scales):
    return np.asarray(jax.vmap(jnp.diag)(jnp.square(scales)))


def variances(result):
    return np.diagonal(np.asarray(result.covariances), axis1=1, axis2=2)


def mixture_start(x):
    """Initial means (three examples), equal weights and unit standard deviations (the
    data's, standardised)."""
    return {"means": x[START], "weights": np.full(K, 1.0 / K), "scales": np.ones((K, 2))}


def test_soft_em_is_fit_mixture_stochastic(x_mixture):
    """EM (Xu (1995), eq. 17-18) from the same start, no regularisation on either side
    (``reg_covar=0``): the same log-likelihood after every iteration, and the same fixed
    point."""
    x, num = x_mixture, x_mixture.shape[0]
    start = mixture_start(x)
    with jax.enable_x64(True):
        ours = fit_em(mixture_program, x, K, covariance="diag", e_step="soft",
                      init="program", init_params=start, rng_key=jax.random.key(0),
                      num_restarts=1, max_iterations=200, tol=1e-12,
                      m_step_iterations=MIXTURE_M_STEPS)
        family = fit_mixture(x, K, mode="stochastic", covariance="diag", prune=False,
                             reg_covar=0.0, init_means=start["means"],
                             init_weights=start["weights"],
                             init_covariances=diagonal(start["scales"]), max_iterations=200,
                             tol=1e-12)
    assert ours.converged and family.converged and ours.num_iterations > 20
    # fit_em's trace is the log-likelihood after each iteration (theta_1, theta_2, ...);
    # fit_mixture's is minus the mean log-likelihood before each (theta_0, theta_1, ...).
    common = min(ours.num_iterations, family.num_iterations - 1)
    np.testing.assert_allclose(np.asarray(ours.trace.objective)[:common],
                               -num * np.asarray(family.trace.objective)[1:1 + common],
                               rtol=PARAMS_RTOL)
    np.testing.assert_allclose(ours.params["means"], family.means, rtol=PARAMS_RTOL,
                               atol=PARAMS_RTOL)
    np.testing.assert_allclose(ours.params["weights"], family.weights, rtol=PARAMS_RTOL)
    np.testing.assert_allclose(np.square(ours.params["scales"]), variances(family),
                               rtol=PARAMS_RTOL)
    assert ours.objective == pytest.approx(-num * family.L_stocha, rel=OBJECTIVE_RTOL)


def test_hard_em_is_fit_mixture_map(x_mixture):
    """Hard-cut EM (Xu (1995), eq. 19-20) from the same start to the same fixed point:
    the same assignment, parameters and mean energy (``L_map`` there: at the fixed point
    the weights are the assignment's)."""
    x = x_mixture
    start = mixture_start(x)
    with jax.enable_x64(True):
        ours = fit_em(mixture_program, x, K, covariance="diag", e_step="hard",
                      noise="program", init="program", init_params=start,
                      rng_key=jax.random.key(0), num_restarts=1, max_iterations=50,
                      m_step_iterations=MIXTURE_M_STEPS)
        family = fit_mixture(x, K, mode="map", covariance="diag", prune=False, reg_covar=0.0,
                             init_means=start["means"], init_weights=start["weights"],
                             init_covariances=diagonal(start["scales"]), max_iterations=50)
    assert ours.converged and family.converged
    # fit_mixture sees that no label changed one iteration later (its E-step opens the
    # iteration, fit_em's closes it).
    assert family.num_iterations == ours.num_iterations + 1 == 4
    np.testing.assert_array_equal(ours.states["y"], family.labels)
    np.testing.assert_allclose(ours.params["means"], family.means, rtol=PARAMS_RTOL,
                               atol=PARAMS_RTOL)
    np.testing.assert_allclose(ours.params["weights"], family.weights, rtol=PARAMS_RTOL)
    np.testing.assert_allclose(np.square(ours.params["scales"]), variances(family),
                               rtol=PARAMS_RTOL)
    assert ours.objective == pytest.approx(family.L_map, rel=OBJECTIVE_RTOL)


def test_hard_em_in_the_limit_is_fit_mixture_nearest(x_mixture):
    """k-means (Xu (1995), eq. 21-22): the program with equal weights and one spherical
    variance in the sigma -> 0 limit, its means the only parameters. The M-step is in
    closed form on both sides, so the means agree to rounding (1e-12), and fit_em's mean
    energy is the mean squared error in fit_mixture's J = log k + (d/2) log E_MSE."""
    x, dim = x_mixture, x_mixture.shape[1]
    means = x[[0, 1, 3]]  # a start from which k-means takes eight iterations
    with jax.enable_x64(True):
        ours = fit_em(mixture_program, x, K, covariance="spherical",
                      weights=jnp.full(K, 1.0 / K), scales=jnp.ones(K), e_step="hard",
                      noise=None, init="program", init_params={"means": means},
                      rng_key=jax.random.key(0), num_restarts=1, max_iterations=50)
        family = fit_mixture(x, K, mode="nearest", prune=False, init_means=means,
                             max_iterations=50)
    assert ours.closed_form and ours.converged and family.converged
    assert family.num_iterations == ours.num_iterations + 1 == 8
    np.testing.assert_array_equal(ours.states["y"], family.labels)
    np.testing.assert_allclose(ours.params["means"], family.means, rtol=1e-12, atol=1e-12)
    assert np.log(K) + 0.5 * dim * np.log(ours.objective) == pytest.approx(family.J,
                                                                           rel=1e-12)


# --- MCVQ ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def x_one_vq():
    """40 examples of one VQ with three overlapping states in six dimensions."""
    with jax.enable_x64(True):
        data = mcvq.generate(jax.random.key(2), num_examples=40, dim=6, num_vqs=1,
                             num_states=3, separation=1.0, noise_scale=0.5)
        return np.asarray(data.x, np.float64)


@pytest.mark.slow  # compiling the mean-field step costs 9-11 s of CPU, more than the rest
def test_mean_field_em_with_one_vq_is_fit_mcvq(x_one_vq):
    """With one VQ the selection r is certain (g = 1) and the posterior of s is exact, and
    fit_mcvq's variational EM at T = 1 (Ross and Zemel (2003), sec. 3: E-step for m,
    M-step for mu and sigma^2 as weighted means and variances) is fit_em's mean-field EM:
    from fit_mcvq's own start (``init``: examples plus noise as mu, the data's spread as
    sigma) the same free energy after every iteration, and the same parameters and
    posteriors after ten. fit_mcvq's variance floor (1e-3 of the data's variance) stays
    inactive here."""
    x = x_one_vq
    dim = x.shape[1]
    key = jax.random.key(5)
    with jax.enable_x64(True):
        xj, mask = jnp.asarray(x), jnp.ones(x.shape, bool)
        a, b = priors(None, None, dim, 1, 3, xj.dtype)
        floor = 1e-3 * float(np.mean(np.var(x, axis=0)))
        first = init(key, xj, mask, 1, 3, a, b, floor)
        family = quietly(fit_mcvq, x, 1, 3, rng_key=key, temperature_schedule=1.0,
                         max_iterations=10, tol=0.0)
        ours = quietly(fit_em, mcvq_program, x, 1, 3, e_step="mean-field", init="program",
                       init_params={"mu": first.mu, "sigma": first.sigma},
                       rng_key=jax.random.key(0), num_restarts=1, max_iterations=10, tol=0.0)
    assert ours.num_iterations == family.num_iterations == 10
    assert bool(np.all(np.square(np.asarray(family.sigma)) > 10 * floor))
    # Both traces hold the free energy after each iteration.
    np.testing.assert_allclose(ours.trace.objective, family.trace.objective, rtol=PARAMS_RTOL)
    np.testing.assert_allclose(ours.params["mu"], family.mu, rtol=PARAMS_RTOL,
                               atol=PARAMS_RTOL)
    np.testing.assert_allclose(ours.params["sigma"], family.sigma, rtol=PARAMS_RTOL)
    np.testing.assert_allclose(ours.posteriors["s"], family.m, atol=PARAMS_RTOL)
    np.testing.assert_allclose(ours.posteriors["r"], 1.0)


def mcvq_free_energy(x, q_s, q_r, mu, sigma, a, b):
    """Minus the evidence lower bound of the MCVQ program (r per example) under a
    posterior factorised over every example's s_k and r_d:
    sum_c [KL(q(s^c) || b) + KL(q(r^c) || a) + sum_dkj q(r^c_d = k) q(s^c_k = j) ell^c_dkj],
    ell the program's -log N(x^c_d; mu_dkj, sigma_dkj)."""
    ell = likelihood_terms(x, jnp.ones(x.shape, bool), mu, sigma)
    return float(jnp.sum(xlogy(q_s, q_s) - xlogy(q_s, b)) + jnp.sum(xlogy(q_r, q_r)
                 - xlogy(q_r, a)) + jnp.einsum("cdk,ckj,cdkj->", q_r, q_s, ell))


@pytest.mark.slow  # as above: one compilation of the mean-field step
def test_mcvq_free_energy_is_fit_ems_with_one_selection_posterior():
    """Several VQs: both fits are variational EM on the MCVQ program (r per example), but
    in different families of posteriors, so they cannot be equal. fit_em's mean-field
    posterior has a factor q(r^c_d) for every example c, as it has for every discrete
    site inside the example plate; fit_mcvq's Q(r_d) = g_d is one factor shared by all
    examples (Ross and Zemel's consistency constraint), its g-step the minimiser over
    that smaller family (at T = N). fit_mcvq also anneals T from N - 1 to 1, ending at the
    program with one r for all examples (``shared_r=True``, outside the example plate,
    which fit_em refuses: it couples the examples), updates g before the parameters and
    from the old ones, and floors the variances. What holds: fit_em's objective is the
    free energy of that program under its posterior, and where the families meet (every
    q(r^c) the same g) that free energy is fit_mcvq's F_N (``free_energy``), to
    rounding."""
    with jax.enable_x64(True):
        data = mcvq.generate(jax.random.key(4), num_examples=20, dim=4, num_vqs=2,
                             num_states=2)
        x = jnp.asarray(data.x, jnp.float64)
        fit = quietly(fit_em, mcvq_program, x, 2, 2, e_step="mean-field",
                      rng_key=jax.random.key(0), num_restarts=1, max_iterations=10)
        mu, sigma = fit.params["mu"], fit.params["sigma"]
        a, b = priors(None, None, 4, 2, 2, x.dtype)
        q_s, q_r = fit.posteriors["s"], fit.posteriors["r"]
        ours = mcvq_free_energy(x, q_s, q_r, mu, sigma, a, b)
        g = jnp.mean(q_r, axis=0)  # one selection posterior for every example
        shared = mcvq_free_energy(x, q_s, jnp.broadcast_to(g, q_r.shape), mu, sigma, a, b)
        paper = float(free_energy(x, g, q_s, mu, sigma))  # F_N, T = N examples
        spread = float(jnp.max(jnp.abs(q_r - g)))
    assert fit.objective_name == "free_energy"
    assert fit.objective == pytest.approx(ours, rel=1e-12)
    assert shared == pytest.approx(paper, rel=1e-12)
    # fit_em's posterior over r differs between the examples: not fit_mcvq's family.
    assert spread > 0.1


# --- PPCA -------------------------------------------------------------------------------
def test_maximum_likelihood_is_fit_ppca():
    """Tipping and Bishop's EM (``fit_ppca(noise="ml")``, over z) and fit_em on the
    marginal program (no discrete site: maximum likelihood by its M-step over W, mu and
    sigma) reach the same W^T W + sigma^2 I (W is identified up to a rotation only),
    sigma^2 and log-likelihood, and the closed form (Tipping and Bishop (1999), sec. 3.2:
    sigma^2 the mean discarded eigenvalue of the sample covariance, W^T W the rest).
    Each fit stops where its objective stops changing in float64, which pins the
    maximiser to about sqrt(2.2e-16) relative (1e-6 allowed); the log-likelihoods,
    flat there, agree to 1e-9."""
    num, dim, q = 50, 4, 2
    with jax.enable_x64(True):
        x = np.asarray(ppca.generate(jax.random.key(0), num, dim, q, noise=1.0).x,
                       np.float64)
        ours = fit_em(ppca_program, x, q, rng_key=jax.random.key(1), num_restarts=1,
                      tol=1e-14)
        family = fit_ppca(x, q, noise="ml", rng_key=jax.random.key(1), max_iterations=1000,
                          tol=0.0)
        family_log_likelihood = float(log_density(
            ppca.model, (x,), {"weights": family.weights, "mean": family.mean,
                               "sigma": family.noise, "collapsed": True}, {})[0])
    w, sigma = np.asarray(ours.params["weights"]), float(ours.params["sigma"])
    covariance = w.T @ w + sigma ** 2 * np.eye(dim)
    family_covariance = (np.asarray(family.weights).T @ np.asarray(family.weights)
                         + family.noise ** 2 * np.eye(dim))
    eigenvalues, vectors = np.linalg.eigh(np.cov(x.T, bias=True))
    eigenvalues, vectors = eigenvalues[::-1], vectors[:, ::-1]
    noise_var = float(np.mean(eigenvalues[q:]))
    closed = (vectors[:, :q] @ np.diag(eigenvalues[:q] - noise_var) @ vectors[:, :q].T
              + noise_var * np.eye(dim))
    assert ours.converged and family.converged and not ours.closed_form
    scale = np.max(np.abs(closed))
    assert np.max(np.abs(covariance - family_covariance)) <= PARAMS_RTOL * scale
    assert np.max(np.abs(covariance - closed)) <= PARAMS_RTOL * scale
    assert sigma ** 2 == pytest.approx(family.noise ** 2, rel=PARAMS_RTOL)
    assert sigma ** 2 == pytest.approx(noise_var, rel=PARAMS_RTOL)
    np.testing.assert_allclose(ours.params["mean"], family.mean, rtol=1e-12, atol=1e-12)
    assert ours.objective == pytest.approx(family_log_likelihood, rel=OBJECTIVE_RTOL)
