"""Choosing the number of principal components q of PPCA: Minka's evidence and the scorer.

Used by :func:`inference.model_selection` (``model="ppca"``). Every value is per
example, in nats, higher is better.

Minka's Laplace evidence
------------------------
Minka (2001) integrates the PPCA covariance C = U (L - v I) U^T + v I (U (d, k)
orthonormal, L = diag(l_1 .. l_k), v the noise variance) over a uniform prior on the
Stiefel manifold of U and non-informative priors on L and v, by Laplace's method in
a parameterisation of U by d k - k (k + 1) / 2 free angles. With l_1 >= .. >= l_d the
eigenvalues of the sample covariance S = (1/N) sum_n (x_n - xbar)(x_n - xbar)^T, the
approximation reads::

    p(D | k) ~ p(U) (prod_{j<=k} l_j)^(-N/2) v^(-N (d - k) / 2) (2 pi)^((m + k) / 2)
               det(A_Z)^(-1/2) N^(-k/2),

    v = (sum_{j>k} l_j) / (d - k),        m = d k - k (k + 1) / 2,
    p(U) = 2^(-k) prod_{i=1..k} Gamma((d - i + 1) / 2) pi^(-(d - i + 1) / 2)
           (one over the volume of the Stiefel manifold of k-frames in R^d),
    det(A_Z) = prod_{i=1..k} prod_{j=i+1..d} N (1/lhat_j - 1/lhat_i) (l_i - l_j),

with lhat_j = l_j for j <= k and lhat_j = v for j > k; so log det(A_Z) holds the
m log N of the m pairs (i, j). The paper drops factors that do not depend on k;
:func:`laplace_log_evidences` keeps one of them, the exp(-N d / 2) (2 pi)^(-N d / 2)
of the Gaussian likelihood at its maximum (tr(C^-1 S) = d there), so that::

    laplace(k) = log p(D | ML fit with k components) + log p(U) + ((m + k)/2) log 2 pi
                 - (1/2) log det(A_Z) - (k / 2) log N

is on the scale of a log-likelihood: laplace / N sits next to ``"train"`` and
``"bic"`` in a table. The mean is plugged in (the sample mean, as in the paper), the
priors on L and v are improper, so the value is an approximation of log p(D | k) up to
a constant that does not depend on k, not a proper evidence.

scikit-learn's ``PCA(n_components="mle")`` implements the same formula on the
*unbiased* eigenvalues (1/(N - 1)) and without the likelihood constant; its values
differ from :func:`laplace_log_evidences` by (N d / 2) (1 + log 2 pi - log(N / (N - 1))),
the same for every k, so both choose the same k (the tests check this against its
implementation).

Degenerate spectra. Eigenvalues at most ``d eps l_1`` (eps: float64's epsilon) count
as zero: a k whose l_k is zero (k beyond the rank of the centred data) gets -inf; v and
the differences l_i - l_j, lhat_i - lhat_j are floored at that tolerance (a v of zero
means the k components span the data: the likelihood is unbounded and the value large).

The scorer
----------
:class:`PPCAScorer` fits the maximum-likelihood PPCA with the noise estimated: by
default in closed form (Tipping & Bishop 1999, eq. 7-8: mu the sample mean, W^T W =
U_q (L_q - sigma^2 I) U_q^T, sigma^2 the mean of the d - q discarded eigenvalues),
or with ``fit="em"`` by :func:`inference.ppca.em.fit_ppca` (``noise="ml"``). EM for
the ML noise converges slowly when sigma^2 is small against the principal variances
(rate 1 - 2 sigma^2 / l per iteration) and its default tolerance stops it short of
the maximum by more than the gain of an extra component (measured: 0.007 - 0.02 nats
per example at sigma = 0.1, d = 8), which would make ``"train"`` and ``"bic"`` depend
on where EM stopped; the closed form is the maximum itself.

References
----------
T. P. Minka, "Automatic choice of dimensionality for PCA", Advances in Neural
Information Processing Systems 13 (NIPS 2000), 2001.
M. E. Tipping, C. M. Bishop, "Probabilistic principal component analysis", Journal of
the Royal Statistical Society B 61(3), 611-622, 1999.
G. Schwarz, "Estimating the dimension of a model", Annals of Statistics 6, 1978 (BIC).
A. Vehtari, A. Gelman, J. Gabry, "Practical Bayesian model evaluation using
leave-one-out cross-validation and WAIC", Statistics and Computing 27(5), 2017.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from inference.engine.selection import Scorer, check_candidate_list
from inference.ppca.baselines import fit_ppca_mcmc
from inference.ppca.em import PPCAResult, PPCATrace, fit_ppca
from ppl_models import ppca
from ppl_models.diagnostics import ConvergenceWarning
from ppl_models.validation import check_data, check_positive_int

__all__ = ["DEFAULT_MAX_COMPONENTS", "EM_DEFAULTS", "PPCAScorer", "check_candidates",
           "eigenvalues", "laplace_log_evidence", "laplace_log_evidences", "log_density",
           "ml_fit", "num_parameters"]

#: Default candidates q = 1 .. min(d - 1, N - 1, 8).
DEFAULT_MAX_COMPONENTS = 8
#: ``fit_ppca`` settings of ``fit="em"`` unless ``fit_options`` override them: far more
#: iterations and a tighter tolerance than its defaults (module docstring).
EM_DEFAULTS = {"max_iterations": 5000, "tol": 1e-9}
_FITS = ("closed_form", "em")
_LOG_2PI = math.log(2.0 * math.pi)


def eigenvalues(x) -> np.ndarray:
    """Eigenvalues of the maximum-likelihood sample covariance (1/N) of x, descending,
    in float64 (d,)."""
    x = np.asarray(x, np.float64)
    centred = x - x.mean(axis=0)
    values = np.linalg.eigvalsh(centred.T @ centred / x.shape[0])[::-1]
    return np.maximum(values, 0.0)


def _tolerance(values) -> float:
    """Eigenvalues at most d eps l_1 count as zero."""
    return len(values) * np.finfo(np.float64).eps * max(float(values[0]), np.finfo(float).tiny)


def _laplace_from_spectrum(values, num, max_q):
    """Minka's log p(D | k) for k = 1 .. max_q from the descending eigenvalues (module
    docstring), in total nats."""
    dim = len(values)
    tol = _tolerance(values)
    lam = np.maximum(values, tol)
    log_lam = np.log(lam)
    upper = np.triu(np.ones((dim, dim), bool), 1)
    # sum over pairs i < j <= d of log(l_i - l_j), accumulated over the rows i < k
    log_diff = np.where(upper, np.log(np.maximum(lam[:, None] - lam[None, :], tol)), 0.0)
    rows = np.cumsum(log_diff.sum(axis=1))
    # the pairs i < j <= k of log(1/l_j - 1/l_i) = log(l_i - l_j) - log l_i - log l_j
    hat = np.where(upper, log_diff - log_lam[:, None] - log_lam[None, :], 0.0)
    cols = np.cumsum(hat.sum(axis=0))
    log_volume = np.cumsum([-math.log(2.0) + math.lgamma((dim - i + 1) / 2.0)
                            - (dim - i + 1) / 2.0 * math.log(math.pi)
                            for i in range(1, dim + 1)])
    out = np.empty(max_q)
    for k in range(1, max_q + 1):
        if values[k - 1] <= tol:
            out[k - 1] = -np.inf
            continue
        rest = dim - k
        v = max(float(np.sum(values[k:])) / rest, tol)
        m = dim * k - k * (k + 1) / 2.0
        # the pairs i <= k < j: log(1/v - 1/l_i) = log(l_i - v) - log l_i - log v
        cross = rest * np.sum(np.log(np.maximum(lam[:k] - v, tol)) - log_lam[:k] - math.log(v))
        log_az = m * math.log(num) + rows[k - 1] + cols[k - 1] + cross
        log_lik = -0.5 * num * (np.sum(log_lam[:k]) + rest * math.log(v) + dim * (1.0 + _LOG_2PI))
        out[k - 1] = (log_volume[k - 1] + log_lik + 0.5 * (m + k) * _LOG_2PI - 0.5 * log_az
                      - 0.5 * k * math.log(num))
    return out


def laplace_log_evidences(x, max_q: int | None = None) -> np.ndarray:
    """Minka's Laplace approximation of log p(x | q) for q = 1 .. ``max_q``, in total nats.

    One eigendecomposition of the sample covariance serves every q (module docstring:
    the formula, the constant kept and how it relates to scikit-learn's).

    Parameters
    ----------
    x : array (N, d)
        The data, d >= 2, N >= 2.
    max_q : int, optional
        The largest q, at most d - 1 (default d - 1).

    Returns
    -------
    array (max_q,)
        Entry q - 1 is the value for q components (-inf where l_q is zero).

    Examples
    --------
    >>> import jax
    >>> from ppl_models import ppca
    >>> data = ppca.generate(jax.random.key(0), 300, 8, 3, noise=0.3)
    >>> int(laplace_log_evidences(data.x).argmax()) + 1
    3
    """
    x = check_data(x, "x", min_examples=2)
    num, dim = x.shape
    if dim < 2:
        raise ValueError(f"x must have at least 2 columns (PPCA with an estimated noise needs "
                         f"q <= d - 1); got shape {x.shape}")
    max_q = dim - 1 if max_q is None else check_positive_int(
        max_q, "max_q", maximum=dim - 1, why=" (d - 1: v is the mean of the discarded "
                                             "eigenvalues)")
    return _laplace_from_spectrum(eigenvalues(x), num, max_q)


def laplace_log_evidence(x, q: int) -> float:
    """Minka's Laplace approximation of log p(x | q) (total nats; see
    :func:`laplace_log_evidences`)."""
    x = check_data(x, "x", min_examples=2)
    q = check_positive_int(q, "q", maximum=max(x.shape[1] - 1, 1),
                           why=" (d - 1: v is the mean of the discarded eigenvalues)")
    return float(laplace_log_evidences(x, q)[q - 1])


def num_parameters(dim: int, q: int) -> int:
    """Free parameters of PPCA with q components: d q - q (q - 1) / 2 + d + 1.

    W up to a rotation (d q - q (q - 1) / 2; Tipping & Bishop 1999, sec. 2.2 count the
    covariance's parameters so), the mean (d) and sigma (1). Minka's count is the same:
    m = d q - q (q + 1) / 2 for U, q eigenvalues, v and the mean.

    >>> num_parameters(8, 3)
    30
    """
    return dim * q - q * (q - 1) // 2 + dim + 1


def ml_fit(x, q: int) -> PPCAResult:
    """The maximum-likelihood PPCA with q components in closed form (Tipping & Bishop 1999,
    eq. 7-8), as a :class:`inference.ppca.em.PPCAResult` (float64 numpy arrays; 0
    iterations, ``converged`` True, an empty trace).

    W = (L_q - sigma^2 I)^(1/2) U_q^T (rows: the principal axes), mu the sample mean,
    sigma^2 the mean of the d - q discarded eigenvalues of the (1/N) sample covariance
    (0 where that mean is at most d eps l_1: the q components span the centred data).
    """
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=0)
    centred = x - mean
    values, vectors = np.linalg.eigh(centred.T @ centred / x.shape[0])
    values, vectors = np.maximum(values[::-1], 0.0), vectors[:, ::-1]
    noise_var = float(np.mean(values[q:]))
    if noise_var <= _tolerance(values):  # the q components span the centred data
        noise_var = 0.0
    weights = np.sqrt(np.maximum(values[:q] - noise_var, 0.0))[:, None] * vectors[:, :q].T
    empty = np.zeros(0)
    return PPCAResult(weights, mean, math.sqrt(noise_var), True, 0,
                      PPCATrace(empty, empty, empty))


def log_density(x, weights, mean, noise) -> np.ndarray:
    """log N(x_n; mu, W^T W + sigma^2 I) per row (N,) in float64, z integrated out
    (:func:`ppl_models.ppca.marginal_covariance`); -inf off the subspace if sigma = 0."""
    x = np.asarray(x, np.float64)
    weights = np.asarray(weights, np.float64)
    cov = weights.T @ weights + float(noise) ** 2 * np.eye(x.shape[1])
    centred = x - np.asarray(mean, np.float64)
    sign, log_det = np.linalg.slogdet(cov)
    if sign <= 0 or not np.isfinite(log_det):
        return np.full(x.shape[0], -np.inf)
    chol = np.linalg.cholesky(cov)
    white = np.linalg.solve(chol, centred.T)
    return -0.5 * (x.shape[1] * _LOG_2PI + log_det + np.sum(white * white, axis=0))


def check_candidates(candidates, num, dim):
    """PPCA's candidates q as a tuple: integers 1 <= q <= min(d - 1, N - 1), none repeated
    (default 1 .. min(d - 1, N - 1, 8))."""
    limit = min(dim - 1, num - 1)
    if limit < 1:
        raise ValueError(f"candidates: PPCA with an estimated noise needs d >= 2 columns and "
                         f"N >= 2 rows (q <= min(d - 1, N - 1)); x has shape ({num}, {dim})")
    if candidates is None:
        return tuple(range(1, min(limit, DEFAULT_MAX_COMPONENTS) + 1))

    def check_one(c):
        q = check_positive_int(c, "candidates")
        if q > dim - 1:
            raise ValueError(f"candidates must be at most d - 1 = {dim - 1} (PPCA with ML "
                             f"noise needs q < d); got {q}")
        if q > num - 1:
            raise ValueError(f"candidates must be at most N - 1 = {num - 1} (the rank of the "
                             f"centred x); got {q}")
        return q

    return check_candidate_list(candidates, "integers q", check_one)


class PPCAScorer(Scorer):
    """Fits and scores of PPCA candidates q for :func:`inference.model_selection`.

    ``"train"``, ``"bic"``, ``"aic"``: the mean log-likelihood of the full-data ML fit
    (closed form, or ``fit="em"``; module docstring), cached per q, with
    :func:`num_parameters`; ``"cv"``: the same fit on the training rows and the log
    density of the held-out rows; ``"laplace"``: :func:`laplace_log_evidences` / N
    (one eigendecomposition for every q); ``"pca_mle"``: scikit-learn's
    ``PCA(n_components="mle")`` choice (values NaN: scikit-learn exposes only the
    choice); ``"loo"``, ``"waic"``: NUTS on the collapsed program
    (:func:`inference.ppca.baselines.fit_ppca_mcmc`, one chain), its pointwise
    log-likelihood log p(x_n | W, mu, sigma); ``"evidence"``: the collapsed program
    ``ppl_models.ppca.model(x, collapsed=True, sigma=None, sufficient_statistics=True)``
    (no per-example z: only W, mu and sigma are integrated, over their priors
    Normal(0, 1), Normal(0, 10^2), HalfNormal(1); the rows enter through their mean and
    scatter, the same density as one multivariate Normal per row).

    Parameters
    ----------
    x : array (N, d)
    num_restarts : int
        Starts of ``fit_ppca`` with ``fit="em"`` (the closed form has none).
    fit_options : dict, optional
        ``fit_ppca``'s keyword arguments (``fit="em"`` only; :data:`EM_DEFAULTS` unless
        given).
    vb_options : dict, optional
        Unused (PPCA has no VB criterion).
    fit : {"closed_form", "em"}, optional
        How the ML fits are computed (default ``"closed_form"``).
    """

    def __init__(self, x, *, num_restarts=3, fit_options=None, vb_options=None, fit=None):
        fit = "closed_form" if fit is None else fit
        if fit not in _FITS:
            raise ValueError(f"fit must be one of {_FITS}; got {fit!r}")
        if fit == "closed_form" and fit_options:
            raise ValueError(f"fit_options {sorted(fit_options)} apply to fit='em' (fit_ppca); "
                             "the default fit='closed_form' takes none")
        x = check_data(x, "x", min_examples=2)
        super().__init__(x, num_restarts=check_positive_int(num_restarts, "num_restarts"),
                         fit_options=fit_options, vb_options=vb_options)
        self.fit = fit
        self.cache = {}
        self.spectrum = None
        self.unbounded = set()
        self.fits_em = self.unconverged_em = 0
        self.pca_note = None
        self.pca_called = False

    def _fit(self, q, x, key):
        if self.fit == "closed_form":
            return ml_fit(x, q)
        if q > x.shape[0] - 1:
            raise ValueError(f"candidates: q = {q} needs at least q + 1 = {q + 1} rows to fit "
                             f"with fit='em'; the fit has {x.shape[0]} (lower q or raise "
                             "num_folds)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fit = fit_ppca(x, q, noise="ml", rng_key=key,
                           **{"num_restarts": self.num_restarts, **EM_DEFAULTS,
                              **self.fit_options})
        self.fits_em += 1
        self.unconverged_em += not fit.converged
        return fit

    def _density(self, fit, rows, q):
        out = log_density(rows, fit.weights, fit.mean, fit.noise)
        if fit.noise <= 0.0:
            self.unbounded.add(q)
        return out

    def train(self, q, rng_key):
        if q not in self.cache:
            self.cache[q] = self._fit(q, self.x, rng_key)
        fit = self.cache[q]
        if fit.noise <= 0.0:  # the q components span the centred data
            self.unbounded.add(q)
            return math.inf
        return float(np.mean(self._density(fit, self.x, q)))

    def heldout(self, q, train, test, rng_key):
        fit = self._fit(q, np.asarray(self.x)[np.asarray(train)], rng_key)
        return self._density(fit, np.asarray(self.x)[np.asarray(test)], q)

    def num_parameters(self, q):
        return num_parameters(self.dim, q)

    def laplace(self, q):
        if self.spectrum is None:
            self.spectrum = _laplace_from_spectrum(eigenvalues(self.x), self.num, self.dim - 1)
        return float(self.spectrum[q - 1]) / self.num

    def pca_mle(self, candidates):
        from sklearn.decomposition import PCA

        values = np.full(len(candidates), np.nan)
        self.pca_called = True
        if self.num < self.dim:
            self.pca_note = (f"pca_mle: scikit-learn's PCA(n_components='mle') needs N >= d; "
                             f"N = {self.num} < d = {self.dim}, so no choice")
            return values, None
        chosen = int(PCA(n_components="mle", svd_solver="full")
                     .fit(np.asarray(self.x, np.float64)).n_components_)
        if chosen in candidates:
            self.pca_note = None
            return values, chosen
        nearest = min(candidates, key=lambda c: (abs(c - chosen), c))
        self.pca_note = (f"pca_mle: PCA(n_components='mle') chose q = {chosen}, not a "
                         f"candidate; the nearest candidate {nearest} is reported")
        return values, nearest

    def loo_reason(self, q, limit):
        size = self.num * self.dim * q
        if size > limit:
            return f"N d q = {size} > loo_max_size = {limit}"
        return None

    def loo(self, q, rng_key, num_warmup, num_samples, progress_bar):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fit = fit_ppca_mcmc(self.x, q, rng_key=rng_key, num_warmup=num_warmup,
                                num_samples=num_samples, num_chains=1,
                                progress_bar=progress_bar)
        extra = "" if fit.converged else (f", not converged (R-hat {fit.r_hat:.3g}, "
                                          f"{fit.num_divergent} divergent)")
        return fit.to_inference_data(), extra

    def evidence_reason(self, q, limit):
        size = self.num * self.dim * q
        if size > limit:
            return f"N d q = {size} > evidence_max_size = {limit}"
        return None

    def evidence_program(self, q):
        # The rows through their mean and scatter: the same density as one
        # MultivariateNormal per example, at a cost per particle that does not grow with N.
        return ppca.model, (self.x,), {"num_components": q, "collapsed": True, "sigma": None,
                                       "sufficient_statistics": True}

    def notes(self, scored):
        out = []
        if scored:
            out.append("cv/train/bic/aic: exact PPCA log-likelihood (z integrated out) of the "
                       + ("closed-form ML fit (Tipping & Bishop 1999, eq. 7-8)"
                          if self.fit == "closed_form" else
                          "best of fit_ppca(noise='ml') restarts (EM)")
                       + "; p = d q - q (q - 1) / 2 + d + 1")
        if self.spectrum is not None:
            out.append("laplace: Minka (2001) Laplace evidence / N on the (1/N) sample "
                       "covariance's eigenvalues, with the likelihood constant "
                       "-(d / 2)(1 + log 2 pi) per example kept")
        if self.unbounded:
            out.append(f"sigma^2 = 0 for q in {sorted(self.unbounded)}: the components span "
                       "the centred data (likelihood unbounded)")
        if self.unconverged_em:
            out.append(f"{self.unconverged_em} of {self.fits_em} fit_ppca calls did not "
                       "converge (raise max_iterations)")
        if self.pca_called:
            out.append("pca_mle: scikit-learn's PCA(n_components='mle') choice (Minka's "
                       "criterion, as 'laplace'); values NaN: it exposes only the choice")
        if self.pca_note:
            out.append(self.pca_note)
        return out
