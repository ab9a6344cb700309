"""numpyro_map_states: NumPyro's generic inference on a user's program, the peer of
map_states (infer_discrete at temperature 0 where the program enumerates, NumPyro's
discrete samplers where it does not)."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

from inference import map_states, numpyro_map_states
from inference.association.program_sites import binary_sites, program_energy
from ppl_models import gvq


@pytest.fixture(scope="module")
def planted():
    return gvq.generate_planted(jax.random.key(11), 30, 5, 8, noise_scale=0.1)


def per_unit_ising(x, features, coupling):
    """One site per unit (enumerable) and a factor coupling units 0 and 1."""
    with numpyro.plate("data", x.shape[0]):
        units = [numpyro.sample(f"s_{i}", dist.Bernoulli(0.5)) for i in range(features.shape[0])]
        numpyro.factor("pair", coupling * units[0] * units[1])
        loc = sum(u[..., None] * features[i] for i, u in enumerate(units))
        numpyro.sample("x", dist.Normal(loc, 0.2).to_event(1), obs=x)


# The default run checks noise=None in the Examples of numpyro_map_states
# (inference/association/generic.py); the slow run both noises here (about 10 s each).
@pytest.mark.slow
@pytest.mark.parametrize("noise", [None, "program"])
def test_enumeration_is_the_exact_map_state(planted, noise):
    x, F = planted.x, planted.features
    args = (x + 0.1, F, 3.0)
    peer = numpyro_map_states(per_unit_ising, *args, noise=noise)
    ours = map_states(per_unit_ising, *args, noise=noise)
    for name in ours.states:
        np.testing.assert_array_equal(peer.states[name], ours.states[name])
    np.testing.assert_allclose(peer.energy, ours.energy, rtol=1e-5, atol=1e-5)


# About 10 s per sampler, in the slow run; the default run's peer check is the
# enumeration's Examples in inference/association/generic.py.
@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["discrete_hmc_gibbs", "mixed_hmc", "gibbs"])
def test_sampler_never_beats_exact_and_reports_its_states_energy(planted, sampler):
    F = planted.features[:3]
    x = jax.random.bernoulli(jax.random.key(2), 0.5, (6, 3)).astype(jnp.float32) @ F
    kwargs = dict(features=F, split_states=True, enumerate_states=False, sigma=1.0)
    exact = map_states(gvq.model, x, noise="program", **kwargs)
    peer = numpyro_map_states(gvq.model, x, method=sampler, noise="program",
                              rng_key=jax.random.key(0), num_samples=100, **kwargs)
    assert np.all(np.asarray(peer.energy) >= np.asarray(exact.energy) - 1e-4)
    # Its energies are the program's at its states (no gap is claimed: single-site
    # sampling need not reach the MAP state in a fixed number of sweeps).
    layout = binary_sites(gvq.model, (x,), kwargs)
    states = layout.flatten(peer.states).astype(jnp.float32)
    energy = program_energy(gvq.model, (x,), kwargs, layout, "program")(states)
    np.testing.assert_allclose(peer.energy, energy, rtol=1e-6)
    with pytest.raises(ValueError, match="rng_key"):
        numpyro_map_states(gvq.model, x, method=sampler, noise="program", **kwargs)


def test_a_vector_valued_site_is_refused_with_the_reason(planted):
    with pytest.raises(ValueError, match=r"sites \['s'\] are vector-valued"):
        numpyro_map_states(gvq.model, planted.x, features=planted.features)
