"""The cluster-number study runs end to end with its quick flag (slow: many compilations)."""

import pytest


@pytest.mark.slow
def test_yingyang_selection_quick(load_example, run_example, tmp_path):
    results = run_example(load_example("yingyang_selection"),
                          ["--quick", "--output-dir", str(tmp_path)])
    summary = results["summary"]
    assert set(summary) >= {"J", "L_map", "L_stocha", "bic", "prune, EM + MML weights", "RPCL",
                            "sklearn BayesianGMM"}
    # Quick run (k = 2, 3; separations 3.5 and 5), measured: J and BIC 2/2; L_stocha,
    # carrying no penalty on k, never picks the truth and overshoots.
    assert summary["J"]["hits"] == 2 and summary["bic"]["hits"] == 2
    assert summary["L_stocha"]["over"] == 2
    assert "Findings" in results["printed"]
    assert (tmp_path / "yingyang_selection.png").exists()
    assert (tmp_path / "yingyang_selection.json").exists()
