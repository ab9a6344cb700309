"""fit_em and the categorical map_states on a small program with a categorical and two
binary causes: exact against brute force and NumPyro's own enumeration, monotone
objectives, determinism, and bad input.

One program, one data shape and a few fits shared by module-scoped fixtures, so that
the compiled programs are shared between the tests.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from numpyro.contrib.funsor import config_enumerate
from numpyro.distributions import constraints
from numpyro.infer import TraceEnum_ELBO

from inference import fit_em, fit_map_em, map_states
from inference.association.discrete_sites import discrete_sites, log_joint
from inference.association.discrete_tables import (
    joint_states,
    pairwise_tables,
    pairwise_value,
)
from ppl_models.diagnostics import NumericalWarning
from ppl_models.distributions import OneHotCategorical

NUM, DIM = 10, 2
MU = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
F = np.array([[1.0, 1.0], [-1.0, 2.0]])


def mixed(x):
    """A categorical cause c (3 prototypes) and two binary causes s1, s2 shifting it."""
    weights = numpyro.param("weights", jnp.ones(3) / 3, constraint=constraints.simplex)
    mu = numpyro.param("mu", jnp.asarray(MU) + 0.5)
    shift = numpyro.param("shift", jnp.asarray(F) * 0.8)
    sigma = numpyro.param("sigma", 1.0, constraint=constraints.positive)
    with numpyro.plate("data", x.shape[0]):
        c = numpyro.sample("c", dist.Categorical(weights))
        s1 = numpyro.sample("s1", dist.Bernoulli(0.4))
        s2 = numpyro.sample("s2", dist.Bernoulli(0.7))
        loc = mu[c] + s1[..., None] * shift[0] + s2[..., None] * shift[1]
        numpyro.sample("x", dist.Normal(loc, sigma).to_event(1), obs=x)


def fixed(x, mu, shift):
    """The same structure with fixed parameters, a one-hot site among the causes."""
    with numpyro.plate("data", x.shape[0]):
        c = numpyro.sample("c", dist.Categorical(jnp.array([0.2, 0.3, 0.5])))
        h = numpyro.sample("h", OneHotCategorical(probs=jnp.array([0.6, 0.4])))
        s = numpyro.sample("s", dist.Bernoulli(0.4).expand([2]).to_event(1))
        loc = mu[c] + 0.5 * h @ mu[:2] + s @ shift
        numpyro.sample("x", dist.Normal(loc, 0.5).to_event(1), obs=x)


def data(seed=0):
    key_c, key_s, key_x = jax.random.split(jax.random.key(seed), 3)
    c = jax.random.categorical(key_c, jnp.log(jnp.array([0.3, 0.3, 0.4])), shape=(NUM,))
    s = jax.random.bernoulli(key_s, 0.5, (NUM, 2)).astype(float)
    return np.asarray(MU[c] + s @ F + 0.3 * jax.random.normal(key_x, (NUM, DIM)))


def brute_log_joint(model, args, states_of, names):
    """(J, N): every example's log p(x, z) at every joint state z, from NumPyro's own
    log_prob of every site (the same state for all examples)."""
    rows = []
    for values in states_of:
        fixed_values = {name: jnp.broadcast_to(jnp.asarray(v), shape)
                        for name, (v, shape) in zip(names, values, strict=True)}
        trace = handlers.trace(handlers.substitute(handlers.seed(model, 0),
                                                   data=fixed_values)).get_trace(*args)
        total = 0.0
        for site in trace.values():
            if site["type"] == "sample":
                total = total + site["fn"].log_prob(site["value"])
        rows.append(np.asarray(total))
    return np.stack(rows)


def mixed_states():
    return [((c, (NUM,)), (s1, (NUM,)), (s2, (NUM,)))
            for c, s1, s2 in itertools.product(range(3), (0.0, 1.0), (0.0, 1.0))]


@pytest.fixture(scope="module")
def x():
    return data()


@pytest.fixture(scope="module")
def soft(x):
    return fit_em(mixed, x, rng_key=jax.random.key(1), max_iterations=40, num_restarts=2)


@pytest.fixture(scope="module")
def mean_field(x):
    return fit_em(mixed, x, e_step="mean-field", rng_key=jax.random.key(1), max_iterations=40,
                  num_restarts=2)


# --- map_states on categorical sites ---------------------------------------------------
def test_map_states_exact_equals_brute_force(x):
    mu, shift = jnp.asarray(MU), jnp.asarray(F)
    found = map_states(fixed, x, mu, shift, noise="program")
    joint = [((c, (NUM,)), (np.eye(2)[h], (NUM, 2)), (np.array([s1, s2]), (NUM, 2)))
             for c, h, s1, s2 in itertools.product(range(3), range(2), (0., 1.), (0., 1.))]
    table = brute_log_joint(fixed, (x, mu, shift), joint, ("c", "h", "s"))
    best = np.argmax(table, axis=0)
    np.testing.assert_allclose(found.energy, -table.max(axis=0), rtol=1e-5)
    expected_c = np.array([joint[j][0][0] for j in best])
    np.testing.assert_array_equal(found.states["c"], expected_c)
    np.testing.assert_array_equal(np.argmax(found.states["h"], axis=-1),
                                  [np.argmax(joint[j][1][0]) for j in best])
    np.testing.assert_array_equal(found.states["s"], [joint[j][2][0] for j in best])


def test_map_states_icm_is_never_below_exact(x):
    mu, shift = jnp.asarray(MU), jnp.asarray(F)
    exact = map_states(fixed, x, mu, shift, noise="program")
    icm = map_states(fixed, x, mu, shift, noise="program", method="icm",
                     rng_key=jax.random.key(0))
    assert np.all(np.asarray(icm.energy) >= np.asarray(exact.energy) - 1e-5)
    # Four starts on eight-unit-value problems: the local search finds the optimum here.
    np.testing.assert_allclose(icm.energy, exact.energy, rtol=1e-5)


def test_map_states_binary_methods_name_the_categorical_sites(x):
    with pytest.raises(ValueError, match=r"categorical sites \['c', 'h'\].*'icm'"):
        map_states(fixed, x, jnp.asarray(MU), jnp.asarray(F), method="bp",
                   rng_key=jax.random.key(0))


def test_pairwise_tables_are_exact_on_every_joint_state(x):
    model = handlers.substitute(mixed, data={"mu": jnp.asarray(MU), "shift": jnp.asarray(F)})
    layout = discrete_sites(model, (x,), {})
    evaluate = log_joint(model, (x,), {}, layout, "program")
    tables = pairwise_tables(evaluate, layout)
    for state in joint_states(layout):
        states = jnp.broadcast_to(jnp.asarray(state), (NUM, layout.num_units))
        one_hot = jax.nn.one_hot(states, layout.max_values)
        np.testing.assert_allclose(pairwise_value(tables, one_hot), evaluate(states)[0],
                                   rtol=1e-5, atol=1e-4)


# --- soft EM ---------------------------------------------------------------------------
def test_soft_posteriors_equal_brute_force_enumeration(soft, x):
    model = handlers.substitute(mixed, data=soft.params)
    table = brute_log_joint(model, (x,), mixed_states(), ("c", "s1", "s2"))
    posterior = np.exp(table - jax.scipy.special.logsumexp(table, axis=0))
    states = mixed_states()
    expected_c = np.stack([posterior[[j for j, z in enumerate(states) if z[0][0] == k]]
                           .sum(0) for k in range(3)], axis=1)
    expected_s1 = posterior[[j for j, z in enumerate(states) if z[1][0] == 1.0]].sum(0)
    np.testing.assert_allclose(soft.posteriors["c"], expected_c, atol=1e-5)
    np.testing.assert_allclose(soft.posteriors["s1"], expected_s1, atol=1e-5)


def test_soft_objective_is_numpyros_enumerated_log_likelihood(soft, x):
    model = config_enumerate(handlers.substitute(mixed, data=soft.params))
    loss = TraceEnum_ELBO().loss(jax.random.key(0), {}, model, lambda x: None, x)
    assert soft.objective_name == "log_likelihood" and soft.direction == "max"
    np.testing.assert_allclose(soft.objective, -loss, rtol=1e-5)


def test_soft_log_likelihood_never_decreases(soft):
    trace = np.asarray(soft.trace.objective, float)
    # float32: each value carries rounding of about 1e-6 of its size.
    assert np.all(np.diff(trace) >= -1e-5 * np.abs(trace[1:]))
    assert soft.converged


def test_same_key_same_result(soft, x):
    again = fit_em(mixed, x, rng_key=jax.random.key(1), max_iterations=40, num_restarts=2)
    for name in soft.params:
        np.testing.assert_array_equal(again.params[name], soft.params[name])
    assert again.objective == soft.objective


# --- mean-field, hard, annealed ----------------------------------------------------------
def test_mean_field_free_energy_never_increases(mean_field):
    trace = np.asarray(mean_field.trace.objective, float)
    assert mean_field.objective_name == "free_energy" and mean_field.direction == "min"
    assert np.all(np.diff(trace) <= 1e-5 * np.abs(trace[1:]))


def test_mean_field_bound_is_below_the_log_likelihood(mean_field, x):
    """-F is an evidence lower bound: at the learned parameters it lies below log p(x)."""
    model = config_enumerate(handlers.substitute(mixed, data=mean_field.params))
    log_likelihood = -TraceEnum_ELBO().loss(jax.random.key(0), {}, model, lambda x: None, x)
    assert -mean_field.objective <= log_likelihood + 1e-4 * abs(log_likelihood)
    assert set(mean_field.posteriors) == {"c", "s1", "s2"}
    np.testing.assert_allclose(mean_field.posteriors["c"].sum(-1), 1.0, rtol=1e-5)


def test_hard_energy_never_increases_and_states_are_map(x):
    fit = fit_em(mixed, x, e_step="hard", rng_key=jax.random.key(2), max_iterations=40,
                 num_restarts=2)
    trace = np.asarray(fit.trace.objective, float)
    assert np.all(np.diff(trace) <= 1e-5 * np.abs(trace[1:]) + 1e-6)
    model = handlers.substitute(mixed, data=fit.params)
    best = map_states(model, x, noise="program")
    for name in ("c", "s1", "s2"):
        np.testing.assert_array_equal(fit.states[name], best.states[name])


def test_annealed_schedule_ends_at_one_and_then_never_decreases(x):
    fit = fit_em(mixed, x, e_step="annealed", rng_key=jax.random.key(3), max_iterations=60,
                 num_restarts=1, temperatures=[4.0, 2.0, 1.5])
    temperatures = np.asarray(fit.temperatures)
    np.testing.assert_allclose(temperatures[:4], [4.0, 2.0, 1.5, 1.0])
    trace = np.asarray(fit.trace.objective, float)[3:]
    assert np.all(np.diff(trace) >= -1e-5 * np.abs(trace[1:]))


@pytest.mark.parametrize("e_step", ["soft", "mean-field", "hard"])
def test_init_program_starts_at_the_given_parameters(soft, x, e_step):
    """init="program" with init_params: the first E-step at those values, then EM; from
    the soft fit's optimum every E-step stays there."""
    fit = fit_em(mixed, x, e_step=e_step, rng_key=jax.random.key(5), init="program",
                 init_params=soft.params, num_restarts=1, max_iterations=40)
    np.testing.assert_allclose(fit.params["mu"], soft.params["mu"], atol=0.05)


