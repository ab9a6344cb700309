"""Fuzzing the command line and the file loaders (issue 10).

* 200 random argument lists run in-process through ``inference.app.cli.main``; each
  must end in argparse's ``SystemExit`` (with a usage message), an int exit
  status, or a ``ValueError``/``TypeError``: never another exception from deep
  inside JAX. The long-running commands (``compare MODEL``, ``reproduce``) are
  replaced by stubs that check the parsed arguments, so the fuzz tests the
  command line, not the experiments.
* 200 random byte strings, and 100 byte-level mutations of the small ratings file,
  are read by ``ppl_models.datasets.ratings.load_ratings``: each must give
  ``Ratings`` or a ``ValueError``/``TypeError`` naming the problem.

Seeds are fixed (numpy's default_rng(0)), so every run tries the same inputs.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest

from inference.app import cli
from ppl_models.datasets import ratings

RATINGS = Path(__file__).resolve().parents[1] / "data" / "ratings_small.csv"

TOKENS = ["compare", "list", "reproduce", "gvq", "mixture", "mcvq", "clipped", "nope",
          "--output-dir", "--seed", "--quick", "--no-progress", "--full", "--only", "--list",
          "--html", "--examples-dir", "--compare", "--timeout", "-h", "--help", "--", "-",
          "0", "-1", "3.5", "nan", "inf", "1e309", "", " ", "é", "\x00x", "--seed=abc",
          "--timeout=-5", "--timeout=nan", "/nonexistent", "{}", "--unknown"]


@pytest.fixture
def stubbed(monkeypatch, tmp_path):
    """Stubs for the commands that would run experiments; the working folder is tmp_path."""
    from inference.app import compare, reproduce

    def fake_run(name, *, rng_key, quick, progress_bar):
        assert isinstance(name, str) and isinstance(quick, bool)
        raise ValueError(f"stub: would run the comparison of {name!r}")

    def fake_reproduce(args):
        assert args.command == "reproduce"
        return 0

    monkeypatch.setattr(compare, "run_comparison", fake_run)
    monkeypatch.setattr(reproduce, "main", fake_reproduce)
    monkeypatch.chdir(tmp_path)


def _argv(rng):
    """Random tokens; two lists in three start with a command, so some get past argparse."""
    head = [str(rng.choice(["compare", "list", "reproduce"]))] if rng.uniform() < 0.67 else []
    return head + [str(rng.choice(TOKENS)) if rng.uniform() < 0.8 else
                   "".join(chr(int(c)) for c in rng.integers(32, 0x2FF, rng.integers(0, 8)))
                   for _ in range(int(rng.integers(0, 5)))]


def test_cli_fuzz_ends_in_a_clear_error(stubbed):
    rng = np.random.default_rng(0)
    outcomes = {"exit": 0, "status": 0, "error": 0}
    for _ in range(200):
        argv = _argv(rng)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = cli.main(argv)
            except SystemExit as stop:
                outcomes["exit"] += 1
                if stop.code not in (0, None):  # -h prints help and exits 0
                    assert "usage: ppl-zoo" in err.getvalue(), (argv, err.getvalue())
                continue
            except (ValueError, TypeError) as error:
                outcomes["error"] += 1
                assert str(error), argv
                continue
        assert isinstance(status, int), (argv, status)
        outcomes["status"] += 1
    # The fuzz is not vacuous: argparse rejects many lists and some get to a command.
    assert outcomes["exit"] > 50 and outcomes["status"] + outcomes["error"] > 5, outcomes


def _check_load(path):
    try:
        result = ratings.load_ratings(path)
    except (ValueError, TypeError) as error:
        message = str(error)
        assert message and ("path" in message or str(path) in message), message
        return "error"
    assert result.x.shape == result.mask.shape
    return "ok"


def test_ratings_loader_fuzz_random_bytes(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "ratings.csv"
    for _ in range(200):
        path.write_bytes(rng.integers(0, 256, int(rng.integers(0, 200)), dtype=np.uint8)
                         .tobytes())
        _check_load(path)


def test_ratings_loader_fuzz_mutated_file(tmp_path):
    rng = np.random.default_rng(1)
    original = np.frombuffer(RATINGS.read_bytes(), np.uint8)
    path = tmp_path / "ratings.csv"
    outcomes = {"ok": 0, "error": 0}
    for _ in range(100):
        data = original.copy()
        where = rng.integers(0, data.size, int(rng.integers(1, 4)))
        data[where] = rng.choice(np.frombuffer(b",\n\r\"0123456789.-e\x00\xff ", np.uint8),
                                 where.size)
        path.write_bytes(data.tobytes())
        outcomes[_check_load(path)] += 1
    assert outcomes["ok"] > 0 and outcomes["error"] > 0, outcomes
