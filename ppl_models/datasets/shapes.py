"""The shapes images of the MCVQ paper (Ross and Zemel 2003, sec. 5.1, Fig. 2).

Every image is 11 x 11 pixels and holds three shapes, each 3 rows tall, at
fixed horizontal positions (columns) and independent, uniform vertical
positions; background pixels are -1 and shape pixels +1, so values lie in
[-1, 1] as the paper's (sec. 5.1: "pixel values ranging from -1 to 1")::

    columns 0-2   box       (hollow 3 x 3 square, 8 pixels)
    columns 3-7   triangle  (filled, apex 1 pixel, then 3, then a base of 5: 9 pixels)
    columns 8-10  cross     (3 x 3 plus sign, 5 pixels)

A shape 3 rows tall has 11 - 3 + 1 = 9 vertical offsets (the row of its top),
so there are 9^3 = 729 distinct images, and 729 = 100 + 629: the paper's 100
training and 629 test images (sec. 5.1) are exactly all configurations,
split in two. We take that as the set-up: :func:`generate` draws the 100
training configurations at random, without repetition, among those that are
*not* "all three near the top", and the test set is every remaining
configuration (the excluded ones included), each once.

**Near the top** (our definition; the paper gives none): a shape is near the
top when its offset is 0, 1 or 2 (``NEAR_TOP = 3``), i.e. the shape lies
within the top 5 rows; a configuration is "all near the top" when all three
shapes are. That excludes 3^3 = 27 of the 729 configurations (3.7%) from
training; all 27 are in the test set, and :func:`near_top_images` returns them
(the one with all offsets 0 first, the case of Fig. 2c).

**Ownership** (:func:`ownership`): the shape that can cover each pixel (the
columns are disjoint, so at most one can), or -1 for the 10 pixels no position
of any shape reaches (they are -1 in every image). :func:`purity` scores a
learnt g (D, K) against it: how well the VQs partition the pixels along the
shapes (sec. 5.1: "the specialization of each VQ to one of the shapes").

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003, sec. 5.1 and Fig. 2.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ppl_models.validation import check_positive_int, check_rng_key

__all__ = ["HEIGHT", "WIDTH", "SHAPE_NAMES", "NUM_OFFSETS", "NEAR_TOP", "ShapesData",
           "templates", "render", "all_offsets", "is_near_top", "generate", "near_top_images",
           "ownership", "purity"]

#: Image height and width (sec. 5.1: 11 x 11).
HEIGHT = WIDTH = 11
#: The three shapes, left to right.
SHAPE_NAMES = ("box", "triangle", "cross")
#: Rows of every shape.
SHAPE_ROWS = 3
#: Vertical offsets of a shape (row of its top): 0 .. HEIGHT - SHAPE_ROWS.
NUM_OFFSETS = HEIGHT - SHAPE_ROWS + 1
#: A shape is "near the top" when its offset is below this (our definition, module docstring).
NEAR_TOP = 3
#: Number of training images with the default split (sec. 5.1).
NUM_TRAIN = 100


def templates() -> np.ndarray:
    """The three shapes at offset 0: bool (3, SHAPE_ROWS, WIDTH), one plane per shape.

    >>> t = templates()
    >>> t.shape, t.sum(axis=(1, 2)).tolist()
    ((3, 3, 11), [8, 9, 5])
    """
    box = np.zeros((SHAPE_ROWS, WIDTH), bool)
    box[:, 0:3] = True
    box[1, 1] = False
    triangle = np.zeros((SHAPE_ROWS, WIDTH), bool)
    triangle[0, 5] = True
    triangle[1, 4:7] = True
    triangle[2, 3:8] = True
    cross = np.zeros((SHAPE_ROWS, WIDTH), bool)
    cross[:, 9] = True
    cross[1, 8:11] = True
    return np.stack([box, triangle, cross])


def _render_one(offsets, planes):
    rows = jnp.arange(HEIGHT)[None, :] - offsets[:, None]  # (3, HEIGHT): row within shape
    inside = (rows >= 0) & (rows < SHAPE_ROWS)
    covered = jnp.take_along_axis(planes, jnp.clip(rows, 0, SHAPE_ROWS - 1)[:, :, None], axis=1)
    covered = jnp.any(covered & inside[:, :, None], axis=0)  # (HEIGHT, WIDTH)
    return jnp.where(covered, 1.0, -1.0).reshape(-1)


@jax.jit
def _render(offsets):
    return jax.vmap(_render_one, in_axes=(0, None))(offsets, jnp.asarray(templates()))


def _check_offsets(offsets, name="offsets"):
    arr = np.asarray(offsets)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must be an integer array; got dtype {arr.dtype}")
    if arr.ndim != 2 or arr.shape[1] != len(SHAPE_NAMES):
        raise ValueError(f"{name} must have shape (num_examples, 3); got shape {arr.shape}")
    if arr.size and (arr.min() < 0 or arr.max() >= NUM_OFFSETS):
        raise ValueError(f"{name} must lie in 0..{NUM_OFFSETS - 1}; got values from "
                         f"{arr.min()} to {arr.max()}")
    return arr.astype(np.int32)


def render(offsets):
    """Images of the given configurations, float32 (num_examples, 121) in {-1, +1}.

    Parameters
    ----------
    offsets : int array (num_examples, 3)
        Vertical offset (row of the top, 0..8) of the box, triangle and cross.

    Returns
    -------
    array (num_examples, HEIGHT * WIDTH)
        Row-major pixels: +1 where a shape covers the pixel, -1 elsewhere.

    >>> image = render([[0, 8, 4]]).reshape(11, 11)
    >>> image[:3, :3].tolist() == [[1, 1, 1], [1, -1, 1], [1, 1, 1]]
    True
    >>> float(image[10, 3]), float(image[5, 9]), float(image[0, 5])
    (1.0, 1.0, -1.0)
    """
    return _render(jnp.asarray(_check_offsets(offsets)))


def all_offsets() -> np.ndarray:
    """All 729 configurations, int32 (729, 3), in lexicographic order (box slowest).

    Configuration i has offsets (i // 81, (i // 9) % 9, i % 9).
    """
    index = np.arange(NUM_OFFSETS**3)
    return np.stack([index // NUM_OFFSETS**2, (index // NUM_OFFSETS) % NUM_OFFSETS,
                     index % NUM_OFFSETS], axis=1).astype(np.int32)


def is_near_top(offsets):
    """Bool (num_examples,): all three shapes near the top (every offset < NEAR_TOP)."""
    return np.all(_check_offsets(offsets) < NEAR_TOP, axis=1)


class ShapesData(NamedTuple):
    """A training / test split of the shapes images.

    Attributes
    ----------
    x_train : float32 array (num_train, 121)
    x_test : float32 array (729 - num_train, 121)
    offsets_train, offsets_test : int32 arrays (num_examples, 3)
        The configuration of every image (box, triangle, cross offsets).
    """

    x_train: jax.Array
    x_test: jax.Array
    offsets_train: np.ndarray
    offsets_test: np.ndarray


@functools.partial(jax.jit, static_argnums=1)
def _choose(rng_key, num_train):
    """Configuration indices: the training ones in the order drawn, then a train mask."""
    allowed = ~is_near_top(all_offsets())
    scores = jax.random.uniform(rng_key, (allowed.size,))
    scores = jnp.where(jnp.asarray(allowed), scores, 2.0)  # excluded ones sort last
    chosen = jnp.argsort(scores)[:num_train]
    return chosen, jnp.zeros(allowed.size, bool).at[chosen].set(True)


def generate(rng_key, num_train: int = NUM_TRAIN) -> ShapesData:
    """The paper's split: ``num_train`` training configurations, the rest as the test set.

    Training configurations are drawn uniformly without repetition among the
    702 that are not "all near the top" (module docstring); the test set is
    every other configuration (729 - ``num_train``; 629 by default, the paper's
    number), in lexicographic order, the 27 near-the-top ones included. The
    training images come in the random order they were drawn in.

    Parameters
    ----------
    rng_key : jax.random key
    num_train : int
        1 .. 702 (default 100, sec. 5.1).

    Returns
    -------
    ShapesData

    >>> data = generate(jax.random.key(0))
    >>> data.x_train.shape, data.x_test.shape
    ((100, 121), (629, 121))
    >>> bool(is_near_top(data.offsets_train).any()), int(is_near_top(data.offsets_test).sum())
    (False, 27)
    """
    num_allowed = int(np.sum(~is_near_top(all_offsets())))
    num_train = check_positive_int(num_train, "num_train", maximum=num_allowed,
                                   why=" (configurations not all near the top)")
    check_rng_key(rng_key)
    chosen, in_train = _choose(rng_key, num_train)
    offsets = all_offsets()
    train, test = offsets[np.asarray(chosen)], offsets[~np.asarray(in_train)]
    return ShapesData(render(train), render(test), train, test)


def near_top_images():
    """The 27 "all near the top" configurations and their images (Fig. 2c's case).

    Returns
    -------
    x : float32 array (27, 121)
    offsets : int32 array (27, 3)
        Lexicographic order; row 0 has every shape at offset 0 (the top rows).
    """
    offsets = all_offsets()
    offsets = offsets[is_near_top(offsets)]
    return render(offsets), offsets


def ownership() -> np.ndarray:
    """The shape that can cover each pixel: int32 (121,), 0 box, 1 triangle, 2 cross, -1 none.

    A pixel belongs to a shape when some offset of the shape covers it. The
    shapes' columns are disjoint, so no pixel belongs to two. Ten pixels are
    never covered (always -1): rows 0-1 of columns 3 and 7 and row 0 of columns
    4 and 6 (above the triangle's base and middle row at offset 0), and rows 0
    and 10 of columns 8 and 10 (beyond the cross's arms).

    >>> owner = ownership().reshape(11, 11)
    >>> owner[0].tolist()
    [0, 0, 0, -1, -1, 1, -1, -1, -1, 2, -1]
    >>> int((owner == -1).sum())
    10
    """
    planes = templates()
    reach = np.zeros((len(SHAPE_NAMES), HEIGHT, WIDTH), bool)
    for offset in range(NUM_OFFSETS):
        reach[:, offset:offset + SHAPE_ROWS] |= planes
    owner = np.where(reach.any(axis=0), np.argmax(reach, axis=0), -1)
    return owner.reshape(-1).astype(np.int32)


def purity(g, owner=None):
    """How well a learnt g partitions the pixels along the shapes.

    Every owned pixel (``owner >= 0``) goes to its VQ argmax_k g_dk; every VQ
    is labelled with the shape that owns most of its pixels; purity is the
    fraction of owned pixels whose VQ's label is their own shape (cluster
    purity). It is 1 exactly when no VQ mixes pixels of two shapes; with
    K = 3 the labels are then also a one-to-one match of VQs and shapes
    whenever every VQ got pixels.

    Parameters
    ----------
    g : array (121, K)
        Q(r_d = k) of a fit (rows sum to 1).
    owner : int array (121,), optional
        Default :func:`ownership`.

    Returns
    -------
    dict
        ``purity`` (float in [0, 1]), ``labels`` (list of K shape indices, -1
        for a VQ with no owned pixel), ``one_to_one`` (bool: every shape is the
        label of exactly one VQ), ``counts`` (K x 3 list: owned pixels of each
        shape per VQ), ``mean_max_g`` (mean over owned pixels of max_k g_dk,
        how hard the partition is).

    >>> owner = ownership()
    >>> perfect = np.eye(3)[np.maximum(owner, 0)]
    >>> result = purity(perfect)
    >>> result["purity"], result["one_to_one"]
    (1.0, True)
    """
    owner = ownership() if owner is None else np.asarray(owner)
    g = np.asarray(g, dtype=np.float64)
    if g.ndim != 2 or g.shape[0] != owner.shape[0]:
        raise ValueError(f"g must have shape ({owner.shape[0]}, K); got shape {g.shape}")
    if not np.all(np.isfinite(g)):
        raise ValueError("g contains NaN or infinite values")
    owned = owner >= 0
    if not owned.any():
        raise ValueError("owner marks no pixel as owned (all -1)")
    vq = np.argmax(g[owned], axis=1)
    counts = np.zeros((g.shape[1], len(SHAPE_NAMES)), int)
    np.add.at(counts, (vq, owner[owned]), 1)
    labels = np.where(counts.sum(axis=1) > 0, np.argmax(counts, axis=1), -1)
    used = labels[labels >= 0]
    return {
        "purity": float(counts.max(axis=1).sum() / owned.sum()),
        "labels": labels.tolist(),
        "one_to_one": bool(used.size == len(SHAPE_NAMES)
                           and np.unique(used).size == len(SHAPE_NAMES)),
        "counts": counts.tolist(),
        "mean_max_g": float(np.mean(np.max(g[owned], axis=1))),
    }
