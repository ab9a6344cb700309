"""The MCVQ model-selection study (``examples/mcvq_selection.py``, issue 8).

The example runs once with ``--quick`` (1 seed of the paper's K = 3, J = 9 layout, 96
images, candidates (2, 9), (3, 9), (4, 9), 3-fold CV, 2 starts, one VB run from
K = 8, J = 10) into a temporary folder. Compiling the fits of every candidate shape
dominates its time: about 85 s of CPU, 2.5-5 minutes on 2 busy cores (measured), so
the tests that use it are marked slow; the fast tests check the helpers on hand-made
numbers and the flags.
"""

import json
import math

import numpy as np
import pytest

from inference.mcvq.selection import num_parameters


@pytest.fixture(scope="module")
def example(load_example):
    return load_example("mcvq_selection")


@pytest.fixture(scope="module")
def quick_run(example, run_example, tmp_path_factory):
    out = tmp_path_factory.mktemp("mcvq_selection")
    results = run_example(example, ["--quick", "--output-dir", str(out)])
    return out, results, json.loads((out / "mcvq_selection.json").read_text())


def test_helpers(example):
    assert example.candidates_for(3, 9) == [(2, 9), (3, 9), (4, 9), (3, 8), (3, 10)]
    assert example.candidates_for(1, 2, vary_j=False) == [(1, 2), (2, 2)]
    # A one-state VQ is a constant term, not a cause.
    assert example.count_causes((9, 1, 9, 9, 1)) == 3
    assert example.pruned_hits((9, 1, 9, 9), 3, 9) == (False, True, True)
    assert example.pruned_hits((9, 9, 9), 3, 9) == (True, True, True)
    assert example.pruned_hits((9, 8, 9), 3, 9) == (True, True, False)
    assert example.pruned_hits((9, 9, 9, 2), 3, 9) == (False, False, False)
    summary = {"seeds": 4, "hits_k": {"vb (pruned, raw VQs)": 1, "vb (pruned, causes)": 3},
               "vqs_counts": {}, "causes_counts": {}, "mean_vqs": 4.0, "mean_causes": 3.0}
    assert example.claim(summary)["level"] == "holds for the causes only"
    summary["hits_k"]["vb (pruned, raw VQs)"] = 3
    assert example.claim(summary)["level"] == "holds"
    summary["hits_k"] = {"vb (pruned, raw VQs)": 2, "vb (pruned, causes)": 2}
    assert example.claim(summary)["level"] == "differs"  # "most" = more than half


def test_bad_flags(example):
    for argv in (["--seeds", "0"], ["--restarts", "0"], ["--folds", "1"],
                 ["--variant-seeds", "-1"]):
        with pytest.raises(SystemExit):
            example.main(argv)


@pytest.mark.slow
def test_files_and_settings(quick_run):
    out, results, record = quick_run
    assert (out / "mcvq_selection.png").stat().st_size > 5000
    settings = record["settings"]
    assert settings["seeds"] == 1 and settings["variant_seeds"] == 0
    assert settings["candidates"] == {"K=3, J=9": [[2, 9], [3, 9], [4, 9]]}
    assert list(record["summary"]) == ["K=3, J=9"]
    assert "Compared with the claim tested" in results["printed"]
    assert record["vb_pruning"]["text"] in results["printed"]
    assert record["vb_pruning"]["level"] in ("holds", "holds for the causes only", "differs")


@pytest.mark.slow
def test_choices_and_hit_counts_agree(quick_run):
    record = quick_run[2]
    cands = [tuple(c) for c in record["settings"]["candidates"]["K=3, J=9"]]
    rows = record["runs"]["K=3, J=9"]
    summary = record["summary"]["K=3, J=9"]
    for criterion in record["settings"]["criteria"]:
        for row in rows:
            assert tuple(row["choice"][criterion]) in cands, criterion
            assert len(row["values"][criterion]) == len(cands)
        assert summary["hits_k"][criterion] == sum(r["choice"][criterion][0] == 3 for r in rows)
        assert summary["hits_kj"][criterion] == sum(r["choice"][criterion] == [3, 9]
                                                    for r in rows)
    pruned = [r["pruned"] for r in rows]
    assert summary["hits_k"]["vb (pruned, raw VQs)"] == sum(p["num_vqs"] == 3 for p in pruned)
    assert summary["hits_k"]["vb (pruned, causes)"] == sum(p["causes"] == 3 for p in pruned)
    assert summary["mean_causes"] == pytest.approx(np.mean([p["causes"] for p in pruned]))


@pytest.mark.slow
def test_criteria_values(quick_run):
    record = quick_run[2]
    dim, num = 121, record["settings"]["examples"]
    for row in record["runs"]["K=3, J=9"]:
        train, bic, vb = row["values"]["train"], row["values"]["bic"], row["values"]["vb"]
        # BIC is the training score less p log N / (2 N), p of the (K, J) candidate.
        for (k, j), t, b in zip([(2, 9), (3, 9), (4, 9)], train, bic, strict=True):
            assert b == pytest.approx(t - num_parameters(dim, k, j) * math.log(num) / (2 * num),
                                      abs=1e-3)
        # Two VQs cannot explain three independent shapes: the training score of K = 3
        # is far above K = 2's (measured 30 nats per image), and so is the VB bound.
        assert train[1] > train[0] + 5
        assert vb[1] > vb[0] + 5
        # train and bic choose the largest value (ties to the smaller candidate); cv's
        # one-SE rule never chooses a candidate larger than the best one.
        for criterion in ("train", "bic"):
            values = row["values"][criterion]
            assert values[[2, 3, 4].index(row["choice"][criterion][0])] >= max(values) - 1e-4
        assert row["choice"]["cv"][0] <= 2 + int(np.argmax(row["values"]["cv"]))
        # What survives a VB run started at a candidate fits inside that candidate.
        for (k, j), size in zip([(2, 9), (3, 9), (4, 9)], row["vb_sizes"], strict=True):
            assert 1 <= size[0] <= k and len(size[1]) == size[0] and max(size[1]) <= j


@pytest.mark.slow
def test_pruning_trace(quick_run):
    record = quick_run[2]
    trace = record["trace"]
    pruned = record["runs"]["K=3, J=9"][0]["pruned"]
    vqs, found = np.array(trace["num_vqs"]), np.array(trace["causes"])
    assert len(vqs) == len(found) == len(trace["bound"]) == pruned["iterations"] >= 2
    assert vqs[0] <= 8 and vqs[-1] == pruned["num_vqs"] == len(pruned["num_states"])
    assert np.all(np.diff(vqs) <= 0)  # pruning only removes VQs
    assert np.all(found <= vqs) and found[-1] == pruned["causes"]
    assert pruned["causes"] == sum(n > 1 for n in pruned["num_states"])
    assert all(1 <= n <= 10 for n in pruned["num_states"])
    assert all(np.isfinite(trace["bound"]))
    # The recorded bound per example is the trace's last value over N.
    assert pruned["bound"] == pytest.approx(trace["bound"][-1] / record["settings"]["examples"],
                                            rel=1e-5)