def test_fit_map_em_takes_categorical_sites_in_the_limit(x):
    """fit_map_em on a categorical program is hard-cut EM; with noise=None, k-means."""
    def kmeans(x):
        means = numpyro.param("means", jnp.asarray(MU) + 0.3)
        with numpyro.plate("data", x.shape[0]):
            c = numpyro.sample("c", dist.Categorical(jnp.ones(3) / 3))
            numpyro.sample("x", dist.Normal(means[c], 1.0).to_event(1), obs=x)

    fit = fit_map_em(kmeans, x, rng_key=jax.random.key(0))
    labels = np.asarray(fit.states["c"])
    for k in np.unique(labels):  # Lloyd's fixed point: each mean the average of its points
        np.testing.assert_allclose(fit.params["means"][k], x[labels == k].mean(0), rtol=1e-5,
                                   atol=1e-5)
    distances = ((x[:, None] - np.asarray(fit.params["means"])[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(labels, distances.argmin(1))


# --- bad input ---------------------------------------------------------------------------
def test_a_free_continuous_latent_is_named(x):
    def program(x):
        scale = numpyro.sample("scale", dist.HalfNormal(1.0))
        mu = numpyro.param("mu", jnp.zeros((2, DIM)))
        with numpyro.plate("data", x.shape[0]):
            c = numpyro.sample("c", dist.Categorical(jnp.ones(2) / 2))
            numpyro.sample("x", dist.Normal(mu[c], scale).to_event(1), obs=x)

    with pytest.raises(ValueError, match=r"latent site 'scale' \(HalfNormal\) is left free"):
        fit_em(program, x, rng_key=jax.random.key(0))


def test_an_enumeration_too_large_says_how_large_and_what_to_use(x):
    def program(x):
        mu = numpyro.param("mu", jnp.zeros((20, DIM)))
        with numpyro.plate("data", x.shape[0]):
            s = numpyro.sample("s", dist.Bernoulli(0.5).expand([20]).to_event(1))
            numpyro.sample("x", dist.Normal(s @ mu, 1.0).to_event(1), obs=x)

    with pytest.raises(ValueError, match=r"1\.049e\+06 here \(s: 20 unit\(s\) of 2 values\)"
                                         r".*e_step='mean-field'"):
        fit_em(program, x, rng_key=jax.random.key(0))


def test_a_site_outside_the_plate_that_depends_on_the_states_is_named(x):
    def program(x):
        mu = numpyro.param("mu", jnp.zeros((2, DIM)))
        with numpyro.plate("data", x.shape[0]):
            c = numpyro.sample("c", dist.Categorical(jnp.ones(2) / 2))
            numpyro.sample("x", dist.Normal(mu[c], 1.0).to_event(1), obs=x)
        numpyro.sample("count", dist.Normal(jnp.sum(c), 1.0), obs=3.0)

    with pytest.raises(ValueError, match=r"sites \['count'\] lie outside the example plate"):
        fit_em(program, x, rng_key=jax.random.key(0))


def test_a_non_finite_objective_warns_naming_the_site(x):
    def program(x):
        mu = numpyro.param("mu", jnp.zeros((2, DIM)))
        with numpyro.plate("data", x.shape[0]):
            c = numpyro.sample("c", dist.Categorical(jnp.ones(2) / 2))
            numpyro.sample("x", dist.Normal(mu[c], 1.0).to_event(1), obs=x)
            numpyro.factor("penalty", jnp.log(mu[c, 0] - 100.0))  # log of a negative

    with pytest.warns(NumericalWarning, match=r"non-finite log-density at sites \['penalty'\]"):
        fit = fit_em(program, x, rng_key=jax.random.key(0), max_iterations=3, num_restarts=1)
    assert fit.numerical_issue and not fit.converged


@pytest.mark.parametrize(("options", "message"), [
    ({"e_step": "full"}, "e_step must be one of"),
    ({"noise": None}, "noise=None is the sigma -> 0 limit"),
    ({"rng_key": None}, "pass rng_key"),
    ({"init": "kmeans"}, "init must be one of"),
    ({"temperatures": [0.5]}, "temperatures must be"),
    ({"num_restarts": 0}, "num_restarts"),
    ({"init_params": {"nope": 1.0}}, r"init_params: the program has no numpyro.param site"),
])
def test_bad_arguments_are_named(x, options, message):
    call = {"rng_key": jax.random.key(0), **options}
    if "temperatures" in options:
        call["e_step"] = "annealed"
    with pytest.raises((ValueError, TypeError), match=message):
        fit_em(mixed, x, **call)


def test_a_program_without_parameters_is_refused(x):
    def program(x):
        with numpyro.plate("data", x.shape[0]):
            c = numpyro.sample("c", dist.Categorical(jnp.ones(2) / 2))
            numpyro.sample("x", dist.Normal(jnp.asarray(MU[:2])[c], 1.0).to_event(1), obs=x)

    with pytest.raises(ValueError, match="no numpyro.param site"):
        fit_em(program, x, rng_key=jax.random.key(0))
