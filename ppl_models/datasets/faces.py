"""Face images bundled with scikit-image, scaled to [-1, 1] (Ross and Zemel 2003, sec. 5.1).

The paper trains MCVQ on the CBCL face database (19 x 19 grey-scale frontal
faces, 1800 training and 629 test images, pixel values in [-1, 1]); it is not
available offline. In its place we use the only face set that an installed
package ships: ``skimage.data.lfw_subset()``, 200 images of 25 x 25 pixels
from Labeled Faces in the Wild, of which the first 100 are faces and the
other 100 crops of background (scikit-image's documentation; we checked it by
eye on a montage of all 200, and ``tests/test_mcvq_faces_example.py``
checks that the first 100 correlate with their mean face and the others do
not). Only the 100 faces are used, so the set is about 24 times smaller
than the paper's (100 images against 1800 + 629), and its images are larger
(625 pixels against 361) and less tightly aligned.

**Scaling.** scikit-image returns floats in [0, 1] (grey level / 255); we
map them linearly to 2 v - 1 in [-1, 1], the paper's range, without
per-image normalisation (the paper states none).

**Split** (:func:`load_faces`). With 100 faces a test set as large as the
paper's is impossible; we keep the paper's ratio of training to test images,
1800 : 629, about 74 : 26, i.e. 74 training and 26 test faces, drawn by a
random permutation under an explicit ``rng_key``: enough test images that
the test RMS averages over 26 x 625 = 16,250 pixels, and as many training
images as the ratio allows for the 6 x 12 = 72 states of the paper's model.

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003, sec. 5.1 and Fig. 4.
Huang, Lee and Learned-Miller, Labeled Faces in the Wild
(the source of scikit-image's subset).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ppl_models.validation import check_positive_int

__all__ = ["NUM_FACES", "IMAGE_SHAPE", "PAPER_TRAIN_FRACTION", "FacesData", "face_images",
           "load_faces"]

#: The first NUM_FACES images of ``skimage.data.lfw_subset()`` are faces.
NUM_FACES = 100
#: Height and width of every image.
IMAGE_SHAPE = (25, 25)
#: The paper's training share, 1800 / (1800 + 629) (sec. 5.1).
PAPER_TRAIN_FRACTION = 1800 / (1800 + 629)


def face_images() -> np.ndarray:
    """The 100 faces of ``skimage.data.lfw_subset()``, float32 (100, 625) in [-1, 1].

    Raises
    ------
    ImportError
        When scikit-image is not installed.
    """
    try:
        from skimage import data
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("the faces data set needs scikit-image (its bundled "
                          "skimage.data.lfw_subset images): pip install scikit-image "
                          '(or pip install -e ".[examples]")') from err
    images = np.asarray(data.lfw_subset(), np.float64)[:NUM_FACES]
    if images.shape[1:] != IMAGE_SHAPE:  # pragma: no cover - another scikit-image release
        raise RuntimeError(f"skimage.data.lfw_subset() images have shape {images.shape[1:]}; "
                           f"expected {IMAGE_SHAPE}")
    if images.max() > 1.0:  # pragma: no cover - a release returning uint8 grey levels
        images = images / 255.0
    return (2.0 * images - 1.0).reshape(NUM_FACES, -1).astype(np.float32)


class FacesData(NamedTuple):
    """A training / test split of the faces.

    Attributes
    ----------
    x_train : float32 array (num_train, 625)
    x_test : float32 array (100 - num_train, 625)
    index_train, index_test : int arrays
        Positions of the images in ``skimage.data.lfw_subset()``.
    """

    x_train: jax.Array
    x_test: jax.Array
    index_train: np.ndarray
    index_test: np.ndarray


def load_faces(rng_key, num_train: int | None = None) -> FacesData:
    """The faces split at random into training and test images (module docstring).

    Parameters
    ----------
    rng_key : jax.random key
        For the permutation that splits the faces.
    num_train : int, optional
        Training images, 1 .. 99; default round(100 x 1800 / 2429) = 74, the
        paper's ratio.

    Returns
    -------
    FacesData
    """
    if num_train is None:
        num_train = round(NUM_FACES * PAPER_TRAIN_FRACTION)
    num_train = check_positive_int(num_train, "num_train", maximum=NUM_FACES - 1,
                                   why=" (at least one face must be left for testing)")
    images = face_images()
    order = np.asarray(jax.random.permutation(rng_key, NUM_FACES))
    train, test = np.sort(order[:num_train]), np.sort(order[num_train:])
    return FacesData(jnp.asarray(images[train]), jnp.asarray(images[test]), train, test)
