"""A comparison run once per seed (``ppl-zoo compare NAME --seeds ...``), serially or on Dask.

The default run uses a stand-in comparison (a few draws from the seed's key, and a
seed that raises) to check that the seeds' rows gather into one table with a seed
column, that a failing seed is reported while the others finish, that Dask's tasks
(an in-process ``LocalCluster`` of threads, so that the stand-in is seen there) give
the serial numbers, and the command line's options and errors (a scheduler that does
not answer, bad worker counts). The slow test runs the ``gvq`` comparison at a tiny
size for two seeds serially and on a ``LocalCluster`` of two worker processes and
checks that every number but the timings is equal.
"""

from __future__ import annotations

import csv
import json

import jax
import numpy as np
import pytest

from inference.app import compare
from inference.app.cli import build_parser, main
from inference.app.compare import run_comparisons, save_comparisons
from inference.engine.reporting import ComparisonResult, ComparisonRow

distributed = pytest.importorskip("distributed")

FAILING_SEED = 13


def _plot(result, path):
    path.write_text(f"figure of {len(result.rows)} rows")


def fake_comparison(rng_key, *, quick=False, progress_bar=True, num_draws=3):
    """Two rows whose objectives are draws from ``rng_key``; seed 13 raises."""
    if bool(jax.random.key_data(rng_key).ravel()[-1] == FAILING_SEED):
        raise ValueError("this seed fails on purpose")
    draws = np.asarray(jax.random.normal(rng_key, (num_draws,)))
    rows = [ComparisonRow("learning", name, impl, "draw", float(value), 0.001, 0.01, True,
                          extra={"num_draws": num_draws})
            for name, impl, value in (("ours", "ours", draws[0]), ("theirs", "numpyro",
                                                                  draws[1:].mean()))]
    return ComparisonResult("fake", rows, {"quick": quick, "num_draws": num_draws},
                            {"draws": draws}, _plot)


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(compare, "comparisons", lambda: {"fake": fake_comparison})


def _numbers(result: ComparisonResult) -> list[dict]:
    """The rows without their timings."""
    return [{k: v for k, v in row.flat().items() if k not in ("time_s", "first_call_s")}
            for row in result.rows]


def test_seeds_serially_gather_into_one_table(fake, tmp_path):
    runs = run_comparisons("fake", [0, 1, FAILING_SEED, 0], progress_bar=False, num_draws=4)
    assert runs.seeds == [0, 1, FAILING_SEED] and runs.where == "serial"
    assert sorted(runs.results) == [0, 1]
    assert "ValueError: this seed fails on purpose" in runs.failures[FAILING_SEED]
    for seed in (0, 1):  # each seed is the single run on jax.random.key(seed)
        alone = compare.run_comparison("fake", rng_key=jax.random.key(seed), num_draws=4)
        assert _numbers(runs.results[seed]) == _numbers(alone)
    combined = runs.combined()
    flat = [row.flat() for row in combined.rows]
    assert [row["seed"] for row in flat] == [0, 0, 1, 1]
    assert list(flat[0])[:2] == ["seed", "task"]
    assert combined.settings["seeds"] == [0, 1, FAILING_SEED]
    assert combined.settings["failed_seeds"] == [FAILING_SEED]
    assert combined.table().splitlines()[0].split()[:2] == ["seed", "task"]
    paths = save_comparisons(runs, tmp_path)
    rows = list(csv.DictReader(open(paths["csv"])))
    assert [r["seed"] for r in rows] == ["0", "0", "1", "1"] and rows[0]["num_draws"] == "4"
    report = json.load(open(paths["json"]))
    assert report["settings"]["failed_seeds"] == [FAILING_SEED] and len(report["rows"]) == 4
    assert (tmp_path / "fake_comparison_seed1.png").read_text() == "figure of 2 rows"
    with pytest.raises(ValueError, match="at least one seed"):
        run_comparisons("fake", [])
    with pytest.raises(ValueError, match="model must be one of"):
        run_comparisons("no_such_comparison", [0])
    with pytest.raises(ValueError, match="workers must be at least 1; got 0"):
        run_comparisons("fake", [0], workers=0)
    with pytest.raises(ValueError, match="cannot be combined with scheduler"):
        run_comparisons("fake", [0], workers=2, scheduler="tcp://127.0.0.1:1")


