"""Bad input to every public entry point raises a clear error naming the argument.

Issue 10 ("Reliability"), DESIGN.md "Errors": wrong shape, dtype, NaN/inf, empty
input, impossible sizes and out-of-range options raise ``ValueError``/``TypeError``
whose message names the argument, what was expected and what was given.

The table :data:`CASES` holds one row per bad input: the entry point, the argument,
the call, the exception type and a regex the message must match. Every regex
starts from the argument's name, and the test checks the name separately too.
The checks run before anything compiles, so each row takes milliseconds; the few
rows that need a compiled step (none at present) would be marked slow.
README.md's table "Bad input and the errors it gets" is a digest of this one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np
import pytest

from inference import (
    associate,
    fit_clipped_gaussian,
    fit_clipped_gaussian_stream,
    fit_gvq,
    fit_gvq_stream,
    fit_mcvq,
    fit_mcvq_stream,
    fit_mixture,
    fit_vb_mcvq,
    fit_vb_mixture,
    infer_states,
    model_selection,
    reconstruct,
)
from inference.app.families import load_families
from inference.clipped.baselines import fit_clipped_mcmc, fit_clipped_svi
from inference.gvq.baselines import fit_gvq_mcmc, fit_gvq_svi, gibbs_associate, map_associate
from inference.gvq.constraints import associate_sets
from inference.mcvq.baselines import fit_mcvq_meanfield_svi, fit_mcvq_svi, fit_variational
from inference.mixture.baselines import fit_mixture_mcmc, fit_mixture_svi, mixture_loo
from inference.mixture.online import fit_online
from inference.mixture.online_stream import fit_online_stream
from inference.mixture.selection import compare_criteria, select_num_components
from inference.mixture.stream import fit_mixture_stream
from ppl_models import REGISTRY, clipped_gaussian, gvq, mcvq, mixture
from ppl_models import vb_mixture as vb_program
from ppl_models.datasets import causes, ratings, shapes, text
from ppl_models.diagnostics import ConvergenceWarning
from ppl_models.validation import MissingKeyError, check_choice, check_rng_key

KEY = jax.random.key(0)
RAW_KEY = jax.random.PRNGKey(0)  # the legacy uint32 form is accepted too
FEATURES = np.array([[1.0, 0.0, 1.0], [0.0, 2.0, 1.0]], np.float32)  # (2, 3)
X = np.array([[1.0, 0.0, 1.0], [0.0, 2.0, 1.0], [1.0, 2.0, 2.0], [0.0, 0.0, 0.0],
              [2.0, 1.0, 0.5], [0.5, 1.5, 1.0]], np.float32)  # (6, 3)
RATINGS = Path(__file__).resolve().parents[1] / "data" / "ratings_small.csv"
SPINS = np.array([[1, -1, 1, -1], [-1, 1, 1, -1], [1, 1, -1, -1], [-1, -1, 1, 1]], np.int8)


def with_entry(x, index, value):
    x = np.array(x, dtype=float)
    x[index] = value
    return x


NAN_X = with_entry(X, (1, 2), np.nan)
INF_X = with_entry(X, (0, 0), np.inf)
BATCH_OF_KEYS = jax.random.split(KEY, 2)


class Case(NamedTuple):
    entry: str  # the public function
    argument: str  # the argument the message must name
    call: object  # a thunk making the bad call
    error: type
    pattern: str  # re.search on the message


CASES: list[Case] = []


def rows(entry, base, table):
    """Rows for ``entry``: ``base(**overrides)`` for each (argument, overrides, error, regex)."""
    for argument, overrides, error, pattern in table:
        CASES.append(Case(entry, argument, (lambda o=overrides: base(**o)), error, pattern))


# --- data arrays shared by many entry points -------------------------------------------
BAD_X = [
    ("x", dict(x=NAN_X), ValueError, r"^x contains 1 NaN or infinite"),
    ("x", dict(x=INF_X), ValueError, r"^x contains 1 NaN or infinite"),
    ("x", dict(x=X[0]), ValueError, r"^x must be 2-D .*got shape \(3,\)"),
    ("x", dict(x=np.zeros((0, 3), np.float32)), ValueError, r"^x must have at least 1 example"),
    ("x", dict(x=np.array([["a", "b", "c"]] * 6)), TypeError, r"^x must be a real numeric"),
]
BAD_KEY = [
    ("rng_key", dict(rng_key=0), TypeError, r"^rng_key must be a single jax.random key.*got 0"),
    ("rng_key", dict(rng_key=BATCH_OF_KEYS), TypeError,
     r"^rng_key must be a single jax.random key.*batch of keys of shape \(2,\)"),
    ("rng_key", dict(rng_key=np.zeros(2, np.float32)), TypeError,
     r"^rng_key must be a single jax.random key.*float32"),
]
#: rng_key=None: one error class for every randomised entry point (MissingKeyError).
MISSING_KEY = ("rng_key", dict(rng_key=None), MissingKeyError, r"rng_key")


# --- association ------------------------------------------------------------------------
def _associate(features=FEATURES, x=X, method="exact", **kw):
    return associate(features, x, method, **kw)


rows("associate", _associate, BAD_X + [
    ("features", dict(features=FEATURES[0]), ValueError, r"^features must be 2-D"),
    ("features", dict(features=with_entry(FEATURES, (0, 0), np.nan)), ValueError,
     r"^features contains 1 NaN"),
    ("x", dict(x=np.ones((4, 5))), ValueError, r"^x must have 3 columns.*\(4, 5\)"),
    ("features", dict(features=np.ones((25, 3))), ValueError,
     r"^features.shape\[0\] \(num_features\) must be at most"),
    ("method", dict(method="nope"), ValueError, r"^method must be one of .*got 'nope'"),
    ("method", dict(method=3), ValueError, r"^method must be one of .*got 3"),
    ("rng_key", dict(method="gibbs"), MissingKeyError, r"randomised: pass rng_key"),
    ("rng_key", dict(method="gibbs", rng_key=0), TypeError, r"^rng_key must be a single"),
    ("rng_key", dict(method="br", rng_key=BATCH_OF_KEYS), TypeError, r"^rng_key .*batch"),
    ("noise", dict(noise=0.0), ValueError, r"^noise must be positive and finite; got 0.0"),
    ("noise", dict(noise=np.nan), ValueError, r"^noise must be positive and finite"),
    ("chunk_sizes", dict(chunk_sizes=3), TypeError, r"unknown option 'chunk_sizes'"),
])
rows("map_associate", lambda features=FEATURES, x=X, **kw: map_associate(features, x, **kw),
     BAD_X[:3] + [("features", dict(features=np.ones((0, 3))), ValueError,
                   r"^features must have at least 1")])
rows("gibbs_associate", lambda features=FEATURES, x=X, **kw: gibbs_associate(
    features, x, **{"rng_key": KEY, "num_warmup": 1, "num_samples": 1, **kw}), BAD_X[:2] + [
    MISSING_KEY,
    ("rng_key", dict(rng_key=0), TypeError, r"^rng_key must be a single"),
    ("noise", dict(noise=0.0), ValueError, r"^noise must be positive"),
    ("num_samples", dict(num_samples=0), ValueError, r"^num_samples must be at least 1"),
])

# --- GVQ learning -----------------------------------------------------------------------
_GVQ = dict(rng_key=KEY, max_iterations=1, num_restarts=1)
rows("fit_gvq", lambda x=X, num_features=2, **kw: fit_gvq(x, num_features, **{**_GVQ, **kw}),
     BAD_X + BAD_KEY + [
    ("num_features", dict(num_features=0), ValueError, r"^num_features must be at least 1; got 0"),
    ("num_features", dict(num_features=2.5), TypeError, r"^num_features must be an integer"),
    ("num_features", dict(num_features=True), TypeError, r"^num_features must be an integer"),
    ("max_iterations", dict(max_iterations=0), ValueError, r"^max_iterations must be at least 1"),
    ("num_restarts", dict(num_restarts=-2), ValueError, r"^num_restarts must be at least 1"),
    ("method", dict(method="nope"), ValueError, r"^method must be one of"),
    ("rng_key", dict(rng_key=None), MissingKeyError, r"rng_key"),
    ("noise", dict(noise=-1.0), ValueError, r"^noise must be positive"),
    ("tol", dict(tol=-1.0), ValueError, r"^tol must be a non-negative number; got -1.0"),
    ("tol", dict(tol=np.nan), ValueError, r"^tol must be a non-negative number; got nan"),
    ("tol", dict(tol="small"), (TypeError, ValueError), r"^tol must be a non-negative number"),
    ("init_features", dict(init_features=np.ones((3, 3))), ValueError,
     r"^init_features must have shape \(2, 3\)"),
    ("init_features", dict(init_features=with_entry(np.ones((2, 3)), (0, 0), np.inf)),
     ValueError, r"^init_features contains 1 NaN"),
    ("m_step_iterations", dict(m_step_iterations=0), ValueError,
     r"^m_step_iterations must be at least 1"),
])
_SVI = dict(rng_key=KEY, num_steps=1, num_restarts=1)
rows("fit_gvq_svi", lambda x=X, n=2, **kw: fit_gvq_svi(x, n, **{**_SVI, **kw}), BAD_X + BAD_KEY + [
    MISSING_KEY,
    ("num_features", dict(n=0), ValueError, r"^num_features must be at least 1"),
    ("noise", dict(noise=0.0), ValueError, r"^noise must be positive"),
    ("num_steps", dict(num_steps=0), ValueError, r"^num_steps must be at least 1"),
    ("learning_rate", dict(learning_rate=-0.1), ValueError, r"^learning_rate must be positive"),
    ("tol", dict(tol=-1.0), ValueError, r"^tol must be"),
])
_MCMC = dict(rng_key=KEY, num_warmup=1, num_samples=4)
rows("fit_gvq_mcmc", lambda x=X, n=2, **kw: fit_gvq_mcmc(x, n, **{**_MCMC, **kw}), BAD_X[:3] + [
    MISSING_KEY,
    ("rng_key", dict(rng_key=0), TypeError, r"^rng_key must be a single"),
    ("num_samples", dict(num_samples=0), ValueError, r"^num_samples must be at least 1"),
    ("num_chains", dict(num_chains=0), ValueError, r"^num_chains must be at least 1"),
    ("chain_method", dict(chain_method="nope"), ValueError, r"^chain_method must be one of"),
    ("summary", dict(summary="nope"), ValueError, r"^summary must be one of"),
    ("target_accept_prob", dict(target_accept_prob=1.5), ValueError,
     r"^target_accept_prob must be in \(0, 1\); got 1.5"),
    ("noise", dict(noise=-1.0), ValueError, r"^noise must be positive"),
])

# --- mixtures ---------------------------------------------------------------------------
_MIX = dict(rng_key=KEY, max_iterations=2)
rows("fit_mixture", lambda x=X, k=2, **kw: fit_mixture(x, k, **{**_MIX, **kw}), BAD_X + BAD_KEY + [
    ("num_components", dict(k=0), ValueError, r"^num_components must be at least 1; got 0"),
    ("num_components", dict(k="2"), TypeError, r"^num_components must be an integer"),
    ("num_components", dict(k=7), ValueError, r"num_components=7 exceeds the 6 distinct"),
    ("x", dict(x=np.ones((5, 3))), ValueError,
     r"(num_components=2 exceeds the 1 distinct|^x has no spread)"),
    ("mode", dict(mode="soft"), ValueError, r"^mode must be one of .*got 'soft'"),
    ("mode", dict(mode=None), TypeError, r"^mode must be one of"),
    ("covariance", dict(covariance="tied"), ValueError, r"^covariance must be one of .*'tied'"),
    ("init", dict(init="farthest"), ValueError, r"^init must be one of .*'farthest'"),
    ("weight_rule", dict(weight_rule="mdl"), ValueError, r"^weight_rule must be one of"),
    ("max_iterations", dict(max_iterations=0), ValueError, r"^max_iterations must be at least 1"),
    ("tol", dict(tol=-1.0), ValueError, r"^tol must be .*got -1.0"),
    ("tol", dict(tol=np.nan), ValueError, r"^tol must be .*got nan"),
    ("reg_covar", dict(reg_covar=-1e-6), ValueError, r"^reg_covar must be a non-negative"),
    ("reg_covar", dict(reg_covar=np.inf), ValueError, r"^reg_covar must be a non-negative"),
    ("variance_threshold", dict(variance_threshold=-1.0), ValueError,
     r"^variance_threshold must be"),
    ("min_count", dict(min_count=-3), ValueError, r"^min_count must be"),
    ("prune", dict(prune="yes"), TypeError, r"^prune must be True or False"),
    ("rng_key", dict(rng_key=None), MissingKeyError, r"rng_key is required"),
    ("init_means", dict(init_means=np.ones((3, 3))), ValueError,
     r"^init_means must be finite with shape \(2, 3\)"),
    ("init_weights", dict(init_weights=np.array([1.0, -1.0])), ValueError,
     r"^init_weights must be positive"),
    ("init_covariances", dict(init_covariances=np.ones((2, 2, 2))), ValueError,
     r"^init_covariances must have shape \(2, 3, 3\)"),
    ("batch_size", dict(batch_size=2), ValueError, r"batch_size applies to a stream"),
])
rows("fit_mixture_stream", lambda x=(X[:3], X[3:]), k=2, **kw: fit_mixture_stream(
    x, k, **{**_MIX, **kw}), BAD_KEY[:1] + [
    MISSING_KEY,
    ("num_components", dict(k=0), ValueError, r"^num_components must be at least 1"),
    ("mode", dict(mode="soft"), ValueError, r"^mode must be one of"),
    ("max_iterations", dict(max_iterations=0), ValueError, r"^max_iterations must be at least 1"),
])
_ONLINE = dict(rng_key=KEY)
rows("fit_online", lambda x=X, k=2, **kw: fit_online(x, k, **{**_ONLINE, **kw}), BAD_X + BAD_KEY + [
    ("num_components", dict(k=0), ValueError, r"^num_components must be at least 1"),
    ("num_components", dict(k=7), ValueError, r"num_components=7 exceeds the 6 distinct"),
    ("method", dict(method="kmeans"), ValueError, r"^method must be one of .*'kmeans'"),
    ("schedule", dict(schedule="cosine"), ValueError, r"^schedule must be one of .*'cosine'"),
    ("covariance", dict(covariance="tied"), ValueError, r"^covariance must be one of"),
    ("old_posterior", dict(old_posterior="x"), ValueError, r"^old_posterior must be one of"),
    ("max_iterations", dict(max_iterations=0), ValueError, r"^max_iterations must be at least 1"),
    ("tol", dict(tol=-1.0), ValueError, r"^tol must be a non-negative finite number"),
    ("learning_rate", dict(learning_rate=0.0), ValueError, r"^learning_rate must lie in \(0, 1\]"),
    ("learning_rate", dict(learning_rate=2.0), ValueError, r"^learning_rate must lie in"),
    ("learning_rate", dict(learning_rate="fast"), TypeError, r"^learning_rate must be a number"),
    ("delearning_rate", dict(delearning_rate=-0.1), ValueError, r"^delearning_rate must lie in"),
    ("rng_key", dict(rng_key=None), MissingKeyError, r"rng_key is required"),
    ("init_means", dict(init_means=np.ones((2, 4))), ValueError, r"^init_means must be finite"),
    ("trace_every", dict(trace_every=0), ValueError, r"^trace_every must be at least 1"),
])
rows("fit_online_stream", lambda x=(X[:3], X[3:]), k=2, **kw: fit_online_stream(
    x, k, **{**_ONLINE, **kw}), BAD_KEY[:1] + [
    MISSING_KEY,
    ("num_components", dict(k=0), ValueError, r"^num_components must be at least 1"),
    ("method", dict(method="kmeans"), ValueError, r"^method must be one of"),
])
_VB = dict(rng_key=KEY, max_iterations=2)
rows("fit_vb_mixture", lambda x=X, k=2, **kw: fit_vb_mixture(x, k, **{**_VB, **kw}),
     BAD_X + BAD_KEY + [
    ("max_components", dict(k=0), ValueError, r"^max_components must be at least 1"),
    ("max_components", dict(k=7), ValueError, r"^max_components must be at most 6"),
    ("covariance", dict(covariance="spherical"), ValueError, r"^covariance must be one of"),
    ("prune_threshold", dict(prune_threshold=1.0), ValueError,
     r"^prune_threshold must lie strictly between 0 and 1"),
    ("tol", dict(tol=0.0), ValueError, r"^tol must be positive and finite"),
    ("rng_key", dict(rng_key=None), MissingKeyError, r"^rng_key must be a"),
    ("max_iterations", dict(max_iterations=0), ValueError, r"^max_iterations must be at least 1"),
])
_SVI_MIX = dict(rng_key=KEY, num_steps=1)
rows("fit_mixture_svi", lambda x=X, k=2, **kw: fit_mixture_svi(x, k, **{**_SVI_MIX, **kw}),
     BAD_X[:3] + BAD_KEY[:2] + [
    MISSING_KEY,
    ("num_components", dict(k=0), ValueError, r"^num_components must be at least 1"),
    ("covariance", dict(covariance="tied"), ValueError, r"^covariance must be one of"),
    ("num_steps", dict(num_steps=0), ValueError, r"^num_steps must be at least 1"),
    ("learning_rate", dict(learning_rate=0.0), ValueError, r"^learning_rate must be positive"),
    ("prior_scale", dict(prior_scale=-1.0), ValueError, r"^prior_scale must be positive"),
    ("tol", dict(tol=-1.0), ValueError, r"^tol must be"),
])
rows("fit_mixture_mcmc", lambda x=X, k=2, **kw: fit_mixture_mcmc(
    x, k, **{"rng_key": KEY, "num_warmup": 1, "num_samples": 4, **kw}), BAD_X[:3] + BAD_KEY[:1] + [
    MISSING_KEY,
    ("num_components", dict(k=0), ValueError, r"^num_components must be at least 1"),
    ("num_samples", dict(num_samples=0), ValueError, r"^num_samples must be at least 1"),
    ("num_chains", dict(num_chains=0), ValueError, r"^num_chains must be at least 1"),
    ("target_accept_prob", dict(target_accept_prob=0.0), ValueError,
     r"^target_accept_prob must be in \(0, 1\)"),
])
rows("select_num_components", lambda x=X, c=(1, 2), **kw: select_num_components(
    x, c, **{"rng_key": KEY, "num_restarts": 1, **kw}), BAD_X[:2] + BAD_KEY[:1] + [
    MISSING_KEY,
    ("criterion", dict(criterion="dic"), ValueError, r"^criterion must be one of .*'dic'"),
    ("covariance", dict(covariance="tied"), ValueError, r"^covariance must be one of"),
    ("candidates", dict(c=()), ValueError, r"^candidates must"),
    ("candidates", dict(c=(0, 2)), ValueError, r"^candidates must"),
    ("candidates", dict(c=(2, 9)), ValueError, r"^candidates must"),
    ("candidates", dict(c=2), TypeError, r"^candidates must"),
    ("num_restarts", dict(num_restarts=0), ValueError, r"^num_restarts must be at least 1"),
])
rows("compare_criteria", lambda x=X, c=(1, 2), **kw: compare_criteria(
    x, c, **{"rng_key": KEY, "num_restarts": 1, **kw}), [
    ("criteria", dict(criteria=("J", "dic")), ValueError, r"^criteria must .*'dic'"),
    ("criteria", dict(criteria="J"), TypeError, r"^criteria must"),
    ("rng_key", dict(rng_key=None), MissingKeyError, r"rng_key"),
])

# --- MCVQ -------------------------------------------------------------------------------
MCVQ_X = np.arange(24, dtype=np.float32).reshape(6, 4) % 5
_MCVQ = dict(rng_key=KEY, max_iterations=2)
BAD_MCVQ_X = [
    ("x", dict(x=MCVQ_X[0]), ValueError, r"^x must be 2-D"),
    ("x", dict(x=with_entry(MCVQ_X, (0, 0), np.nan)), ValueError, r"^x has 1 NaN or infinite"),
    ("x", dict(x=np.zeros((0, 4))), ValueError, r"^x must have at least 1 example"),
]
rows("fit_mcvq", lambda x=MCVQ_X, k=2, j=2, **kw: fit_mcvq(x, k, j, **{**_MCVQ, **kw}),
     BAD_MCVQ_X + BAD_KEY + [
    ("num_vqs", dict(k=0), ValueError, r"^num_vqs must be at least 1"),
    ("num_states", dict(j=1.5), TypeError, r"^num_states must be an integer"),
    ("rng_key", dict(rng_key=None), MissingKeyError, r"rng_key"),
    ("mask", dict(mask=np.ones((6, 3), bool)), ValueError, r"^mask must have the shape of x"),
    ("mask", dict(mask=np.full((6, 4), 0.5)), TypeError, r"^mask must be a bool array"),
    ("mask", dict(mask=np.zeros((6, 4), bool)), ValueError, r"^mask leaves example"),
    ("variance_floor", dict(variance_floor=0.0), ValueError, r"^variance_floor must be positive"),
    ("tol", dict(tol=-1.0), ValueError, r"^tol must be"),
    ("max_iterations", dict(max_iterations=0), ValueError, r"^max_iterations must be at least 1"),
    ("num_restarts", dict(num_restarts=0), ValueError, r"^num_restarts must be at least 1"),
    ("initial_temperature", dict(initial_temperature=-1.0), ValueError,
     r"^initial_temperature must be positive"),
    ("temperature_schedule", dict(temperature_schedule=np.array([2.0, np.nan])), ValueError,
     r"^temperature_schedule must be"),
])
rows("fit_vb_mcvq", lambda x=MCVQ_X, k=2, j=2, **kw: fit_vb_mcvq(
    x, k, j, **{"rng_key": KEY, "max_iterations": 2, **kw}), BAD_MCVQ_X[:2] + BAD_KEY + [
    ("max_vqs", dict(k=0), ValueError, r"^max_vqs must be at least 1"),
    ("max_states", dict(j=-1), ValueError, r"^max_states must be at least 1"),
    ("prune_threshold", dict(prune_threshold=0.0), ValueError,
     r"^prune_threshold must lie strictly between 0 and 1"),
    ("tol", dict(tol=0.0), ValueError, r"^tol must be positive"),
    ("rng_key", dict(rng_key=None), MissingKeyError, r"rng_key"),
])
rows("fit_mcvq_svi", lambda x=MCVQ_X, k=2, j=2, **kw: fit_mcvq_svi(
    x, k, j, **{"rng_key": KEY, "num_steps": 1, **kw}), BAD_MCVQ_X[:2] + BAD_KEY[:1] + [
    ("num_vqs", dict(k=0), ValueError, r"^num_vqs must be at least 1"),
    ("num_steps", dict(num_steps=0), ValueError, r"^num_steps must be at least 1"),
    ("learning_rate", dict(learning_rate=0.0), ValueError, r"^learning_rate must be positive"),
    ("variance_floor", dict(variance_floor=-1.0), ValueError, r"^variance_floor must be positive"),
])
rows("model_selection", lambda x=MCVQ_X, c=((1, 2),), **kw: model_selection(
    x, c, **{"rng_key": KEY, "criteria": ("train",), "num_restarts": 1, **kw}), [
    ("model", dict(model="hmm"), ValueError, r"^model must be one of .*'hmm'"),
    ("rng_key", dict(rng_key=None), MissingKeyError, r"rng_key"),
    ("rng_key", dict(rng_key=0), TypeError, r"^rng_key must be a single"),
    ("criteria", dict(criteria=("nope",)), ValueError, r"^criteria must"),
    ("candidates", dict(c=((0, 2),)), ValueError, r"^candidates"),
    ("candidates", dict(c=()), ValueError, r"^candidates"),
    ("num_folds", dict(num_folds=1), ValueError, r"^num_folds must lie in 2 \.\. N = 6"),
    ("num_restarts", dict(num_restarts=0), ValueError, r"^num_restarts must be at least 1"),
    ("covariance", dict(covariance="full"), ValueError, r"^covariance is for model='mixture'"),
    ("x", dict(x=MCVQ_X[0]), ValueError, r"^x must be 2-D"),
    ("mask", dict(model="mixture", c=(1, 2), mask=np.ones((6, 4), bool)), ValueError,
     r"^mask is for model='mcvq' only"),
])

# --- clipped Gaussian -------------------------------------------------------------------
rows("fit_clipped_gaussian", lambda s=SPINS, p=1, **kw: fit_clipped_gaussian(s, p, **kw), [
    ("s", dict(s=SPINS[0]), ValueError, r"^s must be 2-D"),
    ("s", dict(s=SPINS * 2), ValueError, r"^s must hold only -1 / \+1 or only 0 / 1"),
    ("s", dict(s=with_entry(SPINS, (0, 0), np.nan)), ValueError, r"^s must hold only"),
    ("s", dict(s=np.zeros((0, 4))), ValueError, r"^s must not be empty"),
    ("s", dict(s=np.array([["a"] * 4] * 4)), TypeError, r"^s must be a numeric array"),
    ("num_hidden", dict(p=0), ValueError, r"^num_hidden must be at least 1"),
    ("num_hidden", dict(p=5), ValueError, r"^num_hidden must be at most 4"),
    ("constant_columns", dict(constant_columns="drop"), ValueError,
     r"^constant_columns must be one of .*'drop'"),
    ("tol", dict(tol=0.0), ValueError, r"^tol must be positive"),
    ("chunk_size", dict(chunk_size=0), ValueError, r"^chunk_size must be at least 1"),
    ("bias", dict(bias="yes"), TypeError, r"^bias must be True or False"),
])
rows("fit_clipped_svi", lambda s=SPINS, p=1, **kw: fit_clipped_svi(
    s, p, **{"rng_key": KEY, "num_steps": 1, **kw}), BAD_KEY[:1] + [
    ("s", dict(s=SPINS * 2), ValueError, r"^s must hold only"),
    ("num_hidden", dict(p=0), ValueError, r"^num_hidden must be at least 1"),
    ("noise", dict(noise=0.0), ValueError, r"^noise must be positive"),
    ("num_steps", dict(num_steps=0), ValueError, r"^num_steps must be at least 1"),
    ("rng_key", dict(rng_key=None), MissingKeyError, r"rng_key"),
])
rows("fit_clipped_mcmc", lambda s=SPINS, p=1, **kw: fit_clipped_mcmc(
    s, p, **{"rng_key": KEY, "num_warmup": 1, "num_samples": 4, **kw}), BAD_KEY[:1] + [
    MISSING_KEY,
    ("s", dict(s=SPINS[0]), ValueError, r"^s must be 2-D"),
    ("noise", dict(noise=-1.0), ValueError, r"^noise must be positive"),
    ("num_samples", dict(num_samples=0), ValueError, r"^num_samples must be at least 1"),
])

# --- the programs' data arguments and the generators -----------------------------------
def _trace(program, *args, **kwargs):
    import numpyro
    return numpyro.handlers.trace(numpyro.handlers.seed(program, 0)).get_trace(*args, **kwargs)


rows("gvq.model", lambda x=X, **kw: _trace(gvq.model, x, **{"features": FEATURES, **kw}),
     BAD_X[:4] + [
    ("x", dict(features=np.ones((2, 4))), ValueError, r"^x must have 4 columns"),
    ("sigma", dict(sigma=0.0), ValueError, r"^sigma must be positive"),
    ("prior_probs", dict(prior_probs=1.5), ValueError, r"^prior_probs must be in \[0, 1\]"),
])
rows("mixture.model", lambda x=X, **kw: _trace(mixture.model, x, **{"num_components": 2, **kw}),
     BAD_X[:4] + [
    ("covariance", dict(covariance="tied"), ValueError, r"^covariance must be one of"),
    ("num_components", dict(num_components=0), ValueError, r"^num_components must be at least 1"),
])
rows("mcvq.model", lambda x=MCVQ_X, **kw: _trace(mcvq.model, x, **{"num_vqs": 2,
                                                                     "num_states": 2, **kw}), [
    ("x", dict(x=MCVQ_X[0]), ValueError, r"^x must be 2-D"),
    ("x", dict(x=with_entry(MCVQ_X, (0, 0), np.inf)), ValueError, r"^x contains 1 NaN"),
    ("mask", dict(mask=np.ones((6, 3), bool)), ValueError, r"^mask must have the shape of x"),
    ("num_vqs", dict(num_vqs=0), ValueError, r"^num_vqs must be at least 1"),
])
rows("clipped_gaussian.model", lambda s=SPINS, **kw: _trace(
    clipped_gaussian.model, s, **{"num_hidden": 2, **kw}), [
    ("s", dict(s=SPINS * 3), ValueError, r"^s must hold only"),
    ("s", dict(s=SPINS[0]), ValueError, r"^s must be 2-D"),
])
rows("vb_mixture.model", lambda x=X, **kw: _trace(
    vb_program.model, x, **{"weights": np.array([0.5, 0.5]), **kw}), BAD_X[:4] + [
    ("weights", dict(weights=np.array([0.5, -0.5])), ValueError, r"^weights must"),
    ("covariance", dict(covariance="tied"), ValueError, r"^covariance must be one of"),
])
rows("gvq.generate_planted", lambda n=10, k=2, d=3, **kw: gvq.generate_planted(
    kw.pop("rng_key", KEY), n, k, d, **kw), [
    ("num_examples", dict(n=0), ValueError, r"^num_examples must be at least 1"),
    ("num_features", dict(k=-1), ValueError, r"^num_features must be at least 1"),
    ("noise_scale", dict(noise_scale=-1.0), ValueError, r"^noise_scale must be positive"),
    ("prior_probs", dict(prior_probs=2.0), ValueError, r"^prior_probs must be in \[0, 1\]"),
    ("rng_key", dict(rng_key=None), MissingKeyError, r"^rng_key must be a single"),
])
rows("mixture.generate", lambda n=10, k=2, **kw: mixture.generate(kw.pop("rng_key", KEY), n, k,
                                                                  **kw), [
    ("num_examples", dict(n=0), ValueError, r"^num_examples must be at least 1"),
    ("num_components", dict(k=0), ValueError, r"^num_components must be at least 1"),
    ("separation", dict(separation=-1.0), ValueError, r"^separation must be positive"),
    ("rng_key", dict(rng_key=3), TypeError, r"^rng_key must be a single"),
    MISSING_KEY,
])
rows("mcvq.generate", lambda n=10, **kw: mcvq.generate(kw.pop("rng_key", KEY), n, **kw), [
    ("num_examples", dict(n=0), ValueError, r"^num_examples must be at least 1"),
    ("dim", dict(dim=2), ValueError, r"^dim must be at least num_vqs=3"),
    ("missing_fraction", dict(missing_fraction=1.0), ValueError,
     r"^missing_fraction must be below 1"),
    ("rng_key", dict(rng_key=None), MissingKeyError, r"^rng_key must be a single"),
])
rows("clipped_gaussian.generate", lambda n=10, **kw: clipped_gaussian.generate(
    kw.pop("rng_key", KEY), n, **kw), [
    ("num_examples", dict(n=0), ValueError, r"^num_examples must be at least 1"),
    ("noise", dict(noise=-1.0), ValueError, r"^noise must be >= 0"),
    ("weights", dict(weights=np.ones(3)), ValueError, r"^weights must be 2-D"),
    MISSING_KEY,
])
rows("causes.generate", lambda n=10, **kw: causes.generate(kw.pop("rng_key", KEY), n, **kw), [
    ("num_examples", dict(n=0), ValueError, r"num_examples"),
    ("rng_key", dict(rng_key=None), MissingKeyError, r"rng_key"),
    ("combine", dict(combine="xor"), ValueError, r"^combine must be one of"),
])
rows("shapes.generate", lambda n=10, **kw: shapes.generate(kw.pop("rng_key", KEY), n, **kw), [
    ("num_train", dict(n=0), ValueError, r"^num_train must be at least 1"),
    ("rng_key", dict(rng_key=None), MissingKeyError, r"^rng_key must be a single"),
])
rows("text.bag_of_words", lambda docs=("a b c",) * 6, **kw: text.bag_of_words(docs, **kw), [
    ("documents", dict(docs=()), ValueError, r"^documents"),
    ("documents", dict(docs="one string"), TypeError, r"^documents must be"),
    ("min_documents", dict(min_documents=0), ValueError, r"^min_documents must be an int >= 1"),
])
rows("ratings.load_ratings", lambda path="/nonexistent/ratings.csv", **kw: ratings.load_ratings(
    path, **kw), [
    ("path", dict(), ValueError, r"^path"),
    ("path", dict(path=3.5), TypeError, r"^path must be a str or path-like"),
    ("duplicates", dict(duplicates="sum", path=RATINGS), ValueError,
     r"^duplicates must be 'error' or 'last'; got 'sum'"),
    ("min_ratings_per_user", dict(min_ratings_per_user=-1, path=RATINGS), ValueError,
     r"^min_ratings_per_user must be"),
])


# --- entry points the families' plug-ins list that the rows above do not reach ----------
rows("associate_sets", lambda x=X, features=FEATURES, **kw: associate_sets(features, x, 1, **kw),
     BAD_X[:2] + [("features", dict(features=FEATURES[0]), ValueError, r"^features")])
rows("fit_gvq_stream", lambda x=X, n=2, **kw: fit_gvq_stream([x], n, rng_key=KEY, **kw), [
    ("source", dict(x=NAN_X), ValueError, r"^source batch 0 .*NaN or infinite"),
    ("num_features", dict(n=0), ValueError, r"^num_features must be at least 1"),
])
rows("fit_clipped_gaussian_stream", lambda s=SPINS, p=2, **kw: fit_clipped_gaussian_stream(
    [s], p, **kw), [
    ("source", dict(s=with_entry(SPINS.astype(np.float32), (0, 0), np.nan)), ValueError,
     r"^source batch 0 .*NaN or infinite"),
    ("num_hidden", dict(p=0), ValueError, r"^num_hidden must be at least 1"),
])
rows("mixture_loo", lambda x=X, k=2, **kw: mixture_loo(x, k, **{"rng_key": KEY, **kw}),
     BAD_X[:2] + [MISSING_KEY])
rows("fit_mcvq_meanfield_svi", lambda x=MCVQ_X, **kw: fit_mcvq_meanfield_svi(
    x, 2, 2, **{"rng_key": KEY, **kw}), BAD_MCVQ_X[:2] + [MISSING_KEY])
rows("fit_mcvq_stream", lambda x=MCVQ_X, k=2, **kw: fit_mcvq_stream([x], k, 2, rng_key=KEY,
                                                                    **kw), [
    ("source", dict(x=with_entry(MCVQ_X, (0, 0), np.nan)), ValueError,
     r"^source batch 0 .*NaN or infinite"),
    ("num_vqs", dict(k=0), ValueError, r"^num_vqs must be at least 1"),
])
_MU, _SIGMA = np.ones((4, 2, 2), np.float32), np.ones((4, 2, 2), np.float32)
_G = np.full((4, 2), 0.5, np.float32)
rows("fit_variational", lambda x=MCVQ_X, mu=_MU, **kw: fit_variational(x, mu, _SIGMA, **kw),
     BAD_MCVQ_X[:2] + [("mu", dict(mu=_MU[0]), ValueError, r"^mu")])
rows("infer_states", lambda result=None, x_new=MCVQ_X, **kw: infer_states(
    _mcvq_result() if result is None else result, x_new, **kw), [
    ("x_new", dict(x_new=MCVQ_X[:, :3]), ValueError, r"^x_new"),
    ("result", dict(result=(1, 2)), TypeError, r"^result must be"),
])
rows("reconstruct", lambda g=_G, **kw: reconstruct(
    g, np.full((6, 2, 2), 0.5, np.float32), _MU, **kw), [
    ("g", dict(g=np.ones((3, 2), np.float32)), ValueError, r"^g"),
])


def _mcvq_result():
    """A fitted MCVQResult for infer_states (2 iterations: not converged, on purpose)."""
    with pytest.warns(ConvergenceWarning):
        return fit_mcvq(MCVQ_X, 2, 2, **_MCVQ)


# --- the tests --------------------------------------------------------------------------
def _id(case: Case) -> str:
    return f"{case.entry}-{case.argument}"


# The cases that each family's plug-in declares for itself.
CASES += [Case(*case) for family in load_families().values()
          for case in (family.bad_inputs() if family.bad_inputs else ())]


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_bad_input_raises_naming_the_argument(case):
    with pytest.raises(case.error) as info:
        case.call()
    message = str(info.value)
    assert re.search(case.pattern, message), f"{message!r} does not match {case.pattern!r}"
    assert re.search(rf"\b{re.escape(case.argument)}\b", message), (
        f"the message {message!r} does not name {case.argument!r}")


def test_the_table_covers_every_public_entry_point():
    """Every fit and baseline that a family's plug-in declares has rows (here, or the
    plug-in's own ``bad_inputs``), and so do every registered program and loader."""
    covered = {case.entry for case in CASES}
    for family in load_families().values():
        entries = set(family.fits) | set(family.baselines)
        missing = sorted(entries - covered)
        assert not missing, f"family {family.name!r}: no bad-input rows for {missing}"
    programs = {f"{info.model.__module__.rsplit('.', 1)[-1]}.model" for info in REGISTRY.values()}
    assert programs | {"model_selection", "ratings.load_ratings"} <= covered


