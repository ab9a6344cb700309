"""Bucketed rows: one compiled fit_mixture serves every number of examples in a bucket.

With :data:`inference.mixture.sweep.BUCKET_ROWS` on, ``fit_mixture`` pads x's rows to the
next size of a geometric ladder (:func:`inference.mixture.algorithm.bucket_rows`) and
passes the number of examples as a traced value: a fit of 150 rows after one of 151
(the same bucket, 160) neither traces nor compiles a program, and the padded fit is the
unpadded one up to float rounding. Compilations are counted as in
``tests/test_compile_once.py`` (``jax.monitoring``'s trace and backend-compile events).
"""

from __future__ import annotations

import collections
import warnings

import jax
import numpy as np
import pytest

from inference import fit_mixture
from inference.engine import loop as engine_loop
from inference.mixture import sweep
from inference.mixture.algorithm import bucket_rows, layout
from inference.mixture.criteria import criteria
from ppl_models import mixture
from ppl_models.diagnostics import ZooWarning

EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "traced",
          "/jax/core/compile/backend_compile_duration": "compiled"}


@pytest.fixture
def bucketed(monkeypatch):
    monkeypatch.setattr(sweep, "BUCKET_ROWS", True)


def data(num=151, separation=8.0):
    return np.asarray(mixture.generate(jax.random.key(5), num, 3, 2,
                                       separation=separation).x)


def _fit(x, rng_key=None, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ZooWarning)
        key = jax.random.key(1) if rng_key is None else rng_key
        return fit_mixture(x, 3, rng_key=key, **options)


def test_bucket_ladder():
    sizes = [bucket_rows(n) for n in range(1, 5000)]
    assert all(size >= n for n, size in enumerate(sizes, 1))
    assert all(size <= max(8, 1.25 * n) for n, size in enumerate(sizes, 1))
    assert sorted(set(sizes))[:12] == [8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56]
    assert bucket_rows(150) == bucket_rows(151) == 160 and bucket_rows(120) == 128
    # Every size of a bucket gets the same layout, the rows a multiple of the block.
    for covariance in ("full", "diag", "spherical"):
        for num in (135, 136, 150, 151, 3000, 70_000):
            block, rows = layout(num, 4, covariance, bucket=True)
            assert rows >= num and rows % block == 0
            assert (block, rows) == layout(bucket_rows(num), 4, covariance, bucket=True)


def test_a_second_size_in_the_bucket_compiles_nothing(bucketed):
    x = data()
    jax.block_until_ready(jax.tree_util.tree_leaves(_fit(x)))
    seen = collections.Counter()

    def listener(event, duration, **kwargs):
        if event in EVENTS:
            seen[(EVENTS[event], kwargs.get("fun_name", "?"))] += 1

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        fit = _fit(x[:150])
        jax.block_until_ready(jax.tree_util.tree_leaves(fit))
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    new = {f"{kind}: {name}": count for (kind, name), count in sorted(seen.items())}
    assert not new, f"the fit of 150 rows after 151 traced or compiled {new}"
    assert fit.labels.shape == (150,)


@pytest.mark.parametrize("options", [{}, {"mode": "map", "covariance": "diag"},
                                     {"mode": "nearest"}, {"init": "kmeans++"}],
                         ids=["em", "map-diag", "kmeans", "kmeans++"])
def test_the_padded_fit_is_the_unpadded_one(monkeypatch, options):
    x = data(150)
    reference = _fit(x, **options)
    held_out = criteria(x[:140], reference.weights, reference.means, reference.covariances)
    monkeypatch.setattr(sweep, "BUCKET_ROWS", True)
    padded = _fit(x, **options)
    for field in ("weights", "means", "covariances"):
        np.testing.assert_allclose(getattr(padded, field), getattr(reference, field),
                                   rtol=1e-5, atol=1e-6, err_msg=field)
    for field in ("L_stocha", "L_map", "L_NN", "J"):
        np.testing.assert_allclose(getattr(padded, field), getattr(reference, field),
                                   rtol=1e-5, err_msg=field)
    np.testing.assert_array_equal(padded.labels, reference.labels)
    assert padded.num_components == reference.num_components
    padded_held_out = criteria(x[:140], padded.weights, padded.means, padded.covariances)
    np.testing.assert_allclose(list(padded_held_out.values()), list(held_out.values()),
                               rtol=1e-5)


@pytest.mark.parametrize("mode", ["stochastic", "map"])
def test_bucketed_chunks_and_resume_are_bit_identical(bucketed, tmp_path, mode):
    """Checkpoints of a bucketed fit: the chunked and the interrupted-then-resumed fits
    equal the one-call fit bit for bit (``map`` carries a label per padded row)."""
    x = data(180, separation=4.0)
    options = dict(mode=mode, rng_key=jax.random.key(1), tol=1e-10, init="kmeans++")
    reference = _fit(x, **options)
    assert reference.num_iterations > 2
    chunked = _fit(x, checkpoint_path=tmp_path / "every", checkpoint_every=1, **options)
    path = tmp_path / "fit.npz"
    original, calls = engine_loop._advance_jit, []

    def interrupted(*args, **kwargs):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(1)
        return original(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_loop, "_advance_jit", interrupted)
        with pytest.raises(KeyboardInterrupt):
            _fit(x, checkpoint_path=path, checkpoint_every=1, **options)
    resumed = _fit(x, resume_from=path, **options)
    for result in (chunked, resumed):
        for field in ("weights", "means", "covariances", "labels", "L_stocha", "L_map",
                      "num_iterations"):
            np.testing.assert_array_equal(np.asarray(getattr(result, field)),
                                          np.asarray(getattr(reference, field)),
                                          err_msg=field)
        np.testing.assert_array_equal(result.trace.objective, reference.trace.objective)
