"""Variational Bayes Gaussian mixture (inference.mixture.vb, ppl_models.vb_mixture).

Pruning outcome, measured with the default settings (prune_threshold 1e-5,
max_iterations 500, tol 1e-7, data-derived priors, covariance "full"), started
at 10 components on ``ppl_models.mixture.generate(key(seed), N, 3, 2,
separation=s)`` (uneven weights, rotated elongated covariances) with
``rng_key=key(1000 + seed)``, seeds 0-19 (all runs converged, bound monotone):

    N = 300, s = 8 (well separated):  3 components in 20 of 20 (median 24 iterations, max 56)
    N = 600, s = 6:                   3 components in 20 of 20 (median 52, max 266)
    N = 600, s = 4 (overlapping):     3 components in 19 of 20, 4 in 1 (median 78, max 404)

With covariance "diag", N = 300, s = 8: 3 components in 20 of 20 on axis-aligned
data (``unequal=False``), 17 of 20 (4 in 3) on the rotated covariances above,
which a diagonal model can only cover with an extra component.

The default test runs seeds 0-4 of the first setting (:data:`PRUNING_OUTCOME`).
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import Trace_ELBO

from inference.mixture import vb
from inference.mixture.vb import fit_vb_mixture
from ppl_models import mixture
from ppl_models import vb_mixture as program
from ppl_models.diagnostics import ConvergenceWarning

#: Surviving components over seeds 0-19 (module docstring): (N, separation) -> {k: runs}.
PRUNING_OUTCOME = {(300, 8.0): {3: 20}, (600, 6.0): {3: 20}, (600, 4.0): {3: 19, 4: 1}}


@pytest.fixture(scope="module")
def planted():
    """300 examples from 3 well-separated 2-D components (separation 8)."""
    return mixture.generate(jax.random.key(0), 300, 3, 2, separation=8.0)


@pytest.fixture(scope="module", params=["full", "diag"])
def fit64(request, planted):
    """The planted data in float64 and a float64 fit started at 10 components."""
    with jax.enable_x64(True):
        x = jnp.asarray(np.asarray(planted.x, np.float64))
        return x, fit_vb_mixture(x, 10, rng_key=jax.random.key(3), covariance=request.param)


# ---------------------------------------------------------------------- the program


def test_wishart_log_prob_and_moments_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    scale = np.array([[2.0, 0.3], [0.3, 0.5]])
    value = np.array([[3.0, 0.2], [0.2, 1.0]])
    with jax.enable_x64(True):
        wishart = program.Wishart(4.5, scale_matrix=scale)
        reference = stats.wishart(df=4.5, scale=scale)
        assert float(wishart.log_prob(value)) == pytest.approx(reference.logpdf(value), abs=1e-9)
        assert float(wishart.entropy()) == pytest.approx(reference.entropy(), abs=1e-9)
        same = program.Wishart(4.5, rate_matrix=np.linalg.inv(scale))
        assert float(same.log_prob(value)) == pytest.approx(reference.logpdf(value), abs=1e-9)
        # Bartlett sampling: the sample mean is nu W within 5 standard errors per entry.
        draws = np.asarray(jax.jit(lambda key: wishart.sample(key, (20000,)))(jax.random.key(0)))
        se = draws.std(axis=0) / np.sqrt(draws.shape[0])
        assert np.all(np.abs(draws.mean(axis=0) - 4.5 * scale) < 5 * se)
        log_dets = np.linalg.slogdet(draws)[1]
        assert abs(log_dets.mean() - float(wishart.expected_log_det())) < 5 * (
            log_dets.std() / np.sqrt(log_dets.size))


def test_program_samples_and_scores(planted):
    stats = pytest.importorskip("scipy.stats")
    weights = jnp.array([0.3, 0.7])
    hyper = dict(mean_prior_mean=jnp.zeros(2), mean_prior_scale=3.0, dof_prior=2.5,
                 covariance_prior=1.5)

    @jax.jit
    def draw(key):
        trace = numpyro.handlers.trace(numpyro.handlers.seed(program.model, key)).get_trace(
            None, weights=weights, num_examples=7, **hyper)
        return {name: trace[name]["value"] for name in ("x", "y", "m", "Lambda")}

    sites = draw(jax.random.key(0))
    assert sites["x"].shape == (7, 2) and sites["Lambda"].shape == (2, 2, 2)
    # The log-joint NumPyro computes equals the generative story written out with scipy.
    log_joint = jax.jit(lambda values: numpyro.infer.util.log_density(
        program.model, (sites["x"],), dict(weights=weights, **hyper), values)[0])(
        {name: sites[name] for name in ("y", "m", "Lambda")})
    x, m, lam = (np.asarray(sites[name], np.float64) for name in ("x", "m", "Lambda"))
    y = np.asarray(sites["y"])
    expected = sum(stats.wishart(df=2.5, scale=np.eye(2) / 1.5).logpdf(lam[j]) for j in range(2))
    expected += stats.norm(0.0, 3.0).logpdf(m).sum() + np.log(np.asarray(weights)[y]).sum()
    expected += sum(stats.multivariate_normal(m[y[i]], np.linalg.inv(lam[y[i]])).logpdf(x[i])
                    for i in range(7))
    assert float(log_joint) == pytest.approx(expected, rel=1e-4)
    # With the data, the default hyperparameters come from the data scale.
    prior = program.prior_from_data(planted.x)
    scale = float(np.sqrt(np.mean(np.var(np.asarray(planted.x), axis=0))))
    assert float(prior.mean_scale) == pytest.approx(scale, rel=1e-5)
    assert float(prior.dof) == 2.0
    np.testing.assert_allclose(prior.covariance, scale ** 2 * np.eye(2), rtol=1e-5)


def test_registered_with_metadata_that_matches_the_program(planted):
    import inference
    from ppl_models import REGISTRY

    info = REGISTRY["vb_mixture"]
    assert info is program.INFO and info.model is program.model
    assert info.generate is mixture.generate  # the fixture's data, weights included
    assert all(callable(getattr(inference, name, None)) for name in info.algorithms)
    # The metadata names exactly the latent sample sites of the two covariance families
    # (traced abstractly: jax.eval_shape, nothing compiled or run).
    hyper = dict(mean_prior_mean=jnp.zeros(2), mean_prior_scale=3.0, dof_prior=2.5,
                 covariance_prior=1.5)
    observed, sites = [], set()
    for covariance in ("full", "diag"):
        def latent(x, covariance=covariance):
            trace = numpyro.handlers.trace(numpyro.handlers.seed(info.model, 0)).get_trace(
                x, weights=planted.weights, covariance=covariance, **hyper)
            observed.append(trace[info.observed_site]["is_observed"])
            return {name: site["value"] for name, site in trace.items()
                    if site["type"] == "sample" and not site["is_observed"]}

        sites |= set(jax.eval_shape(latent, planted.x))
    assert observed == [True, True]
    assert sites == set(info.latent_sites)


@pytest.mark.parametrize("kwargs, name", [
    ({"mean_prior_scale": 0.0}, "mean_prior_scale"),
    ({"mean_prior_scale": -1.0}, "mean_prior_scale"),
    ({"covariance_prior": -2.0}, "covariance_prior"),
    ({"covariance_prior": np.array([[1.0, 2.0], [2.0, 1.0]])}, "covariance_prior"),
    ({"dof_prior": 0.5}, "dof_prior"),
    ({"mean_prior_mean": np.zeros(3)}, "mean_prior_mean"),
])
def test_program_rejects_bad_hyperparameters(planted, kwargs, name):
    with pytest.raises(ValueError, match=name):
        numpyro.handlers.seed(program.model, 0)(planted.x, weights=jnp.ones(2) / 2, **kwargs)


# ---------------------------------------------------------------------- the algorithm


# Five and three seeds: the slow run. The default run checks that both families prune
# from 10 components to the 3 planted ones in
# test_bound_is_monotone_and_pruning_explains_any_drop, and the float32 fit in the Examples
# of fit_vb_mixture (inference/mixture/vb.py).
@pytest.mark.slow
def test_prunes_to_the_planted_number_of_components():
    outcome = []
    for seed in range(5):
        data = mixture.generate(jax.random.key(seed), 300, 3, 2, separation=8.0)
        fit = fit_vb_mixture(data.x, 10, rng_key=jax.random.key(1000 + seed))
        outcome.append(fit.num_components)
        assert fit.converged and fit.monotone
        trace = np.asarray(fit.trace.num_components)
        assert trace.shape == (fit.num_iterations,) and np.all(np.diff(trace) <= 0)
        assert trace[-1] == fit.num_components and trace[0] <= 10
        assert fit.weights.shape == (fit.num_components,)
        assert float(fit.weights.sum()) == pytest.approx(1.0, abs=1e-5)
        assert fit.responsibilities.shape == (300, fit.num_components)
    assert outcome == [3] * 5


@pytest.mark.slow
def test_diagonal_family_prunes_on_axis_aligned_data():
    """covariance="diag" on planted data with identity covariances (unequal=False)."""
    outcome = []
    for seed in range(3):
        data = mixture.generate(jax.random.key(seed), 300, 3, 2, separation=8.0, unequal=False)
        fit = fit_vb_mixture(data.x, 10, rng_key=jax.random.key(1000 + seed), covariance="diag")
        outcome.append(fit.num_components)
        assert fit.converged and fit.monotone and fit.covariance == "diag"
        off_diagonal = np.asarray(fit.covariances) * (1 - np.eye(2))
        assert np.all(off_diagonal == 0)
    assert outcome == [3] * 3


def test_stopping_early_warns_and_flags(planted):
    with pytest.warns(ConvergenceWarning, match="not converged"):
        fit = fit_vb_mixture(planted.x, 5, rng_key=jax.random.key(0), max_iterations=2)
    assert not fit.converged and fit.num_iterations == 2
    assert fit.trace.objective.shape == (2,) and fit.trace.num_components.shape == (2,)


def test_bound_is_monotone_and_pruning_explains_any_drop(fit64):
    _, fit = fit64
    assert fit.converged and fit.monotone and fit.num_components == 3
    bounds = np.asarray(fit.trace.objective)
    pruned = np.asarray(fit.trace.pruned_count)
    change = np.diff(bounds)
    assert np.asarray(fit.trace.num_components)[0] > fit.num_components  # pruning happened
    # Exact coordinate ascent: no decrease beyond float64 rounding (1e-10 relative), except
    # at a pruning step, where at most n / (1 - n) for the pruned expected count n.
    allowance = pruned[1:] / (1.0 - pruned[1:]) + 1e-10 * np.abs(bounds[1:])
    assert np.all(change >= -allowance)
    assert np.all(change[pruned[1:] == 0] >= -1e-10 * np.abs(bounds[1:][pruned[1:] == 0]))
    assert fit.bound == pytest.approx(bounds[-1])
    assert bounds[-1] > bounds[0] + 1.0


def test_pruning_a_zero_weight_component_leaves_the_bound_unchanged(planted):
    with jax.enable_x64(True):
        x = jnp.asarray(planted.x, jnp.float64)
        prior = program.prior_from_data(x)
        state = vb.init(jax.random.key(0), x, 4, prior)
        step = jax.jit(vb.step)
        for _ in range(3):
            state, _ = step(state, x, prior, 0.0)
        # Take all of slot 3's responsibility away: its weight becomes exactly 0.
        resp = state.responsibilities.at[:, 3].set(0.0)
        resp = resp / resp.sum(axis=1, keepdims=True)
        state = state._replace(responsibilities=resp)
        kept, _ = step(state, x, prior, 0.0)      # threshold 0: nothing pruned
        pruned, info_pruned = step(state, x, prior, 1e-5)
    assert bool(kept.active[3]) and not bool(pruned.active[3])
    assert int(info_pruned.num_components) == 3 and float(info_pruned.pruned_count) == 0.0
    assert float(pruned.bound) == pytest.approx(float(kept.bound), rel=1e-12, abs=1e-9)


def _guide_from(q, covariance):
    """A guide sampling from Q = (nu, W, mu, S, r).

    ``"full"``: Wishart Q(Lambda_j) and Normal Q(m_j); ``"diag"``: Gamma(nu_j / 2,
    rate 1 / (2 W_j,dd)) Q(tau_jd) and Normal Q(m_jd); Categorical Q(y_i) for both.
    """
    dof, scale, mean, mean_covariance, resp = q
    w = jnp.diagonal(scale, axis1=-2, axis2=-1)
    sd = jnp.sqrt(jnp.diagonal(mean_covariance, axis1=-2, axis2=-1))

    def guide(x, **_):
        if covariance == "full":
            numpyro.sample("Lambda", program.Wishart(dof, scale_matrix=scale).to_event(1))
            numpyro.sample("m", dist.MultivariateNormal(mean, mean_covariance).to_event(1))
        else:
            numpyro.sample("tau", dist.Gamma(dof[:, None] / 2.0 * jnp.ones_like(w), 0.5 / w)
                           .to_event(2))
            numpyro.sample("m", dist.Normal(mean, sd).to_event(2))
        with numpyro.plate("examples", x.shape[0]):
            numpyro.sample("y", dist.Categorical(probs=resp))
    return guide


def _monte_carlo_elbo(x, weights, prior, q, covariance="full", num_particles=2000):
    """Per-particle ELBO draws from NumPyro's Trace_ELBO (one particle per key)."""
    kwargs = dict(weights=weights, mean_prior_mean=prior.mean,
                  mean_prior_scale=float(prior.mean_scale), dof_prior=float(prior.dof),
                  covariance_prior=prior.covariance, covariance=covariance)
    guide = _guide_from(q, covariance)
    one = jax.jit(jax.vmap(
        lambda key: -Trace_ELBO().loss(key, {}, program.model, guide, x, **kwargs)))
    return np.asarray(one(jax.random.split(jax.random.key(7), num_particles)))


