"""One selection entry point: the YING-YANG criteria inside ``model_selection``.

``compare_criteria`` and ``select_num_components`` (``inference.mixture.selection``) are
wrappers of :func:`inference.model_selection`: the same key gives the same values,
choices and fits either way (L. Xu, "YING-YANG machine: a Bayesian-Kullback scheme for
unified learnings and new results on vector quantization", ICONIP 1995).
"""

import warnings

import jax
import numpy as np
import pytest

import inference
from inference import compare_criteria, model_selection, select_num_components
from inference.mixture.selection import MODEL_SELECTION_NAMES
from ppl_models import mixture
from ppl_models.diagnostics import NumericalWarning

CANDIDATES = (1, 2, 3)
#: Tiny and quick: 60 rows, one start per fit, few iterations.
SETTINGS = dict(num_restarts=1, max_iterations=20)
CRITERIA = ("J", "L_map", "L_stocha", "bic", "aic")


@pytest.fixture(scope="module")
def x():
    return np.asarray(mixture.generate(jax.random.key(5), 60, 2, 2, separation=5.0).x)


@pytest.fixture(scope="module")
def table(x):
    return compare_criteria(x, CANDIDATES, criteria=CRITERIA, rng_key=jax.random.key(3),
                            **SETTINGS)


@pytest.fixture(scope="module")
def result(x):
    return model_selection(x, CANDIDATES, model="mixture",
                           criteria=[MODEL_SELECTION_NAMES[c] for c in CRITERIA] + ["bic"],
                           rng_key=jax.random.key(3), **SETTINGS)


def _same_fits(fits_a, fits_b):
    for a, b in zip(fits_a, fits_b, strict=True):
        assert a.mode == b.mode and a.num_components == b.num_components
        np.testing.assert_array_equal(np.asarray(a.means), np.asarray(b.means))
        assert float(a.L_stocha) == float(b.L_stocha)


def test_model_selection_gives_compare_criteria_values_exactly(table, result):
    assert list(table) == list(CRITERIA)
    for name, selection in table.items():
        ms_name = MODEL_SELECTION_NAMES[name]
        assert result.values[ms_name] == selection.values  # exactly, not to a tolerance
        assert result.choice[ms_name] == selection.choice
        assert result.details[ms_name].values == selection.values
        assert selection.degenerate == ()
        _same_fits(result.details[ms_name].fits, selection.fits)
    # One stochastic run serves L_stocha, bic and aic, as before.
    for index in range(len(CANDIDATES)):
        assert (table["bic"].fits[index] is table["aic"].fits[index]
                is table["L_stocha"].fits[index])
    # model_selection's own "bic" is another number (per example, higher is better).
    assert result.values["bic"] != result.values["yy_bic"]


def test_select_num_components_is_compare_criteria_of_one_criterion(x, table):
    for criterion in ("L_map", "bic"):
        one = select_num_components(x, CANDIDATES, criterion=criterion,
                                    rng_key=jax.random.key(3), **SETTINGS)
        assert one.criterion == criterion
        assert one.values == table[criterion].values
        assert one.choice == table[criterion].choice
        assert one.candidates == table[criterion].candidates
        _same_fits(one.fits, table[criterion].fits)


def test_the_yingyang_criteria_are_lower_is_better_in_table_json_and_direction(result, table):
    assert result.direction("J") == "min" and result.direction("bic") == "max"
    report = result.to_dict()["criteria"]
    assert report["J"]["direction"] == "min" and "direction" not in report["bic"]
    assert report["yy_aic"]["values"] == list(table["aic"].values)
    text = result.table()
    assert "lower is better: J, L_map, L_stocha, yy_bic, yy_aic" in text
    # The least value is the choice.
    for name in ("J", "L_map", "L_stocha", "yy_bic", "yy_aic"):
        values = result.values[name]
        assert result.choice[name] == CANDIDATES[int(np.argmin(values))]


def test_result_with_yingyang_details_saves_and_loads(result, tmp_path):
    again = inference.load(result.save(tmp_path / "selection.npz"))
    assert again.values == result.values and again.choice == result.choice
    assert again.details["J"].values == result.details["J"].values
    np.testing.assert_array_equal(np.asarray(again.details["J"].fits[1].means),
                                  np.asarray(result.details["J"].fits[1].means))


