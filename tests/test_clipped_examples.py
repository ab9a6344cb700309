"""The clipped-Gaussian examples of seed 001: bumps, sum constraint, entropy.

``examples/clipped_bumps.py``, ``examples/clipped_counterexample.py`` and
``examples/clipped_entropy.py`` each run once with ``--quick`` into a temporary
folder (about 10 s each on 2 CPU cores); the tests check their numbers against
closed forms (the triangle-wave spectrum, the sum-constraint eigenvalue, the
cell counts of hyperplane arrangements) and their helpers against hand
computations.
"""

import json
import math

import jax
import numpy as np
import pytest

from ppl_models.clipped_gaussian import ring_bumps


@pytest.fixture(scope="module")
def bumps(load_example):
    return load_example("clipped_bumps")


@pytest.fixture(scope="module")
def counterexample(load_example):
    return load_example("clipped_counterexample")


@pytest.fixture(scope="module")
def entropy(load_example):
    return load_example("clipped_entropy")


def _quick(module, run_example, tmp_path_factory, name):
    out = tmp_path_factory.mktemp(name)
    return out, run_example(module, ["--quick", "--output-dir", str(out), "--seed", "0"])


@pytest.fixture(scope="module")
def bumps_run(bumps, run_example, tmp_path_factory):
    return _quick(bumps, run_example, tmp_path_factory, "clipped_bumps")


@pytest.fixture(scope="module")
def counterexample_run(counterexample, run_example, tmp_path_factory):
    return _quick(counterexample, run_example, tmp_path_factory, "clipped_counterexample")


@pytest.fixture(scope="module")
def entropy_run(entropy, run_example, tmp_path_factory):
    return _quick(entropy, run_example, tmp_path_factory, "clipped_entropy")


def _files(out, names):
    for name in names:
        path = out / name
        assert path.exists() and path.stat().st_size > 1000, name


# ----------------------------------------------------------------------- bumps
def test_bumps_files_and_printout(bumps_run):
    out, results = bumps_run
    _files(out, ("clipped_bumps.json", "clipped_bumps_spectra.png", "clipped_bumps_patterns.png"))
    record = json.loads((out / "clipped_bumps.json").read_text())
    assert record["exact"]["cxx_above_cutoff"] == 2
    assert record["exact"]["cxx_eigenvalues_top10"][0] == pytest.approx(128.0, rel=1e-5)
    assert record["reproduced"] is True
    printed = results["printed"]
    assert "Paper vs ours (exact distribution)" in printed and ": reproduced" in printed


def test_bumps_exact_spectra_match_paper(bumps_run):
    """Paper, Fig. 3: C_xx has exactly two nonzero eigenvalues, C_ss has N/2 positive ones."""
    exact = bumps_run[1]["exact"]
    assert exact["cxx_above_cutoff"] == 2
    assert exact["css_positive"] == 128
    # Rank 2 with unit diagonal: the two eigenvalues share the trace N = 256 equally.
    np.testing.assert_allclose(exact["cxx_eigenvalues"][:2], [128.0, 128.0], rtol=1e-5)
    assert exact["cxx_rest_max_abs"] < 1e-9
    # The remaining C_ss eigenvalues (even Fourier modes) are zero to rounding.
    css = exact["css_eigenvalues"]
    assert np.max(np.abs(css[128:])) < 1e-10 and css[127] > 0.01
    closed = bumps_run[1]["closed_form"]
    assert closed["css_max_dev"] < 1e-6       # C_ss = 1 - 4 d / N
    assert closed["cxx_max_dev"] < 1e-6       # C_xx = cos(2 pi d / N) (float32 matrix)
    assert closed["css_spectrum_max_dev"] < 1e-9
    assert exact["warnings"] == [] and not exact["has_negative_eigenvalues"]


def test_bumps_eigenvectors_are_cosine_and_sine(bumps_run):
    exact = bumps_run[1]["exact"]
    assert min(exact["fourier_r2"]) > 1.0 - 1e-9
    apart = (exact["fourier_phase"][1] - exact["fourier_phase"][0]) % 180.0
    assert apart == pytest.approx(90.0, abs=1e-3)
    # The fitted model's second moments (eq. 7 from W W^T) are the data's.
    assert exact["moment_gap"] < 1e-5


