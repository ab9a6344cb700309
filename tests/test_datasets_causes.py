"""The K-cause shapes generator (``ppl_models.datasets.causes``; seed 004 sec. 5.1, slides)."""

import itertools

import jax
import numpy as np
import pytest

from ppl_models.datasets import causes, shapes


def _all_configurations(num_causes, num_positions):
    return np.array(list(itertools.product(range(num_positions), repeat=num_causes)), np.int32)


def test_library_templates_distinct_and_three_rows():
    planes = causes.templates()
    assert len(planes) == len(causes.LIBRARY) >= 5
    flat = set()
    for name, plane in zip(causes.LIBRARY, planes, strict=True):
        assert plane.dtype == bool and plane.shape[0] == 3, name
        assert plane.sum() >= 4, name  # several "on" pixels
        assert plane[0].any() and plane[-1].any(), name  # really 3 rows tall
        assert plane.any(axis=0).all(), name  # no empty column: the width is the shape's
        flat.add((plane.shape, plane.tobytes()))
    assert len(flat) == len(planes)  # all distinct
    # The paper's three, cut out of shapes.templates().
    paper = shapes.templates()
    np.testing.assert_array_equal(np.concatenate(planes[:3], axis=1), paper.any(axis=0))


@pytest.mark.parametrize("num_causes, num_positions, overlap, size", [
    (3, 9, 0, (11, 11)), (2, 4, 2, (6, 6)), (4, 6, 1, (8, 11)), (5, 3, 0, (5, 17)),
    (5, 7, 1, (9, 13)), (1, 1, 0, (3, 3))])
def test_shapes_dtypes_sizes(num_causes, num_positions, overlap, size):
    data = causes.generate(jax.random.key(1), 20, num_causes=num_causes,
                           num_positions=num_positions, overlap=overlap, num_test=7)
    dim = size[0] * size[1]
    assert (data.height, data.width) == size == causes.image_size(num_causes, num_positions,
                                                                  overlap)
    assert data.x_train.shape == (20, dim) and data.x_test.shape == (7, dim)
    assert data.x_train.dtype == np.float32 and data.x_test.dtype == np.float32
    assert data.offsets_train.shape == (20, num_causes) and data.offsets_test.shape == (7,
                                                                                       num_causes)
    assert data.offsets_train.dtype == np.int32
    assert data.offsets_train.min() >= 0 and data.offsets_train.max() < num_positions
    assert data.owner.shape == data.shared.shape == (dim,) and data.reach.shape == (dim,
                                                                                      num_causes)
    assert data.names == tuple(causes.LIBRARY)[:num_causes]
    assert set(np.unique(np.asarray(data.x_train)).tolist()) <= {-1.0, 1.0}


def test_default_reproduces_the_papers_images():
    offsets = shapes.all_offsets()  # all 729 configurations
    np.testing.assert_array_equal(np.asarray(causes.render(offsets)),
                                  np.asarray(shapes.render(offsets)))
    data = causes.generate(jax.random.key(3), 50, num_test=10)
    np.testing.assert_array_equal(np.asarray(data.x_train),
                                  np.asarray(shapes.render(data.offsets_train)))
    np.testing.assert_array_equal(np.asarray(data.x_test),
                                  np.asarray(shapes.render(data.offsets_test)))
    np.testing.assert_array_equal(data.owner, shapes.ownership())
    assert not data.shared.any()


@pytest.mark.parametrize("num_causes, num_positions, overlap", [
    (2, 3, 0), (2, 3, 2), (3, 4, 1), (3, 3, 2), (4, 3, 1)])
@pytest.mark.parametrize("combine", causes.COMBINE)
def test_every_configuration_gives_a_distinct_image(num_causes, num_positions, overlap,
                                                    combine):
    offsets = _all_configurations(num_causes, num_positions)
    x = np.asarray(causes.render(offsets, num_positions=num_positions, overlap=overlap,
                                 combine=combine))
    assert np.unique(x, axis=0).shape[0] == num_positions**num_causes


def test_number_of_distinct_images_drawn():
    # 2 causes x 3 positions: 9 configurations; 400 draws with replacement hit all of them
    # (the chance to miss one is 9 (8/9)^400 < 1e-19), and no others.
    data = causes.generate(jax.random.key(4), 400, num_causes=2, num_positions=3, num_test=0)
    assert np.unique(np.asarray(data.x_train), axis=0).shape[0] == 9
    assert np.unique(data.offsets_train, axis=0).shape[0] == 9
    assert data.x_test.shape == (0, data.height * data.width)


