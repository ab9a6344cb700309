"""The reference log evidence by adaptive tempered SMC (:mod:`inference.program.evidence`).

Checked against closed forms: a normal mean with known variance (the data are jointly
normal), and a one-component mixture with a conjugate Normal-Wishart prior whose label
is enumerated (Murphy 2007, eq. 266; Bishop, PRML sec. 2.3.6 and ex. 2.40), whose
closed form is itself checked by the candidate's formula p(X) = p(X | theta) p(theta) /
p(theta | X) with NumPyro's own densities. Then a two-component mixture of the zoo, the
mixture likelihood that SMC tempers, reproducibility, the non-finite cases and bad input.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax.scipy.special import logsumexp, multigammaln
from numpyro import handlers
from numpyro.infer.util import constrain_fn

from inference.program.evidence import (
    EvidenceResult,
    log_evidence,
    program_densities,
    tempered_smc_log_evidence,
)
from ppl_models import mixture
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import MissingKeyError

# ---------------------------------------------------------------- conjugate normal mean

M0, S0, SIGMA = 0.5, 2.0, 1.0


def normal_mean(x):
    """x_i ~ N(mu, SIGMA) with mu ~ N(M0, S0)."""
    mu = numpyro.sample("mu", dist.Normal(M0, S0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("x", dist.Normal(mu, SIGMA), obs=x)


def normal_mean_exact(x):
    """x ~ N(M0 1, SIGMA^2 I + S0^2 1 1^T)."""
    n = x.shape[0]
    cov = SIGMA ** 2 * jnp.eye(n) + S0 ** 2 * jnp.ones((n, n))
    return float(dist.MultivariateNormal(M0 * jnp.ones(n), cov).log_prob(x))


@pytest.fixture(scope="module")
def normal_data():
    return 1.3 + SIGMA * jax.random.normal(jax.random.key(1), (20,))


@pytest.fixture(scope="module")
def normal_result(normal_data):
    return log_evidence(normal_mean, normal_data, rng_key=jax.random.key(0),
                        num_particles=1000, num_repeats=8)


def test_normal_mean_matches_the_closed_form(normal_data, normal_result):
    exact = normal_mean_exact(normal_data)
    result = normal_result
    assert isinstance(result, EvidenceResult)
    assert result.converged
    assert result.standard_error < 0.1
    assert abs(result.log_evidence - exact) < 3 * result.standard_error, (result, exact)
    assert len(set(result.runs.tolist())) == len(result.runs)  # independent runs
    assert result.runs.shape == result.num_steps.shape == (8,)
    assert 0.05 < result.acceptance < 0.9
    assert "log Z = " in str(result) and "8 runs" in str(result)


def test_random_walk_moves_match_the_closed_form_too(normal_data):
    result = log_evidence(normal_mean, normal_data, rng_key=jax.random.key(3), move="rwm",
                          num_particles=1000, num_repeats=6)
    assert result.converged and 0.1 < result.acceptance < 0.4  # adapted towards 0.234
    exact = normal_mean_exact(normal_data)
    assert abs(result.log_evidence - exact) < 3 * result.standard_error + 0.02, (result, exact)


def test_a_reference_near_the_posterior_matches_the_closed_form_in_fewer_steps(
        normal_data, normal_result):
    """Tempering from q (a Gaussian twice as wide as the posterior, or a mixture with a
    useless component far away) instead of the prior: still log p(x), in fewer steps."""
    n = normal_data.shape[0]
    precision = n / SIGMA ** 2 + 1 / S0 ** 2
    mean = (float(jnp.sum(normal_data)) / SIGMA ** 2 + M0 / S0 ** 2) / precision
    exact = normal_mean_exact(normal_data)
    close = dist.MultivariateNormal(jnp.array([mean]), jnp.eye(1) * 4 / precision)
    mixture_q = dist.MixtureSameFamily(
        dist.Categorical(logits=jnp.zeros(2)),
        dist.MultivariateNormal(jnp.array([[mean], [-5.0]]), jnp.eye(1) * 4 / precision))
    for q in (close, mixture_q):
        result = log_evidence(normal_mean, normal_data, rng_key=jax.random.key(4),
                              num_particles=500, num_repeats=6, reference=q)
        assert result.converged
        assert abs(result.log_evidence - exact) < 3 * result.standard_error + 0.01, (
            result, exact)
        assert result.num_steps.max() < normal_result.num_steps.min()
    with pytest.raises(ValueError, match="reference must be a numpyro distribution"):
        log_evidence(normal_mean, normal_data, rng_key=jax.random.key(4), num_repeats=2,
                     reference=dist.MultivariateNormal(jnp.zeros(2), jnp.eye(2)))


def test_new_data_of_the_same_shapes_reuse_the_compiled_run(normal_data):
    """The data are traced: a second data set of the same shape builds no new program
    and no new SMC loop, and its estimate is that of its own data."""
    from inference.program import densities, evidence

    first = log_evidence(normal_mean, normal_data, rng_key=jax.random.key(5),
                         num_particles=200, num_repeats=2)
    programs, runs = len(densities._PROGRAMS), evidence._smc_run.cache_info().currsize
    shifted = normal_data + 5.0
    second = log_evidence(normal_mean, shifted, rng_key=jax.random.key(5),
                          num_particles=200, num_repeats=2)
    assert len(densities._PROGRAMS) == programs
    assert evidence._smc_run.cache_info().currsize == runs
    assert abs(second.log_evidence - normal_mean_exact(shifted)) < 0.5
    assert abs(first.log_evidence - normal_mean_exact(normal_data)) < 0.5
    assert abs(first.log_evidence - second.log_evidence) > 3.0


def test_the_same_key_gives_the_same_result(normal_data, normal_result):
    again = log_evidence(normal_mean, normal_data, rng_key=jax.random.key(0),
                         num_particles=1000, num_repeats=8)
    np.testing.assert_array_equal(again.runs, normal_result.runs)
    np.testing.assert_array_equal(again.num_steps, normal_result.num_steps)


# ----------------------------------------------- Normal-Wishart, one enumerated component

D = 2
NW_M0 = jnp.zeros(D)
NW_BETA0, NW_NU0 = 0.5, 4.0
NW_W0 = 0.5 * jnp.eye(D)  # scale matrix: E[Lambda] = nu0 W0 (Bishop's W, NumPyro's scale)


def normal_wishart_mixture(x):
    """One-component mixture: Lambda ~ W(nu0, W0), mu ~ N(m0, (beta0 Lambda)^-1), y ~ Cat(1)."""
    precision = numpyro.sample("precision", dist.Wishart(NW_NU0, scale_matrix=NW_W0))
    mu = numpyro.sample("mu", dist.MultivariateNormal(NW_M0, precision_matrix=NW_BETA0
                                                      * precision))
    with numpyro.plate("data", x.shape[0]):
        y = numpyro.sample("y", dist.Categorical(jnp.ones(1)))  # enumerated by log_evidence
        numpyro.sample("x", dist.MultivariateNormal(mu[None][y], precision_matrix=precision),
                       obs=x)


def normal_wishart_posterior(x):
    n = x.shape[0]
    mean = x.mean(0)
    scatter = (x - mean).T @ (x - mean)
    beta_n, nu_n = NW_BETA0 + n, NW_NU0 + n
    m_n = (NW_BETA0 * NW_M0 + n * mean) / beta_n
    diff = mean - NW_M0
    w_n_inv = jnp.linalg.inv(NW_W0) + scatter + NW_BETA0 * n / beta_n * jnp.outer(diff, diff)
    return m_n, beta_n, nu_n, w_n_inv


@jax.jit
def _normal_wishart_exact(x):
    n = x.shape[0]
    _, beta_n, nu_n, w_n_inv = normal_wishart_posterior(x)
    logdet = lambda a: jnp.linalg.slogdet(a)[1]  # noqa: E731
    return (-n * D / 2 * jnp.log(jnp.pi) + multigammaln(nu_n / 2, D)
            - multigammaln(NW_NU0 / 2, D) + NW_NU0 / 2 * logdet(jnp.linalg.inv(NW_W0))
            - nu_n / 2 * logdet(w_n_inv) + D / 2 * jnp.log(NW_BETA0 / beta_n))


def normal_wishart_exact(x):
    """log p(X) = -N D/2 log pi + log Gamma_D(nu_N/2) - log Gamma_D(nu0/2)
    + nu0/2 log|W0^-1| - nu_N/2 log|W_N^-1| + D/2 log(beta0/beta_N)."""
    return float(_normal_wishart_exact(x))


@pytest.fixture(scope="module")
def wishart_data():
    cov = jnp.array([[1.0, 0.5], [0.5, 2.0]])
    z = jax.random.normal(jax.random.key(2), (30, D))
    return jnp.array([1.0, -1.0]) + z @ jnp.linalg.cholesky(cov).T


@jax.jit
def _candidate(x, mu, precision):
    """log p(X | mu, Lambda) + log p(mu, Lambda) - log p(mu, Lambda | X), NumPyro's densities."""
    m_n, beta_n, nu_n, w_n_inv = normal_wishart_posterior(x)
    log_lik = dist.MultivariateNormal(mu, precision_matrix=precision).log_prob(x).sum()
    log_prior = (dist.Wishart(NW_NU0, scale_matrix=NW_W0).log_prob(precision)
                 + dist.MultivariateNormal(NW_M0, precision_matrix=NW_BETA0 * precision)
                 .log_prob(mu))
    log_post = (dist.Wishart(nu_n, scale_matrix=jnp.linalg.inv(w_n_inv)).log_prob(precision)
                + dist.MultivariateNormal(m_n, precision_matrix=beta_n * precision).log_prob(mu))
    return log_lik + log_prior - log_post


