"""Variational EM for Multiple Cause Vector Quantization (seed 004 sec. 3; MODELS.md 4.2).

The posterior over the selections of the MCVQ program (``ppl_models.mcvq``)
is approximated by Q(R, S | x^c) = prod_dk g_dk^{r_dk} prod_kj (m^c_kj)^{s_kj},
with g (D, K) shared by all examples (the paper's consistency constraint) and
m^c (K, J) per example. The likelihood terms

    ell^c_dkj = -log N(x^c_d; mu_dkj, sigma_dkj)        (N, D, K, J), 0 where x^c_d is missing

are read from the program: it is traced with r and s conditioned to every
(VQ k, state j) pair, so that the model stays the single source of truth.
:func:`likelihood_terms` returns the whole (N, D, K, J) array (the reference,
used by :func:`free_energy` and the tests); the EM iteration never forms it.
It reads only the Gaussian's loc and scale per (d, k, j) from the program's
observed site (:func:`gaussian_parameters`) and expands the square,

    ell^c_dkj = o^c_d [c_dkj + x^c_d beta_dkj + (x^c_d)^2 alpha_dkj],
    alpha = 1 / (2 sigma^2), beta = -mu / sigma^2, c = log(sqrt(2 pi) sigma) + mu^2 / (2 sigma^2),

with o^c_d = 1 where x^c_d is observed and 0 where it is missing, so every sum
over d or over c that the updates need is a matrix product of the (N, 3D)
moments [o, o x, o x^2] with (3D, K J) weights: the E-step energies
sum_d g_dk ell^c_dkj, and the statistics sum_c m^c_kj [o, o x, o x^2]_d from
which the g-step, the M-step and F follow (x is centred per dimension first, on
its observed mean, so that x^2 does not lose float32 precision to the offset;
the density is unchanged by the shift). One iteration costs about 6 N D K J
multiply-adds in two matrix products and holds (N, 3D) and (N, K, J) arrays,
not (N, D, K, J) ones; the tests check every quantity against the reference.
With a temperature T the algorithm lowers

    F_T = sum_c sum_kj m^c_kj log(m^c_kj / b_kj) + T sum_dk g_dk log(g_dk / a_dk)
          + sum_c sum_dkj g_dk m^c_kj ell^c_dkj.

F_C (T = number of examples) is the paper's free energy, the negative ELBO of the
per-example program (``model(shared_r=False)``) under the factorised guide;
F_1 is the negative ELBO of the shared-r program (``model(shared_r=True)``).
Both identities are tested exactly by enumeration. Every update is the exact
minimiser of F_T in its block, so F_T never increases at fixed T:

* E-step: m^c_kj ∝ b_kj exp(-sum_d g_dk ell^c_dkj)                  (normalised over j)
* g-step: g_dk ∝ a_dk exp(-(1/T) sum_{c,j} m^c_kj ell^c_dkj)          (normalised over k)
* M-step: mu_dkj, sigma^2_dkj = mean and variance of x^c_d weighted by m^c_kj
  over the examples c that observe d (from the statistics: W = sum m o,
  S1 = sum m o x, S2 = sum m o x^2, mu = S1 / W, sigma^2 = S2 / W - mu^2 in
  the centred coordinates); sigma^2 is floored at ``variance_floor``
  times the data's mean variance (the floored value is the constrained minimiser).

The paper replaces 1/C by an inverse temperature 1/T annealed "linearly from an
integer less than C to 1" (sec. 3, sec. 5.1): from the per-example model,
where r may differ between examples, to the one where r is the same for all
(:func:`linear_schedule`). Missing entries (``mask`` False) drop out of every
sum over c (sec. 5.2). Reconstruction (sec. 3):
x_hat^c_d = sum_k g_dk sum_j m^c_kj mu_dkj (:func:`reconstruct`); m for new
examples with the parameters fixed is one E-step (:func:`infer_states`).

Iteration order in :func:`step`: g-step and M-step from the current m (and the
ell of the current parameters), then ell of the new parameters and the E-step;
the recorded F_T is at the new state, so every iterate has m matched to its
parameters.

References
----------
Ross and Zemel, "Multiple Cause Vector Quantization", NIPS 2002 (seed 004),
sec. 3 (free energy, E- and M-steps, annealing), sec. 5.1-5.2 (schedule, missing data).
"""

from __future__ import annotations

import functools
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import xlogy
from numpyro import handlers

from inference.engine import checkpoint
from inference.engine.loop import Algorithm, run, select
from inference.engine.sharding import psum, resolve_mesh
from inference.program.handlers import map_gaussian
from ppl_models import mcvq
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import (
    MissingKeyError,
    check_data,
    check_positive,
    check_positive_int,
    check_rng_key,
    is_traced,
)

__all__ = ["MCVQState", "MCVQInfo", "MCVQResult", "fit_mcvq", "init", "step",
           "likelihood_terms", "gaussian_parameters", "free_energy", "infer_states",
           "reconstruct", "linear_schedule"]


