"""``ppl-zoo compare gvq`` writes its table, JSON and figure; ``ppl-zoo list`` lists it."""

import csv
import json

import pytest

from inference.app.cli import main
from inference.app.compare import run_comparison


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("zoo")
    status = main(["compare", "gvq", "--quick", "--no-progress", "--output-dir", str(out)])
    return status, out


@pytest.mark.slow
def test_compare_gvq_writes_csv_json_and_png(quick_run, capsys):
    status, out = quick_run
    assert status == 0
    rows = list(csv.DictReader(open(out / "gvq_comparison.csv")))
    assert [r["implementation"] for r in rows] == ["ours", "numpyro", "ours", "numpyro"]
    report = json.load(open(out / "gvq_comparison.json"))
    assert report["settings"]["quick"] is True and len(report["rows"]) == 4
    assert (out / "gvq_comparison.png").stat().st_size > 1000
    # Exact search and infer_discrete agree on every example of the shared data.
    association = [r for r in report["rows"] if r["task"] == "association"]
    assert association[1]["agreement_with_exact"] == 1.0
    assert association[0]["objective"] == pytest.approx(association[1]["objective"], rel=1e-5)


def test_list_and_unknown_model(capsys):
    assert main(["list"]) == 0
    assert "gvq" in capsys.readouterr().out
    assert main(["compare", "no-such-model", "--no-progress"]) == 2
    with pytest.raises(ValueError, match="model must be one of"):
        run_comparison("no-such-model")