def test_bound_equals_monte_carlo_elbo_of_the_program(fit64):
    """L(Q) == NumPyro's Trace_ELBO of the same Q under the program, within 5 SE.

    The converged fit of the planted data (300 examples, 3 survivors), both
    families; 2000 particles, y sampled from Q(y). Measured: SE 0.008 nats
    (full; bound -1234.54, z = -0.43) and 0.006 nats (diag; bound -1249.08,
    z = -0.17).
    """
    x, fit = fit64
    q = (fit.wishart_dof, fit.wishart_scale, fit.means, fit.mean_covariances,
         fit.responsibilities)
    with jax.enable_x64(True):
        draws = _monte_carlo_elbo(x, fit.weights, fit.prior, q, fit.covariance)
    se = draws.std() / np.sqrt(draws.size)
    assert 0 < se < 0.5
    assert abs(draws.mean() - fit.bound) < 5 * se, (draws.mean(), fit.bound, se)


@pytest.mark.slow
def test_bound_equals_monte_carlo_elbo_before_convergence():
    """The same check for a Q after two steps from the start (not a fixed point), 5 SE."""
    with jax.enable_x64(True):
        data = mixture.generate(jax.random.key(0), 120, 3, 2, separation=8.0)
        x = jnp.asarray(data.x, jnp.float64)
        prior = program.prior_from_data(x)
        state = vb.init(jax.random.key(1), x, 3, prior)
        for _ in range(2):
            state, _ = vb.step(state, x, prior, 1e-5)
        assert bool(jnp.all(state.active))
        assert float(state.bound) == pytest.approx(float(vb.bound(x, state, prior)))
        q = (state.wishart_dof, state.wishart_scale, state.mean_mean, state.mean_covariance,
             state.responsibilities)
        draws = _monte_carlo_elbo(x, state.weights, prior, q)
    se = draws.std() / np.sqrt(draws.size)
    assert 0 < se < 0.5
    assert abs(draws.mean() - float(state.bound)) < 5 * se, (draws.mean(), state.bound, se)


