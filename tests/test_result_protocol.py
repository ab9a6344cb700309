"""The result protocol and the one vocabulary, over every registered fit.

Every fit's result has ``converged``, ``num_iterations``, a ``trace`` whose ``objective``
holds the objective per iteration, ``objective`` / ``objective_name`` / ``direction``,
``save`` / ``load``, and ``to_inference_data`` where it holds draws
(:mod:`inference.engine.protocol`). Every registered fit or baseline is either called
here on tiny data (:data:`CALLS`) or named in :data:`NOT_FITS` with the reason, so a new
registered function must be placed in one of the two.
"""

import inspect
import warnings

import jax
import numpy as np
import pytest

import inference
from inference.engine.protocol import DIRECTIONS, ZooDeprecationWarning
from ppl_models import gvq
from ppl_models.diagnostics import ConvergenceWarning
from ppl_models.registry import FAMILIES
from ppl_models.validation import MissingKeyError

KEY = jax.random.key(0)


def _gvq_x():
    return np.asarray(gvq.generate_planted(jax.random.key(1), 24, 2, 4).x)


def _normal(shape, seed=2):
    return np.asarray(jax.random.normal(jax.random.key(seed), shape))


def _binary(shape=(60, 4)):
    return np.where(_normal(shape, 3) + 0.2 * _normal(shape[1:], 4) > 0, 1.0, -1.0)