def test_the_normal_wishart_closed_form_is_the_candidate_s_formula(wishart_data):
    """p(X) = p(X | mu, Lambda) p(mu, Lambda) / p(mu, Lambda | X) at any (mu, Lambda)."""
    mus = jnp.array([[0.9, -0.8], [0.0, 0.0]])
    precisions = jnp.array([[[1.2, -0.3], [-0.3, 0.6]], [[1.0, 0.0], [0.0, 1.0]]])
    candidates = jax.vmap(_candidate, in_axes=(None, 0, 0))(wishart_data, mus, precisions)
    np.testing.assert_allclose(candidates, normal_wishart_exact(wishart_data), atol=2e-3)


@pytest.mark.slow  # about 20 s: the enumerated program compiles; the Gaussian case runs by default
def test_normal_wishart_mixture_matches_the_closed_form(wishart_data):
    exact = normal_wishart_exact(wishart_data)
    result = log_evidence(normal_wishart_mixture, wishart_data, rng_key=jax.random.key(3),
                          num_particles=1000, num_repeats=8)
    assert result.converged
    assert result.standard_error < 0.1
    assert abs(result.log_evidence - exact) < 3 * result.standard_error, (result, exact)


# ------------------------------------------------------------- a mixture of the zoo

MIXTURE_KWARGS = dict(num_components=2, prior_scale=3.0)


