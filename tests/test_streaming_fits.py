"""Streamed GVQ, clipped-Gaussian and MCVQ fits (issue 9) equal the in-memory fits.

Exactness checks run in float64 (``jax.enable_x64`` inside the test, as
tests/test_streaming.py): the streamed sums are grouped by batch, so results agree
to rounding, checked at 1e-9 (the clipped-Gaussian moments are integer counts:
bit for bit). Every source has an uneven last batch.
"""

import jax
import numpy as np
import pytest

from inference import BatchSource, fit_clipped_gaussian, fit_gvq, fit_mcvq
from inference.clipped.stream import fit_clipped_gaussian_stream
from inference.gvq.stream import fit_gvq_stream
from inference.mcvq.stream import fit_mcvq_stream
from ppl_models import clipped_gaussian as cg
from ppl_models import gvq, mcvq

TOL = 1e-9


def _cuts(num, size):
    return [slice(i, i + size) for i in range(0, num, size)]


def _sources(x, size, tmp_path, name):
    """The same rows as a list of batches, a callable and a memmap (uneven last batch)."""
    path = tmp_path / f"{name}.npy"
    np.save(path, x)
    memmap = np.load(path, mmap_mode="r")
    assert isinstance(memmap, np.memmap)
    return {"list": [x[c] for c in _cuts(len(x), size)],
            "callable": lambda: (x[c] for c in _cuts(len(x), size)),
            "memmap": BatchSource(memmap, batch_size=size)}


def _close(ours, ref, names, tol=TOL):
    for name in names:
        np.testing.assert_allclose(np.asarray(getattr(ours, name)),
                                   np.asarray(getattr(ref, name)), rtol=tol, atol=tol,
                                   err_msg=name)


# ---------------------------------------------------------------------------------------
# GVQ


@pytest.fixture(scope="module")
def gvq_case(tmp_path_factory):
    """230 planted examples (4 features, 6-D) and the in-memory fit, float64: three
    restarts that end at three different errors (so the best one is unambiguous)."""
    with jax.enable_x64(True):
        x = np.asarray(gvq.generate_planted(jax.random.key(0), 230, 4, 6).x, np.float64)
        ref = fit_gvq(x, 4, rng_key=jax.random.key(4), num_restarts=3)
    assert np.unique(np.round(np.asarray(ref.restart_errors), 6)).size == 3
    return x, ref, _sources(x, 100, tmp_path_factory.mktemp("gvq"), "x")


@pytest.mark.parametrize("kind", ["list", "callable", "memmap"])
def test_gvq_stream_equals_in_memory(gvq_case, kind):
    """Same starts (from the column moments of the first pass), same EM per restart, the
    same best restart, fixed point and association."""
    x, ref, sources = gvq_case
    with jax.enable_x64(True):
        ours = fit_gvq_stream(sources[kind], 4, rng_key=jax.random.key(4), num_restarts=3,
                              return_states=True)
    assert bool(ref.converged) and bool(ours.converged)
    assert int(ours.num_iterations) == int(ref.num_iterations)
    _close(ours, ref, ("features", "error", "restart_errors"))
    _close(ours.trace, ref.trace, ("objective",))
    np.testing.assert_array_equal(np.asarray(ours.states), np.asarray(ref.states))


def test_gvq_dispatch(gvq_case):
    """fit_gvq on a list of batches streams (no per-example states kept)."""
    x, ref, sources = gvq_case
    with jax.enable_x64(True):
        ours = fit_gvq(sources["list"], 4, rng_key=jax.random.key(4), num_restarts=3)
    assert ours.states is None
    _close(ours, ref, ("features", "error", "restart_errors"))
    _close(ours.trace, ref.trace, ("objective",))


