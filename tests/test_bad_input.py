"""Bad input to the public GVQ entry points raises a clear error naming the argument.

DESIGN.md, "Errors": public functions validate shape, dtype, NaN/inf, empty input
and impossible sizes, and raise ``ValueError``/``TypeError`` with a message that
names the argument, what was expected and what was given. The checks run before
any compilation, so every test here uses tiny arrays and takes milliseconds.
"""

import re

import jax
import numpy as np
import pytest

from inference import associate, fit_gvq
from inference.association.core import MAX_EXACT_FEATURES, METHODS
from inference.gvq.baselines import MAX_ENUMERATED_FEATURES, fit_gvq_svi, map_associate
from ppl_models.gvq import generate_planted

KEY = jax.random.key(0)
FEATURES = np.array([[1.0, 0.0, 1.0], [0.0, 2.0, 1.0]], np.float32)  # (2, 3)
X = np.array([[1.0, 0.0, 1.0], [0.0, 2.0, 1.0], [1.0, 2.0, 2.0], [0.0, 0.0, 0.0]], np.float32)


def with_entry(x, index, value):
    x = np.array(x)
    x[index] = value
    return x


#: The entry points that take data x, called with otherwise valid arguments.
X_ENTRY_POINTS = {
    "associate": lambda x: associate(FEATURES, x),
    "map_associate": lambda x: map_associate(FEATURES, x),
    "fit_gvq": lambda x: fit_gvq(x, 2, rng_key=KEY),
    "fit_gvq_svi": lambda x: fit_gvq_svi(x, 2, rng_key=KEY),
}

#: Bad x -> (exception, pattern of its message).
BAD_X = {
    "nan": (with_entry(X, (1, 2), np.nan), ValueError, r"^x contains 1 NaN or infinite"),
    "inf": (with_entry(X, (0, 0), np.inf), ValueError, r"^x contains 1 NaN or infinite"),
    "minus_inf": (with_entry(X, (3, 1), -np.inf), ValueError, r"^x contains 1 NaN or infinite"),
    "all_nan": (np.full((2, 3), np.nan), ValueError, r"^x contains 6 NaN or infinite"),
    "1d": (X[0], ValueError, r"^x must be 2-D .*got shape \(3,\)"),
    "3d": (X[None], ValueError, r"^x must be 2-D .*got shape \(1, 4, 3\)"),
    "scalar": (np.float32(1.0), ValueError, r"^x must be 2-D .*got shape \(\)"),
    "empty": (np.zeros((0, 3), np.float32), ValueError,
              r"^x must have at least 1 example.*got shape \(0, 3\)"),
    "no_columns": (np.zeros((4, 0), np.float32), ValueError, r"^x must have at least one"),
    "strings": (np.array([["a", "b", "c"]]), TypeError, r"^x must be a real numeric array"),
    "objects": (np.array([[1.0, None, 2.0]], dtype=object), TypeError,
                r"^x must be a real numeric array"),
}


@pytest.mark.parametrize("case", list(BAD_X))
@pytest.mark.parametrize("entry_point", list(X_ENTRY_POINTS))
def test_bad_x_raises_naming_x(entry_point, case):
    x, error, pattern = BAD_X[case]
    with pytest.raises(error, match=pattern):
        X_ENTRY_POINTS[entry_point](x)


@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")
def test_complex_x_raises_type_error():
    with pytest.raises(TypeError, match=r"^x must be"):
        associate(FEATURES, X + 1j)


@pytest.mark.parametrize("entry_point", ["associate", "map_associate"])
def test_x_columns_must_match_features(entry_point):
    x = np.ones((4, 5), np.float32)
    with pytest.raises(ValueError, match=r"^x must have 3 columns.*got shape \(4, 5\)"):
        X_ENTRY_POINTS[entry_point](x)


@pytest.mark.parametrize("fit", [fit_gvq, fit_gvq_svi], ids=["fit_gvq", "fit_gvq_svi"])
@pytest.mark.parametrize("init_features", [
    np.ones((2, 4)),  # columns do not match x
    np.ones((3, 3)),  # rows do not match num_features
    np.ones((3, 2, 3)),  # wrong number of restarts
    np.ones(3),  # 1-D
], ids=["columns", "rows", "restarts", "1d"])
def test_init_features_must_match_x_and_num_features(fit, init_features):
    with pytest.raises(ValueError, match=r"^init_features must have shape \(2, 3\) or \(4, 2, 3\)"):
        fit(X, 2, rng_key=KEY, num_restarts=4, init_features=init_features)


