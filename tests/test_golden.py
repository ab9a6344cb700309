"""Golden results: every public fit and association method, on small fixed-key inputs.

Each case below builds a tiny input from fixed ``jax.random.key(...)`` seeds, calls one
public function of :mod:`inference` the way a user would, and returns its result. The
test flattens the result into named numpy arrays -- every array-valued and numeric
scalar field, nested NamedTuples, dicts, lists and tuples flattened with dotted names
(``trace.energy``, ``values.bic``, ``fits.0.means``), PRNG keys as their key data;
strings, ``None`` and other objects are skipped -- and compares them with the arrays
recorded in ``tests/data/golden/<case>.npz``:

* the set of names must be the same (a renamed, added or dropped field is noticed; a
  field renamed on purpose goes into :data:`RENAMED`, old name -> new name);
* shapes must be equal, and the kind of dtype (bool, integer, float, complex);
* integer and bool arrays must be equal exactly, float arrays to
  ``rtol=1e-5, atol=1e-6`` (the rounding of reordered float32 sums; one case, named with
  its reason in :data:`CASE_ATOL`, to a looser atol; the two cases whose
  rounding follows Python's string hashing run under a fixed hash seed, see
  :data:`HASH_SEED_CASES`);
* the project warnings (:class:`ppl_models.diagnostics.ZooWarning` subclasses) the call
  issued are recorded too, under ``_warnings`` (sorted class names): a case cut short on
  purpose records its ``ConvergenceWarning``, and a refactor may not add or drop one.

The numbers were recorded at commit 580aa8f, on CPU (``JAX_PLATFORMS=cpu``, float32 but
for the two ``_x64`` cases), before the refactor that moves modules into subpackages,
extracts an engine and renames arguments. That refactor changes structure, not numbers:
these files hold it to that. Sixteen cases were re-recorded (with no change of code)
when the requirements left out jaxlib 0.10.x and the tests moved to jax/jaxlib 0.9.2,
whose float32 rounding moved them past the tolerance (:data:`RERECORDED_092` says how
far and why). When a refactor step renames an *argument* or moves a
module, edit the case's call or the imports below; when it renames a *result field*, add
the rename to :data:`RENAMED`. Re-record only when a change is *meant* to change the
numbers (and say so in its commit message)::

    JAX_PLATFORMS=cpu python tests/test_golden.py --record            # every case
    JAX_PLATFORMS=cpu python tests/test_golden.py --record fit_gvq_exact associate_bp
    JAX_PLATFORMS=cpu python tests/test_golden.py --list               # the case names

The test itself never writes. Almost all the time goes into compiling (every case is a
new program), so the default run keeps only the two cheap cases of :data:`DEFAULT_RUN`
(a check that the recordings load and compare); every other case is marked slow, and
``xla_defaults`` by ``XLA_DEFAULTS_FILES`` in tests/conftest.py, and runs in the slow
run (about six minutes of CPU time) with XLA's default compiler options, those they were
recorded with (at the LLVM level 0 of the other runs most cases differ in the last
bits). After every refactor step run
them all::

    JAX_PLATFORMS=cpu pytest tests/test_golden.py -m "slow or not slow" -n 2 --dist load
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inference import (
    associate,
    compare_criteria,
    fit_clipped_gaussian,
    fit_clipped_gaussian_stream,
    fit_gvq,
    fit_gvq_stream,
    fit_mcvq,
    fit_mcvq_stream,
    fit_mixture,
    fit_mixture_stream,
    fit_online_stream,
    fit_vb_mcvq,
    fit_vb_mixture,
    infer_states,
    model_selection,
    reconstruct,
    select_num_components,
)
from inference.clipped.baselines import fit_clipped_mcmc, fit_clipped_svi
from inference.gvq.baselines import (
    fit_gvq_mcmc,
    fit_gvq_svi,
    gibbs_associate,
    map_associate,
)
from inference.gvq.constraints import associate_sets, associate_states
from inference.gvq.description_length import fit_nmf, fit_pca, fit_vq
from inference.mcvq import selection as ms_mcvq
from inference.mcvq.baselines import (
    exact_log_likelihood,
    fit_mcvq_meanfield_svi,
    fit_mcvq_svi,
    fit_variational,
)
from inference.mixture.baselines import fit_mixture_mcmc, fit_mixture_svi
from inference.mixture.online import fit_online
from ppl_models import clipped_gaussian, gvq, mcvq, mixture
from ppl_models.diagnostics import ZooWarning

GOLDEN = Path(__file__).resolve().parent / "data" / "golden"

#: Result fields renamed on purpose since the recording: ``"old.dotted.name": "new.name"``
#: for every case, or ``"<case>:old.name": "new.name"`` for one case. A prefix renames the
#: fields below it too (``"trace": "sweeps"`` turns ``trace.energy`` into ``sweeps.energy``).
RENAMED: dict[str, str] = {
    # fit_online's trace points became one ``trace`` (one point per pass by default);
    # before the global ``error_trace`` below, which would claim its E_MSE.
    **{f"{case}:{old}": new for case in (
        "fit_online_adaptive_em", "fit_online_cl", "fit_online_fscl", "fit_online_cl_posterior",
        "fit_online_rpcl", "fit_online_rpcl_diag_harmonic")
       for old, new in (("log_likelihood_trace", "trace.objective"),
                        ("error_trace", "trace.error"), ("num_used_trace", "trace.num_used"),
                        ("trace_steps", "trace.steps"))},
    # fit_online_stream's passes run through the engine: its per-batch arrays became one
    # ``trace`` (one entry per batch of every pass).
    **{f"{case}:{old}": new for case in ("fit_online_stream", "fit_online_stream_cl_posterior")
       for old, new in (("log_likelihood_trace", "trace.objective"),
                        ("num_active_trace", "trace.num_active"))},
    # One vocabulary: every iterative result's per-iteration arrays became one ``trace``
    # NamedTuple (with at least ``objective``), cut at ``num_iterations``.
    "error_trace": "trace.objective",
    "free_energy_trace": "trace.objective",
    "temperature_trace": "trace.temperature",
    "objective_trace": "trace.objective",
    "bound_trace": "trace.objective",
    "pruned_count_trace": "trace.pruned_count",
    "loss_trace": "trace.objective",
    "num_components_trace": "trace.num_components",
    "num_vqs_trace": "trace.num_vqs",
    "num_states_trace": "trace.num_states",
    # The SVI baselines count their steps as every iterative result does.
    **{f"{case}:num_steps": "num_iterations" for case in (
        "fit_clipped_svi", "fit_mixture_svi", "fit_mcvq_svi", "fit_mcvq_meanfield_svi")},
}
#: Cases whose results kept their 0.1 field names (none left).
KEPT_NAMES: tuple = ()
KEPT_CASES: set = set()
#: Cases re-recorded (current field names, so no renaming) when the requirements left out
#: jax/jaxlib 0.10.x and the tests moved to 0.9.2: under 0.9.2 these drifted past the
#: tolerance with no change of code -- float32 rounding through an EM stopping rule
#: (iteration counts, the last digits of J), L-BFGS paths (fit_gvq_binary, 3e-3), the
#: clipped Gaussian's pairwise solve (eigenvalues to 4e-3), and MCMC and SVI runs, whose
#: chains follow the rounding. Every other case still matches its 580aa8f recording.
RERECORDED_092: set = {
    "fit_mixture_stochastic_spherical", "fit_mixture_stream", "fit_mixture_no_prune_random_init",
    "fit_gvq_binary", "fit_clipped_gaussian", "fit_clipped_gaussian_stream",
    "select_num_components_bic", "compare_criteria", "select_num_components_loo",
    "fit_vb_mixture_full", "fit_vb", "model_selection_mcvq_loo", "fit_gvq_mcmc",
    "fit_mixture_mcmc", "fit_clipped_mcmc", "fit_mcvq_meanfield_svi"}
#: Cases re-recorded when GVQ's M-step began to solve each restart's least squares on its
#: own (``inference.gvq.algorithm.lstsq_solution``: a batched CPU SVD hangs a process
#: with one CPU). Each restart now rounds as it would alone, 1e-7 from the batched
#: solve; br+mf association follows such differences to another local optimum (final
#: error 1.329 -> 1.598 here). The exact-association cases did not move.
RERECORDED_LSTSQ: set = {"fit_gvq_br_mf"}
#: Fields a case returns beyond its recording, new information rather than a changed
#: number: ``case-name prefix: field names``. fit_online's passes, and fit_online_stream's,
#: gained the engine's convergence test (off by default, ``tol=0``): ``num_iterations``
#: and ``converged``.
ADDED: dict[str, tuple[str, ...]] = {
    "fit_online_": ("num_iterations", "converged"),
    # A PSIS-LOO selection keeps arviz.compare's table of its candidates.
    "select_num_components_loo": tuple(f"arviz_compare.{name}" for name in (
        "rank", "elpd_loo", "p_loo", "elpd_diff", "weight", "se", "dse", "warning")),
    # The MCMC baselines keep what arviz.from_numpyro reads (``mcmc``, a NUTSDraws: the
    # draws, NumPyro's extra fields, the data and the program's arguments).
    **{case: tuple(f"mcmc.{name}" for name in (
        "model_args.0", *(f"sample_stats.{stat}" for stat in (
            "accept_prob", "adapt_state.step_size", "diverging", "energy", "num_steps",
            "potential_energy")), *extra))
       for case, extra in (
           ("fit_gvq_mcmc", ("model_kwargs.num_features", "model_kwargs.sigma",
                             "model_kwargs.split_states", "samples.F")),
           ("fit_mixture_mcmc", ("model_kwargs.num_components", "model_kwargs.prior_scale",
                                 "samples.alpha", "samples.corr", "samples.m", "samples.sd")),
           ("fit_clipped_mcmc", ("model_kwargs.noise", "model_kwargs.num_hidden", "samples.W",
                                 "samples.xi", "samples.y")))},
}
#: Fields that a recording held padded past convergence and the refactored fit cuts at
#: ``num_iterations``: compared over the returned (shorter) length.
CUT_PREFIX = "trace."

RTOL, ATOL = 1e-5, 1e-6

#: Cases compared with a looser absolute tolerance, and why. The mean-field MCVQ SVI:
#: compiled inside the engine's loop, XLA fuses its step differently from the plain loop
#: that recorded it, so float32 rounding differs from the first step, and Adam, stepping
#: along gradients that are partly rounding noise, carries it to 4.3e-5 (absolute) on an
#: entry of ``m`` near 0.016 after 40 steps (1.5e-5 relative on ``mu``); the same step in
#: a plain loop reproduces the recording bit for bit. The recording is kept.
CASE_ATOL: dict[str, float] = {"fit_mcvq_meanfield_svi": 1e-4}

#: Fields compared with a looser relative tolerance, and why: ``(case-name prefix, field)
#: -> rtol``. Measured between the recording and the machines of November 2026 (CI's and
#: a development machine's, which agree with each other bit for bit), all on jax/jaxlib
#: 0.9.2, numpyro 0.22.0 and arviz 0.23.x, with no change of code:
#:
#: * NUTS's ``accept_prob``: the mean over a trajectory of ``min(1, exp(-dH))``. The draws
#:   themselves still agree to the default tolerance; the statistic, an exp of an energy
#:   difference rounded in float32, moved by up to 2.1e-4 (relative).
#: * MCVQ's PSIS-LOO from a 20-draw NUTS chain: the Pareto-smoothed weights of so short a
#:   chain magnify that rounding. The loo moved by 1.0% (-5.453 -> -5.506 per example)
#:   and its standard error by 15% (0.363 -> 0.310); the chosen candidate, compared exactly,
#:   did not change.
FIELD_RTOL: dict[tuple[str, str], float] = {
    **{(case, "mcmc.sample_stats.accept_prob"): 1e-3
       for case in ("fit_mixture_mcmc", "fit_clipped_mcmc", "fit_gvq_mcmc")},
    ("model_selection_mcvq_loo", "values.loo.0"): 3e-2,
    ("model_selection_mcvq_loo", "standard_errors.loo.0"): 0.3,
}

#: Cases recorded again on purpose after 580aa8f, and why (documentation: the files under
#: tests/data/golden/ hold the new recording). MCVQ's PSIS-LOO: its NUTS chain takes the
#: mask, responsibilities and mixing weights as traced arguments so that a second call
#: compiles nothing, where NumPyro's MCMC loop had held them as constants that XLA folded;
#: the 20-draw chain moves by float rounding (loo -5.409 -> -5.494 per example, standard
#: error 0.383 -> 0.353), the chosen candidate unchanged. Recorded again when model
#: selection began to exclude unreliable values from a criterion's choice: the 20-draw
#: chain fails the effective-sample-size check, so PSIS-LOO now makes no choice (the
#: fields ``choice.loo`` are gone). Its values had moved by then, past the case's
#: tolerance (loo -5.453 -> -5.506 per example, standard error 0.363 -> 0.310), over the
#: same stretch of changes to the selection and MCVQ code; the cause of that move in a
#: 20-draw chain is not pinned down.
RERECORDED: dict[str, str] = {
    "model_selection_mcvq_loo": "NUTS inputs traced instead of folded constants (compile "
                                "once); no choice from unreliable values"}

#: Cases run in a child process with a fixed ``PYTHONHASHSEED``: funsor, which NumPyro's
#: ``TraceEnum_ELBO`` runs on, orders its sums by iterating over sets of variable names,
#: so their float rounding follows Python's string hashing, random per process. The
#: mean-field MCVQ SVI amplifies that rounding (Adam steps along gradients that are
#: rounding noise): measured up to 0.26 apart between hash seeds after 300 steps, and
#: bit-identical under one seed; the enumerated MCVQ SVI by up to 2e-6 (within the
#: tolerance, but kept out of chance too). Renaming a program's sites changes the order.
HASH_SEED_CASES = frozenset({"fit_mcvq_meanfield_svi", "fit_mcvq_svi"})
HASH_SEED = "0"

#: The association methods of :func:`inference.associate` at the recording.
ASSOCIATION_METHODS = ("bp", "br", "br+mf", "dbp", "dbr", "exact", "gibbs", "mf", "tabu")


# --------------------------------------------------------------------------- inputs
# Tiny problems, shared by the cases (cached: each is built once per process).


@functools.cache
def planted():
    """40 examples of a planted GVQ: 5 features, dim 8, noise 0.1 (x, F as numpy)."""
    data = gvq.generate_planted(jax.random.key(11), 40, 5, 8, noise_scale=0.1)
    return np.asarray(data.x), np.asarray(data.features)


@functools.cache
def planted_sets():
    """30 examples for feature sets: F (6, 5) = 2 sets of (2 units + origin)."""
    key_f, key_x = jax.random.split(jax.random.key(12))
    features = np.asarray(jax.random.normal(key_f, (6, 5)))
    x = np.asarray(1.5 * jax.random.normal(key_x, (30, 5)))
    return x, features


@functools.cache
def binary_data():
    """48 binary patterns (16 pixels) made from 2 sets of (2 binary units + origin)."""
    rng = np.random.default_rng(0)
    features = (rng.random((6, 16)) < 0.3).astype(np.float32)
    sets = rng.integers(0, 2, 48)
    units = rng.integers(0, 2, (48, 2))
    states = np.asarray(gvq.full_states(jnp.asarray(sets), jnp.asarray(units), 2))
    return ((states @ features) >= 0.5).astype(np.float32)


@functools.cache
def blobs():
    """60 examples of 3 well separated 2-D Gaussians."""
    return np.asarray(mixture.generate(jax.random.key(2), 60, 3, 2, separation=5.0).x)


@functools.cache
def mcvq_data():
    """30 examples of a planted MCVQ: dim 6, 2 VQs of 2 states (x, mu, sigma)."""
    data = mcvq.generate(jax.random.key(3), 30, 6, 2, 2)
    return np.asarray(data.x), np.asarray(data.mu), np.asarray(data.sigma)


@functools.cache
def mcvq_mask():
    """A fixed missing-value mask of :func:`mcvq_data` (about 15% missing)."""
    x, _, _ = mcvq_data()
    mask = np.array(jax.random.uniform(jax.random.key(31), x.shape) > 0.15)
    mask[:, 0] = True  # every example keeps an observed dimension
    return mask


@functools.cache
def spins():
    """80 patterns of the clipped Gaussian, 6 visible units, 2 hidden."""
    return np.asarray(clipped_gaussian.generate(jax.random.key(4), 80, 6, 2).s)


def batches(x, size):
    """``x`` as a list of row batches of ``size`` (the last one shorter)."""
    return [x[i:i + size] for i in range(0, len(x), size)]


KEY = jax.random.key(7)


# ---------------------------------------------------------------------------- cases

CASES: dict[str, Callable[[], object]] = {}
SLOW: set[str] = set()

#: The cases of the default run (two cheap ones); all others are slow.
DEFAULT_RUN = frozenset({"associate_exact", "associate_mf"})


def case(name: str, *, slow: bool = False):
    """Register ``function`` as the golden case ``name``."""

    def register(function):
        assert name not in CASES, name
        CASES[name] = function
        if slow:
            SLOW.add(name)
        return function

    return register


# Association: every method of inference.associate on one planted problem.


def _associate(method):
    x, features = planted()
    return associate(features, x, method, rng_key=jax.random.key(5))


for _method in ASSOCIATION_METHODS:
    case(f"associate_{_method.replace('+', '_')}")(functools.partial(_associate, _method))


@case("map_associate")
def _():
    x, features = planted()
    return map_associate(features, x, noise=0.3)


@case("associate_exact_noise_prior", slow=True)
def _():
    x, features = planted()
    return associate(features, x, noise=0.5,
                     model_kwargs={"prior_probs": jnp.array([0.1, 0.3, 0.5, 0.7, 0.9])})


@case("associate_mf_noise_prior", slow=True)
def _():
    x, features = planted()
    return associate(features, x, "mf", rng_key=jax.random.key(6), noise=0.5,
                     model_kwargs={"prior_probs": jnp.array([0.1, 0.3, 0.5, 0.7, 0.9])})


@case("associate_br_per_example_order", slow=True)
def _():
    x, features = planted()
    return associate(features, x, "br", rng_key=jax.random.key(6), order="per_example")


@case("associate_sets_exact", slow=True)
def _():
    x, features = planted_sets()
    states, sets, energy = associate_sets(features, x, 2, model_kwargs={"sparsity": 0.3})
    return {"states": states, "sets": sets, "energy": energy}


@case("associate_sets_br_mf", slow=True)
def _():
    x, features = planted_sets()
    states, sets, energy = associate_sets(features, x, 2, "br+mf", rng_key=jax.random.key(8))
    return {"states": states, "sets": sets, "energy": energy}


@case("associate_states", slow=True)
def _():
    x, features = planted()
    states, energy = associate_states(gvq.model, jnp.asarray(x),
                                      {"features": jnp.asarray(features)},
                                      num_features=features.shape[0])
    return {"states": states, "energy": energy}


@case("gibbs_associate", slow=True)
def _():
    x, features = planted()
    return gibbs_associate(features, x[:12], rng_key=jax.random.key(9), noise=0.3,
                           num_warmup=10, num_samples=10)


# GVQ learning.


@case("fit_gvq_exact")
def _():
    return fit_gvq(planted()[0], 5, rng_key=jax.random.key(0), num_restarts=2)


@case("fit_gvq_br")
def _():
    return fit_gvq(planted()[0], 5, method="br", rng_key=jax.random.key(1), num_restarts=2)


@case("fit_gvq_stream")
def _():
    return fit_gvq_stream(batches(planted()[0], 16), 5, rng_key=jax.random.key(0),
                          num_restarts=2, return_states=True)


@case("fit_gvq_br_mf", slow=True)
def _():
    return fit_gvq(planted()[0], 5, method="br+mf", rng_key=jax.random.key(1), num_restarts=2)


@case("fit_gvq_mf_cut_short", slow=True)
def _():
    return fit_gvq(planted()[0], 5, method="mf", rng_key=jax.random.key(1), num_restarts=1,
                   max_iterations=10)


@case("fit_gvq_sparsity_noise", slow=True)
def _():
    return fit_gvq(planted()[0], 4, rng_key=jax.random.key(2), num_restarts=2, sparsity=0.5,
                   noise=0.5)


@case("fit_gvq_sets", slow=True)
def _():
    return fit_gvq(planted_sets()[0], 6, num_sets=2, rng_key=jax.random.key(3), num_restarts=2)


@case("fit_gvq_binary", slow=True)
def _():
    return fit_gvq(binary_data(), 6, num_sets=2, binary=True, beta=4.5, num_restarts=2,
                   max_iterations=5, m_step_iterations=10, rng_key=jax.random.key(1))


@case("fit_gvq_init_features", slow=True)
def _():
    x, features = planted()
    start = features + 0.3 * np.asarray(jax.random.normal(jax.random.key(4), features.shape))
    return fit_gvq(x, 5, rng_key=jax.random.key(0), num_restarts=1, init_features=start)


@case("fit_gvq_exact_x64", slow=True)
def _():
    with jax.enable_x64(True):
        return fit_gvq(planted()[0].astype(np.float64), 5, rng_key=jax.random.key(0),
                       num_restarts=2)


# Clipped Gaussian.


@case("fit_clipped_gaussian")
def _():
    return fit_clipped_gaussian(spins(), 2)


@case("fit_clipped_gaussian_stream")
def _():
    return fit_clipped_gaussian_stream(batches(spins(), 30), 2)


@case("fit_clipped_gaussian_no_bias_projected", slow=True)
def _():
    return fit_clipped_gaussian(spins(), 2, bias=False, project=True)


# Mixtures: the three modes of fit_mixture and its covariance types, online learning.


def _fit_mixture(mode, covariance):
    return fit_mixture(blobs(), 3, mode=mode, covariance=covariance, rng_key=jax.random.key(10))


for _mode, _covariance, _slow in [("stochastic", "full", False), ("map", "diag", False),
                                  ("nearest", "spherical", False), ("stochastic", "diag", True),
                                  ("stochastic", "spherical", True), ("map", "full", True),
                                  ("nearest", "full", True)]:
    case(f"fit_mixture_{_mode}_{_covariance}", slow=_slow)(
        functools.partial(_fit_mixture, _mode, _covariance))


@case("fit_mixture_stream")
def _():
    return fit_mixture_stream(batches(blobs(), 25), 3, rng_key=jax.random.key(10),
                              return_labels=True)


@case("fit_mixture_no_prune_random_init", slow=True)
def _():
    return fit_mixture(blobs(), 4, prune=False, init="random", rng_key=jax.random.key(11),
                       max_iterations=30)


@case("fit_mixture_stochastic_full_x64", slow=True)
def _():
    with jax.enable_x64(True):
        return fit_mixture(blobs().astype(np.float64), 3, rng_key=jax.random.key(10))


@case("fit_mixture_stream_nearest", slow=True)
def _():
    return fit_mixture_stream(blobs(), 3, mode="nearest", rng_key=jax.random.key(10),
                              batch_size=25)


def _fit_online(method):
    return fit_online(blobs(), 4, method=method, rng_key=jax.random.key(12), max_iterations=2)


for _method in ("adaptive_em", "cl", "fscl", "cl_posterior", "rpcl"):
    case(f"fit_online_{_method}")(functools.partial(_fit_online, _method))


@case("fit_online_stream")
def _():
    return fit_online_stream(batches(blobs(), 25), 4, rng_key=jax.random.key(12))


@case("fit_online_rpcl_diag_harmonic", slow=True)
def _():
    return fit_online(blobs(), 4, method="rpcl", rng_key=jax.random.key(12), covariance="diag",
                      schedule="harmonic", trace_every=20)


@case("fit_online_stream_cl_posterior", slow=True)
def _():
    return fit_online_stream(batches(blobs(), 25), 4, method="cl_posterior",
                             rng_key=jax.random.key(12))


# Model selection.


@case("select_num_components_J")
def _():
    return select_num_components(blobs(), (2, 3), criterion="J", rng_key=jax.random.key(13),
                                 num_restarts=1)


@case("select_num_components_bic", slow=True)
def _():
    return select_num_components(blobs(), (2, 3), criterion="bic", rng_key=jax.random.key(13),
                                 num_restarts=2)


@case("compare_criteria", slow=True)
def _():
    return compare_criteria(blobs(), (2, 3), rng_key=jax.random.key(14), num_restarts=1)


@case("select_num_components_loo", slow=True)
def _():
    return select_num_components(blobs(), (2, 3), criterion="loo", rng_key=jax.random.key(32),
                                 loo_options={"num_warmup": 20, "num_samples": 20})


def timeless(result):
    """A model-selection result without its wall times (not a number to reproduce)."""
    return result._replace(seconds={})


@case("model_selection_mcvq", slow=True)
def _():
    return timeless(model_selection(mcvq_data()[0], [(1, 2), (2, 2)], criteria=("train", "bic"),
                                    rng_key=jax.random.key(15), num_restarts=2))


@case("model_selection_mcvq_vb_cv", slow=True)
def _():
    return timeless(model_selection(mcvq_data()[0], [(1, 2), (2, 2)], criteria=("vb", "cv"),
                                    rng_key=jax.random.key(15), num_folds=2, num_restarts=1,
                                    vb_options={"moves": False}))


@case("model_selection_mcvq_loo", slow=True)
def _():
    return timeless(model_selection(mcvq_data()[0], [(1, 2)], criteria=("loo",),
                                    rng_key=jax.random.key(33), num_warmup=20, num_samples=20))


@case("model_selection_mixture", slow=True)
def _():
    return timeless(model_selection(blobs(), [2, 3], model="mixture", criteria=("train", "bic"),
                                    rng_key=jax.random.key(16), num_restarts=1))


@case("model_selection_mixture_vb_cv", slow=True)
def _():
    return timeless(model_selection(blobs(), [1, 2], model="mixture", criteria=("vb", "cv"),
                                    rng_key=jax.random.key(16), num_folds=2, num_restarts=1))


# MCVQ and the VB fits.


@functools.cache
def mcvq_fit():
    return fit_mcvq(mcvq_data()[0], 2, 2, rng_key=jax.random.key(17), num_restarts=2)


@case("fit_mcvq")
def _():
    return mcvq_fit()


@case("fit_mcvq_stream")
def _():
    return fit_mcvq_stream(batches(mcvq_data()[0], 12), 2, 2, rng_key=jax.random.key(17),
                           return_m=True)


@case("infer_states_reconstruct")
def _():
    fit = mcvq_fit()
    x_new = np.asarray(mcvq.generate(jax.random.key(3), 8, 6, 2, 2).x)
    m = infer_states(fit, x_new)
    return {"m": m, "reconstruction": reconstruct(fit.g, m, fit.mu)}


@case("fit_vb_mixture_full")
def _():
    return fit_vb_mixture(blobs(), 5, rng_key=jax.random.key(21))


@case("fit_vb_mcvq")
def _():
    return fit_vb_mcvq(mcvq_data()[0], 3, 3, rng_key=jax.random.key(22), moves=False)


@case("fit_mcvq_masked", slow=True)
def _():
    x = np.where(mcvq_mask(), mcvq_data()[0], np.nan)
    return fit_mcvq(x, 2, 2, mask=mcvq_mask(), rng_key=jax.random.key(18), max_iterations=40)


@case("fit_em", slow=True)
def _():
    return ms_mcvq.fit_em(mcvq_data()[0], None, 2, 2, jax.random.key(19), 2,
                          {"max_iterations": 30})


@case("fit_vb", slow=True)
def _():
    fit, unconverged = ms_mcvq.fit_vb(mcvq_data()[0], None, 2, 2, jax.random.key(20), 2,
                                      {"max_iterations": 30, "moves": False})
    return {"fit": fit, "unconverged": unconverged}


@case("fit_vb_mixture_diag", slow=True)
def _():
    return fit_vb_mixture(blobs(), 5, rng_key=jax.random.key(21), covariance="diag",
                          max_iterations=100)


@case("fit_vb_mcvq_moves_masked", slow=True)
def _():
    x = np.where(mcvq_mask(), mcvq_data()[0], np.nan)
    return fit_vb_mcvq(x, 3, 3, mask=mcvq_mask(), rng_key=jax.random.key(23),
                       max_iterations=60, move_steps=5)


# The NumPyro baselines (few steps: cut short, their ConvergenceWarning recorded).


@case("fit_gvq_svi")
def _():
    return fit_gvq_svi(planted()[0], 5, rng_key=jax.random.key(24), noise=0.3, num_steps=40,
                       num_restarts=2)


@case("fit_variational_exact_log_likelihood")
def _():
    x, mu, sigma = mcvq_data()
    g, m = fit_variational(x, mu, sigma, max_iterations=20)
    return {"g": g, "m": m, "log_likelihood": exact_log_likelihood(x, mu, sigma)}


@case("fit_gvq_mcmc", slow=True)
def _():
    return fit_gvq_mcmc(planted()[0][:20], 3, rng_key=jax.random.key(25), noise=0.3,
                        num_warmup=20, num_samples=20)


@case("fit_mixture_svi", slow=True)
def _():
    return fit_mixture_svi(blobs(), 3, rng_key=jax.random.key(26), num_steps=40)


@case("fit_mixture_mcmc", slow=True)
def _():
    return fit_mixture_mcmc(blobs(), 2, rng_key=jax.random.key(27), num_warmup=20,
                            num_samples=20)


@case("fit_clipped_svi", slow=True)
def _():
    return fit_clipped_svi(spins(), 2, rng_key=jax.random.key(28), num_steps=40)


@case("fit_clipped_mcmc", slow=True)
def _():
    return fit_clipped_mcmc(spins()[:40], 2, rng_key=jax.random.key(29), num_warmup=20,
                            num_samples=20, num_predictive_draws=10)


@case("fit_mcvq_svi", slow=True)
def _():
    return fit_mcvq_svi(mcvq_data()[0], 2, 2, rng_key=jax.random.key(30), num_steps=40)


@case("fit_mcvq_meanfield_svi", slow=True)
def _():
    return fit_mcvq_meanfield_svi(mcvq_data()[0], 2, 2, rng_key=jax.random.key(30),
                                  num_steps=40)


# Description-length baselines (PCA in JAX; NMF and VQ through scikit-learn).


@case("fit_pca_nmf_vq", slow=True)
def _():
    x = mcvq_data()[0]
    return {"pca": fit_pca(x[:20], x[20:], 2), "vq": fit_vq(x[:20], x[20:], 3, n_init=2),
            "nmf": fit_nmf(x[:20], x[20:], 2, shift=float(-x.min()) + 1.0, max_iter=500)}


# ------------------------------------------------------------------- flatten, compare


def flatten(result, prefix: str = "") -> dict[str, np.ndarray]:
    """The numeric arrays of ``result``, by dotted name (see the module docstring)."""
    out: dict[str, np.ndarray] = {}

    def visit(value, name):
        if value is None or isinstance(value, str | bytes) or callable(value):
            return
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # NamedTuple
            for field in value._fields:
                visit(getattr(value, field), f"{name}.{field}" if name else field)
            return
        if isinstance(value, dict):
            for key in value:
                visit(value[key], f"{name}.{key}" if name else str(key))
            return
        if isinstance(value, list | tuple):
            for index, item in enumerate(value):
                visit(item, f"{name}.{index}" if name else str(index))
            return
        if isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype,
                                                                  jax.dtypes.prng_key):
            value = jax.random.key_data(value)
        if isinstance(value, np.ndarray | jax.Array | np.generic | bool | int | float | complex):
            array = np.asarray(value)
            if array.dtype.kind in "biufc":
                out[name or "value"] = array
        # anything else (arviz data, data frames, ...) is not a number: skipped

    visit(result, prefix)
    return out


def run_case(name: str) -> dict[str, np.ndarray]:
    """Run case ``name``: its flattened result plus ``_warnings``, the ZooWarnings issued.

    A case of :data:`HASH_SEED_CASES` runs in a child process under ``PYTHONHASHSEED``
    :data:`HASH_SEED` unless this process already has that seed.
    """
    if name in HASH_SEED_CASES and os.environ.get("PYTHONHASHSEED") != HASH_SEED:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / f"{name}.npz"
            env = {**os.environ, "PYTHONHASHSEED": HASH_SEED}
            subprocess.run([sys.executable, __file__, "--run", name, str(path)], env=env,
                           check=True)
            with np.load(path, allow_pickle=False) as data:
                return {key: data[key] for key in data.files}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CASES[name]()
        arrays = flatten(result)
    zoo = sorted({w.category.__name__ for w in caught if issubclass(w.category, ZooWarning)})
    for w in caught:  # any other warning goes on as usual
        if not issubclass(w.category, ZooWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    assert "_warnings" not in arrays
    arrays["_warnings"] = np.array(zoo, dtype=str)
    return arrays


def renamed(case_name: str, field: str) -> str:
    """The current name of the recorded ``field`` of ``case_name`` (see :data:`RENAMED`)."""
    if (case_name.startswith(KEPT_NAMES)
            or case_name in KEPT_CASES | RERECORDED_092 | RERECORDED_LSTSQ):
        return field
    parts = field.split(".")
    for old, new in RENAMED.items():
        scope, _, old_field = old.rpartition(":")
        if scope and scope != case_name:
            continue
        length = len(old_field.split("."))
        for i in range(len(parts) - length + 1):  # at any depth (fits.0.objective_trace)
            if ".".join(parts[i:i + length]) == old_field:
                return ".".join([*parts[:i], new, *parts[i + length:]])
    return field


def _kind(dtype) -> str:
    return {"b": "bool", "i": "integer", "u": "integer", "f": "float", "c": "complex",
            "U": "str"}.get(np.dtype(dtype).kind, str(dtype))


def compare(name: str, got: dict[str, np.ndarray], want: dict[str, np.ndarray]):
    """Raise AssertionError unless ``got`` matches the recorded ``want`` (module docstring)."""
    want = {renamed(name, key): value for key, value in want.items()}
    # A trace may carry more per-iteration arrays than were recorded (e.g. the count of
    # re-associated examples): new information, not a changed number.
    missing = sorted(set(want) - set(got))
    added = {field for prefix, fields in ADDED.items() if name.startswith(prefix)
             and not name.startswith(KEPT_NAMES) for field in fields}
    extra = sorted(k for k in set(got) - set(want) - added if not k.startswith(CUT_PREFIX))
    assert not missing and not extra, (
        f"{name}: result fields differ from the recording; recorded but not returned: "
        f"{missing}, returned but not recorded: {extra} (a field renamed on purpose goes "
        "into RENAMED)")
    issued, recorded = [str(w) for w in got["_warnings"]], [str(w) for w in want["_warnings"]]
    assert issued == recorded, f"{name}: issued the ZooWarnings {issued}, recorded {recorded}"
    for key in sorted(set(want) - {"_warnings"}):
        expected, actual = want[key], got[key]
        message = f"{name}: {key}"
        if (key.startswith(CUT_PREFIX) and actual.ndim >= 1 and expected.ndim == actual.ndim
                and actual.shape[-1] < expected.shape[-1]):
            expected = expected[..., :actual.shape[-1]]  # padded then, cut now
        assert actual.shape == expected.shape, f"{message}: shape {actual.shape} != recorded " \
                                               f"{expected.shape}"
        assert _kind(actual.dtype) == _kind(expected.dtype), (
            f"{message}: dtype {actual.dtype} != recorded {expected.dtype}")
        if expected.dtype.kind in "fc":
            np.testing.assert_allclose(actual, expected, rtol=FIELD_RTOL.get((name, key), RTOL),
                                       atol=CASE_ATOL.get(name, ATOL), err_msg=message)
        else:
            np.testing.assert_array_equal(actual, expected, err_msg=message)


def load(name: str) -> dict[str, np.ndarray]:
    with np.load(GOLDEN / f"{name}.npz", allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def record(names) -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name in names:
        arrays = run_case(name)
        np.savez_compressed(GOLDEN / f"{name}.npz", **arrays)
        print(f"recorded {name}: {len(arrays)} arrays", flush=True)


# ---------------------------------------------------------------------------- tests


def test_every_association_method_has_a_case():
    from inference.association.core import METHODS

    assert sorted(METHODS) == sorted(ASSOCIATION_METHODS), (
        "a new association method: add it to ASSOCIATION_METHODS and record its case")


def test_every_case_is_recorded_and_every_recording_has_a_case():
    recorded = {path.stem for path in GOLDEN.glob("*.npz")}
    assert recorded == set(CASES), (sorted(set(CASES) - recorded), sorted(recorded - set(CASES)))


@pytest.mark.parametrize("name", [n if n in DEFAULT_RUN and n not in SLOW
                                  else pytest.param(n, marks=pytest.mark.slow)
                                  for n in CASES])
def test_golden(name):
    if jax.default_backend() != "cpu":
        pytest.skip("the golden results were recorded on CPU")
    compare(name, run_case(name), load(name))


if __name__ == "__main__":
    arguments = sys.argv[1:]
    if arguments[:1] == ["--list"]:
        print("\n".join(CASES))
    elif arguments[:1] == ["--run"]:  # one case into a file, for run_case's child process
        np.savez_compressed(arguments[2], **run_case(arguments[1]))
    elif arguments[:1] == ["--record"]:
        chosen = arguments[1:] or list(CASES)
        unknown = sorted(set(chosen) - set(CASES))
        if unknown:
            sys.exit(f"unknown cases {unknown}; --list names them")
        record(chosen)
    else:
        sys.exit(__doc__.split("\n\n")[0] + "\n\nusage: python tests/test_golden.py "
                 "--record [case ...] | --list")


def test_the_default_run_names_existing_cases():
    assert DEFAULT_RUN <= set(CASES), sorted(DEFAULT_RUN - set(CASES))
