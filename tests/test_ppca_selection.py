"""Choosing PPCA's number of components q: Minka's Laplace evidence and the PPCA scorer.

Minka's evidence against scikit-learn's implementation of the same formula (its
private ``_assess_dimension``, the oracle: equal up to a constant in q, the same
choice as ``PCA(n_components="mle")``), the closed-form ML fit against NumPyro's
density of the collapsed program and EM, the planted q chosen by every criterion but
``"train"`` (directly and through ``inference.model_selection``), the parameter
count, the candidates' and options' errors, the evidence program's sites, and
PSIS-LOO / WAIC and the reference evidence on a tiny problem (slow).
"""

import math

import jax
import numpy as np
import pytest
from numpyro import handlers
from numpyro.infer.util import log_density as numpyro_log_density
from scipy.stats import multivariate_normal
from sklearn.decomposition import PCA
from sklearn.decomposition._pca import _assess_dimension

import inference  # noqa: F401  (registers every family's plug-in)
from inference.app.selection import model_selection
from inference.app.selection_rules import argmax, folds, one_se_choice
from inference.ppca import selection as ps
from inference.ppca.em import fit_ppca
from ppl_models import ppca

#: (N, d, planted q, noise, seed): easy, weak-signal, N close to d, planted q = d - 1
#: with too few examples to see it, many dimensions.
DATA_SETS = [(300, 8, 3, 0.3, 0), (20, 10, 3, 1.0, 2), (15, 12, 4, 0.8, 1),
             (25, 6, 5, 1.5, 0), (100, 10, 2, 2.0, 0), (12, 10, 9, 0.3, 0),
             (60, 30, 6, 1.2, 2), (11, 10, 2, 0.5, 1)]


def _data(num, dim, q, noise, seed):
    return np.asarray(ppca.generate(jax.random.key(seed), num, dim, q, noise=noise).x,
                      np.float64)


@pytest.fixture(scope="module")
def planted():
    """N = 300, d = 8, q = 3, sigma = 0.3 (principal variances 9 .. 2.25 >> 0.09)."""
    return ppca.generate(jax.random.key(0), 300, 8, 3, noise=0.3).x


# --------------------------------------------------------------- Minka's evidence


@pytest.mark.parametrize("num, dim, q, noise, seed", DATA_SETS)
def test_laplace_is_sklearns_assess_dimension_up_to_a_constant_in_q(num, dim, q, noise, seed):
    x = _data(num, dim, q, noise, seed)
    ours = ps.laplace_log_evidences(x)
    # scikit-learn's spectrum: the unbiased (1/(N - 1)) covariance's eigenvalues
    spectrum = ps.eigenvalues(x) * num / (num - 1)
    oracle = np.array([_assess_dimension(spectrum, k, num) for k in range(1, dim)])
    # our (1/N) eigenvalues and the kept likelihood constant: the same shift for every q
    shift = -num * dim / 2 * (1 + math.log(2 * math.pi)) + num * dim / 2 * math.log(
        num / (num - 1))
    np.testing.assert_allclose(ours - oracle, shift, rtol=0, atol=1e-9 * np.abs(oracle).max())
    chosen = int(np.argmax(ours)) + 1
    assert chosen == int(np.argmax(oracle)) + 1
    assert chosen == PCA(n_components="mle").fit(x).n_components_


def test_laplace_is_not_trivially_the_planted_q():
    # the hard data sets: Minka (and scikit-learn) pick fewer components than planted
    chosen = {(n, d, q): int(np.argmax(ps.laplace_log_evidences(_data(n, d, q, s, k)))) + 1
              for n, d, q, s, k in DATA_SETS}
    assert chosen[(300, 8, 3)] == 3
    assert chosen[(12, 10, 9)] < 9 and chosen[(20, 10, 3)] < 3 and chosen[(25, 6, 5)] < 5


def test_laplace_of_one_q_and_of_all_agree_and_shift_with_the_scale():
    x = _data(80, 6, 2, 0.5, 3)
    every = ps.laplace_log_evidences(x)
    assert every.shape == (5,)
    assert ps.laplace_log_evidences(x, 3) == pytest.approx(every[:3], rel=1e-12)
    for q in range(1, 6):
        assert ps.laplace_log_evidence(x, q) == pytest.approx(every[q - 1], rel=1e-12)
    # x -> c x multiplies the likelihood's scale: every value moves by -N d log c
    shifted = ps.laplace_log_evidences(3.0 * x)
    np.testing.assert_allclose(shifted - every, -80 * 6 * math.log(3.0), atol=1e-8)


