"""Streaming fits (issue 9): EM by passes over batches equals the in-memory fit; sources.

Exactness checks run in float64 (``jax.enable_x64`` inside the test, as
tests/test_mixture.py): the streamed sums are grouped differently from the
in-memory blocks, so results agree to rounding, checked at 1e-9.
"""

import warnings

import jax
import numpy as np
import pytest

from inference.engine import passes as engine_passes
from inference.engine.streaming import BatchSource, is_stream
from inference.mixture.em import fit_mixture
from inference.mixture.online import fit_online, init, stream_order
from inference.mixture.online_stream import fit_online_stream
from inference.mixture.stream import fit_mixture_stream
from ppl_models import mixture as mx
from ppl_models.diagnostics import ConvergenceWarning

N = 1000


@pytest.fixture(scope="module")
def data64():
    """1,000 examples of a planted 4-component mixture in 3-D, float64, and a start."""
    with jax.enable_x64(True):
        d = mx.generate(jax.random.key(0), N, 4, 3, separation=3.0)
        x = np.asarray(d.x, np.float64)
    start = x[np.random.default_rng(0).choice(N, 4, replace=False)]
    return x, start


def _assert_same_fit(ours, ref, tol=1e-9, value_tol=1e-9):
    """Parameters (``tol``), objective trace and criteria (``value_tol``), iteration and
    component counts and labels (exactly) agree."""
    assert ours.num_iterations == ref.num_iterations
    assert ours.num_components == ref.num_components and ours.converged == ref.converged
    for name in ("weights", "means", "covariances"):
        np.testing.assert_allclose(np.asarray(getattr(ours, name)),
                                   np.asarray(getattr(ref, name)), rtol=tol, atol=tol,
                                   err_msg=name)
    np.testing.assert_allclose(np.asarray(ours.trace.objective),
                               np.asarray(ref.trace.objective), rtol=value_tol)
    np.testing.assert_array_equal(np.asarray(ours.trace.num_components),
                                  np.asarray(ref.trace.num_components))
    for name in ("L_stocha", "L_map", "L_NN", "J"):
        assert getattr(ours, name) == pytest.approx(getattr(ref, name), rel=value_tol), name
    if ours.labels is not None:
        np.testing.assert_array_equal(np.asarray(ours.labels), np.asarray(ref.labels))


# The default run checks every mode and every covariance family once; the other two
# pairs run in the slow run.
@pytest.mark.parametrize("mode, covariance", [
    ("stochastic", "full"),
    pytest.param("stochastic", "diag", marks=pytest.mark.slow),
    pytest.param("map", "full", marks=pytest.mark.slow),
    ("map", "diag"),
    ("nearest", "spherical")])
def test_streamed_em_equals_the_in_memory_fit(data64, mode, covariance):
    """Batches of 300 rows (the last one 100): the same fit, labels included."""
    x, start = data64
    kwargs = dict(mode=mode, covariance=covariance, init_means=start, max_iterations=25)
    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # EM may need more than 25
        ref = fit_mixture(x, 4, **kwargs)
        ours = fit_mixture_stream(x, 4, batch_size=300, return_labels=True, **kwargs)
    _assert_same_fit(ours, ref)
    if mode != "stochastic":  # the hard modes stopped on their fixed point, as in memory
        assert ours.converged and ours.num_iterations < 25


# "map"'s exact pass is "stochastic"'s with 0/1 responsibilities (see below): the default
# run checks "stochastic" and "nearest", the slow run "map" as well.
@pytest.mark.parametrize("mode", ["stochastic", pytest.param("map", marks=pytest.mark.slow),
                                  "nearest"])
