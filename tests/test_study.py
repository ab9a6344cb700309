"""Studies (``inference.app.study``, ``ppl-zoo study``): rows on Dask, kept on disk, resumed.

The default run uses one ``LocalCluster(n_workers=2, threads_per_worker=1,
processes=True)`` for the module and tiny rows: a user program that scores candidates
with a few NumPy operations (and counts its calls in a file), and PPCA, whose criteria
are closed-form. It checks that Dask's rows equal the serial ones (and those of
``examples/selection_study.py``), that a run interrupted part-way and restarted
recomputes no finished row, that a worker killed during a row still yields every row,
that a failing row is recorded with its traceback while the others complete, that a
changed option recomputes only the rows it affects, and that bad study files, data
files and scheduler addresses give errors naming the entry. The slow test runs
``examples/studies/quick.toml`` with two workers against the serial run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from inference.app import cli
from inference.app.study import (
    RowSpec,
    StudyError,
    load_study,
    plan_rows,
    run_study,
    study_report,
    study_status,
)
from inference.app.study.runner import local_cluster
from inference.app.study.store import RowStore

distributed = pytest.importorskip("distributed")

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ROOT / "examples" / "studies"

PROGRAMS = '''
import os
import signal
import time
from types import SimpleNamespace

import numpy as np


def blobs(key, num_examples=30, shift=0.0):
    """A tiny generator: Gaussian points from the row's key."""
    import jax

    return SimpleNamespace(x=np.asarray(jax.random.normal(key, (num_examples, 2))) + shift)