class MCVQState(NamedTuple):
    """State of the variational EM.

    Attributes
    ----------
    g : array (D, K)
        Q(r_d = k), shared by all examples.
    m : array (N, K, J)
        Q(s^c_k = j) per example.
    mu, sigma : arrays (D, K, J)
    stats : array (3, D, K, J)
        sum_c m^c_kj [o^c_d, o^c_d x^c_d, o^c_d (x^c_d)^2] of the current m, x centred
        on its observed mean per dimension (module docstring).
    """

    g: jax.Array
    m: jax.Array
    mu: jax.Array
    sigma: jax.Array
    stats: jax.Array


class MCVQInfo(NamedTuple):
    """What one :func:`step` reports.

    Attributes
    ----------
    free_energy : scalar
        F_T at the new state and the step's temperature.
    temperature : scalar
    """

    free_energy: jax.Array
    temperature: jax.Array


class MCVQResult(NamedTuple):
    """Result of :func:`fit_mcvq`.

    Attributes
    ----------
    g : array (D, K)
        Q(r_d = k): which VQ explains each dimension.
    m : array (N, K, J)
        Q(s^c_k = j) of every training example, matched to the final parameters.
    mu, sigma : arrays (D, K, J)
    a : array (D, K)
    b : array (K, J)
        The selection priors used (fixed, not learnt; uniform unless given).
    free_energy_trace : array (num_iterations,)
        F_T after each iteration at that iteration's temperature (module docstring);
        non-increasing where the temperature stays the same.
    temperature_trace : array (num_iterations,)
    num_iterations : int
    converged : bool
        The relative change of F_T fell to ``tol`` at a constant temperature.
    variance_floor : float
        The absolute floor on sigma^2 that was used.
    restart_free_energies : array (num_restarts,)
        Final F_T of every start, all at the last temperature of the schedule
        (the result is the start with the lowest); one entry without restarts.
    best_restart : int
        Index of the kept start (0 without restarts).
    restart_converged : bool array (num_restarts,)
        The ``converged`` flag of every start.
    """

    g: jax.Array
    m: jax.Array
    mu: jax.Array
    sigma: jax.Array
    a: jax.Array
    b: jax.Array
    free_energy_trace: jax.Array
    temperature_trace: jax.Array
    num_iterations: int
    converged: bool
    variance_floor: float
    restart_free_energies: jax.Array | None = None
    best_restart: int = 0
    restart_converged: jax.Array | None = None


def likelihood_terms(x, mask, mu, sigma, *, model=None):
    """ell^c_dkj = -log N(x^c_d; mu_dkj, sigma_dkj) from the program, (N, D, K, J).

    The program (default ``ppl_models.mcvq.model``) is traced once per (k, j),
    vmapped, with every r^c_d conditioned to k and every s^c_k to j, and the
    observed site's masked log-probability is read off; entries where ``mask``
    is False are 0.
    """
    model = mcvq.model if model is None else model
    num, dim = x.shape
    num_vqs, num_states = mu.shape[1:]

    def log_prob(k, j):
        program = handlers.condition(model, {"r": jnp.full((num, dim), k),
                                             "s": jnp.full((num, num_vqs), j)})
        site = handlers.trace(program).get_trace(x, mask=mask, mu=mu, sigma=sigma)["x"]
        value = site["fn"].log_prob(site["value"])
        return value if site["scale"] is None else site["scale"] * value

    ks = jnp.repeat(jnp.arange(num_vqs), num_states)
    js = jnp.tile(jnp.arange(num_states), num_vqs)
    values = jax.vmap(log_prob)(ks, js)  # (K J, N, D)
    return -jnp.moveaxis(values.reshape(num_vqs, num_states, num, dim), (0, 1), (2, 3))


def gaussian_parameters(mu, sigma, *, model=None):
    """loc and scale (D, K, J) of the observed site for every (d, k, j), read from the program.

    One trace of the program (default ``ppl_models.mcvq.model``) on K J virtual
    examples, example (k, j) with every r_d conditioned to k and every s to j,
    so that its x_d has the Gaussian of state j of VQ k. Raises ``ValueError``
    if the observed site has no ``Normal`` core.
    """
    model = mcvq.model if model is None else model
    dim, num_vqs, num_states = jnp.shape(mu)
    count = num_vqs * num_states
    ks = jnp.repeat(jnp.arange(num_vqs), num_states)
    js = jnp.tile(jnp.arange(num_states), num_vqs)
    program = handlers.condition(model, {"r": jnp.broadcast_to(ks[:, None], (count, dim)),
                                         "s": jnp.broadcast_to(js[:, None], (count, num_vqs))})
    site = handlers.trace(program).get_trace(jnp.zeros((count, dim), jnp.result_type(mu)),
                                             mu=mu, sigma=sigma)["x"]
    cores = []
    map_gaussian(site["fn"], lambda normal: cores.append(normal) or normal)
    if not cores:
        raise ValueError("the program's observed site 'x' has no Normal core; got "
                         f"{type(site['fn']).__name__}")
    shape = (num_vqs, num_states, dim)
    loc, scale = (jnp.broadcast_to(v, (count, dim)).reshape(shape)
                  for v in (cores[0].loc, cores[0].scale))
    return jnp.moveaxis(loc, -1, 0), jnp.moveaxis(scale, -1, 0)


