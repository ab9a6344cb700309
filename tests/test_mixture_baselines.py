"""NumPyro's SVI and NUTS on the Gaussian-mixture program, PSIS-LOO, ``ppl-zoo compare mixture``.

Every run uses 200 learning examples, k = 3, d = 2, 300 SVI steps and 300 + 300
NUTS iterations, so the compiled SVI loop and NUTS chain are shared by all tests
and by the comparison's smoke test.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from scipy.stats import multivariate_normal

from inference.app.compare import save_comparison
from inference.mixture.baselines import (
    MAX_MCMC_EXAMPLES,
    align_draws,
    fit_mixture_mcmc,
    fit_mixture_svi,
    mixture_loo,
    posterior_predictive_log_likelihood,
)
from inference.mixture.compare import compare_mixture
from inference.mixture.em import component_log_joint, criteria, fit_mixture
from ppl_models import mixture
from ppl_models.diagnostics import ConvergenceWarning

NUM, K, DIM = 200, 3, 2
#: Free parameters of the full-covariance mixture: (k - 1) + k (d + d (d + 1) / 2).
NUM_PARAMETERS = (K - 1) + K * (DIM + DIM * (DIM + 1) // 2)
SVI_STEPS, NUTS_ITERATIONS = 300, 300
FIT_KEY = jax.random.key(10)


@pytest.fixture(scope="module")
def planted():
    """Well separated (6 sd) planted mixture; 200 learning + 200 held-out examples."""
    data = mixture.generate(jax.random.key(0), 2 * NUM, K, DIM, separation=6.0)
    return data, data.x[:NUM], data.x[NUM:]


@pytest.fixture(scope="module")
def em(planted):
    """The maximum-likelihood fit (EM to a tight tolerance), from the k-means++ start of FIT_KEY."""
    _, x, _ = planted
    return fit_mixture(x, K, rng_key=FIT_KEY, tol=1e-9, max_iterations=1000)


@pytest.fixture(scope="module")
def nuts(planted):
    _, x, _ = planted
    return fit_mixture_mcmc(x, K, rng_key=FIT_KEY, num_warmup=NUTS_ITERATIONS,
                            num_samples=NUTS_ITERATIONS)


@pytest.mark.slow
def test_svi_from_em_start_with_weak_prior_stays_at_em_optimum(planted, em):
    _, x, _ = planted
    svi = fit_mixture_svi(x, K, rng_key=FIT_KEY, num_steps=SVI_STEPS, prior_scale=1000.0,
                          init_means=em.means, init_weights=em.weights,
                          init_covariances=em.covariances)
    assert svi.converged and svi.trace.objective.shape == (SVI_STEPS,)
    # EM is the maximum-likelihood optimum, SVI the MAP one: SVI cannot beat EM's
    # log-likelihood (beyond float32 rounding, ~1e-6 at 4 nats) ...
    assert svi.log_likelihood <= -em.L_stocha + 1e-5
    # ... and the weak prior moves it only a little: the LKJ(2) prior on the
    # correlations (not weakened by prior_scale) cost 1e-5 - 3e-4 nats per example
    # over four planted data sets of this size; allow 1e-3.
    assert svi.log_likelihood >= -em.L_stocha - 1e-3
    # The loss is -log p(x, theta) / N exactly (y summed out, a point-mass guide):
    # NumPyro's TraceEnum_ELBO agrees with criteria's L_stocha plus the program's prior.
    assert float(svi.trace.objective[-1]) == pytest.approx(
        -(svi.log_likelihood + svi.log_prior / NUM), rel=1e-5)


@pytest.mark.slow
def test_svi_from_kmeans_start_reaches_em_and_covariances_are_valid(planted, em):
    """The default run checks an SVI fit of this size against EM (its log-likelihood at
    most EM's) in test_compare_mixture_runs_and_writes_its_table, and the SVI baseline's
    fit of a planted mixture in the Examples of fit_mixture_svi
    (inference/mixture/baselines_svi.py)."""
    _, x, _ = planted
    svi = fit_mixture_svi(x, K, rng_key=FIT_KEY, num_steps=SVI_STEPS)  # EM's own start
    assert svi.converged
    # From the start (EM's first objective is L_stocha at that same start; the k-means
    # start is already near the optimum) the log-likelihood does not fall, and ends
    # within 1e-3 of EM's optimum.
    start = -float(em.trace.objective[0])
    assert svi.log_likelihood >= start - 1e-3
    assert abs(svi.log_likelihood - (-em.L_stocha)) < 1e-3
    assert svi.log_likelihood == pytest.approx(
        -criteria(x, svi.weights, svi.means, svi.covariances)["L_stocha"], abs=1e-6)
    cov = np.asarray(svi.covariances)
    assert cov.shape == (K, DIM, DIM)
    np.testing.assert_allclose(cov, np.swapaxes(cov, 1, 2), atol=1e-6)
    assert np.all(np.linalg.eigvalsh(cov) > 0.0)
    weights = np.asarray(svi.weights)
    assert np.all(weights > 0) and weights.sum() == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_array_equal(
        np.asarray(svi.labels),
        np.argmax(np.asarray(component_log_joint(x, svi.weights, svi.means, svi.covariances)), 1))


def test_svi_still_moving_warns_and_flags(planted):
    _, x, _ = planted
    with pytest.warns(ConvergenceWarning, match="raise num_steps"):
        svi = fit_mixture_svi(x, K, rng_key=FIT_KEY, num_steps=SVI_STEPS, learning_rate=1e-4)
    assert not svi.converged


def test_an_svi_result_saved_with_loss_trace_and_num_steps_loads(tmp_path):
    """A file written when MixtureSVIResult had ``loss_trace`` (an array) and ``num_steps``
    loads as the current class, its losses as ``trace.objective``."""
    import collections

    from inference.engine import persistence
    from inference.mixture.baselines_svi import MixtureSVIResult, MixtureSVITrace

    old_names = {"trace": "loss_trace", "num_iterations": "num_steps"}
    old = collections.namedtuple("MixtureSVIResult",
                                 [old_names.get(f, f) for f in MixtureSVIResult._fields
                                  if f != "restart_objectives"])  # later, defaulted
    old.__module__ = "inference.mixture.baselines"
    saved = old(weights=np.full(2, 0.5), means=np.zeros((2, 3)), covariances=np.ones((2, 3, 3)),
                log_likelihood=-4.0, log_prior=-2.0, loss_trace=np.arange(5.0),
                labels=np.zeros(6, np.int32), num_components=2, num_steps=5, converged=False,
                covariance="full")
    path = persistence.save_tree(tmp_path / "old.npz", saved,
                                 kind="result:inference.mixture.baselines.MixtureSVIResult")
    loaded = persistence.load(path)
    assert type(loaded) is MixtureSVIResult and isinstance(loaded.trace, MixtureSVITrace)
    np.testing.assert_array_equal(loaded.trace.objective, np.arange(5.0))
    assert loaded.num_iterations == 5 and loaded.covariance == "full" and not loaded.converged


@pytest.mark.slow
def test_nuts_predictive_matches_em_and_rhat_is_fine(planted, em, nuts):
    data, x, heldout = planted
    assert nuts.converged and nuts.r_hat <= 1.1 and nuts.num_divergent == 0
    assert nuts.pointwise_log_likelihood.shape == (1, NUTS_ITERATIONS, NUM)
    ml = -em.L_stocha
    # Posterior-predictive density of the data: within 0.02 nats per example of the
    # maximum likelihood (measured -0.004 to -0.012 over four data sets).
    assert abs(nuts.predictive_log_likelihood - ml) < 0.02
    # Bernstein-von Mises: N (ML - E[log-lik]) is about chi^2_p / 2, mean p / 2 = 8.5
    # (measured 8.4-9.7 over four data sets); allow half to one and a half of it.
    half_p = NUM_PARAMETERS / 2
    assert 0.5 * half_p < NUM * (ml - nuts.log_likelihood) < 1.5 * half_p
    # The aligned posterior means lie near EM's means (posterior sd about 0.1 here).
    distances = np.linalg.norm(np.asarray(em.means)[:, None] - np.asarray(nuts.means)[None],
                               axis=-1)
    rows, cols = linear_sum_assignment(distances)
    assert distances[rows, cols].max() < 0.3
    # Held out, the posterior predictive is as good as EM's point estimate (+-0.02).
    em_heldout = -criteria(heldout, em.weights, em.means, em.covariances)["L_stocha"]
    assert abs(posterior_predictive_log_likelihood(nuts, heldout) - em_heldout) < 0.02


def test_align_draws_undoes_label_switching(nuts):
    rng = np.random.default_rng(0)
    perms = np.stack([rng.permutation(K) for _ in range(NUTS_ITERATIONS)])[None]
    switched = {name: np.take_along_axis(
        v, perms.reshape(perms.shape + (1,) * (v.ndim - 3)), axis=2)
        for name, v in nuts.samples.items()}
    assert np.mean(np.any(perms != np.arange(K), axis=-1)) > 0.5
    aligned, num_permuted = align_draws(switched, nuts.samples["m"][0, 0])
    # Well-separated components: every switch is undone, on every site alike.
    assert num_permuted == int(np.sum(np.any(perms != np.arange(K), axis=-1)))
    for name, value in nuts.samples.items():
        np.testing.assert_array_equal(aligned[name], value)


def test_log_likelihood_group_is_the_mixture_density_and_loo_runs(planted, nuts):
    import arviz as az

    _, x, _ = planted
    chain, draw = 0, 17
    sample = {name: jnp.asarray(v[chain, draw]) for name, v in nuts.samples.items()}
    tril = sample["sd"][:, :, None] * sample["corr"]
    cov = tril @ jnp.swapaxes(tril, -1, -2)
    expected = jax.nn.logsumexp(component_log_joint(x, sample["alpha"], sample["m"], cov), axis=1)
    # The group was computed from the draws before alignment; the permutation of
    # the components must not change the mixture density.
    np.testing.assert_allclose(nuts.pointwise_log_likelihood[chain, draw], expected, rtol=1e-5)
    # And independently of the program, in float64 with scipy.
    cov64 = np.asarray(cov, np.float64)
    density = sum(float(a) * multivariate_normal(np.asarray(m, np.float64), c).pdf(np.asarray(x))
                  for a, m, c in zip(sample["alpha"], sample["m"], cov64, strict=True))
    np.testing.assert_allclose(nuts.pointwise_log_likelihood[chain, draw], np.log(density),
                               rtol=1e-5)
    idata = nuts.to_inference_data(x)
    assert idata.log_likelihood["x"].shape == (1, NUTS_ITERATIONS, NUM)
    loo = az.loo(idata, pointwise=True)
    assert loo.loo_i.shape == (NUM,) and np.isfinite(loo.elpd_loo)
    # LOO is below the in-sample lppd by p_loo, near the 17 free parameters.
    assert loo.elpd_loo < NUM * nuts.predictive_log_likelihood
    assert 0.5 * NUM_PARAMETERS < loo.p_loo < 1.5 * NUM_PARAMETERS
    # mixture_loo reruns the same chain (same key) and returns the same arviz ELPDData.
    again = mixture_loo(x, K, rng_key=FIT_KEY, num_warmup=NUTS_ITERATIONS,
                        num_samples=NUTS_ITERATIONS)
    assert isinstance(again, az.ELPDData)
    assert float(again.elpd_loo) == pytest.approx(float(loo.elpd_loo), rel=1e-6)
    assert float(again.se) == pytest.approx(float(loo.se), rel=1e-6)
    np.testing.assert_allclose(again.pareto_k, loo.pareto_k, rtol=1e-6)


def test_compare_mixture_runs_and_writes_its_table(tmp_path):
    result = compare_mixture(jax.random.key(0), progress_bar=False, num_examples=NUM,
                             svi_steps=SVI_STEPS, mcmc_iterations=NUTS_ITERATIONS)
    rows = [r.flat() for r in result.rows]
    assert [r["implementation"] for r in rows] == ["ours"] * 3 + ["numpyro"] * 2 + ["truth"]
    assert all(np.isfinite(r["objective"]) and np.isfinite(r["train_loglik"]) for r in rows)
    em, _, kmeans, svi, nuts, planted = rows
    assert planted["gap_to_planted"] == 0.0
    # On its learning data the ML fit beats the planted mixture; k-means' equal
    # spherical components fit the elongated ones worst.
    assert em["train_loglik"] > planted["train_loglik"]
    assert kmeans["train_loglik"] < min(em["train_loglik"], svi["train_loglik"]) - 0.1
    assert svi["train_loglik"] <= em["train_loglik"] + 1e-5
    assert nuts["r_hat"] < 1.1 and nuts["gradients"] > 0
    paths = save_comparison(result, tmp_path)
    report = json.load(open(paths["json"]))
    assert [r["algorithm"] for r in report["rows"]] == [r["algorithm"] for r in rows]
    assert paths["png"].stat().st_size > 1000


@pytest.mark.slow
def test_compare_mixture_quick_cli(tmp_path):
    from inference.app.cli import main

    assert main(["compare", "mixture", "--quick", "--no-progress", "--output-dir",
                 str(tmp_path)]) == 0
    report = json.load(open(tmp_path / "mixture_comparison.json"))
    assert len(report["rows"]) == 6 and (tmp_path / "mixture_comparison.png").exists()


def _svi(x, **kwargs):
    return fit_mixture_svi(x, kwargs.pop("k", K), **{"rng_key": FIT_KEY, **kwargs})


def _mcmc(x, **kwargs):
    return fit_mixture_mcmc(x, kwargs.pop("k", K), **{"rng_key": FIT_KEY, **kwargs})


@pytest.mark.parametrize("call, error, match", [
    (lambda x: _svi(np.where(np.arange(NUM)[:, None] == 3, np.nan, x)), ValueError, "x contains"),
    (lambda x: _svi(x[:, 0]), ValueError, "x must be 2-D"),
    (lambda x: _svi(x[:2]), ValueError, "num_components=3 exceeds"),
    (lambda x: _svi(x, k=0), ValueError, "num_components"),
    (lambda x: _svi(x, rng_key=None), ValueError, "rng_key"),
    (lambda x: _svi(x, covariance="tied"), ValueError, "covariance must be one of"),
    (lambda x: _svi(x, num_steps=0), ValueError, "num_steps"),
    (lambda x: _svi(x, learning_rate=-0.1), ValueError, "learning_rate"),
    (lambda x: _svi(x, prior_scale=0.0), ValueError, "prior_scale"),
    (lambda x: _svi(x, prior_scale="wide"), TypeError, "prior_scale"),
    (lambda x: _svi(x, init_means=np.zeros((2, DIM))), ValueError, "init_means"),
    (lambda x: _svi(x, init_weights=np.array([0.5, 0.5, 0.0])), ValueError, "init_weights"),
    (lambda x: _svi(x, init_covariances=-np.stack([np.eye(DIM)] * K)), ValueError,
     "init_covariances"),
    (lambda x: _mcmc(np.tile(x, (11, 1))), ValueError, "small data"),
    (lambda x: _mcmc(x, k=11), ValueError, "num_components"),
    (lambda x: _mcmc(x, num_samples=2), ValueError, "num_samples"),
    (lambda x: _mcmc(x, num_chains=0), ValueError, "num_chains"),
    (lambda x: _mcmc(x, target_accept_prob=1.5), ValueError, "target_accept_prob"),
])
def test_bad_input(planted, call, error, match):
    _, x, _ = planted
    assert 11 * NUM > MAX_MCMC_EXAMPLES
    with pytest.raises(error, match=match):
        call(np.asarray(x))