def score(x, candidates, *, criteria, rng_key, counter=None, sleep=0.0, fail=False,
          kill_marker=None, offset=0.0, sleep_if_env=None):
    """Scores from the data and the key; counts its calls; fails or kills on request.
    With ``sleep_if_env`` it sleeps only in a process whose environment has that
    variable (a run that must be slow to interrupt, resumed quickly elsewhere)."""
    import jax

    if counter:
        with open(counter, "a") as handle:
            handle.write(f"{os.getpid()} {float(np.asarray(x).sum()):.6f}\\n")
    if sleep and (not sleep_if_env or sleep_if_env in os.environ):
        time.sleep(sleep)
    if fail:
        raise ValueError("this row fails on purpose")
    if kill_marker and not os.path.exists(kill_marker):
        open(kill_marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    x = np.asarray(x, float)
    noise = np.asarray(jax.random.uniform(rng_key, (len(candidates),)))
    fit = [float(-abs(x.std() * k - 2.0) + offset) for k in candidates]
    return {"values": {"fit": fit, "noisy": [f + 0.01 * n for f, n in zip(fit, noise)]},
            "errors": {"fit": [0.1] * len(candidates)}}
'''


PPCA_STUDY = '''
[settings]
restarts = 2
[data.ppca]
generator = "ppl_models.ppca:generate"
args = { dim = 6, num_components = 2 }
standardise = true
seeds = [1]
[data.ppca.levels]
separated = { num_examples = 50, noise = 0.3 }
[[models]]
family = "ppca"
data = "ppca"
planted = 2
candidates = [1, 2, 3]
criteria = ["bic", "aic", "laplace"]
'''


def _study_text(programs="programs.py", seeds=3, levels=2, counter="", extra="", sleep=0.0,
                offset=0.0, fail=False, kill_marker="", sleep_if_env=""):
    options = [f'counter = "{counter}"'] if counter else []
    if sleep:
        options.append(f"sleep = {sleep}")
    if sleep_if_env:
        options.append(f'sleep_if_env = "{sleep_if_env}"')
    if offset:
        options.append(f"offset = {offset}")
    if fail:
        options.append("fail = true")
    if kill_marker:
        options.append(f'kill_marker = "{kill_marker}"')
    level_lines = "\n".join(f"level{i} = {{ num_examples = {20 + 10 * i}, shift = {i}.0 }}"
                            for i in range(levels))
    return f'''
name = "tiny"

[data.blobs]
generator = "{programs}:blobs"
seeds = {seeds}
[data.blobs.levels]
{level_lines}

[[models]]
program = "{programs}:score"
data = "blobs"
planted = 2
candidates = [1, 2, 3]
options = {{ {", ".join(options)} }}
{extra}
'''


def _write_study(folder: Path, text: str, name="study.toml") -> Path:
    (folder / "programs.py").write_text(PROGRAMS)
    path = folder / name
    path.write_text(text)
    return path


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _rows(folder: Path) -> dict:
    out = {}
    for path in sorted((folder / "rows").glob("*.json")):
        record = json.loads(path.read_text())
        out[record["key"]] = record
    return out


def _numbers(record: dict) -> dict:
    """A row without its timings."""
    return {k: v for k, v in record["row"].items() if k != "seconds"}


@pytest.fixture(scope="module")
def client():
    cluster = local_cluster(2, 1, {"single_thread": True, "jax_platforms": "cpu"})
    assert cluster.scheduler_info and len(cluster.workers) == 2
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def test_the_example_study_files_load_and_plan():
    quick = load_study(STUDIES / "quick.toml")
    rows = plan_rows(quick)
    assert [m.family for m in quick.models] == ["mixture", "ppca"]
    assert len(rows) == 12 and len({r.key for r in rows}) == 12
    assert all(len(r.key) == 64 for r in rows)
    full = load_study(STUDIES / "selection.toml")
    rows = plan_rows(full)
    assert {m.family for m in full.models} == {"mixture", "mcvq", "gvq", "clipped", "ppca"}
    assert len(rows) == 5 * 3 * 20 and len({r.key for r in rows}) == len(rows)


def test_dask_rows_equal_the_serial_rows(client, tmp_path):
    """Same keys, same numbers (a user program and PPCA, drawn by ppl_models' generator)."""
    extra = '''
[data.ppca]
generator = "ppl_models.ppca:generate"
args = { dim = 5, num_components = 2 }
standardise = true
seeds = 2
[data.ppca.levels]
separated = { num_examples = 60, noise = 0.3 }

[[models]]
family = "ppca"
data = "ppca"
planted = 2
candidates = [1, 2, 3]
criteria = ["train", "bic", "aic", "laplace"]
'''
    study = load_study(_write_study(tmp_path, _study_text(seeds=2, extra=extra)))
    serial = run_study(study, output_dir=tmp_path / "serial", serial=True, progress=False)
    dask = run_study(study, output_dir=tmp_path / "dask", client=client, progress=False)
    assert serial.computed == dask.computed == 4 + 2 and serial.failed == dask.failed == 0
    a, b = _rows(tmp_path / "serial"), _rows(tmp_path / "dask")
    assert set(a) == set(b) == {r.key for r in plan_rows(study)}
    for key in a:
        assert a[key]["status"] == b[key]["status"] == "ok"
        assert _numbers(a[key]) == _numbers(b[key]), a[key]["model"]
    ppca = [r for r in a.values() if r["model"] == "ppca"]
    assert all(r["row"]["choice"]["bic"] == 2 for r in ppca)
    lines, tables = study_report(study, tmp_path / "dask")
    assert "6 of 6 rows finished" in lines[0]
    assert tables["ppca"]["summary"]["separated"]["bic"]["hits"] == 2


def test_rows_equal_those_of_the_selection_study_example(load_example, tmp_path):
    """A generator row is the example's ``run_seed`` row: same data, keys and settings."""
    example = load_example("selection_study")
    path = tmp_path / "ppca.toml"
    path.write_text(PPCA_STUDY)
    run = run_study(load_study(path), output_dir=tmp_path / "out", serial=True,
                    progress=False)
    (record,) = run.rows.values()
    study = example.Study(2, (1, 2, 3), {"separated": {"num": 50, "noise": 0.3}},
                          example._ppca, ("bic", "aic", "laplace"), ("bic",))
    settings = {"folds": 5, "restarts": 2, "nuts": 500, "evidence": {}}
    theirs = example.run_seed("ppca", study, "separated", 1, ("bic", "aic", "laplace"),
                              settings)
    ours = record["row"]
    assert ours["values"] == {c: [float(v) for v in vs] for c, vs in theirs["values"].items()}
    assert ours["choice"] == theirs["choice"] and ours["num_examples"] == 50


def test_the_selection_study_example_runs_a_study_file(load_example, run_example, tmp_path):
    example = load_example("selection_study")
    path = tmp_path / "ppca.toml"
    path.write_text(PPCA_STUDY)
    data = run_example(example, ["--study", str(path), "--serial", "--output-dir",
                                 str(tmp_path)])
    family = data["families"]["ppca"]
    assert family["seeds"] == {"separated": 1} and family["summary"]["separated"]["bic"][
        "hits"] == 1
    assert "ppca: planted 2, 1 seed(s) per level" in data["printed"]
    assert (tmp_path / "selection_study.json").exists()
    assert len(list((tmp_path / "study-ppca" / "rows").glob("*.json"))) == 1
    again = run_example(example, ["--study", str(path), "--saved-only", "--output-dir",
                                  str(tmp_path)])
    assert again["families"]["ppca"]["summary"] == family["summary"]
    with pytest.raises(SystemExit):
        example.main(["--study", str(path), "--quick"])


def test_an_interrupted_run_restarted_recomputes_no_finished_row(client, tmp_path):
    counter = tmp_path / "calls.txt"
    # Rows of 3 s in the interrupted child: the interrupt lands part-way even when a
    # loaded machine is slow to poll and the child slow to stop (with 1 s rows all eight
    # finished once). The resumed run's rows do not sleep (the variable is the child's).
    path = _write_study(tmp_path, _study_text(seeds=4, counter=counter, sleep=3.0,
                                              sleep_if_env="STUDY_TEST_SLOW_ROWS"))
    out = tmp_path / "out"
    child = subprocess.Popen(
        [sys.executable, "-m", "inference.app.cli", "study", "run", str(path), "--workers",
         "1", "--output-dir", str(out), "--no-progress"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "STUDY_TEST_SLOW_ROWS": "1"})
    deadline = time.monotonic() + 240
    while len(list((out / "rows").glob("*.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    child.send_signal(signal.SIGINT)
    child.wait(timeout=60)
    done = {p.name: p.stat().st_mtime_ns for p in (out / "rows").glob("*.json")}
    assert 2 <= len(done) < 8, "the run was not interrupted part-way"
    status = study_status(load_study(path), out)
    assert len(status["done"]) == len(done) and not status["running"]
    calls_before = len(_lines(counter))
    run = run_study(load_study(path), output_dir=out, client=client, progress=False)
    assert run.reused == len(done) and run.computed == 8 - len(done)
    assert len(_lines(counter)) - calls_before == 8 - len(done)
    for name, mtime in done.items():  # not rewritten
        assert (out / "rows" / name).stat().st_mtime_ns == mtime
    again = run_study(load_study(path), output_dir=out, client=client, progress=False)
    assert again.computed == 0 and again.reused == 8
    assert len(_lines(counter)) - calls_before == 8 - len(done)


def test_a_scheduler_that_goes_away_loses_no_finished_row(client, tmp_path):
    """The scheduler of a run shut down part-way: the run stops with an error that says
    so, the finished rows stay on disk, and a run on another scheduler computes the rest."""
    counter = tmp_path / "calls.txt"
    path = _write_study(tmp_path, _study_text(seeds=4, counter=counter, sleep=0.5))
    out = tmp_path / "out"
    doomed = local_cluster(1, 1, {"single_thread": True, "jax_platforms": "cpu"})

    def shut_down_after_two_rows():
        deadline = time.monotonic() + 120
        while len(list((out / "rows").glob("*.json"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        doomed.close()

    stopper = threading.Thread(target=shut_down_after_two_rows)
    stopper.start()
    with pytest.raises(StudyError, match="the scheduler lost"):
        run_study(load_study(path), output_dir=out, scheduler=doomed.scheduler_address,
                  progress=False)
    stopper.join()
    done = {p.name: p.stat().st_mtime_ns for p in (out / "rows").glob("*.json")}
    assert 2 <= len(done) < 8
    run = run_study(load_study(path), output_dir=out, client=client, progress=False)
    assert run.reused == len(done) and run.computed == 8 - len(done) and not run.failed
    for name, mtime in done.items():
        assert (out / "rows" / name).stat().st_mtime_ns == mtime


def test_a_worker_killed_during_a_row_still_yields_every_row(client, tmp_path):
    marker, counter = tmp_path / "killed-once", tmp_path / "calls.txt"
    path = _write_study(tmp_path, _study_text(seeds=2, counter=counter,
                                              kill_marker=marker))
    run = run_study(load_study(path), output_dir=tmp_path / "out", client=client,
                    progress=False)
    assert marker.exists(), "no worker was killed"
    assert run.computed == 4 and run.failed == 0
    rows = _rows(tmp_path / "out")
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows.values())
    assert len(_lines(counter)) == 5  # the killed row ran twice
    assert len({line.split()[0] for line in _lines(counter)}) >= 2  # in two processes


def test_a_failing_row_is_recorded_and_the_others_complete(client, tmp_path, capsys):
    extra = '''
[[models]]
name = "broken"
program = "programs.py:score"
data = "blobs"
candidates = [1, 2]
options = { fail = true }
'''
    path = _write_study(tmp_path, _study_text(seeds=2, extra=extra))
    run = run_study(load_study(path), output_dir=tmp_path / "out", client=client,
                    progress=False)
    assert run.computed == 8 and run.failed == 4
    failed = [r for r in _rows(tmp_path / "out").values() if r["status"] == "failed"]
    assert {r["model"] for r in failed} == {"broken"} and len(failed) == 4
    assert all("this row fails on purpose" in r["traceback"] and "ValueError" in r["error"]
               for r in failed)
    status = study_status(load_study(path), tmp_path / "out")
    assert len(status["done"]) == 4 and len(status["failed"]) == 4
    lines, _ = study_report(load_study(path), tmp_path / "out")
    assert "4 failed" in lines[0] and any("broken level0 seed 0" in line for line in lines)
    assert cli.main(["study", "status", str(path), "--output-dir", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "4 done, 4 failed" in out and "ValueError: this row fails on purpose" in out
    # the next run computes the failed rows again, unless told to keep them
    kept = run_study(load_study(path), output_dir=tmp_path / "out", client=client,
                     progress=False, keep_failed=True)
    assert kept.computed == 0


def test_a_changed_option_recomputes_only_the_rows_it_affects(client, tmp_path):
    counter_a, counter_b = tmp_path / "a.txt", tmp_path / "b.txt"

    def text(offset):
        second = f'''
[[models]]
name = "second"
program = "programs.py:score"
data = "blobs"
candidates = [1, 2]
options = {{ counter = "{counter_b}" }}
'''
        return _study_text(seeds=2, counter=counter_a, offset=offset, extra=second)

    path = _write_study(tmp_path, text(0.5))
    first = run_study(load_study(path), output_dir=tmp_path / "out", client=client,
                      progress=False)
    assert first.computed == 8
    assert len(_lines(counter_a)) == 4 and len(_lines(counter_b)) == 4
    path.write_text(text(1.5))
    second = run_study(load_study(path), output_dir=tmp_path / "out", client=client,
                       progress=False)
    assert second.computed == 4 and second.reused == 4
    assert len(_lines(counter_a)) == 8 and len(_lines(counter_b)) == 4
    # a changed setting that the criteria do not read changes no key
    study = load_study(path)
    assert [r.key for r in plan_rows(study)] == \
        [r.key for r in plan_rows(study.replace(settings={"folds": 3}))]
    # an edited program does change every key that uses it
    before = {r.key for r in plan_rows(study)}
    (tmp_path / "programs.py").write_text(PROGRAMS + "\n# edited\n")
    assert not {r.key for r in plan_rows(load_study(path))} & before


def test_the_store_shows_no_half_written_row(tmp_path):
    store = RowStore(tmp_path)
    key = "a" * 64
    store.write({"key": key, "status": "ok", "row": {"values": {"bic": [1.0, float("nan")]}}})
    assert store.read(key)["row"]["values"]["bic"] == [1.0, None]
    assert [p.name for p in store.rows.iterdir()] == [f"{key}.json"]  # no temporary left
    store.path(key).write_text('{"key": "' + key + '", "status": "ok", "row": {"val')
    assert store.read(key) is None  # cut short: counted as missing, computed again
    (store.rows / f".{key}.json.x.tmp").write_text("{}")  # a writer's temporary file
    assert store.finished([key]) == {}


def test_status_lists_running_queued_and_pending_rows(tmp_path):
    path = _write_study(tmp_path, _study_text(seeds=2))
    study = load_study(path)
    keys = [r.key for r in plan_rows(study)]
    store = RowStore(tmp_path / "out")
    store.write({"key": keys[0], "status": "ok", "row": {}})
    store.mark_running(keys[1], row="level0 seed 1")
    store.write_manifest({"pid": os.getpid(), "host": socket.gethostname(),
                          "state": "running", "started": time.time(),
                          "submitted": keys[1:3], "scheduler": "LocalCluster"})
    status = study_status(study, tmp_path / "out")
    assert [len(status[k]) for k in ("done", "running", "queued", "pending")] == [1, 1, 1, 1]
    # a run that has ended computes nothing: its rows are pending
    store.write_manifest({"pid": os.getpid(), "host": socket.gethostname(),
                          "state": "finished", "submitted": keys[1:3]})
    status = study_status(study, tmp_path / "out")
    assert len(status["pending"]) == 3 and not status["running"] and not status["queued"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case", ["family", "criterion", "option", "setting", "data_file",
                                  "bad_csv", "program", "data_name"])
def test_bad_study_files_name_the_entry(tmp_path, case):
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n3,oops\n")
    base = '''
[data.points]
files = ["{file}"]
[[models]]
family = "{family}"
data = "{data}"
criteria = {criteria}
options = {options}
'''
    fields = {"file": "bad.csv" if case == "bad_csv" else "missing.csv" if case == "data_file"
              else "ok.csv", "family": "mixtur" if case == "family" else "mixture",
              "criteria": '["laplace"]' if case == "criterion" else '["bic"]',
              "options": "{ bogus = 1 }" if case == "option" else "{}",
              "data": "pointz" if case == "data_name" else "points"}
    (tmp_path / "ok.csv").write_text("1,2\n3,4\n5,6\n")
    text = base.format(**fields)
    if case == "setting":
        text = "[settings]\nfold = 3\n" + text
    if case == "program":
        text = text.replace('family = "mixture"', 'program = "nowhere.py:score"')
    path = tmp_path / "study.toml"
    path.write_text(text)
    expected = {"family": ("[[models]] entry 1", "'mixtur'", "ppca"),
                "criterion": ("[[models]] entry 1", "['laplace']", "family's"),
                "option": ("[[models]] entry 1", "bogus", "prior_scale"),
                "setting": ("[settings]", "fold"),
                "data_file": ("[data.points] files[0]", "missing.csv"),
                "bad_csv": ("[data.points] files[0]", "'oops' is not a number"),
                "program": ("[[models]] entry 1", "nowhere.py"),
                "data_name": ("[[models]] entry 1", "'pointz'", "['points']")}[case]
    with pytest.raises(StudyError) as error:
        load_study(path)
    for part in (str(path), *expected):
        assert part in str(error.value), (case, str(error.value))


def test_the_command_reports_bad_input_and_an_unreachable_scheduler(tmp_path, capsys):
    path = _write_study(tmp_path, _study_text(seeds=1, levels=1))
    port = _free_port()
    start = time.monotonic()
    code = cli.main(["study", "run", str(path), "--scheduler", f"tcp://127.0.0.1:{port}",
                     "--connect-timeout", "2", "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and time.monotonic() - start < 60
    assert f"--scheduler = 'tcp://127.0.0.1:{port}'" in err and "no Dask scheduler" in err
    assert not list((tmp_path / "out" / "rows").glob("*.json"))
    (tmp_path / "broken.toml").write_text("name = [")
    assert cli.main(["study", "report", str(tmp_path / "broken.toml")]) == 2
    assert "not a valid TOML file" in capsys.readouterr().err
    assert cli.main(["study", "status", str(tmp_path / "none.toml")]) == 2
    assert "cannot read the study file" in capsys.readouterr().err
    assert cli.main(["study", "run", str(path), "--workers", "0"]) == 2
    assert "--workers must be at least 1" in capsys.readouterr().err


def test_without_dask_the_error_names_the_extra(tmp_path, monkeypatch, capsys):
    path = _write_study(tmp_path, _study_text(seeds=1, levels=1))
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(ImportError, match=r'pip install "ppl-zoo\[study\]"'):
        run_study(load_study(path), output_dir=tmp_path / "out", progress=False)
    assert cli.main(["study", "run", str(path), "--output-dir", str(tmp_path / "out")]) == 2
    assert 'pip install "ppl-zoo[study]"' in capsys.readouterr().err
    # reports, status and serial runs need no Dask
    assert cli.main(["study", "run", str(path), "--serial", "--no-progress", "--output-dir",
                     str(tmp_path / "out")]) == 0
    assert "1 computed (0 failed)" in capsys.readouterr().out
    assert cli.main(["study", "report", str(path), "--output-dir", str(tmp_path / "out")]) == 0
    assert "1 of 1 rows finished" in capsys.readouterr().out


def test_rows_are_keyed_by_what_determines_them(tmp_path):
    path = _write_study(tmp_path, _study_text(seeds=2, levels=2))
    rows = plan_rows(load_study(path))
    assert all(isinstance(r, RowSpec) for r in rows) and len({r.key for r in rows}) == 4
    recipe = rows[0].recipe
    assert recipe["model"]["program"]["function"] == "score" and \
        len(recipe["model"]["program"]["sha256"]) == 64
    assert recipe["data"]["level_args"] == {"num_examples": 20, "shift": 0.0}
    assert recipe["version"] and recipe["seed"] == 0
    other = _write_study(tmp_path, _study_text(seeds=2, levels=2).replace(
        "candidates = [1, 2, 3]", "candidates = [1, 2]"), name="other.toml")
    assert not {r.key for r in rows} & {r.key for r in plan_rows(load_study(other))}


@pytest.mark.slow  # mixture fits compile in every worker: about a minute on 2 cores
def test_the_quick_study_on_two_workers_equals_the_serial_run(tmp_path):
    path = STUDIES / "quick.toml"
    for args in (["--serial"], ["--workers", "2"]):
        out = tmp_path / args[0].strip("-")
        done = subprocess.run([sys.executable, "-m", "inference.app.cli", "study", "run",
                               str(path), *args, "--output-dir", str(out), "--no-progress"],
                              capture_output=True, text=True, timeout=900,
                              env={**os.environ, "JAX_PLATFORMS": "cpu"})
        assert done.returncode == 0, done.stderr[-3000:]
        assert "12 of 12 rows finished" in done.stdout and "ppca: planted 2" in done.stdout
    a, b = _rows(tmp_path / "serial"), _rows(tmp_path / "workers")
    assert set(a) == set(b) and len(a) == 12
    for key in a:
        assert _numbers(a[key]) == _numbers(b[key])
