"""The shapes experiment of seed 004 sec. 5.1 (``examples/mcvq_shapes.py``).

The example runs once with ``--quick`` (16 starts x 120 iterations per fit, two
fits; about 20 s of CPU, 35 s of wall time on 2 busy cores: slow) into a
temporary folder; the fast tests check its helpers.
"""

import json
import math

import numpy as np
import pytest


@pytest.fixture(scope="module")
def example(load_example):
    return load_example("mcvq_shapes")


@pytest.fixture(scope="module")
def quick_run(example, run_example, tmp_path_factory):
    out = tmp_path_factory.mktemp("mcvq_shapes")
    return out, run_example(example, ["--quick", "--output-dir", str(out), "--seed", "0"])


def test_ordering_links(example):
    paper = example._ordering(example.PAPER_RMS)
    assert paper["holds"] and paper["measured_order"] == ["mcvq", "pca", "nmf", "vq"]
    swapped = example._ordering({"mcvq": 0.2, "pca": 0.3, "nmf": 0.6, "vq": 0.5})
    assert not swapped["holds"] and swapped["links"] == {"mcvq <= pca": True,
                                                         "pca < nmf": True, "nmf < vq": False}
    assert example._ordering({"mcvq": 0.3, "pca": 0.3, "nmf": 0.4, "vq": 0.5})["holds"]


def test_bad_flags(example):
    with pytest.raises(SystemExit):
        example.main(["--restarts", "0"])


@pytest.mark.slow
def test_files_and_json(quick_run):
    out, results = quick_run
    for name in ("mcvq_shapes.png", "mcvq_shapes_rms.png", "mcvq_shapes.json"):
        assert (out / name).stat().st_size > 1000, name
    record = json.loads((out / "mcvq_shapes.json").read_text())
    assert record["data"] == {"train": [100, 121], "test": [629, 121]}
    assert record["paper_rms"] == {"mcvq": 0.21, "pca": 0.22, "nmf": 0.35, "vq": 0.49}
    assert record["mcvq"]["purity"]["purity"] == pytest.approx(results["mcvq"]["purity"]["purity"])
    assert len(record["mcvq"]["restart_free_energies"]) == 16
    assert set(record["matched"]) == {"pca", "nmf", "vq"}


@pytest.mark.slow
def test_vqs_specialise_to_shapes(quick_run):
    purity = quick_run[1]["mcvq"]["purity"]
    # One VQ for all pixels scores 49/111 = 0.44 and a random partition about the same; the
    # paper's claim is a partition along the shapes (purity 1). Measured (seed 0): 1.0 in the
    # quick run and the full one; single starts reach it about once in 50, so the best of the
    # quick run's 16 starts may be a near miss elsewhere (0.90 measured with other keys):
    # 0.8 is the bound.
    assert purity["purity"] >= 0.8
    assert purity["one_to_one"]
    assert purity["mean_max_g"] > 0.99  # annealed to T = 1: g is a hard partition


@pytest.mark.slow
def test_rms_table_at_matched_description_length(quick_run):
    results = quick_run[1]
    mcvq = results["mcvq"]
    assert mcvq["bits"] == pytest.approx(605 * 8 + 121 * math.log2(3) + 629 * 3 * math.log2(5))
    for method, row in results["matched"].items():
        # The closest size of the sweep: within the gap to the next size (PCA/NMF step by
        # about 6 kbit per component, so at most a factor 1.7 here).
        assert 0.5 < row["bits_ratio"] < 1.7, method
        assert results["rms"][method] == row["rms"]
    rms = results["rms"]
    # MCVQ <= PCA holds, and MCVQ beats every baseline at this length (measured 0.49 against
    # PCA 0.71, NMF 0.71, VQ 0.62); the baselines' order is the paper's only in part.
    assert rms["mcvq"] < min(rms["pca"], rms["nmf"], rms["vq"])
    assert results["ordering"]["links"]["mcvq <= pca"]
    # The decoder's hard reconstruction is within 0.01 of the soft one (g and m are hard).
    assert abs(mcvq["rms"] - mcvq["rms_soft"]) < 0.01
    # J = 5 states for 9 positions per shape cannot reach 0 error: the best partition-aware
    # k-means (5 centres on each shape's columns) reaches 0.44; measured 0.451.
    assert 0.4 < rms["mcvq"] < 0.6
    printed = results["printed"]
    assert "0.21" in printed and "0.22" in printed and "0.35" in printed and "0.49" in printed
    assert "the paper's ordering MCVQ <= PCA < NMF < VQ holds" in printed
    assert len(results["sensitivity"]) == 6


@pytest.mark.slow
def test_unseen_configuration(quick_run):
    near = quick_run[1]["near_top"]
    assert not near["in_training_set"] and near["offsets"] == [0, 0, 0]
    # Sec. 5.1: the all-near-the-top configuration, never seen in training, is reconstructed
    # about as well as the others (measured 0.453 for the 27 against 0.451; 0.56 against
    # 0.49 with a near-miss fit from other keys: 25% covers both).
    assert near["rms_near_top_27"] < 1.25 * near["rms_other_test"]


@pytest.mark.slow
def test_missing_data(quick_run):
    missing = quick_run[1]["missing"]
    assert missing["fraction_masked"] == pytest.approx(0.3, abs=0.02)
    # Issue 7's claim, as stated: within 10% of the unmasked fit. Measured: 1.003 in the full
    # run (200 starts, both fits purity 1.0); 1.077 in the quick run, whose masked fit (best
    # of 16 starts) is a near miss with purity 0.90.
    assert missing["ratio"] == pytest.approx(missing["rms_masked"] / missing["rms_unmasked"])
    assert missing["ratio"] <= 1.1 and missing["within_tolerance"]
    assert np.isfinite(missing["rms_masked"])