def test_cancellation_fallback_runs_an_exact_pass_and_matches(mode, monkeypatch):
    """A tight cluster 1000 away from the data's centre: the moment-form covariance
    would cancel (also in float64), so every iteration runs the exact pass about the
    new means; the result equals the in-memory fit, whose fallback reads x."""
    rng = np.random.default_rng(4)
    near = rng.normal(size=(300, 2))
    far = 1000.0 + 0.01 * rng.normal(size=(300, 2)) @ np.array([[1.0, 0.5], [0.0, 1.0]])
    x = np.concatenate([near, far])[rng.permutation(600)]
    start = dict(init_means=np.array([[0.0, 0.0], [1000.0, 1000.0]]),
                 init_covariances=np.stack([np.eye(2), 1e-4 * np.eye(2)]), max_iterations=3,
                 tol=0.0, prune=False, mode=mode, reg_covar=1e-6)  # absolute, as below
    calls = []
    exact = engine_passes._batch_second  # the streamed EM's exact pass, batch by batch
    monkeypatch.setattr(engine_passes, "_batch_second",
                        lambda *a, **kw: calls.append(1) or exact(*a, **kw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        with jax.enable_x64(True):
            ref = fit_mixture(x, 2, **start)
            ours = fit_mixture_stream(x, 2, batch_size=250, **start)
        if mode != "map":  # map's exact pass is stochastic's with 0/1 responsibilities
            ours32 = fit_mixture_stream(x.astype(np.float32), 2, batch_size=250, **start)
    assert len(calls) >= 3 * ours.num_iterations  # 3 batches, every iteration
    # The log-likelihoods themselves are ill-conditioned here: the tight component's
    # quadratic form about the data's centre is ~1e9 times its value, so both fits
    # evaluate them to ~1e-7 relative (float64), and their shifts round differently.
    _assert_same_fit(ours, ref, value_tol=1e-6)
    if mode != "nearest":
        tight = np.cov(x[x[:, 0] > 500].T, bias=True) + 1e-6 * np.eye(2)
        np.testing.assert_allclose(np.asarray(ours.covariances[1]), tight, rtol=1e-9)
    # float32: the fallback keeps the tight covariance to float32 accuracy (test_mixture's
    # tolerance), where the moment form would be wrong by orders of magnitude.
    if mode != "map":
        np.testing.assert_allclose(np.asarray(ours32.covariances),
                                   np.asarray(ours.covariances), rtol=1e-3, atol=1e-8)


def test_memmap_source_and_single_batch_seeding_equal_fit_mixture(data64, tmp_path):
    """A float64 np.memmap on disk, read in blocks; with one batch holding all rows,
    k-means++ seeds from the same rows with the same key as fit_mixture."""
    x, start = data64
    path = tmp_path / "x.dat"
    stored = np.memmap(path, dtype=np.float64, mode="w+", shape=x.shape)
    stored[:] = x
    stored.flush()
    mapped = np.memmap(path, dtype=np.float64, mode="r", shape=x.shape)
    key = jax.random.key(3)
    with jax.enable_x64(True):
        ref = fit_mixture(x, 4, mode="nearest", init_means=start)
        ours = fit_mixture_stream(mapped, 4, mode="nearest", init_means=start, batch_size=128)
        seeded_ref = fit_mixture(x, 4, mode="nearest", rng_key=key, init="kmeans++")
        seeded = fit_mixture_stream(mapped, 4, mode="nearest", rng_key=key, batch_size=N)
    assert ours.labels is None  # labels only on request
    _assert_same_fit(ours, ref)
    _assert_same_fit(seeded, seeded_ref)


@pytest.mark.slow
def test_callable_and_list_sources_equal_the_in_memory_fit(data64):
    """The default run checks these two sources in
    tests/test_streaming_fits.py::test_gvq_stream_equals_in_memory and a list of batches
    of the mixture in test_online_stream_passes_carry_the_state_and_stop_at_tol."""
    x, start = data64
    chunks = [x[i:i + 170] for i in range(0, N, 170)]
    kwargs = dict(mode="stochastic", covariance="full", init_means=start, max_iterations=8,
                  tol=0.0)
    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = fit_mixture(x, 4, **kwargs)
        from_callable = fit_mixture_stream(lambda: iter(chunks), 4, **kwargs)
        from_list = fit_mixture_stream(chunks, 4, **kwargs)
    _assert_same_fit(from_callable, ref)
    _assert_same_fit(from_list, ref)


def test_one_shot_iterator_is_refused_for_several_passes_and_fine_online(data64):
    x, start = data64
    one_shot = (x[i:i + 100] for i in range(0, N, 100))
    with pytest.raises(ValueError, match="re-iterable source .* or a callable"):
        fit_mixture_stream(one_shot, 4, init_means=start)
    # A callable that hands back the same, exhausted iterator: caught on the second pass.
    shared = iter([x[:500], x[500:]])
    with pytest.raises(ValueError, match="no batches on pass 2 .* changed between passes"):
        fit_mixture_stream(lambda: shared, 4, init_means=start)
    source = BatchSource(iter([x[:500], x[500:]]))
    assert [b.shape[0] for b in source] == [500, 500]
    with pytest.raises(ValueError, match="already been consumed"):
        list(source)


@pytest.mark.parametrize("bad, error, match", [
    (lambda x: [x[:100], x[100:200], x[200:300, :2], x[300:]], ValueError,
     r"batch 2 has shape \(100, 2\); expected 2-D with 3 columns like batch 0 "
     r"\(shape \(100, 3\)\)"),
    (lambda x: [x[:100], x[100:200], x[200:300], np.where(np.arange(3) == 1, np.nan, x[300:])],
     ValueError, r"batch 3 \(shape \(700, 3\)\) contains 700 NaN"),
    (lambda x: [x[:100], x[100:200].reshape(-1)], ValueError, r"batch 1 has shape \(300,\)"),
    (lambda x: [x[:100], x[100:].astype(np.int64)], TypeError, "batch 1 has dtype int64"),
    (lambda x: [], ValueError, "source is empty"),
    (lambda x: np.zeros((0, 3)), ValueError, r"source is empty: shape \(0, 3\)"),
    (lambda x: 5, TypeError, "source must be an array, a callable .* got int"),
])
def test_bad_batches_are_rejected_naming_the_batch(data64, bad, error, match):
    x, start = data64
    with pytest.raises(error, match=match):
        fit_mixture_stream(bad(x), 4, init_means=start)


def test_bad_arguments_are_rejected_naming_them(data64):
    x, start = data64
    with pytest.raises(ValueError, match="mode must be one of"):
        fit_mixture_stream(x, 4, mode="soft", init_means=start)
    with pytest.raises(ValueError, match=r"init_means must be finite with shape \(4, 3\)"):
        fit_mixture_stream(x, 4, init_means=start[:3])
    with pytest.raises(ValueError, match="rng_key is required"):
        fit_mixture_stream(x, 4)
    with pytest.raises(TypeError, match="batch_size must be an integer"):
        fit_mixture_stream(x, 4, init_means=start, batch_size=2.5)
    with pytest.raises(ValueError, match="num_components=3 exceeds the 2 distinct"):
        fit_mixture_stream([np.zeros((5, 2)), np.ones((5, 2))], 3, init_means=np.eye(3, 2))


# The default run checks the streamed online fit against fit_online with "rpcl"; the slow
# run with "adaptive_em" as well.
@pytest.mark.parametrize("method, covariance", [
    ("rpcl", "full"), pytest.param("adaptive_em", "diag", marks=pytest.mark.slow)])
def test_online_stream_equals_fit_online_on_the_same_stream(data64, method, covariance):
    """fit_online shuffles with split(key)[1]; streaming those rows in batches of 170
    (the last 150) from the same start gives the same units, step for step."""
    x, start = data64
    key = jax.random.key(5)
    with jax.enable_x64(True):
        order = np.asarray(stream_order(jax.random.split(key)[1], N, 1))
        start_cov = init(key, x, 4, means=start, covariance=covariance).covariances
        ref = fit_online(x, 4, method=method, covariance=covariance, rng_key=key,
                         init_means=start)
        stream = x[order]
        ours = fit_online_stream((stream[i:i + 170] for i in range(0, N, 170)), 4,
                                 method=method, covariance=covariance, rng_key=key,
                                 init_means=start, init_covariances=start_cov)
    assert ours.num_steps == ref.num_steps == N
    for name in ("all_weights", "all_means", "all_covariances", "win_counts"):
        np.testing.assert_allclose(np.asarray(getattr(ours, name)),
                                   np.asarray(getattr(ref, name)), rtol=1e-10, atol=1e-12,
                                   err_msg=name)
    assert ours.trace.objective.shape == (6,)
    assert np.all(np.isfinite(np.asarray(ours.trace.objective)))


def test_online_stream_resumes_from_its_state(data64):
    """Two parts, the second continuing from the first's state, equal one whole pass
    (both start from the same first batch of 300 rows)."""
    x, start = data64
    with jax.enable_x64(True):
        whole = fit_online_stream(x, 4, method="cl_posterior", init_means=start, batch_size=300)
        first = fit_online_stream(x[:400], 4, method="cl_posterior", init_means=start,
                                  batch_size=300)
        second = fit_online_stream(x[400:], 4, method="cl_posterior", state=first.state,
                                   batch_size=300)
    assert second.num_steps == whole.num_steps == N
    for name in ("all_weights", "all_means", "all_covariances"):
        np.testing.assert_allclose(np.asarray(getattr(second, name)),
                                   np.asarray(getattr(whole, name)), rtol=1e-12, err_msg=name)


def test_online_stream_passes_carry_the_state_and_stop_at_tol(data64):
    """Passes run through the engine carry the state on: two passes over a list of batches
    equal one pass over the list twice; the trace has one entry per batch of every pass;
    ``tol`` stops once a pass's mean objective settles; a one-shot iterator allows one."""
    x, start = data64
    parts = [x[i:i + 250] for i in range(0, N, 250)]
    with jax.enable_x64(True):
        two = fit_online_stream(parts, 4, method="cl_posterior", init_means=start,
                                max_iterations=2)
        once = fit_online_stream(parts + parts, 4, method="cl_posterior", init_means=start)
        settled = fit_online_stream(parts, 4, method="cl", init_means=start,
                                    max_iterations=100, tol=1e-2)
    assert (two.num_iterations, two.converged, once.num_iterations) == (2, False, 1)
    assert two.num_steps == once.num_steps == 2 * N
    assert two.trace.objective.shape == two.trace.num_active.shape == (8,)
    for name in ("all_weights", "all_means", "all_covariances", "win_counts"):
        np.testing.assert_array_equal(np.asarray(getattr(two, name)),
                                      np.asarray(getattr(once, name)), err_msg=name)
    np.testing.assert_array_equal(np.asarray(two.trace.objective),
                                  np.asarray(once.trace.objective))
    assert settled.converged and 1 < settled.num_iterations < 100
    assert settled.trace.objective.shape == (4 * settled.num_iterations,)
    with pytest.raises(ValueError, match="one-shot iterator"):
        fit_online_stream(iter(parts), 4, init_means=start, max_iterations=2)


def test_an_online_stream_result_saved_before_the_engine_loads():
    """``tests/data/saved_before_engine/online_stream.npz``: a one-pass fit of 100 rows in
    batches of 30 saved with ``log_likelihood_trace`` and ``num_active_trace``."""
    from pathlib import Path

    import inference
    from inference.mixture.online_stream import OnlineStreamResult, OnlineStreamTrace

    saved = Path(__file__).resolve().parent / "data" / "saved_before_engine"
    result = inference.load(saved / "online_stream.npz")
    assert type(result) is OnlineStreamResult and type(result.trace) is OnlineStreamTrace
    assert np.asarray(result.trace.objective).shape == (4,)
    assert np.asarray(result.trace.num_active).tolist() == [3, 3, 3, 3]
    assert (result.num_iterations, result.converged, result.num_steps) == (1, False, 100)


def test_is_stream_tells_sources_from_arrays(tmp_path):
    """The test a public fit dispatches on: memmaps, callables, iterators and lists of
    batches stream; arrays and nested lists of numbers do not."""
    x = np.zeros((4, 2))
    mapped = np.memmap(tmp_path / "x.dat", dtype=np.float32, mode="w+", shape=(4, 2))
    for source in (mapped, lambda: iter([x]), iter([x]), [x, x], BatchSource(x)):
        assert is_stream(source)
    for array in (x, x.tolist(), jax.numpy.asarray(x), []):
        assert not is_stream(array)


def test_fit_mixture_dispatches_streams_and_rejects_devices_for_them(tmp_path):
    """fit_mixture(memmap) runs the streaming fit: the same result as the array, labels None."""
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(size=(150, 2)), rng.normal(size=(150, 2)) + 6.0])
    path = tmp_path / "x.npy"
    np.save(path, x.astype(np.float32))
    mapped = np.load(path, mmap_mode="r")
    start = x[[0, 200]].astype(np.float32)
    whole = fit_mixture(np.asarray(mapped), 2, init_means=start, max_iterations=30)
    streamed = fit_mixture(mapped, 2, init_means=start, max_iterations=30, batch_size=64)
    assert streamed.labels is None and streamed.num_iterations == whole.num_iterations
    np.testing.assert_allclose(streamed.means, whole.means, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(streamed.L_stocha, whole.L_stocha, rtol=1e-4)
    with pytest.raises(ValueError, match="devices"):
        fit_mixture(mapped, 2, init_means=start, devices=1)
    with pytest.raises(ValueError, match="batch_size"):
        fit_mixture(np.asarray(mapped), 2, init_means=start, batch_size=64)