def test_matches_scikit_learn_where_the_models_coincide():
    """Compare with BayesianGaussianMixture on well-separated data.

    The models differ: scikit-learn puts a Dirichlet prior on the weights (we
    point-estimate them: its weights are (alpha0 + N_j) / (k alpha0 + N), ours
    N_j / N) and a Normal-Wishart prior on (m, Lambda) (m | Lambda ~ N(m0,
    (beta0 Lambda)^-1), ours independent Normal(m0, beta0^-1 I), giving ours the
    extra N_j S_j term in W_j^-1). Everything else (Wishart prior, Q(Lambda)
    degrees of freedom, responsibilities) is the same, so with scikit-learn's mean
    prior made flat (mean_precision_prior 1e-8) and N = 600 the two agree to
    O(1 / N_j): we test means to 1% of the data scale, covariances to 5% and
    weights to 0.01 (measured: 6e-4, 0.7% and 7e-4).
    """
    sklearn_mixture = pytest.importorskip("sklearn.mixture")
    data = mixture.generate(jax.random.key(0), 600, 3, 2, separation=8.0)
    x = np.asarray(data.x, np.float64)
    fit = fit_vb_mixture(x.astype(np.float32), 10, rng_key=jax.random.key(1))
    assert fit.num_components == 3
    prior = fit.prior
    reference = sklearn_mixture.BayesianGaussianMixture(
        n_components=3, weight_concentration_prior_type="dirichlet_distribution",
        weight_concentration_prior=1.0, mean_prior=np.asarray(prior.mean, np.float64),
        mean_precision_prior=1e-8, degrees_of_freedom_prior=float(prior.dof),
        covariance_prior=np.asarray(prior.covariance, np.float64), max_iter=1000, tol=1e-8,
        random_state=0).fit(x)
    means = np.asarray(fit.means)
    order = np.argmin(((means[:, None] - reference.means_[None]) ** 2).sum(-1), axis=1)
    assert sorted(order) == [0, 1, 2]
    scale = np.sqrt(np.mean(np.var(x, axis=0)))
    assert np.abs(means - reference.means_[order]).max() < 0.01 * scale
    covariances = np.asarray(fit.covariances)
    relative = (np.abs(covariances - reference.covariances_[order]).max(axis=(1, 2))
                / np.abs(reference.covariances_[order]).max(axis=(1, 2)))
    assert relative.max() < 0.05
    assert np.abs(np.asarray(fit.weights) - reference.weights_[order]).max() < 0.01
    np.testing.assert_allclose(np.asarray(fit.wishart_dof),
                               reference.degrees_of_freedom_[order], atol=0.05)