def test_bumps_model_generates_half_width_bumps(bumps_run):
    """Sampling the fitted P = 2 model gives single bumps of width N/2 at uniform positions."""
    for name in ("exact", "sampled"):
        r = bumps_run[1][name]
        assert r["model_single_bump_fraction"] == 1.0, name
        assert tuple(r["model_widths"]) == (128, 128), name
        assert r["model_starts"]["outside"] == 0, name
        # Chi-square over 256 positions with 5000 patterns: p < 1e-4 would reject the
        # position distribution the model should reproduce (the seed is fixed).
        assert r["model_starts"]["p_value"] > 1e-4, name


def test_bumps_sample_keeps_rank_two(bumps_run):
    """Finding: a sample of width-N/2 bumps still gives a rank-2 C_xx, with unequal eigenvalues."""
    sampled = bumps_run[1]["sampled"]
    assert sampled["num_patterns"] == 2000
    assert sampled["cxx_above_cutoff"] == 2
    assert sampled["css_positive"] == 128
    top = sampled["cxx_eigenvalues"][:2]
    assert top.sum() == pytest.approx(256.0, rel=1e-5)
    assert top[0] - top[1] > 0.5
    assert min(sampled["fourier_r2"]) > 0.99 and max(sampled["fourier_r2"]) < 1.0 - 1e-6
    assert sampled["moment_gap"] < 1e-5


def test_bumps_helpers(bumps):
    n = 16
    exact = bumps.exact_bumps(n)
    assert exact.shape == (n, n) and np.all(exact.sum(axis=1) == 0)
    # ring_bumps draws rows of the exact distribution.
    drawn = np.asarray(ring_bumps(jax.random.key(3), 50, n))
    assert all(any(np.array_equal(row, e) for e in exact) for row in drawn)
    values = bumps.closed_form_css_eigenvalues(n)
    assert values.sum() == pytest.approx(n)  # trace of C_ss
    assert np.sum(values > 1e-12) == n // 2
    np.testing.assert_allclose(values, np.sort(np.linalg.eigvalsh(exact.T @ exact / n))[::-1],
                               atol=1e-12)
    s = np.array([[1, 1, -1, -1, 1, -1], [1, -1, -1, -1, -1, 1], [-1] * 6, [-1, 1, 1, -1, -1, -1]])
    runs, widths, starts = bumps.bump_structure(s)
    assert runs.tolist() == [2, 1, 0, 1]      # the second wraps around the ring
    assert widths.tolist() == [3, 2, 0, 2]
    assert starts.tolist() == [-1, 5, -1, 1]
    angle = 2 * np.pi * np.arange(64) / 64
    r2, phase = bumps.fourier_fit(np.cos(angle - np.radians(30.0)))
    assert r2 == pytest.approx(1.0, abs=1e-12) and phase == pytest.approx(30.0)
    assert bumps.fourier_fit(np.sign(np.cos(angle)))[0] < 0.85
    f = bumps.symmetrised_start_distribution(bumps.exact_bumps(8)[[0, 0, 1, 5]])
    np.testing.assert_allclose(f, [0.25, 0.25, 0, 0, 0.25, 0.25, 0, 0])


# -------------------------------------------------------------- counterexample
@pytest.mark.slow
def test_counterexample_files(counterexample_run):
    out, results = counterexample_run
    _files(out, ("clipped_counterexample.json", "clipped_counterexample.png"))
    record = json.loads((out / "clipped_counterexample.json").read_text())
    assert [r["N"] for r in record["rows"]] == [4, 6, 8]
    assert record["agrees"] is True
    assert "Paper vs ours" in results["printed"] and ": agrees" in results["printed"]


