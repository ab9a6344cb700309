"""Shared fixtures: small planted GVQ data sets, and loading and running the examples."""

import contextlib
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jax
import pytest

from ppl_models import gvq

#: The compiler options of every test run that selects no test marked ``xla_defaults``.
FAST_COMPILE_FLAGS = ("--xla_backend_optimization_level=0",
                      "--xla_cpu_use_fusion_emitters=false")

#: The marks a test marked ``xla_defaults`` may carry besides it (it is slow; some are
#: ``whole_run`` too).
_XLA_DEFAULTS_MARKS = ({"xla_defaults", "slow"}, {"xla_defaults", "slow", "whole_run"})


def _selects_xla_defaults(markexpr: str) -> bool:
    """Whether ``-m markexpr`` can select a test marked ``xla_defaults``."""
    if not markexpr:
        return True
    try:  # pytest's own parser of -m expressions (not a public API: fall back if moved)
        from _pytest.mark.expression import Expression
    except ImportError:
        return not (markexpr == "not slow" or "not xla_defaults" in markexpr)
    expression = Expression.compile(markexpr)
    return any(expression.evaluate(lambda name, marks=marks, **_: name in marks)
               for marks in _XLA_DEFAULTS_MARKS)


def _compile_faster(config):
    """Compile at LLVM optimisation level 0, with XLA's older CPU emitters, in every run
    whose ``-m`` leaves out the tests marked ``xla_defaults``: the default run
    (``-m "not slow"``) and CI's long-test step (``-m "slow and not whole_run and not
    xla_defaults"``); a run that may select them keeps XLA's defaults.

    The test programs are small, so most of a run is XLA compiling them (about 90% of
    the default run's summed test time, by ``jax.monitoring``'s compile events), and
    LLVM's passes are most of that. About 11,000 of the 12,000 compilations of one
    default run took under 50 ms each, nearly all of them single eager operations on
    new shapes. On this project's 2-core machine the default run took 399-428 s at
    level 0 against 498-524 s at level 1, which had itself taken about 12% less than
    XLA's default, level 2. XLA's CPU fusion emitters (its default since 2025) cost more
    to compile again: with ``--xla_cpu_use_fusion_emitters=false`` 600 small eager
    operations took 7.6-7.9 s of CPU to compile instead of 12.7-12.9 s. The long tests
    gain as much: ``examples/your_own_program.py --quick`` took 98 s and 99 CPU seconds
    with these options against 175 s and 241 CPU seconds with XLA's defaults (one
    process, quiet cores).

    Two kinds of test keep XLA's defaults, marked ``xla_defaults`` and run in a step of
    their own: those whose expectations were recorded with them (the golden results,
    checked exactly; a chunked SVI run that must equal the unchunked one bit for bit)
    and those whose run time, not their compilation, dominates (the tempered-SMC
    evidence took 30 s a seed at level 0 against 8 s at the defaults). Results at
    level 0 agree with the defaults to float rounding, not bit for bit (an EM run may
    stop a few iterations earlier or later); the other tests state tolerances that hold
    at every level. ``XLA_FLAGS`` naming a level or the emitters yourself overrides
    that choice. An XLA that no longer knows the emitters' flag would stop at its first
    computation on an unknown flag, so the flag is added only where a short child
    process with it starts (about a second). JAX reads ``XLA_FLAGS`` when it starts its
    CPU backend, which no import here does, so setting it in ``pytest_configure`` is
    early enough; the xdist workers inherit it.
    """
    if _selects_xla_defaults(config.option.markexpr):
        return
    flags = os.environ.get("XLA_FLAGS", "")
    level, emitters = FAST_COMPILE_FLAGS
    extra = []
    if "xla_backend_optimization_level" not in flags:
        extra.append(level)
    if "xla_cpu_use_fusion_emitters" not in flags and _xla_knows(emitters):
        extra.append(emitters)
    if extra:
        os.environ["XLA_FLAGS"] = " ".join(filter(None, [flags, *extra]))


