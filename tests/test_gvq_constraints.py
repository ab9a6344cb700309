"""GVQ constraints (seed 000 sec. 5): feature sets, sparsity, binary data.

Exact checks against brute-force enumeration in NumPy and against scikit-learn's
k-means; the energies are checked against the closed forms of the paper.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from inference import associate
from inference.gvq.baselines import map_associate
from inference.gvq.constraints import (
    associate_sets,
    binary_m_step,
    program_energy,
    search_program,
)
from inference.gvq.em import fit_gvq
from inference.program.energy import quadratic_energy
from inference.program.optimize import lbfgs_minimize
from ppl_models import gvq


def _all_states(n):
    return np.array(list(itertools.product([0, 1], repeat=n)), dtype=np.float32)


def _brute_force_sets(features, x, num_sets, sparsity=0.0):
    """min over (set g, units s) of ||x - o_g - s F_g||^2 + lambda s.s, in NumPy."""
    F = np.asarray(features, np.float64).reshape(num_sets, -1, features.shape[1])
    units = _all_states(F.shape[1] - 1).astype(np.float64)
    x = np.asarray(x, np.float64)
    energies = np.stack([
        np.sum((x[:, None, :] - F[g, -1] - (units @ F[g, :-1])[None]) ** 2, axis=-1)
        + sparsity * units.sum(1)[None]
        for g in range(num_sets)])  # (G, N, 2^(m-1))
    flat = energies.transpose(1, 0, 2).reshape(x.shape[0], -1)
    best = flat.argmin(axis=1)
    return flat.min(axis=1), best // units.shape[0], units[best % units.shape[0]]


@pytest.fixture(scope="module")
def blobs():
    x, labels = make_blobs(400, n_features=3, centers=6, cluster_std=0.8, random_state=0)
    return x.astype(np.float32), labels


def test_one_feature_per_set_is_kmeans(blobs):
    x, _ = blobs
    start = x[np.random.default_rng(0).choice(len(x), 6, replace=False)]
    km = KMeans(6, init=start, n_init=1, algorithm="lloyd", tol=0.0, max_iter=300).fit(x)
    result = fit_gvq(x, 6, num_sets=6, init_features=start, num_restarts=1,
                     rng_key=jax.random.key(0))
    assert bool(result.converged)
    # Same centres in the same order (the same start), same labels, same inertia.
    np.testing.assert_allclose(np.asarray(result.features), km.cluster_centers_, atol=1e-4)
    np.testing.assert_array_equal(np.asarray(result.sets), km.labels_)
    assert float(result.error) == pytest.approx(km.inertia_ / len(x), rel=1e-5)
    # The states are the one-hot codes of the labels.
    np.testing.assert_array_equal(np.asarray(result.states), np.eye(6, dtype=int)[km.labels_])


@pytest.mark.parametrize("sparsity", [None, 0.7])
def test_set_association_is_the_brute_force_minimum(sparsity):
    key = jax.random.split(jax.random.key(3), 2)
    features = jax.random.normal(key[0], (12, 5))  # 3 sets of 3 units + an origin
    x = 1.5 * jax.random.normal(key[1], (60, 5))
    kwargs = None if sparsity is None else {"sparsity": sparsity}
    states, sets, energy = associate_sets(features, x, 3, model_kwargs=kwargs)
    want_energy, want_sets, want_units = _brute_force_sets(features, x, 3, sparsity or 0.0)
    np.testing.assert_allclose(np.asarray(energy), want_energy, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(np.asarray(sets), want_sets)
    got_sets, got_units = gvq.set_units(states, 3)
    np.testing.assert_array_equal(np.asarray(got_units), want_units)
    np.testing.assert_array_equal(np.asarray(got_sets), want_sets)
    # Every other set's block is zero, the chosen origin is on.
    blocks = np.asarray(states).reshape(60, 3, 4)
    assert np.all(blocks[np.arange(60), want_sets, -1] == 1)
    assert np.all(blocks.sum(axis=(1, 2)) == blocks[np.arange(60), want_sets].sum(axis=1))


@pytest.mark.slow
def test_set_energy_of_the_program_is_the_papers():
    key = jax.random.split(jax.random.key(4), 4)
    features = jax.random.normal(key[0], (8, 4))
    x = jax.random.normal(key[1], (10, 4))
    sets = jax.random.randint(key[2], (10,), 0, 2)
    units = jax.random.bernoulli(key[3], 0.5, (10, 3)).astype(jnp.float32)
    kwargs = {"features": features, "num_sets": 2, "sparsity": 0.3}
    energy = program_energy(gvq.model, x, kwargs, {"s": units, "set": sets})
    full = gvq.full_states(sets, units, 2).astype(jnp.float32)
    want = jnp.sum((x - full @ features) ** 2, axis=1) + 0.3 * jnp.sum(units, axis=1)
    np.testing.assert_allclose(np.asarray(energy), np.asarray(want), rtol=1e-5)


@pytest.mark.slow
def test_sets_with_an_iterative_method_never_beat_the_optimum():
    key = jax.random.split(jax.random.key(5), 2)
    features = jax.random.normal(key[0], (2 * 9, 6))
    x = 2.0 * jax.random.normal(key[1], (100, 6))
    _, _, exact = associate_sets(features, x, 2)
    for method in ("br+mf", "mf"):
        _, _, energy = associate_sets(features, x, 2, method, rng_key=jax.random.key(0))
        assert np.all(np.asarray(energy) >= np.asarray(exact) - 1e-3), method
        # Well within the optimum on average (the within-set problems are 8 units).
        assert float(jnp.mean(energy)) <= 1.05 * float(jnp.mean(exact)), method


@pytest.mark.slow
def test_sparsity_enters_the_energy_and_numpyros_map():
    data = gvq.generate_planted(jax.random.key(6), 40, 5, 8, noise_scale=0.3, feature_mean=0.0)
    plain = quadratic_energy(gvq.model, data.x, model_kwargs={"features": data.features})
    sparse = quadratic_energy(gvq.model, data.x,
                              model_kwargs={"features": data.features, "sparsity": 2.5})
    np.testing.assert_allclose(np.asarray(sparse.linear - plain.linear), 2.5, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(sparse.couplings), np.asarray(plain.couplings),
                               atol=1e-4)
    # At finite noise the penalty is in the program NumPyro's infer_discrete decodes.
    ours = associate(data.features, data.x, noise=0.3, model_kwargs={"sparsity": 2.5})
    theirs = map_associate(data.features, data.x, noise=0.3, model_kwargs={"sparsity": 2.5})
    np.testing.assert_array_equal(np.asarray(ours.states), np.asarray(theirs.states))
    assert not np.array_equal(np.asarray(ours.states),
                              np.asarray(associate(data.features, data.x).states))


@pytest.mark.slow
def test_sparsity_switches_units_off_in_proportion_to_lambda():
    data = gvq.generate_planted(jax.random.key(7), 200, 6, 12, noise_scale=0.3, feature_mean=0.0)
    counts = []
    for lam in (0.0, 1.0, 4.0, 1e4):
        result = associate(data.features, data.x, model_kwargs={"sparsity": lam})
        counts.append(float(jnp.mean(jnp.sum(result.states, axis=1))))
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[2]
    assert counts[-1] == 0.0  # a penalty above every possible gain leaves nothing on


def _eq10(x, f_hat, states, beta):
    recon = 1.0 / (1.0 + np.exp(-beta * (states @ (1.0 / (1.0 + np.exp(-f_hat))) - 0.5)))
    return np.sum((x - recon) ** 2, axis=1)


@pytest.mark.parametrize("num_sets", [None, 2])
def test_binary_search_is_the_brute_force_minimum_of_eq10(num_sets):
    key = jax.random.split(jax.random.key(8), 2)
    f_hat = 2.0 * jax.random.normal(key[0], (8, 10))
    x = jax.random.bernoulli(key[1], 0.4, (30, 10)).astype(jnp.float32)
    kwargs = {"features": f_hat, "binary": True, "beta": 4.5}
    if num_sets is None:
        states, energy = search_program(gvq.model, x, kwargs, num_units=8)
        candidates = _all_states(8)
    else:
        states, _, energy = associate_sets(f_hat, x, num_sets,
                                           model_kwargs={"binary": True, "beta": 4.5})
        units = _all_states(3)
        candidates = np.concatenate([
            np.asarray(gvq.full_states(jnp.full(len(units), g), units, num_sets))
            for g in range(num_sets)]).astype(np.float32)
    table = np.stack([_eq10(np.asarray(x), np.asarray(f_hat, np.float64), c, 4.5)
                      for c in candidates], axis=1)
    np.testing.assert_allclose(np.asarray(energy), table.min(axis=1), rtol=1e-4, atol=1e-5)
    got = _eq10(np.asarray(x), np.asarray(f_hat, np.float64), np.asarray(states, np.float64),
                4.5)
    np.testing.assert_allclose(got, table.min(axis=1), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_binary_m_step_lowers_the_programs_energy():
    key = jax.random.split(jax.random.key(9), 3)
    f_hat = jax.random.normal(key[0], (6, 12))
    x = jax.random.bernoulli(key[1], 0.4, (50, 12)).astype(jnp.float32)
    states = jax.random.bernoulli(key[2], 0.5, (50, 6)).astype(jnp.int32)
    kwargs = {"features": f_hat, "binary": True, "beta": 4.5}
    before = _eq10(np.asarray(x), np.asarray(f_hat), np.asarray(states), 4.5).mean()
    total = program_energy(gvq.model, x, kwargs, {"s": states.astype(jnp.float32)},
                           per_example=False)
    assert float(total) / 50 == pytest.approx(before, rel=1e-5)  # the objective is eq. 10
    new, _ = binary_m_step(gvq.model, x, states, kwargs)
    after = _eq10(np.asarray(x), np.asarray(new), np.asarray(states), 4.5).mean()
    assert after < 0.8 * before


def test_lbfgs_minimize_solves_a_quadratic_and_never_returns_a_worse_point():
    # An ill-conditioned convex quadratic with a known minimiser.
    rng = np.random.default_rng(3)
    q, _ = np.linalg.qr(rng.normal(size=(30, 30)))
    a = jnp.asarray(q @ np.diag(np.logspace(0, 3, 30)) @ q.T, jnp.float32)
    target = jnp.asarray(rng.normal(size=30), jnp.float32)

    def fun(v):
        d = v - target
        return 0.5 * d @ a @ d

    x, value, converged = jax.jit(lambda v: lbfgs_minimize(fun, v, max_iterations=200))(
        jnp.zeros(30))
    assert bool(converged)
    # Converged means |grad| <= 1e-5 |grad at the start|; the smallest curvature is
    # 1, so the distance to the minimiser is at most that gradient norm.
    bound = 1e-5 * float(jnp.linalg.norm(a @ target))
    assert float(jnp.linalg.norm(x - target)) <= bound
    assert float(value) == pytest.approx(float(fun(x)), abs=1e-6)
    # A function that is NaN away from the start: the start is kept, not reported converged.
    def nan_elsewhere(v):
        return jnp.where(jnp.all(v == 1.0), jnp.sum(v), jnp.nan)

    x, value, converged = lbfgs_minimize(nan_elsewhere, jnp.ones(4), max_iterations=5)
    np.testing.assert_array_equal(np.asarray(x), np.ones(4))
    assert float(value) == 4.0 and not bool(converged)


@pytest.mark.slow
def test_binary_em_on_planted_binary_data():
    # Two sets of (2 units + origin) with binary features; data = their squashed
    # combinations thresholded at 1/2, so an exact fit has error ~ 0.
    rng = np.random.default_rng(0)
    F = (rng.random((6, 16)) < 0.3).astype(np.float32)
    sets = rng.integers(0, 2, 240)
    units = rng.integers(0, 2, (240, 2))
    states = np.asarray(gvq.full_states(jnp.asarray(sets), jnp.asarray(units), 2))
    x = ((states @ F) >= 0.5).astype(np.float32)
    # Binary GVQ has many local minima (measured: 2 of 8 restarts reach an error
    # below 0.5 here, the planted features give 0.145): 8 restarts.
    result = fit_gvq(x, 6, num_sets=2, binary=True, beta=4.5, num_restarts=8,
                     max_iterations=60, rng_key=jax.random.key(1))
    trace = np.asarray(result.trace.objective)
    assert np.all(np.diff(trace) <= 1e-5 * trace[0])  # EM never increases eq. 10
    recon = gvq.reconstruction(result.features, result.states.astype(jnp.float32),
                               binary=True, beta=4.5)
    # Pixels reconstructed on the right side of 1/2.
    assert float(jnp.mean((recon > 0.5) == (x > 0.5))) > 0.96
    planted = gvq.reconstruction_error(x, np.where(F > 0.5, 6.0, -6.0), states, binary=True,
                                       beta=4.5)
    assert float(planted) <= float(result.error) < 4.0 * float(planted)


def test_bad_constraint_input():
    x = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match=r"num_features \(10\) must be num_sets \(4\)"):
        fit_gvq(x, 10, num_sets=4, rng_key=key)
    with pytest.raises(ValueError, match=r"data in \{0, 1\}"):
        fit_gvq(x, 4, binary=True, beta=4.5, rng_key=key)
    xb = (x > 0).astype(np.float32)
    with pytest.raises(ValueError, match="beta"):
        fit_gvq(xb, 4, binary=True, beta=0.0, rng_key=key)
    with pytest.raises(ValueError, match="beta"):
        fit_gvq(xb, 4, binary=True, rng_key=key)
    with pytest.raises(ValueError, match="only with binary=True"):
        fit_gvq(x, 4, beta=4.5, rng_key=key)
    with pytest.raises(ValueError, match="method 'mf' does not apply"):
        fit_gvq(xb, 4, binary=True, beta=4.5, method="mf", rng_key=key)
    with pytest.raises(ValueError, match="sparsity must be >= 0"):
        fit_gvq(x, 4, sparsity=-1.0, rng_key=key)
    with pytest.raises(TypeError, match="num_sets"):
        fit_gvq(x, 4, num_sets=1.5, rng_key=key)
    with pytest.raises(ValueError, match="num_features .* must be num_sets"):
        associate_sets(np.zeros((5, 4)), x, 2)