def _moments(x, mask, axis_name=None):
    """The (N, 3D) moments [o, o xc, o xc^2] and the shift (D,): xc = x - observed mean.

    ``axis_name``: x is one device's rows (inside ``shard_map``); the observed mean
    is over all devices' rows.
    """
    obs = mask.astype(x.dtype)
    shift = (psum(jnp.sum(obs * x, axis=0), axis_name)
             / jnp.maximum(psum(jnp.sum(obs, axis=0), axis_name), 1.0))
    centred = obs * (x - shift)
    return jnp.concatenate([obs, centred, centred * centred], axis=1), shift


def _natural(mu, sigma, shift):
    """(3, D, K, J): ell^c_dkj = o (c + xc beta + xc^2 alpha), loc and scale from the program."""
    loc, scale = gaussian_parameters(mu, sigma)
    loc = loc - shift[:, None, None]
    precision = 1.0 / jnp.square(scale)
    constant = 0.5 * jnp.log(2.0 * jnp.pi) + jnp.log(scale) + 0.5 * jnp.square(loc) * precision
    return jnp.stack([constant, -loc * precision, 0.5 * precision])


def _energies(moments, natural, g):
    """sum_d g_dk ell^c_dkj, (N, K, J), as one (N, 3D) x (3D, K J) product."""
    _, dim, num_vqs, num_states = natural.shape
    weights = (natural * g[None, :, :, None]).reshape(3 * dim, num_vqs * num_states)
    return (moments @ weights).reshape(-1, num_vqs, num_states)


def _statistics(moments, m, axis_name=None):
    """sum_c m^c_kj [o, o xc, o xc^2]^c_d, (3, D, K, J), as one (3D, N) x (N, K J) product.

    ``axis_name``: one device's rows, summed over the devices (``psum``).
    """
    num, num_vqs, num_states = m.shape
    stats = (moments.T @ m.reshape(num, -1)).reshape(3, -1, num_vqs, num_states)
    return psum(stats, axis_name)


def _kl_terms(g, m, a, b, temperature, axis_name=None):
    # A padded example (nothing observed) has m = b: its term is exactly zero.
    return (psum(jnp.sum(xlogy(m, m) - xlogy(m, b)), axis_name)
            + temperature * jnp.sum(xlogy(g, g) - xlogy(g, a)))


def _fast_free_energy(stats, natural, g, m, a, b, temperature, axis_name=None):
    """F_T from the statistics of m (module docstring)."""
    expected = jnp.sum(stats * natural, axis=(0, 3))  # (D, K): sum_cj m ell
    return _kl_terms(g, m, a, b, temperature, axis_name) + jnp.sum(g * expected)


def _fast_e_step(moments, natural, g, b):
    return jax.nn.softmax(jnp.log(b) - _energies(moments, natural, g), axis=-1)


def _fast_g_step(stats, natural, a, temperature):
    expected = jnp.sum(stats * natural, axis=(0, 3))  # (D, K)
    return jax.nn.softmax(jnp.log(a) - expected / temperature, axis=-1)


def _fast_m_step(stats, mu, sigma, shift, floor):
    """Means and floored variances from the statistics; states no example uses keep theirs."""
    weight, first, second = stats
    used = weight > 1e-10
    safe = jnp.where(used, weight, 1.0)
    mean = first / safe
    var = second / safe - jnp.square(mean)
    new_mu = jnp.where(used, mean + shift[:, None, None], mu)
    new_sigma = jnp.where(used, jnp.sqrt(jnp.maximum(var, floor)), sigma)
    return new_mu, new_sigma


def _e_step(ell, g, b):
    """m^c_kj ∝ b_kj exp(-sum_d g_dk ell^c_dkj)."""
    return jax.nn.softmax(jnp.log(b) - jnp.einsum("dk,cdkj->ckj", g, ell), axis=-1)


def _g_step(ell, m, a, temperature):
    """g_dk ∝ a_dk exp(-(1/T) sum_{c,j} m^c_kj ell^c_dkj)."""
    return jax.nn.softmax(jnp.log(a) - jnp.einsum("ckj,cdkj->dk", m, ell) / temperature,
                          axis=-1)


def _free_energy(ell, g, m, a, b, temperature):
    """F_T from the full likelihood terms (the reference form)."""
    return _kl_terms(g, m, a, b, temperature) + jnp.einsum("dk,ckj,cdkj->", g, m, ell)


