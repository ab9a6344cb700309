"""The MCVQ text example (examples/mcvq_text.py, seed 004 sec. 5.3 and Fig. 7)."""

import numpy as np
import pytest


@pytest.fixture(scope="module")
def example(load_example):
    return load_example("mcvq_text")


def test_g_binariness(example):
    hard = np.eye(4)[[0, 1, 2, 3, 3]]
    stats = example.g_binariness(hard)
    assert stats["mean_max_g"] == 1.0 and stats["mean_entropy_bits"] == 0.0
    stats = example.g_binariness(np.full((5, 4), 0.25))
    assert stats["mean_entropy_bits"] == pytest.approx(2.0) == stats["max_entropy_bits"]
    assert stats["fraction_above_0.9"] == 0.0


def test_conspicuous_words_and_segments(example):
    # 4 words, 2 VQs: words 0-1 belong to VQ 0, words 2-3 to VQ 1; 2 states each.
    g = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.2, 0.8]])
    mu = np.zeros((4, 2, 2))
    mu[:, 0, 1] = [3.0, 0.0, 9.0, 9.0]  # VQ 0 state 1: word 0 above, word 1 below average
    mu[:, 1, 0] = [9.0, 9.0, 0.5, 2.0]
    average = np.ones(4)
    m_doc = np.array([[0.1, 0.9], [0.8, 0.2]])
    rows = example.conspicuous_words(g, m_doc, mu, average, np.array(list("abcd")), [0, 1])
    assert rows[0] == {"vq": 0, "state": 1, "m": 0.9, "above": ["a"], "below": ["b"]}
    assert rows[1]["state"] == 0 and rows[1]["above"] == ["d"] and rows[1]["below"] == ["c"]
    segs = example.segments(g, mu, np.array(list("abcd")))
    assert [s["num_words"] for s in segs] == [2, 2] and segs[0]["words"] == ["a", "b"]


@pytest.mark.slow
def test_mcvq_text_quick(example, run_example, tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("gensim")  # only its data file is read; skip where it is missing
    results = run_example(example, ["--quick", "--output-dir", str(tmp_path)])
    assert results["num_documents"] == 300 and results["num_states"] == 4
    assert sum(s["num_words"] for s in results["segments"]) == results["num_words"]
    # Measured: g ends fully binary (mean max_k g = 1.000; the full run 0.992), as the
    # paper's "segmentation of the vocabulary" says; 0.95 leaves room for a softer start.
    assert results["g"]["mean_max_g"] > 0.95
    # The reconstruction beats the corpus mean (measured RMS 0.602 against 0.637).
    assert results["rms"]["mcvq"] < results["rms"]["corpus_mean"]
    trace = np.array(results["free_energy_trace"])
    assert np.all(np.isfinite(trace)) and results["converged"]
    assert len(results["documents"]) == 3
    assert all(len(d["states"]) == 4 for d in results["documents"])
    assert "Vocabulary segments" in results["printed"] and "Fig. 7" in results["printed"]
    assert (tmp_path / "mcvq_text.json").exists() and (tmp_path / "mcvq_text.png").exists()