def test_laplace_beyond_the_rank_is_minus_infinity():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 5)) @ rng.normal(size=(5, 12))  # rank 5 in 12 dimensions
    values = ps.laplace_log_evidences(x)
    assert np.all(np.isneginf(values[5:])) and np.all(np.isfinite(values[:5]))
    assert int(np.argmax(values)) + 1 == 5 == PCA(n_components="mle").fit(x).n_components_
    # a column that is the mean of the others: d - 1 dimensions (scikit-learn agrees)
    x = rng.normal(size=(1000, 10))
    x[:, -1] = x[:, :-1].mean(axis=1)
    assert int(np.argmax(ps.laplace_log_evidences(x))) + 1 == 9


@pytest.mark.parametrize("call, error, pattern", [
    (lambda x: ps.laplace_log_evidences(x, 6), ValueError, r"^max_q must be at most 5"),
    (lambda x: ps.laplace_log_evidences(x, 0), ValueError, r"^max_q must be at least 1"),
    (lambda x: ps.laplace_log_evidence(x, 6), ValueError, r"^q must be at most 5"),
    (lambda x: ps.laplace_log_evidences(x[:, :1]), ValueError, r"^x must have at least 2"),
    (lambda x: ps.laplace_log_evidences(x[:1]), ValueError, r"^x must have at least 2 ex"),
    (lambda x: ps.laplace_log_evidences(np.where(x > 1, np.nan, x)), ValueError, r"^x contains"),
])
def test_laplace_errors(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call(_data(20, 6, 2, 0.5, 0))


# ------------------------------------------------------------ the ML fit, scores


@pytest.mark.slow  # ~6 s; the default run checks fit_ppca against scikit-learn in test_ppca
def test_closed_form_fit_is_the_maximum_of_the_programs_likelihood(planted):
    scorer = ps.PPCAScorer(planted)
    x32 = np.asarray(planted)
    for q in (2, 4):
        fit = ps.ml_fit(planted, q)
        # the scorer's train value is NumPyro's log density of the collapsed program / N
        total, _ = numpyro_log_density(ppca.model, (x32,), {
            "collapsed": True, "weights": fit.weights.astype(np.float32),
            "mean": fit.mean.astype(np.float32), "sigma": float(fit.noise)}, {})
        assert scorer.train(q, None) == pytest.approx(float(total) / 300, abs=2e-4)
        # ... and EM (Tipping & Bishop's, run long) does not beat it
        em = fit_ppca(planted, q, noise="ml", rng_key=jax.random.key(q), max_iterations=1000,
                      tol=1e-10)
        em_value = float(np.mean(ps.log_density(planted, em.weights, em.mean, em.noise)))
        assert em_value <= scorer.train(q, None) + 1e-6
        assert em_value == pytest.approx(scorer.train(q, None), abs=1e-3)
        assert em.noise == pytest.approx(fit.noise, rel=1e-3)


def test_heldout_is_the_density_of_a_fit_on_the_training_rows(planted):
    scorer = ps.PPCAScorer(planted)
    train, test = folds(jax.random.key(0), 300, 5)[1]
    values = scorer.heldout(2, train, test, None)
    fit = ps.ml_fit(np.asarray(planted)[train], 2)
    cov = fit.weights.T @ fit.weights + fit.noise ** 2 * np.eye(8)
    oracle = multivariate_normal(fit.mean, cov).logpdf(np.asarray(planted, np.float64)[test])
    assert values.shape == (len(test),)
    np.testing.assert_allclose(values, oracle, rtol=1e-9)


def test_every_criterion_but_train_chooses_the_planted_q(planted):
    scorer = ps.PPCAScorer(planted)
    candidates = ps.check_candidates(None, 300, 8)
    assert candidates == (1, 2, 3, 4, 5, 6, 7)
    train = [scorer.train(q, None) for q in candidates]
    assert np.all(np.diff(train) > 0)  # no penalty for complexity: it only grows ...
    assert argmax(candidates, train) == 7  # ... so "train" takes the largest
    p = np.array([scorer.num_parameters(q) for q in candidates])
    bic = np.array(train) - p * math.log(300) / 600
    aic = np.array(train) - p / 300
    assert argmax(candidates, bic) == argmax(candidates, aic) == 3
    assert argmax(candidates, [scorer.laplace(q) for q in candidates]) == 3
    values, chosen = scorer.pca_mle(candidates)
    assert chosen == 3 and np.all(np.isnan(values))
    splits = folds(jax.random.key(1), 300, 5)
    pointwise = np.zeros((len(candidates), 300))
    for i, q in enumerate(candidates):
        for train_rows, test_rows in splits:
            pointwise[i, test_rows] = scorer.heldout(q, train_rows, test_rows, None)
    assert one_se_choice(candidates, pointwise) == 3
    assert int(np.argmax(pointwise.mean(axis=1))) + 1 >= 3


def test_model_selection_chooses_the_planted_q(planted):
    result = model_selection(planted, model="ppca", criteria=(
        "cv", "train", "bic", "aic", "laplace", "pca_mle"), rng_key=jax.random.key(1))
    assert result.candidates == (1, 2, 3, 4, 5, 6, 7) and result.label == "q"
    assert result.choice == {"cv": 3, "train": 7, "bic": 3, "aic": 3, "laplace": 3,
                             "pca_mle": 3}
    assert np.all(np.isnan(result.values["pca_mle"]))
    laplace = ps.laplace_log_evidences(planted) / 300
    np.testing.assert_allclose(result.values["laplace"], laplace, rtol=1e-12)
    assert any("closed-form ML fit" in note for note in result.notes)
    default = model_selection(planted, [2, 3, 4], model="ppca", rng_key=jax.random.key(2))
    assert set(default.choice) == {"cv", "bic", "aic", "laplace", "pca_mle"}
    assert set(default.choice.values()) == {3}


def test_em_fit_option_scores_as_the_closed_form():
    x = ppca.generate(jax.random.key(4), 200, 5, 2, noise=0.5).x
    em = ps.PPCAScorer(x, fit="em", fit_options={"max_iterations": 2000}, num_restarts=2)
    closed = ps.PPCAScorer(x)
    assert em.train(2, jax.random.key(0)) == pytest.approx(closed.train(2, None), abs=1e-4)
    assert any("fit_ppca(noise='ml')" in note for note in em.notes(True))


def test_num_parameters():
    for dim in range(2, 9):
        for q in range(1, dim):
            m = dim * q - q * (q + 1) // 2  # Minka: U's free angles, then L, v and the mean
            assert ps.num_parameters(dim, q) == m + q + 1 + dim
            assert ps.num_parameters(dim, q) == dim * q - q * (q - 1) // 2 + dim + 1
        # q = d - 1: as many as a full covariance and a mean
        assert ps.num_parameters(dim, dim - 1) == dim * (dim + 1) // 2 + dim
    assert ps.PPCAScorer(np.ones((3, 8)) + np.eye(3, 8)).num_parameters(3) == 30


# ---------------------------------------------------------------- candidates, errors


def test_default_candidates():
    assert ps.check_candidates(None, 300, 8) == tuple(range(1, 8))
    assert ps.check_candidates(None, 300, 50) == tuple(range(1, 9))
    assert ps.check_candidates(None, 4, 50) == (1, 2, 3)
    assert ps.check_candidates([3, np.int64(1)], 10, 5) == (3, 1)


@pytest.mark.parametrize("values, num, dim, error, pattern", [
    ([6], 20, 5, ValueError,
     r"^candidates must be at most d - 1 = 4 \(PPCA with ML noise needs q < d\); got 6"),
    ([2, 5], 5, 8, ValueError, r"^candidates must be at most N - 1 = 4 \(the rank .*got 5"),
    ([0], 20, 5, ValueError, r"^candidates must be at least 1; got 0"),
    ([1, 2, 1], 20, 5, ValueError, r"^candidates must not repeat"),
    ([], 20, 5, ValueError, r"^candidates must hold at least one"),
    ([1.5], 20, 5, TypeError, r"^candidates must be an integer"),
    ("12", 20, 5, TypeError, r"^candidates must be a sequence of integers"),
    (3, 20, 5, TypeError, r"^candidates must be a sequence of integers"),
    (None, 20, 1, ValueError, r"^candidates: PPCA with an estimated noise needs d >= 2"),
])
def test_candidates_errors(values, num, dim, error, pattern):
    with pytest.raises(error, match=pattern):
        ps.check_candidates(values, num, dim)


def test_candidates_errors_through_model_selection(planted):
    with pytest.raises(ValueError, match=r"^candidates must be at most d - 1 = 7"):
        model_selection(planted, [2, 8], model="ppca", rng_key=jax.random.key(0))


def test_scorer_errors(planted):
    with pytest.raises(ValueError, match=r"^fit must be one of"):
        ps.PPCAScorer(planted, fit="svd")
    with pytest.raises(ValueError, match=r"^fit_options \['max_iterations'\] apply to fit='em'"):
        ps.PPCAScorer(planted, fit_options={"max_iterations": 10})
    with pytest.raises(ValueError, match=r"^x contains 1 NaN"):
        bad = np.array(planted)
        bad[3, 2] = np.nan
        ps.PPCAScorer(bad)
    with pytest.raises(ValueError, match=r"^options \['covariance_type'\] are not options"):
        model_selection(planted, [2], model="ppca", rng_key=jax.random.key(0),
                        options={"covariance_type": "full"})
    with pytest.raises(ValueError, match=r"^fit must be one of"):
        model_selection(planted, [2], model="ppca", rng_key=jax.random.key(0),
                        options={"fit": "svd"})


def test_pca_mle_with_few_examples_or_outside_the_candidates(planted):
    wide = ps.PPCAScorer(_data(6, 10, 2, 0.3, 0))
    values, chosen = wide.pca_mle((1, 2, 3))
    assert chosen is None and np.all(np.isnan(values))
    assert any("needs N >= d" in note for note in wide.notes(False))
    scorer = ps.PPCAScorer(planted)
    assert scorer.pca_mle((1, 5, 6))[1] == 1  # sklearn's 3: nearest candidate, smaller on ties
    assert any("chose q = 3, not a candidate" in note for note in scorer.notes(False))
    assert scorer.pca_mle((5, 6))[1] == 5


def test_components_that_span_the_data_have_unbounded_likelihood():
    x = _data(5, 8, 2, 0.3, 0)  # centred rank 4
    scorer = ps.PPCAScorer(x)
    assert scorer.train(4, None) == math.inf and math.isfinite(scorer.train(3, None))
    assert any("sigma^2 = 0 for q in [4]" in note for note in scorer.notes(True))


# ------------------------------------------------------- LOO, WAIC and the evidence


def test_evidence_program_integrates_only_w_mu_and_sigma():
    x = ppca.generate(jax.random.key(0), 30, 4, 1, noise=0.5).x
    model, args, kwargs = ps.PPCAScorer(x).evidence_program(2)
    trace = handlers.trace(handlers.seed(model, 0)).get_trace(*args, **kwargs)
    latent = {name for name, site in trace.items()
              if site["type"] == "sample" and not site["is_observed"]}
    assert latent == {"W", "mu", "sigma"}  # no per-example z
    assert trace["W"]["value"].shape == (2, 4) and trace["x"]["is_observed"]
    assert ps.PPCAScorer(x).evidence_reason(2, 200) == "N d q = 240 > evidence_max_size = 200"
    assert ps.PPCAScorer(x).evidence_reason(2, 240) is None
    assert ps.PPCAScorer(x).loo_reason(3, 100) == "N d q = 360 > loo_max_size = 100"


@pytest.mark.slow
def test_loo_waic_and_evidence_on_a_tiny_problem():
    x = ppca.generate(jax.random.key(0), 40, 4, 1, noise=0.5).x
    result = model_selection(x, [1, 2], model="ppca", criteria=("loo", "waic", "laplace"),
                             rng_key=jax.random.key(1), num_warmup=200, num_samples=200)
    # A short chain may fail the reliability checks: then no choice, with its reason;
    # never a wrong one.
    assert result.choice["laplace"] == 1
    for name in ("loo", "waic"):
        assert result.choice[name] in (1, None)
        assert result.choice[name] is not None or result.no_choice[name]
    scorer = ps.PPCAScorer(x)
    aic = scorer.train(1, None) - scorer.num_parameters(1) / 40
    for name in ("loo", "waic"):
        assert np.all(np.isfinite(result.values[name]))
        # elpd per example below the training fit's value, near AIC's (asymptotically equal)
        assert result.values[name][0] < scorer.train(1, None)
        assert abs(result.values[name][0] - aic) < 0.05
    # the reference evidence (W, mu, sigma integrated over their priors): the same choice
    # (keys 2, 3, 4 all give it; margins 1.2 - 3.6 nats, standard errors 0.3 - 2.6)
    x = ppca.generate(jax.random.key(0), 80, 4, 1, noise=0.5).x
    result = model_selection(x, [1, 2], model="ppca", criteria=("evidence", "laplace"),
                             rng_key=jax.random.key(2),
                             evidence_options={"num_particles": 1000, "num_repeats": 2})
    assert result.choice["evidence"] == result.choice["laplace"] == 1
    assert np.all(np.isfinite(result.values["evidence"]))