def test_check_choice_and_check_rng_key():
    assert check_choice("a", "mode", ("a", "b")) == "a"
    with pytest.raises(ValueError, match=r"^mode must be one of \('a', 'b'\); got 'c'"):
        check_choice("c", "mode", ("a", "b"))
    with pytest.raises(TypeError, match=r"^mode must be one of .*got 1 \(int\)"):
        check_choice(1, "mode", ("a", "b"))
    assert check_rng_key(KEY) is KEY and check_rng_key(RAW_KEY) is RAW_KEY
    for value in (None, 1, 1.5, "key", np.zeros(3, np.uint32), BATCH_OF_KEYS):
        with pytest.raises(TypeError, match=r"^seed must be a single jax.random key") as info:
            check_rng_key(value, "seed")
        # Only a missing key (None) is a MissingKeyError; a wrong one is a plain TypeError.
        assert isinstance(info.value, MissingKeyError) == (value is None)


def test_a_missing_key_is_one_error_for_every_entry_point():
    """Every rng_key=None row of the table raises MissingKeyError, which callers catch
    as ValueError or as TypeError alike."""
    missing = [case for case in CASES if case.argument == "rng_key"
               and case.error is MissingKeyError]
    assert len(missing) >= 25
    assert issubclass(MissingKeyError, ValueError) and issubclass(MissingKeyError, TypeError)
    for case in missing:
        for caught in (ValueError, TypeError):
            with pytest.raises(caught) as info:
                case.call()
            assert type(info.value) is MissingKeyError, _id(case)