def test_fit_gvq_init_features_must_be_finite():
    with pytest.raises(ValueError, match=r"^init_features contains 1 NaN or infinite"):
        fit_gvq(X, 2, rng_key=KEY, init_features=with_entry(np.ones((2, 3)), (0, 1), np.nan))


def test_fit_gvq_per_restart_init_features_must_be_finite():
    init = with_entry(np.ones((2, 2, 3)), (1, 0, 0), np.nan)
    with pytest.raises(ValueError, match=r"^init_features contains"):
        fit_gvq(X, 2, rng_key=KEY, num_restarts=2, max_iterations=1, init_features=init)


@pytest.mark.parametrize("init_features", [
    with_entry(np.ones((2, 3)), (0, 1), np.nan),
    with_entry(np.ones((2, 2, 3)), (1, 0, 0), np.inf),
], ids=["2d", "3d"])
def test_fit_gvq_svi_init_features_must_be_finite(init_features):
    with pytest.raises(ValueError, match=r"^init_features contains"):
        fit_gvq_svi(X, 2, rng_key=KEY, num_restarts=2, num_steps=2, init_features=init_features)


# --- features of the association methods ----------------------------------------------

FEATURE_ENTRY_POINTS = {
    "associate": lambda features: associate(features, X),
    "map_associate": lambda features: map_associate(features, X),
}

BAD_FEATURES = {
    "no_features": (np.zeros((0, 3), np.float32), r"^features must have at least 1 .*\(0, 3\)"),
    "1d": (FEATURES[0], r"^features must be 2-D .*got shape \(3,\)"),
    "3d": (FEATURES[None], r"^features must be 2-D .*got shape \(1, 2, 3\)"),
    "nan": (with_entry(FEATURES, (1, 1), np.nan), r"^features contains 1 NaN or infinite"),
    "inf": (with_entry(FEATURES, (0, 2), -np.inf), r"^features contains 1 NaN or infinite"),
}


@pytest.mark.parametrize("case", list(BAD_FEATURES))
@pytest.mark.parametrize("entry_point", list(FEATURE_ENTRY_POINTS))
def test_bad_features_raise_naming_features(entry_point, case):
    features, pattern = BAD_FEATURES[case]
    with pytest.raises(ValueError, match=pattern):
        FEATURE_ENTRY_POINTS[entry_point](features)


@pytest.mark.parametrize(("entry_point", "maximum", "num_features"), [
    ("associate", MAX_EXACT_FEATURES, 25),
    ("map_associate", MAX_ENUMERATED_FEATURES, 25),
    ("map_associate", MAX_ENUMERATED_FEATURES, MAX_ENUMERATED_FEATURES + 1),
])
def test_too_many_features_for_exhaustive_search(entry_point, maximum, num_features):
    features = np.ones((num_features, 3), np.float32)
    pattern = (rf"^features.shape\[0\] \(num_features\) must be at most {maximum} "
               rf".*got {num_features}")
    with pytest.raises(ValueError, match=pattern):
        FEATURE_ENTRY_POINTS[entry_point](features)


# --- num_features of the learning methods and the generator ---------------------------

NUM_FEATURES_ENTRY_POINTS = {
    "fit_gvq": lambda n: fit_gvq(X, n, rng_key=KEY),
    "fit_gvq_svi": lambda n: fit_gvq_svi(X, n, rng_key=KEY),
    "generate_planted": lambda n: generate_planted(KEY, 4, n, 3),
}


@pytest.mark.parametrize("num_features", [0, -1, np.int64(0)], ids=["0", "-1", "np_int64_0"])
@pytest.mark.parametrize("entry_point", list(NUM_FEATURES_ENTRY_POINTS))
def test_num_features_below_one(entry_point, num_features):
    with pytest.raises(ValueError, match=rf"^num_features must be at least 1; got {num_features}"):
        NUM_FEATURES_ENTRY_POINTS[entry_point](num_features)


@pytest.mark.parametrize("num_features", [2.0, 2.5, "2", True, None, [2]],
                         ids=["float_2", "float_2.5", "str", "bool", "None", "list"])
@pytest.mark.parametrize("entry_point", list(NUM_FEATURES_ENTRY_POINTS))
def test_num_features_must_be_an_integer(entry_point, num_features):
    with pytest.raises(TypeError, match=r"^num_features must be an integer"):
        NUM_FEATURES_ENTRY_POINTS[entry_point](num_features)


