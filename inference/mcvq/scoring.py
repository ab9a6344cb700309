"""Scoring an MCVQ fit (:mod:`ppl_models.mcvq`) alike for every learner.

The same measures for every learner (``inference.mcvq.compare``, benchmarks/mcvq.py):

* :func:`exact_log_likelihood`: log p(x^c | mu, sigma, a, b) of the per-example
  program for every example, r and s summed out by enumeration (J^K joint
  states per example): the common quality measure, on training and held-out data;
* :func:`fit_variational`: the best factorised (g, m) for fixed parameters by
  coordinate ascent (the E-step and the g-step of sec. 3 at T = N), for the
  ELBO -F / N of a learner that has no guide of its own;
* :func:`score_mcvq`: both log-likelihoods, the ELBO -F / N of given (g, m), and
  the reconstruction RMS of held-out data (sec. 3: x_hat = sum_k g_dk sum_j
  m_kj mu_dkj with m inferred for the held-out examples).

Cost and limit: enumerating r and s costs about J^K K terms per example and
dimension (the log-density of x for every joint value of (r_d, s_0 .. s_{K-1}));
``MAX_ENUMERATED_TERMS`` bounds J^K K and ``MAX_ENUMERATED_CELLS`` bounds
N D J^K K (memory of one loss evaluation); larger problems raise ValueError.

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003, sec. 2-3.
"""

from __future__ import annotations

import itertools
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference.mcvq import core
from inference.mcvq import em as mcvq_fit
from ppl_models.validation import check_positive_int

__all__ = ["exact_log_likelihood", "exact_log_likelihood_batched", "fit_variational",
           "score_mcvq", "check_enumerable", "check_scored_inputs", "MCVQScore",
           "MAX_ENUMERATED_TERMS", "MAX_ENUMERATED_CELLS"]

#: Largest J^K K (terms per example and dimension) the enumerating baselines accept.
MAX_ENUMERATED_TERMS = 4096
#: Largest N D J^K K (numbers in one loss evaluation, ~4 bytes each in float32,
#: times a few for the gradient) they accept: 2^26, about 0.25 GB per copy.
MAX_ENUMERATED_CELLS = 1 << 26


def check_enumerable(num_examples: int, dim: int, num_vqs: int, num_states: int,
                     caller: str = "fit_mcvq_svi") -> int:
    """Raise ValueError when enumerating r and s is beyond the limits; return J^K K.

    The limits are ``MAX_ENUMERATED_TERMS`` on J^K K and ``MAX_ENUMERATED_CELLS``
    on N D J^K K (module docstring).
    """
    terms = num_states ** num_vqs * num_vqs
    if terms > MAX_ENUMERATED_TERMS:
        raise ValueError(f"{caller}: num_states ** num_vqs * num_vqs = {num_states}^{num_vqs} * "
                         f"{num_vqs} = {terms} enumerated terms per example and dimension "
                         f"exceeds {MAX_ENUMERATED_TERMS}; lower num_vqs or num_states "
                         "(use inference.fit_mcvq for larger models)")
    cells = num_examples * dim * terms
    if cells > MAX_ENUMERATED_CELLS:
        raise ValueError(f"{caller}: num_examples * dim * num_states ** num_vqs * num_vqs = "
                         f"{num_examples} * {dim} * {terms} = {cells} exceeds "
                         f"{MAX_ENUMERATED_CELLS}; use fewer examples (x has {num_examples})")
    return terms


def _state_configs(num_vqs, num_states):
    """Every joint state (s_0 .. s_{K-1}), (J^K, K) int32."""
    return np.array(list(itertools.product(range(num_states), repeat=num_vqs)), np.int32)