def test_seeds_on_dask_give_the_serial_numbers(fake):
    """Threads of an in-process cluster see the stand-in; the Dask path is the same code
    that runs on worker processes (the slow test below)."""
    serial = run_comparisons("fake", [0, 1, 2, FAILING_SEED], progress_bar=False)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        on_dask = run_comparisons("fake", [0, 1, 2, FAILING_SEED], client=client,
                                  progress_bar=False)
        assert client.status == "running"  # a client given is left open
    assert on_dask.where == "client" and sorted(on_dask.results) == [0, 1, 2]
    assert "this seed fails on purpose" in on_dask.failures[FAILING_SEED]
    assert _numbers(on_dask.combined()) == _numbers(serial.combined())
    for seed in (0, 1, 2):
        np.testing.assert_array_equal(on_dask.results[seed].arrays["draws"],
                                      serial.results[seed].arrays["draws"])


def test_compare_command_seeds_and_dask_options(fake, tmp_path, capsys):
    parser = build_parser()
    args = parser.parse_args(["compare", "gvq", "--seeds", "0", "1", "2", "--workers", "2",
                              "--threads-per-worker", "1"])
    assert args.seeds == [0, 1, 2] and args.workers == 2 and args.threads_per_worker == 1
    args = parser.parse_args(["compare", "gvq"])
    assert (args.seed, args.seeds, args.dask, args.scheduler, args.workers) == (0, None, False,
                                                                               None, None)
    assert args.connect_timeout == 10.0
    with pytest.raises(SystemExit):
        parser.parse_args(["compare", "gvq", "--seed", "1", "--seeds", "2", "3"])
    assert "not allowed with argument" in capsys.readouterr().err
    # Serially, by seed: one table with a seed column; a failed seed makes the status 1.
    out = tmp_path / "out"
    status = main(["--no-compilation-cache", "compare", "fake", "--seeds", "3", "4",
                   "--no-progress", "--output-dir", str(out)])
    assert status == 0
    printed = capsys.readouterr().out
    assert printed.startswith("# fake on serial: quick=True") and "seeds=[3, 4]" in printed
    assert [r["seed"] for r in csv.DictReader(open(out / "fake_comparison.csv"))] == \
        ["3", "3", "4", "4"]
    assert main(["--no-compilation-cache", "compare", "fake", "--seeds", "3",
                 str(FAILING_SEED), "--no-progress", "--output-dir", str(out)]) == 1
    assert f"seed {FAILING_SEED} failed" in capsys.readouterr().err
    # Errors name the flag: bad counts, counts with a scheduler, a scheduler not answering.
    for flags, message in (
            (["--workers", "0"], "--workers must be at least 1; got 0"),
            (["--threads-per-worker", "0"], "--threads-per-worker must be at least 1"),
            (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"],
             "cannot be combined with --scheduler"),
            (["--scheduler", "tcp://127.0.0.1:1", "--connect-timeout", "0.5"],
             "--scheduler = 'tcp://127.0.0.1:1': no Dask scheduler answered within 0.5 s"),
            (["--scheduler", "no-port-here", "--connect-timeout", "0.5"],
             "--scheduler = 'no-port-here'")):
        status = main(["--no-compilation-cache", "compare", "fake", "--seeds", "0",
                       "--no-progress", "--output-dir", str(out), *flags])
        assert status == 2, flags
        assert message in capsys.readouterr().err, flags


@pytest.mark.slow
def test_gvq_seeds_on_two_worker_processes_equal_the_serial_run(tmp_path):
    """The real comparison, tiny: the same numbers serially and on two worker processes."""
    settings = dict(num_examples=40, num_restarts=1, svi_steps=50)
    serial = run_comparisons("gvq", [0, 1], quick=True, progress_bar=False, **settings)
    on_dask = run_comparisons("gvq", [0, 1], quick=True, progress_bar=False, workers=2,
                              cache_dir=tmp_path / "cache", **settings)
    assert not serial.failures and not on_dask.failures, (serial.failures, on_dask.failures)
    assert on_dask.where == "LocalCluster"
    assert len(serial.combined().rows) == 8
    assert _numbers(on_dask.combined()) == _numbers(serial.combined())
    for seed in (0, 1):
        for name, array in serial.results[seed].arrays.items():
            np.testing.assert_array_equal(on_dask.results[seed].arrays[name], array)
    paths = save_comparisons(on_dask, tmp_path / "out")
    assert sorted(p.name for p in paths.values()) == [
        "gvq_comparison.csv", "gvq_comparison.json", "gvq_comparison_seed0.png",
        "gvq_comparison_seed1.png"]
