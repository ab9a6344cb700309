"""The jaxlib releases whose batched CPU LAPACK kernels can hang (``inference.engine.runtime``)."""

import warnings

import pytest

from inference.engine import runtime
from ppl_models.diagnostics import ZooWarning


@pytest.mark.parametrize(("version", "backend", "prone"), [
    ("0.10.0", "cpu", True), ("0.10.2", "cpu", True), ("0.11.0", "cpu", True),
    ("0.9.2", "cpu", False), ("0.11.1", "cpu", False), ("0.4.30", "cpu", False),
    ("0.10.2", "gpu", False), ("0.10.3.dev20261201", "cpu", True)])
def test_which_releases_are_prone(version, backend, prone):
    assert runtime.lapack_deadlock_prone(version, backend) is prone


def test_the_installed_release_is_one_the_requirements_allow():
    # pyproject.toml excludes jax/jaxlib 0.10.* and 0.11.0: an environment that still has
    # one of them can hang in the evidence tests (a timeout, not a failure).
    import jaxlib

    assert not runtime.lapack_deadlock_prone(jaxlib.__version__, "cpu"), jaxlib.__version__


def test_the_warning_comes_once_per_process(monkeypatch):
    monkeypatch.setattr(runtime, "lapack_deadlock_prone", lambda: True)
    monkeypatch.setattr(runtime, "_warned", False)
    with pytest.warns(ZooWarning, match="tempered SMC on CPU with jaxlib .* can hang"):
        assert runtime.warn_if_lapack_deadlock_prone("tempered SMC")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert runtime.warn_if_lapack_deadlock_prone("tempered SMC")
    monkeypatch.setattr(runtime, "lapack_deadlock_prone", lambda: False)
    monkeypatch.setattr(runtime, "_warned", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not runtime.warn_if_lapack_deadlock_prone("tempered SMC")
