"""Model selection for GVQ (number of features n) and the clipped Gaussian (hidden units P).

The scorers' exact log-likelihoods against NumPyro's own reading of the programs (GVQ:
funsor's enumeration and an explicit sum over all states; clipped: a Monte Carlo
average of the observed site's likelihood over draws of y), the planted sizes chosen
by BIC and CV (through the scorer with the generic rules, and through
``inference.model_selection``), parameter counts and the errors on bad candidates,
data and options.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro import handlers
from numpyro.contrib.funsor import enum
from numpyro.contrib.funsor import log_density as enum_log_density
from numpyro.infer.util import log_density

import inference  # noqa: F401  (registers every family's plug-in)
from inference.app.selection import model_selection
from inference.app.selection_rules import argmax, folds, one_se_choice
from inference.clipped import scorer as cs
from inference.clipped.fit import fit_clipped_gaussian, program_parameters
from inference.gvq import scorer as gs
from ppl_models import clipped_gaussian, gvq
from ppl_models.distributions import BinaryStateMixture, binary_states

# ------------------------------------------------------------------------------ GVQ


@pytest.fixture(scope="module")
def gvq_small():
    """6 examples, 3 features, dim 4; features and noise of our own."""
    key_x, key_f = jax.random.split(jax.random.key(0))
    return (2.0 * jax.random.normal(key_x, (6, 4)), 1.5 * jax.random.normal(key_f, (3, 4)),
            0.7)


# The default run checks unequal priors per feature; the slow run the common 1/2 too.
@pytest.mark.parametrize("probs", [pytest.param(0.5, marks=pytest.mark.slow), (0.2, 0.5, 0.9)])
def test_gvq_log_likelihood_is_the_programs_with_states_summed(gvq_small, probs):
    x, features, sigma = gvq_small
    ours = np.asarray(gs.log_likelihood(x, features, sigma, prior_probs=jnp.asarray(probs)))
    kwargs = {"features": features, "sigma": sigma, "prior_probs": jnp.asarray(probs)}
    # funsor sums the parallel-enumerated unit sites s_0 .. s_2 out of the whole data set
    total, _ = enum_log_density(enum(gvq.model, first_available_dim=-2), (x,),
                                {**kwargs, "split_states": True}, {})
    assert float(total) == pytest.approx(float(ours.sum()), abs=1e-3)
    # every example alone: the 2^3 states of the program's "s" site, summed by hand
    states = binary_states(3)
    for c in range(3):
        terms = [float(log_density(gvq.model, (x[c:c + 1],), kwargs,
                                   {"s": jnp.asarray(s[None], x.dtype)})[0]) for s in states]
        assert ours[c] == pytest.approx(float(jax.nn.logsumexp(jnp.asarray(terms))), abs=1e-4)


def test_gvq_ml_noise_maximises_the_marginal_likelihood():
    data = gvq.generate_planted(jax.random.key(2), 80, 3, 6, noise_scale=0.4)
    sigma = gs.ml_noise(data.x, data.features)
    best = float(jnp.sum(gs.log_likelihood(data.x, data.features, sigma)))
    for factor in (0.97, 1.03):
        assert best >= float(jnp.sum(gs.log_likelihood(data.x, data.features, sigma * factor)))
    assert sigma == pytest.approx(0.4, rel=0.15)


def test_gvq_sum_states_is_the_enumerated_program(gvq_small):
    """The program with the states summed in one distribution (the evidence's form) has
    the log density of the program whose unit sites NumPyro enumerates, F and prior
    probabilities the same; options it does not cover are refused by name."""
    x, features, sigma = gvq_small
    kwargs = {"features": features, "sigma": sigma, "prior_probs": jnp.asarray((0.2, 0.5, 0.9))}
    enumerated, _ = enum_log_density(enum(gvq.model, first_available_dim=-2), (x,),
                                     {**kwargs, "split_states": True}, {})
    summed, trace = log_density(gvq.model, (x,), {**kwargs, "sum_states": True}, {})
    assert float(summed) == pytest.approx(float(enumerated), rel=1e-5)
    assert set(trace) == {"data", "x"}                      # no state site left
    assert handlers.seed(gvq.model, 0)(x, **kwargs, sum_states=True) is None
    for bad, name in (({"split_states": True}, "split_states"), ({"num_sets": 3}, "num_sets"),
                      ({"sparsity": 0.1}, "sparsity"), ({"binary": True, "beta": 4.5}, "binary")):
        with pytest.raises(ValueError, match=f"sum_states.*{name}"):
            handlers.seed(gvq.model, 0)(x, **kwargs, sum_states=True, **bad)


def test_binary_state_mixture_samples_its_moments_and_refuses_bad_shapes():
    features = jnp.array([[1.0, -2.0], [0.5, 3.0], [2.0, 0.0]])
    probs = jnp.array([0.1, 0.5, 0.8])
    law = BinaryStateMixture(features, 0.4, probs)
    draws = np.asarray(law.sample(jax.random.key(0), (40_000,)))
    se = np.sqrt(np.asarray(law.variance) / len(draws))
    assert np.all(np.abs(draws.mean(axis=0) - np.asarray(law.mean)) < 4 * se)
    assert np.allclose(draws.var(axis=0), np.asarray(law.variance), rtol=0.05)
    # a unit that is never on removes its half of the states exactly (no NaN)
    x = jnp.array([[0.9, -1.9]])
    never = BinaryStateMixture(features, 0.4, jnp.array([0.1, 0.0, 0.8])).log_prob(x)
    two = BinaryStateMixture(features[jnp.array([0, 2])], 0.4, jnp.array([0.1, 0.8]))
    assert float(never[0]) == pytest.approx(float(two.log_prob(x)[0]), rel=1e-6)
    with pytest.raises(ValueError, match="features must have shape"):
        BinaryStateMixture(jnp.ones(3), 0.4)
    with pytest.raises(ValueError, match="probs must be"):
        BinaryStateMixture(features, 0.4, jnp.ones(2) * 0.5)
    with pytest.raises(ValueError, match="at most 20 units"):
        BinaryStateMixture(jnp.ones((21, 2)), 0.4)


def test_gvq_evidence_program_is_the_scored_model_with_a_prior_on_f(gvq_small):
    x, features, sigma = gvq_small
    scorer = gs.GVQScorer(x, noise=sigma, feature_scale=3.0)
    model, args, kwargs = scorer.evidence_program(3)
    total, _ = enum_log_density(enum(model, first_available_dim=-2), args, kwargs,
                                {"F": features})
    prior = float(jnp.sum(jax.scipy.stats.norm.logpdf(features, 0.0, 3.0)))
    assert float(total) == pytest.approx(
        prior + float(jnp.sum(gs.log_likelihood(x, features, sigma))), abs=1e-3)


GVQ_CANDIDATES = (1, 2, 3)


@pytest.fixture(scope="module")
def gvq_planted():
    """Two planted features in 5 dimensions, noise sqrt(0.1): well separated states."""
    return gvq.generate_planted(jax.random.key(4), 100, 2, 5)


@pytest.mark.slow  # about 20 s: fit_gvq compiles per n and fold; scorer-level BIC runs
def test_gvq_model_selection_chooses_the_planted_features(gvq_planted):
    result = model_selection(gvq_planted.x, GVQ_CANDIDATES, model="gvq",
                             criteria=("cv", "bic", "aic"), rng_key=jax.random.key(7),
                             num_restarts=4)
    assert result.choice == {"cv": 2, "bic": 2, "aic": 2}
    assert result.label == "n"
    assert any("maximum marginal likelihood" in note for note in result.notes)
    # the scorer and the generic rule directly (other keys, the same compiled fits)
    scorer = gs.GVQScorer(gvq_planted.x, num_restarts=4)
    key = jax.random.key(5)
    train = [scorer.train(n, jax.random.fold_in(key, n)) for n in GVQ_CANDIDATES]
    bic = [t - scorer.num_parameters(n) * math.log(100) / 200
           for t, n in zip(train, GVQ_CANDIDATES, strict=True)]
    assert argmax(GVQ_CANDIDATES, bic) == 2
    assert train[1] > train[0] + 1.0            # the second feature explains a lot
    # n = 1, 2 have one optimum (n = 3's spare feature lands where its start puts it)
    np.testing.assert_allclose(bic[:2], result.values["bic"][:2], atol=0.02)


@pytest.mark.slow
def test_gvq_cross_validation_by_hand_chooses_the_planted_features(gvq_planted):
    scorer = gs.GVQScorer(gvq_planted.x, num_restarts=4)
    key = jax.random.key(5)
    pointwise = np.zeros((len(GVQ_CANDIDATES), 100))
    for i, n in enumerate(GVQ_CANDIDATES):
        for f, (tr, te) in enumerate(folds(jax.random.key(6), 100, 5)):
            pointwise[i, te] = scorer.heldout(n, tr, te, jax.random.fold_in(key, 10 * n + f))
    assert one_se_choice(GVQ_CANDIDATES, pointwise) == 2
    train = [scorer.train(n, jax.random.fold_in(key, n)) for n in GVQ_CANDIDATES]
    assert np.all(pointwise.mean(axis=1) < np.asarray(train) + 1e-3)  # held out scores lower


@pytest.mark.slow  # about 25 s: fit, Laplace reference and SMC each compile once
def test_gvq_evidence_matches_quadrature_and_finds_the_fits_mode():
    """The reference evidence tempers from Gaussians at the posterior's modes near the EM
    fit (``mode_reference``): on 2 features in one dimension it matches a 2-D grid
    integral of the program's prior times likelihood within 3 of its standard errors
    (plus the log estimate's small downward bias)."""
    from scipy import stats
    from scipy.special import logsumexp

    rng = np.random.default_rng(0)
    sigma, states = 0.3, rng.integers(0, 2, (10, 2))
    x = (states @ np.array([[1.5], [-2.0]]) + sigma * rng.normal(size=(10, 1))).astype(
        np.float32)
    grid = np.linspace(-6.0, 6.0, 1201)
    f1, f2 = np.meshgrid(grid, grid, indexing="ij")
    means = np.stack([0 * f1, f1, f2, f1 + f2], axis=-1)
    log_lik = logsumexp(stats.norm.logpdf(x[:, 0][None, None, :, None],
                                          means[:, :, None, :], sigma) + np.log(0.25),
                        axis=-1).sum(axis=-1)
    log_prior = stats.norm.logpdf(f1, 0, 10) + stats.norm.logpdf(f2, 0, 10)
    exact = logsumexp(log_lik + log_prior) + 2 * np.log(grid[1] - grid[0])
    scorer = gs.GVQScorer(x, noise=sigma)
    scorer.set_candidates((1, 2))
    result = scorer.evidence(2, jax.random.key(0), {"num_particles": 300, "num_repeats": 4})
    assert result.converged
    assert abs(result.log_evidence - exact) < 3 * result.standard_error + 0.05, (result, exact)


def test_mode_reference_has_a_component_per_permutation_and_rejects_bad_input():
    from inference.gvq.evidence_reference import mode_reference

    def log_density(u):  # a Gaussian posterior at (1, 2, 3) with sd 0.1
        return -0.5 * jnp.sum(((u - jnp.array([1.0, 2.0, 3.0])) / 0.1) ** 2)

    q = mode_reference(log_density, jnp.array([[0.9], [2.1], [3.0]]), inflate=1.0)
    assert q.event_shape == (3,) and q.mixture_size == 6
    np.testing.assert_allclose(q.component_distribution.loc[0], [1.0, 2.0, 3.0], atol=1e-3)
    np.testing.assert_allclose(jnp.diagonal(q.component_distribution.covariance_matrix[0]),
                               0.01, rtol=1e-3)
    assert mode_reference(log_density, jnp.ones((3, 1)), max_permutations=5).mixture_size == 1
    with pytest.raises(ValueError, match="features must have shape"):
        mode_reference(log_density, jnp.ones(3))
    with pytest.raises(ValueError, match="inflate"):
        mode_reference(log_density, jnp.ones((3, 1)), inflate=0.0)


def test_gvq_num_parameters():
    x = jnp.ones((10, 7)) + jnp.arange(7.0)
    assert gs.GVQScorer(x).num_parameters(3) == 3 * 7 + 1
    assert gs.GVQScorer(x, noise=0.2).num_parameters(3) == 3 * 7
    assert gs.num_parameters(3, 8) == 25


def test_gvq_candidates():
    assert gs.check_candidates(None, 50, 5) == (1, 2, 3, 4, 5)
    assert gs.check_candidates(None, 50, 30) == tuple(range(1, 9))
    assert gs.check_candidates([3, np.int64(1)], 50, 5) == (3, 1)
    for bad, error in (([0], ValueError), ([13], ValueError), ([2, 2], ValueError),
                       ([], ValueError), ([1.5], TypeError), ("12", TypeError),
                       ([True], TypeError)):
        with pytest.raises(error, match="candidates"):
            gs.check_candidates(bad, 50, 5)
    with pytest.raises(ValueError, match=r"candidates must be at most 12 \(the exact"):
        model_selection(jnp.ones((10, 3)), [13], model="gvq", rng_key=jax.random.key(0))


def test_gvq_bad_data_and_options():
    with pytest.raises(ValueError, match="x contains 1 NaN"):
        gs.GVQScorer(jnp.asarray([[1.0, np.nan], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="x must be 2-D"):
        gs.GVQScorer(jnp.ones(5))
    with pytest.raises(ValueError, match="noise must be positive"):
        gs.GVQScorer(jnp.ones((4, 2)), noise=-1.0)
    with pytest.raises(ValueError, match=r"fit options \['num_sets'\]"):
        gs.GVQScorer(jnp.ones((4, 2)), fit_options={"num_sets": 2})
    with pytest.raises(ValueError, match="options"):
        model_selection(jnp.ones((10, 3)), [1], model="gvq", options={"covariance": "full"},
                        rng_key=jax.random.key(0))
    scorer = gs.GVQScorer(jnp.ones((4, 2)))
    assert "loo_max_size" in scorer.loo_reason(3, 10)
    assert "fit_gvq_mcmc" in scorer.loo_reason(9, 1 << 30)
    assert "noise" in scorer.evidence_reason(2, 1 << 30)   # no candidates, no noise: no sigma


@pytest.mark.slow
def test_gvq_loo_waic_and_evidence_choose_the_planted_features(gvq_planted):
    x = gvq_planted.x[:60]
    result = model_selection(x, (1, 2, 3), model="gvq", criteria=("bic", "loo", "waic",
                                                                  "evidence"),
                             rng_key=jax.random.key(8), num_restarts=4, num_warmup=150,
                             num_samples=150,
                             evidence_options={"num_particles": 300, "num_repeats": 2})
    # A short chain may fail the reliability checks: then no choice, with its reason;
    # never a wrong one.
    assert result.choice["bic"] == result.choice["evidence"] == 2, result.table()
    for name in ("loo", "waic"):
        assert result.choice[name] in (2, None)
        assert result.choice[name] is not None or result.no_choice[name]
    scorer = gs.GVQScorer(x)
    scorer.train(2, jax.random.key(1))
    idata, _ = scorer.loo(2, jax.random.key(2), 50, 50, False)
    draw = idata.posterior["F"].values[0, -1]
    np.testing.assert_allclose(idata.log_likelihood["x"].values[0, -1],
                               gs.log_likelihood(x, draw, scorer.cache[2][1]), atol=1e-3)


# -------------------------------------------------------------------------- clipped


def _monte_carlo(s, weights, bias, noise, num_draws, key):
    """The mean over draws y ~ N(0, I_P) of the program's likelihood p(s | y) for every
    pattern (the observed site's log_prob, read from a trace), and its standard error."""
    spins = jnp.asarray(s)

    def one(k):
        y = jax.random.normal(k, (spins.shape[0], weights.shape[1]))
        program = handlers.substitute(handlers.seed(clipped_gaussian.model, 0), {"y": y})
        trace = handlers.trace(program).get_trace(spins, weights=weights, bias=bias,
                                                  noise=noise)
        site = trace["s"]
        return jnp.exp(site["fn"].log_prob(site["value"]))

    draws = jax.lax.map(one, jax.random.split(key, num_draws))   # (draws, patterns)
    return np.asarray(draws.mean(0)), np.asarray(draws.std(0) / math.sqrt(num_draws))


# The default run checks P = 3 (the hardest quadrature); the slow run P = 1, 2 too.
@pytest.mark.parametrize("num_hidden", [pytest.param(p, marks=pytest.mark.slow) for p in (1, 2)]
                         + [3])
def test_clipped_quadrature_matches_monte_carlo(num_hidden):
    data = clipped_gaussian.generate(jax.random.key(num_hidden), 300, 8, num_hidden)
    params = program_parameters(fit_clipped_gaussian(data.s, num_hidden), 0.1)
    patterns, counts = np.unique(np.asarray(data.s), axis=0, return_counts=True)
    patterns = patterns[np.argsort(-counts)[:6]]       # the most frequent: small MC error
    ours = np.exp(np.asarray(cs.log_likelihood(patterns, params["weights"], params["bias"],
                                               0.1)))
    mean, se = _monte_carlo(patterns, params["weights"], params["bias"], 0.1, 40000,
                            jax.random.key(9))
    assert np.all(se < 0.1 * mean)                     # the check has power
    assert np.all(np.abs(ours - mean) <= 3 * se), (ours, mean, se)


def test_clipped_quadrature_has_converged():
    data = clipped_gaussian.generate(jax.random.key(2), 300, 8, 2)  # as above: compiled
    params = program_parameters(fit_clipped_gaussian(data.s, 2), 0.1)
    default = cs.log_likelihood(data.s, params["weights"], params["bias"], 0.1)
    finer = cs.log_likelihood(data.s, params["weights"], params["bias"], 0.1, spacing=0.04)
    np.testing.assert_allclose(default, finer, atol=1e-3)
    # 0 / 1 patterns are the same patterns
    np.testing.assert_allclose(
        cs.log_likelihood((data.s + 1) / 2, params["weights"], params["bias"], 0.1), default)


CLIPPED_CANDIDATES = (1, 2, 3)


@pytest.fixture(scope="module")
def clipped_planted():
    return clipped_gaussian.generate(jax.random.key(0), 300, 8, 2)


def test_clipped_bic_and_cv_choose_the_planted_hidden_units(clipped_planted):
    s = clipped_planted.s
    result = model_selection(s, CLIPPED_CANDIDATES, model="clipped", criteria=("cv", "bic"),
                             rng_key=jax.random.key(1), options={"noise": 0.2})
    assert result.choice == {"cv": 2, "bic": 2}
    assert result.label == "P"
    assert any("sigma = 0.2" in note for note in result.notes)
    # the same values from the scorer and the generic rule (the fit is deterministic)
    scorer = cs.ClippedScorer(s, noise=0.2)
    bic = [scorer.train(p, None) - scorer.num_parameters(p) * math.log(300) / 600
           for p in CLIPPED_CANDIDATES]
    np.testing.assert_allclose(bic, result.values["bic"], rtol=1e-5)
    assert argmax(CLIPPED_CANDIDATES, bic) == 2


@pytest.mark.slow
def test_clipped_choice_at_the_programs_noise(clipped_planted):
    result = model_selection(clipped_planted.s, CLIPPED_CANDIDATES, model="clipped",
                             rng_key=jax.random.key(1))
    assert result.choice == {"cv": 2, "train": 2, "bic": 2, "aic": 2}


def test_clipped_num_parameters():
    assert cs.num_parameters(16, 2) == 16 * 2 - 1 + 16
    assert cs.num_parameters(16, 3, bias=False) == 48 - 3
    s = clipped_gaussian.generate(jax.random.key(0), 20, 6, 1).s
    assert cs.ClippedScorer(s).num_parameters(3) == 6 * 3 - 3 + 6
    assert cs.ClippedScorer(s, fit_options={"bias": False}).num_parameters(1) == 6


def test_clipped_candidates_and_reasons():
    assert cs.check_candidates(None, 100, 10) == (1, 2, 3)
    assert cs.check_candidates(None, 100, 2) == (1, 2)
    for bad, error in (([4], ValueError), ([0], ValueError), ([1, 1], ValueError),
                       ([], ValueError), ([2.0], TypeError), (3, TypeError)):
        with pytest.raises(error, match="candidates"):
            cs.check_candidates(bad, 100, 10)
    with pytest.raises(ValueError, match=r"candidates must be at most 2 .*N = 2 units"):
        cs.check_candidates([3], 100, 2)
    with pytest.raises(ValueError, match="criteria"):
        model_selection(jnp.ones((10, 3)), [1], model="clipped", criteria=("evidence",),
                        rng_key=jax.random.key(0))
    s = clipped_gaussian.generate(jax.random.key(0), 20, 6, 1).s
    assert "latent dimensions" in cs.ClippedScorer(s).evidence_reason(1, 1 << 30)


def test_clipped_bad_data():
    with pytest.raises(ValueError, match="x must hold only -1 / \\+1 or only 0 / 1"):
        cs.ClippedScorer(jnp.asarray([[0.5, 1.0], [1.0, -1.0]]))
    with pytest.raises(ValueError, match="x contains 1 NaN"):
        cs.ClippedScorer(jnp.asarray([[np.nan, 1.0], [1.0, -1.0]]))
    with pytest.raises(ValueError, match="x must hold only"):
        model_selection(jnp.asarray([[2.0, 1.0], [1.0, 0.0]]), [1], model="clipped",
                        rng_key=jax.random.key(0))
    with pytest.raises(ValueError, match="noise must be positive"):
        cs.ClippedScorer(jnp.ones((3, 2)), noise=0.0)