def free_energy(x, g, m, mu, sigma, *, mask=None, a=None, b=None, temperature=None):
    """F_T of the module docstring (a scalar); ``temperature`` defaults to N (the paper's F).

    F_N is the negative ELBO of ``ppl_models.mcvq.model`` under the factorised
    guide (g, m); F_1 that of ``model(shared_r=True)``. ``x`` may hold NaN where
    ``mask`` is False.
    """
    x = jnp.asarray(x)
    mask = np.ones(x.shape, bool) if mask is None else mask
    num_vqs, num_states = jnp.shape(mu)[1:]
    a, b = _priors(a, b, x.shape[1], num_vqs, num_states, x.dtype)
    temperature = x.shape[0] if temperature is None else temperature
    return _free_energy_of_data(x, mask, g, m, mu, sigma, a, b, temperature)


@jax.jit
def _free_energy_of_data(x, mask, g, m, mu, sigma, a, b, temperature):
    mask = jnp.asarray(mask, bool)
    x = jnp.where(mask, x, 0.0)
    return _free_energy(likelihood_terms(x, mask, mu, sigma), g, m, a, b, temperature)


def reconstruct(g, m, mu):
    """x_hat^c_d = sum_k g_dk sum_j m^c_kj mu_dkj, (N, D) (sec. 3: the mean of the mixture)."""
    return jnp.einsum("dk,ckj,dkj->cd", g, m, mu)


def init(rng_key, x, mask, num_vqs: int, num_states: int, a, b, floor) -> MCVQState:
    """Initial state: mu from random examples, sigma the data's spread, g a random partition.

    ``x`` holds 0 where ``mask`` is False. mu[:, k, j] is a random example
    (its missing entries replaced by the observed column mean) plus 10% of the
    column standard deviation of noise; sigma is the column standard deviation;
    g is a random partition of the dimensions drawn from a, softened
    (0.9 one-hot + 0.1 / K, times a, normalised); m is the E-step from these.
    *Choice*: the paper does not state its start. Starting from a partition
    lets each VQ cluster the examples on its own dimensions. Variational EM
    has local optima (typically a VQ left with no dimension, two planted
    groups merged): fit from several keys and keep the lowest final free
    energy (see ``tests/test_mcvq.py`` for measured recovery rates).
    """
    return _init(rng_key, x, mask, num_vqs, num_states, a, b, floor)


def _init(rng_key, x, mask, num_vqs, num_states, a, b, floor, axis_name=None,
          num_examples=None):
    """:func:`init`; with ``axis_name``, x and ``mask`` are one device's rows of the
    ``num_examples`` (padded with unobserved rows, inside ``shard_map``): the column
    statistics are summed over the devices and each picked example is taken from the
    device that holds it."""
    num, dim = x.shape
    if axis_name is not None:
        num = num_examples
    # One uniform draw for everything (each jax.random call costs compile time).
    sizes = (num_vqs * num_states, dim * num_vqs * num_states, dim * num_vqs)
    tiny = jnp.finfo(x.dtype).tiny
    u = jax.random.uniform(rng_key, (sum(sizes),), x.dtype, minval=tiny, maxval=1.0 - 1e-7)
    u_rows, u_mu, u_g = jnp.split(u, np.cumsum(sizes)[:-1])
    obs = mask.astype(x.dtype)
    count = psum(jnp.sum(obs, axis=0), axis_name)
    mean = psum(jnp.sum(obs * x, axis=0), axis_name) / count
    std = jnp.sqrt(jnp.maximum(psum(jnp.sum(obs * (x - mean) ** 2, axis=0), axis_name) / count,
                               floor))
    filled = jnp.where(mask, x, mean)
    rows = jnp.minimum((u_rows * num).astype(jnp.int32), num - 1).reshape(num_vqs, num_states)
    if axis_name is None:
        picked = filled[rows]
    else:  # the device holding global row r contributes it, the others zeros
        local = rows - jax.lax.axis_index(axis_name) * x.shape[0]
        here = (local >= 0) & (local < x.shape[0])
        picked = psum(jnp.where(here[..., None], filled[jnp.clip(local, 0, x.shape[0] - 1)],
                                0.0), axis_name)
    mu = jnp.moveaxis(picked, -1, 0)  # (D, K, J)
    noise = jax.scipy.special.ndtri(u_mu).reshape(mu.shape)
    mu = mu + 0.1 * std[:, None, None] * noise
    sigma = jnp.broadcast_to(std[:, None, None], mu.shape)
    # A random partition r_d ~ a_d (Gumbel-max), softened: g = 0.9 onehot + 0.1 / K, times a.
    gumbel = -jnp.log(-jnp.log(u_g.reshape(a.shape)))
    part = jax.nn.one_hot(jnp.argmax(jnp.log(a) + gumbel, axis=-1), num_vqs, dtype=x.dtype)
    g = a * (0.9 * part + 0.1 / num_vqs)
    g = g / jnp.sum(g, axis=-1, keepdims=True)
    moments, shift = _moments(x, mask, axis_name)
    m = _fast_e_step(moments, _natural(mu, sigma, shift), g, b)
    return MCVQState(g, m, mu, sigma, _statistics(moments, m, axis_name))