def test_shapes_sit_where_their_offsets_say():
    num_causes, num_positions, overlap = 4, 6, 1
    data = causes.generate(jax.random.key(5), 60, num_causes=num_causes,
                           num_positions=num_positions, overlap=overlap)
    images = np.asarray(data.x_train).reshape(-1, data.height, data.width)
    starts = causes.column_starts(num_causes, overlap)
    for n in range(images.shape[0]):
        covered = np.zeros((data.height, data.width), bool)
        for k, plane in enumerate(causes.templates(num_causes)):
            row, col = data.offsets_train[n, k], starts[k]
            covered[row:row + 3, col:col + plane.shape[1]] |= plane
        np.testing.assert_array_equal(images[n] > 0, covered)  # union of the placed shapes


def test_mean_combination():
    kwargs = dict(num_positions=9, overlap=2)
    offsets = _all_configurations(3, 9)[::7]
    union = np.asarray(causes.render(offsets, **kwargs))
    mean = np.asarray(causes.render(offsets, combine="mean", **kwargs))
    own = causes.ownership(3, **kwargs)
    np.testing.assert_array_equal(union[:, ~own.shared], mean[:, ~own.shared])
    shared = mean[:, own.shared]
    assert set(np.unique(shared).tolist()) == {-1.0, 0.0, 1.0}
    # A shared pixel is +1 in "mean" only where it is +1 in "union" (both shapes cover it).
    assert np.all(union[:, own.shared][shared == 1.0] == 1.0)
    assert np.all(union[:, own.shared][shared == 0.0] == 1.0)
    assert np.all(union[:, own.shared][shared == -1.0] == -1.0)


def test_ownership_counts_and_reach():
    own = causes.ownership()
    assert np.bincount(own.owner[own.owner >= 0]).tolist() == [33, 49, 29]
    assert int((own.owner == -1).sum()) == 10
    own = causes.ownership(3, 9, overlap=1)
    # Box's right column (reached in rows 0-10) over the triangle's left one (its base
    # corner: rows 2-10): 9 pixels; triangle's right column (rows 2-10) over the cross's
    # left arm (rows 1-9): 8 pixels.
    assert int(own.shared.sum()) == 17
    assert np.bincount(own.owner[own.owner >= 0]).tolist() == [24, 32, 21]
    assert np.all(own.owner[own.shared] == causes.SHARED)
    np.testing.assert_array_equal(own.shared, own.reach.sum(axis=1) == 2)
    np.testing.assert_array_equal(own.reach.sum(axis=0), [33, 49, 29])
    shared = own.shared.reshape(11, 9)
    assert shared.any(axis=0).tolist() == [False, False, True, False, False, False, True,
                                           False, False]
    # Ownership is what the images show: pixels ever on are the reached ones.
    for kwargs in (dict(num_causes=3, num_positions=9, overlap=1),
                   dict(num_causes=4, num_positions=4, overlap=1),
                   dict(num_causes=2, num_positions=5, overlap=2)):
        x = np.asarray(causes.render(_all_configurations(kwargs["num_causes"],
                                                         kwargs["num_positions"]),
                                     num_positions=kwargs["num_positions"],
                                     overlap=kwargs["overlap"]))
        own = causes.ownership(**kwargs)
        np.testing.assert_array_equal(x.max(axis=0) > 0, own.reach.any(axis=1))
        np.testing.assert_array_equal(x.min(axis=0) < 0, np.ones(x.shape[1], bool))


def test_shared_pixels_exist_iff_overlap():
    for num_causes in range(1, len(causes.LIBRARY) + 1):
        for overlap in range(causes.max_overlap(num_causes) + 1):
            for num_positions in (1, 4):
                own = causes.ownership(num_causes, num_positions, overlap)
                assert own.shared.any() == (overlap > 0), (num_causes, overlap, num_positions)
                assert own.reach.sum(axis=1).max() <= 2  # never three causes on a pixel
                # Every cause keeps pixels of its own.
                assert set(own.owner[own.owner >= 0].tolist()) == set(range(num_causes))


def test_offsets_uniform_and_independent():
    data = causes.generate(jax.random.key(6), 9000, num_test=0)
    offsets = data.offsets_train
    # Binomial(9000, 1/9): sd 29.8 per count; 5 standard errors = 149.
    for k in range(3):
        assert np.all(np.abs(np.bincount(offsets[:, k], minlength=9) - 1000) < 149)
    # Pairs: Binomial(9000, 1/81), sd 10.5; 5 standard errors = 53.
    pairs = np.bincount(offsets[:, 0] * 9 + offsets[:, 2], minlength=81)
    assert np.all(np.abs(pairs - 9000 / 81) < 53)


