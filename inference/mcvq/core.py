"""The mathematics of the variational EM for Multiple Cause Vector Quantization
(Ross and Zemel (2003), sec. 3).

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
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003: sec. 3 (free energy, E- and M-steps,
annealing), sec. 5.1-5.2 (schedule, missing data).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import xlogy
from numpyro import handlers

from inference.engine.sharding import psum
from inference.program.handlers import map_gaussian
from ppl_models import mcvq
from ppl_models.validation import check_data, check_positive, check_positive_int, is_traced

__all__ = ["MCVQState", "MCVQInfo", "init", "step", "likelihood_terms", "gaussian_parameters",
           "free_energy", "reconstruct", "linear_schedule", "schedule", "bucket", "data_moments",
           "natural_parameters", "energies", "statistics", "kl_terms",
           "free_energy_from_statistics", "e_step", "g_step", "m_step", "reference_e_step",
           "reference_g_step", "reference_free_energy", "check_mask", "check_observed",
           "priors", "infer"]


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


def data_moments(x, mask, axis_name=None):
    """The (N, 3D) moments [o, o xc, o xc^2] and the shift (D,): xc = x - observed mean.

    ``axis_name``: x is one device's rows (inside ``shard_map``); the observed mean
    is over all devices' rows.
    """
    obs = mask.astype(x.dtype)
    shift = (psum(jnp.sum(obs * x, axis=0), axis_name)
             / jnp.maximum(psum(jnp.sum(obs, axis=0), axis_name), 1.0))
    centred = obs * (x - shift)
    return jnp.concatenate([obs, centred, centred * centred], axis=1), shift


def natural_parameters(mu, sigma, shift):
    """(3, D, K, J): ell^c_dkj = o (c + xc beta + xc^2 alpha), loc and scale from the program."""
    loc, scale = gaussian_parameters(mu, sigma)
    loc = loc - shift[:, None, None]
    precision = 1.0 / jnp.square(scale)
    constant = 0.5 * jnp.log(2.0 * jnp.pi) + jnp.log(scale) + 0.5 * jnp.square(loc) * precision
    return jnp.stack([constant, -loc * precision, 0.5 * precision])


def energies(moments, natural, g):
    """sum_d g_dk ell^c_dkj, (N, K, J), as one (N, 3D) x (3D, K J) product."""
    _, dim, num_vqs, num_states = natural.shape
    weights = (natural * g[None, :, :, None]).reshape(3 * dim, num_vqs * num_states)
    return (moments @ weights).reshape(-1, num_vqs, num_states)


def statistics(moments, m, axis_name=None):
    """sum_c m^c_kj [o, o xc, o xc^2]^c_d, (3, D, K, J), as one (3D, N) x (N, K J) product.

    ``axis_name``: one device's rows, summed over the devices (``psum``).
    """
    num, num_vqs, num_states = m.shape
    stats = (moments.T @ m.reshape(num, -1)).reshape(3, -1, num_vqs, num_states)
    return psum(stats, axis_name)


def kl_terms(g, m, a, b, temperature, axis_name=None):
    # A padded example (nothing observed) has m = b: its term is exactly zero.
    return (psum(jnp.sum(xlogy(m, m) - xlogy(m, b)), axis_name)
            + temperature * jnp.sum(xlogy(g, g) - xlogy(g, a)))


def free_energy_from_statistics(stats, natural, g, m, a, b, temperature, axis_name=None):
    """F_T from the statistics of m (module docstring)."""
    expected = jnp.sum(stats * natural, axis=(0, 3))  # (D, K): sum_cj m ell
    return kl_terms(g, m, a, b, temperature, axis_name) + jnp.sum(g * expected)


def e_step(moments, natural, g, b):
    return jax.nn.softmax(jnp.log(b) - energies(moments, natural, g), axis=-1)


def g_step(stats, natural, a, temperature):
    expected = jnp.sum(stats * natural, axis=(0, 3))  # (D, K)
    return jax.nn.softmax(jnp.log(a) - expected / temperature, axis=-1)


def m_step(stats, mu, sigma, shift, floor):
    """Means and floored variances from the statistics; states no example uses keep theirs."""
    weight, first, second = stats
    used = weight > 1e-10
    safe = jnp.where(used, weight, 1.0)
    mean = first / safe
    var = second / safe - jnp.square(mean)
    new_mu = jnp.where(used, mean + shift[:, None, None], mu)
    new_sigma = jnp.where(used, jnp.sqrt(jnp.maximum(var, floor)), sigma)
    return new_mu, new_sigma


def reference_e_step(ell, g, b):
    """m^c_kj ∝ b_kj exp(-sum_d g_dk ell^c_dkj)."""
    return jax.nn.softmax(jnp.log(b) - jnp.einsum("dk,cdkj->ckj", g, ell), axis=-1)


def reference_g_step(ell, m, a, temperature):
    """g_dk ∝ a_dk exp(-(1/T) sum_{c,j} m^c_kj ell^c_dkj)."""
    return jax.nn.softmax(jnp.log(a) - jnp.einsum("ckj,cdkj->dk", m, ell) / temperature,
                          axis=-1)


def reference_free_energy(ell, g, m, a, b, temperature):
    """F_T from the full likelihood terms (the reference form)."""
    return kl_terms(g, m, a, b, temperature) + jnp.einsum("dk,ckj,cdkj->", g, m, ell)


def free_energy(x, g, m, mu, sigma, *, mask=None, a=None, b=None, temperature=None):
    """F_T of the module docstring (a scalar); ``temperature`` defaults to N (the paper's F).

    F_N is the negative ELBO of ``ppl_models.mcvq.model`` under the factorised
    guide (g, m); F_1 that of ``model(shared_r=True)``. ``x`` may hold NaN where
    ``mask`` is False.
    """
    x = jnp.asarray(x)
    mask = np.ones(x.shape, bool) if mask is None else mask
    num_vqs, num_states = jnp.shape(mu)[1:]
    a, b = priors(a, b, x.shape[1], num_vqs, num_states, x.dtype)
    temperature = x.shape[0] if temperature is None else temperature
    return _free_energy_of_data(x, mask, g, m, mu, sigma, a, b, temperature)


@jax.jit
def _free_energy_of_data(x, mask, g, m, mu, sigma, a, b, temperature):
    mask = jnp.asarray(mask, bool)
    x = jnp.where(mask, x, 0.0)
    return reference_free_energy(likelihood_terms(x, mask, mu, sigma), g, m, a, b, temperature)


def reconstruct(g, m, mu):
    """x_hat^c_d = sum_k g_dk sum_j m^c_kj mu_dkj, (N, D) (sec. 3: the mean of the mixture).

    ``g`` (D, K), ``m`` (N, K, J), ``mu`` (D, K, J); raises ``ValueError`` naming the
    argument whose shape disagrees with ``mu``'s.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> g = jnp.eye(2)  # dimension d is explained by VQ d (D = K = 2)
    >>> m = jnp.array([[[1.0, 0.0], [0.0, 1.0]]])  # one example: VQ 0 in state 0, VQ 1 in 1
    >>> mu = jnp.arange(8.0).reshape(2, 2, 2)  # mu[d, k, j]
    >>> reconstruct(g, m, mu).tolist()  # [mu[0, 0, 0], mu[1, 1, 1]]
    [[0.0, 7.0]]
    """
    if jnp.ndim(mu) != 3:
        raise ValueError(f"mu must have shape (D, K, J); got shape {jnp.shape(mu)}")
    dim, k, j = jnp.shape(mu)
    if jnp.shape(g) != (dim, k):
        raise ValueError(f"g must have shape (D, K) = {(dim, k)} like mu; got {jnp.shape(g)}")
    if jnp.ndim(m) != 3 or jnp.shape(m)[1:] != (k, j):
        raise ValueError(f"m must have shape (N, K, J) with (K, J) = {(k, j)} like mu; got "
                         f"{jnp.shape(m)}")
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
    moments, shift = data_moments(x, mask, axis_name)
    m = e_step(moments, natural_parameters(mu, sigma, shift), g, b)
    return MCVQState(g, m, mu, sigma, statistics(moments, m, axis_name))


def step(state: MCVQState, x, mask, a, b, temperature, floor, axis_name=None):
    """One iteration: g-step and M-step from the current m, then the E-step; pure and jittable.

    Returns ``(new_state, MCVQInfo)``; ``x`` holds 0 where ``mask`` is False. With
    ``axis_name`` x, ``mask`` and m are one device's rows and every sum over examples
    (the shift, the statistics, the KL of m) is added over the devices.
    """
    moments, shift = data_moments(x, mask, axis_name)
    g = g_step(state.stats, natural_parameters(state.mu, state.sigma, shift), a, temperature)
    mu, sigma = m_step(state.stats, state.mu, state.sigma, shift, floor)
    natural = natural_parameters(mu, sigma, shift)
    m = e_step(moments, natural, g, b)
    stats = statistics(moments, m, axis_name)
    energy = free_energy_from_statistics(stats, natural, g, m, a, b, temperature, axis_name)
    return MCVQState(g, m, mu, sigma, stats), MCVQInfo(energy, jnp.asarray(temperature, x.dtype))

def bucket(num_iterations: int) -> int:
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


def schedule(temperature_schedule, max_iterations, initial_temperature, num):
    """The temperatures of :func:`fit_mcvq` from its options: ``(array, count)``.

    ``temperature_schedule`` None: :func:`linear_schedule` over ``max_iterations``
    from ``initial_temperature`` (default ``num - 1`` for ``num`` examples, at
    least 1); a number: that temperature ``max_iterations`` times; an array: itself
    (1-D, positive, finite, else ``ValueError`` naming ``temperature_schedule``).
    Also the schedule of the streamed fit (:mod:`inference.mcvq.stream`).
    """
    if temperature_schedule is None:
        max_iterations = check_positive_int(max_iterations, "max_iterations")
        start = float(max(num - 1, 1)) if initial_temperature is None else initial_temperature
        temperatures = np.asarray(linear_schedule(max_iterations, start), dtype=float)
    else:
        temperatures = np.asarray(temperature_schedule, dtype=float)
        if temperatures.ndim == 0:
            max_iterations = check_positive_int(max_iterations, "max_iterations")
            temperatures = np.full(max_iterations, float(temperatures))
        if temperatures.ndim != 1 or temperatures.size < 1 or not np.all(
                np.isfinite(temperatures) & (temperatures > 0)):
            raise ValueError("temperature_schedule must be a positive number or a 1-D array "
                             f"of positive temperatures; got {temperature_schedule!r}")
    return temperatures, int(temperatures.shape[0])


def check_mask(mask, shape, name="mask"):
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


def check_observed(x, mask, name="x", *, dim=None):
    """x with 0 at unobserved entries (float), after checking the observed ones are finite."""
    if is_traced(x):
        return x, mask
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D with shape (num_examples, dim); got shape "
                         f"{arr.shape}")
    mask = check_mask(mask, arr.shape)
    if np.issubdtype(arr.dtype, np.number):
        bad = int(np.sum(~np.isfinite(arr) & mask))
        if bad:
            raise ValueError(f"{name} has {bad} NaN or infinite value(s) where mask is True "
                             "(observed); mark them False in mask")
        arr = np.where(mask, arr, 0)
    return check_data(arr, name, dim=dim), jnp.asarray(mask)


def priors(a, b, dim, num_vqs, num_states, dtype):
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


@jax.jit
def infer(x, mask, g, mu, sigma, b):
    moments, shift = data_moments(x, mask)
    return e_step(moments, natural_parameters(mu, sigma, shift), g, b)