@partial(jax.jit, static_argnames=("batch_size",))
def exact_log_likelihood_batched(x, mask, mu, sigma, a, b, batch_size):
    """:func:`exact_log_likelihood` without the checks, ``batch_size`` examples at a time
    (``lax.map``); x with 0 where ``mask`` is False, a and b arrays. Jitted, (N,)."""
    num_vqs, num_states = mu.shape[1:]
    configs = jnp.asarray(_state_configs(num_vqs, num_states))  # (S, K)
    log_prior_s = jnp.sum(jnp.log(b)[jnp.arange(num_vqs), configs], axis=-1)  # (S,)
    vqs = jnp.arange(num_vqs)

    def one(args):
        xc, maskc = args
        ell = mcvq_fit.likelihood_terms(xc[None], maskc[None], mu, sigma)[0]  # (D, K, J)
        joint = jnp.log(a)[:, :, None] - ell  # log a_dk + log N(x_d; mu_dkj, sigma_dkj)
        per_config = joint[:, vqs, configs]  # (D, S, K): k's term at s_k
        # A missing x_d has ell = 0, so its term is log sum_k a_dk = 0.
        log_x_given_s = jnp.sum(jax.nn.logsumexp(per_config, axis=-1), axis=0)  # (S,)
        return jax.nn.logsumexp(log_prior_s + log_x_given_s)

    return jax.lax.map(one, (x, mask), batch_size=batch_size)


def check_scored_inputs(x, mask, mu, a, b, name="x"):
    """x (checked against mu's D, missing entries zeroed, mu's dtype), the mask and the
    selection priors a, b (uniform when None) of the scoring functions."""
    dim, num_vqs, num_states = jnp.shape(mu)
    x, mask = core.check_observed(x, mask, name, dim=dim)
    a, b = core.priors(a, b, dim, num_vqs, num_states, mu.dtype)
    return jnp.asarray(x, mu.dtype), mask, a, b


