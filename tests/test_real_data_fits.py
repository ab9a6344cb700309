"""The mixture and PPCA fits on scikit-learn's bundled real data, against scikit-learn.

* ``fit_mixture`` at its defaults (ten k-means starts) reaches at least
  ``GaussianMixture(k)``'s mean log-likelihood (scikit-learn's defaults: one k-means
  start, reg_covar 1e-6, tol 1e-3; its ``score``) less 1e-3 nats per example, its
  covariances have a Cholesky factor in the fit's float type, and no component is
  pruned or flagged collapsed -- except where scikit-learn's own fit degenerates: a
  component with fewer than d + 1 points or a variance at the regulariser (wine and
  breast cancer at k >= 4 or 6), whose likelihood grows without bound as reg_covar
  shrinks, so no likelihood comparison is meaningful.
* The PPCA maximum-likelihood fit equals ``PCA(n_components=q)``: scikit-learn divides by
  N - 1 where the maximum likelihood divides by N, so its noise variance is N / (N - 1)
  times ours and its ``score`` is the log-likelihood at the covariance scaled by c =
  N / (N - 1), lower by (d / 2)(log c + 1 / c - 1) exactly.
* Minka's Laplace evidence (Minka, "Automatic choice of dimensionality for PCA", NIPS
  2000) chooses the q that ``PCA(n_components="mle")`` chooses.

Data: iris as is (four lengths in cm), wine and breast cancer standardised (features in
units that differ by up to ten orders of magnitude; a user standardises them) and, for
the positive-definiteness and collapse checks, also raw.
"""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn")
from scipy.special import logsumexp  # noqa: E402
from sklearn.datasets import load_breast_cancer, load_iris, load_wine  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.mixture import GaussianMixture  # noqa: E402

from inference.mixture.em import fit_mixture  # noqa: E402
from inference.ppca.em import fit_ppca  # noqa: E402
from inference.ppca.selection import laplace_log_evidences, log_density, ml_fit  # noqa: E402
from ppl_models.diagnostics import ConvergenceWarning  # noqa: E402

#: Nats per example by which our fit may fall short of scikit-learn's.
SLACK = 1e-3
_LOADERS = {"iris": load_iris, "wine": load_wine, "breast_cancer": load_breast_cancer}


def load(name, standardise):
    x = _LOADERS[name]().data.astype(np.float64)
    if standardise:
        x = (x - x.mean(axis=0)) / x.std(axis=0)
    return x


def mean_log_likelihood(x, weights, means, covariances):
    """Mean log-likelihood per example of a full-covariance mixture, in float64."""
    x = np.asarray(x, np.float64)
    columns = []
    for w, m, c in zip(*(np.asarray(a, np.float64) for a in (weights, means, covariances)),
                       strict=True):
        factor = np.linalg.cholesky(c)
        z = np.linalg.solve(factor, (x - m).T)
        columns.append(np.log(w) - 0.5 * np.sum(z * z, axis=0)
                       - np.sum(np.log(np.diag(factor))) - 0.5 * x.shape[1] * np.log(2 * np.pi))
    return float(np.mean(logsumexp(np.stack(columns, axis=1), axis=1)))


def sklearn_degenerates(model, x):
    """Why scikit-learn's fit is degenerate (a component on fewer than d + 1 points or
    with a variance, in units of the data's, at its regulariser), or None."""
    num, dim = x.shape
    inv = 1.0 / x.std(axis=0)
    for y, (w, c) in enumerate(zip(model.weights_, model.covariances_, strict=True)):
        smallest = np.linalg.eigvalsh(c * inv[:, None] * inv[None, :])[0]
        if w * num < dim + 1 or smallest < 3 * model.reg_covar * inv.max() ** 2:
            return f"component {y}: {w * num:.1f} points, smallest scaled variance {smallest:.2g}"
    return None


def fit_ours(x, k):
    # EM's tail on breast cancer is long: tol 1e-7 relative is not met in 200 iterations
    # there; the likelihood is then already at or above scikit-learn's.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return fit_mixture(np.float32(x), k, rng_key=jax.random.key(0))


