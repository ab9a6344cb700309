"""The noise handlers ``observation_noise`` and ``noiseless`` (inference/handlers.py).

Every check compares the log-density NumPyro computes from the handled program
with a closed form evaluated independently (scipy.stats in float64, or plain
squared errors), so a handler that touches the wrong site, drops a wrapper
(``to_event``, ``expand``, ``mask``) or mis-scales a term fails.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from numpyro.infer.util import log_density
from scipy import stats

from inference.program.handlers import noiseless, observation_noise
from ppl_models import gvq

NUM_EXAMPLES, DIM = 3, 2
#: Original scale of every observed site in the test program; the handlers change it.
OBS_SCALE = 0.5
PRIOR_SCALE, LATENT_SCALE = 2.0, 3.0
# Dyadic values (exact in float32), so that squared errors are computed exactly.
LOC_SLOPE = np.array([[1.0, -0.5], [0.25, 2.0], [-1.5, 0.75]])
LOC_SHIFT = np.array([[0.5, 0.0], [-1.0, 0.25], [2.0, -0.75]])
MASK = np.array([[True, False], [True, True], [False, True]])
X = np.array([[1.25, -0.5], [0.0, 2.5], [1.0, 0.5]])
COUNTS = np.array([1.0, 0.0, 3.0])
T_OBS = np.array([0.25, -1.0, 2.0])
POSITIVE_OBS = np.array([0.5, 1.5, 3.0])
PARAMS = {"mu": 0.5, "u": np.array([0.75, -1.25])}

#: How the observed Gaussian site "x" is written: name -> (uses MASK, uses a loc array).
WRAPPERS = ["plain", "to_event", "expand", "expand_to_event", "mask", "mask_to_event",
            "plate_to_event", "plate_expand_to_event"]


def x_loc(wrapper, mu):
    """The mean of site "x" (NUM_EXAMPLES, DIM) as the program computes it."""
    if "expand" in wrapper:
        return np.broadcast_to(mu, (NUM_EXAMPLES, DIM))
    return LOC_SLOPE * mu + LOC_SHIFT


def x_mask(wrapper):
    return MASK if "mask" in wrapper else np.ones((NUM_EXAMPLES, DIM), bool)


def program(x=None, wrapper="plain", scale=OBS_SCALE):
    """A small program with one observed Gaussian site "x" written as ``wrapper``.

    Other sites, which ``observation_noise`` must leave alone: a Gaussian prior
    "mu", an unobserved Gaussian "u" (wrapped), and observed non-Gaussian sites
    "c" (Poisson), "t" (StudentT with a scale) and "ln" (LogNormal, whose base
    is a Normal inside a transform).
    """
    mu = numpyro.sample("mu", dist.Normal(0.0, PRIOR_SCALE))
    numpyro.sample("u", dist.Normal(mu, LATENT_SCALE).expand([DIM]).to_event(1))
    loc = LOC_SLOPE * mu + LOC_SHIFT
    if wrapper == "plain":
        numpyro.sample("x", dist.Normal(loc, scale), obs=x)
    elif wrapper == "to_event":
        numpyro.sample("x", dist.Normal(loc, scale).to_event(2), obs=x)
    elif wrapper == "expand":
        numpyro.sample("x", dist.Normal(mu, scale).expand([NUM_EXAMPLES, DIM]), obs=x)
    elif wrapper == "expand_to_event":
        numpyro.sample("x", dist.Normal(mu, scale).expand([NUM_EXAMPLES, DIM]).to_event(1),
                       obs=x)
    elif wrapper == "mask":
        numpyro.sample("x", dist.Normal(loc, scale).mask(MASK), obs=x)
    elif wrapper == "mask_to_event":
        numpyro.sample("x", dist.Normal(loc, scale).mask(MASK).to_event(1), obs=x)
    with numpyro.plate("data", NUM_EXAMPLES):
        if wrapper == "plate_to_event":
            numpyro.sample("x", dist.Normal(loc, scale).to_event(1), obs=x)
        elif wrapper == "plate_expand_to_event":
            # The plate expands the (DIM,)-event distribution to batch (NUM_EXAMPLES,).
            numpyro.sample("x", dist.Normal(mu, scale).expand([DIM]).to_event(1), obs=x)
        numpyro.sample("c", dist.Poisson(2.0), obs=COUNTS)
        numpyro.sample("t", dist.StudentT(3.0, mu, OBS_SCALE), obs=T_OBS)
        numpyro.sample("ln", dist.LogNormal(mu, OBS_SCALE), obs=POSITIVE_OBS)


def reference_log_density(wrapper, x_scale):
    """log p of ``program`` at PARAMS with site "x" at scale ``x_scale`` (scipy, float64)."""
    mu, u = PARAMS["mu"], PARAMS["u"]
    x_term = stats.norm.logpdf(X, x_loc(wrapper, mu), np.broadcast_to(x_scale, X.shape))
    return (
        stats.norm.logpdf(mu, 0.0, PRIOR_SCALE)
        + stats.norm.logpdf(u, mu, LATENT_SCALE).sum()
        + np.where(x_mask(wrapper), x_term, 0.0).sum()
        + stats.poisson.logpmf(COUNTS, 2.0).sum()
        + stats.t.logpdf(T_OBS, 3.0, mu, OBS_SCALE).sum()
        + stats.lognorm.logpdf(POSITIVE_OBS, OBS_SCALE, scale=np.exp(mu)).sum()
    )


def normal_core(fn):
    """The Normal inside Independent / Expanded / Masked wrappers (None if there is none)."""
    while not isinstance(fn, dist.Normal):
        if not isinstance(fn, dist.Independent | dist.ExpandedDistribution
                          | dist.MaskedDistribution):
            return None
        fn = fn.base_dist
    return fn


def wrapper_types(fn):
    """The Independent / Masked wrappers around the Normal core, outermost first."""
    types = []
    while not isinstance(fn, dist.Normal):
        if not isinstance(fn, dist.ExpandedDistribution):
            types.append(type(fn))
        fn = fn.base_dist
    return types


def handled_trace(handler, wrapper, x=X):
    conditioned = handlers.substitute(program, data=PARAMS)
    return handlers.trace(handlers.seed(handler(conditioned), 0)).get_trace(x, wrapper)


def scale_of(site):
    core = normal_core(site["fn"])
    return np.broadcast_to(np.asarray(core.scale), core.batch_shape)


# ---------------------------------------------------------------------------------------
# observation_noise
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("sigma", [0.3, np.array([0.25, 0.75])], ids=["scalar", "per_dim"])
@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_sigma_sets_the_scale_of_observed_gaussian_sites_only(wrapper, sigma):
    logp, _ = log_density(observation_noise(program, sigma=sigma), (X, wrapper), {}, PARAMS)
    np.testing.assert_allclose(logp, reference_log_density(wrapper, sigma), rtol=1e-5)

    plain = handled_trace(lambda m: m, wrapper)
    handled = handled_trace(lambda m: observation_noise(m, sigma=sigma), wrapper)
    # The wrappers survive (to_event and mask; an expand may become a broadcast Normal), with
    # the same batch and event shapes.
    site, before = handled["x"], plain["x"]
    assert wrapper_types(site["fn"]) == wrapper_types(before["fn"])
    assert site["fn"].batch_shape == before["fn"].batch_shape
    assert site["fn"].event_shape == before["fn"].event_shape
    np.testing.assert_allclose(
        np.broadcast_to(scale_of(site), (NUM_EXAMPLES, DIM)),
        np.broadcast_to(sigma, (NUM_EXAMPLES, DIM)), rtol=1e-7)
    # Unobserved Gaussian sites (prior and latent) and non-Gaussian sites are left alone.
    for name in ["mu", "u", "c", "t", "ln"]:
        assert handled[name]["fn"] is not None
        np.testing.assert_array_equal(
            handled[name]["fn"].log_prob(handled[name]["value"]),
            plain[name]["fn"].log_prob(plain[name]["value"]))
    assert float(scale_of(handled["mu"])) == PRIOR_SCALE
    np.testing.assert_array_equal(scale_of(handled["u"]), LATENT_SCALE)
    student = handled["t"]["fn"]
    while not isinstance(student, dist.StudentT):
        student = student.base_dist
    assert float(student.scale) == OBS_SCALE


@pytest.mark.parametrize("wrapper", ["plain", "expand_to_event", "mask", "plate_to_event"])
def test_factor_multiplies_the_existing_scale(wrapper):
    factor = 0.25
    logp, _ = log_density(observation_noise(program, factor=factor), (X, wrapper), {}, PARAMS)
    np.testing.assert_allclose(logp, reference_log_density(wrapper, factor * OBS_SCALE),
                               rtol=1e-5)


def test_factor_multiplies_an_array_scale_elementwise():
    scale = np.array([0.5, 2.0])  # per-dimension scale of the program
    factor = np.array([[0.5], [1.0], [0.25]])  # per-example factor
    wrapper = "to_event"
    logp, _ = log_density(observation_noise(program, factor=factor), (X, wrapper, scale), {},
                          PARAMS)
    np.testing.assert_allclose(logp, reference_log_density(wrapper, factor * scale), rtol=1e-5)


def two_site_program(x1=None, x2=None):
    mu = numpyro.sample("mu", dist.Normal(0.0, PRIOR_SCALE))
    with numpyro.plate("data", NUM_EXAMPLES):
        numpyro.sample("u", dist.Normal(mu, LATENT_SCALE))
        numpyro.sample("x1", dist.Normal(mu, 0.5).expand([DIM]).to_event(1), obs=x1)
        numpyro.sample("x2", dist.Normal(mu, 0.7), obs=x2)
        numpyro.sample("c", dist.Poisson(2.0), obs=COUNTS)


X1, X2 = X, np.array([0.5, -0.25, 1.0])
TWO_SITE_PARAMS = {"mu": 0.5, "u": np.array([1.0, -2.0, 0.25])}


def two_site_reference(x1_scale=0.5, x2_scale=0.7, u_scale=LATENT_SCALE):
    mu, u = TWO_SITE_PARAMS["mu"], TWO_SITE_PARAMS["u"]
    return (stats.norm.logpdf(mu, 0.0, PRIOR_SCALE) + stats.norm.logpdf(u, mu, u_scale).sum()
            + stats.norm.logpdf(X1, mu, x1_scale).sum() + stats.norm.logpdf(X2, mu, x2_scale).sum()
            + stats.poisson.logpmf(COUNTS, 2.0).sum())


def two_site_log_density(handler):
    logp, _ = log_density(handler(two_site_program), (X1, X2), {}, TWO_SITE_PARAMS)
    return logp


def test_sites_restricts_to_the_named_sites():
    np.testing.assert_allclose(
        two_site_log_density(lambda m: observation_noise(m, sigma=0.1, sites="x1")),
        two_site_reference(x1_scale=0.1), rtol=1e-5)
    np.testing.assert_allclose(
        two_site_log_density(lambda m: observation_noise(m, sigma=0.1, sites=["x2"])),
        two_site_reference(x2_scale=0.1), rtol=1e-5)
    # A named unobserved Gaussian site is changed too (the docstring: "observed or not").
    np.testing.assert_allclose(
        two_site_log_density(lambda m: observation_noise(m, factor=0.5, sites=("x1", "u"))),
        two_site_reference(x1_scale=0.25, u_scale=0.5 * LATENT_SCALE), rtol=1e-5)
    # Default: every observed Gaussian site, nothing else.
    np.testing.assert_allclose(
        two_site_log_density(lambda m: observation_noise(m, sigma=0.1)),
        two_site_reference(x1_scale=0.1, x2_scale=0.1), rtol=1e-5)


@pytest.mark.parametrize("handler", [
    lambda m: observation_noise(m, sigma=0.1, sites=["x1", "c"]),
    lambda m: observation_noise(m, factor=2.0, sites="c"),
    lambda m: noiseless(m, sites="c"),
], ids=["sigma", "factor", "noiseless"])
def test_naming_a_non_gaussian_site_raises(handler):
    with pytest.raises(ValueError, match="'c'.*Normal"):
        two_site_log_density(handler)


@pytest.mark.parametrize("kwargs", [{}, {"sigma": 0.1, "factor": 0.5}], ids=["neither", "both"])
def test_exactly_one_of_sigma_and_factor(kwargs):
    with pytest.raises(ValueError, match="exactly one of sigma= and factor="):
        observation_noise(program, **kwargs)
    with pytest.raises(ValueError, match="exactly one"):
        with observation_noise(**kwargs):
            pass


@pytest.mark.parametrize("name", ["sigma", "factor"])
@pytest.mark.parametrize("value", [0.0, -1.0, np.nan, np.inf, np.array([0.1, 0.0]),
                                   jnp.array(-0.5)],
                         ids=["zero", "negative", "nan", "inf", "array_with_zero", "jax_negative"])
def test_non_positive_or_non_finite_noise_raises(name, value):
    with pytest.raises(ValueError, match=f"{name} must be positive and finite"):
        observation_noise(program, **{name: value})


def test_traced_sigma_and_factor_inside_jit_and_scan():
    @jax.jit
    def logp_at(sigma):
        return log_density(observation_noise(program, sigma=sigma), (X, "mask_to_event"), {},
                           PARAMS)[0]

    for sigma in [0.3, 1.7]:
        np.testing.assert_allclose(logp_at(sigma), reference_log_density("mask_to_event", sigma),
                                   rtol=1e-5)

    # An annealing schedule: the factor is a scan input (traced), halving the noise each step.
    factors = 0.5 ** jnp.arange(4.0)

    def body(carry, factor):
        handled = observation_noise(program, factor=factor)
        return carry, log_density(handled, (X, "plate_to_event"), {}, PARAMS)[0]

    _, logps = jax.jit(lambda f: jax.lax.scan(body, None, f))(factors)
    expected = [reference_log_density("plate_to_event", f * OBS_SCALE) for f in factors]
    np.testing.assert_allclose(logps, expected, rtol=1e-5)


# ---------------------------------------------------------------------------------------
# noiseless
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_noiseless_log_density_is_minus_squared_error(wrapper):
    """Exact: all values are dyadic, so -||x - loc||^2 is exact in float32; priors drop out."""
    logp, _ = log_density(noiseless(program), (X, wrapper), {}, PARAMS)
    residual = np.where(x_mask(wrapper), X - x_loc(wrapper, PARAMS["mu"]), 0.0)
    expected = -np.sum(residual**2)
    assert expected != 0.0
    assert float(logp) == expected


def test_noiseless_drops_factors_and_unnamed_observed_gaussians():
    def with_factor(x1=None, x2=None):
        two_site_program(x1, x2)
        numpyro.factor("penalty", 123.0)

    logp, _ = log_density(noiseless(with_factor), (X1, X2), {}, TWO_SITE_PARAMS)
    mu = TWO_SITE_PARAMS["mu"]
    expected = -np.sum((X1 - mu) ** 2) - np.sum((X2 - mu) ** 2)
    assert float(logp) == expected
    # sites= keeps only the named Gaussian site; the other observed Gaussian drops out.
    logp, _ = log_density(noiseless(with_factor, sites="x1"), (X1, X2), {}, TWO_SITE_PARAMS)
    assert float(logp) == -np.sum((X1 - mu) ** 2)


def limit_program(x=None, sigma=0.1):
    mu = numpyro.sample("mu", dist.Normal(0.0, PRIOR_SCALE))
    with numpyro.plate("data", x.shape[0]):
        s = numpyro.sample("s", dist.Bernoulli(0.3))
        loc = mu + s[:, None] * jnp.array([1.0, -2.0, 0.5])
        numpyro.sample("x", dist.Normal(loc, sigma).to_event(1), obs=x)


def test_noiseless_is_the_sigma_to_zero_limit_of_observation_noise():
    """2 sigma^2 (log p_sigma + N d log(sigma sqrt(2 pi))) -> -||x - loc||^2.

    Derivation of the tolerance: with E = ||x - loc||^2 and the prior terms
    log pi = log N(mu; 0, 2) + sum log Bernoulli(s; 0.3), the finite-noise density is
    log p_sigma = log pi - E / (2 sigma^2) - N d log(sigma sqrt(2 pi)), so
    2 sigma^2 (log p_sigma + N d log(sigma sqrt(2 pi))) = -E + 2 sigma^2 log pi exactly.
    The gap to the limit is 2 sigma^2 |log pi| (about 1.4e-3 at sigma = 1e-2 and 1.4e-5 at
    1e-3); float64 rounding adds at most a few ulps of E + 1 (we allow 1e-12 (E + 1)).
    """
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        x = jnp.asarray(rng.normal(size=(4, 3)))
        params = {"mu": jnp.asarray(0.3), "s": jnp.array([1.0, 0.0, 1.0, 1.0])}
        loc = params["mu"] + params["s"][:, None] * jnp.array([1.0, -2.0, 0.5])
        energy = float(jnp.sum((x - loc) ** 2))
        log_prior = (stats.norm.logpdf(0.3, 0.0, PRIOR_SCALE)
                     + stats.bernoulli.logpmf([1, 0, 1, 1], 0.3).sum())

        limit, _ = log_density(noiseless(limit_program), (x,), {}, params)
        assert limit.dtype == jnp.float64
        np.testing.assert_allclose(float(limit), -energy, rtol=1e-14)

        num_examples, dim = x.shape
        for sigma in [1e-2, 1e-3]:
            # The program's own sigma (0.1) is overridden by the handler.
            logp, _ = log_density(observation_noise(limit_program, sigma=sigma), (x,), {},
                                  params)
            scaled = 2 * sigma**2 * (
                float(logp) + num_examples * dim * np.log(sigma * np.sqrt(2 * np.pi)))
            rounding = 1e-12 * (energy + 1.0)
            tolerance = 2 * sigma**2 * abs(log_prior) + rounding
            assert abs(scaled - float(limit)) <= tolerance
            # Sharper: the gap is exactly the sigma^2-weighted prior.
            assert abs((scaled - float(limit)) - 2 * sigma**2 * log_prior) <= rounding


def generative_program(sigma=0.1):
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    x = numpyro.sample("x", dist.Normal(mu * jnp.array([1.0, -2.0, 0.5]), sigma).to_event(1))
    y = numpyro.sample("y", dist.Normal(mu, sigma).expand([2]))
    return x, y


def test_noiseless_sampling_returns_the_mean():
    mu = 1.5
    fixed = handlers.substitute(generative_program, data={"mu": mu})
    expected_x = mu * np.array([1.0, -2.0, 0.5])
    for key in [0, 1]:
        x, y = handlers.seed(noiseless(fixed, sites=["x", "y"]), key)()
        np.testing.assert_array_equal(x, expected_x)
        np.testing.assert_array_equal(y, [mu, mu])
        # Only the named site becomes deterministic.
        x, y = handlers.seed(noiseless(fixed, sites="x"), key)()
        np.testing.assert_array_equal(x, expected_x)
        assert np.all(y != mu)
    # Without the handler the sample is noisy (the check above can fail).
    x, _ = handlers.seed(fixed, 0)()
    assert np.all(x != expected_x)


@pytest.mark.parametrize("sigma", [0.1, 2.0])
def test_noiseless_gvq_energy_for_every_state(sigma):
    """-log p under noiseless == sum_n ||x_n - s @ F||^2 for all 2^4 states s."""
    num_features, dim, num_examples = 4, 3, 2
    key_features, key_x = jax.random.split(jax.random.key(0))
    features = 2.0 * jax.random.normal(key_features, (num_features, dim))
    x = jax.random.normal(key_x, (num_examples, dim)) + 1.0
    states = jnp.asarray(list(itertools.product([0.0, 1.0], repeat=num_features)))

    def minus_logp(s):
        data = {"s": jnp.broadcast_to(s, (num_examples, num_features))}
        logp, _ = log_density(noiseless(gvq.model), (x,), {"features": features, "sigma": sigma},
                              data)
        return -logp

    energies = jax.jit(jax.vmap(minus_logp))(states)
    F, xx, S = (np.asarray(a, np.float64) for a in (features, x, states))
    expected = np.sum((xx[None] - (S @ F)[:, None, :]) ** 2, axis=(1, 2))
    assert energies.shape == (2**num_features,)
    np.testing.assert_allclose(energies, expected, rtol=1e-5, atol=1e-5)


def test_noiseless_keeps_a_plates_expansion_lazy():
    """A plate over N examples of k conditioned means: the rebuilt site keeps the (k, 1, d)
    loc (no (k, N, d) copy), and scores, samples and averages like the broadcast copy."""
    means = jnp.asarray([[0.5, -1.0], [2.0, 0.25], [-1.5, 1.0]])
    x = jnp.asarray([[1.0, 0.0], [0.0, 2.0], [-1.0, 0.5], [2.0, 2.0]])

    def conditioned(x=None):
        with numpyro.plate("examples", 4):
            y = numpyro.sample("y", dist.Categorical(jnp.ones(3) / 3))
            numpyro.sample("x", dist.Normal(means[y], 0.5).to_event(1), obs=x)

    program_k = handlers.condition(conditioned, {"y": jnp.arange(3)[:, None]})
    site = handlers.trace(noiseless(program_k)).get_trace(x)["x"]
    fn, depth = site["fn"], 0
    while isinstance(fn, dist.Independent | dist.ExpandedDistribution):
        fn, depth = fn.base_dist, depth + 1
    assert depth == 2 and fn.loc.shape == (3, 1, 2)  # Independent(Expanded(base))
    assert site["fn"].batch_shape == (3, 4)
    expected = -np.sum((np.asarray(x)[None] - np.asarray(means)[:, None]) ** 2, axis=-1)
    np.testing.assert_array_equal(site["fn"].log_prob(x), expected)
    np.testing.assert_array_equal(site["fn"].mean, np.broadcast_to(means[:, None], (3, 4, 2)))
    generated = handlers.trace(handlers.seed(noiseless(program_k, sites="x"), 0)).get_trace()
    np.testing.assert_array_equal(generated["x"]["value"],
                                  np.broadcast_to(means[:, None], (3, 4, 2)))
    # observation_noise still rebuilds a Normal with broadcast parameters (its noise is read).
    noisy = handlers.trace(observation_noise(program_k, sigma=2.0)).get_trace(x)["x"]["fn"]
    assert isinstance(noisy.base_dist, dist.Normal) and noisy.base_dist.scale.shape == (3, 4, 2)