@pytest.fixture(scope="module")
def mixture_data():
    """Two well separated round clusters of 20 points in 2-D."""
    z = jax.random.normal(jax.random.key(3), (40, 2))
    return z + jnp.where(jnp.arange(40)[:, None] < 20, -2.5, 2.5)


@pytest.mark.slow  # ~8 s; the default run tempers the Gaussian cases above
def test_the_tempered_likelihood_is_the_mixture_density(mixture_data):
    """log_likelihood(u) = sum_n logsumexp_k (log alpha_k + log N(x_n | m_k, Sigma_k)),
    full covariances (simplex, positive and LKJ-Cholesky transforms, whose Jacobians
    must cancel between the log joint and the log prior)."""
    x = mixture_data
    densities = program_densities(mixture.model, x, rng_key=jax.random.key(0),
                                  **MIXTURE_KWARGS)
    shape = jax.eval_shape(lambda key: densities.draw_prior(key, 3), jax.random.key(5)).shape
    assert shape == (3, 11)  # alpha 1, m 4, sd 4, corr 2
    points = jax.random.normal(jax.random.key(5), (3, 11))

    def by_hand(u):
        c = constrain_fn(handlers.seed(mixture.model, 0), (x,), MIXTURE_KWARGS,
                         densities.unravel(u))
        tril = c["sd"][..., :, None] * c["corr"]
        log_px = dist.MultivariateNormal(c["m"][:, None], scale_tril=tril[:, None]).log_prob(x)
        return jnp.sum(logsumexp(jnp.log(c["alpha"])[:, None] + log_px, axis=0))

    expected = jax.jit(jax.vmap(by_hand))(points)
    found = jax.jit(jax.vmap(densities.log_likelihood))(points)
    np.testing.assert_allclose(found, expected, rtol=1e-4, atol=1e-3)


