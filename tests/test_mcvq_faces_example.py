"""The faces experiment of seed 004 sec. 5.1 (``examples/mcvq_faces.py``) and its data loader.

The loader tests are fast; the example runs once with ``--quick`` (2 starts x 40
iterations; about 20 s of CPU: slow) into a temporary folder.
"""

import json

import jax
import numpy as np
import pytest

pytest.importorskip("skimage")

from ppl_models.datasets import faces  # noqa: E402


@pytest.fixture(scope="module")
def example(load_example):
    return load_example("mcvq_faces")


@pytest.fixture(scope="module")
def quick_run(example, run_example, tmp_path_factory):
    out = tmp_path_factory.mktemp("mcvq_faces")
    return out, run_example(example, ["--quick", "--output-dir", str(out), "--seed", "0"])


def test_face_images_are_the_faces():
    images = faces.face_images()
    assert images.shape == (100, 625) and images.dtype == np.float32
    assert images.min() >= -1.0 and images.max() <= 1.0
    assert images.min() < -0.9 and images.max() > 0.9  # the full range is used
    # The first 100 of lfw_subset are faces, the rest background crops (scikit-image's
    # documentation). A face correlates with the mean face, a background crop does not:
    # measured medians 0.60 and -0.10 (standardised images).
    from skimage import data

    everything = np.asarray(data.lfw_subset(), np.float64).reshape(200, -1)
    z = (everything - everything.mean(1, keepdims=True)) / everything.std(1, keepdims=True)
    mean_face = z[:100].mean(axis=0)
    score = z @ mean_face / (np.linalg.norm(mean_face) * np.sqrt(625))
    assert np.median(score[:100]) > 0.5 and np.median(score[100:]) < 0.1
    # Our images are exactly the first 100, scaled 2 v - 1.
    np.testing.assert_allclose(images, 2 * everything[:100] - 1, atol=1e-6)


def test_split():
    data = faces.load_faces(jax.random.key(0))
    assert data.x_train.shape == (74, 625) and data.x_test.shape == (26, 625)
    assert sorted(np.concatenate([data.index_train, data.index_test]).tolist()) == list(
        range(100))
    images = faces.face_images()
    np.testing.assert_array_equal(np.asarray(data.x_test), images[data.index_test])
    again = faces.load_faces(jax.random.key(0))
    np.testing.assert_array_equal(again.index_test, data.index_test)
    other = faces.load_faces(jax.random.key(1), num_train=50)
    assert other.x_test.shape == (50, 625)
    assert not np.array_equal(faces.load_faces(jax.random.key(1)).index_test, data.index_test)


def test_bad_input(example):
    with pytest.raises(ValueError, match="num_train must be at most 99"):
        faces.load_faces(jax.random.key(0), num_train=100)
    with pytest.raises(TypeError, match="num_train must be an integer"):
        faces.load_faces(jax.random.key(0), num_train=0.5)
    with pytest.raises(SystemExit):
        example.main(["--iterations", "0"])


@pytest.mark.slow
def test_quick_run(quick_run):
    out, results = quick_run
    for name in ("mcvq_faces.png", "mcvq_faces.json"):
        assert (out / name).stat().st_size > 1000, name
    record = json.loads((out / "mcvq_faces.json").read_text())
    assert record["data"]["train"] == [74, 625] and record["data"]["test"] == [26, 625]
    assert record["paper_rms"] == {"pca": 0.12, "nmf": 0.2, "mcvq": 0.23, "vq": 0.28}
    mcvq = results["mcvq"]
    assert sum(mcvq["pixels_per_vq"]) == 625
    # Every VQ keeps pixels (no VQ pruned away).
    assert min(mcvq["pixels_per_vq"]) > 0
    # Every model beats predicting the training mean face for every test image (0.35);
    # measured (quick) MCVQ 0.30, PCA 0.22, NMF 0.22, VQ 0.30.
    assert results["mean_face_rms"] == pytest.approx(0.347, abs=0.01)
    for method, value in results["rms"].items():
        assert 0.1 < value < 0.95 * results["mean_face_rms"], method
    for row in results["matched"].values():
        assert 0.8 < row["bits_ratio"] < 1.25
    printed = results["printed"]
    assert "NOT the paper's CBCL set" in printed and "compare orderings, not values" in printed
    assert "0.12" in printed and "0.28" in printed