def step(state: MCVQState, x, mask, a, b, temperature, floor):
    """One iteration: g-step and M-step from the current m, then the E-step; pure and jittable.

    Returns ``(new_state, MCVQInfo)``; ``x`` holds 0 where ``mask`` is False.
    """
    return _step(state, x, mask, a, b, temperature, floor)


def _step(state, x, mask, a, b, temperature, floor, axis_name=None):
    """:func:`step`; with ``axis_name`` x, ``mask`` and m are one device's rows and every sum
    over examples (the shift, the statistics, the KL of m) is added over the devices."""
    moments, shift = _moments(x, mask, axis_name)
    g = _fast_g_step(state.stats, _natural(state.mu, state.sigma, shift), a, temperature)
    mu, sigma = _fast_m_step(state.stats, state.mu, state.sigma, shift, floor)
    natural = _natural(mu, sigma, shift)
    m = _fast_e_step(moments, natural, g, b)
    stats = _statistics(moments, m, axis_name)
    energy = _fast_free_energy(stats, natural, g, m, a, b, temperature, axis_name)
    return MCVQState(g, m, mu, sigma, stats), MCVQInfo(energy, jnp.asarray(temperature, x.dtype))


class MCVQLoopState(NamedTuple):
    """One start's state in the engine's loop (:mod:`inference.engine.loop`): the EM state
    (:class:`MCVQState`'s fields), the iteration (it picks the temperature) and the
    previous F_T (the convergence test)."""

    g: jax.Array
    m: jax.Array
    mu: jax.Array
    sigma: jax.Array
    stats: jax.Array
    iteration: jax.Array
    previous: jax.Array


class MCVQLoopInfo(NamedTuple):
    """One iteration as the engine records it: F_T (``objective``), the temperature, and
    whether F_T changed by at most ``tol`` at an unchanged temperature."""

    objective: jax.Array
    temperature: jax.Array
    converged: jax.Array


def engine_step(rng_key, state: MCVQLoopState, data, params, *, shard=None):
    """:func:`step` at the schedule's temperature of ``state.iteration``, for the engine.

    ``data`` is ``(x, mask)``; ``params`` is ``(a, b, temperatures, floor, tol)``. The
    start has converged when the relative change of F_T (to max(|F_T|, 1)) is at most
    ``tol`` and the temperature equals the previous iteration's. With a ``shard`` every
    sum over examples is added over the devices (:func:`step`).
    """
    del rng_key  # deterministic
    x, mask = data
    a, b, temperatures, floor, tol = params
    axis = None if shard is None else shard.axis_name
    it = state.iteration
    temperature = temperatures[it]
    new, info = _step(MCVQState(*state[:5]), x, mask, a, b, temperature, floor, axis)
    same = (it > 0) & (temperature == temperatures[jnp.maximum(it - 1, 0)])
    change = (jnp.abs(state.previous - info.free_energy)
              / jnp.maximum(jnp.abs(info.free_energy), 1.0))
    return (MCVQLoopState(*new, it + 1, info.free_energy),
            MCVQLoopInfo(info.free_energy, info.temperature, same & (change <= tol)))


#: The annealed variational EM as an engine algorithm (m holds one row per example).
ALGORITHM = Algorithm(engine_step, name="fit_mcvq", rows=("m",))


@functools.partial(jax.jit, static_argnames=("num_vqs", "num_states", "batch_size"))
def _init_starts(keys, x, mask, a, b, floor, *, num_vqs, num_states, batch_size):
    """:func:`init` of every start, ``batch_size`` at a time, as engine states."""
    def one(key):
        state = _init(key, x, mask, num_vqs, num_states, a, b, floor)
        return MCVQLoopState(*state, jnp.zeros((), jnp.int32), jnp.asarray(jnp.inf, x.dtype))

    return jax.lax.map(one, keys, batch_size=batch_size)


@functools.partial(jax.jit, static_argnames=("batch_size",))
def _final_energies(states, x, mask, a, b, temperature, *, batch_size):
    """F_T of every start's last state at the schedule's last ``temperature`` (so that
    starts which stopped at different iterations compare)."""
    moments, shift = _moments(x, mask)

    def one(state):
        return _fast_free_energy(state.stats, _natural(state.mu, state.sigma, shift), state.g,
                                 state.m, a, b, temperature)

    return jax.lax.map(one, states, batch_size=batch_size)


def _bucket(num_iterations: int) -> int:
    """Compiled length of a schedule: 128, or the next power of two above it."""
    return max(128, 1 << (num_iterations - 1).bit_length())