def test_the_criteria_are_declared_once_with_their_direction():
    from inference.app.selection import selectable_families
    from inference.app.selection_scoring import CRITERIA as ALL
    from inference.app.selection_scoring import LOWER_IS_BETTER, YINGYANG
    from inference.mixture.scorer import YINGYANG_CRITERIA

    assert list(YINGYANG) == list(YINGYANG_CRITERIA) == list(MODEL_SELECTION_NAMES.values())
    assert LOWER_IS_BETTER == set(YINGYANG) and set(YINGYANG) <= set(ALL)
    spec = selectable_families()["mixture"]
    assert set(YINGYANG) <= set(spec.criteria) and not set(YINGYANG) & set(
        spec.default_criteria)
    assert not set(YINGYANG) & set().union(*(s.criteria for name, s in
                                            selectable_families().items() if name != "mixture"))


def test_bad_criterion_names_criteria(x):
    with pytest.raises(ValueError, match=r"^criteria must .*'L_mapp'"):
        model_selection(x, CANDIDATES, model="mixture", criteria=["J", "L_mapp"],
                        rng_key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"^criteria must be among .*'yy_bic'"):
        compare_criteria(x, CANDIDATES, criteria=("yy_bic",), rng_key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"^criterion must be one of .*'yy_loo'"):
        select_num_components(x, CANDIDATES, criterion="yy_loo", rng_key=jax.random.key(0))
    with pytest.raises(TypeError, match="fit_mixture"):  # model_selection's, not the fit's
        compare_criteria(x, CANDIDATES, rng_key=jax.random.key(0), num_folds=3)


def test_collapsed_candidates_are_excluded_and_the_wrapper_warns_as_before():
    # Six points: three components of two points each have singular covariances.
    x = np.array([[0.0, 0.0], [1.0, 0.2], [5.0, 5.0], [6.0, 5.3], [0.0, 9.0], [1.0, 9.4]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = compare_criteria(x, [1, 3], criteria=("L_stocha", "bic"),
                                 rng_key=jax.random.key(0), num_restarts=1)
    said = [str(w.message) for w in caught if issubclass(w.category, NumericalWarning)]
    assert said == [f"compare_criteria: for k in [3] every restart of mode 'stochastic' "
                    f"collapsed a component; excluded from {c!r}" for c in ("L_stocha", "bic")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = model_selection(x, [1, 3], model="mixture", criteria=("L_stocha", "yy_bic"),
                                 rng_key=jax.random.key(0), num_restarts=1)
    said = [str(w.message) for w in caught if issubclass(w.category, NumericalWarning)]
    assert said == [f"model_selection: for k in [3] every restart of mode 'stochastic' "
                    f"collapsed a component; excluded from {c!r}" for c in ("L_stocha", "yy_bic")]
    for name in ("L_stocha", "bic"):
        ms_name = MODEL_SELECTION_NAMES[name]
        assert table[name].degenerate == (3,) and table[name].choice == 1
        assert result.values[ms_name] == table[name].values and np.isinf(table[name].values[1])
        assert list(result.excluded[ms_name]) == ["3"] and result.choice[ms_name] == 1
    with pytest.warns(NumericalWarning, match="compare_criteria"), \
            pytest.raises(ValueError, match="every candidate collapsed under 'bic'"):
        compare_criteria(x, [3], criteria=("bic",), rng_key=jax.random.key(0), num_restarts=1)


@pytest.mark.filterwarnings("ignore::ppl_models.diagnostics.NumericalWarning")  # Pareto k
@pytest.mark.filterwarnings("ignore::ppl_models.diagnostics.ConvergenceWarning")  # 20 draws
@pytest.mark.slow  # two short NUTS chains
def test_yy_loo_is_compare_criteria_loo(x):
    options = {"num_warmup": 20, "num_samples": 20}
    table = compare_criteria(x, (1, 2), criteria=("loo",), rng_key=jax.random.key(32),
                             loo_options=options)
    result = model_selection(x, (1, 2), model="mixture", criteria=("yy_loo",),
                             rng_key=jax.random.key(32), num_warmup=20, num_samples=20)
    assert result.values["yy_loo"] == table["loo"].values
    assert result.choice["yy_loo"] == table["loo"].choice
    assert result.details["yy_loo"].fits == table["loo"].fits
    for name, column in table["loo"].arviz_compare.items():
        np.testing.assert_array_equal(result.details["yy_loo"].arviz_compare[name], column)
