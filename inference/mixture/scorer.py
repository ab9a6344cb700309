"""Scoring mixture candidates for model selection: EM, VB, held-out likelihood, LOO,
and the YING-YANG criteria.

Used by :func:`inference.model_selection` (``model="mixture"``), which chooses the
number of components k by the VB bound, cross-validated and training likelihood,
BIC and PSIS-LOO; this module says how each is computed for a mixture.

It also computes the YING-YANG criteria of Xu (1995) (:func:`yingyang_selection`,
model_selection's criteria ``"J"``, ``"L_map"``, ``"L_stocha"``, ``"yy_bic"``,
``"yy_aic"``, ``"yy_loo"``; module :mod:`inference.mixture.selection` says what each
is): one fit per mode, candidate k and restart, every requested criterion scored from
the same fits, each on its own scale with lower better.
:func:`inference.mixture.selection.compare_criteria` and
:func:`~inference.mixture.selection.select_num_components` are wrappers of
:func:`inference.model_selection` that return these results.

References
----------
L. Xu, "YING-YANG machine: a Bayesian-Kullback scheme for unified learnings and new
results on vector quantization", ICONIP 1995; A. Corduneanu, C. M. Bishop, "Variational
Bayesian model selection for mixture distributions", AISTATS 2001.
"""

from __future__ import annotations

import math
import warnings

import jax
import numpy as np

from inference.engine.selection import Scorer, check_candidate_list
from inference.mixture.baselines import MAX_MCMC_COMPONENTS, MAX_MCMC_EXAMPLES, fit_mixture_mcmc
from inference.mixture.criteria import criteria as mixture_criteria
from inference.mixture.em import fit_mixture
from inference.mixture.features import component_log_joint
from inference.mixture.selection import MODEL_SELECTION_NAMES, yingyang_selection
from inference.mixture.selection import num_parameters as mixture_num_parameters
from inference.mixture.vb import fit_vb_mixture
from ppl_models import mixture
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import check_data, check_positive_int

__all__ = ["MixtureScorer", "YINGYANG_CRITERIA", "check_candidates", "contains",
           "yingyang_selection"]

#: Candidates when none are given: k = 1 .. 6 (at most N).
DEFAULT_MAX_COMPONENTS = 6


def check_candidates(candidates, num, dim):
    """The mixture's candidates k as a tuple: integers 1 .. N, none repeated (default
    1 .. min(6, N))."""
    if candidates is None:
        return tuple(range(1, min(DEFAULT_MAX_COMPONENTS, num) + 1))
    return check_candidate_list(
        candidates, "integers", lambda c: check_positive_int(
            c, "candidates", maximum=num, why=" (the number of examples, rows of x)"))


def contains(candidates, size):
    """The smallest candidate k at least the surviving number of components."""
    return min((c for c in candidates if c >= size), default=None)


#: The YING-YANG criteria as :func:`inference.model_selection` names them -> their names
#: in :func:`inference.mixture.selection.compare_criteria` (and
#: :data:`inference.mixture.selection.CRITERIA`). BIC, AIC and PSIS-LOO on the YING-YANG
#: fits take a ``yy_`` prefix: model_selection's ``"bic"``, ``"aic"`` and ``"loo"`` are
#: other numbers (per example, higher is better, their own fits and keys).
YINGYANG_CRITERIA = {name: c for c, name in MODEL_SELECTION_NAMES.items()}