@pytest.mark.slow  # about 12 s on 2 cores, most of it compilation
def test_two_component_mixture_evidence(mixture_data):
    """The zoo's mixture (diagonal covariances, labels enumerated): a finite, converged
    estimate with a small error."""
    result = log_evidence(mixture.model, mixture_data, rng_key=jax.random.key(4),
                          num_particles=2000, covariance="diag", **MIXTURE_KWARGS)
    assert result.converged
    assert np.isfinite(result.log_evidence)
    assert result.standard_error < 0.5
    assert np.all(result.num_steps > 1)


# ------------------------------------------------------------------- generic, non-finite

def _std_normal(u):
    return -0.5 * jnp.sum(u ** 2) - 0.5 * u.shape[0] * jnp.log(2 * jnp.pi)


K = 20.0


def _half_line_likelihood(u):
    """exp(-K u^2 / 2) for u > 0, NaN (zero likelihood) below."""
    return jnp.where(u[0] > 0, -0.5 * K * u[0] ** 2, jnp.nan)


def _draw_normal(key):
    return jax.random.normal(key, (1000, 1))


def test_nan_likelihood_counts_as_zero_weight():
    """Prior N(0, 1): Z = integral_0^inf phi(u) exp(-K u^2 / 2) du = 1 / (2 sqrt(1 + K)).

    Half of the prior draws have zero likelihood, more than 1 - target_ess: the first
    step must still move (it drops them) instead of sticking at lambda = 0.
    """
    exact = -np.log(2.0) - 0.5 * np.log1p(K)
    result = tempered_smc_log_evidence(_std_normal, _half_line_likelihood, _draw_normal,
                                       rng_key=jax.random.key(6), num_repeats=6)
    assert result.converged
    assert result.standard_error < 0.05
    assert abs(result.log_evidence - exact) < 3 * result.standard_error, (result, exact)


def test_zero_likelihood_everywhere_warns_and_is_not_converged():
    """Every particle where the likelihood is NaN: log Z = -inf, a warning, not converged."""
    particles = -jnp.abs(_draw_normal(jax.random.key(7)))  # all at u <= 0
    with pytest.warns(NumericalWarning, match="not finite"):
        result = tempered_smc_log_evidence(_std_normal, _half_line_likelihood, particles,
                                           rng_key=jax.random.key(8), num_repeats=2)
    assert not result.converged
    assert np.all(result.runs == -np.inf)
    assert np.all(result.num_steps == 0)  # no tempering step can keep a particle


def test_too_few_steps_warn_and_are_not_converged():
    with pytest.warns(ConvergenceWarning, match="max_steps=1"):
        result = tempered_smc_log_evidence(_std_normal, _half_line_likelihood, _draw_normal,
                                           rng_key=jax.random.key(9), num_repeats=2,
                                           max_steps=1, progress_bar=True)
    assert not result.converged
    assert np.all(result.num_steps == 1)


# --------------------------------------------------------------------------- bad input

def no_continuous_latent(x):
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("x", dist.Normal(0.0, 1.0), obs=x)


def poisson_latent(x):
    rate = numpyro.sample("rate", dist.Gamma(2.0, 1.0))
    count = numpyro.sample("count", dist.Poisson(rate))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("x", dist.Normal(count, 1.0), obs=x)