def linear_schedule(num_iterations: int, initial_temperature: float,
                    num_anneal_iterations: int | None = None):
    """Temperatures falling linearly from ``initial_temperature`` to 1, then held at 1.

    The paper's schedule (sec. 3, 5.1). The fall takes ``num_anneal_iterations``
    iterations (default half of ``num_iterations``, a *choice*: the paper does
    not say), so that the remaining ones converge at T = 1.

    >>> linear_schedule(6, 5.0, 3)
    Array([5., 3., 1., 1., 1., 1.], dtype=float32)
    """
    num_iterations = check_positive_int(num_iterations, "num_iterations")
    check_positive(initial_temperature, "initial_temperature")
    if num_anneal_iterations is None:
        num_anneal_iterations = max(num_iterations // 2, 1)
    num_anneal_iterations = check_positive_int(num_anneal_iterations, "num_anneal_iterations")
    fraction = jnp.minimum(jnp.arange(num_iterations) / max(num_anneal_iterations - 1, 1), 1.0)
    return initial_temperature + (1.0 - initial_temperature) * fraction


def schedule(temperature_schedule, num_iterations, initial_temperature, num):
    """The temperatures of :func:`fit_mcvq` from its options: ``(array, count)``.

    ``temperature_schedule`` None: :func:`linear_schedule` over ``num_iterations``
    from ``initial_temperature`` (default ``num - 1`` for ``num`` examples, at
    least 1); a number: that temperature ``num_iterations`` times; an array: itself
    (1-D, positive, finite, else ``ValueError`` naming ``temperature_schedule``).
    Also the schedule of the streamed fit (:mod:`inference.mcvq.stream`).
    """
    if temperature_schedule is None:
        num_iterations = check_positive_int(num_iterations, "num_iterations")
        start = float(max(num - 1, 1)) if initial_temperature is None else initial_temperature
        temperatures = np.asarray(linear_schedule(num_iterations, start), dtype=float)
    else:
        temperatures = np.asarray(temperature_schedule, dtype=float)
        if temperatures.ndim == 0:
            num_iterations = check_positive_int(num_iterations, "num_iterations")
            temperatures = np.full(num_iterations, float(temperatures))
        if temperatures.ndim != 1 or temperatures.size < 1 or not np.all(
                np.isfinite(temperatures) & (temperatures > 0)):
            raise ValueError("temperature_schedule must be a positive number or a 1-D array "
                             f"of positive temperatures; got {temperature_schedule!r}")
    return temperatures, int(temperatures.shape[0])


def _check_mask(mask, shape, name="mask"):
    if mask is None:
        return np.ones(shape, bool)
    arr = np.asarray(mask)
    if arr.dtype != bool:
        if not np.issubdtype(arr.dtype, np.number) or not np.all((arr == 0) | (arr == 1)):
            raise TypeError(f"{name} must be a bool array (True = observed); got dtype "
                            f"{arr.dtype}")
        arr = arr.astype(bool)
    if arr.shape != tuple(shape):
        raise ValueError(f"{name} must have the shape of x, {tuple(shape)}; got {arr.shape}")
    return arr


def _check_observed(x, mask, name="x", *, dim=None):
    """x with 0 at unobserved entries (float), after checking the observed ones are finite."""
    if is_traced(x):
        return x, mask
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D with shape (num_examples, dim); got shape "
                         f"{arr.shape}")
    mask = _check_mask(mask, arr.shape)
    if np.issubdtype(arr.dtype, np.number):
        bad = int(np.sum(~np.isfinite(arr) & mask))
        if bad:
            raise ValueError(f"{name} has {bad} NaN or infinite value(s) where mask is True "
                             "(observed); mark them False in mask")
        arr = np.where(mask, arr, 0)
    return check_data(arr, name, dim=dim), jnp.asarray(mask)


def _priors(a, b, dim, num_vqs, num_states, dtype):
    priors = []
    for name, value, shape in (("a", a, (dim, num_vqs)), ("b", b, (num_vqs, num_states))):
        if value is None:
            priors.append(jnp.asarray(np.full(shape, 1.0 / shape[1]), dtype))
            continue
        if not is_traced(value):
            arr = np.asarray(value, dtype=float)
            ok = arr.shape == shape and bool(np.all(arr >= 0)) and bool(
                np.allclose(np.sum(arr, -1), 1.0, atol=1e-4))
            if not ok:
                raise ValueError(f"{name} must be non-negative with shape {shape} and rows "
                                 f"summing to 1; got shape {arr.shape}")
        priors.append(jnp.asarray(value, dtype))
    return priors