def test_gvq_options_that_do_not_stream(gvq_case):
    x, *_ = gvq_case
    binary = (x > x.mean()).astype(float)
    with pytest.raises(ValueError, match="binary"):
        fit_gvq_stream([binary[:100], binary[100:]], 3, rng_key=jax.random.key(0),
                       binary=True, beta=4.5)
    with pytest.raises(ValueError, match="one-shot iterator"):
        fit_gvq_stream(iter([x[:100], x[100:]]), 4, rng_key=jax.random.key(0))
    with pytest.raises(ValueError, match="devices"):
        fit_gvq([x[:100], x[100:]], 4, rng_key=jax.random.key(0), devices=1)
    with pytest.raises(ValueError, match="batch_size"):
        fit_gvq(x, 4, rng_key=jax.random.key(0), batch_size=10)


# ---------------------------------------------------------------------------------------
# Clipped Gaussian


@pytest.fixture(scope="module")
def patterns():
    with jax.enable_x64(True):
        return np.asarray(cg.generate(jax.random.key(1), 500, 8, 2).s)


@pytest.mark.parametrize("bias", [True, False])
def test_clipped_gaussian_stream_equals_in_memory(patterns, bias, tmp_path):
    """The moments are exact integer sums: the fit is the in-memory one bit for bit, for
    every source (a one-shot iterator too: one pass) and through fit_clipped_gaussian."""
    s = patterns
    zero_one = (s + 1) // 2  # the 0 / 1 coding of the same patterns
    with jax.enable_x64(True):
        ref = fit_clipped_gaussian(s, 2, bias=bias)
        runs = [fit_clipped_gaussian([s[c] for c in _cuts(500, 150)], 2, bias=bias),
                fit_clipped_gaussian_stream(iter([zero_one[c] for c in _cuts(500, 150)]), 2,
                                            bias=bias)]
        if bias:
            runs += [fit_clipped_gaussian_stream(source, 2, bias=bias)
                     for source in _sources(s, 150, tmp_path, "s").values()]
    for ours in runs:
        assert ours.num_examples == ref.num_examples
        for name in ("weights", "bias", "gaussian_corr", "eigenvalues", "binary_corr",
                     "means"):
            np.testing.assert_array_equal(np.asarray(getattr(ours, name)),
                                          np.asarray(getattr(ref, name)), err_msg=name)


