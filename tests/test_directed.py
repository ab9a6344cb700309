"""Directed-graph association (seed 000 sec. 4.2, App. D-E): DBR and annealed DBP."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inference import associate
from inference.association.core import METHODS, association_problem
from inference.association.directed import (
    dbr_init,
    dbr_step,
    parent_lists,
    run_dbr,
)
from inference.association.directed_bp import dbp_init, dbp_step, run_dbp
from ppl_models import gvq


def directed_tree(key, num_visible):
    """F of a directed tree: visible a has parents a + 1 and one of 0..a (acyclic, <= 2 each).

    Weights N(2, 1) as in sec. 4.3.1; n = num_visible + 1 hidden units.
    """
    key_parent, key_weights = jax.random.split(key)
    other = np.asarray(jax.random.randint(key_parent, (num_visible,), 0, 1 << 30))
    other = other % (np.arange(num_visible) + 1)  # uniform in 0..a
    weights = np.asarray(2.0 + jax.random.normal(key_weights, (2, num_visible)))
    F = np.zeros((num_visible + 1, num_visible), np.float32)
    columns = np.arange(num_visible)
    F[columns + 1, columns] = weights[0]
    F[other, columns] = weights[1]
    return jnp.asarray(F)


def all_states(n):
    return jnp.asarray(list(itertools.product((0, 1), repeat=n)), jnp.float32)


def assert_energy_is_residual(result, F, x):
    residual = jnp.sum(jnp.square(x - result.states @ F), axis=1)
    np.testing.assert_allclose(result.energy, residual, rtol=1e-5, atol=1e-5)
    assert result.states.dtype == jnp.int32
    assert set(np.unique(np.asarray(result.states))) <= {0, 1}


def test_registered_deterministic_and_jittable():
    for name in ("dbr", "dbp"):
        assert name in METHODS and not METHODS[name].randomized
    F = directed_tree(jax.random.key(0), 4)
    x = jax.random.normal(jax.random.key(1), (6, 4)) + 1.0

    @jax.jit
    def run(F, x):  # F traced: K must come from max_parents
        problem = association_problem(gvq.model, x, {"features": F})
        return run_dbr(problem, max_parents=2, max_iterations=7)

    result = run(F, x)
    assert result.trace.shape == (7,)
    assert result.converged.shape == (6,) and result.converged.dtype == bool
    assert_energy_is_residual(result, F, x)


def test_parent_lists_pad_and_mask():
    F = jnp.asarray([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0], [4.0, 0.0, 0.0]])
    parents, mask = parent_lists(F, 2)
    np.testing.assert_array_equal(mask, [[True, True], [False, False], [True, True]])
    np.testing.assert_array_equal(parents[0], [0, 2])
    np.testing.assert_array_equal(parents[2], [0, 1])


@pytest.fixture(scope="module")
def zero_noise():
    """50 trials of sec. 4.3.1 at eps = 0: n = 12, d = 4, two parents per visible unit."""
    key_f, key_s = jax.random.split(jax.random.key(0))
    states = jax.random.bernoulli(key_s, 0.5, (50, 4, 12)).astype(jnp.float32)
    trials = []
    for t, key in enumerate(jax.random.split(key_f, 50)):
        F = gvq.planted_features(key, 12, 4, num_parents=2)
        trials.append((F, states[t] @ F))
    return trials


@pytest.mark.slow
def test_dbr_is_exact_at_zero_noise_for_sparse_features(zero_noise):
    # Paper sec. 4.3.1: "for eps = 0 DBR does not make errors anymore". Measured: 200 of 200
    # examples (50 trials x 4) reach energy 0; also 100/100 for k = 1..8 parents of 12.
    hits, agree = 0, 0
    for F, x in zero_noise:
        result = associate(F, x, method="dbr", check=False)
        exact = associate(F, x, method="exact", check=False)
        assert_energy_is_residual(result, F, x)
        hits += int(jnp.sum(result.energy < 1e-6))
        agree += int(jnp.sum(result.energy <= exact.energy + 1e-6))
        assert bool(jnp.all(exact.energy < 1e-6))
    assert hits >= 196 and agree == hits  # >= 98 %


@pytest.mark.slow
def test_dbr_equals_exact_on_directed_trees():
    F = directed_tree(jax.random.key(1), 6)
    data = jax.random.bernoulli(jax.random.key(10), 0.5, (80, 7)) @ F
    x = data + 0.7 * jax.random.normal(jax.random.key(20), data.shape)
    result = associate(F, x, method="dbr")
    exact = associate(F, x, method="exact", check=False)
    assert_energy_is_residual(result, F, x)
    np.testing.assert_allclose(result.energy, exact.energy, rtol=1e-5, atol=1e-5)
    assert bool(result.converged.all())
    # With a prior at finite noise the target gains c_j s_j: still exact on a tree. The
    # energies returned are then -2 noise^2 log p(x, s), the prior included.
    kwargs = {"model_kwargs": {"prior_probs": 0.2}, "noise": 0.8}
    result = associate(F, x, method="dbr", max_parents=2, check=False, **kwargs)
    exact = associate(F, x, check=False, **kwargs)
    np.testing.assert_allclose(result.energy, exact.energy, rtol=1e-5, atol=1e-4)
    assert bool(result.converged.all())


def test_dbr_beliefs_are_min_marginals_on_a_tree():
    F = directed_tree(jax.random.key(3), 4)
    x = jax.random.normal(jax.random.key(4), (5, 4)) + 2.0
    problem = association_problem(gvq.model, x, {"features": F})
    assert dbr_init(problem).messages.shape == (5, 4, 2)  # K = 2 read from the concrete F

    @jax.jit
    def settle(F, x):
        problem = association_problem(gvq.model, x, {"features": F})
        state = dbr_init(problem, max_parents=2)
        return jax.lax.fori_loop(0, 8, lambda _, s: dbr_step(s, problem)[0], state)

    state = settle(F, x)  # 8 >= the diameter of the tree
    assert bool(state.converged.all())
    states = all_states(5)
    energies = jax.vmap(lambda s: jnp.sum(jnp.square(x - s @ F), axis=1))(states)  # (32, N)
    on = states.T[:, :, None] == 1  # (n, 32, 1)
    lowest_on = jnp.min(jnp.where(on, energies[None], jnp.inf), axis=1)
    lowest_off = jnp.min(jnp.where(on, jnp.inf, energies[None]), axis=1)
    np.testing.assert_allclose(state.beliefs, (lowest_on - lowest_off).T, rtol=1e-4, atol=1e-3)


def test_dbp_marginals_on_a_tree_at_fixed_sigma():
    # Sum-product is exact on a tree: with sigma held at 1 the beliefs are p(s_j | x),
    # prior included. Checks the integral transform's signs and the quadrature.
    F = directed_tree(jax.random.key(5), 4)
    x = jax.random.normal(jax.random.key(6), (5, 4)) + 2.0

    @jax.jit
    def settle(F, x):
        problem = association_problem(gvq.model, x, {"features": F, "prior_probs": 0.3})

        def body(_, carry):
            state, clamped = carry
            state, info = dbp_step(state._replace(sigma=jnp.float32(1.0)), problem)
            return state, clamped + info.clamped

        state = dbp_init(problem, start_sigma=1.0)
        return jax.lax.fori_loop(0, 10, body, (state, jnp.zeros(x.shape[0], jnp.int32)))

    state, clamped = settle(F, x)
    assert int(jnp.sum(clamped)) == 0 and bool(state.converged.all())
    states = all_states(5)
    log_joint = jax.vmap(lambda s: -0.5 * jnp.sum(jnp.square(x - s @ F), axis=1)
                         + jnp.sum(s * np.log(0.3) + (1 - s) * np.log(0.7)))(states)
    posterior = jax.nn.softmax(log_joint, axis=0)  # (32, N)
    marginals = (states.T @ posterior).T
    np.testing.assert_allclose(jax.nn.sigmoid(state.beliefs), marginals, atol=2e-4)


@pytest.mark.slow
def test_dbp_at_small_sigma_approaches_exact():
    # Sparse sec. 4.3.1 problems, n = 12, d = 4, k = 2, noise variance 0.1; 10 F x 20
    # examples. Measured: the lowest energy visited equals the exact one for 97.5 % with
    # Q = 64 nodes (96.5-98.5 % over five seeds) and 90.5 % with Q = 16 (87.5-94.5 %), whose
    # messages are clamped from sigma = 0.5 on. It is found by sigma ~ 0.25; the later
    # iterations, at sigma down to 5e-4, run on clamped messages.
    agree, coarse = [], []
    for t in range(10):
        data = gvq.generate_planted(jax.random.fold_in(jax.random.key(0), t), 20, 12, 4,
                                    num_parents=2)
        F, x = data.features, data.x
        exact = associate(F, x, check=False)
        result = associate(F, x, method="dbp", num_nodes=64, integral="quadrature",
                           check=False)
        assert_energy_is_residual(result, F, x)
        assert result.trace.shape == (12,)
        # Below sigma ~ 0.25 Q = 64 nodes no longer hold (module docstring): the last
        # iterations have clamped messages and no example reports convergence.
        assert not bool(result.converged.any())
        agree.append(jnp.mean(result.energy <= exact.energy + 1e-4))
        result = associate(F, x, method="dbp", num_nodes=16, integral="quadrature",
                           check=False)
        coarse.append(jnp.mean(result.energy <= exact.energy + 1e-4))
    assert float(np.mean(agree)) >= 0.95
    assert float(np.mean(coarse)) < float(np.mean(agree)) - 0.03


def test_dbr_needs_sparse_features_or_max_parents():
    dense = gvq.planted_features(jax.random.key(8), 13, 3)
    x = jnp.ones((2, 3))
    with pytest.raises(ValueError, match="max_states"):
        associate(dense, x, method="dbr")
    sparse = gvq.planted_features(jax.random.key(9), 14, 5, num_parents=2)
    x = jnp.ones((3, 5))
    with pytest.raises(ValueError, match="max_parents=2"):  # 2^14 slots without max_parents
        associate(sparse, x, method="dbr")
    with pytest.raises(ValueError, match="max_parents"):
        associate(sparse, x, method="dbr", max_parents=1)
    x = jax.random.bernoulli(jax.random.key(10), 0.5, (3, 14)) @ sparse  # zero noise
    result = associate(sparse, x, method="dbr", max_parents=2, check=False)
    assert bool(jnp.all(result.energy < 1e-6))  # 2^2 parent states per visible unit suffice


@pytest.mark.parametrize("method, options, error, name", [
    ("dbp", {"num_nodes": -1}, ValueError, "num_nodes"),
    ("dbp", {"num_nodes": 2.5}, TypeError, "num_nodes"),
    ("dbp", {"num_iterations": 0}, ValueError, "num_iterations"),
    ("dbp", {"start_sigma": -1.0}, ValueError, "start_sigma"),
    ("dbp", {"start_sigma": "1"}, TypeError, "start_sigma"),
    ("dbp", {"tol": 0.0}, ValueError, "tol"),
    ("dbp", {"schedule": "random"}, ValueError, "schedule"),
    ("dbp", {"integral": "laplace"}, ValueError, "integral"),
    ("dbp", {"alpha": 0.5}, ValueError, "alpha"),
    ("dbp", {"max_parents": 1}, ValueError, "max_parents"),
    ("dbp", {"integral": "exact", "max_states": 2}, ValueError, "max_states"),
    ("dbr", {"max_iterations": 0}, ValueError, "max_iterations"),
    ("dbr", {"max_iterations": 3.0}, TypeError, "max_iterations"),
    ("dbr", {"tol": "small"}, TypeError, "tol"),
    ("dbr", {"max_states": 0}, ValueError, "max_states"),
    ("dbr", {"max_parents": True}, TypeError, "max_parents"),
    ("dbr", {"max_parents": 9}, ValueError, "max_parents"),
    ("dbr", {"num_nodes": 16}, TypeError, "num_nodes"),
])
def test_bad_options_name_the_option(method, options, error, name):
    F = directed_tree(jax.random.key(0), 4)
    with pytest.raises(error, match=name):
        associate(F, jnp.ones((2, 4)), method=method, **options)


# ------------------------------------------------------------------- DBP against a reference


def reference_sum_product(F, x, sigma, num_sweeps, schedule, prior=None):
    """Loopy sum-product on the directed graph s -> x, written for these tests only.

    float64 numpy; every lambda message (eq. 31) by brute-force marginalisation of its
    factor p(x_a | parents) over all 2^n states of the hidden units (units that are not
    parents of a get weight 1 in both values, so they cancel), in the log domain. rho
    starts at the prior. ``"parallel"``: every lambda from the same rho, then every rho;
    ``"sequential"``: visible units in order, each one's rho messages refreshed after
    its lambdas. Returns the rho log-odds (N, n, d) after ``num_sweeps`` sweeps.
    """
    F, x = np.asarray(F, np.float64), np.asarray(x, np.float64)
    n, d = F.shape
    prior = np.zeros((x.shape[0], n)) if prior is None else np.asarray(prior, np.float64)
    states = np.asarray(list(itertools.product((0, 1), repeat=n)), np.float64)  # (2^n, n)
    edges = F != 0
    ratio = np.zeros((x.shape[0], n, d))

    def lambdas(rho, a):  # rho (N, n) log-odds of rho_{j->a}; returns log-ratios (N, n)
        log_rho = (states[None] * -np.logaddexp(0, -rho[:, None])
                   + (1 - states[None]) * -np.logaddexp(0, rho[:, None]))  # (N, 2^n, n)
        log_rho = np.where(edges[:, a], log_rho, 0.0)
        residual = x[:, a, None] - states @ F[:, a]  # (N, 2^n)
        total = -residual**2 / (2 * sigma**2) + log_rho.sum(axis=2)
        out = np.zeros_like(rho)
        for j in np.flatnonzero(edges[:, a]):
            others = total - log_rho[:, :, j]
            on = states[:, j] == 1
            out[:, j] = (np.logaddexp.reduce(others[:, on], axis=1)
                         - np.logaddexp.reduce(others[:, ~on], axis=1))
        return out

    for _ in range(num_sweeps):
        if schedule == "parallel":
            messages = prior[:, :, None] + ratio.sum(axis=2, keepdims=True) - ratio
            ratio = np.stack([lambdas(messages[:, :, a], a) for a in range(d)], axis=2)
        else:
            for a in range(d):
                rho = prior + ratio.sum(axis=2) - ratio[:, :, a]
                ratio[:, :, a] = lambdas(rho, a)
    return prior[:, :, None] + ratio.sum(axis=2, keepdims=True) - ratio


@pytest.mark.parametrize("schedule", ["sequential", "parallel"])
@pytest.mark.parametrize("integral", ["quadrature", "exact"])
def test_dbp_messages_equal_reference_sum_product(schedule, integral):
    # n = 7 hidden, d = 5 visible, loopy (dense) graph, at a fixed sigma (alpha = 1) where
    # the 64-node quadrature resolves every lambda: the rho messages after 6 sweeps equal
    # the brute-force reference's to 1e-5 (as probabilities).
    F = 0.5 * gvq.planted_features(jax.random.key(11), 7, 5, feature_mean=1.0)
    x = jax.random.bernoulli(jax.random.key(12), 0.5, (6, 7)) @ F
    x = x + 0.3 * jax.random.normal(jax.random.key(13), x.shape)
    problem = association_problem(gvq.model, x, {"features": F})
    state = dbp_init(problem, start_sigma=1.0)
    for _ in range(6):
        state, info = dbp_step(state, problem, schedule=schedule, integral=integral, alpha=1.0)
        assert int(jnp.sum(info.clamped)) == 0
    reference = reference_sum_product(F, x, 1.0, 6, schedule)
    edges = np.asarray(F != 0)[None]
    ours, theirs = jax.nn.sigmoid(state.messages), 1 / (1 + np.exp(-reference))
    np.testing.assert_allclose(np.where(edges, ours, 0), np.where(edges, theirs, 0), atol=1e-5)
    # Loopy: the two schedules reach different messages after the same sweeps.
    other = "parallel" if schedule == "sequential" else "sequential"
    assert np.max(np.abs(reference - reference_sum_product(F, x, 1.0, 6, other))) > 1e-3


def test_dbp_and_dbr_are_exact_when_each_visible_unit_has_one_parent():
    # A forest: every visible unit has one parent (hidden unit 4 has none, unit 0 three
    # children). Sum-product and max-product are exact on it; annealed DBP ends at the
    # minimum energy of every example with both integrals, and so does DBR.
    F = np.zeros((5, 7), np.float32)
    parent = [0, 0, 1, 2, 0, 3, 1]
    F[parent, np.arange(7)] = 2.0 + np.asarray(jax.random.normal(jax.random.key(14), (7,)))
    F = jnp.asarray(F)
    data = jax.random.bernoulli(jax.random.key(15), 0.5, (40, 5)) @ F
    x = data + 0.8 * jax.random.normal(jax.random.key(16), data.shape)
    exact = associate(F, x, check=False)
    for options in ({"method": "dbp"}, {"method": "dbp", "integral": "quadrature"},
                    {"method": "dbp", "schedule": "parallel"}, {"method": "dbr"}):
        result = associate(F, x, **options)
        np.testing.assert_allclose(result.energy, exact.energy, rtol=1e-5, atol=1e-5,
                                   err_msg=str(options))
    assert bool(associate(F, x, method="dbp").converged.all())


def fig5_trials(gamma, num_trials, key):
    """Fig. 5's problems: n = 10, d = 4, fully connected, F ~ N(gamma, 1), noise variance 0.1."""
    data = jax.vmap(lambda k: gvq.generate_planted(
        k, 1, 10, 4, num_parents=None, feature_mean=gamma, noise_scale=float(np.sqrt(0.1))))(
        jax.random.split(key, num_trials))
    return data.features, data.x


def test_sequential_dbp_beats_mean_field_on_similar_features():
    # Fig. 5 at gamma = 6: the paper's claim that DBP beats MF for gamma > 4.5. Measured
    # on 60 trials: the paper's error mean |x - s F| is 0.24 for DBP (exact 0.23) and
    # 1.09 for MF; with the parallel schedule DBP oscillates and ends at 7.5.
    F, x = fig5_trials(6.0, 30, jax.random.key(17))

    def error(method, **options):
        def one(F, x, key):
            problem = association_problem(gvq.model, x, {"features": F})
            if method == "dbp":
                return run_dbp(problem, **options).states
            return associate(F, x, method=method, rng_key=key, check=False).states

        states = jax.jit(jax.vmap(one))(F, x, jax.random.split(jax.random.key(18), 30))
        return np.mean(np.abs(np.asarray(x) - np.asarray(states @ F)), axis=(1, 2))

    dbp, mf = error("dbp"), error("mf")
    difference = mf - dbp
    se = np.std(difference) / np.sqrt(len(difference))
    assert np.mean(difference) > 3 * se, (np.mean(dbp), np.mean(mf), se)
    assert np.mean(error("dbp", schedule="parallel")) > np.mean(dbp) + 1.0