def _xla_knows(flag):
    """Whether this jaxlib's XLA starts its CPU backend with ``flag`` (an unknown flag in
    ``XLA_FLAGS`` ends the process)."""
    env = {**os.environ, "XLA_FLAGS": flag, "JAX_PLATFORMS": "cpu"}
    try:
        probe = subprocess.run([sys.executable, "-c", "import jax; jax.devices('cpu')"],
                               env=env, capture_output=True, timeout=300)
    except subprocess.TimeoutExpired:
        return False
    return probe.returncode == 0


def pytest_configure(config):
    """Keep every compiled program of this run in a compilation cache on disk.

    ``_release_compiled_programs`` below drops the in-memory programs after every module,
    so a program that several modules run (the same fit at the same shapes) was compiled
    once per module; XLA compilation is most of the default run's time on CPU. With the
    cache a later module loads the executable from disk instead. The folder is new for
    each run and removed at its end, so nothing carries over between runs and a cold
    run is what is measured; set ``JAX_COMPILATION_CACHE_DIR`` to use (and keep) a
    folder of your own instead. ``PPL_ZOO_CACHE_DIR`` names the same folder, so that
    the ``ppl-zoo`` command, which turns a cache on by itself
    (:func:`inference.enable_compilation_cache`), run here or in a child process, uses
    it too and never the user's own cache folder.
    """
    _compile_faster(config)
    if os.environ.get("JAX_COMPILATION_CACHE_DIR") or jax.config.jax_compilation_cache_dir:
        return
    folder = tempfile.mkdtemp(prefix="ppl-zoo-jax-cache-")
    config._ppl_zoo_jax_cache = folder
    config._ppl_zoo_cache_env = os.environ.get("PPL_ZOO_CACHE_DIR")
    os.environ["PPL_ZOO_CACHE_DIR"] = folder
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


#: Examples sections (doctests) that run in the slow run only: the generic NumPyro
#: baselines, whose short NUTS and SVI runs cost 6-17 s each to compile. Each function
#: keeps default-run tests of its own: tests/test_compile_once.py (a real fit, twice;
#: GVQ's chain there in the slow run) and
#: tests/reliability/test_validation.py for all of them, and a real fit in
#: test_mixture_baselines (also mixture_loo), test_clipped_baselines,
#: test_mcvq_baselines (fit_mcvq_svi's short run that warns), test_arviz (GVQ's and
#: PPCA's chains). GVQ's SVI keeps its Examples here: no other default-run test fits it.
SLOW_DOCTESTS = frozenset({
    "inference.mixture.baselines_svi.fit_mixture_svi",
    "inference.mixture.baselines_mcmc.fit_mixture_mcmc",
    "inference.mixture.baselines_mcmc.mixture_loo",
    "inference.mcvq.baselines_svi.fit_mcvq_svi",
    "inference.gvq.baselines_mcmc.fit_gvq_mcmc",
    "inference.clipped.baselines_mcmc.fit_clipped_mcmc",
    "inference.clipped.baselines_svi.fit_clipped_svi",
    "inference.mcvq.baselines_svi.fit_mcvq_meanfield_svi",
    "inference.ppca.baselines.fit_ppca_mcmc",
    "inference.ppca.baselines.fit_ppca_svi",
})


#: The slow tests that keep XLA's default compiler options (marked ``xla_defaults`` at
#: collection; see :func:`_compile_faster`), by file or by test. Measured: the long tests
#: at LLVM level 0 took 3,626 summed seconds against 5,263 at the defaults (golden
#: results left out), but the files below, whose sampling or long runs dominate, took
#: longer at level 0 (the evidence of test_selection_programs.py 528 s against 329 s
#: at the defaults on a busier machine; test_readme.py 294 against 288).
XLA_DEFAULTS_FILES = frozenset({
    "tests/reliability/test_determinism.py",
    "tests/test_arviz.py",
    "tests/test_clipped_baselines.py",
    "tests/test_compare_cli.py",
    "tests/test_em_example.py",
    "tests/test_examples.py",
    "tests/test_gvq_constraints.py",
    "tests/test_golden.py",  # recorded with XLA's defaults and compared exactly
    "tests/test_gvq_learning.py",
    "tests/test_mcvq_collapsed.py",
    "tests/test_numpyro_baselines.py",
    "tests/test_overcomplete_gvq_example.py",
    "tests/test_readme.py",
    "tests/test_real_data_fits.py",
    "tests/test_reproduce.py",
    "tests/test_selection_programs.py",
    "tests/test_sharding.py",
})

