"""Description length and the PCA / NMF / VQ baselines (``inference.gvq.description_length``)."""

import math

import numpy as np
import pytest

from inference.gvq import description_length as dl


@pytest.fixture(scope="module")
def split():
    """Small non-negative-shiftable data in [-1, 1]: 40 training and 15 test rows of dim 12."""
    rng = np.random.default_rng(0)
    basis = rng.uniform(-1, 1, (3, 12))

    def draw(n):
        return np.clip(rng.normal(size=(n, 3)) @ basis / 2 + 0.05 * rng.normal(size=(n, 12)),
                       -1, 1).astype(np.float32)
    return draw(40), draw(15)


def test_accounting_by_hand():
    # MCVQ, K = 3, J = 5 on the paper's 629 test shapes of 121 pixels, 8 bits per real:
    # D J = 605 used means, g hard (121 log2 3), 629 x 3 codes of log2 5 bits.
    bits = dl.mcvq_bits(629, 121, 3, 5)
    assert bits.model_bits == pytest.approx(605 * 8 + 121 * math.log2(3))
    assert bits.encoding_bits == pytest.approx(629 * 3 * math.log2(5))
    assert bits.total_bits == pytest.approx(bits.model_bits + bits.encoding_bits)
    assert bits.total_bits == pytest.approx(9413.3, abs=0.1)
    # The paper's 5.9e3 needs about 2.19 bits per used mean under this accounting.
    assert dl.mcvq_bits(629, 121, 3, 5, bits_per_parameter=2.19).total_bits == pytest.approx(
        5900, rel=0.002)
    # PCA: mean + p components, p coefficients per test example.
    assert dl.pca_bits(10, 4, 2, bits_per_parameter=3, bits_per_coefficient=5) == (
        dl.DescriptionLength(3 * 3 * 4, 5 * 10 * 2, 36 + 100))
    # NMF: no mean.
    assert dl.nmf_bits(10, 4, 2, bits_per_parameter=3, bits_per_coefficient=5).total_bits == (
        3 * 2 * 4 + 5 * 10 * 2)
    # VQ: codebook, log2 N_vq per example; one codebook vector needs no index.
    assert dl.vq_bits(10, 4, 4, bits_per_parameter=2).total_bits == 2 * 16 + 10 * 2
    assert dl.vq_bits(10, 4, 1).encoding_bits == 0.0
    # One state per VQ and one VQ: nothing to send per example, nor for g.
    assert dl.mcvq_bits(10, 4, 1, 1, bits_per_parameter=2).total_bits == 8.0
    # The dispatcher gives the same numbers.
    assert dl.description_length("mcvq", (3, 5), 629, 121) == dl.mcvq_bits(629, 121, 3, 5)
    assert dl.description_length("nmf", 3, 50, 7) == dl.nmf_bits(50, 7, 3)


def test_matching_helper():
    rows = [{"size": s, "bits": b} for s, b in ((1, 100.0), (2, 200.0), (3, 300.0))]
    assert dl.match_description_length(rows, 240.0)["size"] == 2
    assert dl.match_description_length(rows, 260.0)["size"] == 3
    assert dl.match_description_length(rows, 10_000.0)["size"] == 3
    # A tie goes to the smaller model.
    tie = dl.match_description_length(rows, 250.0)
    assert tie["size"] == 2 and tie["bits_ratio"] == pytest.approx(0.8)
    with pytest.raises(ValueError, match="at least one row"):
        dl.match_description_length([], 10.0)
    with pytest.raises(TypeError, match="'bits' entry"):
        dl.match_description_length([{"size": 1}], 10.0)
    with pytest.raises(ValueError, match="target_bits must be positive"):
        dl.match_description_length(rows, -1.0)


def test_pca_against_numpy_and_sklearn(split):
    x_train, x_test = split
    recon = np.asarray(dl.fit_pca(x_train, x_test, 2))
    train = x_train.astype(np.float64)
    mean = train.mean(axis=0)
    _, _, vt = np.linalg.svd(train - mean, full_matrices=False)
    expected = (x_test - mean) @ vt[:2].T @ vt[:2] + mean
    np.testing.assert_allclose(recon, expected, atol=1e-4)
    sklearn = pytest.importorskip("sklearn.decomposition")
    pca = sklearn.PCA(2).fit(train)
    np.testing.assert_allclose(recon, pca.inverse_transform(pca.transform(x_test)), atol=1e-4)
    # All components reconstruct the test data up to the training span: here exactly
    # (dim 12 < 40 training rows, so the span is everything).
    full = np.asarray(dl.fit_pca(x_train, x_test, 12))
    np.testing.assert_allclose(full, x_test, atol=1e-4)


