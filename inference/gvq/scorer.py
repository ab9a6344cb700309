"""Scoring GVQ candidates (the number of features n) for model selection.

Used by :func:`inference.model_selection` (``model="gvq"``). The fit of a candidate is
EM in the sigma -> 0 limit (:func:`inference.fit_gvq`, best of ``num_restarts``
starts); the model it is scored as is the finite-noise program
:func:`ppl_models.gvq.model` at the learned features F,

    s_i ~ Bernoulli(1/2),   x ~ Normal(s F, sigma^2 I_d),

with the paper's prior p_i = 1/2 (not fitted: no parameters of its own) and sigma
fitted to the data by maximum *marginal* likelihood at fixed F (a 1-D bounded Brent
search on log sigma, :func:`ml_noise`), unless the family option ``noise`` fixes it.
Its log-likelihood per example sums all 2^n states exactly
(:func:`log_likelihood`, a log-sum-exp over the states), which is affordable for
n <= :data:`MAX_FEATURES` (12: 4096 states per example).

Criteria: ``"cv"`` (the same model fitted on the training folds, sigma included),
``"train"``, ``"bic"`` and ``"aic"`` with p = n d + 1 (F and sigma; n d with a fixed
``noise``), ``"loo"`` and ``"waic"`` from NUTS on F (:func:`inference.gvq.baselines_mcmc.
fit_gvq_mcmc`, the units summed out, started at the EM features, sigma plugged in from
the full-data fit: every left-out example helped choose sigma, a one-number
approximation), and ``"evidence"``: the Bayesian program with F ~ Normal(0,
feature_scale) integrated by tempered SMC started from Gaussians at the posterior's
modes next to the EM fit (:mod:`inference.gvq.evidence_reference`; from F's wide prior
the runs settle in poor modes), the units enumerated (``split_states``),
and sigma *fixed at one value for every candidate*, so that the evidences are
comparable: ``noise`` when given, else the ML sigma of the full-data fit of the largest
candidate (the least-biased noise estimate among the candidates: a candidate with too
few features inflates its residual).

Two properties to read the table by. ``"train"`` need not grow with n: with p_i = 1/2
fixed, a model with a spare feature is not the smaller model nested in it (the spare
unit keeps half of the prior mass on codebook vectors the data do not use; measured on
planted data, 0.03 to 0.3 nats per example below the planted n). And
every value rests on EM's local search: a start stuck in a poor optimum lowers its
candidate's scores (with 60 examples and 3 starts, the planted n = 2 once lost to n = 3
by BIC that way; 4 starts, fit_gvq's default, found it), so ``num_restarts >= 4`` is
advised. In PSIS-LOO an example explained by the all-off state (codebook vector 0,
whatever F) has the same log-likelihood at every draw, for which arviz reports a Pareto
k of inf although its leave-one-out term is exact.

References
----------
M. Westerdijk, D. Barber and W. Wiegerinck, "Deterministic generative models for fast
feature discovery", Data Mining and Knowledge Discovery 5(4), 2001, sec. 3 (GVQ as the
sigma -> 0 limit of the cooperative vector quantiser).
G. Schwarz, "Estimating the dimension of a model", Annals of Statistics 6, 1978 (BIC).
"""

from __future__ import annotations

import functools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import minimize_scalar

from inference.engine.selection import Scorer, check_candidate_list
from inference.gvq.baselines_mcmc import MAX_MCMC_FEATURES, fit_gvq_mcmc
from inference.gvq.em import fit_gvq
from ppl_models import gvq
from ppl_models.diagnostics import ConvergenceWarning
from ppl_models.distributions import binary_states, state_log_prior
from ppl_models.validation import check_data, check_positive, check_positive_int

__all__ = ["GVQScorer", "check_candidates", "log_likelihood", "ml_noise", "num_parameters",
           "MAX_FEATURES", "DEFAULT_MAX_FEATURES"]

