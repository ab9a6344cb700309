"""Variational Bayes MCVQ with pruning of VQs and states: the mathematics (the "VB MCVQ"
of the slides of Ross and Zemel (2002)). The fit itself,
:func:`inference.mcvq.vb.fit_vb_mcvq`, drives these steps.

The program is ``ppl_models.mcvq.model(bayesian=True, shared_r=True)``: Gamma(a0, b0)
priors on the precisions tau_dkj = 1 / sigma_dkj^2, independent Normal(m0_d, 1 / beta0)
priors on the means mu_dkj, and fixed selection weights, alpha_k over the VQs (the
same for every dimension: ``a`` = alpha broadcast to (D, K)) and pi_kj over the
states of VQ k (``b`` = pi). Following Corduneanu & Bishop (2001), the selection
weights are point-estimated (type-II maximum likelihood) and the rest is
approximated by Q(mu, tau, R, S) with Q(R, S) the paper's g (D, K), shared by all
examples (the consistency constraint, as in ``inference.mcvq.em``), and m (N, K, J)
per example, and Normal and Gamma factors for every (d, k, j):

    Q(mu_dkj) = N(mean_dkj, 1 / lam_dkj),   Q(tau_dkj) = Gamma(shape_dkj, rate_dkj).

Family of Q (``conditional``). *Default, conditional*: the factors of VQ k in
dimension d are its posterior *given* r_d = k, and the prior otherwise,

    Q(r_d, mu_d, tau_d) = sum_k g_dk [r_d = k] prod_j Q(mu_dkj) Q(tau_dkj)
                          prod_{k' != k, j} p(mu_dk'j) p(tau_dk'j),

(mean-field between mu and tau, and between dimensions, examples and r, s; the
parameters of VQs that do not explain dimension d are not constrained by x_d,
so their exact posterior given r is the prior). *Factorised*
(``conditional=False``): the fully factorised Q(mu) Q(tau) Q(R, S).
Why the default: in the factorised family the data reach Q(mu_dk.) only with
weight g_dk, so a VQ that does not yet explain dimension d keeps the prior there,
explains x_d badly, and never wins it: g stays at its starting partition
(measured on ``generate(key(seed), 100, 12, 3, 4)`` from K = J = 6: the planted
partition in 0 of 8 seeds, 4-6 VQs surviving, against 6 of 8 and 3 VQs for the
conditional family). In the conditional family every VQ's factors are fitted to
every dimension (from the same unweighted (3, D, K, J) statistics
sum_c m^c_kj [o, o x, o x^2]_d that ``inference.mcvq.em``'s M-step uses), so a
dimension moves to the VQ that explains it best, and the bound charges each VQ
the KL of its factors only where it is selected, the Occam factor that removes
VQs and states. With

    E_Q[ell^c_dkj] = o^c_d (log(2 pi) / 2 - E[log tau] / 2
                            + E[tau] ((x^c_d)^2 - 2 x^c_d E[mu] + E[mu^2]) / 2),
    KL_dkj = KL(Q(mu_dkj) || p(mu_dkj)) + KL(Q(tau_dkj) || p(tau_dkj)),

the bound (at temperature T) is

    L_T(Q) = - sum_c KL(m^c || pi) - T sum_d KL(g_d || alpha)
             - sum_dk g_dk [sum_c sum_j m^c_kj E_Q[ell^c_dkj] + sum_j KL_dkj]    (conditional)

(factorised: the last sum is sum_dkj g_dk sum_c m^c_kj E_Q[ell^c_dkj] + sum_dkj KL_dkj),
maximised over Q and over alpha, pi. At T = 1, L_1 is the ELBO of Q under the
program (one r for all examples, so the g term counts once);
``tests/test_vb_mcvq.py`` checks it against NumPyro's ``Trace_ELBO`` with a guide
that samples r from g and then mu, tau from the factors above. E[ell] has the
same expanded form c + x beta + x^2 alpha as the likelihood terms of
``inference.mcvq.em`` (c = log(2 pi) / 2 - E[log tau] / 2 + E[tau] E[mu^2] / 2,
beta = -E[tau] E[mu], alpha = E[tau] / 2; PRML eq. 10.28-10.30 for the
expectations, B.27 and B.31 for the KL terms), so the E-step energies and the
statistics are the same (N, 3D) x (3D, K J) matrix products
(``inference.mcvq.core.energies``, ``_statistics``) and nothing of size N D K J is formed.

One :func:`step` does coordinate ascent on L_T, each update the exact maximiser in
its own block with the others fixed (PRML sec. 10.1.1, 10.1.3; Corduneanu & Bishop
sec. 3):

1. Q(tau_dkj) = Gamma(a0 + W / 2, b0 + (S2 - 2 S1 E[mu] + W E[mu^2]) / 2) and then
   Q(mu_dkj) = N((beta0 m0 + E[tau] S1) / lam, 1 / lam), lam = beta0 + E[tau] W,
   where [W, S1, S2]_dkj = sum_c m^c_kj [o, o x, o x^2]^c_d (conditional), times
   g_dk (factorised);
2. alpha_k = mean_d g_dk and pi_kj = mean_c m^c_kj (maximisers of L_T; T does not
   enter alpha's, since only the g term depends on it);
3. pruning: an active VQ with alpha_k < ``prune_threshold`` and an active state
   of an active VQ with pi_kj < ``prune_threshold`` are removed: weight 0, the
   others renormalised, Q(mu), Q(tau) of the removed slots reset to the prior
   (their KL terms vanish);
4. g_dk proportional to alpha_k exp(-(1/T) [sum_cj m^c_kj E[ell^c_dkj] + sum_j KL_dkj])
   (factorised: without the KL term), then
5. m^c_kj proportional to pi_kj exp(-sum_d g_dk E[ell^c_dkj]) (over active states),
   the statistics of the new m, and L_T at the new Q.

A removed VQ gets g_dk = 0 in step 4 and m^c_k = pi_k in step 5 (its energies are
all 0), a removed state m^c_kj = 0: they add nothing to L. So L_T never decreases
at a fixed temperature except through pruning, which removes a VQ or a state
carrying a fraction below ``prune_threshold`` of its weight; removing a slot of
weight exactly zero leaves L unchanged (tested). The result flags any decrease
beyond rounding in an iteration that pruned nothing (``monotone``).

Temperature (optional annealing, a *choice*). The default is T = 1 throughout:
L_1 is the ELBO, the quantity model selection compares. ``temperature_schedule``
accepts the annealing of ``inference.mcvq.em`` (e.g. ``inference.mcvq.em.linear_schedule``
from N - 1 to 1, the paper's sec. 3 schedule), which softens g early; the bound
trace is then L_T at each iteration's temperature, and convergence is only
declared at a constant temperature.

The state has a fixed size (``max_vqs`` x ``max_states`` slots with ``active``
masks), so :func:`init` and :func:`step` are pure and jittable and the driver
(:mod:`inference.mcvq.vb`) runs them on the engine (:mod:`inference.engine.loop`).
Missing entries (``mask`` False) drop out of every sum over c (Ross and Zemel (2003), sec. 5.2), as
in ``inference.mcvq.em``; x is centred per dimension on its observed mean internally
(m0 shifted with it), as there.

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization" (presentation slides),
University of Toronto, 2002: VB MCVQ, pruning VQs with
alpha_k ~ 0 and states with pi_kj ~ 0.
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003, sec. 3.
Corduneanu, A. and Bishop, C. M. (2001), "Variational Bayesian model selection for
mixture distributions", AISTATS, sec. 2-4 (factorised Q, type-II ML weights, pruning).
Bishop, C. M. (2006), Pattern Recognition and Machine Learning, sec. 10.1.3 and 10.2
(Normal and Gamma factors, their expectations and KL terms) and appendix B.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import digamma, gammaln

from inference.mcvq import core, em
from ppl_models.mcvq import MCVQPrior

__all__ = ["VBMCVQState", "VBMCVQInfo", "centred_prior", "update_parameters", "init", "step",
           "bound"]


class VBMCVQState(NamedTuple):
    """Fixed-size state of the VB iteration (K = ``max_vqs``, J = ``max_states`` slots).

    All arrays are in the centred coordinates x - shift (module docstring).

    Attributes
    ----------
    g : array (D, K)
        Q(r_d = k), 0 for removed VQs.
    m : array (N, K, J)
        Q(s^c_k = j), 0 for removed states.
    alpha : array (K,)
        VQ weights, 0 for removed VQs.
    pi : array (K, J)
        State weights, 0 for removed states.
    vq_active : bool array (K,)
    state_active : bool array (K, J)
    mean, precision : arrays (D, K, J)
        Q(mu_dkj) = N(mean, 1 / precision) (mean centred).
    shape, rate : arrays (D, K, J)
        Q(tau_dkj) = Gamma(shape, rate).
    stats : array (3, D, K, J)
        sum_c m^c_kj [o, o xc, o xc^2]^c_d of the current m (not weighted by g).
    bound : float
        L_T at this state (-inf before the first step).
    iteration : int
    all_pruned : bool
        A step would have removed every VQ, or every state of a VQ; it was not applied.
    """

    g: jax.Array
    m: jax.Array
    alpha: jax.Array
    pi: jax.Array
    vq_active: jax.Array
    state_active: jax.Array
    mean: jax.Array
    precision: jax.Array
    shape: jax.Array
    rate: jax.Array
    stats: jax.Array
    bound: jax.Array
    iteration: jax.Array
    all_pruned: jax.Array


class VBMCVQInfo(NamedTuple):
    """What one :func:`step` did.

    Attributes
    ----------
    bound : float
        L_T after the step.
    bound_change : float
        New minus previous bound.
    num_vqs : int
        Active VQs after the step.
    num_states : int array (K,)
        Active states of every slot (0 for removed VQs).
    pruned : bool
        The step removed a VQ or a state.
    temperature : float
    """

    bound: jax.Array
    bound_change: jax.Array
    num_vqs: jax.Array
    num_states: jax.Array
    pruned: jax.Array
    temperature: jax.Array


def centred_prior(prior: MCVQPrior, shift, dtype):
    """(m0 - shift) broadcast to (D, 1, 1), beta0, a0, b0 as arrays of ``dtype``."""
    mean = jnp.reshape(jnp.broadcast_to(jnp.asarray(prior.mean, dtype), shift.shape) - shift,
                       (-1, 1, 1))
    beta0 = 1.0 / jnp.square(jnp.asarray(prior.mean_scale, dtype))
    return mean, beta0, jnp.asarray(prior.shape, dtype), jnp.asarray(prior.rate, dtype)


def _natural(mean, precision, shape, rate):
    """(3, D, K, J): E_Q[ell] = o (c + xc beta + xc^2 alpha) (module docstring)."""
    e_tau = shape / rate
    e_log_tau = digamma(shape) - jnp.log(rate)
    e_mu2 = jnp.square(mean) + 1.0 / precision
    constant = 0.5 * (math.log(2.0 * math.pi) - e_log_tau + e_tau * e_mu2)
    return jnp.stack([constant, -e_tau * mean, 0.5 * e_tau])


def _kl_parameters(state, centred):
    """KL(Q(mu) || p(mu)) + KL(Q(tau) || p(tau)) per (d, k, j), (D, K, J) (PRML B.27, B.31)."""
    m0, beta0, a0, b0 = centred
    kl_mu = 0.5 * (beta0 * (1.0 / state.precision + jnp.square(state.mean - m0)) - 1.0
                   + jnp.log(state.precision / beta0))
    a, b = state.shape, state.rate
    kl_tau = ((a - a0) * digamma(a) - gammaln(a) + gammaln(a0) + a0 * (jnp.log(b) - jnp.log(b0))
              + a * (b0 - b) / b)
    return kl_mu + kl_tau


def _bound(state, natural, centred, temperature, conditional):
    """L_T from the statistics of m (module docstring)."""
    a = jnp.broadcast_to(state.alpha, state.g.shape)
    free = core.free_energy_from_statistics(state.stats, natural, state.g, state.m, a, state.pi,
                                temperature)
    kl = _kl_parameters(state, centred)
    if conditional:
        return -free - jnp.sum(state.g * jnp.sum(kl, axis=-1))
    return -free - jnp.sum(kl)


def update_parameters(state, centred, conditional):
    """Step 1: Q(tau) then Q(mu) from the statistics (weighted by g when factorised)."""
    m0, beta0, a0, b0 = centred
    stats = state.stats if conditional else state.stats * state.g[None, :, :, None]
    weight, first, second = stats
    e_mu2 = jnp.square(state.mean) + 1.0 / state.precision
    spread = jnp.maximum(second - 2.0 * first * state.mean + weight * e_mu2, 0.0)
    shape = a0 + 0.5 * weight
    rate = b0 + 0.5 * spread
    e_tau = shape / rate
    precision = beta0 + e_tau * weight
    mean = (beta0 * m0 + e_tau * first) / precision
    return state._replace(mean=mean, precision=precision, shape=shape, rate=rate)


def _reset(state, keep, centred):
    """Slots (d, k, j) where ``keep`` (K, J) is False get Q(mu), Q(tau) equal to the prior."""
    m0, beta0, a0, b0 = centred
    keep = keep[None]
    full = state.mean.shape
    return state._replace(
        mean=jnp.where(keep, state.mean, jnp.broadcast_to(m0, full)),
        precision=jnp.where(keep, state.precision, beta0),
        shape=jnp.where(keep, state.shape, a0),
        rate=jnp.where(keep, state.rate, b0))


def step(state: VBMCVQState, x, mask, prior: MCVQPrior, prune_threshold, temperature,
         conditional: bool = True):
    """One VB iteration (module docstring, steps 1-5); pure and jittable, no key.

    Parameters
    ----------
    state : VBMCVQState
    x : array (N, D)
        Data with 0 where ``mask`` is False.
    mask : bool array (N, D)
    prior : MCVQPrior
    prune_threshold : float
        Active VQs with alpha_k, and active states with pi_kj, below it are removed
        (0 disables pruning).
    temperature : float
        T of the g update and of the bound (1: the ELBO).
    conditional : bool
        The family of Q (module docstring): Q(mu, tau | r) (default) or the fully
        factorised Q(mu) Q(tau) Q(R); static under ``jit``.

    Returns
    -------
    (VBMCVQState, VBMCVQInfo)
    """
    moments, shift = core.data_moments(x, mask)
    centred = centred_prior(prior, shift, x.dtype)
    # 1-2. Q(tau), Q(mu); type-II ML weights.
    new = update_parameters(state, centred, conditional)
    alpha = jnp.where(state.vq_active, jnp.mean(state.g, axis=0), 0.0)
    pi = jnp.where(state.vq_active[:, None], jnp.mean(state.m, axis=0), state.pi)
    pi = jnp.where(state.state_active, pi, 0.0)
    # 3. Pruning (not applied if it would leave no VQ, or a VQ without states).
    prune_vq = state.vq_active & (alpha < prune_threshold)
    vq_active = state.vq_active & ~prune_vq
    prune_state = state.state_active & vq_active[:, None] & (pi < prune_threshold)
    state_active = state.state_active & ~prune_state
    impossible = ~jnp.any(vq_active) | jnp.any(vq_active & ~jnp.any(state_active, axis=1))
    vq_active = jnp.where(impossible, state.vq_active, vq_active)
    state_active = jnp.where(impossible, state.state_active, state_active)
    alpha = jnp.where(vq_active, alpha, 0.0)
    alpha = alpha / jnp.sum(alpha)
    live = vq_active[:, None] & state_active
    pi = jnp.where(vq_active[:, None], jnp.where(state_active, pi, 0.0), pi)
    pi = pi / jnp.sum(pi, axis=1, keepdims=True)
    new = _reset(new, live, centred)
    # 4-5. g, then m, the statistics and the bound.
    natural = _natural(new.mean, new.precision, new.shape, new.rate)
    energy = jnp.sum(state.stats * natural, axis=(0, 3))  # (D, K): sum_cj m E[ell]
    if conditional:
        energy = energy + jnp.sum(_kl_parameters(new, centred), axis=-1)
    g = jax.nn.softmax(jnp.where(vq_active, jnp.log(alpha), -jnp.inf) - energy / temperature,
                       axis=-1)
    m = core.e_step(moments, natural, g, pi)
    m = jnp.where(state_active | ~vq_active[:, None], m, 0.0)
    new = new._replace(g=g, m=m, alpha=alpha, pi=pi, vq_active=vq_active,
                       state_active=state_active, stats=core.statistics(moments, m))
    value = _bound(new, natural, centred, temperature, conditional)
    pruned = jnp.any(vq_active != state.vq_active) | jnp.any(state_active != state.state_active)
    new = new._replace(bound=value, iteration=state.iteration + 1,
                       all_pruned=state.all_pruned | impossible)
    counts = jnp.where(vq_active, jnp.sum(state_active, axis=1), 0).astype(jnp.int32)
    info = VBMCVQInfo(value, value - state.bound, jnp.sum(vq_active).astype(jnp.int32), counts,
                      pruned, jnp.asarray(temperature, x.dtype))
    return new, info


def bound(x, mask, state: VBMCVQState, prior: MCVQPrior, temperature=1.0,
          conditional: bool = True):
    """L_T of ``state`` (its g, m, weights and Q(mu), Q(tau)); T = 1: the ELBO.

    Parameters
    ----------
    x : array (N, D)
        Data with 0 where ``mask`` is False.
    mask : bool array (N, D)
    state : VBMCVQState
    prior : MCVQPrior
    temperature : float
    conditional : bool
        The family of Q (:func:`step`).

    Returns
    -------
    float
    """
    moments, shift = core.data_moments(x, mask)
    state = state._replace(stats=core.statistics(moments, state.m))
    natural = _natural(state.mean, state.precision, state.shape, state.rate)
    return _bound(state, natural, centred_prior(prior, shift, x.dtype), temperature,
                  conditional)


def init(rng_key, x, mask, max_vqs: int, max_states: int, prior: MCVQPrior) -> VBMCVQState:
    """Initial state: the start of ``inference.mcvq.em.init`` (random partition g, m from
    states centred on random examples), uniform weights, Q(mu), Q(tau) at the prior.

    The first :func:`step` replaces Q(mu), Q(tau) from this g and m.

    Parameters
    ----------
    rng_key : jax.random key
    x : array (N, D)
        Data with 0 where ``mask`` is False.
    mask : bool array (N, D)
    max_vqs, max_states : int
        K and J slots (static).
    prior : MCVQPrior

    Returns
    -------
    VBMCVQState
    """
    dtype = x.dtype
    dim = x.shape[1]
    alpha = jnp.full(max_vqs, 1.0 / max_vqs, dtype)
    pi = jnp.full((max_vqs, max_states), 1.0 / max_states, dtype)
    _, shift = core.data_moments(x, mask)
    centred = centred_prior(prior, shift, dtype)
    floor = 1e-3 / centred[1]  # sigma^2 floor of the start: 1e-3 prior variances of the means
    start = em.init(rng_key, x, mask, max_vqs, max_states,
                    jnp.broadcast_to(alpha, (dim, max_vqs)), pi, floor)
    full = (dim, max_vqs, max_states)
    m0, beta0, a0, b0 = centred
    return VBMCVQState(
        g=start.g, m=start.m, alpha=alpha, pi=pi, vq_active=jnp.ones(max_vqs, bool),
        state_active=jnp.ones((max_vqs, max_states), bool),
        mean=jnp.broadcast_to(m0, full), precision=jnp.broadcast_to(beta0, full),
        shape=jnp.broadcast_to(a0, full), rate=jnp.broadcast_to(b0, full), stats=start.stats,
        bound=jnp.array(-jnp.inf, dtype), iteration=jnp.array(0, jnp.int32),
        all_pruned=jnp.array(False))