# ---------------------------------------------------------------------- bad input


@pytest.mark.parametrize("kwargs, error, match", [
    ({"max_components": 0}, ValueError, "max_components"),
    ({"max_components": 301}, ValueError, "max_components"),
    ({"max_components": 2.5}, TypeError, "max_components"),
    ({"prune_threshold": 0.0}, ValueError, "prune_threshold"),
    ({"prune_threshold": 1.0}, ValueError, "prune_threshold"),
    ({"prune_threshold": -0.1}, ValueError, "prune_threshold"),
    ({"mean_prior_scale": 0.0}, ValueError, "mean_prior_scale"),
    ({"mean_prior_scale": -3.0}, ValueError, "mean_prior_scale"),
    ({"covariance_prior": 0.0}, ValueError, "covariance_prior"),
    ({"covariance_prior": -np.eye(2)}, ValueError, "covariance_prior"),
    ({"dof_prior": 1.0}, ValueError, "dof_prior"),
    ({"max_iterations": 0}, ValueError, "max_iterations"),
    ({"tol": 0.0}, ValueError, "tol"),
    ({"rng_key": None}, TypeError, "rng_key"),
    ({"covariance": "spherical"}, ValueError, "covariance"),
])
def test_bad_arguments(planted, kwargs, error, match):
    arguments = {"max_components": 4, "rng_key": jax.random.key(0)} | kwargs
    with pytest.raises(error, match=match):
        fit_vb_mixture(planted.x, **arguments)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_bad_data(planted, bad):
    x = np.asarray(planted.x).copy()
    x[5, 1] = bad
    with pytest.raises(ValueError, match="x contains"):
        fit_vb_mixture(x, 4, rng_key=jax.random.key(0))
    with pytest.raises(ValueError, match="x must be 2-D"):
        fit_vb_mixture(np.zeros(5), 2, rng_key=jax.random.key(0))


def test_pruning_everything_raises(planted):
    with pytest.raises(ValueError, match="prune every component"):
        fit_vb_mixture(planted.x, 3, rng_key=jax.random.key(0), prune_threshold=0.9)


@pytest.mark.slow
def test_nuts_on_the_program_agrees_with_vb():
    """NumPyro's NUTS runs on the program (y enumerated, Wishart site through its
    positive-definite bijection); its posterior means of m agree with E_Q[m] within
    5 posterior standard deviations (VB is known to be overconfident, not biased
    here)."""
    data = mixture.generate(jax.random.key(0), 60, 2, 2, separation=8.0)
    fit = fit_vb_mixture(data.x, 4, rng_key=jax.random.key(1))
    assert fit.num_components == 2
    mcmc = numpyro.infer.MCMC(numpyro.infer.NUTS(program.model), num_warmup=200,
                              num_samples=200, progress_bar=False)
    mcmc.run(jax.random.key(2), data.x, weights=fit.weights)
    draws = np.asarray(mcmc.get_samples()["m"])
    assert np.all(np.abs(draws.mean(0) - np.asarray(fit.means)) < 5 * draws.std(0))