#: Largest candidate n: the exact likelihood and fit_gvq's exact association visit all
#: 2^n states of every example (4096 at n = 12: N 4096 d numbers per pass over x).
MAX_FEATURES = 12
#: Default candidates: n = 1 .. min(8, d).
DEFAULT_MAX_FEATURES = 8
#: Numbers (rows x states x dim) per block of the likelihood's differences.
BLOCK_SIZE = 1 << 22
#: fit_gvq options that change the model away from the plain program scored here.
UNSCORED_OPTIONS = ("num_sets", "sparsity", "binary", "beta", "model", "model_kwargs", "latent",
                    "init_features")


def check_candidates(candidates, num, dim):
    """GVQ's candidates n as a tuple: integers 1 .. :data:`MAX_FEATURES`, none repeated
    (default 1 .. min(8, d))."""
    if candidates is None:
        return tuple(range(1, min(DEFAULT_MAX_FEATURES, dim) + 1))
    return check_candidate_list(
        candidates, "integers (numbers of features)", lambda c: check_positive_int(
            c, "candidates", maximum=MAX_FEATURES,
            why=" (the exact likelihood sums 2^n binary states per example)"))


def num_parameters(num_features: int, dim: int, noise_fitted: bool = True) -> int:
    """p of BIC and AIC: n d entries of F, plus sigma when it is fitted.

    >>> num_parameters(3, 8)
    25
    """
    return num_features * dim + int(noise_fitted)


@functools.partial(jax.jit, static_argnames="rows")
def _blocks(x, codebook, log_prior, rows):
    """(log sum_s p(s) exp(-|x_c - s F|^2 / 2), min_s |x_c - s F|^2) of every row, (N,) each
    (x padded to a multiple of ``rows``); the first at sigma = 1 after x and F are divided
    by sigma."""

    def block(xb):
        sq = jnp.sum(jnp.square(xb[:, None, :] - codebook[None]), axis=-1)   # (rows, S)
        return jax.nn.logsumexp(log_prior - 0.5 * sq, axis=-1), jnp.min(sq, axis=-1)

    out = jax.lax.map(block, x.reshape(-1, rows, x.shape[1]))
    return out[0].reshape(-1), out[1].reshape(-1)


