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


def _compile_the_default_run_faster(config):
    """Compile at LLVM optimisation level 0, with XLA's older CPU emitters, in the default
    run (``-m "not slow"``).

    The test programs are small, so most of the default run is XLA compiling them
    (about 90% of the summed test time, by ``jax.monitoring``'s compile events), and
    LLVM's passes are most of that. About 11,000 of the 12,000 compilations of one run
    took under 50 ms each, nearly all of them single eager operations on new shapes. On
    this project's 2-core machine the default run took 399-428 s at level 0 against
    498-524 s at level 1, which had itself taken about 12% less than XLA's default,
    level 2; the programs' run time hardly counts at these sizes. XLA's CPU fusion
    emitters (its default since 2025) cost more to compile again: with
    ``--xla_cpu_use_fusion_emitters=false`` 600 small eager operations took 7.6-7.9 s
    of CPU to compile instead of 12.7-12.9 s, and test_mixture.py with test_vb_mcvq.py
    66 s of CPU instead of 115 s (both at level 0, on a busy machine). Results agree
    with the defaults to float rounding, not bit for bit (an EM run may stop a few
    iterations earlier or later), so the slow run, which checks the golden results of
    every fit exactly, keeps XLA's defaults. Default-run tests state tolerances that
    hold at every level. ``XLA_FLAGS`` naming a level or the emitters yourself
    overrides that choice. An XLA that no longer knows the emitters' flag would stop
    at its first computation on an unknown flag, so the flag is added only where a
    short child process with it starts (about a second). JAX reads ``XLA_FLAGS`` when
    it starts its CPU backend, which no import here does, so setting it in
    ``pytest_configure`` is early enough; the xdist workers inherit it.
    """
    if config.option.markexpr != "not slow":
        return
    flags = os.environ.get("XLA_FLAGS", "")
    extra = []
    if "xla_backend_optimization_level" not in flags:
        extra.append("--xla_backend_optimization_level=0")
    if "xla_cpu_use_fusion_emitters" not in flags and _xla_knows(
            "--xla_cpu_use_fusion_emitters=false"):
        extra.append("--xla_cpu_use_fusion_emitters=false")
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
    _compile_the_default_run_faster(config)
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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark the doctests of :data:`SLOW_DOCTESTS` slow (before ``-m`` selects).

    ``tests/test_docs.py`` checks that every listed name is a doctest, so a renamed
    function cannot leave the list pointing at nothing."""
    for item in items:
        if isinstance(item, pytest.DoctestItem) and item.name in SLOW_DOCTESTS:
            item.add_marker(pytest.mark.slow)


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