class MixtureScorer(Scorer):
    """Fits and scores of mixture candidates k for :func:`inference.model_selection`.

    The mixture counterpart of :class:`inference.mcvq.selection.MCVQScorer`: EM fits
    (best of ``num_restarts`` non-collapsed restarts, cached for the full data),
    their exact log-likelihood (y summed out) on training and held-out rows, BIC's
    parameter count, the VB bound of :func:`fit_vb_mixture`, NUTS for PSIS-LOO and
    WAIC, and the program of the reference evidence: ``ppl_models.mixture.model``
    with its priors (weights Dirichlet(1), means Normal(0, prior_scale), scales
    HalfNormal(prior_scale)) and the labels y summed out.

    Parameters
    ----------
    x : array (N, d)
    covariance : {"full", "diag", "spherical"}, optional
        Default ``"full"``.
    prior_scale : float, optional
        The program's prior scale for the reference evidence (default
        ``ppl_models.mixture.model``'s, 10): the evidence depends on it, so data on
        another scale should be standardised or this set to match.
    loo_options : dict, optional
        Keyword arguments of :func:`inference.mixture.baselines.mixture_loo` for the
        criterion ``"yy_loo"``, over model_selection's ``num_warmup``, ``num_samples`` and
        ``progress_bar``.
    """

    def __init__(self, x, *, num_restarts=3, fit_options=None, vb_options=None,
                 covariance=None, prior_scale=None, loo_options=None):
        covariance = "full" if covariance is None else covariance
        if covariance not in mixture.COVARIANCES:
            raise ValueError(f"covariance must be one of {mixture.COVARIANCES}; got "
                             f"{covariance!r}")
        if loo_options is not None and not isinstance(loo_options, dict):
            raise TypeError(f"loo_options must be a dict of mixture_loo's keyword arguments; "
                            f"got {loo_options!r}")
        super().__init__(check_data(x, "x"), num_restarts=num_restarts,
                         fit_options=fit_options, vb_options=vb_options)
        self.covariance = covariance
        self.prior_scale = prior_scale
        self.loo_options = loo_options
        self.yingyang_criteria = ()
        self.cache = {}
        self.unconverged_em = self.unconverged_vb = self.fits_em = self.fits_vb = 0
        self.collapsed = []

    def check_criteria(self, criteria):
        if "vb" in criteria and self.covariance == "spherical":
            raise ValueError("criterion 'vb' needs covariance 'full' or 'diag' "
                             "(fit_vb_mixture); got 'spherical'")

    def _em(self, k, x, key):
        """Best non-collapsed restart by training likelihood (None if all collapsed)."""
        best = None
        for restart_key in jax.random.split(key, self.num_restarts):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                # one start per call: the restarts are this loop's (best non-collapsed)
                options = {"num_restarts": 1, **self.fit_options}
                fit = fit_mixture(x, k, mode="stochastic", covariance=self.covariance,
                                  prune=False, rng_key=restart_key, **options)
            self.fits_em += 1
            self.unconverged_em += not fit.converged
            if not fit.collapsed and (best is None or fit.L_stocha < best.L_stocha):
                best = fit
        if best is None:
            self.collapsed.append(k)
            warnings.warn(f"model_selection: every restart of k={k} collapsed a component; "
                          "its score is -inf", NumericalWarning, stacklevel=4)
        return best

    def _score(self, fit, x):
        if fit is None:
            return -math.inf
        return -mixture_criteria(x, fit.weights, fit.means, fit.covariances,
                                 fit.covariance)["L_stocha"]

    def vb(self, k, key):
        best = None
        for restart_key in jax.random.split(key, self.num_restarts):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                fit = fit_vb_mixture(self.x, k, rng_key=restart_key, covariance=self.covariance,
                                     **self.vb_options)
            self.fits_vb += 1
            self.unconverged_vb += not fit.converged
            if best is None or fit.bound > best.bound:
                best = fit
        return best.bound / self.num, best.num_components, best

    def heldout(self, k, train, test, key):
        fit = self._em(k, self.x[train], key)
        if fit is None:
            return np.full(len(test), -np.inf)
        log_joint = component_log_joint(self.x[test], fit.weights, fit.means, fit.covariances,
                                        covariance=fit.covariance)
        return np.asarray(jax.nn.logsumexp(log_joint, axis=1))

    def train(self, k, key):
        if k not in self.cache:
            self.cache[k] = self._em(k, self.x, key)
        return self._score(self.cache[k], self.x)

    def num_parameters(self, k):
        return mixture_num_parameters(k, self.dim, self.covariance)

    def loo_reason(self, k, limit):
        if self.num > MAX_MCMC_EXAMPLES:
            return f"N = {self.num} > {MAX_MCMC_EXAMPLES} (fit_mixture_mcmc)"
        if k > MAX_MCMC_COMPONENTS:
            return f"k = {k} > {MAX_MCMC_COMPONENTS} (fit_mixture_mcmc)"
        if self.num * k * self.dim > limit:
            return f"N k d = {self.num * k * self.dim} > loo_max_size = {limit}"
        return None

    def loo(self, k, key, num_warmup, num_samples, progress_bar):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fit = fit_mixture_mcmc(self.x, k, rng_key=key, covariance=self.covariance,
                                   num_warmup=num_warmup, num_samples=num_samples,
                                   progress_bar=progress_bar)
        extra = "" if fit.converged else (f", not converged (R-hat {fit.r_hat:.3g}, "
                                          f"{fit.num_divergent} divergent)")
        return fit.to_inference_data(), extra

    def evidence_reason(self, k, limit):
        if self.num * k * self.dim > limit:
            return f"N k d = {self.num * k * self.dim} > evidence_max_size = {limit}"
        return None

    def evidence_program(self, k):
        kwargs = {"num_components": k, "covariance": self.covariance}
        if self.prior_scale is not None:
            kwargs["prior_scale"] = self.prior_scale
        return mixture.model, (self.x,), kwargs

    def yingyang(self, candidates, criteria, rng_key, nuts, step):
        """The YING-YANG criteria (:data:`YINGYANG_CRITERIA`' keys) of the candidates by
        :func:`yingyang_selection`, from ``rng_key`` itself; ``nuts`` is model_selection's
        (num_warmup, num_samples, progress_bar), used by ``"yy_loo"`` under
        ``loo_options``."""
        num_warmup, num_samples, progress_bar = nuts
        loo_options = {"num_warmup": num_warmup, "num_samples": num_samples,
                       "progress_bar": progress_bar, **(self.loo_options or {})}
        self.yingyang_criteria = tuple(criteria)
        inner = [YINGYANG_CRITERIA[c] for c in criteria]
        names = {YINGYANG_CRITERIA[c]: c for c in criteria}
        results = yingyang_selection(self.x, candidates, inner, covariance=self.covariance,
                                     rng_key=rng_key, num_restarts=self.num_restarts,
                                     loo_options=loo_options, fit_options=self.fit_options,
                                     names=names, step=step)
        return {c: results[YINGYANG_CRITERIA[c]]._replace(criterion=c) for c in criteria}

    def notes(self, scored):
        out = ["cv/train/bic: exact mixture log-likelihood (y summed out) of EM fits "
               "(prune=False)"] if scored else []
        if self.yingyang_criteria:
            out.append(f"{', '.join(self.yingyang_criteria)}: the YING-YANG criteria as "
                       "compare_criteria computes them (lower is better; one fit_mixture per "
                       "mode, k and restart, prune=False, keys split from rng_key per k; the "
                       "choice is the least value)")
        if self.collapsed:
            out.append(f"every restart collapsed for k in {sorted(set(self.collapsed))}")
        if self.unconverged_em:
            out.append(f"{self.unconverged_em} of {self.fits_em} fit_mixture calls did not "
                       "converge")
        if self.unconverged_vb:
            out.append(f"{self.unconverged_vb} of {self.fits_vb} fit_vb_mixture runs did not "
                       "converge")
        return out