def check_mixture(x, k):
    """Our default fit against GaussianMixture(k)'s (module docstring)."""
    ours = fit_ours(x, k)
    for c in np.asarray(ours.covariances):  # a Cholesky factor in the returned dtype
        assert c.dtype == np.float32 and np.all(np.isfinite(np.linalg.cholesky(c)))
    theirs = GaussianMixture(k, random_state=0).fit(x)
    degenerate = sklearn_degenerates(theirs, x)
    if degenerate is None:
        assert ours.num_components == k and ours.collapsed == ()
        mine = mean_log_likelihood(x, ours.weights, ours.means, ours.covariances)
        assert mine >= theirs.score(x) - SLACK, (k, mine, theirs.score(x))
    return ours, degenerate


@pytest.fixture(scope="module")
def iris():
    return load("iris", False)


def test_mixture_reaches_sklearn_on_iris(iris):
    """The default run's case: k = 3, where one k-means++ start fell 0.09 nats per
    example short (one compilation; the other k run in the slow sweep)."""
    _, degenerate = check_mixture(iris, 3)
    assert degenerate is None  # nothing to excuse


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 2, 4, 5, 6])
def test_mixture_reaches_sklearn_on_raw_iris(iris, k):
    _, degenerate = check_mixture(iris, k)
    assert degenerate is None


@pytest.mark.slow
@pytest.mark.parametrize("name", ["iris", "wine", "breast_cancer"])
def test_mixture_reaches_sklearn_on_standardised_sets(name):
    x = load(name, True)
    for k in range(1, 7):
        check_mixture(x, k)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["wine", "breast_cancer"])
def test_mixture_on_raw_features_is_positive_definite_and_not_collapsed(name):
    """Raw features (variances from 1e-5 to 1e5): every covariance keeps its Cholesky
    factor in float32 and no component collapses or is pruned while scikit-learn's fit
    is healthy (the collapse test reads variances in the data's units)."""
    x = load(name, False)
    for k in range(1, 4):
        check_mixture(x, k)


@pytest.mark.parametrize("name", list(_LOADERS))
def test_ppca_closed_form_equals_sklearn_pca(name):
    x = load(name, False)
    num, dim = x.shape
    c = num / (num - 1)
    for q in (1, 2, 3):
        theirs = PCA(q).fit(x)
        fit = ml_fit(x, q)
        np.testing.assert_allclose(float(fit.noise) ** 2 * c, theirs.noise_variance_, rtol=1e-9)
        ours = float(np.mean(log_density(x, fit.weights, fit.mean, fit.noise)))
        gap = 0.5 * dim * (np.log(c) + 1.0 / c - 1.0)
        np.testing.assert_allclose(ours - gap, theirs.score(x), rtol=0, atol=1e-9)


def test_ppca_em_reaches_sklearn_pca_on_standardised_data():
    """EM in float32 (``fit_ppca(noise="ml")``) to its default tolerance: the noise
    variance within 0.1% and the log-likelihood within 1e-3 nats per example."""
    x = load("iris", True)
    num, dim = x.shape
    c = num / (num - 1)
    for q in (1, 2):
        theirs = PCA(q).fit(x)
        fit = fit_ppca(np.float32(x), q, noise="ml", rng_key=jax.random.key(0))
        np.testing.assert_allclose(float(fit.noise) ** 2 * c, theirs.noise_variance_, rtol=1e-3)
        ours = float(np.mean(log_density(x, np.asarray(fit.weights, np.float64),
                                         np.asarray(fit.mean, np.float64), float(fit.noise))))
        gap = 0.5 * dim * (np.log(c) + 1.0 / c - 1.0)
        assert abs(ours - gap - theirs.score(x)) < SLACK


@pytest.mark.parametrize("name", list(_LOADERS))
@pytest.mark.parametrize("standardise", [False, True])
def test_minka_laplace_choice_equals_sklearn_mle(name, standardise):
    x = load(name, standardise)
    ours = int(np.argmax(laplace_log_evidences(x, x.shape[1] - 1))) + 1
    assert ours == PCA(n_components="mle").fit(x).n_components_
