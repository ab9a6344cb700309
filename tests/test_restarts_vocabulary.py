"""``num_restarts`` and ``progress_bar`` on the iterative fits that gained them.

For a representative set (a stream fit, an SVI fit, a VB fit and online learning):
``num_restarts=1`` is the fit without the argument, bit for bit; ``num_restarts=3`` keeps
the best of the starts that the single fits from the corresponding keys give, by the
fit's own objective in its ``direction``; ``num_restarts=0`` is refused naming the
argument. The stream fits take ``progress_bar=True``. Tiny data and few iterations: the
rule is checked, not the fits.
"""

import warnings

import jax
import numpy as np
import pytest

import inference
from inference.mixture.em import _start_keys
from ppl_models.diagnostics import ConvergenceWarning

KEY = jax.random.key(0)


@pytest.fixture(scope="module")
def x():
    return np.asarray(jax.random.normal(jax.random.key(2), (40, 2)))


def _stream(x):
    return [x[:20], x[20:]]


def _split(rng_key, num):
    return list(jax.random.split(rng_key, num))


#: name -> (call(x, rng_key, **kw), the keys of its starts (rng_key, n) -> keys, rtol: starts
#: run side by side (``vmap``) round as the single fits do only up to float rounding).
FITS = {
    "fit_mixture_stream": (
        lambda x, k, **kw: inference.fit_mixture_stream(_stream(x), 3, rng_key=k,
                                                        max_iterations=4, **kw),
        _start_keys, 0.0),
    "fit_online": (
        lambda x, k, **kw: inference.fit_online(x, 3, rng_key=k, max_iterations=2, **kw),
        _split, 0.0),
    "fit_vb_mixture": (
        lambda x, k, **kw: inference.fit_vb_mixture(x, 3, rng_key=k, max_iterations=5, **kw),
        _split, 1e-5),
    "fit_ppca_svi": (
        lambda x, k, **kw: inference.ppca.baselines.fit_ppca_svi(
            np.hstack([x, x[:, :1] - x[:, 1:]]), 1, rng_key=k, num_steps=5, **kw),
        _split, 1e-5),
}


@pytest.fixture(scope="module")
def fitted(x):
    """Each fit's results, computed once: default, num_restarts=1, num_restarts=3 and the
    single fits from the three starts' keys."""
    cache = {}

    def get(name):
        if name not in cache:
            call, keys, _ = FITS[name]
            with warnings.catch_warnings():  # a few iterations: not converged, by design
                warnings.simplefilter("ignore", ConvergenceWarning)
                cache[name] = (call(x, KEY), call(x, KEY, num_restarts=1),
                               call(x, KEY, num_restarts=3),
                               [call(x, key) for key in keys(KEY, 3)])
        return cache[name]

    return get


def _leaves(result):
    return [np.asarray(jax.random.key_data(leaf) if jax.dtypes.issubdtype(
        getattr(leaf, "dtype", np.float32), jax.dtypes.prng_key) else leaf)
        for leaf in jax.tree.leaves(result) if not isinstance(leaf, str)]


@pytest.mark.parametrize("name", sorted(FITS))
def test_one_restart_is_the_fit_without_the_argument(name, fitted):
    default, one, _, _ = fitted(name)
    assert one.restart_objectives is None
    for a, b in zip(_leaves(default), _leaves(one), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", sorted(FITS))
def test_restarts_keep_the_best_of_the_single_starts(name, fitted):
    _, _, best, singles = fitted(name)
    rtol = FITS[name][2]
    sign = 1.0 if best.direction == "max" else -1.0
    finals = np.asarray(best.restart_objectives, float)
    assert finals.shape == (3,)
    # Every start is the single fit from its key, and the result is the best of them.
    np.testing.assert_allclose(finals, [s.objective for s in singles], rtol=rtol, atol=1e-6)
    assert sign * best.objective >= max(sign * s.objective for s in singles) - rtol * abs(
        best.objective) - 1e-6
    np.testing.assert_allclose(best.objective, (max if sign > 0 else min)(finals), rtol=1e-6)
    if rtol == 0.0:  # the starts round as the single fits: the kept one is bit for bit one
        kept = singles[int(np.argmax(sign * finals))]
        np.testing.assert_array_equal(np.asarray(best.trace.objective),
                                      np.asarray(kept.trace.objective))


@pytest.mark.parametrize("name", sorted(FITS))
def test_zero_restarts_are_refused_naming_the_argument(name, x):
    with pytest.raises(ValueError, match="num_restarts"):
        FITS[name][0](x, KEY, num_restarts=0)


def test_the_online_stream_keeps_the_best_last_pass(x):
    fits = [inference.fit_online_stream(_stream(x), 3, rng_key=k, max_iterations=2)
            for k in _split(KEY, 2)]
    best = inference.fit_online_stream(_stream(x), 3, rng_key=KEY, max_iterations=2,
                                       num_restarts=2)
    # The objective of a start: its last pass's mean prequential log-likelihood (two
    # batches of equal size: the mean of their entries).
    finals = [float(np.mean(np.asarray(f.trace.objective)[-2:])) for f in fits]
    np.testing.assert_allclose(best.restart_objectives, finals, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(best.means),
                                  np.asarray(fits[int(np.argmax(finals))].means))


def test_restarts_need_drawn_starts(x):
    with pytest.raises(ValueError, match="init_means"):
        inference.fit_mixture_stream(_stream(x), 2, init_means=x[:2], num_restarts=2)
    with pytest.raises(ValueError, match="init_means"):
        inference.fit_online_stream(_stream(x), 2, init_means=x[:2], num_restarts=2)


def test_the_stream_fits_take_a_progress_bar(x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mixture = FITS["fit_mixture_stream"][0](x, KEY, progress_bar=True)  # compiled above
        mcvq = inference.fit_mcvq_stream(_stream(x), 2, 2, rng_key=KEY, max_iterations=2,
                                         progress_bar=True)
    assert mixture.num_iterations >= 1 and mcvq.num_iterations >= 1


def test_fit_mixture_passes_its_restarts_to_the_stream_fit(x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ours = inference.fit_mixture(_stream(x), 3, rng_key=KEY, num_restarts=3,
                                     max_iterations=4)
        direct = inference.fit_mixture_stream(_stream(x), 3, rng_key=KEY, num_restarts=3,
                                              max_iterations=4, init="kmeans")
    assert np.asarray(ours.restart_objectives).shape == (3,)
    np.testing.assert_array_equal(np.asarray(ours.means), np.asarray(direct.means))
