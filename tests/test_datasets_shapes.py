"""The shapes generator of seed 004 sec. 5.1 (``ppl_models.datasets.shapes``)."""

import jax
import numpy as np
import pytest

from ppl_models.datasets import shapes


@pytest.fixture(scope="module")
def data():
    return shapes.generate(jax.random.key(0))


def test_sizes_and_values(data):
    assert data.x_train.shape == (100, 121) and data.x_test.shape == (629, 121)
    assert data.offsets_train.shape == (100, 3) and data.offsets_test.shape == (629, 3)
    for x in (data.x_train, data.x_test):
        assert set(np.unique(np.asarray(x)).tolist()) == {-1.0, 1.0}
    # Every image holds exactly the 8 + 9 + 5 shape pixels (the columns are disjoint).
    on = np.sum(np.asarray(data.x_test) > 0, axis=1)
    np.testing.assert_array_equal(on, 22)


def test_split_covers_every_configuration_once(data):
    codes = np.concatenate([data.offsets_train, data.offsets_test]) @ np.array([81, 9, 1])
    np.testing.assert_array_equal(np.sort(codes), np.arange(729))
    assert data.offsets_train.min() >= 0 and data.offsets_train.max() <= 8


def test_training_set_excludes_all_near_the_top(data):
    assert not shapes.is_near_top(data.offsets_train).any()
    near = shapes.is_near_top(data.offsets_test)
    assert near.sum() == 27
    # "Near the top" means every offset in {0, 1, 2}; one shape lower is not near the top.
    assert shapes.is_near_top([[2, 2, 2], [0, 0, 3]]).tolist() == [True, False]
    x, offsets = shapes.near_top_images()
    assert x.shape == (27, 121) and offsets[0].tolist() == [0, 0, 0]
    top = np.asarray(x[0]).reshape(11, 11)
    assert np.all(top[5:] == -1)  # everything within the top 3 rows (offset 0)
    assert np.all(top[:3].max(axis=0)[[0, 1, 2, 5, 8, 9, 10]] == 1)


def test_fixed_columns_and_vertical_offsets(data):
    images = np.asarray(data.x_test).reshape(-1, 11, 11)
    columns = {0: range(0, 3), 1: range(3, 8), 2: range(8, 11)}
    for shape, cols in columns.items():
        on_rows = images[:, :, list(cols)].max(axis=2) > 0  # (N, 11) rows the shape covers
        first = np.argmax(on_rows, axis=1)
        np.testing.assert_array_equal(first, data.offsets_test[:, shape])
        np.testing.assert_array_equal(on_rows.sum(axis=1), 3)  # 3 rows tall
    # The shape itself does not change with its offset: the box is a hollow square.
    box = images[0, data.offsets_test[0, 0]:data.offsets_test[0, 0] + 3, 0:3]
    np.testing.assert_array_equal(box > 0, [[1, 1, 1], [1, 0, 1], [1, 1, 1]])


def test_offsets_uniform_and_independent_over_all_configurations():
    offsets = shapes.all_offsets()
    for shape in range(3):
        np.testing.assert_array_equal(np.bincount(offsets[:, shape]), 81)
    pairs = offsets[:, 0] * 9 + offsets[:, 2]
    np.testing.assert_array_equal(np.bincount(pairs), 9)


def test_ownership_matches_the_images(data):
    owner = shapes.ownership()
    images = np.concatenate([np.asarray(data.x_train), np.asarray(data.x_test)])
    ever_on = images.max(axis=0) > 0
    np.testing.assert_array_equal(ever_on, owner >= 0)
    assert np.bincount(owner[owner >= 0]).tolist() == [33, 49, 29]
    # A pixel is +1 only where its owner's shape can be: each shape's pixels lie in its band.
    for shape, cols in enumerate((range(0, 3), range(3, 8), range(8, 11))):
        band = np.zeros((11, 11), bool)
        band[:, list(cols)] = True
        assert np.all(band.ravel()[owner == shape])


def test_purity():
    owner = shapes.ownership()
    perfect = np.eye(3)[np.maximum(owner, 0)][:, [2, 0, 1]]  # VQs permuted
    result = shapes.purity(perfect)
    assert result["purity"] == 1.0 and result["one_to_one"]
    assert result["labels"] == [2, 0, 1]
    # One VQ for everything: purity = the largest shape's share, 49 / 111.
    single = np.tile([1.0, 0.0, 0.0], (121, 1))
    result = shapes.purity(single)
    assert result["purity"] == pytest.approx(49 / 111) and not result["one_to_one"]
    assert result["labels"] == [1, -1, -1]
    # Moving the 33 box pixels to the triangle's VQ costs exactly 33 / 111.
    merged = np.eye(3)[np.where(owner == 0, 1, np.maximum(owner, 0))]
    assert shapes.purity(merged)["purity"] == pytest.approx(1 - 33 / 111)


def test_determinism_by_key():
    first = shapes.generate(jax.random.key(3))
    again = shapes.generate(jax.random.key(3))
    other = shapes.generate(jax.random.key(4))
    np.testing.assert_array_equal(first.offsets_train, again.offsets_train)
    np.testing.assert_array_equal(np.asarray(first.x_train), np.asarray(again.x_train))
    assert not np.array_equal(first.offsets_train, other.offsets_train)
    # The order of training images is the random draw, not lexicographic.
    codes = first.offsets_train @ np.array([81, 9, 1])
    assert not np.all(np.diff(codes) > 0)
    small = shapes.generate(jax.random.key(3), num_train=10)
    assert small.x_train.shape == (10, 121) and small.x_test.shape == (719, 121)


def test_render_by_hand():
    image = np.asarray(shapes.render(np.array([[8, 0, 4]]))).reshape(11, 11)
    expected = -np.ones((11, 11))
    expected[8:11, 0:3] = 1
    expected[9, 1] = -1
    expected[0, 5] = 1
    expected[1, 4:7] = 1
    expected[2, 3:8] = 1
    expected[4:7, 9] = 1
    expected[5, 8:11] = 1
    np.testing.assert_array_equal(image, expected)


def test_bad_input():
    with pytest.raises(ValueError, match="num_train must be at most 702"):
        shapes.generate(jax.random.key(0), num_train=703)
    with pytest.raises(ValueError, match="num_train must be at least 1"):
        shapes.generate(jax.random.key(0), num_train=0)
    with pytest.raises(TypeError, match="num_train must be an integer"):
        shapes.generate(jax.random.key(0), num_train=10.0)
    with pytest.raises(ValueError, match=r"offsets must lie in 0..8"):
        shapes.render([[0, 9, 0]])
    with pytest.raises(ValueError, match=r"shape \(num_examples, 3\)"):
        shapes.render([[0, 1]])
    with pytest.raises(TypeError, match="integer array"):
        shapes.render([[0.0, 1.0, 2.0]])
    with pytest.raises(ValueError, match=r"g must have shape \(121, K\)"):
        shapes.purity(np.ones((120, 3)) / 3)
    with pytest.raises(ValueError, match="NaN"):
        shapes.purity(np.full((121, 3), np.nan))
