"""The engine: restarts, convergence, trace, chunks, sharding and streams, on toy algorithms.

Exact checks: a contraction towards the data mean converges in a number of
iterations that follows from its rate; the statistics + update form computes the
mean exactly; every way of running the same algorithm (all at once, in chunks, in
restart batches, on a one-device mesh, over a stream of batches) gives the same
numbers; a second run with new data of the same shapes compiles nothing.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inference import engine
from inference.engine.checkpoint import Checkpointing, prepare
from inference.engine.passes import run_passes
from inference.engine.sharding import resolve_mesh
from ppl_models.diagnostics import ConvergenceWarning


class Info(NamedTuple):
    objective: jax.Array
    distance: jax.Array


def contract(key, state, data, params, *, shard, rate):
    """state <- state - rate (state - mean(x)); objective 1 + (state - mean)^2."""
    (x,) = data
    mean = jnp.mean(x)
    new = state - rate * (state - mean)
    return new, Info(1.0 + jnp.square(new - mean), jnp.abs(new - mean))


CONTRACT = engine.Algorithm(contract, options=(("rate", 0.5),), name="contract")


class Noisy(NamedTuple):
    objective: jax.Array
    converged: jax.Array


def noisy(key, state, data, params, *, shard):
    """A random walk that reports its own convergence after 5 steps (uses its key)."""
    value, count = state
    value = value + jax.random.normal(key)
    return (value, count + 1), Noisy(value, count + 1 >= 5)


NOISY = engine.Algorithm(noisy, name="noisy")


def mean_statistics(key, state, data, params, valid):
    (x,) = data
    weights = jnp.ones(x.shape[0], x.dtype) if valid is None else valid.astype(x.dtype)
    return {"sum": jnp.sum(weights * x[:, 0]), "count": jnp.sum(weights)}


def mean_update(state, stats, params):
    mean = stats["sum"] / stats["count"]
    return mean, Info(1.0 + jnp.abs(mean - state), jnp.abs(mean - state))


MEAN = engine.StatisticsAlgorithm(mean_statistics, mean_update, name="mean")

X = jnp.arange(10.0)[:, None] * jnp.ones((1, 1))
KEYS = jax.random.split(jax.random.key(0), 3)
STARTS = jnp.array([0.0, 10.0, 100.0])


def _run(algorithm=CONTRACT, data=(X[:, 0],), states=STARTS, **kwargs):
    kwargs = {"keys": KEYS, "max_iterations": 60, "tol": 1e-6, **kwargs}
    return engine.run(algorithm, states, data, **kwargs)


def test_restarts_converge_with_the_expected_number_of_iterations():
    result = _run()
    np.testing.assert_allclose(result.state, 4.5, atol=1e-3)
    assert bool(jnp.all(result.converged))
    # objective_i - 1 = d0^2 / 4^i: the relative change falls below 1e-6 later from
    # farther starts; every start's count is its own.
    counts = np.asarray(result.num_iterations)
    assert counts[0] < counts[1] < counts[2] or counts[0] <= counts[1] <= counts[2]
    assert len(set(counts.tolist())) > 1


def test_select_cuts_the_trace_at_the_start_s_iterations():
    result = _run()
    state, trace, count, converged = engine.select(result, 2)
    assert trace.objective.shape == (count,) and trace.distance.shape == (count,)
    assert converged and count == int(result.num_iterations[2])
    distances = np.asarray(trace.distance)
    np.testing.assert_allclose(distances[1:] / distances[:-1], 0.5, rtol=1e-3)
    # Entries past a start's count are never written.
    assert np.all(np.asarray(result.trace.objective[2, count:]) == 0)


def test_a_step_that_reports_convergence_overrides_the_tolerance_and_uses_its_keys():
    states = (jnp.zeros(3), jnp.zeros(3, jnp.int32))
    result = engine.run(NOISY, states, (X[:, 0],), keys=KEYS, max_iterations=20, tol=1e9)
    assert np.asarray(result.num_iterations).tolist() == [5, 5, 5]
    values = np.asarray(result.state[0])
    assert len(set(values.tolist())) == 3  # each start drew its own numbers
    again = engine.run(NOISY, states, (X[:, 0],), keys=KEYS, max_iterations=20, tol=1e9)
    np.testing.assert_array_equal(values, np.asarray(again.state[0]))


def test_restart_batches_chunks_and_one_call_agree_exactly(tmp_path):
    whole = _run()
    batched = _run(restart_batch=2)
    path, every, resume, saved = prepare(tmp_path / "c.npz", 3, None, {"rate": 0.5},
                                         data=(X,))
    chunked = _run(checkpoint=Checkpointing(path, every, resume, saved))
    resumed = _run(checkpoint=Checkpointing(None, None, path, saved))
    for other in (batched, chunked, resumed):
        for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(other), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_checkpoint_of_another_fit_is_refused(tmp_path):
    path, every, _, saved = prepare(tmp_path / "c.npz", 3, None, {"rate": 0.5}, data=(X,))
    _run(checkpoint=Checkpointing(path, every, None, saved))
    other = dict(saved, rate=0.25)
    with pytest.raises(ValueError, match="rate"):
        _run(checkpoint=Checkpointing(None, None, path, other))


def test_statistics_form_on_a_mesh_and_over_a_stream_equals_the_plain_run():
    x = jnp.arange(11.0)[:, None]
    keys = KEYS[:2]
    plain = engine.run(MEAN, jnp.zeros(2), (x,), keys=keys, max_iterations=10, tol=1e-9)
    np.testing.assert_allclose(plain.state, 5.0)
    sharded = engine.run(MEAN, jnp.zeros(2), (x,), keys=keys, max_iterations=10, tol=1e-9,
                         mesh=resolve_mesh(devices=1))
    streamed = run_passes(MEAN, jnp.zeros(2), np.asarray(x), keys=keys, max_iterations=10,
                          tol=1e-9, batch_size=4)
    for other in (sharded, streamed):
        np.testing.assert_allclose(other.state, plain.state, rtol=1e-6)
        np.testing.assert_array_equal(other.num_iterations, plain.num_iterations)
        np.testing.assert_allclose(other.trace.objective, plain.trace.objective, rtol=1e-6)


def test_a_second_run_with_new_data_compiles_nothing():
    _run()
    inputs = [((X[:, 0] + 1.0,), STARTS + 2.0), ((X[:, 0] * 2.0,), STARTS - 1.0)]
    compiled = []

    def listen(event, duration, **kwargs):
        if "backend_compile" in event:
            compiled.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        for data, states in inputs:
            _run(data=data, states=states)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert compiled == []


def test_warn_not_converged_is_the_one_convergence_warning():
    result = _run(max_iterations=3)
    assert not bool(jnp.any(result.converged))
    with pytest.warns(ConvergenceWarning, match=r"^contract: not converged after 3 iterations"):
        engine.warn_not_converged("contract", bool(result.converged[0]), 3)
    engine.warn_not_converged("contract", True, 3)  # no warning when converged


def test_a_mesh_with_a_progress_bar_is_refused():
    with pytest.raises(ValueError, match="progress bar"):
        _run(mesh=resolve_mesh(devices=1), progress_bar=True)
