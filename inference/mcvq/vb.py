"""Variational Bayes MCVQ with pruning of VQs and states (slides seed 003; MODELS.md 4.4).

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
(``conditional=False``): the fully factorised Q(mu) Q(tau) Q(R, S) of the issue.
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
iterates with ``lax.while_loop``. Missing entries (``mask`` False) drop out of
every sum over c (seed 004 sec. 5.2), as in ``inference.mcvq.em``; x is centred per
dimension on its observed mean internally (m0 shifted with it), as there.

References
----------
Ross, slides "Multiple Cause Vector Quantization" (seed 003): VB MCVQ, pruning VQs
with alpha_k ~ 0 and states with pi_kj ~ 0.
Ross and Zemel, "Multiple Cause Vector Quantization", NIPS 2002 (seed 004), sec. 3.
Corduneanu, A. and Bishop, C. M. (2001), "Variational Bayesian model selection for
mixture distributions", AISTATS, sec. 2-4 (factorised Q, type-II ML weights, pruning).
Bishop, C. M. (2006), Pattern Recognition and Machine Learning, sec. 10.1.3 and 10.2
(Normal and Gamma factors, their expectations and KL terms) and appendix B.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import digamma, gammaln

from inference.engine import host
from inference.engine.loop import Algorithm, run, select
from inference.mcvq import core, em
from ppl_models import mcvq as program
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.mcvq import MCVQPrior
from ppl_models.validation import (
    MissingKeyError,
    check_fraction,
    check_positive_int,
    check_rng_key,
    check_tolerance,
)

__all__ = ["VBMCVQState", "VBMCVQInfo", "VBMCVQResult", "init", "step", "bound",
           "fit_vb_mcvq"]


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


class VBMCVQLoopInfo(NamedTuple):
    """One iteration as the engine records it: L_T (``objective``), the active VQs and
    states, whether the step pruned, and whether the loop stops (settled at an unchanged
    temperature, everything pruned, or a non-finite bound)."""

    objective: jax.Array
    num_vqs: jax.Array
    num_states: jax.Array
    pruned: jax.Array
    converged: jax.Array


def engine_step(rng_key, state: VBMCVQState, data, params, *, shard=None, conditional=True):
    """:func:`step` for the engine (:mod:`inference.engine.loop`).

    ``data`` is ``(x, mask)``; ``params`` ``(prior, prune_threshold, temperatures, tol,
    start)``: iteration ``state.iteration - start`` of this run uses that entry of
    ``temperatures``. It has converged when the relative change of the bound is at most
    ``tol`` at an unchanged temperature without pruning (the first iteration of a run
    never is).
    """
    del rng_key, shard  # deterministic, one device
    x, mask = data
    prior, prune_threshold, temperatures, tol, start = params
    t = state.iteration - start
    temperature = temperatures[t]
    new, info = step(state, x, mask, prior, prune_threshold, temperature, conditional)
    same = (t > 0) & (temperature == temperatures[jnp.maximum(t - 1, 0)])
    change = jnp.abs(info.bound_change) / jnp.maximum(jnp.abs(info.bound), 1.0)
    settled = same & ~info.pruned & (change <= tol)
    done = settled | new.all_pruned | ~jnp.isfinite(info.bound)
    return new, VBMCVQLoopInfo(info.bound, info.num_vqs, info.num_states, info.pruned, done)


def algorithm(conditional: bool) -> Algorithm:
    """The variational Bayes iteration as an engine algorithm (cached per ``conditional``)."""
    return Algorithm(engine_step, options=(("conditional", bool(conditional)),),
                     name="fit_vb_mcvq")


_init_jit = jax.jit(init, static_argnames=("max_vqs", "max_states"))


def _iterate(state, rng_key, x, mask, prior, prune_threshold, temperatures, max_iterations,
             tol, *, conditional, checkpoint=None):
    """Steps from ``state`` until convergence or ``max_iterations`` more iterations, on the
    engine. Returns the state and the traces (bound, VQs, states, pruned) of this run."""
    runs = run(algorithm(conditional), jax.tree.map(lambda leaf: leaf[None], state), (x, mask),
               (prior, prune_threshold, temperatures, tol, state.iteration),
               keys=rng_key[None], max_iterations=max_iterations, checkpoint=checkpoint)
    state, trace, _, _ = select(runs, 0)
    return state, [np.asarray(t) for t in trace[:4]]


class VBMCVQResult(NamedTuple):
    """Result of :func:`fit_vb_mcvq`: the surviving VQs only (k of them).

    States are kept in their J = ``max_states`` slots; removed ones have zero
    weight (``state_active`` False, pi and m 0) and Q equal to the prior.

    Attributes
    ----------
    num_vqs : int
        Surviving VQs k.
    num_states : tuple of int (k,)
        Surviving states of every surviving VQ.
    vq_index : int array (k,)
        Starting slots of the survivors.
    state_active : bool array (k, J)
    alpha : array (k,)
        Type-II ML VQ weights.
    pi : array (k, J)
        Type-II ML state weights.
    g : array (D, k)
        Q(r_d = k).
    m : array (N, k, J)
        Q(s^c_k = j).
    mean_mean, mean_precision : arrays (D, k, J)
        Q(mu_dkj) = N(mean_mean, 1 / mean_precision) (data coordinates).
    precision_shape, precision_rate : arrays (D, k, J)
        Q(tau_dkj) = Gamma(shape, rate).
    mu : array (D, k, J)
        E_Q[mu] (= ``mean_mean``).
    sigma : array (D, k, J)
        E_Q[tau]^-1/2, the expected standard deviation in the precision sense.
    bound : float
        L at the result (the ELBO when the last temperature is 1).
    bound_trace : array (num_iterations,)
        L_T after every iteration.
    temperature_trace : array (num_iterations,)
    num_vqs_trace : int array (num_iterations,)
        Active VQs after every iteration.
    num_states_trace : int array (num_iterations, max_vqs)
        Active states of every starting slot after every iteration (0 once removed).
    num_iterations : int
    converged : bool
        The relative bound change fell to ``tol`` at a constant temperature in an
        iteration that removed nothing.
    monotone : bool
        The bound never fell beyond rounding between iterations at the same
        temperature that removed nothing.
    prior : MCVQPrior
        The hyperparameters used (defaults filled in).
    num_moves : int
        Merge and refresh moves accepted (``moves=True``; ``inference.mcvq.vb_moves``).
    num_causes : int
        Surviving VQs with more than one active state. A one-state VQ has no
        latent choice: it is a constant term (e.g. for pixels that are the same in
        every image), not a cause.
    """

    num_vqs: int
    num_states: tuple
    vq_index: jax.Array
    state_active: jax.Array
    alpha: jax.Array
    pi: jax.Array
    g: jax.Array
    m: jax.Array
    mean_mean: jax.Array
    mean_precision: jax.Array
    precision_shape: jax.Array
    precision_rate: jax.Array
    mu: jax.Array
    sigma: jax.Array
    bound: float
    bound_trace: jax.Array
    temperature_trace: jax.Array
    num_vqs_trace: jax.Array
    num_states_trace: jax.Array
    num_iterations: int
    converged: bool
    monotone: bool
    prior: MCVQPrior
    num_moves: int
    num_causes: int


def _schedule(temperature_schedule, max_iterations):
    if temperature_schedule is None:
        return np.ones(max_iterations)
    temperatures = np.asarray(temperature_schedule, dtype=float)
    if temperatures.ndim == 0:
        temperatures = np.full(max_iterations, float(temperatures))
    if temperatures.ndim != 1 or temperatures.size < 1 or not np.all(
            np.isfinite(temperatures) & (temperatures > 0)):
        raise ValueError("temperature_schedule must be a positive number or a 1-D array of "
                         f"positive temperatures; got {temperature_schedule!r}")
    return temperatures


def check_covered(x, mask):
    """``inference.mcvq.em``'s checks of x and mask, and an observed entry in every row and column.

    Returns
    -------
    (x, mask) as ``inference.mcvq.core.check_observed`` returns them.
    """
    x, mask = core.check_observed(x, mask, "x")
    for axis, what in ((1, "example(s) (rows of x)"), (0, "dimension(s) (columns of x)")):
        empty = np.flatnonzero(~np.asarray(mask).any(axis=axis))
        if empty.size:
            raise ValueError(f"mask leaves {what} {empty[:10].tolist()} without any observed "
                             "entry; drop them")
    return x, mask


def _move_rounds(state, rng_key, x, mask, prior, threshold, tol, temperature, max_iterations,
                 move_steps, conditional, parts, temps, *, resume=None, on_round=None):
    """Searches for a bound-raising move and re-converges until none is found.

    Appends every continuation's traces to ``parts`` and ``temps``; its first
    iteration is flagged as a structural change (like a pruning) so that the
    monotonicity check skips the jump. Returns the state and the moves accepted.
    ``resume``: (key, first round, moves accepted) of a checkpoint; ``on_round``:
    called as ``on_round(state, key, next round, moves accepted)`` after every
    accepted move (the checkpoints of :func:`fit_vb_mcvq`).
    """
    from inference.mcvq import vb_moves as vb_mcvq_moves  # imports this module

    key = jax.random.fold_in(rng_key, 1)
    constant = jnp.full(core.bucket(max_iterations), temperature, x.dtype)
    num_moves, first = 0, 0
    if resume is not None:
        key, first, num_moves = resume
    for round_ in range(first, 4 * state.pi.shape[0]):
        key, sub = jax.random.split(key)
        best, _, _ = vb_mcvq_moves.search(state, sub, x, mask, prior, threshold,
                                          jnp.asarray(temperature, x.dtype),
                                          num_steps=move_steps, conditional=conditional)
        current = float(state.bound)
        if not float(best.bound) - current > float(tol) * max(abs(current), 1.0):
            break
        num_moves += 1
        state, part = _iterate(best._replace(iteration=state.iteration), rng_key, x, mask,
                               prior, threshold, constant, max_iterations, tol,
                               conditional=conditional)
        its = part[0].shape[0]
        part[3] = part[3].copy()
        part[3][0] = True
        parts.append(part)
        temps.append(np.full(its, temperature))
        if on_round is not None:
            on_round(state, key, round_ + 1, num_moves)
        if bool(state.all_pruned):
            break
    return state, num_moves


def _run_checkpointed(rng_key, x, mask, prior, threshold, padded, num_iterations, tol, *,
                      max_vqs, max_states, conditional, moves, max_iterations, move_steps,
                      checkpoint_path, checkpoint_every, resume_from, options):
    """The main loop, then the move rounds, with checkpoints (:mod:`inference.engine.checkpoint`).

    The main loop runs through :func:`inference.engine.checkpoint.run_chunks` (one chunk
    without checkpoint options); its checkpoints hold ``{"phase": "main"}`` beside the
    carry. The move rounds save ``{"phase": "moves", state, key, round, ...}``
    after every accepted move and ``"done"`` at the end. Returns ``(state, parts,
    temps, num_moves)``: the final state, the traces and temperatures per segment,
    and the moves accepted.
    """
    from inference.engine import checkpoint

    path, every, resume, saved = checkpoint.prepare(
        checkpoint_path, checkpoint_every, resume_from, options, data=(x, mask),
        temperature_schedule=padded[:num_iterations], prior=tuple(prior))
    kind = "fit_vb_mcvq"
    tree = None
    if resume is not None:
        tree = checkpoint.load_checkpoint(resume, kind=kind, options=saved)
    if tree is not None and tree.get("phase") != "main":
        state, parts, temps = tree["state"], tree["parts"], tree["temps"]
        if tree["phase"] == "done":
            return state, parts, temps, tree["num_moves"]
        resume_moves = (tree["key"], tree["round"], tree["num_moves"])
    else:
        temperatures = jnp.asarray(padded, x.dtype)
        saving = None
        if path is not None or resume is not None:
            saving = checkpoint.Checkpointing(path, every, resume, saved, resumed=tree,
                                              extra={"phase": "main"})
        state, parts = _iterate(_init_jit(rng_key, x, mask, max_vqs, max_states, prior),
                                rng_key, x, mask, prior, threshold, temperatures, num_iterations,
                                tol, conditional=conditional, checkpoint=saving)
        parts = [parts]
        its = parts[0][0].shape[0]
        temps = [np.asarray(padded[:its])]
        resume_moves = None

    def save(phase, state, key, round_, num_moves):
        if path is not None:
            checkpoint.save_checkpoint(
                path, {"phase": phase, "state": state, "key": key, "round": round_,
                       "num_moves": num_moves, "parts": parts, "temps": temps},
                kind=kind, options=saved)

    num_moves = 0 if resume_moves is None else resume_moves[2]
    if moves and not bool(state.all_pruned) and np.isfinite(float(state.bound)):
        state, num_moves = _move_rounds(
            state, rng_key, x, mask, prior, threshold, tol,
            float(padded[int(parts[0][0].shape[0]) - 1]), max_iterations, move_steps,
            conditional, parts, temps, resume=resume_moves,
            on_round=lambda *args: save("moves", *args))
    save("done", state, None, 0, num_moves)
    return state, parts, temps, num_moves


def fit_vb_mcvq(x, max_vqs: int, max_states: int, *, mask=None, rng_key,
                prune_threshold: float = 1e-3, max_iterations: int = 300, tol: float = 1e-5,
                temperature_schedule=None, mean_prior_mean=None, mean_prior_scale=None,
                precision_prior_shape=None, precision_prior_rate=None,
                conditional: bool = True, moves: bool = True,
                move_steps: int = 20, checkpoint_path=None,
                checkpoint_every: int | None = None, resume_from=None) -> VBMCVQResult:
    """Variational Bayes MCVQ with type-II ML weights and pruning (module docstring).

    Parameters
    ----------
    x : array (N, D)
        Data; entries where ``mask`` is False may hold anything, NaN included.
    max_vqs, max_states : int
        K VQs of J states at the start (generous: unneeded ones are removed), >= 1.
    mask : bool array (N, D), optional
        True where x is observed (default: all); every example and dimension
        needs an observed entry.
    rng_key : jax.random key
        For the start (:func:`init`).
    prune_threshold : float in (0, 1)
        A VQ with alpha_k, or a state with pi_kj, below it is removed. The
        default 1e-3 is far below the weight of any VQ that explains one
        dimension (1 / D) or any state one example uses (1 / N) for D, N up to
        a few hundred, and far above the weights the unused slots decay to.
    max_iterations : int
        Iterations at most (when ``temperature_schedule`` is not an array).
    tol : float
        Convergence: |Delta L| <= tol max(|L|, 1) at a constant temperature in an
        iteration that removed nothing. The default 1e-5 sits above the float32
        rounding of L (changes of about 1e-6 |L| were seen to alternate in sign at
        a fixed point); use a smaller one with float64 data.
    temperature_schedule : float or array, optional
        T per iteration (module docstring); default 1 (no annealing). An array
        sets the number of iterations.
    mean_prior_mean, mean_prior_scale, precision_prior_shape, precision_prior_rate : optional
        m0 (scalar or (D,)), beta0^-1/2, a0, b0; defaults from the data scale
        (``ppl_models.mcvq.prior_from_data``).
    conditional : bool
        The family of Q (module docstring): Q(mu, tau | r) (default) or the fully
        factorised Q(mu) Q(tau) Q(R) (which keeps g at its start; see there).
    moves : bool
        After convergence, search merges of two VQs and refreshes of one VQ's
        states (``inference.mcvq.vb_moves``), keep the best if it raises the bound
        after ``move_steps`` iterations, re-converge, and repeat until no move
        raises the bound (at most 4 ``max_vqs`` moves). Off: plain coordinate
        ascent, which stalls with causes split over several VQs.
    move_steps : int
        Iterations of coordinate ascent from a proposal before it is scored.
    checkpoint_path : str or os.PathLike, optional
        Write a checkpoint to this ``.npz`` file (:mod:`inference.engine.checkpoint`;
        atomic: a killed process leaves the last one intact): every
        ``checkpoint_every`` iterations of the main loop (its carry: state, traces,
        done flag), then after every accepted move (state, key, traces) and at the end.
    checkpoint_every : int, optional
        Iterations per checkpoint of the main loop (a positive int; needs
        ``checkpoint_path``).
    resume_from : str or os.PathLike, optional
        Continue from a checkpoint written by ``fit_vb_mcvq`` with the same data and
        options (``rng_key`` included; else ``ValueError`` naming the option). The
        result is bit-identical to the uninterrupted fit; a checkpoint of a finished
        fit returns its result at once.

    Returns
    -------
    VBMCVQResult

    Raises
    ------
    ValueError
        Bad data or mask, ``max_vqs`` or ``max_states`` < 1, ``prune_threshold``
        outside (0, 1), a non-positive prior scale, shape or rate, a bad
        schedule, or a run whose pruning would remove every VQ (or every state
        of a VQ).
    TypeError
        Wrong argument types, or no ``rng_key``.

    Warns
    -----
    ConvergenceWarning
        Not converged within the iterations (``converged=False``).
    NumericalWarning
        A non-finite bound, or a decrease at a fixed temperature that pruning
        does not explain (``monotone=False``).

    Notes
    -----
    Like the paper's variational EM, coordinate ascent finds local optima; the
    moves (``moves=True``) leave the two kinds measured here, and pruning helps
    only where the bound prefers fewer VQs. Measured (defaults): from K = J = 6
    on ``ppl_models.mcvq.generate(key(seed), 100, 12, 3, 4)`` (3 planted VQs),
    3 VQs survive in 6 of 8 seeds, 2 (two planted groups merged; a split move
    would be needed) in the others; the moves raise the bound by 38-240 nats in
    the seeds where coordinate ascent stalls (``tests/test_vb_mcvq.py``).
    On the shapes training images (``ppl_models.datasets.shapes``, 100 binary
    images), from K = 8, J = 10, data seeds 100-119: without moves 7-8 VQs
    survive with the shapes split over several VQs (bounds 17,900-22,600 in
    seeds 0-5); with moves the bound rises to 23,000-24,700 and 6-8 VQs survive
    (0 of 20 with 3): two or three VQs of 8-9 states, one per shape, and VQs
    of 2-7 states that take pixels a shape lights at only some of its
    positions. That is the bound's own preference, not a failure to reach 3:
    started from the true partition and positions, the 3-VQ solution converges
    to a bound of 20,787, below every solution the moves find. In the
    conditional family a dimension pays the KL of every state of its VQ, so
    pixels that are almost always off are cheaper in a VQ with 2 states than
    in one with 9; the KL(m || pi) an extra VQ costs grows with N, so more
    training images or a prior that expects noise (``precision_prior_shape``
    100, rate 1: sigma about 0.1) shrink the extra VQs to 2-4 states but do not
    remove them (measured at N = 100 and 400).

    Examples
    --------
    >>> import jax
    >>> from ppl_models import mcvq
    >>> data = mcvq.generate(jax.random.key(0), 80, 12, 3, 3)
    >>> fit = fit_vb_mcvq(data.x, 5, 5, rng_key=jax.random.key(1))
    >>> fit.g.shape[1] == fit.num_vqs <= 5
    True
    """
    max_vqs = check_positive_int(max_vqs, "max_vqs")
    max_states = check_positive_int(max_states, "max_states")
    if rng_key is None:
        raise MissingKeyError("fit_vb_mcvq needs an explicit rng_key (e.g. jax.random.key(0))")
    check_rng_key(rng_key)
    prune_threshold = check_fraction(prune_threshold, "prune_threshold")
    max_iterations = check_positive_int(max_iterations, "max_iterations")
    move_steps = check_positive_int(move_steps, "move_steps")
    tol = check_tolerance(tol, "tol")
    x, mask = check_covered(x, mask)
    prior = program.prior_from_data(x, mask, mean_prior_mean=mean_prior_mean,
                                    mean_prior_scale=mean_prior_scale,
                                    precision_prior_shape=precision_prior_shape,
                                    precision_prior_rate=precision_prior_rate)
    if np.ndim(prior.mean) not in (0, 1) or np.size(prior.mean) not in (1, x.shape[1]):
        raise ValueError(f"mean_prior_mean must be a scalar or have shape ({x.shape[1]},); "
                         f"got shape {np.shape(prior.mean)}")
    temperatures = _schedule(temperature_schedule, max_iterations)
    num_iterations = temperatures.size
    padded = np.ones(core.bucket(num_iterations))
    padded[:num_iterations] = temperatures
    threshold = jnp.asarray(prune_threshold, x.dtype)
    tol_array = jnp.asarray(tol, x.dtype)
    state, parts, temps, num_moves = _run_checkpointed(
        rng_key, x, mask, prior, threshold, padded, num_iterations, tol_array,
        max_vqs=max_vqs, max_states=max_states, conditional=bool(conditional), moves=moves,
        max_iterations=max_iterations, move_steps=move_steps, checkpoint_path=checkpoint_path,
        checkpoint_every=checkpoint_every, resume_from=resume_from,
        options=dict(max_vqs=max_vqs, max_states=max_states, prune_threshold=prune_threshold,
                     max_iterations=max_iterations, tol=tol, conditional=bool(conditional),
                     moves=bool(moves), move_steps=move_steps, rng_key=rng_key))
    if bool(state.all_pruned):
        raise ValueError(
            f"prune_threshold={prune_threshold} would remove every VQ, or every state of a VQ "
            f"(at iteration {int(state.iteration)}); lower it")
    its = int(state.iteration)
    bounds, vqs, states, pruned = (host.array(np.concatenate(t)) for t in zip(*parts, strict=True))
    temps = np.concatenate(temps)
    finite = bool(np.all(np.isfinite(np.asarray(bounds))))
    values = np.asarray(bounds, np.float64)
    change = np.diff(values)
    checked = (temps[1:] == temps[:-1]) & ~np.asarray(pruned)[1:]
    rounding = 128 * float(jnp.finfo(x.dtype).eps) * np.maximum(np.abs(values[1:]), 1.0)
    monotone = finite and bool(np.all((change >= -rounding) | ~checked))
    converged = (finite and its >= 2 and bool(checked[-1])
                 and abs(change[-1]) <= tol * max(abs(values[-1]), 1.0))
    if not finite:
        warnings.warn("fit_vb_mcvq: the bound became non-finite; check the data scale and the "
                      "priors", NumericalWarning, stacklevel=2)
    elif not monotone:
        warnings.warn(f"fit_vb_mcvq: the bound decreased by {-float(np.min(change[checked])):.3g}"
                      " at a fixed temperature without pruning", NumericalWarning, stacklevel=2)
    if finite and not converged:
        warnings.warn(f"fit_vb_mcvq: not converged after {its} iterations (tol={tol}); raise "
                      "max_iterations", ConvergenceWarning, stacklevel=2)
    # The surviving VQs depend on the data: the arithmetic runs on every VQ (a fixed
    # shape; entry by entry the same values) and the survivors are taken on the host
    # (inference.engine.host), so that a repeated fit compiles nothing new.
    keep = np.flatnonzero(np.asarray(state.vq_active))
    _, shift = core.data_moments(x, mask)
    shift = shift[:, None, None]
    active = host.take(state.state_active, keep)
    shape, rate = host.take(state.shape, keep, axis=1), host.take(state.rate, keep, axis=1)
    mean = host.take(state.mean + shift, keep, axis=1)
    sigma = host.take(jnp.sqrt(state.rate / state.shape), keep, axis=1)
    return VBMCVQResult(
        num_vqs=int(keep.size),
        num_states=tuple(int(n) for n in np.sum(np.asarray(active), axis=1)),
        vq_index=host.array(keep), state_active=active, alpha=host.take(state.alpha, keep),
        pi=host.take(state.pi, keep), g=host.take(state.g, keep, axis=1),
        m=host.take(state.m, keep, axis=1), mean_mean=mean,
        mean_precision=host.take(state.precision, keep, axis=1), precision_shape=shape,
        precision_rate=rate, mu=mean, sigma=sigma, bound=float(state.bound), bound_trace=bounds,
        temperature_trace=host.array(temps, x.dtype), num_vqs_trace=vqs,
        num_states_trace=states, num_iterations=its, converged=converged, monotone=monotone,
        prior=prior, num_moves=num_moves,
        num_causes=int(np.sum(np.sum(np.asarray(active), axis=1) > 1)))
