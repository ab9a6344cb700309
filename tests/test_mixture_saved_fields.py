"""Mixture results saved before their traces became one ``trace`` NamedTuple still load."""

from pathlib import Path

import numpy as np

import inference
from inference.mixture.result import MixtureResult, MixtureTrace
from inference.mixture.vb import VBMixtureResult, VBMixtureTrace

SAVED = Path(__file__).resolve().parent / "data" / "saved_0_1"


def test_an_old_mixture_result_gets_its_trace_cut_at_num_iterations():
    result = inference.load(SAVED / "mixture.npz")
    assert type(result) is MixtureResult and type(result.trace) is MixtureTrace
    assert np.asarray(result.trace.objective).shape == (result.num_iterations,)
    assert np.asarray(result.trace.num_components).shape == (result.num_iterations,)


def test_an_old_vb_mixture_result_gets_its_trace_cut_at_num_iterations():
    result = inference.load(SAVED / "vb_mixture.npz")
    assert type(result) is VBMixtureResult and type(result.trace) is VBMixtureTrace
    for values in result.trace:
        assert np.asarray(values).shape == (result.num_iterations,)
    assert float(result.trace.objective[-1]) == result.bound


def test_a_new_mixture_result_round_trips(tmp_path):
    import jax

    from inference.mixture.em import fit_mixture

    x = np.asarray(jax.random.normal(jax.random.key(0), (60, 2)))
    fit = fit_mixture(x, 2, rng_key=jax.random.key(1), max_iterations=200)
    again = inference.load(fit.save(tmp_path / "fit.npz"))
    assert type(again.trace) is MixtureTrace
    np.testing.assert_array_equal(np.asarray(again.trace.objective),
                                  np.asarray(fit.trace.objective))