def test_noise():
    clean = causes.generate(jax.random.key(7), 400, num_causes=4, num_positions=5)
    noisy = causes.generate(jax.random.key(7), 400, num_causes=4, num_positions=5,
                            noise_scale=0.5)
    np.testing.assert_array_equal(clean.offsets_train, noisy.offsets_train)
    residual = np.asarray(noisy.x_train - clean.x_train)
    # 400 x 48 = 19200 draws: the sd of the sample sd is 0.5 / sqrt(2 * 19200) = 0.0026.
    assert abs(residual.std() - 0.5) < 0.013 and abs(residual.mean()) < 0.02
    assert noisy.x_train.dtype == np.float32


def test_deterministic_by_key():
    kwargs = dict(num_causes=4, num_positions=5, overlap=1, noise_scale=0.1)
    first = causes.generate(jax.random.key(8), 30, **kwargs)
    again = causes.generate(jax.random.key(8), 30, **kwargs)
    other = causes.generate(jax.random.key(9), 30, **kwargs)
    np.testing.assert_array_equal(np.asarray(first.x_train), np.asarray(again.x_train))
    np.testing.assert_array_equal(first.offsets_test, again.offsets_test)
    assert not np.array_equal(first.offsets_train, other.offsets_train)
    # Training and test draws are different.
    assert not np.array_equal(first.offsets_train, first.offsets_test)


def test_purity_matches_shapes_purity_and_scores_shared():
    rng = np.random.default_rng(0)
    g = rng.dirichlet(np.ones(3), size=121)
    ours, theirs = causes.purity(g, causes.ownership().owner), shapes.purity(g)
    for key in ("purity", "labels", "one_to_one", "counts", "mean_max_g"):
        assert ours[key] == theirs[key], key
    assert ours["shared_vq"] == []
    own = causes.ownership(4, 5, overlap=1)
    perfect = np.eye(4)[np.maximum(own.owner, 0)][:, [1, 3, 0, 2]]  # VQs permuted
    result = causes.purity(perfect, own.owner)
    assert result["purity"] == 1.0 and result["one_to_one"]
    assert result["labels"] == [1, 3, 0, 2]
    assert len(result["shared_label"]) == int(own.shared.sum())
    merged = np.eye(4)[np.minimum(np.maximum(own.owner, 0), 2)]  # causes 2 and 3 in one VQ
    assert causes.purity(merged, own.owner)["purity"] < 1.0
    assert not causes.purity(merged, own.owner)["one_to_one"]


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(num_causes=0), ValueError, "num_causes"),
    (dict(num_causes=8), ValueError, "num_causes must be at most 7"),
    (dict(num_causes=2.0), TypeError, "num_causes"),
    (dict(num_positions=0), ValueError, "num_positions"),
    (dict(overlap=-1), ValueError, "overlap must lie in 0..2"),
    (dict(overlap=3), ValueError, "overlap must lie in 0..2"),
    (dict(num_causes=4, overlap=2), ValueError, "overlap must lie in 0..1"),
    (dict(num_causes=1, overlap=1), ValueError, "overlap must lie in 0..0"),
    (dict(overlap=1.0), TypeError, "overlap"),
    (dict(combine="max"), ValueError, "combine"),
    (dict(noise_scale=-0.1), ValueError, "noise_scale"),
    (dict(noise_scale=float("nan")), ValueError, "noise_scale"),
    (dict(noise_scale="0.1"), TypeError, "noise_scale"),
    (dict(num_test=-1), ValueError, "num_test"),
    (dict(num_test=2.5), TypeError, "num_test"),
])
def test_bad_generate_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        causes.generate(jax.random.key(0), 10, **kwargs)


def test_bad_inputs_elsewhere():
    with pytest.raises(ValueError, match="num_examples"):
        causes.generate(jax.random.key(0), 0)
    with pytest.raises(TypeError, match="rng_key"):
        causes.generate(None, 10)
    with pytest.raises(ValueError, match="offsets must lie in 0..3"):
        causes.render([[0, 4]], num_positions=4)
    with pytest.raises(TypeError, match="offsets must be an integer"):
        causes.render([[0.0, 1.0]])
    with pytest.raises(ValueError, match="offsets must have shape"):
        causes.render([0, 1, 2])
    with pytest.raises(ValueError, match="g must have shape"):
        causes.purity(np.ones((5, 3)), causes.ownership().owner)
    with pytest.raises(ValueError, match="NaN"):
        causes.purity(np.full((121, 3), np.nan), causes.ownership().owner)
    with pytest.raises(ValueError, match="owner marks no pixel"):
        causes.purity(np.ones((3, 2)), np.array([-1, -2, -1]))