#: Slow tests whose expectations hold at XLA's defaults but not at level 0: two runs
#: equal bit for bit (chunked SVI and one run; Dask's one-thread workers and one
#: process), an adaptive EM's stalled estimate to 1e-6, and hard-cut EM's criterion
#: never rising by more than 1e-5 of itself (at level 0 it rose by 1.5e-5 once, seed
#: 60). Where a claim holds only at one compiler's rounding, it is a claim about XLA's
#: defaults, and these keep them.
XLA_DEFAULTS_TESTS = frozenset({
    "tests/reliability/test_checkpoint.py::test_svi_chunks_and_resume_are_bit_identical",
    "tests/reliability/test_properties.py::test_mixture_em_criterion_never_increases",
    "tests/test_compare_dask.py::test_gvq_seeds_on_two_worker_processes_equal_the_serial_run",
    "tests/test_mixture_online.py::"
    "test_adaptive_em_approaches_batch_em_and_the_previous_estimate_stalls",
})


def _keeps_xla_defaults(item) -> bool:
    path, _, rest = item.nodeid.partition("::")
    name = rest.split("[", 1)[0]
    return path in XLA_DEFAULTS_FILES or f"{path}::{name}" in XLA_DEFAULTS_TESTS


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark the doctests of :data:`SLOW_DOCTESTS` slow and the slow tests of
    :data:`XLA_DEFAULTS_FILES` and :data:`XLA_DEFAULTS_TESTS` ``xla_defaults`` (before
    ``-m`` selects), and refuse a test marked ``xla_defaults`` that is not slow (see
    :func:`_compile_faster`).

    ``tests/test_docs.py`` checks that every listed name is a doctest, so a renamed
    function cannot leave the list pointing at nothing."""
    for item in items:
        if isinstance(item, pytest.DoctestItem) and item.name in SLOW_DOCTESTS:
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("slow") and _keeps_xla_defaults(item):
            item.add_marker(pytest.mark.xla_defaults)
        if item.get_closest_marker("xla_defaults") and not item.get_closest_marker("slow"):
            raise pytest.UsageError(f"{item.nodeid} is marked xla_defaults but not slow: the "
                                    "default run compiles with other options (conftest.py)")


def pytest_unconfigure(config):
    folder = getattr(config, "_ppl_zoo_jax_cache", None)
    if folder is not None:
        jax.config.update("jax_compilation_cache_dir", None)
        shutil.rmtree(folder, ignore_errors=True)
        previous = getattr(config, "_ppl_zoo_cache_env", None)
        if previous is None:
            os.environ.pop("PPL_ZOO_CACHE_DIR", None)
        else:
            os.environ["PPL_ZOO_CACHE_DIR"] = previous


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled programs after every test module.

    The default run compiles thousands of programs in one process; keeping them all
    alive made a late compilation crash (a segmentation fault inside XLA) once the
    suite grew past about 750 tests.
    """
    yield
    jax.clear_caches()


@pytest.fixture(scope="session")
def planted_small():
    """40 examples, 5 features, dim 8, noise 0.1 (sec. 4.3 generator, dense F ~ N(2, 1))."""
    return gvq.generate_planted(jax.random.key(11), 40, 5, 8, noise_scale=0.1)


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _load_example(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_example(module, argv):
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        results = module.main(argv)
    results["printed"] = printed.getvalue()
    return results


@pytest.fixture(scope="session")
def load_example():
    """``load_example("gvq_digits")`` imports ``examples/gvq_digits.py`` as a module."""
    return _load_example


@pytest.fixture(scope="session")
def run_example():
    """``run_example(module, argv)``: ``module.main(argv)`` with its printout captured.

    Returns main's result dict with the printed text added under ``"printed"``.
    """
    return _run_example
