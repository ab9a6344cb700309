"""Online mixture learning (seed 002 sec. 6): adaptive EM (eq. 25), CL, FSCL, eq. 28, RPCL."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from inference.mixture.em import component_log_joint, fit_mixture
from inference.mixture.online import fit_online, init, run, step, stream_order
from ppl_models import mixture as mx


@pytest.fixture(scope="module")
def four_clusters():
    """800 examples, 4 equal, unit-covariance clusters, nearest pair 8 sd apart, in 2-D.

    Also a start with one example of every cluster (shared by batch and adaptive EM).
    """
    generate = jax.jit(mx.generate, static_argnums=(1, 2, 3),
                       static_argnames=("separation", "unequal"))  # jitted: 4 s less than eager
    data = generate(jax.random.key(1), 800, 4, 2, separation=8.0, unequal=False)
    x, labels = np.asarray(data.x), np.asarray(data.labels)
    start = x[[int(np.flatnonzero(labels == j)[0]) for j in range(4)]]
    return x, np.asarray(data.means), start


def _centre_distances(means, centres):
    return np.linalg.norm(np.asarray(means)[:, None] - centres[None], axis=-1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rpcl_drives_the_extra_units_off_the_data_and_cl_does_not(four_clusters, seed):
    x, centres, _ = four_clusters
    key = jax.random.key(seed)
    rpcl = fit_online(x, 8, method="rpcl", rng_key=key, max_iterations=5)
    # Exactly the 4 true units remain, one within 0.5 sd of every centre.
    assert rpcl.num_components == 4
    near = _centre_distances(rpcl.means, centres)
    assert sorted(np.argmin(near, axis=1).tolist()) == [0, 1, 2, 3]
    assert np.max(np.min(near, axis=1)) < 0.5
    assert int(rpcl.trace.num_used[-1]) == 4 and rpcl.trace.error.shape == (5,)
    # The 4 extra units win (almost) nothing and were driven off: more than 3 sd from
    # every centre, more than 1 from every example (measured: 4.0-4.4 and 1.2-1.9 at seed 0).
    extra = ~np.asarray(rpcl.used)
    assert extra.sum() == 4
    assert np.all(np.asarray(rpcl.shares)[extra] < 0.005)
    assert np.all(_centre_distances(rpcl.all_means, centres)[extra].min(axis=1) > 3.0)
    assert np.all(np.asarray(rpcl.distance_to_data)[extra] > 1.0)
    assert np.all(np.asarray(rpcl.displacement)[extra] > 1.0)
    # Plain CL from the same start (same key) keeps all 8 units inside the data,
    # each winning a share: it splits clusters instead of selecting k.
    cl = fit_online(x, 8, method="cl", rng_key=key, max_iterations=5)
    assert cl.num_components == 8
    assert np.all(np.asarray(cl.distance_to_data) < 0.5)
    # Without the rival's de-learning (eq. 28 winner only) more than 4 units stay in use.
    no_rival = fit_online(x, 8, method="rpcl", rng_key=key, max_iterations=5, delearning_rate=0.0)
    assert no_rival.num_components > 4


@pytest.mark.slow
def test_adaptive_em_approaches_batch_em_and_the_previous_estimate_stalls(four_clusters):
    x, _, start = four_clusters
    batch = fit_mixture(x, 4, mode="stochastic", init_means=start)
    online = fit_online(x, 4, method="adaptive_em", rng_key=jax.random.key(0), max_iterations=6,
                        init_means=start)
    dist = _centre_distances(online.means, np.asarray(batch.means))
    rows, cols = linear_sum_assignment(dist)
    # Same start; measured (keys 0, 5, 6): means 0.0014 apart, weights 4e-5, covariance
    # entries 0.014, mean log-likelihood 5e-5 below batch EM's.
    assert online.num_components == 4
    assert np.max(dist[rows, cols]) < 0.02
    np.testing.assert_allclose(np.asarray(online.weights)[rows], np.asarray(batch.weights)[cols],
                               atol=1e-3)
    np.testing.assert_allclose(np.asarray(online.covariances)[rows],
                               np.asarray(batch.covariances)[cols], atol=0.1)
    trace = np.asarray(online.trace.objective)
    assert abs(trace[-1] - (-batch.L_stocha)) < 5e-4
    assert np.all(np.diff(trace) > 0)               # it climbs pass after pass
    assert trace[-1] - trace[0] > 3e-4              # measured 1.2e-3
    # The paper's "second latest values" estimate of P^(t)(y|x_t): the same first pass,
    # then h = 0 because the parameters do not move (every value is a fixed point).
    stalled = fit_online(x, 4, method="adaptive_em", rng_key=jax.random.key(0), max_iterations=6,
                         init_means=start, old_posterior="previous")
    stalled_trace = np.asarray(stalled.trace.objective)
    assert stalled_trace[0] == pytest.approx(trace[0], abs=1e-6)
    assert np.max(np.abs(stalled_trace - stalled_trace[0])) < 1e-6


def test_adaptive_em_prunes_a_unit_whose_weight_would_go_negative():
    x_t = jnp.zeros(2)
    means = jnp.array([[0.0, 0.0], [10.0, 0.0]])
    state = init(None, x_t[None], 2, means=means, weights=jnp.array([0.99, 0.01]),
                 covariances=jnp.stack([jnp.eye(2)] * 2), prior_count=1.0)
    # x_t belonged to unit 1 under the previous parameters, to unit 0 now: h_1 = -1/t.
    state = state._replace(previous_means=means[::-1], num_steps=jnp.asarray(1, jnp.int32))
    new, info = jax.jit(lambda s: step(s, x_t, method="adaptive_em", old_posterior="previous",
                                       num_examples=1))(state)
    assert np.asarray(new.active).tolist() == [True, False]
    assert int(info.num_active) == 1
    np.testing.assert_allclose(np.asarray(new.weights), [1.0, 0.0])
    np.testing.assert_array_equal(np.asarray(new.means[1]), [10.0, 0.0])  # frozen
    assert all(bool(jnp.all(jnp.isfinite(a))) for a in (new.means, new.covariances))


def test_cl_winner_is_the_nearest_mean_and_the_count_rate_gives_running_means():
    with jax.enable_x64(True):
        x = np.random.default_rng(0).normal(size=(40, 2)) * 3.0
        state = init(None, jnp.asarray(x), 3, means=x[:3], covariance="spherical")
        start = np.asarray(state.means)
        one_step = jax.jit(lambda s, xt: step(s, xt, method="cl", schedule="count",
                                               covariance="spherical"))
        posterior_winner = jax.jit(lambda s, xt: jnp.argmax(component_log_joint(
            xt[None], s.weights, s.means, s.covariances, covariance="spherical")[0]))
        won = {0: [], 1: [], 2: []}
        for x_t in x:
            nearest = int(np.argmin(((x_t - np.asarray(state.means)) ** 2).sum(1)))
            # Equal weights and sigma^2 I: eq. 28 reduces to the nearest mean.
            assert int(posterior_winner(state, jnp.asarray(x_t))) == nearest
            state, info = one_step(state, jnp.asarray(x_t))
            assert int(info.winner) == nearest
            won[nearest].append(x_t)
        for unit, examples in won.items():
            assert len(examples) >= 2
            # m_c <- m_c + (x - m_c) / n_c: exactly the mean of the examples won.
            np.testing.assert_allclose(np.asarray(state.means[unit]), np.mean(examples, 0),
                                       rtol=0, atol=1e-12)
            assert not np.allclose(np.asarray(state.means[unit]), start[unit])
        np.testing.assert_array_equal(np.asarray(state.counts), [len(won[u]) for u in won])


def test_posterior_winner_and_rival_are_the_program_argmax_not_the_nearest_mean():
    x = np.asarray(jax.random.normal(jax.random.key(3), (400, 2))) * 3.0
    means = jnp.array([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0]])
    weights = jnp.array([0.6, 0.1, 0.3])
    cov = jnp.stack([jnp.diag(jnp.array([9.0, 1.0])), 0.3 * jnp.eye(2),
                     jnp.array([[2.0, 1.2], [1.2, 2.0]])])
    state = init(None, jnp.asarray(x), 3, means=means, weights=weights, covariances=cov)
    # Every example against the same state: the step is vmapped (and jitted).
    _, info = jax.jit(jax.vmap(lambda xt: step(state, xt, method="rpcl", reg_covar=0.0)))(
        jnp.asarray(x))
    log_joint = np.asarray(component_log_joint(jnp.asarray(x), weights, means, cov))
    order = np.argsort(-log_joint, axis=1)
    np.testing.assert_array_equal(np.asarray(info.winner), order[:, 0])
    np.testing.assert_array_equal(np.asarray(info.rival), order[:, 1])
    nearest = np.argmin(((x[:, None] - np.asarray(means)[None]) ** 2).sum(-1), axis=1)
    assert np.mean(nearest != order[:, 0]) > 0.1  # eq. 28 is not the nearest mean here


@pytest.mark.parametrize("method, num_components, num_passes",
                         [("rpcl", 8, 5), ("adaptive_em", 4, 6)])
@pytest.mark.slow
def test_scan_driver_equals_a_loop_of_the_jitted_step(four_clusters, method, num_components,
                                                      num_passes):
    x, _, start = four_clusters
    key = jax.random.key(0)  # the runs of the tests above: their compiled code is reused
    start = start if method == "adaptive_em" else None
    key_init, key_order = jax.random.split(key)
    stream = jnp.asarray(x)[stream_order(key_order, x.shape[0], num_passes)]
    state0 = init(key_init, jnp.asarray(x), num_components, means=start)
    options = {"method": method, "num_examples": x.shape[0]}
    one_step = jax.jit(lambda s, xt: step(s, xt, **options))
    state = state0
    for i in range(12):
        state, info = one_step(state, stream[i])
    # fit_online is run() over stream_order's shuffle, from init(key_init, ...).
    scanned, infos = run(state0, stream, **options)
    assert int(info.winner) == int(infos.winner[11])
    leaves = jax.tree.leaves(jax.tree.map(lambda a: a[11], infos))
    for a, b in zip(jax.tree.leaves(info), leaves, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    fitted = fit_online(x, num_components, method=method, rng_key=key, max_iterations=num_passes,
                        init_means=start)
    np.testing.assert_allclose(np.asarray(fitted.all_means), np.asarray(scanned.means),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(fitted.all_covariances),
                               np.asarray(scanned.covariances), rtol=1e-5, atol=1e-5)
    assert fitted.num_steps == int(scanned.num_steps) == num_passes * x.shape[0]


@pytest.mark.parametrize("kwargs, error, match", [
    ({"method": "kmeans"}, ValueError, "method must be one of"),
    ({"schedule": "exp"}, ValueError, "schedule must be one of"),
    ({"criterion": "angle"}, ValueError, "criterion must be one of"),
    ({"method": "adaptive_em", "criterion": "distance"}, ValueError, "criterion must be"),
    ({"delearning": "strong"}, ValueError, "delearning must be one of"),
    ({"covariance": "tied"}, ValueError, "covariance must be one of"),
    ({"old_posterior": "stored"}, ValueError, "old_posterior must be one of"),
    ({"learning_rate": 0.0}, ValueError, "learning_rate must lie in"),
    ({"learning_rate": 1.5}, ValueError, "learning_rate must lie in"),
    ({"learning_rate": "fast"}, TypeError, "learning_rate must be a number"),
    ({"delearning_rate": -0.1}, ValueError, "delearning_rate must lie in"),
    ({"min_share": 2.0}, ValueError, "min_share must lie in"),
    ({"max_iterations": 0}, ValueError, "max_iterations must be at least 1"),
    ({"trace_every": 1.5}, TypeError, "trace_every must be an integer"),
    ({"num_components": 11}, ValueError, "num_components=11 exceeds the 10 distinct"),
    ({"num_components": 0}, ValueError, "num_components must be at least 1"),
    ({"init_means": np.zeros((3, 2))}, ValueError, "init_means must be finite with shape"),
    ({"rng_key": None}, ValueError, "rng_key is required"),
    ({"x": np.array([[0.0, np.nan]] * 12)}, ValueError, "x contains 12 NaN"),
])
def test_fit_online_rejects_bad_input_naming_the_argument(kwargs, error, match):
    x = np.repeat(np.arange(10.0)[:, None], 2, axis=1)
    arguments = {"x": x, "num_components": 2, "rng_key": jax.random.key(0), **kwargs}
    with pytest.raises(error, match=match):
        fit_online(arguments.pop("x"), arguments.pop("num_components"), **arguments)


def test_step_rejects_unknown_options_naming_them():
    state = init(None, jnp.zeros((2, 2)), 2, means=jnp.eye(2))
    with pytest.raises(ValueError, match="method must be one of"):
        step(state, jnp.zeros(2), method="som")
    with pytest.raises(ValueError, match="delearning must be one of"):
        step(state, jnp.zeros(2), method="rpcl", delearning="strong")


def test_passes_stop_at_tol_and_run_every_pass_without_it(four_clusters):
    """One engine iteration a pass: with tol the passes stop once the mean log-likelihood
    settles (converged, one trace point per pass run); tol=0 runs every pass."""
    x, _, start = four_clusters
    key = jax.random.key(0)
    every = fit_online(x, 4, method="cl_posterior", rng_key=key, max_iterations=12,
                       init_means=start, schedule="count")
    assert every.num_iterations == 12 and not every.converged
    assert every.trace.objective.shape == (12,)
    settled = fit_online(x, 4, method="cl_posterior", rng_key=key, max_iterations=12,
                         init_means=start, schedule="count", tol=1e-3)
    assert settled.converged and 2 <= settled.num_iterations < 12
    assert settled.trace.objective.shape == (settled.num_iterations,)
    assert settled.num_steps == settled.num_iterations * x.shape[0]
    # The passes it ran are those of the full run, to the last step.
    np.testing.assert_array_equal(np.asarray(settled.trace.objective),
                                  np.asarray(every.trace.objective)[:settled.num_iterations])
    final = np.asarray(every.trace.objective)
    change = np.abs(np.diff(final)) / np.abs(final[:-1])
    assert settled.num_iterations == int(np.argmax(change <= 1e-3)) + 2
