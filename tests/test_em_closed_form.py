"""The closed-form M-step blocks of fit_em (inference.em.closed_form): each shape is
recognised on the objective where it holds and refused where it does not, its maximiser
equals the known one, and a fit with the blocks equals the fit by L-BFGS alone."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.distributions import constraints

from inference import fit_em
from inference.em.closed_form import block_checks, choose_blocks, closed_form_m_step
from ppl_models import mixture

X = np.asarray(jax.random.normal(jax.random.key(0), (200,)) * 1.5 + 2.0)
COUNTS = np.asarray(jax.random.poisson(jax.random.key(1), 3.0, (200,)), float)
LABELS = np.asarray(jax.random.categorical(jax.random.key(2), jnp.log(jnp.array(
    [0.2, 0.3, 0.5])), shape=(200,)))

CONSTRAINTS = {"mu": constraints.real, "sigma": constraints.positive,
               "variance": constraints.positive, "rate": constraints.positive,
               "w": constraints.simplex, "logits": constraints.real,
               "concentration": constraints.positive}


def objective(theta):
    """Minus the mean log-density of four independent pieces, one per shape (and two
    without a closed form: logits and a gamma concentration)."""
    x, n = jnp.asarray(X), X.shape[0]
    terms = [
        dist.Normal(theta["mu"], theta["sigma"]).log_prob(x),  # quadratic; scale p = -2
        dist.Normal(1.0, jnp.sqrt(theta["variance"])).log_prob(x),  # variance: p = -1
        dist.Poisson(theta["rate"]).log_prob(jnp.asarray(COUNTS)),  # rate: p = 1
        dist.Categorical(probs=theta["w"]).log_prob(jnp.asarray(LABELS)),  # counts
        dist.Categorical(logits=theta["logits"]).log_prob(jnp.asarray(LABELS)),
        dist.Gamma(theta["concentration"], 1.0).log_prob(jnp.asarray(COUNTS) + 0.5),
    ]
    return -sum(jnp.sum(t) for t in terms) / n


START = {"mu": jnp.asarray(0.0), "sigma": jnp.asarray(0.7), "variance": jnp.asarray(4.0),
         "rate": jnp.asarray(1.0), "w": jnp.ones(3) / 3, "logits": jnp.zeros(3),
         "concentration": jnp.asarray(2.0)}


@pytest.fixture(scope="module")
def blocks():
    checks = jax.jit(lambda theta, blocks: block_checks(objective, theta, blocks,
                                                        jax.random.key(3)),
                     static_argnames="blocks")
    return choose_blocks(lambda blocks: checks(START, blocks), CONSTRAINTS)


def test_each_shape_is_recognised_and_the_others_are_not(blocks):
    found = {kind: (sites, powers) for kind, sites, powers in blocks}
    assert found["quadratic"] == (("mu",), ())
    assert found["simplex"] == (("w",), ())
    sites, powers = found["positive"]
    assert dict(zip(sites, powers, strict=True)) == {"rate": 1.0, "sigma": -2.0,
                                                     "variance": -1.0}
    covered = {n for _, sites, _ in blocks for n in sites}
    assert covered.isdisjoint({"logits", "concentration"})


def test_block_maximisers_are_the_known_ones(blocks):
    theta, solved = jax.jit(lambda t: closed_form_m_step(objective, t, blocks))(START)
    assert bool(solved)
    np.testing.assert_allclose(theta["mu"], X.mean(), rtol=1e-5)
    # sigma's block follows mu's: the maximum-likelihood scale about the new mean.
    np.testing.assert_allclose(theta["sigma"], X.std(), rtol=1e-4)
    np.testing.assert_allclose(theta["variance"], np.mean((X - 1.0) ** 2), rtol=1e-4)
    np.testing.assert_allclose(theta["rate"], COUNTS.mean(), rtol=1e-4)
    np.testing.assert_allclose(theta["w"], np.bincount(LABELS, minlength=3) / 200, rtol=1e-5)
    for name in ("logits", "concentration"):  # left to L-BFGS: unchanged here
        np.testing.assert_array_equal(theta[name], START[name])


def diagonal_mixture(x, k):
    w = numpyro.param("weights", jnp.ones(k) / k, constraint=constraints.simplex)
    means = numpyro.param("means", jnp.zeros((k, x.shape[1])))
    scales = numpyro.param("scales", jnp.ones((k, x.shape[1])), constraint=constraints.positive)
    mixture.model(x, weights=w, means=means, scales=scales, covariance="diag")


def student_mixture(x, k):
    """A Student-t observation: its degrees of freedom and means have no closed form (the
    weights still do)."""
    w = numpyro.param("weights", jnp.ones(k) / k, constraint=constraints.simplex)
    means = numpyro.param("means", jnp.zeros((k, x.shape[1])))
    df = numpyro.param("df", 5.0, constraint=constraints.positive)
    with numpyro.plate("data", x.shape[0]):
        c = numpyro.sample("c", dist.Categorical(w))
        numpyro.sample("x", dist.StudentT(df, means[c], 1.0).to_event(1), obs=x)


@pytest.fixture(scope="module")
def clusters():
    centres = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]])
    noise = np.asarray(jax.random.normal(jax.random.key(4), (90, 2)))
    return (centres[np.arange(90) % 3] + noise).astype(np.float32)


@pytest.mark.parametrize("e_step", ["soft", "hard"])
def test_a_fit_with_the_blocks_equals_the_fit_by_lbfgs(clusters, e_step):
    """Same start, same key: the blocks (weights, means, scales all in closed form) reach
    the fixed point that L-BFGS with many steps per M-step reaches: the same objective
    to 1e-5, the parameters to 1e-2 (float32: the likelihood is flat enough along some
    directions that the two stopping points differ by a few 1e-3 there)."""
    kw = dict(rng_key=jax.random.key(5), e_step=e_step, num_restarts=2, max_iterations=300)
    closed = fit_em(diagonal_mixture, clusters, 3, **kw)
    slow = fit_em(diagonal_mixture, clusters, 3, m_step="lbfgs", m_step_iterations=200, **kw)
    assert closed.closed_form and not slow.closed_form
    np.testing.assert_allclose(closed.objective, slow.objective, rtol=1e-5)
    order_c, order_s = (np.argsort(np.asarray(f.params["means"])[:, 0] * 10
                                   + np.asarray(f.params["means"])[:, 1])
                        for f in (closed, slow))
    for name in ("weights", "means", "scales"):
        np.testing.assert_allclose(np.asarray(closed.params[name])[order_c],
                                   np.asarray(slow.params[name])[order_s],
                                   rtol=1e-2, atol=1e-2)
    assert np.all(np.diff(np.asarray(closed.trace.objective)) * (1 if e_step == "soft" else -1)
                  >= -1e-5 * np.abs(np.asarray(closed.trace.objective)[1:]))


def test_parameters_without_a_closed_form_go_to_lbfgs_and_closed_says_which(clusters):
    kw = dict(rng_key=jax.random.key(6), num_restarts=1, max_iterations=60)
    fit = fit_em(student_mixture, clusters, 3, **kw)
    assert not fit.closed_form
    reference = fit_em(student_mixture, clusters, 3, m_step="lbfgs", m_step_iterations=100,
                       **kw)
    np.testing.assert_allclose(fit.objective, reference.objective, rtol=1e-4)
    with pytest.raises(ValueError, match=r"m_step='closed'.*\['df', 'means'\]"):
        fit_em(student_mixture, clusters, 3, m_step="closed", **kw)