@pytest.mark.parametrize(("entry_point", "maximum"), [
    ("fit_gvq", MAX_EXACT_FEATURES), ("fit_gvq_svi", MAX_ENUMERATED_FEATURES)])
def test_num_features_too_large_for_exhaustive_search(entry_point, maximum):
    for num_features in sorted({maximum + 1, 25}):
        with pytest.raises(ValueError,
                           match=rf"^num_features must be at most {maximum} .*got {num_features}"):
            NUM_FEATURES_ENTRY_POINTS[entry_point](num_features)


# --- method, rng_key and the other arguments -------------------------------------------

@pytest.mark.parametrize("method", ["bogus", "EXACT", ""])
def test_unknown_method_lists_the_valid_methods(method):
    listing = re.escape(str(sorted(METHODS)))
    with pytest.raises(ValueError, match=rf"^method must be one of {listing}; got {method!r}"):
        associate(FEATURES, X, method=method)
    with pytest.raises(ValueError, match=rf"^method must be one of {listing}; got {method!r}"):
        fit_gvq(X, 2, method=method, rng_key=KEY)


def test_learning_needs_an_explicit_rng_key():
    with pytest.raises(ValueError, match="rng_key"):
        fit_gvq(X, 2)
    with pytest.raises(ValueError, match="rng_key"):
        fit_gvq(X, 2, rng_key=None)
    with pytest.raises(TypeError, match="rng_key"):
        fit_gvq_svi(X, 2)


@pytest.mark.parametrize("value", [0.0, -1.0, np.nan, np.inf])
def test_noise_levels_must_be_positive_and_finite(value):
    pattern = r"must be positive and finite"
    with pytest.raises(ValueError, match="^noise " + pattern):
        associate(FEATURES, X, noise=value)
    with pytest.raises(ValueError, match="^noise " + pattern):
        fit_gvq(X, 2, rng_key=KEY, noise=value)
    with pytest.raises(ValueError, match="^noise " + pattern):
        map_associate(FEATURES, X, noise=value)
    with pytest.raises(ValueError, match="^noise " + pattern):
        fit_gvq_svi(X, 2, rng_key=KEY, noise=value)
    with pytest.raises(ValueError, match="^learning_rate " + pattern):
        fit_gvq_svi(X, 2, rng_key=KEY, learning_rate=value)
    with pytest.raises(ValueError, match="^noise_scale " + pattern):
        generate_planted(KEY, 4, 2, 3, noise_scale=value)


@pytest.mark.parametrize(("call", "name"), [
    (lambda v: fit_gvq(X, 2, rng_key=KEY, max_iterations=v), "max_iterations"),
    (lambda v: fit_gvq(X, 2, rng_key=KEY, num_restarts=v), "num_restarts"),
    (lambda v: fit_gvq_svi(X, 2, rng_key=KEY, num_steps=v), "num_steps"),
    (lambda v: fit_gvq_svi(X, 2, rng_key=KEY, num_restarts=v), "num_restarts"),
    (lambda v: generate_planted(KEY, v, 2, 3), "num_examples"),
    (lambda v: generate_planted(KEY, 4, 2, v), "dim"),
    (lambda v: generate_planted(KEY, 4, 2, 3, num_parents=v), "num_parents"),
])
def test_counts_must_be_positive_integers(call, name):
    with pytest.raises(ValueError, match=rf"^{name} must be at least 1; got 0"):
        call(0)
    with pytest.raises(ValueError, match=rf"^{name} must be at least 1; got -3"):
        call(-3)
    with pytest.raises(TypeError, match=rf"^{name} must be an integer; got 1.5"):
        call(1.5)


def test_generate_planted_empty_data():
    with pytest.raises(ValueError, match=r"^num_examples must be at least 1; got 0"):
        generate_planted(KEY, 0, 2, 3)
    with pytest.raises(ValueError, match=r"^dim must be at least 1; got 0"):
        generate_planted(KEY, 4, 2, 0)


def test_generate_planted_more_parents_than_features():
    with pytest.raises(ValueError, match=r"^num_parents must be at most 2 .*got 3"):
        generate_planted(KEY, 4, 2, 3, num_parents=3)


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"prior_probs": 1.5}, "prior_probs"),
    ({"prior_probs": np.nan}, "prior_probs"),
    ({"feature_mean": np.nan}, "feature_mean"),
], ids=["probs_above_one", "probs_nan", "mean_nan"])
def test_generate_planted_float_arguments_are_validated(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name} "):
        generate_planted(KEY, 4, 2, 3, **kwargs)