@pytest.mark.slow
def test_counterexample_negative_eigenvalue_matches_closed_form(counterexample_run):
    expected = {4: -0.5, 6: 1 - 5 * math.sin(math.pi / 10), 8: 1 - 7 * math.sin(math.pi / 14)}
    for r in counterexample_run[1]["rows"]:
        n = r["N"]
        assert r["css_offdiag"] == pytest.approx(-1.0 / (n - 1), abs=1e-6)
        assert r["css_offdiag_spread"] < 1e-6
        assert r["min_eigenvalue"] == pytest.approx(expected[n], abs=1e-6)
        assert r["min_eigenvalue_closed"] == pytest.approx(expected[n], abs=1e-12)
        assert r["min_eigenvalue"] < -0.49
        assert r["has_negative_eigenvalues"]
        assert r["min_eigenvector_overlap"] > 1.0 - 1e-9  # the direction sum_a x_a
        if r["warned"]:
            assert "negative eigenvalue" in r["warnings"][0]


@pytest.mark.slow
def test_counterexample_projection(counterexample_run):
    """project=True: a valid correlation matrix, c = -1/(N-1); model moments in closed form."""
    for r in counterexample_run[1]["rows"]:
        n = r["N"]
        assert r["projected"]
        assert r["projected_min_eigenvalue"] > -1e-6
        assert r["projected_diagonal_max_dev"] < 1e-6
        assert r["projected_cxx_offdiag"] == pytest.approx(-1.0 / (n - 1), abs=1e-5)
        closed = 2.0 / math.pi * math.asin(-1.0 / (n - 1))
        assert r["model_second"] == pytest.approx(closed, abs=1e-5)
        assert r["model_second_max_dev"] < 1e-5
        assert r["model_max_abs_mean"] < 1e-6
        # Every pair is off by the same amount, so the RMS error is that amount.
        assert r["moment_error"]["corr_rmse"] == pytest.approx(closed + 1.0 / (n - 1), abs=1e-5)
        assert r["moment_error"]["mean_rmse"] < 1e-6
        # The projected model breaks the constraint: far fewer than all draws sum to zero
        # (measured 0.65, 0.53, 0.46 of 20000; the data: 1).
        assert 0.2 < r["zero_sum_fraction"] < 0.8
        assert r["sums"].sum() == 20000 and np.all(r["sums"][1::2] == 0)  # sums are even


def test_counterexample_closed_forms(counterexample):
    for n in range(2, 21):
        c = counterexample.closed_form_gaussian_corr(n)
        matrix = (1 - c) * np.eye(n) + c * np.ones((n, n))
        assert np.linalg.eigvalsh(matrix)[0] == pytest.approx(
            counterexample.closed_form_min_eigenvalue(n), abs=1e-12)
    assert counterexample.closed_form_min_eigenvalue(2) == pytest.approx(0.0, abs=1e-12)
    assert counterexample.closed_form_min_eigenvalue(1000) == pytest.approx(1 - math.pi / 2,
                                                                             abs=1e-5)
    assert counterexample.closed_form_projected_second_moment(2) == pytest.approx(-1.0)
    blocks = [np.ones((2, 1)), 2 * np.ones((3, 2))]
    out = counterexample.block_diagonal(blocks)
    assert out.shape == (5, 3)
    np.testing.assert_array_equal(out[:2, :1], 1.0)
    np.testing.assert_array_equal(out[2:, 1:], 2.0)
    assert out[:2, 1:].sum() == 0 and out[2:, :1].sum() == 0


# --------------------------------------------------------------------- entropy
@pytest.mark.slow
def test_entropy_files(entropy_run):
    out, results = entropy_run
    _files(out, ("clipped_entropy.json", "clipped_entropy.png"))
    record = json.loads((out / "clipped_entropy.json").read_text())
    assert record["settings"]["sizes"] == [8, 16, 32, 64]
    assert "Paper vs ours" in results["printed"]


@pytest.mark.slow
def test_entropy_exact_counts_equal_formulas(entropy_run):
    counts = entropy_run[1]["counts"]
    for variant, per_p in counts.items():
        for p, c in per_p.items():
            for r in c["rows"]:
                assert r["exact"] == r["formula"], (variant, p, r["N"])
                assert r["degenerate"] == 0
                assert 1 <= r["sampled"] <= r["exact"]


