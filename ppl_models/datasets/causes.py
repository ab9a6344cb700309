"""Shapes images with K causes, J positions and optionally overlapping causes.

A generalisation of the MCVQ paper's shapes data (Ross and Zemel (2003), sec. 5.1,
Fig. 2; ``ppl_models.datasets.shapes``) for model selection over the number of causes
and states and for the slides' "Overlapping Causes" experiment
(Ross and Zemel (2002): "with current implementation, g_ik's always binary ... would like
non-binary g's in some cases, e.g. at object borders ... Results: still
binary!").

**Causes.** Cause k is one shape template, 3 rows tall (``SHAPE_ROWS``), from
:data:`LIBRARY` (the first ``num_causes`` of it, left to right)::

    box       ###    triangle  ..#..    cross  .#.    ell  #..
              #.#              .###.           ###         #..
              ###              #####           .#.         ###

    tee       ###    diamond   .#.      vee    #...#
              .#.              #.#             .#.#.
              .#.              .#.             ..#..

Box, triangle and cross are cut out of ``shapes.templates()`` (the paper's).
Each shape sits in its own band of columns, at one of ``num_positions`` (J)
vertical offsets (the row of its top), so the image is ``2 + num_positions``
rows tall. The offsets of an image are independent and uniform
(``generate`` draws them with replacement; there are J^K configurations).
Pixels are -1 (background) and +1 (shape), as the paper's ("pixel values
ranging from -1 to 1", sec. 5.1).

**Overlap.** ``overlap`` is the number of columns that each pair of
neighbouring shapes shares: shape k starts at column sum_{i<k} (w_i - overlap)
for template widths w_i. ``overlap = 0`` gives disjoint bands: with K = 3 and
J = 9 these are exactly the paper's 11 x 11 images (``shapes.render`` of the
same offsets; tested). Every shape keeps at least one column of its own and no
column is shared by three shapes (:func:`max_overlap`). A pixel is *shared*
when two causes can cover it (some offset of each does).

**Combining two causes on one pixel** (``combine``; our choice, the slides do
not say how their sample data was made):

* ``"union"`` (default): +1 if either shape covers the pixel (occlusion-like;
  it keeps the data binary);
* ``"mean"``: the mean of the +-1 values of the causes that can cover the
  pixel, so a shared pixel is -1 (neither covers it), 0 (one does) or +1
  (both do): an additive combination, which no single VQ can reproduce.

Outside shared pixels the two agree.

**Ownership** (:func:`ownership`): per pixel the cause that can cover it, -1 for
pixels no cause reaches (always -1 in the images) and ``SHARED`` (-2) for shared
pixels, with the (D, K) reach matrix. :func:`purity` scores a learnt g against
it like ``shapes.purity``, on the unshared pixels, and says which VQ took each
shared pixel.

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003, sec. 5.1 and Fig. 2.
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization" (presentation slides),
University of Toronto, 2002: "Overlapping Causes" and "Current directions" (model selection
over K and J).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ppl_models.datasets import shapes
from ppl_models.validation import MissingKeyError, check_positive_int

__all__ = ["LIBRARY", "SHAPE_ROWS", "SHARED", "COMBINE", "CausesData", "Ownership", "templates",
           "max_overlap", "column_starts", "image_size", "render", "generate", "ownership",
           "purity"]

#: Rows of every template (as the paper's shapes).
SHAPE_ROWS = shapes.SHAPE_ROWS
#: Owner code of a pixel that two causes can cover.
SHARED = -2
#: How a pixel covered by two shapes is combined (module docstring).
COMBINE = ("union", "mean")


def _art(*rows):
    return np.array([[c == "#" for c in row] for row in rows], bool)


def _paper_templates():
    """Box, triangle and cross of ``shapes.templates()``, each cut to its own columns."""
    planes = shapes.templates()
    cut = []
    for plane in planes:
        columns = np.flatnonzero(plane.any(axis=0))
        cut.append(plane[:, columns.min():columns.max() + 1])
    return dict(zip(shapes.SHAPE_NAMES, cut, strict=True))


#: The template library, in the order causes are taken: name -> bool (SHAPE_ROWS, width).
LIBRARY = {
    **_paper_templates(),
    "ell": _art("#..", "#..", "###"),
    "tee": _art("###", ".#.", ".#."),
    "diamond": _art(".#.", "#.#", ".#."),
    "vee": _art("#...#", ".#.#.", "..#.."),
}


class CausesData(NamedTuple):
    """Images of K causes at random vertical offsets (module docstring).

    Attributes
    ----------
    x_train : float32 array (num_examples, height * width)
    x_test : float32 array (num_test, height * width)
        Row-major pixels in [-1, 1] (+ noise).
    offsets_train : int32 array (num_examples, K)
    offsets_test : int32 array (num_test, K)
        The true states: the row of the top of every shape, 0..num_positions - 1.
    owner : int32 array (height * width,)
        The cause that can cover each pixel; -1 none, ``SHARED`` (-2) two.
    shared : bool array (height * width,)
        Pixels two causes can cover (``owner == SHARED``).
    reach : bool array (height * width, K)
        Which causes can cover each pixel.
    height, width : int
        Image size: height = 2 + num_positions.
    names : tuple of str (K,)
        Template of every cause, left to right.
    """

    x_train: jax.Array
    x_test: jax.Array
    offsets_train: np.ndarray
    offsets_test: np.ndarray
    owner: np.ndarray
    shared: np.ndarray
    reach: np.ndarray
    height: int
    width: int
    names: tuple


class Ownership(NamedTuple):
    """Ownership of the pixels (:func:`ownership`).

    Attributes
    ----------
    owner : int32 array (D,)
        k where only cause k can cover the pixel, -1 where none can, ``SHARED`` (-2)
        where two can.
    shared : bool array (D,)
        ``owner == SHARED``.
    reach : bool array (D, K)
        reach[d, k]: some offset of cause k covers pixel d.
    """

    owner: np.ndarray
    shared: np.ndarray
    reach: np.ndarray


def templates(num_causes: int = len(LIBRARY)) -> list[np.ndarray]:
    """The first ``num_causes`` templates of :data:`LIBRARY`, bool (SHAPE_ROWS, width) each.

    >>> [t.shape[1] for t in templates()]
    [3, 5, 3, 3, 3, 3, 5]
    >>> [int(t.sum()) for t in templates(3)]
    [8, 9, 5]
    """
    num_causes = _check_num_causes(num_causes)
    return [plane.copy() for plane in list(LIBRARY.values())[:num_causes]]


def _check_num_causes(num_causes):
    return check_positive_int(num_causes, "num_causes", maximum=len(LIBRARY),
                              why=f" (templates in the library: {', '.join(LIBRARY)})")


def max_overlap(num_causes: int) -> int:
    """The largest ``overlap`` for ``num_causes`` causes.

    Every shape keeps a column of its own and no column is shared by three:
    overlap <= w - 1 for the first and last shape, 2 overlap <= w - 1 for the
    others (w the template's width); 0 for one cause.

    >>> [max_overlap(k) for k in range(1, 8)]
    [0, 2, 2, 1, 1, 1, 1]
    """
    num_causes = _check_num_causes(num_causes)
    if num_causes == 1:
        return 0
    widths = [t.shape[1] for t in templates(num_causes)]
    ends = min(widths[0], widths[-1]) - 1
    inner = min(((w - 1) // 2 for w in widths[1:-1]), default=ends)
    return int(min(ends, inner))


def _check_overlap(overlap, num_causes):
    if isinstance(overlap, bool) or not isinstance(overlap, int | np.integer):
        raise TypeError(f"overlap must be an integer; got {overlap!r} ({type(overlap).__name__})")
    most = max_overlap(num_causes)
    if not 0 <= overlap <= most:
        raise ValueError(f"overlap must lie in 0..{most} for num_causes={num_causes} (every "
                         f"shape keeps a column of its own); got {overlap}")
    return int(overlap)


def column_starts(num_causes: int = 3, overlap: int = 0) -> np.ndarray:
    """First column of every shape, int (K,): sum of the previous widths minus ``overlap``.

    >>> column_starts(3).tolist(), column_starts(3, overlap=1).tolist()
    ([0, 3, 8], [0, 2, 6])
    """
    overlap = _check_overlap(overlap, _check_num_causes(num_causes))
    widths = np.array([t.shape[1] for t in templates(num_causes)])
    return np.concatenate([[0], np.cumsum(widths[:-1] - overlap)]).astype(int)


def image_size(num_causes: int = 3, num_positions: int = 9, overlap: int = 0) -> tuple[int, int]:
    """(height, width) of the images.

    >>> image_size(), image_size(3, 9, overlap=1), image_size(5, 4)
    ((11, 11), (11, 9), (6, 17))
    """
    num_positions = check_positive_int(num_positions, "num_positions")
    starts = column_starts(num_causes, overlap)
    width = int(starts[-1] + templates(num_causes)[-1].shape[1])
    return SHAPE_ROWS - 1 + num_positions, width


def _stamps(num_causes, num_positions, overlap):
    """bool (K, J, height, width): what cause k covers at offset j."""
    height, width = image_size(num_causes, num_positions, overlap)
    stamps = np.zeros((num_causes, num_positions, height, width), bool)
    for k, (start, plane) in enumerate(zip(column_starts(num_causes, overlap),
                                           templates(num_causes), strict=True)):
        for offset in range(num_positions):
            stamps[k, offset, offset:offset + SHAPE_ROWS, start:start + plane.shape[1]] = plane
    return stamps


def _check_combine(combine):
    if combine not in COMBINE:
        raise ValueError(f"combine must be one of {COMBINE}; got {combine!r}")
    return combine


def _check_offsets(offsets, num_positions, name="offsets"):
    arr = np.asarray(offsets)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must be an integer array; got dtype {arr.dtype}")
    if arr.ndim != 2 or not 1 <= arr.shape[1] <= len(LIBRARY):
        raise ValueError(f"{name} must have shape (num_examples, num_causes) with num_causes in "
                         f"1..{len(LIBRARY)}; got shape {arr.shape}")
    if arr.size and (arr.min() < 0 or arr.max() >= num_positions):
        raise ValueError(f"{name} must lie in 0..{num_positions - 1} (num_positions="
                         f"{num_positions}); got values from {arr.min()} to {arr.max()}")
    return arr.astype(np.int32)


def render(offsets, *, num_positions: int = 9, overlap: int = 0, combine: str = "union"):
    """Noise-free images of the given configurations, float32 (num_examples, height * width).

    Parameters
    ----------
    offsets : int array (num_examples, K)
        Vertical offset (row of the top, 0..num_positions - 1) of every cause;
        K = ``offsets.shape[1]`` causes, the first K templates of :data:`LIBRARY`.
    num_positions : int
        J, the number of vertical offsets (image height 2 + J).
    overlap : int
        Columns shared by neighbouring shapes (0..:func:`max_overlap`).
    combine : {"union", "mean"}
        How two causes on one pixel combine (module docstring).

    Returns
    -------
    array (num_examples, height * width)
        +1 where a shape covers the pixel, -1 elsewhere (``"mean"``: the mean
        over the causes that can cover a shared pixel).

    >>> image = render([[0, 8, 4]]).reshape(11, 11)
    >>> bool(np.all(image == shapes.render([[0, 8, 4]]).reshape(11, 11)))
    True

    Box and triangle sharing two columns; in row 1, column 2 is on for the box
    and off for the triangle, which can cover it: +1 with "union", 0 with "mean".

    >>> render([[0, 1]], num_positions=2, overlap=2).reshape(4, 6)[1].tolist()
    [1.0, -1.0, 1.0, 1.0, -1.0, -1.0]
    >>> render([[0, 1]], num_positions=2, overlap=2, combine="mean").reshape(4, 6)[1].tolist()
    [1.0, -1.0, 0.0, 1.0, -1.0, -1.0]
    """
    num_positions = check_positive_int(num_positions, "num_positions")
    offsets = _check_offsets(offsets, num_positions)
    num_causes = offsets.shape[1]
    _check_combine(combine)
    stamps = _stamps(num_causes, num_positions, overlap)
    covered = stamps[np.arange(num_causes)[None, :], offsets]  # (N, K, height, width)
    covered = covered.reshape(len(offsets), num_causes, stamps.shape[2] * stamps.shape[3])
    if combine == "union":
        x = np.where(covered.any(axis=1), 1.0, -1.0)
    else:
        reach = stamps.any(axis=1).reshape(num_causes, -1)  # (K, D)
        values = np.where(covered, 1.0, -1.0) * reach  # +-1 where cause k can be, else 0
        x = np.where(reach.any(axis=0), values.sum(axis=1) / np.maximum(reach.sum(axis=0), 1),
                     -1.0)
    return jnp.asarray(x, jnp.float32)


def ownership(num_causes: int = 3, num_positions: int = 9, overlap: int = 0) -> Ownership:
    """Which cause(s) can cover each pixel (module docstring).

    >>> own = ownership()
    >>> bool(np.all(own.owner == shapes.ownership())), int(own.shared.sum())
    (True, 0)
    >>> own = ownership(3, 9, overlap=1)
    >>> int(own.shared.sum()), np.bincount(own.owner[own.owner >= 0]).tolist()
    (17, [24, 32, 21])
    """
    num_causes = _check_num_causes(num_causes)
    num_positions = check_positive_int(num_positions, "num_positions")
    stamps = _stamps(num_causes, num_positions, overlap)
    reach = stamps.any(axis=1).reshape(num_causes, -1).T  # (D, K)
    count = reach.sum(axis=1)
    owner = np.where(count == 1, np.argmax(reach, axis=1), -1)
    owner = np.where(count >= 2, SHARED, owner).astype(np.int32)
    return Ownership(owner=owner, shared=count >= 2, reach=reach)


def generate(rng_key, num_examples: int, *, num_causes: int = 3, num_positions: int = 9,
             overlap: int = 0, combine: str = "union", noise_scale: float = 0.0,
             num_test: int | None = None) -> CausesData:
    """Training and test images with independent uniform offsets (module docstring).

    Parameters
    ----------
    rng_key : jax.random key
    num_examples : int
        Training images (>= 1).
    num_causes : int
        K, 1..len(LIBRARY) (7): the first K templates of :data:`LIBRARY`.
    num_positions : int
        J >= 1 vertical offsets per shape; the image is 2 + J rows tall.
    overlap : int
        Columns shared by neighbouring shapes, 0..:func:`max_overlap` (num_causes).
    combine : {"union", "mean"}
        Value of a pixel two shapes cover (module docstring).
    noise_scale : float
        Standard deviation of Gaussian noise added to every pixel (>= 0).
    num_test : int, optional
        Test images (>= 0; default ``num_examples``).

    Returns
    -------
    CausesData

    >>> data = generate(jax.random.key(0), 100)
    >>> data.x_train.shape, data.offsets_train.shape, (data.height, data.width), data.names
    ((100, 121), (100, 3), (11, 11), ('box', 'triangle', 'cross'))
    >>> bool(np.all(data.x_train == shapes.render(data.offsets_train)))
    True
    >>> data = generate(jax.random.key(0), 50, num_causes=4, num_positions=5, overlap=1)
    >>> data.x_test.shape, int(data.shared.sum())
    ((50, 77), 14)
    """
    if rng_key is None:
        raise MissingKeyError("generate needs an explicit rng_key (e.g. jax.random.key(0))")
    num_examples = check_positive_int(num_examples, "num_examples")
    num_causes = _check_num_causes(num_causes)
    num_positions = check_positive_int(num_positions, "num_positions")
    overlap = _check_overlap(overlap, num_causes)
    _check_combine(combine)
    if num_test is None:
        num_test = num_examples
    if isinstance(num_test, bool) or not isinstance(num_test, int | np.integer):
        raise TypeError(f"num_test must be an integer; got {num_test!r}")
    if num_test < 0:
        raise ValueError(f"num_test must be at least 0; got {num_test}")
    if isinstance(noise_scale, bool) or not isinstance(noise_scale, int | float | np.number):
        raise TypeError(f"noise_scale must be a number; got {noise_scale!r}")
    if not (np.isfinite(noise_scale) and noise_scale >= 0):
        raise ValueError(f"noise_scale must be finite and >= 0; got {noise_scale!r}")
    key_train, key_test, noise_train, noise_test = jax.random.split(rng_key, 4)
    images = []
    offsets = []
    for key, noise_key, count in ((key_train, noise_train, num_examples),
                                  (key_test, noise_test, int(num_test))):
        drawn = np.asarray(jax.random.randint(key, (count, num_causes), 0, num_positions),
                           np.int32)
        x = render(drawn, num_positions=num_positions, overlap=overlap, combine=combine)
        if noise_scale > 0:
            x = x + jnp.float32(noise_scale) * jax.random.normal(noise_key, x.shape, x.dtype)
        images.append(x)
        offsets.append(drawn)
    own = ownership(num_causes, num_positions, overlap)
    height, width = image_size(num_causes, num_positions, overlap)
    return CausesData(x_train=images[0], x_test=images[1], offsets_train=offsets[0],
                      offsets_test=offsets[1], owner=own.owner, shared=own.shared,
                      reach=own.reach, height=height, width=width,
                      names=tuple(list(LIBRARY)[:num_causes]))


def purity(g, owner, *, num_causes: int | None = None) -> dict:
    """How well a learnt g partitions the pixels along the causes (``shapes.purity``, K causes).

    Every unshared owned pixel (``owner >= 0``) goes to its VQ argmax_k g_dk;
    every VQ is labelled with the cause that owns most of its pixels; purity
    is the fraction of those pixels whose VQ's label is their own cause. With
    the paper's owner (K = 3, no shared pixels) the numbers equal
    ``shapes.purity``'s.

    Parameters
    ----------
    g : array (D, num_vqs)
        Q(r_d = k) of a fit (rows sum to 1).
    owner : int array (D,)
        ``Ownership.owner`` (``SHARED`` pixels are scored separately).
    num_causes : int, optional
        Default: the largest owner + 1.

    Returns
    -------
    dict
        ``purity``, ``labels`` (cause of every VQ, -1 for a VQ without owned
        pixels), ``one_to_one`` (every cause is the label of exactly one VQ),
        ``counts`` (num_vqs x K), ``mean_max_g`` (over the unshared owned
        pixels), ``shared_vq`` (argmax VQ of every shared pixel, in pixel
        order) and ``shared_label`` (that VQ's label).

    >>> own = ownership(3, 9, overlap=1)
    >>> g = np.eye(3)[np.where(own.owner == SHARED, 0, np.maximum(own.owner, 0))]
    >>> result = purity(g, own.owner)
    >>> result["purity"], result["one_to_one"], set(result["shared_label"])
    (1.0, True, {0})
    """
    owner = np.asarray(owner)
    if owner.ndim != 1 or not np.issubdtype(owner.dtype, np.integer):
        raise ValueError(f"owner must be a 1-D integer array; got shape {owner.shape}, "
                         f"dtype {owner.dtype}")
    g = np.asarray(g, dtype=np.float64)
    if g.ndim != 2 or g.shape[0] != owner.shape[0]:
        raise ValueError(f"g must have shape ({owner.shape[0]}, num_vqs); got shape {g.shape}")
    if not np.all(np.isfinite(g)):
        raise ValueError("g contains NaN or infinite values")
    owned = owner >= 0
    if not owned.any():
        raise ValueError("owner marks no pixel as owned by one cause (all -1 or SHARED)")
    num_causes = int(owner.max()) + 1 if num_causes is None else check_positive_int(
        num_causes, "num_causes")
    if owner.max() >= num_causes:
        raise ValueError(f"owner holds cause {owner.max()} but num_causes={num_causes}")
    vq = np.argmax(g[owned], axis=1)
    counts = np.zeros((g.shape[1], num_causes), int)
    np.add.at(counts, (vq, owner[owned]), 1)
    labels = np.where(counts.sum(axis=1) > 0, np.argmax(counts, axis=1), -1)
    used = labels[labels >= 0]
    shared_vq = np.argmax(g[owner == SHARED], axis=1)
    return {
        "purity": float(counts.max(axis=1).sum() / owned.sum()),
        "labels": labels.tolist(),
        "one_to_one": bool(used.size == num_causes and np.unique(used).size == num_causes),
        "counts": counts.tolist(),
        "mean_max_g": float(np.mean(np.max(g[owned], axis=1))),
        "shared_vq": shared_vq.tolist(),
        "shared_label": labels[shared_vq].tolist(),
    }
