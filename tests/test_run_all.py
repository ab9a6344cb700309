"""``benchmarks/run_all.py``: the adapters on small fixture JSON, and its command line.

No benchmark runs here: the adapters get hand-written dicts in each script's layout,
and ``--collect-only`` tabulates fixture files.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "run_all.py"
spec = importlib.util.spec_from_file_location("run_all", PATH)
run_all = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_all)

FIXTURES = {
    "association_exact": {
        "rows": [{"num_features": 10, "num_examples": 1000, "timing": {
            "ours_core": {"median_us": 2.0}}, "ratio_core": 7.3, "ratio_peer_over_ours": 6.1},
            {"num_features": 4, "num_examples": 1000, "timing": {"ours_core": {
                "median_us": 0.5}}, "ratio_core": 2.0}],
        "goal_result": {"measured": True, "size": 10, "met": True}},
    "association": {
        "configurations": [{"num_features": 12, "dim": 24, "num_examples": 2000, "rows": [
            {"method": "mf", "kind": "ours", "core": {"median_us": 1.5}, "gap": 0.0,
             "speedup_vs_infer_discrete": 20.2},
            {"method": "infer_discrete", "kind": "peer", "core": {"median_us": 30.0}},
            {"method": "dbp", "kind": "ours", "error": "n/a"}]}],
        "goal_results": [{"num_features": 12, "dim": 24, "measured": True, "met": True}]},
    "association_choice": {
        "rows": [{"num_features": 16, "dim": 8, "feature_mean": 0.0, "methods": {
            "br+mf": {"us_per_example": 59.4, "gap_percent": 129.2, "above_percent": 49.6},
            "tabu": {"us_per_example": 136.0, "gap_percent": 0.0, "above_percent": 0.0}}}]},
    "gvq_learning": {
        "results": [{"num_features": 6, "problem": "dense", "rows": [
            {"learner": "EM exact", "dim": 12, "timing": {"median_s": 0.005},
             "speedup_over_svi": 33.7, "reached": True},
            {"learner": "EM br", "dim": 12, "reached": False},
            {"learner": "SVI", "dim": 12, "timing": {"median_s": 0.17}}]}],
        "goal_result": [{"num_features": 6, "problem": "dense", "learner": "EM exact",
                         "met": True}, {"num_features": 6, "problem": "dense",
                                        "learner": "EM br", "met": False}]},
    "clipped": {
        "config": {"num_units": 256, "num_hidden": 16},
        "learning": {"ours": {"timing": {"median_s": 0.225}}, "targets": [
            {"target_name": "A: arcsine's error", "reached": False},
            {"target_name": "B: 1.05 x SVI's best", "reached": True, "ratio": 472.0}]},
        "solve": {"num_units": 1000, "public": {"median_s": 1.86}},
        "goal_result": [{"part": "a", "met": True}, {"part": "b", "met": True,
                                                     "required_s": 5.0}]},
    "mcvq": {
        "race": {"size": {"num_examples": 500, "dim": 16}, "pairs": [
            {"ours": "annealed", "peer": "svi_enum", "scale": "loglik",
             "ours_s": {"median": 0.1}, "ratio": 7.0, "goal_met": False},
            {"ours": "T=N", "peer": "svi_meanfield", "scale": "elbo",
             "ours_s": {"median": 0.005}, "ratio": None, "ratio_lower_bound": 2820.0,
             "goal_met": True}]},
        "scaling": {"rows": [{"N": 1000, "D": 16, "K": 4, "J": 8, "step_s": 0.0046,
                              "ns_per_unit": 8.97}]}},
    "mixture": {
        "config": {"num_examples": 200000, "num_components": 32, "dim": 16},
        "rows": [{"case": "em", "dtype": "float32", "peer": "sklearn",
                  "ours": {"median_s": 0.9}, "ratio": 14.4, "met": True},
                 {"case": "em", "dtype": "float64", "peer": "gmmx", "available": False}]},
    "compilation_cache": {
        "rows": [{"case": "mixture", "size": "N=200, d=2, k=3", "off": {"median_s": 6.6},
                  "cold": {"median_s": 6.7}, "warm": {"median_s": 1.7}, "entries": 127},
                 {"case": "select", "cold": {"median_s": 127.0}}]},
    "generic_em": {
        "rows": [{"part": "specialised", "case": "soft EM", "method": "fit_em(e_step='soft')",
                  "peer": "fit_mixture(mode='stochastic')", "size": "N=1000, k=3, d=2",
                  "ours": {"median_s": 0.086}, "ratio": 0.055, "met": False,
                  "note": "30 vs 30 iterations"},
                 {"part": "svi", "program": "mixture (diag)", "method": "fit_em(e_step='soft')",
                  "peer": "SVI TraceEnum_ELBO + Adam", "size": "N=1000, k=3, d=2",
                  "ours": {"median_s": 0.114}, "ratio": ">0.03", "met": False,
                  "note": "SVI never reaches the target"}]},
    "model_selection": {
        "rows": [{"data": "planted", "shape": [200, 16], "vb_best_s": {"median": 2.7},
                  "ratio": 0.58, "ratio_one_run": 3.65, "goal_met": False}]},
}


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_adapter_reads_its_layout(name):
    rows = run_all.adapt(name, FIXTURES[name])
    assert rows and all(set(r) == set(run_all.COLUMNS) for r in rows)
    assert all(r["benchmark"] == name for r in rows)
    assert any(isinstance(r["time"], float) for r in rows)
    assert any(r["ratio"] is not None for r in rows)
    assert not any("could not read" in r["note"] for r in rows)


def test_adapters_pick_goals_and_lower_bounds():
    exact = run_all.adapt("association_exact", FIXTURES["association_exact"])
    assert [r["goal_met"] for r in exact] == [True, None]  # the goal is judged at n = 10
    association = run_all.adapt("association", FIXTURES["association"])
    assert [r["method"] for r in association] == ["mf", "dbp"]  # the peer is not a row
    assert association[1]["note"] == "n/a"
    learning = run_all.adapt("gvq_learning", FIXTURES["gvq_learning"])
    assert [(r["method"], r["goal_met"]) for r in learning] == [("EM exact", True),
                                                                 ("EM br", False)]
    mcvq = run_all.adapt("mcvq", FIXTURES["mcvq"])
    assert mcvq[1]["ratio"] == ">2.82e+03"
    clipped = run_all.adapt("clipped", FIXTURES["clipped"])
    assert [r["goal_met"] for r in clipped] == [True, None, True]
    assert clipped[0]["ratio"] is None and "never reaches" in clipped[0]["note"]


def test_generic_em_adapter_names_each_comparison():
    rows = run_all.adapt("generic_em", FIXTURES["generic_em"])
    assert [r["method"] for r in rows] == ["fit_em(e_step='soft') (soft EM)",
                                           "fit_em(e_step='soft') on mixture (diag)"]
    assert [r["ratio"] for r in rows] == [0.055, ">0.03"]
    assert [r["goal_met"] for r in rows] == [False, False]


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_adapters_tolerate_missing_keys(name):
    for data in ({}, {"rows": [{}]}, {"results": [{}]}, {"configurations": [{}]}, []):
        rows = run_all.adapt(name, data)
        assert rows and all(set(r) == set(run_all.COLUMNS) for r in rows)


def test_generic_adapter_for_new_scripts():
    data = {"rows": [{"method": "estep sharded", "peer": "one device", "num_devices": 4,
                      "median_s": 0.5, "speedup": 3.2, "peak_memory_bytes": 1.5e9,
                      "goal_met": True}]}
    (r,) = run_all.adapt("sharding", data)
    assert (r["method"], r["peer"], r["time"], r["ratio"], r["goal_met"]) == \
        ("estep sharded", "one device", 0.5, 3.2, True)
    assert r["size"] == "num_devices=4" and r["memory_peak"].startswith("1.5e+09")
    # The layouts of benchmarks/sharding.py and streaming.py as they were being written.
    (r,) = run_all.adapt("sharding", {"rows": [{"case": "mixture", "devices": 4, "plain": {
        "median_s": 0.2}, "sharded": {"median_s": 0.1}, "ratio": 0.5}]})
    assert (r["method"], r["time"], r["ratio"], r["size"]) == ("mixture", 0.1, 0.5, "devices=4")
    (r,) = run_all.adapt("streaming", {"rows": [{"side": "stream", "peak_mb": 812.0,
                                                 "fit": {"median_s": 3.5}}]})
    assert (r["method"], r["time"], r["memory_peak"]) == ("stream", 3.5, "812 (peak_mb)")
    (unknown,) = run_all.adapt("streaming", {"something": "else"})
    assert "unknown JSON layout" in unknown["note"]


def test_collect_only_tabulates_fixture_files(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    for name in ("mixture", "model_selection"):
        (results / f"{name}.json").write_text(json.dumps(FIXTURES[name]))
    (results / "clipped.json").write_text("{not json")
    record = run_all.main(["--collect-only", "--results-dir", str(results), "--only",
                           "mixture", "model_selection", "clipped", "gvq_learning"])
    out = capsys.readouterr().out
    assert "14.4" in out and "NOT met" in out and "unreadable JSON" in out
    saved = json.loads((results / "all.json").read_text())
    assert saved["rows"] == json.loads(json.dumps(record["rows"]))
    notes = {r["benchmark"]: r["note"] for r in saved["rows"]}
    assert "missing" in notes["gvq_learning"]


def test_command_line_help_and_bad_input():
    done = subprocess.run([sys.executable, str(PATH), "--help"], capture_output=True,
                          text=True, check=True)
    assert "--quick" in done.stdout and "--only" in done.stdout
    bad = subprocess.run([sys.executable, str(PATH), "--only", "no_such", "--collect-only"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--only" in bad.stderr and "no_such" in bad.stderr


def test_every_benchmark_script_imports():
    """Each script's imports still resolve after the package moves (``--help`` of every
    script, in one child process so the imports are paid once)."""
    folder = PATH.parent
    scripts = sorted(p for p in folder.glob("*.py") if p.name not in ("__init__.py",))
    code = (
        "import runpy, sys\n"
        "failed = []\n"
        f"for script in {[str(p) for p in scripts]!r}:\n"
        "    sys.argv = [script, '--help']\n"
        "    try:\n"
        "        runpy.run_path(script, run_name='__main__')\n"
        "    except SystemExit as exit:\n"
        "        if exit.code not in (0, None):\n"
        "            failed.append((script, f'exit {exit.code}'))\n"
        "    except Exception as error:\n"
        "        failed.append((script, repr(error)))\n"
        "print('FAILED', failed)\n"
        "sys.exit(1 if failed else 0)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=folder.parent, timeout=600,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