def fit_mcvq(x, num_vqs: int, num_states: int, *, mask=None, rng_key,
             temperature_schedule=None, num_iterations: int = 100,
             initial_temperature: float | None = None, variance_floor: float = 1e-3,
             tol: float = 1e-6, a=None, b=None, num_restarts: int = 1,
             restart_batch_size: int = 1, devices=None, mesh=None, checkpoint_path=None,
             checkpoint_every: int | None = None, resume_from=None) -> MCVQResult:
    """Fit the MCVQ program by the paper's annealed variational EM (module docstring).

    Parameters
    ----------
    x : array (N, D)
        Data; entries where ``mask`` is False may hold anything, NaN included.
        Also a stream too large for memory (an ``np.memmap``, a callable returning a
        fresh iterator of batches or of ``(x, mask)`` pairs, a list of either, an
        :class:`inference.mixture.stream.BatchSource`): the fit then runs by passes
        (:func:`inference.mcvq.stream.fit_mcvq_stream`: the same EM and result,
        ``m`` None; ``mask`` then a source cut like x, or None).
    num_vqs, num_states : int
        K VQs of J states each (both >= 1).
    mask : bool array (N, D), optional
        True where x is observed (default: all). Every example and every
        dimension needs at least one observed entry.
    rng_key : jax.random key
        For the initial state (:func:`init`).
    temperature_schedule : float or array (num_iterations,), optional
        Temperature T of every iteration (positive): a constant, or an array
        whose length sets the number of iterations. Default:
        :func:`linear_schedule` from ``initial_temperature`` to 1 over the first
        half of ``num_iterations``.
    num_iterations : int
        Maximum number of iterations (when the schedule is not an array).
    initial_temperature : float, optional
        Start of the default schedule: the paper's "integer less than C",
        default max(N - 1, 1).
    variance_floor : float
        sigma^2 >= ``variance_floor`` times the mean variance of the observed
        data per dimension (absolute floor in the result).
    tol : float
        Stop when |Delta F_T| <= tol max(|F_T|, 1) between two iterations at the
        same temperature.
    a : array (D, K), optional
    b : array (K, J), optional
        Selection priors (fixed; uniform by default, as in the paper).
    num_restarts : int
        Number of starts, all in one compiled call; the one with the lowest
        final F_T at the schedule's last temperature is kept
        (``restart_free_energies`` lists them all). One start uses
        ``rng_key`` itself, more use ``jax.random.split(rng_key, num_restarts)``.
    restart_batch_size : int
        Starts run side by side (vmapped) at a time. A vmapped batch iterates
        until its slowest start has converged, so the default, 1 (one start
        after another), is fastest on a CPU; on an accelerator a larger batch
        fills the device. Memory grows with it.
    devices : None, int or sequence of jax.Device
        Split the examples over these devices (:func:`inference.engine.sharding.resolve_mesh`):
        ``None`` uses all of ``jax.devices()`` when there are several (else the plain
        single-device path), an int the first that many. Every E-step runs on each
        device's rows; the statistics (matrix products over examples), the observed
        means and the free energy's sum over examples are added over the devices
        (``shard_map`` and ``psum``). The result equals the single-device fit up to
        float rounding; x is padded with unobserved rows to a multiple of the device
        count, so any number of examples works.
    mesh : jax.sharding.Mesh, optional
        A mesh of your own instead of ``devices`` (one axis, or one named ``"data"``).
    checkpoint_path : str or os.PathLike, optional
        Write a checkpoint (the loop carry of every start and the options, with the
        SHA-256 of x and mask) to this file every ``checkpoint_every`` iterations
        (:mod:`inference.engine.checkpoint`; atomic: a killed process leaves the last one
        intact). Single device only (not with ``devices``/``mesh``).
    checkpoint_every : int, optional
        Iterations per checkpoint (a positive int; needs ``checkpoint_path``).
    resume_from : str or os.PathLike, optional
        Continue from a checkpoint written by ``fit_mcvq`` with the same data and
        options (``rng_key`` included; else ``ValueError`` naming the option). The
        result is bit-identical to the uninterrupted fit; a checkpoint of a finished
        fit returns its result at once.

    Returns
    -------
    MCVQResult

    Notes
    -----
    Variational EM finds local optima (a VQ left without dimensions, or two
    planted groups merged into one VQ, are the common ones): use
    ``num_restarts`` (measured on planted data in ``tests/test_mcvq.py``: one
    start recovers the planted partition about two times in three, the best
    of five nearly always); a spare state per VQ (J above the expected
    number) helps too.

    Examples
    --------
    >>> import jax
    >>> from ppl_models import mcvq
    >>> data = mcvq.generate(jax.random.key(2), num_examples=60, dim=9, num_vqs=3,
    ...                      num_states=3)
    >>> result = fit_mcvq(data.x, 3, 4, rng_key=jax.random.key(10), num_iterations=80)
    >>> result.g.shape, result.m.shape, result.mu.shape
    ((9, 3), (60, 3, 4), (9, 3, 4))
    >>> bool(result.converged), result.free_energy_trace.shape == (result.num_iterations,)
    (True, True)
    """
    from inference.mcvq import stream as streaming_fits  # it imports this module

    if streaming_fits.is_masked_stream(x):  # memmap, callable, batches, (x, mask) pairs
        if (devices, mesh, checkpoint_path, checkpoint_every, resume_from) != (None,) * 5:
            raise ValueError("devices, mesh and checkpoints apply to an in-memory x, not to "
                             "a stream of batches")
        return streaming_fits.fit_mcvq_stream(
            x, num_vqs, num_states, mask=mask, rng_key=rng_key,
            temperature_schedule=temperature_schedule, num_iterations=num_iterations,
            initial_temperature=initial_temperature, variance_floor=variance_floor, tol=tol,
            a=a, b=b, num_restarts=num_restarts)
    num_vqs = check_positive_int(num_vqs, "num_vqs")
    num_states = check_positive_int(num_states, "num_states")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    restart_batch_size = min(check_positive_int(restart_batch_size, "restart_batch_size"),
                             num_restarts)
    if rng_key is None:
        raise MissingKeyError("fit_mcvq needs an explicit rng_key (e.g. jax.random.key(0))")
    check_rng_key(rng_key)
    mesh = resolve_mesh(devices, mesh)
    x, mask = _check_observed(x, mask, "x")
    num, dim = x.shape
    empty_rows = np.flatnonzero(~np.asarray(mask).any(axis=1))
    if empty_rows.size:
        raise ValueError(f"mask leaves example(s) {empty_rows[:10].tolist()} (rows of x) "
                         "without any observed entry; drop them")
    empty_cols = np.flatnonzero(~np.asarray(mask).any(axis=0))
    if empty_cols.size:
        raise ValueError(f"mask leaves dimension(s) {empty_cols[:10].tolist()} (columns of x) "
                         "without any observed entry; drop them")
    check_positive(variance_floor, "variance_floor")
    check_positive(tol, "tol") if tol else None
    temperatures, num_iterations = schedule(temperature_schedule, num_iterations,
                                            initial_temperature, num)
    temperatures = jnp.asarray(temperatures, x.dtype)
    a, b = _priors(a, b, dim, num_vqs, num_states, x.dtype)
    obs = np.asarray(mask)
    xs = np.asarray(x, dtype=float)
    count = obs.sum(axis=0)
    col_mean = (obs * xs).sum(axis=0) / count
    spread = float(np.mean((obs * (xs - col_mean) ** 2).sum(axis=0) / count))
    floor = variance_floor * (spread if spread > 0 else 1.0)
    if mesh is not None and (checkpoint_path, checkpoint_every, resume_from) != (None,) * 3:
        raise ValueError("checkpoint_path/checkpoint_every/resume_from: checkpoints need the "
                         f"single-device fit; got devices={devices!r}, mesh={mesh!r}")
    saving = checkpoint.Checkpointing.from_options(
        checkpoint_path, checkpoint_every, resume_from,
        dict(num_vqs=num_vqs, num_states=num_states, num_restarts=num_restarts,
             restart_batch_size=restart_batch_size, num_iterations=num_iterations,
             variance_floor=variance_floor, tol=tol, rng_key=checkpoint.jsonable(rng_key)),
        data=(x, mask), temperature_schedule=temperatures, a=a, b=b)
    keys = rng_key[None] if num_restarts == 1 else jax.random.split(rng_key, num_restarts)
    floor_x = jnp.asarray(floor, x.dtype)
    starts = _init_starts(keys, x, mask, a, b, floor_x, num_vqs=num_vqs, num_states=num_states,
                          batch_size=restart_batch_size)
    runs = run(ALGORITHM, starts, (x, mask), (a, b, temperatures, floor_x,
                                              jnp.asarray(tol, x.dtype)),
               keys=keys, max_iterations=num_iterations, tol=tol,
               restart_batch=None if mesh is not None else restart_batch_size, mesh=mesh,
               checkpoint=saving)
    finals = _final_energies(runs.state, x, mask, a, b, temperatures[-1],
                             batch_size=restart_batch_size)
    # NaN finals (a start that broke down) never win; if all are NaN the first is kept.
    best = int(jnp.argmin(jnp.where(jnp.isnan(finals), jnp.inf, finals)))
    state, trace, it, done = select(runs, best)
    energies = trace.objective
    if not bool(jnp.all(jnp.isfinite(energies))):
        warnings.warn("fit_mcvq: the free energy became non-finite; check the data scale and "
                      "variance_floor", NumericalWarning, stacklevel=2)
    if not done:
        warnings.warn(f"fit_mcvq: not converged after {it} iterations (tol={tol}); raise "
                      "num_iterations or lengthen the schedule at T = 1",
                      ConvergenceWarning, stacklevel=2)
    return MCVQResult(g=state.g, m=state.m, mu=state.mu, sigma=state.sigma, a=a, b=b,
                      free_energy_trace=energies, temperature_trace=trace.temperature,
                      num_iterations=it, converged=done, variance_floor=floor,
                      restart_free_energies=finals, best_restart=best,
                      restart_converged=runs.converged)


@jax.jit
def _infer(x, mask, g, mu, sigma, b):
    moments, shift = _moments(x, mask)
    return _fast_e_step(moments, _natural(mu, sigma, shift), g, b)


def infer_states(result: MCVQResult, x_new, *, mask=None):
    """Q(s_k = j) for new examples with the fitted parameters fixed, (N_new, K, J).

    One E-step with g, mu, sigma and b of ``result`` (exact: with g fixed the
    E-step minimises F over m in closed form). Missing entries (``mask`` False,
    any value, NaN included) drop out; an example with no observed entry gets
    the prior b.
    """
    dim = result.mu.shape[0]
    x_new, mask = _check_observed(x_new, mask, "x_new", dim=dim)
    return _infer(x_new.astype(result.mu.dtype), mask, result.g, result.mu, result.sigma,
                  result.b)