def continuous_under_discrete(x):
    flip = numpyro.sample("flip", dist.Bernoulli(0.5))
    mu = numpyro.sample("mu", dist.Normal(10.0 * flip, 1.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("x", dist.Normal(mu, 1.0), obs=x)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(rng_key=None), MissingKeyError, "rng_key"),
    (dict(num_particles=1), ValueError, "num_particles"),
    (dict(num_particles=2.5), TypeError, "num_particles"),
    (dict(num_repeats=1), ValueError, "num_repeats"),
    (dict(target_ess=1.0), ValueError, "target_ess"),
    (dict(target_ess=0.0), ValueError, "target_ess"),
    (dict(num_mcmc_steps=0), ValueError, "num_mcmc_steps"),
    (dict(max_steps=0), ValueError, "max_steps"),
    (dict(progress_bar="yes"), TypeError, "progress_bar"),
    (dict(move="nuts"), ValueError, "move"),
    (dict(num_integration_steps=0), ValueError, "num_integration_steps"),
])
def test_bad_settings_name_the_argument(normal_data, kwargs, error, match):
    kwargs = {"rng_key": jax.random.key(0), **kwargs}
    with pytest.raises(error, match=match):
        log_evidence(normal_mean, normal_data, **kwargs)


@pytest.mark.parametrize("program, match", [
    (no_continuous_latent, "the program has no continuous latent site"),
    (poisson_latent, "'count'.*cannot be enumerated"),
    (continuous_under_discrete, "depends on the discrete"),
])
def test_programs_it_cannot_integrate(normal_data, program, match):
    with pytest.raises(ValueError, match=match):
        log_evidence(program, normal_data, rng_key=jax.random.key(0))


def test_bad_generic_input_names_the_argument():
    key = jax.random.key(0)
    particles = jnp.zeros((10, 1))
    with pytest.raises(ValueError, match="initial_particles"):
        tempered_smc_log_evidence(_std_normal, _std_normal, jnp.zeros((1, 1)), rng_key=key)
    with pytest.raises(ValueError, match="initial_particles"):
        tempered_smc_log_evidence(_std_normal, _std_normal, jnp.zeros(10), rng_key=key)
    with pytest.raises(TypeError, match="log_likelihood"):
        tempered_smc_log_evidence(_std_normal, 3.0, particles, rng_key=key)
    with pytest.raises(MissingKeyError, match="rng_key"):
        tempered_smc_log_evidence(_std_normal, _std_normal, particles, rng_key=None)


# ------------------------------------------------------------------- MCVQ, VQ by VQ

@pytest.mark.slow  # about 50 s on 2 cores: three programs compile
def test_mcvq_evidence_factorises_over_its_vqs():
    """With every dimension's VQ fixed, the conditioned MCVQ program's evidence is the
    sum of its VQs' evidences: the factorised estimate (two one-VQ programs) and SMC on
    the whole program (both VQs, 2 x 2 states enumerated, less its log p(r)) agree
    within 3 standard errors."""
    from inference.mcvq.selection import _LOO_MODEL, factorised_log_evidence
    from ppl_models import mcvq

    x = mcvq.generate(jax.random.key(0), 12, 4, 2, 2, separation=3.0, noise_scale=0.5).x
    mask = jnp.ones(x.shape, bool)
    r_dims = np.array([0, 0, 1, 1])
    pi = np.array([[0.5, 0.5], [0.3, 0.7]])
    prior = mcvq.prior_from_data(x, mask)
    settings = dict(num_particles=1000, num_repeats=4)
    whole = log_evidence(_LOO_MODEL, x, mask, jnp.broadcast_to(r_dims, x.shape).astype(jnp.int32),
                         jnp.asarray(pi, x.dtype), prior, rng_key=jax.random.key(1), **settings)
    parts = factorised_log_evidence(x, mask, r_dims, pi, prior, rng_key=jax.random.key(2),
                                    **settings)
    assert whole.converged and parts.converged
    assert parts.runs.shape == (4,)
    error = np.hypot(whole.standard_error, parts.standard_error)
    # the whole program conditions every example's r: it adds log p(r) = N D log(1/K)
    log_p_r = x.shape[0] * x.shape[1] * np.log(0.5)
    assert abs(whole.log_evidence - log_p_r - parts.log_evidence) < 3 * error + 0.05, (
        whole, parts)


def test_vq_blocks_drop_vqs_without_dimensions_and_unused_states():
    from inference.mcvq.selection import vq_blocks

    blocks = vq_blocks(np.array([0, 0, 2, 2]), np.array([[0.5, 0.5], [0.5, 0.5], [0.0, 1.0]]))
    assert [(k, d.tolist(), s.tolist()) for k, d, s in blocks] == [(0, [0, 1], [0, 1]),
                                                                    (2, [2, 3], [1])]