def _prepare(x, features, prior_probs):
    """(x padded to whole blocks, codebook s F of every state, log p(s), rows per block)."""
    states = jnp.asarray(binary_states(int(features.shape[0])), x.dtype)
    rows = max(1, min(x.shape[0], BLOCK_SIZE // (states.shape[0] * x.shape[1])))
    pad = -x.shape[0] % rows
    padded = jnp.concatenate([x, jnp.zeros((pad, x.shape[1]), x.dtype)]) if pad else x
    return (padded, states @ jnp.asarray(features, x.dtype), state_log_prior(states, prior_probs),
            rows)


def _evaluate(prepared, sigma, num):
    """:func:`_blocks` at noise ``sigma`` of the first ``num`` rows: (log-sum-exp of
    log p(s) - |x - s F|^2 / (2 sigma^2), min_s |x - s F|^2)."""
    padded, codebook, log_prior, rows = prepared
    scale = 1.0 / float(sigma)
    lse, nearest = _blocks(padded * scale, codebook * scale, log_prior, rows)
    return lse[:num], nearest[:num] * float(sigma) ** 2


def log_likelihood(x, features, sigma, prior_probs=0.5):
    """log p(x_c | F, sigma) of the finite-noise GVQ program per example, every state summed.

    log p(x_c) = log sum_s p(s) N(x_c; s F, sigma^2 I_d), the 2^n states enumerated
    exactly (log-sum-exp), in blocks of rows.

    Parameters
    ----------
    x : array (N, d)
    features : array (n, d)
    sigma : float
        Observation noise standard deviation (> 0).
    prior_probs : float or array (n,)
        Bernoulli prior of every unit (default the paper's 1/2).

    Returns
    -------
    array (N,)
    """
    x = check_data(x, "x")
    features = check_data(features, "features", dim=x.shape[1])
    check_positive(sigma, "sigma")
    check_positive_int(int(features.shape[0]), "features.shape[0]", maximum=MAX_FEATURES,
                       why=" (2^n states are summed)")
    lse, _ = _evaluate(_prepare(x, features, prior_probs), sigma, x.shape[0])
    return lse - 0.5 * x.shape[1] * math.log(2 * math.pi * float(sigma) ** 2)


def ml_noise(x, features, prior_probs=0.5) -> float:
    """The maximum-marginal-likelihood sigma at fixed features (the states summed out).

    A bounded Brent search (``scipy.optimize.minimize_scalar``) on log sigma within
    [sigma_0 / e^5, sigma_0 e^3], sigma_0^2 the mean squared residual per coordinate
    at the nearest states (the hard-assignment estimate), floored at 1e-4 times the
    data's root mean square so that an exact fit (N <= 2^n) stays finite.
    """
    x = check_data(x, "x")
    features = check_data(features, "features", dim=x.shape[1])
    prepared = _prepare(x, features, prior_probs)
    num, dim = x.shape
    _, nearest = _evaluate(prepared, 1.0, num)
    floor = 1e-4 * float(jnp.sqrt(jnp.mean(jnp.square(x)))) + 1e-30
    sigma0 = max(math.sqrt(float(jnp.mean(nearest)) / dim), floor)

    def objective(log_sigma):  # -sum log p(x_c), its constant log(2 pi) terms dropped
        lse, _ = _evaluate(prepared, math.exp(log_sigma), num)
        return -float(jnp.sum(lse)) + num * dim * log_sigma

    lo, hi = math.log(sigma0) - 5.0, math.log(sigma0) + 3.0
    lo = max(lo, math.log(floor))
    found = minimize_scalar(objective, bounds=(lo, hi), method="bounded",
                            options={"xatol": 1e-5})
    return math.exp(float(found.x))


class GVQScorer(Scorer):
    """Fits and scores of GVQ candidates n for :func:`inference.model_selection`.

    Full-data fits (features and sigma) are cached: ``"train"``, ``"bic"``, ``"aic"``,
    ``"loo"`` and ``"evidence"`` share them (module docstring for the model scored).

    Parameters
    ----------
    x : array (N, d)
    noise : float, optional
        Fix sigma for every criterion (then not counted as a parameter); default:
        maximum marginal likelihood per fit, and for ``"evidence"`` the ML sigma of
        the largest candidate's full-data fit.
    feature_scale : float, optional
        The prior standard deviation of F for ``"evidence"``, ``"loo"`` and
        ``"waic"`` (default the program's, 10): the evidence depends on it (Lindley's
        paradox), so data on another scale should be standardised or this set to match.
    """

    def __init__(self, x, *, num_restarts=3, fit_options=None, vb_options=None, noise=None,
                 feature_scale=None):
        x = check_data(x, "x")
        super().__init__(x, num_restarts=num_restarts, fit_options=fit_options,
                         vb_options=vb_options)
        given = sorted(set(self.fit_options) & set(UNSCORED_OPTIONS))
        if given:
            raise ValueError(f"fit options {given} change the model away from the plain GVQ "
                             "program that model_selection scores (x = s F + noise); drop them")
        self.noise = None if noise is None else float(check_positive(noise, "noise"))
        self.feature_scale = (None if feature_scale is None
                              else float(check_positive(feature_scale, "feature_scale")))
        self.cache = {}
        self.candidates = None
        self.evidence_noise = self.noise
        self.fits = self.unconverged = 0

    def set_candidates(self, candidates):
        self.candidates = tuple(candidates)

    def _fit(self, n, x, key):
        """(features, sigma) of the best of ``num_restarts`` EM starts on rows ``x``."""
        options = {"num_restarts": self.num_restarts, **self.fit_options}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fit = fit_gvq(x, n, rng_key=key, **options)
        self.fits += 1
        self.unconverged += not bool(fit.converged)
        sigma = self.noise if self.noise is not None else ml_noise(x, fit.features)
        return fit.features, sigma

    def _full(self, n, key):
        if n not in self.cache:
            self.cache[n] = self._fit(n, self.x, key)
        return self.cache[n]

    def train(self, n, key):
        features, sigma = self._full(n, key)
        return float(jnp.mean(log_likelihood(self.x, features, sigma)))

    def heldout(self, n, train, test, key):
        features, sigma = self._fit(n, self.x[train], key)
        return np.asarray(log_likelihood(self.x[test], features, sigma))

    def num_parameters(self, n):
        return num_parameters(n, self.dim, self.noise is None)

    def _program_kwargs(self):
        return {} if self.feature_scale is None else {"feature_scale": self.feature_scale}

    def loo_reason(self, n, limit):
        if n > MAX_MCMC_FEATURES:
            return f"n = {n} > {MAX_MCMC_FEATURES} (fit_gvq_mcmc)"
        size = self.num * self.dim * 2 ** n
        if size > limit:
            return f"N d 2^n = {size} > loo_max_size = {limit}"
        return None

    def loo(self, n, key, num_warmup, num_samples, progress_bar):
        fit_key, nuts_key = jax.random.split(key)
        features, sigma = self._full(n, fit_key)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fit = fit_gvq_mcmc(self.x, n, rng_key=nuts_key, noise=sigma, init_features=features,
                               num_warmup=num_warmup, num_samples=num_samples,
                               progress_bar=progress_bar, model_kwargs=self._program_kwargs())
        extra = "" if bool(fit.converged) else (
            f", not converged (largest R-hat {float(np.nanmax(fit.r_hat)):.3g}, "
            f"{fit.num_divergent} divergent)")
        return fit.to_inference_data(), extra

    def evidence_reason(self, n, limit):
        size = self.num * self.dim * 2 ** n
        if size > limit:
            return f"N d 2^n = {size} > evidence_max_size = {limit}"
        if self.evidence_noise is None and self.candidates is None:
            return ("the evidence's common sigma is the ML sigma of the largest candidate's "
                    "fit, unknown here: pass options={'noise': sigma} or score 'train' too")
        return None

    def _evidence_noise(self, key):
        if self.evidence_noise is None:
            self.evidence_noise = self._full(max(self.candidates), key)[1]
        return self.evidence_noise

    def evidence_program(self, n):
        if self.evidence_noise is None:
            raise ValueError("evidence_program needs the common sigma: call evidence(), or "
                             "give the scorer noise=")
        # sigma as an array is traced: a new data set's sigma reuses the compiled SMC
        kwargs = {"num_features": n, "sum_states": True,
                  "sigma": jnp.asarray(self.evidence_noise, jnp.asarray(self.x).dtype),
                  **self._program_kwargs()}
        return gvq.model, (self.x,), kwargs

    def evidence(self, n, rng_key, options):
        """Tempered SMC from a mixture of Gaussians at the posterior's modes near the EM
        fit and their permutations (:func:`inference.gvq.evidence_reference.
        mode_reference`), not from F's prior: from the prior the runs settle in modes
        thousands of nats below the fit."""
        from inference.gvq.evidence_reference import log_posterior, mode_reference
        from inference.program.densities import program_and_data
        from inference.program.evidence import log_evidence

        fit_key, smc_key = jax.random.split(rng_key)
        self._evidence_noise(fit_key)
        features = self._full(n, fit_key)[0]
        model, args, kwargs = self.evidence_program(n)
        program, data = program_and_data(model, args, kwargs, fit_key)
        reference = mode_reference(log_posterior(program.log_prior, program.log_likelihood),
                                   features, data=data)
        return log_evidence(model, *args, rng_key=smc_key, reference=reference,
                            **options, **kwargs)

    def notes(self, scored):
        out = []
        if scored:
            how = (f"sigma fixed at {self.noise:.4g}" if self.noise is not None
                   else "sigma by maximum marginal likelihood per fit")
            out.append("cv/train/bic/aic: exact log-likelihood of the finite-noise GVQ program "
                       f"(2^n states summed, prior 1/2) at fit_gvq's features, {how}")
        if self.evidence_noise is not None and self.noise is None:
            out.append(f"evidence: sigma fixed at {self.evidence_noise:.4g}, the ML sigma of "
                       "the largest candidate's full-data fit")
        if self.unconverged:
            out.append(f"{self.unconverged} of {self.fits} fit_gvq calls did not converge "
                       "(raise max_iterations)")
        return out