def exact_log_likelihood(x, mu, sigma, *, mask=None, a=None, b=None):
    """log p(x^c | mu, sigma, a, b) of the per-example program, r and s summed out, (N,).

    log p(x^c) = log sum_s prod_k b_{k s_k} prod_d sum_k a_dk N(x^c_d; mu_{d k s_k},
    sigma_{d k s_k}) over the J^K joint states s (Ross and Zemel (2003), sec. 2); the Gaussian
    terms are read from the program (:func:`inference.mcvq.em.likelihood_terms`).
    Missing entries (``mask`` False; any value, NaN included) drop out. The
    exact likelihood that :func:`fit_mcvq_svi` maximises, and an upper bound on
    the ELBO -F / N of any (g, m).

    Parameters
    ----------
    x : array (N, D)
    mu, sigma : arrays (D, K, J)
    mask : bool array (N, D), optional
    a : array (D, K), optional
    b : array (K, J), optional
        Selection priors (uniform by default).

    Returns
    -------
    array (N,)
    """
    mu, sigma = jnp.asarray(mu), jnp.asarray(sigma)
    if mu.ndim != 3 or sigma.shape != mu.shape:
        raise ValueError(f"mu and sigma must have the same shape (D, K, J); got {mu.shape} and "
                         f"{sigma.shape}")
    x, mask, a, b = check_scored_inputs(x, mask, mu, a, b)
    num_vqs, num_states = mu.shape[1:]
    terms = num_states ** num_vqs * num_vqs
    if terms > MAX_ENUMERATED_TERMS:
        raise ValueError(f"exact_log_likelihood: num_states ** num_vqs * num_vqs = {terms} "
                         f"exceeds {MAX_ENUMERATED_TERMS} (mu has shape {mu.shape})")
    batch = max(1, min(x.shape[0], (1 << 22) // max(x.shape[1] * terms, 1)))
    return exact_log_likelihood_batched(x, mask, mu, sigma, a, b, batch)


@jax.jit
def _coordinate_ascent(x, mask, mu, sigma, a, b, g, max_iterations):
    ell = mcvq_fit.likelihood_terms(x, mask, mu, sigma)
    temperature = x.shape[0]

    def body(_, g):
        m = core.reference_e_step(ell, g, b)
        return core.reference_g_step(ell, m, a, temperature)

    g = jax.lax.fori_loop(0, max_iterations, body, g)
    return g, core.reference_e_step(ell, g, b)


def fit_variational(x, mu, sigma, *, mask=None, a=None, b=None, g=None,
                    max_iterations: int = 50):
    """The factorised (g, m) for fixed mu, sigma: E-steps and g-steps at T = N (sec. 3).

    Each step is the exact block minimiser of F_N (:mod:`inference.mcvq.core`) with mu,
    sigma held, so -F_N / N rises monotonically to a local optimum. Used to
    give the ELBO of a learner without a guide of its own (``fit_mcvq_svi``).

    Parameters
    ----------
    x : array (N, D)
    mu, sigma : arrays (D, K, J)
    mask, a, b : optional, as in :func:`exact_log_likelihood`
    g : array (D, K), optional
        Start (default: a).
    max_iterations : int
        Sweeps of an E-step and a g-step; all of them run (no convergence test, so no
        ``tol``).

    Returns
    -------
    (g, m) : arrays (D, K), (N, K, J)

    Examples
    --------
    >>> import jax
    >>> from ppl_models import mcvq
    >>> data = mcvq.generate(jax.random.key(2), num_examples=60, dim=9, num_vqs=3,
    ...                      num_states=3)
    >>> g, m = fit_variational(data.x, data.mu, data.sigma)  # the planted mu, sigma
    >>> g.shape, m.shape
    ((9, 3), (60, 3, 3))
    >>> bool((g.argmax(axis=1) == data.r).all())  # the planted partition of the dimensions
    True
    """
    mu, sigma = jnp.asarray(mu), jnp.asarray(sigma)
    if mu.ndim != 3:
        raise ValueError(f"mu must have shape (D, K, J); got shape {mu.shape}")
    if sigma.shape != mu.shape:
        raise ValueError(f"sigma must have the shape of mu {mu.shape}; got {sigma.shape}")
    x, mask, a, b = check_scored_inputs(x, mask, mu, a, b)
    max_iterations = check_positive_int(max_iterations, "max_iterations")
    g = a if g is None else jnp.asarray(g, mu.dtype)
    if g.shape != a.shape:
        raise ValueError(f"g must have shape {a.shape}; got {g.shape}")
    return _coordinate_ascent(x, mask, mu, sigma, a, b, g, max_iterations)


class MCVQScore(NamedTuple):
    """The common quality measures of an MCVQ fit (:func:`score_mcvq`).

    Attributes
    ----------
    train_log_likelihood : float
        (1/N) sum_c log p(x^c | mu, sigma) on the training data, exact
        (:func:`exact_log_likelihood`): the common yardstick, higher is better.
    heldout_log_likelihood : float
        The same on held-out data (nan when none given).
    elbo : float
        -F_N / N (:func:`inference.mcvq.em.free_energy`, T = N) at the given
        (g, m) on the training data: the per-example ELBO of the factorised
        guide, at most ``train_log_likelihood``.
    heldout_rms : float
        Root mean square of x - x_hat over the observed held-out entries, x_hat =
        sum_k g_dk sum_j m_kj mu_dkj with m of the held-out examples from one
        E-step at the fitted parameters (:func:`inference.mcvq.em.infer_states`);
        nan without held-out data.
    """

    train_log_likelihood: float
    heldout_log_likelihood: float
    elbo: float
    heldout_rms: float


def score_mcvq(x, g, m, mu, sigma, *, mask=None, x_heldout=None, mask_heldout=None, a=None,
               b=None) -> MCVQScore:
    """Score a fit alike for every learner (module docstring; :class:`MCVQScore`).

    Parameters
    ----------
    x : array (N, D)
        Training data.
    g : array (D, K)
    m : array (N, K, J)
        The factorised guide at which the ELBO is evaluated.
    mu, sigma : arrays (D, K, J)
    mask : bool array (N, D), optional
    x_heldout : array (N_heldout, D), optional
    mask_heldout : bool array (N_heldout, D), optional
    a, b : optional
        Selection priors (uniform by default).
    """
    mu, sigma = jnp.asarray(mu), jnp.asarray(sigma)
    x, mask, a, b = check_scored_inputs(x, mask, mu, a, b)
    num = x.shape[0]
    train = float(jnp.mean(exact_log_likelihood(x, mu, sigma, mask=mask, a=a, b=b)))
    elbo = -float(mcvq_fit.free_energy(x, g, m, mu, sigma, mask=mask, a=a, b=b,
                                       temperature=num)) / num
    heldout = rms = float("nan")
    if x_heldout is not None:
        xh, mh, _, _ = check_scored_inputs(x_heldout, mask_heldout, mu, a, b, "x_heldout")
        heldout = float(jnp.mean(exact_log_likelihood(xh, mu, sigma, mask=mh, a=a, b=b)))
        m_heldout = core.infer(xh, mh, g, mu, sigma, b)
        residual = jnp.where(mh, xh - mcvq_fit.reconstruct(g, m_heldout, mu), 0.0)
        rms = float(jnp.sqrt(jnp.sum(residual ** 2) / jnp.sum(mh)))
    return MCVQScore(train, heldout, elbo, rms)

