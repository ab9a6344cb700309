"""The real-data study's data files and scikit-learn's answers (``real_data.toml``).

The study ``examples/studies/real_data.toml`` scores every family whose size
:func:`inference.model_selection` selects on one real data set from scikit-learn's
bundled sets (no network), kept as small CSV files under ``data/`` beside this file.
:func:`write_data` writes them (run ``python examples/studies/real_data.py`` to write
them again; the files in the repository were written by it):

* ``iris_standardised.csv`` -- Fisher's iris (``load_iris``), 150 x 4, each measurement
  standardised (zero mean, unit variance): the Gaussian mixture's k;
* ``wine_standardised.csv`` -- the wine recognition data (``load_wine``), 178 x 13,
  standardised (the features' units differ by four orders of magnitude): PPCA's q;
* ``digits_twos_pm1.csv`` -- the twos of the optical digits (``load_digits``), 177
  images of 8 x 8, a pixel +1 where its grey level is >= 8 of 16, else -1 (as
  ``examples/clipped_digits.py``): the clipped-Gaussian model's hidden units P;
* ``digits_threes_fives.csv`` -- the threes and fives of the same digits, 365 images,
  a pixel 1 where its grey level is >= 8, else 0 (as ``examples/gvq_digits.py``): GVQ's
  number of features n;
* ``digits_grey_200.csv`` -- the first 200 digits of every class, grey levels / 16 in
  [0, 1] (the study standardises them: zero mean per pixel, unit overall variance):
  MCVQ's K VQs of J states.

The study's user programs below give scikit-learn's answer on the same matrix as the
family's row (a program on a family's data source is that family's reference in the
study's report, :func:`inference.app.study.tables.real_data_summary`):

* :func:`sklearn_mixture_bic` -- ``GaussianMixture(k, n_init=5, random_state=0)`` (full
  covariances) for every candidate k, and the k of smallest ``bic``; its values are
  -BIC / (2 N), nats per example as the family's ``"bic"``;
* :func:`sklearn_pca_mle` -- ``PCA(n_components="mle")``'s q: T. P. Minka, "Automatic
  choice of dimensionality for PCA", Advances in Neural Information Processing Systems
  13 (NIPS 2000), 2001.

scikit-learn has no estimator for the clipped-Gaussian model, GVQ or MCVQ, so those
rows have no reference (the report says "none").
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"
#: A pixel is on when its grey level (0..16) is at least this (half the range).
THRESHOLD = 8


def _standardised(x):
    x = np.asarray(x, np.float64)
    return (x - x.mean(axis=0)) / x.std(axis=0)


def data_sets() -> dict:
    """File name -> (matrix, header, number format) of every data file of the study."""
    from sklearn.datasets import load_digits, load_iris, load_wine

    iris, wine, digits = load_iris(), load_wine(), load_digits()
    grey = digits.images.reshape(len(digits.images), -1)
    pixels = ",".join(f"p{r}{c}" for r in range(8) for c in range(8))
    twos = np.where(grey[digits.target == 2] >= THRESHOLD, 1, -1)
    threes_fives = (grey[np.isin(digits.target, (3, 5))] >= THRESHOLD).astype(int)
    first = np.concatenate([np.flatnonzero(digits.target == c)[:20] for c in range(10)])
    return {
        "iris_standardised.csv": (_standardised(iris.data), ",".join(
            n.replace(" (cm)", "").replace(" ", "_") for n in iris.feature_names), "%.6f"),
        "wine_standardised.csv": (_standardised(wine.data), ",".join(wine.feature_names),
                                  "%.6f"),
        "digits_twos_pm1.csv": (twos, pixels, "%d"),
        "digits_threes_fives.csv": (threes_fives, pixels, "%d"),
        "digits_grey_200.csv": (grey[np.sort(first)] / 16.0, pixels, "%.4g"),
    }


def write_data(folder=DATA) -> list[Path]:
    """Write the study's data files into ``folder`` (CSV, a header row)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (x, header, fmt) in data_sets().items():
        path = folder / name
        np.savetxt(path, x, delimiter=",", header=header, comments="", fmt=fmt)
        written.append(path)
    return written


def sklearn_mixture_bic(x, candidates, *, criteria=None, rng_key=None, n_init=5):
    """scikit-learn's answer for the mixture's k: ``GaussianMixture(k, n_init=5,
    random_state=0)`` for every candidate, the k of smallest BIC (values: -BIC / 2N)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import GaussianMixture

    x = np.asarray(x, np.float64)
    values, notes = [], []
    for k in candidates:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            fit = GaussianMixture(k, n_init=n_init, random_state=0).fit(x)
        if any(issubclass(w.category, ConvergenceWarning) for w in caught):
            notes.append(f"GaussianMixture({k}) did not converge in every start")
        smallest = min(float(w) for w in fit.weights_) * len(x)
        if smallest < x.shape[1] + 1:
            notes.append(f"GaussianMixture({k}): a component holds {smallest:.1f} points, "
                         f"fewer than d + 1 = {x.shape[1] + 1}")
        values.append(-fit.bic(x) / (2 * len(x)))
    notes.insert(0, f"GaussianMixture(k, n_init={n_init}, random_state=0), full "
                    "covariances; values -BIC / (2 N)")
    return {"values": {"sklearn_bic": values}, "notes": notes}


def sklearn_pca_mle(x, candidates, *, criteria=None, rng_key=None):
    """scikit-learn's answer for PPCA's q: ``PCA(n_components="mle").n_components_``
    (Minka's Laplace evidence); it exposes only its choice (values NaN)."""
    from sklearn.decomposition import PCA

    q = int(PCA(n_components="mle").fit(np.asarray(x, np.float64)).n_components_)
    return {"values": {"sklearn_mle": [float("nan")] * len(candidates)},
            "choice": {"sklearn_mle": q},
            "notes": ["PCA(n_components='mle').n_components_ (Minka 2000); values NaN: it "
                      "exposes only its choice"]}


if __name__ == "__main__":
    for path in write_data():
        print(f"wrote {path} ({path.stat().st_size} bytes)")
