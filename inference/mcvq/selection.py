"""The MCVQ side of :func:`inference.app.selection.model_selection`.

Scores one MCVQ candidate (K VQs of J states) on the log scale, per example,
higher is better, from the fits of :mod:`inference.mcvq.em` (the paper's
variational EM), :mod:`inference.mcvq.vb` (variational Bayes) and NumPyro's NUTS
on the Bayesian program:

* :func:`predictive_log_likelihood`: the predictive of an EM fit on (new) data,
  log p(x^c | mu, sigma, a = g, b = pi) with the fit's g (D, K) as the selection
  prior over VQs and its mean state usage pi_kj = (1/N) sum_c m^c_kj as the state
  prior, r and s summed out exactly
  (:func:`inference.mcvq.scoring.exact_log_likelihood`) when J^K K <=
  ``MAX_ENUMERATED_TERMS``; otherwise (``exact=False``) the variational lower
  bound of the same predictive with Q(r_d = k) = g_dk and the best Q(s) per
  example, which has the closed form

      log p(x^c) >= sum_k log sum_j pi_kj exp(- sum_d g_dk ell^c_dkj),
      ell^c_dkj = -log N(x^c_d; mu_dkj, sigma_dkj)

  (the KL(g || a) term vanishes with a = g; the E-step of sec. 3 for held-out
  examples with g fixed, :func:`inference.mcvq.em.infer_states`, maximises it), equal
  to the exact value when g is one-hot (tested);
* :func:`num_parameters`: the p of BIC;
* :func:`loo_inference_data`: NUTS on the Bayesian program's mu and tau with r
  fixed at the full-data fit's argmax g, the selection prior b fixed at its pi,
  and every s_k enumerated per example (funsor), and the pointwise
  log-likelihood of every draw for ``arviz.loo``.

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003, sec. 2-3.
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization" (presentation slides),
University of Toronto, 2002: VB MCVQ and model selection.
Schwarz (1978) for BIC.
Vehtari, Gelman and Gabry (2017), "Practical Bayesian model evaluation using
leave-one-out cross-validation and WAIC", Statistics and Computing 27.
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.contrib.funsor import config_enumerate

from inference.engine.inference_data import nuts_draws, to_inference_data
from inference.engine.mcmc import run_nuts
from inference.engine.selection import Scorer, check_candidate_list
from inference.mcvq import core, scoring
from inference.mcvq.em import fit_mcvq
from inference.mcvq.vb import check_covered, fit_vb_mcvq
from ppl_models import mcvq as program
from ppl_models.diagnostics import ConvergenceWarning
from ppl_models.validation import check_positive_int

__all__ = ["MCVQScorer", "check_candidates", "contains", "evidence_data", "enumerable",
           "factorised_log_evidence", "vq_blocks",
           "num_parameters", "state_usage", "predictive_log_likelihood",
           "fit_em", "fit_vb", "loo_size", "loo_inference_data"]


def enumerable(num_vqs: int, num_states: int) -> bool:
    """True when J^K K <= ``MAX_ENUMERATED_TERMS`` (the exact predictive is affordable)."""
    return num_states ** num_vqs * num_vqs <= scoring.MAX_ENUMERATED_TERMS


def num_parameters(dim: int, num_vqs: int, num_states: int) -> int:
    """Free parameters p of a (K, J) MCVQ for BIC: 2 D K J + K (J - 1) + D (K - 1).

    mu and sigma for every (d, k, j) (2 D K J), the state weights pi (K (J - 1)),
    and the selections g counted as D (K - 1): the predictive uses g as the
    selection prior a, one simplex row of K - 1 free numbers per dimension (a
    *choice*: at the fitted g, nearly one-hot, they act as D discrete choices
    among K, which BIC's Laplace argument does not cover; counting them keeps
    the penalty growing with K even when a VQ is left without dimensions).

    >>> num_parameters(12, 3, 3)
    246
    """
    return 2 * dim * num_vqs * num_states + num_vqs * (num_states - 1) + dim * (num_vqs - 1)


def state_usage(fit) -> jax.Array:
    """pi_kj = (1/N) sum_c m^c_kj of an EM fit, (K, J): the state prior of the predictive."""
    pi = jnp.mean(fit.m, axis=0)
    return pi / jnp.sum(pi, axis=-1, keepdims=True)


@jax.jit
def _bound(x, mask, g, mu, sigma, pi):
    """sum_k log sum_j pi_kj exp(-sum_d g_dk ell^c_dkj) per example (module docstring)."""
    moments, shift = core.data_moments(x, mask)
    energies = core.energies(moments, core.natural_parameters(mu, sigma, shift), g)  # (N, K, J)
    log_pi = jnp.where(pi > 0, jnp.log(jnp.where(pi > 0, pi, 1.0)), -jnp.inf)
    return jnp.sum(jax.nn.logsumexp(log_pi - energies, axis=-1), axis=-1)


def predictive_log_likelihood(fit, x, mask, *, exact: bool):
    """log p(x^c | mu, sigma, a = g, b = pi) of an EM fit per example, (N,) (module docstring).

    Parameters
    ----------
    fit : inference.mcvq.em.MCVQResult
        Fitted on the training data (its m gives pi).
    x : array (N, D)
        Data with 0 where ``mask`` is False.
    mask : bool array (N, D)
    exact : bool
        Enumerate r and s (needs :func:`enumerable`), or the lower bound.

    Returns
    -------
    array (N,)
    """
    pi = state_usage(fit)
    x = jnp.asarray(x, fit.mu.dtype)
    if exact:
        return scoring.exact_log_likelihood(x, fit.mu, fit.sigma, mask=mask, a=fit.g, b=pi)
    return _bound(x, jnp.asarray(mask), fit.g, fit.mu, fit.sigma, pi)


def fit_em(x, mask, num_vqs, num_states, rng_key, num_restarts, options):
    """``fit_mcvq`` with ``num_restarts`` starts, its ConvergenceWarning silenced (see
    ``converged``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return fit_mcvq(x, num_vqs, num_states, mask=mask, rng_key=rng_key,
                        num_restarts=num_restarts, **options)


def fit_vb(x, mask, num_vqs, num_states, rng_key, num_restarts, options):
    """The best bound of ``num_restarts`` runs of ``fit_vb_mcvq`` (keys split from
    ``rng_key``); returns (best fit, number of runs not converged)."""
    best, unconverged = None, 0
    keys = rng_key[None] if num_restarts == 1 else jax.random.split(rng_key, num_restarts)
    for key in keys:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fit = fit_vb_mcvq(x, num_vqs, num_states, mask=mask, rng_key=key, **options)
        unconverged += not fit.converged
        if best is None or fit.bound > best.bound:
            best = fit
    return best, unconverged


def loo_size(num_examples, dim, num_vqs, num_states) -> int:
    """N D J^K: numbers in one log-density evaluation with every s_k enumerated."""
    return num_examples * dim * num_states ** num_vqs


def _loo_model(x, mask, r, pi, prior):
    """The Bayesian, enumerable program with r conditioned (N, D) and b = pi fixed."""
    conditioned = handlers.condition(program.model, {"r": r})
    return conditioned(x, mask=mask, b=pi, bayesian=True, enumerable=True, prior=prior)


#: The program of :func:`loo_inference_data`, every s_k marked for parallel enumeration
#: (one object, the static program of the engine's compiled NUTS chain).
_LOO_MODEL = config_enumerate(_loo_model)


@functools.partial(jax.jit, static_argnames="batch_size")
def _pointwise(x, mask, mus, sigmas, a, b, batch_size):
    """exact_log_likelihood of every draw, (S, N)."""
    return jax.lax.map(lambda p: scoring.exact_log_likelihood_batched(x, mask, p[0], p[1], a, b,
                                                                      batch_size), (mus, sigmas))


def loo_inference_data(fit, x, mask, rng_key, *, num_warmup, num_samples, progress_bar):
    """NUTS on mu, tau of the Bayesian program, r = argmax g and b = pi of ``fit`` fixed.

    Every s_k is enumerated per example (NumPyro's NUTS sums enumerated
    discrete sites out through funsor); the chain starts at the fit's mu and
    tau = sigma^-2; the priors are ``ppl_models.mcvq.prior_from_data(x, mask)``.
    The pointwise log-likelihood of draw (mu, tau) is
    ``exact_log_likelihood(x, mu, tau^-1/2, a=one_hot(r), b=pi)``.
    *Approximation*: r and b are plugged in from the full-data fit rather than
    integrated, so every left-out example helped choose them.

    The chain is the engine's compiled NUTS chain (:func:`inference.engine.mcmc.run_nuts`),
    the data, r, pi and the priors its traced arguments, so a second call with the
    same shapes compiles nothing.

    Returns
    -------
    (arviz.InferenceData, number of divergent transitions)
        Built by ``arviz.from_numpyro``
        (:func:`inference.engine.inference_data.to_inference_data`): ``posterior``
        ("mu", "tau" over "dim", "vq", "state"), ``sample_stats`` (``diverging``,
        ``energy``, ...), ``log_likelihood`` ("x" per "example") and ``observed_data``
        ("x" and the plugged-in "r", over "example" and "dim").
    """
    dim, num_vqs, num_states = fit.mu.shape
    num = x.shape[0]
    x, mask, r, pi, prior = evidence_data(fit, x, mask)
    r_dims = r[0]
    start = {"mu": fit.mu, "tau": 1.0 / jnp.square(fit.sigma)}
    chains = run_nuts(_LOO_MODEL, rng_key[None], (x, mask, r, pi, prior), None,
                      jax.tree.map(lambda v: v[None], start), num_warmup=num_warmup,
                      num_samples=num_samples, progress_bar=progress_bar, desc="MCVQ NUTS")
    record = nuts_draws(chains, num_warmup, _LOO_MODEL, (x, mask, r, pi, prior), dims={
        "mu": ["dim", "vq", "state"], "tau": ["dim", "vq", "state"], "x": ["example", "dim"],
        "r": ["example", "dim"]})
    draws = {name: v[0] for name, v in record.samples.items()}
    divergent = int(np.sum(np.asarray(chains.diverging[0, num_warmup:])))
    a = jax.nn.one_hot(r_dims, num_vqs, dtype=fit.mu.dtype)
    terms = num_states ** num_vqs * num_vqs
    batch = max(1, min(num, (1 << 22) // max(dim * terms, 1)))
    pointwise = _pointwise(x, mask, draws["mu"], jax.lax.rsqrt(draws["tau"]), a, pi, batch)
    idata = to_inference_data(record, _LOO_MODEL, log_likelihood={"x": np.asarray(pointwise)[None]})
    return idata, divergent


def evidence_data(fit, x, mask):
    """The traced arguments (x, mask, r, pi, prior) of the conditioned Bayesian program
    (r = argmax g and b = pi of ``fit``; priors from the data), as
    :func:`loo_inference_data` runs it."""
    dim = fit.mu.shape[0]
    x = jnp.asarray(x, fit.mu.dtype)
    mask = jnp.asarray(mask)
    r = jnp.broadcast_to(jnp.argmax(fit.g, axis=1).astype(jnp.int32), (x.shape[0], dim))
    return x, mask, r, state_usage(fit), program.prior_from_data(x, mask)


def vq_blocks(r_dims, pi, num_vqs=None):
    """The VQs that explain some dimension, as (k, dims, states): with r fixed, the
    conditioned program's likelihood is a product over VQs of a J-state mixture on the
    VQ's own dimensions, and a VQ's parameters on other dimensions (and of states
    with pi_kj = 0) meet only their prior."""
    r_dims = np.asarray(r_dims)
    pi = np.asarray(pi)
    blocks = []
    for k in range(pi.shape[0] if num_vqs is None else num_vqs):
        dims = np.flatnonzero(r_dims == k)
        states = np.flatnonzero(pi[k] > 0)
        if dims.size and states.size:
            blocks.append((k, dims, states))
    return blocks


def factorised_log_evidence(x, mask, r_dims, pi, prior, *, rng_key, method: str = "tempered",
                            **options):
    """log p(x | r, pi) of the Bayesian MCVQ program with every dimension's VQ fixed
    (``r_dims``, (D,)) and the state prior fixed (``pi``, (K, J)), as the sum over
    VQs of each VQ's evidence on its own dimensions (:func:`vq_blocks`).

    Each VQ's term is :func:`inference.program.evidence.log_evidence` of the same
    program at K = 1 with the VQ's dimensions, its states with pi_kj > 0 (weights
    renormalised, which leaves them as they are) and the prior's m0 on those
    dimensions; so the cost grows with the sum of the J_k, not with J^K, and VQs of
    the same size share one compiled run. ``method="collapsed"`` estimates each term by
    :func:`inference.mcvq.collapsed.vq_log_evidence` instead (the parameters integrated,
    the states sampled example by example; exact on small problems, but biased low where
    the assignments of large weight are rare, as on noise-free images, unless its
    ``num_sweeps`` moves revise the early states: compare with
    :func:`inference.mcvq.collapsed.assignment_log_joint`). ``options`` go to the
    method's function. The repeats of the terms are independent: run i of the total is
    the sum of the terms' runs i (an unbiased estimate of the product of the terms'
    evidences), and the standard error is that of the summed runs.

    Returns
    -------
    inference.program.evidence.EvidenceResult
        Of the total (nats), with ``num_steps`` summed over the VQs.
    """
    from inference.mcvq.collapsed import vq_log_evidence
    from inference.program.evidence import EvidenceResult, log_evidence

    if method not in ("tempered", "collapsed"):
        raise ValueError(f"method must be 'tempered' or 'collapsed'; got {method!r}")
    x = jnp.asarray(x)
    mask = jnp.ones(x.shape, bool) if mask is None else jnp.asarray(mask)
    pi = np.asarray(pi, np.float64)
    blocks = vq_blocks(r_dims, pi)
    if not blocks:
        raise ValueError("factorised_log_evidence: no VQ explains a dimension")
    mean = jnp.asarray(prior.mean)
    results = []
    for i, (k, dims, states) in enumerate(blocks):
        weights = pi[k, states] / pi[k, states].sum()
        block_prior = prior._replace(mean=mean[dims] if mean.ndim else mean)
        key = jax.random.fold_in(rng_key, i)
        if method == "collapsed":
            results.append(vq_log_evidence(x[:, dims], weights, block_prior, rng_key=key,
                                           mask=mask[:, dims], **options))
            continue
        r = jnp.zeros((x.shape[0], dims.size), jnp.int32)
        results.append(log_evidence(
            _LOO_MODEL, x[:, dims], mask[:, dims], r, jnp.asarray(weights[None], x.dtype),
            block_prior, rng_key=key, **options))
    runs = np.sum([r.runs for r in results], axis=0)
    error = float(np.std(runs, ddof=1) / np.sqrt(len(runs)))
    steps = np.sum([r.num_steps for r in results], axis=0)
    acceptance = (float("nan") if method == "collapsed" else float(np.average(
        [r.acceptance for r in results],
        weights=[max(int(np.sum(r.num_steps)), 1) for r in results])))
    return EvidenceResult(float(np.mean(runs)), error, runs, steps, acceptance,
                          float(sum(r.seconds for r in results)),
                          all(r.converged for r in results))


def check_candidates(candidates, num, dim):
    """MCVQ's candidates as (K, J) pairs of positive integers, none repeated (default
    K = 1..4 times J = 2..4)."""
    if candidates is None:
        return tuple((k, j) for k in range(1, 5) for j in range(2, 5))

    def check_one(cand):
        if not isinstance(cand, tuple | list) or len(cand) != 2:
            raise TypeError(f"candidates for model='mcvq' must be (K, J) pairs; got {cand!r}")
        return (check_positive_int(cand[0], "candidates K"),
                check_positive_int(cand[1], "candidates J"))

    return check_candidate_list(candidates, "(K, J) pairs", check_one)


def contains(candidates, size):
    """The smallest (K, J) candidate with K and J at least a surviving (K, (J_1..J_K))."""
    fits = [c for c in candidates if c[0] >= size[0] and c[1] >= max(size[1])]
    return min(fits, default=None)


class MCVQScorer(Scorer):
    """Fits and scores of MCVQ candidates (K, J) for ``model_selection``; the full-data
    EM fits are cached (``"train"``, ``"bic"``, ``"loo"`` and ``"evidence"`` share them).

    The reference evidence is that of the Bayesian program of :func:`loo_inference_data`
    (mu and tau integrated, every s_k summed out) with the state weights pi of the
    full-data EM fit and *one* dimension assignment r shared by all examples (the
    program's ``shared_r``), whose prior gives each dimension's VQ probability 1/K.
    Summing r out would take K^D terms; the evidence here is the term of the fit's
    r = argmax g,

        log p(x, r | pi, K, J) = log p(x | r, pi) - D log K,

    a lower bound on that program's log evidence which favours a candidate by how well
    its fitted assignment explains the data, less what choosing the assignment costs.
    With r fixed the likelihood factorises over the VQs, so p(x | r, pi) is computed VQ
    by VQ (:func:`factorised_log_evidence`): no J^K enumeration.
    """

    def __init__(self, x, *, num_restarts=3, fit_options=None, vb_options=None, mask=None):
        x, mask = check_covered(x, mask)
        super().__init__(x, num_restarts=num_restarts, fit_options=fit_options,
                         vb_options=vb_options)
        self.mask = mask
        self.cache = {}
        self.exact = None
        self.unconverged_em = self.unconverged_vb = self.fits_em = self.fits_vb = 0

    def set_candidates(self, candidates):
        self.exact = all(enumerable(*c) for c in candidates)

    def _em(self, cand, x, mask, key):
        fit = fit_em(x, mask, *cand, key, self.num_restarts, self.fit_options)
        self.fits_em += 1
        self.unconverged_em += not fit.converged
        return fit

    def _exact(self, cand):
        return self.exact if self.exact is not None else enumerable(*cand)

    def vb(self, cand, key):
        fit, unconverged = fit_vb(self.x, self.mask, *cand, key, self.num_restarts,
                                              self.vb_options)
        self.fits_vb += self.num_restarts
        self.unconverged_vb += unconverged
        return fit.bound / self.num, (fit.num_vqs, fit.num_states), fit

    def heldout(self, cand, train, test, key):
        fit = self._em(cand, self.x[train], self.mask[train], key)
        return np.asarray(predictive_log_likelihood(
            fit, self.x[test], self.mask[test], exact=self._exact(cand)))

    def train(self, cand, key):
        if cand not in self.cache:
            self.cache[cand] = self._em(cand, self.x, self.mask, key)
        return float(jnp.mean(predictive_log_likelihood(
            self.cache[cand], self.x, self.mask, exact=self._exact(cand))))

    def num_parameters(self, cand):
        return num_parameters(self.dim, *cand)

    def loo_reason(self, cand, limit):
        size = loo_size(self.num, self.dim, *cand)
        if not enumerable(*cand):
            return f"J^K K = {cand[1] ** cand[0] * cand[0]} enumerated terms > 4096"
        if size > limit:
            return f"N D J^K = {size} > loo_max_size = {limit}"
        return None

    def loo(self, cand, key, num_warmup, num_samples, progress_bar):
        idata, divergent = loo_inference_data(
            self.cache[cand], self.x, self.mask, key, num_warmup=num_warmup,
            num_samples=num_samples, progress_bar=progress_bar)
        return idata, f", {divergent} divergent transition(s)" if divergent else ""

    def evidence_reason(self, cand, limit):
        size = self.num * self.dim * cand[1]
        if size > limit:
            return f"N D J = {size} > evidence_max_size = {limit}"
        return None

    def evidence_program(self, cand):
        return _LOO_MODEL, evidence_data(self.cache[cand], self.x, self.mask), {}

    def evidence(self, cand, rng_key, options):
        fit_key, smc_key = jax.random.split(rng_key)
        if cand not in self.cache:  # the fit whose r and pi condition the program
            self.train(cand, fit_key)
        x, mask, r, pi, prior = evidence_data(self.cache[cand], self.x, self.mask)
        result = factorised_log_evidence(x, mask, r[0], pi, prior, rng_key=smc_key, **options)
        log_prior_r = -self.dim * float(np.log(cand[0]))  # one shared r, uniform over K
        return result._replace(log_evidence=result.log_evidence + log_prior_r,
                               runs=result.runs + log_prior_r)

    def notes(self, scored):
        out = []
        if scored:
            out.append("cv/train/bic: exact predictive log p(x | mu, sigma, a=g, b=pi), r and s "
                       "summed out" if self.exact else
                       "cv/train/bic: variational lower bound of the predictive (some candidate "
                       "has J^K K > 4096, so every candidate uses the bound)")
        if self.unconverged_em:
            out.append(f"{self.unconverged_em} of {self.fits_em} fit_mcvq calls did not "
                       "converge (raise max_iterations)")
        if self.unconverged_vb:
            out.append(f"{self.unconverged_vb} of {self.fits_vb} fit_vb_mcvq runs did not "
                       "converge (raise vb_options max_iterations)")
        return out