def test_clipped_gaussian_stream_bad_batches(patterns):
    s = patterns
    with pytest.raises(ValueError, match="batch 1 .*0 / 1"):
        fit_clipped_gaussian_stream([s[:100], (s[100:] + 1) // 2], 2)
    with pytest.raises(ValueError, match="batch 2"):
        fit_clipped_gaussian_stream([s[:100], s[100:200], s[200:, :5]], 2)
    with pytest.raises(ValueError, match="empty"):
        fit_clipped_gaussian_stream(lambda: iter(()), 2)
    bad = s[100:].astype(float)
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="batch 1 .*NaN"):
        fit_clipped_gaussian_stream([s[:100].astype(float), bad], 2)


# ---------------------------------------------------------------------------------------
# MCVQ

SCHEDULE = np.concatenate([np.linspace(20.0, 1.0, 8), np.ones(72)])


@pytest.fixture(scope="module")
def mcvq_case(tmp_path_factory):
    """130 planted examples (D = 9, K = 3) with 10% missing (NaN there) and the in-memory
    fits with and without the mask, two restarts, float64."""
    with jax.enable_x64(True):
        data = mcvq.generate(jax.random.key(2), num_examples=130, dim=9, num_vqs=3,
                             num_states=3, missing_fraction=0.1)
        mask = np.asarray(data.mask)
        x = np.where(mask, np.asarray(data.x, np.float64), np.nan)
        full = np.asarray(data.x, np.float64)
        kwargs = dict(rng_key=jax.random.key(10), temperature_schedule=SCHEDULE,
                      num_restarts=2)
        ref = fit_mcvq(x, 3, 4, mask=mask, **kwargs)
        ref_full = fit_mcvq(full, 3, 4, **kwargs)
    return x, mask, full, kwargs, ref, ref_full, tmp_path_factory.mktemp("mcvq")


def _same_mcvq(ours, ref):
    assert ours.num_iterations == ref.num_iterations and ours.converged == ref.converged
    assert ours.best_restart == ref.best_restart
    _close(ours, ref, ("g", "mu", "sigma", "free_energy_trace", "temperature_trace",
                       "restart_free_energies"))
    np.testing.assert_array_equal(np.asarray(ours.restart_converged),
                                  np.asarray(ref.restart_converged))
    assert ours.variance_floor == pytest.approx(ref.variance_floor, rel=TOL)


def test_mcvq_stream_with_masks_equals_in_memory(mcvq_case):
    """(x, mask) pairs, and x and mask as two memmaps cut alike: the same start, E-steps,
    iterations (each restart stopping on its own) and m."""
    x, mask, _, kwargs, ref, _, tmp = mcvq_case
    assert ref.converged and np.asarray(ref.restart_converged).all()
    pairs = [(x[c], mask[c]) for c in _cuts(130, 50)]
    np.save(tmp / "x.npy", x)
    np.save(tmp / "mask.npy", mask)
    x_map, mask_map = (np.load(tmp / f"{n}.npy", mmap_mode="r") for n in ("x", "mask"))
    with jax.enable_x64(True):
        ours = fit_mcvq_stream(pairs, 3, 4, return_m=True, **kwargs)
        mapped = fit_mcvq(BatchSource(x_map, 50), 3, 4, mask=BatchSource(mask_map, 50),
                          **kwargs)  # through fit_mcvq's dispatch
        by_callable = fit_mcvq_stream(lambda: iter(pairs), 3, 4, **kwargs)
    for run in (ours, mapped, by_callable):
        _same_mcvq(run, ref)
    np.testing.assert_allclose(np.asarray(ours.m), np.asarray(ref.m), rtol=TOL, atol=TOL)
    assert mapped.m is None


def test_mcvq_stream_without_mask_equals_in_memory(mcvq_case):
    _, _, full, kwargs, _, ref_full, _ = mcvq_case
    with jax.enable_x64(True):
        ours = fit_mcvq(lambda: (full[c] for c in _cuts(130, 50)), 3, 4, **kwargs)
    _same_mcvq(ours, ref_full)


def test_mcvq_stream_bad_input(mcvq_case):
    x, mask, full, *_ = mcvq_case
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="batch 1 .*9 columns"):
        fit_mcvq_stream([full[:50], full[50:, :8]], 3, 4, rng_key=key)
    with pytest.raises(ValueError, match="empty"):
        fit_mcvq_stream(lambda: iter(()), 3, 4, rng_key=key)
    with pytest.raises(ValueError, match="batch 1 .*NaN"):  # NaN without a mask
        fit_mcvq_stream([full[:50], x[50:]], 3, 4, rng_key=key)
    observed_nan = x[50:].copy()
    observed_nan[np.nonzero(mask[50:])[0][0], np.nonzero(mask[50:])[1][0]] = np.nan
    with pytest.raises(ValueError, match="batch 1 .*where mask is True"):
        fit_mcvq_stream([(x[:50], mask[:50]), (observed_nan, mask[50:])], 3, 4, rng_key=key)
    with pytest.raises(ValueError, match="mask batch 1"):
        fit_mcvq_stream([(x[:50], mask[:50]), (x[50:], mask[50:, :8])], 3, 4, rng_key=key)
    with pytest.raises(ValueError, match="one-shot"):
        fit_mcvq_stream(iter([full[:50], full[50:]]), 3, 4, rng_key=key)
    with pytest.raises(ValueError, match="checkpoints"):
        fit_mcvq([full[:50], full[50:]], 3, 4, rng_key=key, devices=1)


def test_gvq_stream_bad_input(gvq_case):
    x, *_ = gvq_case
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="batch 1 .*6 columns"):
        fit_gvq_stream([x[:100], x[100:, :5]], 4, rng_key=key)
    with pytest.raises(ValueError, match="empty"):
        fit_gvq_stream(lambda: iter(()), 4, rng_key=key)
    bad = x[100:].copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="batch 1 .*NaN"):
        fit_gvq([x[:100], bad], 4, rng_key=key)
