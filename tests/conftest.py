"""Shared fixtures: small planted GVQ data sets, and loading and running the examples."""

import contextlib
import importlib.util
import io
from pathlib import Path

import jax
import pytest

from ppl_models import gvq


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
