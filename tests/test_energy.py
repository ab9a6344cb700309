"""The association energy read off the program equals the paper's formulas (seed 000 eq. 5-8)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers

from inference.program.energy import check_quadratic, quadratic_energy
from ppl_models import gvq


def all_states(n):
    return jnp.asarray(list(itertools.product([0, 1], repeat=n)), dtype=float)


def plain_site_log_prob(x_row, features, states, site, **model_kwargs):
    """log-probability of one site of the *unhandled* program, for each state."""

    def one(s):
        conditioned = handlers.condition(gvq.model, {"s": s[None]})
        tr = handlers.trace(handlers.seed(conditioned, 0)).get_trace(
            x_row[None], features=features, **model_kwargs)
        return tr[site]["fn"].log_prob(tr[site]["value"]).sum()

    return jax.vmap(one)(states)


def test_limit_energy_is_minus_two_sigma_squared_log_likelihood_for_every_state():
    """E_x(s) == -2 sigma^2 log p(x|s) + const for all 2^5 states (float64, exact)."""
    n, dim, sigma = 5, 7, 0.1
    with jax.enable_x64(True):
        data = gvq.generate_planted(jax.random.key(0), 3, n, dim, noise_scale=0.3)
        x = jnp.asarray(data.x, jnp.float64)
        features = jnp.asarray(data.features, jnp.float64)
        states = all_states(n)
        energy = quadratic_energy(gvq.model, x, model_kwargs={"features": features})
        for i in range(x.shape[0]):
            ours = jax.vmap(lambda s, i=i: energy.constant[i] + energy.linear[i] @ s
                            + 0.5 * s @ energy.couplings @ s)(states)
            reference = -2 * sigma**2 * plain_site_log_prob(x[i], features, states, "x",
                                                            sigma=sigma)
            offset = ours - reference
            # One constant for all states, from the normaliser: -2 sigma^2 d log(sigma sqrt(2 pi)).
            np.testing.assert_allclose(offset, offset[0], atol=1e-10)
            np.testing.assert_allclose(
                offset[0], -2 * sigma**2 * dim * np.log(sigma * np.sqrt(2 * np.pi)), rtol=1e-10)
            # And E is ||x - s F||^2 itself (eq. 5).
            direct = jnp.sum((x[i] - states @ features) ** 2, axis=-1)
            np.testing.assert_allclose(ours, direct, rtol=1e-12, atol=1e-10)


def test_coefficients_match_eq_7():
    """h_i = -2 f_i.x + f_i.f_i and w_ij = 2 f_i.f_j (seed 000 eq. 7), constant ||x||^2."""
    data = gvq.generate_planted(jax.random.key(1), 6, 4, 5, noise_scale=0.2)
    F, x = data.features, data.x
    energy = quadratic_energy(gvq.model, x, model_kwargs={"features": F})
    gram = F @ F.T
    np.testing.assert_allclose(energy.linear, -2 * x @ F.T + jnp.diag(gram), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(energy.couplings, 2 * (gram - jnp.diag(jnp.diag(gram))),
                               rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(energy.constant, jnp.sum(x**2, 1), rtol=1e-5)


@pytest.mark.slow
def test_finite_noise_energy_includes_the_prior():
    """noise=sigma: E = -2 sigma^2 [log p(x|s) + log p(s)] + const, with a non-uniform prior."""
    n, sigma = 4, 0.7
    with jax.enable_x64(True):
        probs = jnp.array([0.1, 0.3, 0.6, 0.9])
        data = gvq.generate_planted(jax.random.key(2), 2, n, 3, noise_scale=sigma)
        x = jnp.asarray(data.x, jnp.float64)
        features = jnp.asarray(data.features, jnp.float64)
        kwargs = {"features": features, "prior_probs": probs}
        energy = quadratic_energy(gvq.model, x, noise=sigma, model_kwargs=kwargs)
        states = all_states(n)
        for i in range(2):
            ours = jax.vmap(lambda s, i=i: energy.constant[i] + energy.linear[i] @ s
                            + 0.5 * s @ energy.couplings @ s)(states)
            logp = (plain_site_log_prob(x[i], features, states, "x", sigma=sigma,
                                        prior_probs=probs)
                    + plain_site_log_prob(x[i], features, states, "s", sigma=sigma,
                                          prior_probs=probs))
            offset = ours + 2 * sigma**2 * logp
            np.testing.assert_allclose(offset, offset[0], atol=1e-10)


def cubic_model(x=None, *, features, sigma=0.1):
    """Not quadratic in s: a three-way interaction in the mean."""
    n, dim = features.shape
    with numpyro.plate("data", x.shape[0]):
        s = numpyro.sample("s", dist.Bernoulli(0.5 * jnp.ones(n)).to_event(1))
        loc = s @ features + 3.0 * (s[:, 0] * s[:, 1] * s[:, 2])[:, None]
        numpyro.sample("x", dist.Normal(loc, sigma).to_event(1), obs=x)


@pytest.mark.slow
def test_check_quadratic_rejects_a_program_that_is_not_quadratic():
    data = gvq.generate_planted(jax.random.key(3), 5, 4, 3)
    check_quadratic(gvq.model, data.x, model_kwargs={"features": data.features})  # passes
    with pytest.raises(ValueError, match="not quadratic in site 's'"):
        check_quadratic(cubic_model, data.x, model_kwargs={"features": data.features})


def test_tempered_energy_matches_the_program_at_every_sigma():
    """AssociationProblem.tempered(sigma) equals quadratic_energy(noise=sigma), prior included."""
    from inference.association.core import association_problem

    with jax.enable_x64(True):
        data = gvq.generate_planted(jax.random.key(6), 5, 4, 3, noise_scale=0.5)
        kwargs = {"features": jnp.asarray(data.features, jnp.float64),
                  "prior_probs": jnp.array([0.1, 0.3, 0.6, 0.9])}
        x = jnp.asarray(data.x, jnp.float64)
        problem = association_problem(gvq.model, x, kwargs)
        for sigma in [1e-3, 0.3, 2.0, 50.0]:
            direct = quadratic_energy(gvq.model, x, noise=sigma, model_kwargs=kwargs)
            ours = problem.tempered(sigma)
            np.testing.assert_allclose(ours.linear, direct.linear, rtol=1e-10, atol=1e-8)
            np.testing.assert_allclose(ours.couplings, direct.couplings, rtol=1e-10, atol=1e-8)