def test_nmf_against_sklearn(split):
    decomposition = pytest.importorskip("sklearn.decomposition")
    x_train, x_test = split
    recon = np.asarray(dl.fit_nmf(x_train, x_test, 3, seed=0))
    nmf = decomposition.NMF(3, init="nndsvda", max_iter=2000, random_state=0)
    nmf.fit(x_train.astype(np.float64) + 1.0)
    expected = nmf.transform(x_test.astype(np.float64) + 1.0) @ nmf.components_ - 1.0
    np.testing.assert_allclose(recon, expected, atol=1e-5)
    # The shift is undone: the error is far below the shift of 1 (measured 0.21).
    assert dl.rms_error(x_test, recon) < 0.4
    with pytest.raises(ValueError, match="non-negative"):
        dl.fit_nmf(x_train - 3.0, x_test, 2)


def test_vq_against_sklearn(split):
    cluster = pytest.importorskip("sklearn.cluster")
    x_train, x_test = split
    recon = np.asarray(dl.fit_vq(x_train, x_test, 5, seed=0))
    kmeans = cluster.KMeans(5, n_init=10, random_state=0).fit(x_train.astype(np.float64))
    centres = kmeans.cluster_centers_
    # Every test row goes to its nearest codebook vector (found by brute force here).
    distances = ((x_test[:, None, :] - centres[None]) ** 2).sum(-1)
    np.testing.assert_allclose(recon, centres[np.argmin(distances, axis=1)], atol=1e-5)
    with pytest.raises(ValueError, match="codebook_size must be at most 40"):
        dl.fit_vq(x_train, x_test, 41)


def test_baseline_curve_and_rms(split):
    x_train, x_test = split
    rows = dl.baseline_curve("pca", x_train, x_test, [1, 2, 3])
    assert [r["size"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["bits"] == dl.pca_bits(15, 12, r["size"]).total_bits
        assert r["rms"] == pytest.approx(
            np.sqrt(np.mean((x_test - np.asarray(r["reconstruction"])) ** 2)), rel=1e-5)
    rms = [r["rms"] for r in rows]
    assert rms == sorted(rms, reverse=True)  # nested PCA subspaces: error never grows
    assert dl.rms_error(np.ones((2, 2)), np.zeros((2, 2))) == pytest.approx(1.0)


def test_mcvq_decode_by_hand():
    g = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])  # D = 3, K = 2
    m = np.array([[[0.1, 0.9], [0.7, 0.3]]])  # N = 1, J = 2
    mu = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    # Pixel 0 -> VQ 0 state 1; pixel 1 -> VQ 1 state 0; pixel 2 -> VQ 0 state 1.
    expected = [[mu[0, 0, 1], mu[1, 1, 0], mu[2, 0, 1]]]
    np.testing.assert_allclose(np.asarray(dl.mcvq_decode(g, m, mu)), expected)
    # With one-hot g and m it equals the soft reconstruction of sec. 3.
    from inference.mcvq.em import reconstruct

    hard_g, hard_m = np.eye(2)[[0, 1, 0]], np.eye(2)[[[1, 0]]]
    np.testing.assert_allclose(np.asarray(reconstruct(hard_g, hard_m, mu)), expected)
    with pytest.raises(ValueError, match="must agree"):
        dl.mcvq_decode(g, m, mu[:, :, :1])


def test_bad_input(split):
    x_train, x_test = split
    with pytest.raises(ValueError, match="method must be one of"):
        dl.description_length("ica", 2, 10, 4)
    with pytest.raises(TypeError, match="pair"):
        dl.description_length("mcvq", 3, 10, 4)
    with pytest.raises(ValueError, match="num_states must be at least 1"):
        dl.mcvq_bits(10, 4, 2, 0)
    with pytest.raises(ValueError, match="bits_per_parameter must be positive"):
        dl.pca_bits(10, 4, 2, bits_per_parameter=0)
    with pytest.raises(TypeError, match="bits_per_coefficient must be a number"):
        dl.nmf_bits(10, 4, 2, bits_per_coefficient="8")
    with pytest.raises(ValueError, match="x_test must have 12 columns"):
        dl.fit_pca(x_train, x_test[:, :5], 2)
    with pytest.raises(ValueError, match="num_components must be at most 12"):
        dl.fit_pca(x_train, x_test, 13)
    bad = x_train.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="x_train contains 1 NaN"):
        dl.fit_pca(bad, x_test, 2)
    with pytest.raises(ValueError, match="x_hat must have the shape of x"):
        dl.rms_error(x_test, x_test[:3])
    with pytest.raises(ValueError, match="method must be one of"):
        dl.baseline_curve("mcvq", x_train, x_test, [1])
    with pytest.raises(ValueError, match="sizes must be at least 1"):
        dl.baseline_curve("pca", x_train, x_test, [0])
