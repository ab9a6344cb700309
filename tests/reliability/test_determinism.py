"""The same rng_key gives bit-identical results, for every algorithm (issue 10).

Each algorithm runs twice with the same key on the same machine; every array of
the two results must be equal bit for bit (``assert_array_equal``, NaNs equal),
every number equal. Sizes are tiny: these tests are about reproducibility, not
about answers. The default run covers every association method and one fit of
each family of custom EM; the slow run (``-m slow``) covers every algorithm
(each fit_mixture mode and online method, VB, the clipped Gaussian and the
SVI/MCMC baselines). Each result also goes through ``save`` and ``inference.load``
and must come back bit for bit. Not-converged warnings of the short runs are silenced (the runs
are cut short on purpose); any other project warning stays an error.
"""

from __future__ import annotations

import os
import tempfile
import warnings

import jax
import numpy as np
import pytest

from inference import (
    associate,
    fit_clipped_gaussian,
    fit_gvq,
    fit_mcvq,
    fit_mixture,
    fit_vb_mcvq,
    fit_vb_mixture,
    load,
)
from inference.association.core import METHODS, load_methods
from inference.clipped.baselines import fit_clipped_mcmc, fit_clipped_svi
from inference.gvq.baselines import fit_gvq_mcmc, fit_gvq_svi
from inference.mcvq.baselines import fit_mcvq_svi
from inference.mixture.baselines import fit_mixture_mcmc, fit_mixture_svi
from inference.mixture.online import fit_online
from ppl_models import clipped_gaussian, gvq, mcvq, mixture
from ppl_models.diagnostics import ConvergenceWarning

KEY = jax.random.key(7)
load_methods()


def _leaves(result):
    """The arrays and numbers of a result (NamedTuples, dicts and tuples flattened)."""
    out = []
    for leaf in jax.tree_util.tree_leaves(result):
        if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype,
                                                                 jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        if isinstance(leaf, np.ndarray | jax.Array | int | float | bool | np.generic | str):
            out.append(leaf)
    return out


def assert_identical(run):
    """Run ``run()`` twice (warnings of cut-short runs silenced) and compare bit for bit;
    the result also saves and loads back bit for bit (``result.save``, ``inference.load``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        first, second = run(), run()
    _assert_same_leaves(first, second)
    assert callable(getattr(first, "save", None)), f"{type(first).__name__} has no save()"
    with tempfile.TemporaryDirectory() as directory:
        loaded = load(first.save(os.path.join(directory, "result")))
    assert type(loaded) is type(first)
    _assert_same_leaves(first, loaded)


def _assert_same_leaves(first, second):
    a, b = _leaves(first), _leaves(second)
    assert len(a) == len(b) > 0
    for left, right in zip(a, b, strict=True):
        if isinstance(left, str):
            assert left == right
        else:
            np.testing.assert_array_equal(np.asarray(left), np.asarray(right))


@pytest.fixture(scope="module")
def planted():
    data = gvq.generate_planted(jax.random.key(1), 12, 3, 5, noise_scale=0.2)
    return np.asarray(data.x), np.asarray(data.features)


@pytest.fixture(scope="module")
def blobs():
    return np.asarray(mixture.generate(jax.random.key(2), 60, 3, 2, separation=5.0).x)


@pytest.fixture(scope="module")
def mcvq_data():
    return np.asarray(mcvq.generate(jax.random.key(3), 20, 6, 2, 2).x)


@pytest.fixture(scope="module")
def spins():
    return np.asarray(clipped_gaussian.generate(jax.random.key(4), 80, 6, 2).s)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_association_methods(planted, method):
    x, features = planted
    assert_identical(lambda: associate(features, x, method, rng_key=KEY))


@pytest.mark.parametrize("method", ["exact", pytest.param("br", marks=pytest.mark.slow)])
def test_fit_gvq(planted, method):
    x, _ = planted
    assert_identical(lambda: fit_gvq(x, 3, method=method, rng_key=KEY, max_iterations=3,
                                     num_restarts=2))


@pytest.mark.parametrize("mode", [pytest.param("stochastic", marks=pytest.mark.slow),
                                  pytest.param("map", marks=pytest.mark.slow), "nearest"])
def test_fit_mixture(blobs, mode):
    assert_identical(lambda: fit_mixture(blobs, 3, mode=mode, rng_key=KEY, max_iterations=5))


@pytest.mark.parametrize("method", [*(pytest.param(m, marks=pytest.mark.slow) for m in
                                      ("adaptive_em", "cl", "fscl", "cl_posterior")), "rpcl"])
def test_fit_online(blobs, method):
    assert_identical(lambda: fit_online(blobs, 3, method=method, rng_key=KEY))


@pytest.mark.slow
def test_fit_vb_mixture(blobs):
    assert_identical(lambda: fit_vb_mixture(blobs, 4, rng_key=KEY, max_iterations=5))


@pytest.mark.slow
def test_fit_mcvq(mcvq_data):
    assert_identical(lambda: fit_mcvq(mcvq_data, 2, 2, rng_key=KEY, num_iterations=5))


@pytest.mark.slow
def test_fit_vb_mcvq(mcvq_data):
    assert_identical(lambda: fit_vb_mcvq(mcvq_data, 3, 3, rng_key=KEY, max_iterations=5,
                                         moves=False))


@pytest.mark.slow
def test_fit_clipped_gaussian(spins):
    assert_identical(lambda: fit_clipped_gaussian(spins, 2))


@pytest.mark.slow
def test_svi_baselines(planted, blobs, mcvq_data, spins):
    x, _ = planted
    assert_identical(lambda: fit_gvq_svi(x, 3, rng_key=KEY, num_steps=5, num_restarts=1))
    assert_identical(lambda: fit_mixture_svi(blobs, 3, rng_key=KEY, num_steps=5))
    assert_identical(lambda: fit_mcvq_svi(mcvq_data, 2, 2, rng_key=KEY, num_steps=5))
    assert_identical(lambda: fit_clipped_svi(spins, 2, rng_key=KEY, num_steps=5))


@pytest.mark.slow
def test_mcmc_baselines(planted, blobs, spins):
    x, _ = planted
    small = dict(rng_key=KEY, num_warmup=5, num_samples=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # R-hat / divergence notes of 4-draw chains
        assert_identical(lambda: fit_gvq_mcmc(x, 2, **small))
        assert_identical(lambda: fit_mixture_mcmc(blobs, 2, **small))
        assert_identical(lambda: fit_clipped_mcmc(spins, 2, **small))
