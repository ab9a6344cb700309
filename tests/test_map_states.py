"""map_states: the papers' association methods on a user's own NumPyro program.

Exact checks against brute force over the program's own log-density (numpyro's
``log_density`` at every joint state), agreement with ``associate`` on GVQ itself, and
the errors a user meets with a program the methods do not fit.
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

from inference import map_states
from inference.association.core import associate
from inference.program.handlers import noiseless, observation_noise
from ppl_models import gvq

ALL_METHODS = ["exact", "bp", "br", "mf", "br+mf", "dbp", "dbr", "gibbs", "tabu"]


@pytest.fixture(scope="module")
def planted():
    return gvq.generate_planted(jax.random.key(11), 24, 5, 8, noise_scale=0.1)


def ising_offset(x, features, offset, couplings):
    """GVQ with an offset on x and an Ising prior on s (a factor coupling the units)."""
    with numpyro.plate("data", x.shape[0]):
        s = numpyro.sample("s", dist.Bernoulli(0.5).expand([features.shape[0]]).to_event(1))
        numpyro.factor("ising", 0.5 * jnp.einsum("ni,ij,nj->n", s, couplings, s))
        numpyro.sample("x", dist.Normal(offset + s @ features, 0.1).to_event(1), obs=x)


def sparse_coding(x, features, logits):
    """Binary sparse coding: a Bernoulli prior of its own per unit."""
    with numpyro.plate("data", x.shape[0]):
        s = numpyro.sample("s", dist.Bernoulli(logits=logits).to_event(1))
        numpyro.sample("x", dist.Normal(s @ features, 0.3).to_event(1), obs=x)


def sigmoid_layer(y, features, bias):
    """Binary data through a sigmoid: not quadratic in s."""
    with numpyro.plate("data", y.shape[0]):
        s = numpyro.sample("s", dist.Bernoulli(0.3).expand([features.shape[0]]).to_event(1))
        numpyro.sample("y", dist.Bernoulli(logits=3.0 * (s @ features) + bias).to_event(1),
                       obs=y)


def nested_plates(x, features):
    """Two sites, one of shape (examples, 2) and one in an inner plate of 2 groups."""
    with numpyro.plate("data", x.shape[0], dim=-2):
        a = numpyro.sample("a", dist.Bernoulli(0.4).expand([1, 2]).to_event(1))
        with numpyro.plate("groups", 2, dim=-1):
            b = numpyro.sample("b", dist.Bernoulli(0.6))  # (examples, 2)
        s = jnp.concatenate([a[:, 0], b], axis=-1)
        numpyro.sample("x", dist.Normal((s @ features)[:, None], 0.2).to_event(1),
                       obs=x[:, None])


def _brute_force(model, args, site_shapes, noise):
    """Each example's lowest energy over every joint state, from numpyro's
    ``log_density`` of one example at a time (vmapped over states and examples)."""
    if noise is None:
        handled, factor = noiseless(model), 1.0
    elif noise == "program":
        handled, factor = model, 1.0
    else:
        handled, factor = observation_noise(model, sigma=noise), 2.0 * noise ** 2
    sizes = [int(np.prod(shape)) for shape in site_shapes.values()]
    joint = jnp.array(list(itertools.product([0.0, 1.0], repeat=sum(sizes))))

    def energy(row, bits):
        values, start = {}, 0
        for (name, shape), size in zip(site_shapes.items(), sizes, strict=True):
            values[name] = bits[start:start + size].reshape(1, *shape)
            start += size
        logp, _ = log_density(handled, (row[None], *args[1:]), {}, values)
        return -factor * logp

    table = jax.jit(jax.vmap(jax.vmap(energy, (None, 0)), (0, None)))(args[0], joint)
    return np.asarray(jnp.min(table, axis=1))


#: The default run checks the exhaustive search and the deterministic sweep "br" (the
#: directed methods are checked against exact in tests/test_directed.py); the slow run
#: every method.
CHEAP_METHODS = ("exact", "br")


@pytest.mark.parametrize("method", [
    m if m in CHEAP_METHODS else pytest.param(m, marks=pytest.mark.slow) for m in ALL_METHODS])
def test_every_method_on_gvq_equals_associate(planted, method):
    x, F = planted.x, planted.features
    key = jax.random.key(4)
    ours = map_states(gvq.model, x, features=F, method=method, rng_key=key)
    theirs = associate(F, x, method=method, rng_key=key)
    np.testing.assert_array_equal(ours.states["s"], theirs.states, err_msg=method)
    np.testing.assert_allclose(ours.energy, theirs.energy, rtol=1e-6, atol=1e-6,
                               err_msg=method)
    np.testing.assert_array_equal(ours.converged, theirs.converged, err_msg=method)


@pytest.mark.slow  # ~5 s; the default run reads GVQ's program and the Ising ones above
def test_one_site_per_unit_is_the_same_program(planted):
    x, F = planted.x, planted.features
    ours = map_states(gvq.model, x, features=F, split_states=True, enumerate_states=False)
    stacked = jnp.stack([ours.states[f"s_{i}"] for i in range(F.shape[0])], axis=1)
    np.testing.assert_array_equal(stacked, associate(F, x).states)


@pytest.mark.parametrize("noise", [
    pytest.param(None, marks=pytest.mark.slow),
    # The default run checks exact against brute force with noise=0.5 in
    # test_a_kept_plan_is_checked_again_at_new_values.
    pytest.param(0.5, marks=pytest.mark.slow),
    "program"])
def test_exact_on_ising_with_offset_is_brute_force(planted, noise):
    x, F = planted.x[:6] + 0.3, planted.features
    J = jax.random.normal(jax.random.key(2), (5, 5))
    J = (J + J.T) / 2 - jnp.diag(jnp.diag(J + J.T) / 2)
    args = (x, F, jnp.full(8, 0.3), J)
    result = map_states(ising_offset, *args, noise=noise)
    np.testing.assert_allclose(result.energy, _brute_force(ising_offset, args, {"s": (5,)},
                                                           noise), rtol=1e-5, atol=1e-4)
    # The prior couples the units: no directed graph, and the error says what applies.
    if noise is not None:
        with pytest.raises(ValueError, match=r"couples no two units.*'exact', 'gibbs'"):
            map_states(ising_offset, *args, noise=noise, method="dbr")


@pytest.mark.parametrize("noise", [
    # The default run checks both methods on this program with noise="program", and the
    # noise handlers None and 0.5 in test_exact_on_ising_with_offset_is_brute_force[None],
    # test_every_method_on_gvq_equals_associate[br] and
    # test_a_kept_plan_is_checked_again_at_new_values.
    pytest.param(None, marks=pytest.mark.slow),
    pytest.param(0.5, marks=pytest.mark.slow),
    "program"])
def test_exact_and_br_on_sparse_coding_are_brute_force(planted, noise):
    x, F = planted.x[:6], planted.features
    args = (x, F, jnp.array([-2.0, -1.0, 0.0, 1.0, -3.0]))
    best = _brute_force(sparse_coding, args, {"s": (5,)}, noise)
    for method in ("exact", "br"):
        result = map_states(sparse_coding, *args, noise=noise, method=method,
                            rng_key=jax.random.key(0))
        np.testing.assert_allclose(result.energy, best, rtol=1e-5, atol=1e-4, err_msg=method)


@pytest.mark.slow  # ~5 s; the default run reads GVQ's program and the Ising ones above
def test_sites_of_any_shape_in_nested_plates():
    F = jax.random.normal(jax.random.key(5), (4, 3))
    s = jax.random.bernoulli(jax.random.key(6), 0.5, (7, 4)).astype(jnp.float32)
    x = s @ F + 0.05 * jax.random.normal(jax.random.key(7), (7, 3))
    result = map_states(nested_plates, x, F, noise="program")
    assert result.states["a"].shape == (7, 1, 2) and result.states["b"].shape == (7, 2)
    best = _brute_force(nested_plates, (x, F), {"a": (1, 2), "b": (2,)}, "program")
    np.testing.assert_allclose(result.energy, best, rtol=1e-5, atol=1e-4)
    found = jnp.concatenate([result.states["a"][:, 0], result.states["b"]], axis=1)
    np.testing.assert_array_equal(found, s)


def test_non_quadratic_program_gets_exact_and_gibbs_and_a_clear_error():
    F = jax.random.normal(jax.random.key(0), (4, 6))
    s = jax.random.bernoulli(jax.random.key(1), 0.4, (12, 4)).astype(jnp.float32)
    y = jax.random.bernoulli(jax.random.key(2), jax.nn.sigmoid(3 * (s @ F))).astype(jnp.float32)
    args = (y, F, 0.0)
    best = _brute_force(sigmoid_layer, args, {"s": (4,)}, "program")
    exact = map_states(sigmoid_layer, *args, noise="program")
    np.testing.assert_allclose(exact.energy, best, rtol=1e-5, atol=1e-4)
    gibbs = map_states(sigmoid_layer, *args, noise="program", method="gibbs",
                       rng_key=jax.random.key(0))
    np.testing.assert_allclose(gibbs.energy, best, rtol=1e-5, atol=1e-4)
    for method in ("bp", "br", "mf", "br+mf", "dbp", "dbr"):
        with pytest.raises(ValueError, match=r"quadratic in the binary sites \[.s.\].*"
                                             r"\['exact', 'gibbs'\]"):
            map_states(sigmoid_layer, *args, noise="program", method=method,
                       rng_key=jax.random.key(0))
    with pytest.raises(ValueError, match="has none; pass noise='program'"):
        map_states(sigmoid_layer, *args)


def _free_mean(x, features):
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", x.shape[0]):
        s = numpyro.sample("s", dist.Bernoulli(0.5).expand([features.shape[0]]).to_event(1))
        numpyro.sample("x", dist.Normal(mu + s @ features, 0.1).to_event(1), obs=x)


def _fixed_plate(x, features):
    with numpyro.plate("data", 50):
        s = numpyro.sample("s", dist.Bernoulli(0.5).expand([features.shape[0]]).to_event(1))
        numpyro.sample("x", dist.Normal(s @ features, 0.1).to_event(1), obs=x)


def _no_binary(x, features):
    numpyro.sample("x", dist.Normal(0.0, 1.0), obs=x)


def _coupled(x, features):
    with numpyro.plate("data", x.shape[0]):
        s = numpyro.sample("s", dist.Bernoulli(0.5).expand([features.shape[0]]).to_event(1))
        numpyro.sample("x", dist.Normal(s @ features, 0.1).to_event(1), obs=x)
    numpyro.sample("total", dist.Normal(jnp.sum(s), 1.0), obs=3.0)


@pytest.mark.parametrize("model, kwargs, match", [
    (_no_binary, {}, "no latent Bernoulli site"),
    (_free_mean, {"sites": "z"}, "no sample site 'z'"),
    (_free_mean, {"sites": "x"}, "site 'x' is not a latent Bernoulli site"),
    (_free_mean, {}, r"latent site 'mu' \(Normal\) is not fixed.*condition"),
    (_fixed_plate, {}, "observed site 'x' has 24 rows along the example plate 'data'"),
    (_coupled, {}, "outside the example plate depends on the binary sites"),
    (gvq.model, {"noise": "limit"}, "noise must be None"),
    (gvq.model, {"noise": -1.0}, "noise must be positive"),
    (gvq.model, {"method": "annealing"}, "method must be one of"),
    (gvq.model, {"method": "gibbs"}, "rng_key"),
])
def test_bad_input_names_the_site_or_argument(planted, model, kwargs, match):
    args = (planted.x, planted.features)
    if model is gvq.model:
        with pytest.raises((ValueError, TypeError), match=match):
            map_states(model, args[0], features=args[1], **kwargs)
        return
    with pytest.raises(ValueError, match=match):
        map_states(model, *args, **kwargs)


def test_a_fixed_site_through_condition(planted):
    x, F = planted.x, planted.features
    fixed = handlers.condition(_free_mean, data={"mu": 0.0})
    np.testing.assert_array_equal(map_states(fixed, x, F).states["s"],
                                  associate(F, x).states)


def counted(x, features, power):
    """GVQ plus a factor -(number of units on)^power: quadratic in s for power 2 only."""
    with numpyro.plate("data", x.shape[0]):
        s = numpyro.sample("s", dist.Bernoulli(0.5).expand([features.shape[0]]).to_event(1))
        numpyro.factor("count", -jnp.sum(s, axis=-1) ** power)
        numpyro.sample("x", dist.Normal(s @ features, 0.1).to_event(1), obs=x)


def test_a_kept_plan_is_checked_again_at_new_values(planted):
    """map_states keeps its plan per program and shapes; a call whose values break it
    (power 2 -> 3: the energy is no longer quadratic) is planned afresh, so the
    quadratic methods refuse it and "exact" searches by brute force."""
    x, F = planted.x[:6], planted.features
    for power in (2.0, 3.0, 2.0):
        best = _brute_force(counted, (x, F, power), {"s": (5,)}, 0.5)
        result = map_states(counted, x, F, power, noise=0.5)
        np.testing.assert_allclose(result.energy, best, rtol=1e-5, atol=1e-4, err_msg=power)
        if power == 2.0:
            map_states(counted, x, F, power, noise=0.5, method="br", rng_key=jax.random.key(0))
        else:
            with pytest.raises(ValueError, match="quadratic in the binary sites"):
                map_states(counted, x, F, power, noise=0.5, method="br",
                           rng_key=jax.random.key(0))
