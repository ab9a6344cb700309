"""Every example runs end to end with its quick flag."""

import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gvq_planted_quick(tmp_path, capsys):
    stats = load("gvq_planted").main(["--quick", "--output-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert "noise floor" in out and (tmp_path / "gvq_planted.png").exists()
    # Four restarts recover the planted features on most quick seeds (measured: 2 of 3
    # with 200 examples), and a recovered fit sits at the noise floor 0.16.
    assert stats["EM, best of 4"]["recovered"] >= 2
    assert min(stats["EM, best of 4"]["error"]) == pytest.approx(0.16, rel=0.1)
