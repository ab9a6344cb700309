"""``ppl-zoo reproduce``: listing, a short real run, bad input and a failing example.

The real run (slow) uses the two cheapest experiments (mcvq_text and clipped_entropy at
their quick sizes: about 5 s each plus JAX's start-up). The failure tests point
``--examples-dir`` at stand-in scripts in a temporary folder, so they run no JAX.
"""

import json
import textwrap

import pytest

from inference.app import reproduce
from inference.app.cli import main
from inference.app.experiments import EXPERIMENTS, STUDIES, VERDICTS
from inference.app.families import load_families

FINDING_FIELDS = {"experiment", "claim", "paper", "ours", "verdict", "detail", "command",
                  "seconds"}


def test_list_names_every_experiment(capsys):
    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    for name in EXPERIMENTS:
        assert name in out
    # Every family's plug-in declares its experiments (the four papers' 15 at least), the
    # zoo its own studies after them, and the examples folder holds every script they name.
    examples = reproduce.find_examples_dir()
    declared = [e for family in load_families().values() for e in family.experiments]
    assert len(declared) >= 15
    assert list(EXPERIMENTS.values()) == declared + list(STUDIES)
    assert {e.script for e in EXPERIMENTS.values()} <= {p.name for p in examples.glob("*.py")}


@pytest.mark.slow  # two examples end to end, each in a Python process of its own
def test_only_cheapest_writes_report_and_findings(tmp_path, capsys):
    """The default run checks the report and the findings of a run with stand-in scripts
    in test_failing_example_is_reported_and_the_run_continues and
    test_missing_script_and_unreadable_json_fail_without_stopping, and every extractor in
    test_every_extractor_rejects_an_empty_json_by_raising."""
    status = main(["reproduce", "--output-dir", str(tmp_path), "--only", "mcvq_text",
                   "clipped_entropy", "--html", "--no-progress"])
    assert status == 0, capsys.readouterr()
    record = json.loads((tmp_path / "findings.json").read_text())
    assert [r["name"] for r in record["experiments"]] == ["clipped_entropy", "mcvq_text"]
    assert record["versions"]["jax"] and record["total_seconds"] > 0
    assert record["findings"]
    for item in record["findings"]:
        assert FINDING_FIELDS <= set(item)
        assert item["verdict"] in VERDICTS and item["verdict"] != "failed"
        assert item["command"].startswith("python examples/")
    # The entropy claim: the count with biases grows like N^P (the paper's), not with zero bias.
    entropy = {f["claim"]: f["verdict"] for f in record["findings"]
               if f["experiment"] == "clipped_entropy"}
    assert [v for c, v in entropy.items() if "with biases" in c] == ["holds"]
    assert [v for c, v in entropy.items() if "zero bias" in c] == ["differs"]
    report = (tmp_path / "report.md").read_text()
    assert "## mcvq_text" in report and "## clipped_entropy" in report
    assert (tmp_path / "mcvq_text" / "mcvq_text.png").exists()
    assert "mcvq_text/mcvq_text.png" in report
    assert (tmp_path / "logs" / "mcvq_text.log").stat().st_size > 0
    html = (tmp_path / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<table>" in html and "<img" in html


def test_missing_examples_dir_is_a_clear_error(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    assert main(["reproduce", "--output-dir", str(tmp_path / "out"), "--examples-dir",
                 str(missing), "--only", "mcvq_text"]) == 2
    err = capsys.readouterr().err
    assert "--examples-dir" in err and "nowhere" in err
    with pytest.raises(FileNotFoundError, match="--examples-dir"):
        reproduce.find_examples_dir(missing)


def test_unknown_only_name_is_a_clear_error(tmp_path, capsys):
    assert main(["reproduce", "--output-dir", str(tmp_path), "--only", "no_such"]) == 2
    assert "--only" in capsys.readouterr().err


def _fake_examples(folder):
    """A failing mcvq_text.py and a clipped_counterexample.py that writes a valid JSON."""
    folder.mkdir()
    (folder / "mcvq_text.py").write_text(
        "import sys\nprint('about to fail')\nprint('Traceback: boom', file=sys.stderr)\n"
        "sys.exit(1)\n")
    (folder / "clipped_counterexample.py").write_text(textwrap.dedent("""\
        import json, sys
        from pathlib import Path
        out = Path(sys.argv[sys.argv.index("--output-dir") + 1])
        out.mkdir(parents=True, exist_ok=True)
        rows = [{"N": n, "has_negative_eigenvalues": n >= 4, "min_eigenvalue": -0.5,
                 "min_eigenvalue_closed": -0.5} for n in (2, 4)]
        data = {"rows": rows, "paper": {"smallest_impossible_n": 4}, "agrees": True}
        (out / "clipped_counterexample.json").write_text(json.dumps(data))
        """))
    return folder


def test_failing_example_is_reported_and_the_run_continues(tmp_path, capsys, monkeypatch):
    _fake_examples(tmp_path / "examples")
    monkeypatch.chdir(tmp_path)  # relative folders, as a user types them
    out = tmp_path / "out"
    status = main(["reproduce", "--output-dir", "out", "--examples-dir", "examples",
                   "--only", "mcvq_text", "clipped_counterexample", "--no-progress"])
    assert (out / "clipped_counterexample" / "clipped_counterexample.json").exists()
    assert status == 1  # some example failed
    record = json.loads((out / "findings.json").read_text())
    verdicts = {f["experiment"]: f["verdict"] for f in record["findings"]}
    assert verdicts == {"clipped_counterexample": "holds", "mcvq_text": "failed"}
    failed = next(f for f in record["findings"] if f["experiment"] == "mcvq_text")
    assert "exit status 1" in failed["detail"] and "boom" in failed["detail"]
    assert "FAILED" in (out / "report.md").read_text()


def test_missing_script_and_unreadable_json_fail_without_stopping(tmp_path):
    examples = tmp_path / "examples"
    examples.mkdir()
    (examples / "clipped_bumps.py").write_text(
        "import sys\nfrom pathlib import Path\n"
        "out = Path(sys.argv[sys.argv.index('--output-dir') + 1])\n"
        "(out / 'clipped_bumps.json').write_text('{\"unexpected\": 1}')\n")
    summary = reproduce.reproduce(tmp_path / "out", only=["clipped_bumps", "gvq_digits"],
                                  examples_dir=examples, progress=False)
    errors = {r["name"]: r["error"] for r in summary["experiments"]}
    assert "could not read the findings" in errors["clipped_bumps"]
    assert "script not found" in errors["gvq_digits"]
    assert {f["verdict"] for f in summary["findings"]} == {"failed"}


def test_timeout_stops_a_slow_example(tmp_path):
    examples = tmp_path / "examples"
    examples.mkdir()
    (examples / "mcvq_text.py").write_text("import time\ntime.sleep(30)\n")
    summary = reproduce.reproduce(tmp_path / "out", only=["mcvq_text"], examples_dir=examples,
                                  progress=False, timeout=1.0)
    assert "timed out" in summary["experiments"][0]["error"]
    with pytest.raises(ValueError, match="--timeout"):
        reproduce.reproduce(tmp_path / "out", only=["mcvq_text"], examples_dir=examples,
                            progress=False, timeout=0)


def test_compare_reports_changed_verdicts(tmp_path, capsys):
    before = {"findings": [
        {"experiment": "a", "claim": "x", "ours": 1.0, "verdict": "holds"},
        {"experiment": "a", "claim": "gone", "ours": 2.0, "verdict": "holds"}]}
    after = {"findings": [
        {"experiment": "a", "claim": "x", "ours": 1.5, "verdict": "differs"},
        {"experiment": "b", "claim": "y", "ours": 3.0, "verdict": "partly"}]}
    lines = reproduce.compare_findings(before, after)
    assert any("verdict holds -> differs" in line and "ours 1 -> 1.5" in line for line in lines)
    assert any(line.startswith("new") and "b: y" in line for line in lines)
    assert any(line.startswith("missing") and "gone" in line for line in lines)
    assert reproduce.compare_findings(after, after) == []
    only_b = {"findings": after["findings"][1:]}
    assert reproduce.compare_findings(after, only_b) == [
        "not run   1 experiment(s) of the previous run: a"]
    assert main(["reproduce", "--output-dir", str(tmp_path), "--only", "mcvq_text",
                 "--compare", str(tmp_path / "absent.json")]) == 2
    assert "--compare" in capsys.readouterr().err


def test_markdown_to_html_handles_the_report_elements():
    text = ("# Title\n\nSome *text* with `code` and **bold**.\n\n| a | b |\n|---|---|\n"
            "| 1 | [link](x.log) |\n\n```\nraw < log\n```\n\n![fig](f.png)\n")
    page = reproduce.markdown_to_html(text)
    assert '<h1 id="title">Title</h1>' in page
    assert "<em>text</em>" in page and "<code>code</code>" in page
    assert "<strong>bold</strong>" in page
    assert "<th>a</th>" in page and '<a href="x.log">link</a>' in page
    assert "<pre>raw &lt; log</pre>" in page and '<img alt="fig" src="f.png">' in page


def test_every_extractor_rejects_an_empty_json_by_raising():
    # run_experiment turns the exception into a "failed" finding; an extractor must not
    # invent a verdict from missing numbers.
    for experiment in EXPERIMENTS.values():
        with pytest.raises((KeyError, TypeError, StopIteration)):
            experiment.extract({})


@pytest.mark.slow
@pytest.mark.whole_run  # about 17 minutes on 2 CPU cores: left out of CI, run before a release
def test_whole_default_run(tmp_path):
    summary = reproduce.reproduce(tmp_path, progress=False)
    assert [r["name"] for r in summary["experiments"]] == list(EXPERIMENTS)
    assert not [r["name"] for r in summary["experiments"] if r["error"]]