def _stream(x):
    return [x[: len(x) // 2], x[len(x) // 2:]]


#: Registered name -> (call(rng_key) -> result, slow). Small sizes and few iterations:
#: the protocol is what is checked, not the fit.
CALLS = {
    "fit_gvq": (lambda k: inference.fit_gvq(_gvq_x(), 2, rng_key=k, max_iterations=3,
                                             num_restarts=2), False),
    "fit_mixture": (lambda k: inference.fit_mixture(_normal((40, 2)), 2, rng_key=k,
                                                    max_iterations=3), False),
    "fit_ppca": (lambda k: inference.fit_ppca(_normal((30, 3)), 1, rng_key=k,
                                              max_iterations=3), False),
    "fit_clipped_gaussian": (lambda k: inference.fit_clipped_gaussian(_binary(), 2), False),
    "fit_mcvq": (lambda k: inference.fit_mcvq(_normal((20, 4)), 2, 2, rng_key=k,
                                              max_iterations=3), False),
    "fit_gvq_stream": (lambda k: inference.fit_gvq_stream(_stream(_gvq_x()), 2, rng_key=k,
                                                          max_iterations=2), True),
    "fit_gvq_svi": (lambda k: inference.gvq.baselines.fit_gvq_svi(
        _gvq_x(), 2, rng_key=k, num_steps=3, num_restarts=1), True),
    "fit_gvq_mcmc": (lambda k: inference.gvq.baselines.fit_gvq_mcmc(
        _gvq_x(), 2, rng_key=k, num_warmup=4, num_samples=4), True),
    "fit_clipped_gaussian_stream": (lambda k: inference.fit_clipped_gaussian_stream(
        _stream(_binary()), 2), True),
    "fit_clipped_svi": (lambda k: inference.clipped.baselines.fit_clipped_svi(
        _binary(), 2, rng_key=k, num_steps=3), True),
    "fit_clipped_mcmc": (lambda k: inference.clipped.baselines.fit_clipped_mcmc(
        _binary(), 2, rng_key=k, num_warmup=4, num_samples=4, num_predictive_draws=2), True),
    "fit_mixture_stream": (lambda k: inference.fit_mixture_stream(
        _stream(_normal((40, 2))), 2, rng_key=k, max_iterations=2), True),
    "fit_online": (lambda k: inference.fit_online(_normal((40, 2)), 3, rng_key=k), True),
    "fit_online_stream": (lambda k: inference.fit_online_stream(
        _stream(_normal((40, 2))), 3, rng_key=k), True),
    "fit_vb_mixture": (lambda k: inference.fit_vb_mixture(_normal((40, 2)), 3, rng_key=k,
                                                          max_iterations=3), True),
    "fit_mixture_svi": (lambda k: inference.mixture.baselines.fit_mixture_svi(
        _normal((40, 2)), 2, rng_key=k, num_steps=3), True),
    "fit_mixture_mcmc": (lambda k: inference.mixture.baselines.fit_mixture_mcmc(
        _normal((40, 2)), 2, rng_key=k, num_warmup=4, num_samples=4), True),
    "fit_mcvq_stream": (lambda k: inference.fit_mcvq_stream(
        _stream(_normal((20, 4))), 2, 2, rng_key=k, max_iterations=2), True),
    "fit_vb_mcvq": (lambda k: inference.fit_vb_mcvq(_normal((20, 4)), 2, 2, rng_key=k,
                                                    max_iterations=3, moves=False), True),
    "fit_mcvq_svi": (lambda k: inference.mcvq.baselines.fit_mcvq_svi(
        _normal((20, 4)), 2, 2, rng_key=k, num_steps=3), True),
    "fit_mcvq_meanfield_svi": (lambda k: inference.mcvq.baselines.fit_mcvq_meanfield_svi(
        _normal((20, 4)), 2, 2, rng_key=k, num_steps=3), True),
    "fit_ppca_svi": (lambda k: inference.ppca.baselines.fit_ppca_svi(
        _normal((30, 3)), 1, rng_key=k, num_steps=3), True),
    "fit_ppca_mcmc": (lambda k: inference.ppca.baselines.fit_ppca_mcmc(
        _normal((30, 3)), 1, rng_key=k, num_warmup=4, num_samples=4, num_chains=1), True),
}

#: Registered functions that are not fits, and what they return instead.
NOT_FITS = {
    "associate": "a search for every example's states: per-example energy and converged",
    "associate_sets": "a search for every example's states",
    "map_associate": "a search for every example's states",
    "gibbs_associate": "a search for every example's states",
    "infer_states": "states of new data under a fitted MCVQ",
    "reconstruct": "a reconstruction from fitted MCVQ parameters",
    "fit_variational": "the E-step at given MCVQ parameters (an MCVQScore)",
    "select_num_components": "a selection among fits (SelectionResult; each fit follows "
                             "the protocol)",
    "compare_criteria": "a table of criteria over fits",
    "mixture_loo": "a PSIS-LOO score (MixtureLOO)",
}


def _registered():
    return sorted(name for family in FAMILIES.values()
                  for name in {**family.fits, **family.baselines})


def _function(name):
    for family in FAMILIES.values():
        if name in {**family.fits, **family.baselines}:
            return {**family.fits, **family.baselines}[name]
    raise KeyError(name)


def test_every_registered_function_is_a_checked_fit_or_named_as_not_one():
    registered = set(_registered())
    assert registered == set(CALLS) | set(NOT_FITS), (
        f"not placed: {sorted(registered - set(CALLS) - set(NOT_FITS))}; "
        f"gone: {sorted((set(CALLS) | set(NOT_FITS)) - registered)}")
    assert not set(CALLS) & set(NOT_FITS)


@pytest.fixture(scope="module")
def results():
    """Each fit's result, computed once per module."""
    cache = {}

    def get(name):
        if name not in cache:
            with warnings.catch_warnings():  # a few iterations: not converged, by design
                warnings.simplefilter("ignore", ConvergenceWarning)
                cache[name] = CALLS[name][0](KEY)
        return cache[name]

    return get


def _params():
    return [pytest.param(name, marks=[pytest.mark.slow] if slow else [])
            for name, (_, slow) in sorted(CALLS.items())]


@pytest.mark.parametrize("name", _params())
def test_every_fit_result_follows_the_protocol(name, results, tmp_path):
    result = results(name)
    assert isinstance(result.converged, bool | np.bool_) or np.ndim(result.converged) == 0
    assert int(result.num_iterations) >= 1
    objective = np.asarray(result.trace.objective, dtype=float)
    assert objective.shape[-1] >= 1 and np.isfinite(objective).any()
    assert isinstance(result.objective_name, str) and result.objective_name
    assert result.direction in DIRECTIONS
    assert np.isfinite(float(result.objective))
    path = result.save(tmp_path / "result.npz")
    again = type(result).load(path)
    assert type(again) is type(result)
    np.testing.assert_array_equal(np.asarray(again.trace.objective, float), objective)
    assert (again.objective_name, again.direction) == (result.objective_name, result.direction)
    if hasattr(result, "mcmc"):  # holds draws
        assert hasattr(result.to_inference_data(), "posterior")


def test_load_refuses_a_result_of_another_class(results, tmp_path):
    path = results("fit_ppca").save(tmp_path / "ppca.npz")
    with pytest.raises(inference.PersistenceError, match="PPCAResult, not a MixtureResult"):
        inference.MixtureResult.load(path)


def test_every_fit_s_result_class_has_the_protocol_attributes():
    """The classes themselves (cheap: no fit runs), including those only the slow run
    calls, and the generic EM results."""
    classes = {cls for family in FAMILIES.values() for cls in family.results} | {
        inference.MapEMResult}
    not_fit_results = {"AssociationResult", "DescriptionLength", "SelectionResult",
                       "MixtureLOO", "MCVQScore"}
    for cls in classes:
        if cls.__name__ in not_fit_results:
            continue
        missing = [a for a in ("converged", "num_iterations", "trace", "objective",
                               "objective_name", "direction", "save", "load")
                   if not hasattr(cls, a)]
        assert not missing, f"{cls.__name__} lacks {missing}"


def test_a_closed_form_fit_has_a_one_entry_trace(results):
    fit = results("fit_clipped_gaussian")
    assert fit.converged is True and fit.num_iterations == 1
    assert np.asarray(fit.trace.objective).shape == (1,)
    assert 0 <= fit.objective <= 1  # the mean residual variance of unit-variance units


@pytest.mark.parametrize("name", ["fit_gvq", "fit_mixture", "fit_ppca", "fit_mcvq"])
def test_a_stochastic_fit_without_rng_key_raises_naming_it(name):
    with pytest.raises(MissingKeyError, match="rng_key"):
        CALLS[name][0](None)


#: Iterative fits still without ``num_restarts`` (the "best of" rule) or ``progress_bar``
#: (none left; ``tests/test_restarts_vocabulary.py`` checks that the rule holds).
PENDING: set = set()


def _iterative():
    names = [name for name in CALLS if {"max_iterations", "num_steps"}
             & set(inspect.signature(_function(name)).parameters)]
    return [pytest.param(name, argument,
                         marks=[pytest.mark.xfail(strict=True, reason="pending")]
                         if (name, argument) in PENDING else [])
            for name in sorted(names) for argument in ("progress_bar", "num_restarts")]


@pytest.mark.parametrize(("name", "argument"), _iterative())
def test_every_iterative_fit_takes_the_vocabulary(name, argument):
    parameters = inspect.signature(_function(name)).parameters
    assert argument in parameters and parameters[argument].kind is inspect.Parameter.KEYWORD_ONLY


def test_map_states_and_associate_take_method_options_as_one_dict():
    from inference.gvq.constraints import associate_sets
    from inference.gvq.stream import fit_gvq_stream

    for fn in (inference.associate, inference.map_states, inference.fit_gvq, fit_gvq_stream,
               associate_sets):
        assert "method_options" in inspect.signature(fn).parameters, fn.__name__


def test_fit_gvq_method_options_as_keywords_still_work_with_a_deprecation_warning():
    data = gvq.generate_planted(jax.random.key(0), 12, 2, 4)
    common = dict(rng_key=jax.random.key(1), max_iterations=2, num_restarts=1)
    new = inference.fit_gvq(data.x, 2, method_options={"chunk_size": 2}, **common)
    with pytest.warns(ZooDeprecationWarning, match="fit_gvq: .*chunk_size.*method_options="):
        old = inference.fit_gvq(data.x, 2, chunk_size=2, **common)
    np.testing.assert_array_equal(np.asarray(old.features), np.asarray(new.features))
    with pytest.raises(TypeError, match="both as keywords and in method_options"):
        inference.fit_gvq(data.x, 2, chunk_size=2, method_options={"chunk_size": 2}, **common)


def test_associate_method_options_as_keywords_still_work_with_a_deprecation_warning():
    data = gvq.generate_planted(jax.random.key(0), 8, 2, 4)
    new = inference.associate(data.features, data.x, method_options={"chunk_size": 2})
    with pytest.warns(ZooDeprecationWarning, match="method_options="):
        old = inference.associate(data.features, data.x, chunk_size=2)
    np.testing.assert_array_equal(np.asarray(old.states), np.asarray(new.states))