@pytest.mark.slow
def test_entropy_sampling_matches_exact_expectation(entropy_run):
    """Zero bias, P = 2: the sampled count is the exact expected coverage of the arcs."""
    zero = entropy_run[1]["counts"]["zero bias"]
    for r in zero[1]["rows"]:
        assert r["sampled"] == 2 and r["entropy"] == pytest.approx(math.log(2), abs=1e-3)
    for r in zero[2]["rows"]:
        # Coverage of the 2N arcs by 65536 samples: within 5 s.d. (plus one for rounding).
        assert abs(r["sampled"] - r["expected"]) <= 5 * r["expected_sd"] + 1
        # Plug-in entropy: bias ~ (2N - 1) / (2M) < 1e-3, s.d. ~ 0.005 at M = 65536.
        assert r["entropy"] == pytest.approx(r["entropy_exact"], abs=0.03)
    # With biases the Gaussian misses the small far cells for P = 3.
    biased = entropy_run[1]["counts"]["with biases"][3]["rows"]
    assert biased[-1]["sampled"] < 0.5 * biased[-1]["formula"]


@pytest.mark.slow
def test_entropy_slopes(entropy_run):
    counts = entropy_run[1]["counts"]
    for variant, per_p in counts.items():
        for key in ("slope_formula", "slope_exact", "slope_sampled"):
            slopes = [per_p[p][key] for p in (1, 2, 3)]
            assert slopes[0] < slopes[1] < slopes[2], (variant, key, slopes)
        for p in (1, 2, 3):
            # Over N = 16..64 the formulas are within 0.05 of their asymptotic slopes.
            assert per_p[p]["slope_formula"] == pytest.approx(per_p[p]["slope_asymptotic"],
                                                              abs=0.05)
    assert [counts["zero bias"][p]["slope_asymptotic"] for p in (1, 2, 3)] == [0, 1, 2]
    assert [counts["with biases"][p]["slope_asymptotic"] for p in (1, 2, 3)] == [1, 2, 3]


def test_entropy_formulas_by_hand(entropy):
    for n in (3, 8, 50):
        assert entropy.cover_count(n, 1) == 2
        assert entropy.cover_count(n, 2) == 2 * n
        assert entropy.cover_count(n, 3) == n * n - n + 2
        assert entropy.affine_count(n, 1) == n + 1
        assert entropy.affine_count(n, 2) == 1 + n + n * (n - 1) // 2
        for p in (1, 2, 3, 4):
            # An affine arrangement in R^P is a central one in R^(P+1), cut in half.
            assert entropy.affine_count(n, p) == entropy.cover_count(n + 1, p + 1) // 2
    assert entropy.cover_count(4, 4) == 2**4  # N <= P: every pattern


def test_enumerate_cells_small(entropy):
    # Four lines through the origin at 0, 45, 90, 135 degrees: 8 sectors.
    angles = np.radians([0.0, 45.0, 90.0, 135.0])
    w = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    found = entropy.enumerate_cells(w)
    assert found == {"cells": 8, "vertices": 8, "degenerate": 0}
    # Shifted off the origin (general position): 1 + 4 + 6 = 11 cells.
    found = entropy.enumerate_cells(w, np.array([0.1, -0.3, 0.2, 0.05]))
    assert found["cells"] == 11 and found["vertices"] == 6 and found["degenerate"] == 0
    # A repeated hyperplane is not general position: the vertices say so.
    rng = np.random.default_rng(0)
    w3 = rng.normal(size=(6, 3))
    w3 /= np.linalg.norm(w3, axis=1, keepdims=True)
    assert entropy.enumerate_cells(w3)["cells"] == entropy.cover_count(6, 3)
    assert entropy.enumerate_cells(np.vstack([w3, w3[:1]]))["degenerate"] > 0
    assert entropy.enumerate_cells(w3, max_candidates=10) is None
    # Zero-bias, P = 2 arcs: 2N cells whose probabilities sum to one.
    p = entropy.arc_probabilities(w)
    np.testing.assert_allclose(p, np.full(8, 1 / 8))
    mean, sd = entropy.expected_distinct(p, 1)
    assert mean == pytest.approx(1.0) and sd == pytest.approx(math.sqrt(8 * (1 / 8) * (7 / 8)))
