"""fit_map_em: EM in the sigma -> 0 limit on a user's own program.

The offset-plus-Ising variant of GVQ is learned to the planted parameters' energy, its
M-step is the least-squares solution of the program for the final states, fit_gvq
refuses the same variant instead of ignoring its offset, and a program whose energy is
not quadratic in its parameters is learned by L-BFGS.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from numpyro.distributions import constraints

from inference import fit_gvq, fit_map_em, map_states
from ppl_models import gvq

N, NUM_UNITS, DIM = 200, 5, 8
OFFSET = jnp.linspace(-1.0, 1.0, DIM)
COUPLINGS = jnp.array([[0.0, 1.0, 0.0, 0.0, -1.0], [1.0, 0.0, 0.5, 0.0, 0.0],
                       [0.0, 0.5, 0.0, -0.5, 0.0], [0.0, 0.0, -0.5, 0.0, 1.0],
                       [-1.0, 0.0, 0.0, 1.0, 0.0]])


def offset_ising(x, couplings):
    """GVQ with a learned offset on x and an Ising prior on s."""
    features = numpyro.param(
        "features", lambda key: 2.0 + jax.random.normal(key, (NUM_UNITS, x.shape[1])))
    offset = numpyro.param("offset", jnp.zeros(x.shape[1]))
    with numpyro.plate("data", x.shape[0]):
        s = numpyro.sample("s", dist.Bernoulli(0.5).expand([NUM_UNITS]).to_event(1))
        numpyro.factor("ising", 0.5 * jnp.einsum("ni,ij,nj->n", s, couplings, s))
        numpyro.sample("x", dist.Normal(offset + s @ features, 0.1).to_event(1), obs=x)


@pytest.fixture(scope="module")
def planted():
    data = gvq.generate_planted(jax.random.key(11), N, NUM_UNITS, DIM, noise_scale=0.1)
    return data._replace(x=data.x + OFFSET)


@pytest.fixture(scope="module")
def learned(planted):
    return fit_map_em(offset_ising, planted.x, COUPLINGS, rng_key=jax.random.key(0),
                      num_restarts=4, max_iterations=50)


def test_recovers_the_planted_energy_where_fit_gvq_refuses(planted, learned):
    truth = handlers.substitute(offset_ising, data={"features": planted.features,
                                                    "offset": OFFSET})
    reference = float(map_states(truth, planted.x, COUPLINGS).energy.mean())
    assert learned.closed_form and learned.converged
    assert learned.objective <= 1.05 * reference, (learned.objective, reference)
    # The same variant written for fit_gvq (features and offset as arguments): refused.

    def as_gvq(x=None, *, features, offset, couplings):
        with numpyro.plate("data", x.shape[0]):
            s = numpyro.sample("s", dist.Bernoulli(0.5).expand([NUM_UNITS]).to_event(1))
            numpyro.factor("ising", 0.5 * jnp.einsum("ni,ij,nj->n", s, couplings, s))
            numpyro.sample("x", dist.Normal(offset + s @ features, 0.1).to_event(1), obs=x)

    with pytest.raises(ValueError, match="least squares.*fit_map_em"):
        fit_gvq(planted.x, NUM_UNITS, model=as_gvq, rng_key=jax.random.key(0),
                model_kwargs={"offset": OFFSET, "couplings": COUPLINGS})


def test_m_step_is_the_least_squares_fit_of_the_final_states(planted, learned):
    states = np.asarray(learned.states["s"], float)
    design = np.hstack([np.ones((N, 1)), states])
    solution = np.linalg.lstsq(design, np.asarray(planted.x, float), rcond=None)[0]
    np.testing.assert_allclose(learned.params["offset"], solution[0], atol=1e-3)
    np.testing.assert_allclose(learned.params["features"], solution[1:], atol=1e-3)
    trace = np.asarray(learned.trace)
    assert np.all(np.diff(trace) <= 1e-5 * np.abs(trace[:-1]) + 1e-7), trace


def scaled_units(x):
    """Positive gains per unit times features: not quadratic in (gains, features)."""
    features = numpyro.param(
        "features", lambda key: 2.0 + jax.random.normal(key, (3, x.shape[1])))
    gains = numpyro.param("gains", jnp.ones(3), constraint=constraints.positive)
    with numpyro.plate("data", x.shape[0]):
        s = numpyro.sample("s", dist.Bernoulli(0.5).expand([3]).to_event(1))
        numpyro.sample("x", dist.Normal((s * gains) @ features, 0.1).to_event(1), obs=x)


def test_a_program_not_quadratic_in_its_parameters_is_learned_by_lbfgs():
    data = gvq.generate_planted(jax.random.key(3), 80, 3, 6, noise_scale=0.05)
    result = fit_map_em(scaled_units, data.x, rng_key=jax.random.key(1), num_restarts=2,
                        max_iterations=30)
    assert not result.closed_form
    assert np.all(np.asarray(result.params["gains"]) > 0)
    # The reconstruction error reaches the planted noise level (0.05^2 per entry).
    assert result.objective < 6 * 0.05 ** 2 * 3, result.objective


def _no_params(x):
    with numpyro.plate("data", x.shape[0]):
        s = numpyro.sample("s", dist.Bernoulli(0.5).expand([2]).to_event(1))
        numpyro.sample("x", dist.Normal(s @ jnp.ones((2, x.shape[1])), 0.1).to_event(1), obs=x)


def test_bad_input_names_the_argument(planted):
    with pytest.raises(ValueError, match="no numpyro.param site"):
        fit_map_em(_no_params, planted.x, rng_key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"init_params.*\['scale'\]"):
        fit_map_em(offset_ising, planted.x, COUPLINGS, rng_key=jax.random.key(0),
                   init_params={"scale": 1.0})
    with pytest.raises(ValueError, match="rng_key"):
        fit_map_em(offset_ising, planted.x, COUPLINGS)
    with pytest.raises(ValueError, match="num_restarts"):
        fit_map_em(offset_ising, planted.x, COUPLINGS, rng_key=jax.random.key(0),
                   num_restarts=0)
