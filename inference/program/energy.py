"""Energies of binary latent sites, read off a NumPyro program by autodiff.

For GVQ (:mod:`ppl_models.gvq`; M. Westerdijk, D. Barber and W. Wiegerinck,
"Deterministic generative models for fast feature discovery", Data Mining and
Knowledge Discovery 5(4), 2001, sec. 4.1, eq. 6-7) the energy of the association
step is

    E_x(s) = ||x - s @ F||^2 = ||x||^2 + sum_i h_i s_i + sum_{i<j} w_ij s_i s_j,
    h_i = -2 f_i.x + f_i.f_i,   w_ij = 2 f_i.f_j,

which is -2 sigma^2 log p(x | s) up to a constant. Rather than re-typing these
formulas, :func:`quadratic_energy` evaluates the program's log-density at a
*relaxed* s in R^n (the Bernoulli log-mass is linear in its value, a Gaussian
log-density with mean linear in s is quadratic) and takes its value, gradient
and Hessian at s = 0. Since s_i^2 = s_i on binary states, the diagonal of the
Hessian folds into h. A change to the program (another prior, a tempered
factor) changes the energy with no change here; :func:`check_quadratic`
confirms that the program is quadratic in s.

Energy units: under ``noise=None`` the program runs under
``handlers.noiseless`` and E = -log p (the sigma -> 0 limit of -2 sigma^2 log p);
with ``noise=sigma`` it runs under ``handlers.observation_noise(sigma=sigma)``
and E = -2 sigma^2 log p(x, s), so that priors on s keep their finite-noise
weight and argmin_s E is the MAP state.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.infer.util import log_density

from inference.program.handlers import noiseless, observation_noise
from inference.program.kwargs import split_model_kwargs
from ppl_models.validation import is_traced

__all__ = ["QuadraticEnergy", "energy_fn", "quadratic_energy", "check_quadratic", "latent_size"]


class QuadraticEnergy(NamedTuple):
    """E_x(s) = constant + linear . s + 1/2 s^T couplings s, for binary s.

    Attributes
    ----------
    linear : array (num_examples, num_features)
        h: the per-example linear coefficients (diagonal folded in).
    couplings : array (num_features, num_features)
        W: symmetric with zero diagonal; 1/2 s^T W s = sum_{i<j} w_ij s_i s_j.
    constant : array (num_examples,)
        E_x(0).
    """

    linear: jax.Array
    couplings: jax.Array
    constant: jax.Array

    def __call__(self, states):
        """Energy of ``states`` (num_examples, num_features), one per example."""
        states = jnp.asarray(states, self.linear.dtype)
        quad = 0.5 * jnp.einsum("ni,ij,nj->n", states, self.couplings, states)
        return self.constant + jnp.sum(self.linear * states, axis=-1) + quad


def energy_fn(model: Callable, *, latent: str = "s", noise=None, model_kwargs=None):
    """Return ``energy(x_row, s_row)``: the energy of one example at state ``s_row``.

    Parameters
    ----------
    model : callable
        NumPyro program called as ``model(x, **model_kwargs)`` with ``x`` a batch
        of examples (num_examples, dim); site ``latent`` holds the binary
        states (num_examples, num_features). Every other latent site must be
        fixed by ``model_kwargs`` (e.g. ``features=F``).
    latent : str
        Name of the binary site.
    noise : float or None
        ``None``: the sigma -> 0 limit; E = -log p under ``noiseless``.
        A positive float: E = -2 noise^2 log p under ``observation_noise``.
    model_kwargs : dict, optional
        Keyword arguments of the program.
    """
    model_kwargs = dict(model_kwargs or {})
    if noise is None:
        handled, scale = noiseless(model), 1.0
    else:
        handled, scale = observation_noise(model, sigma=noise), 2.0 * jnp.square(noise)

    def energy(x_row, s_row):
        logp, _ = log_density(handled, (x_row[None],), model_kwargs, {latent: s_row[None]})
        return -scale * logp

    return energy


def latent_size(model: Callable, x, *, latent: str = "s", model_kwargs=None) -> int:
    """Number of binary units of site ``latent`` (its last dimension)."""
    model_kwargs = dict(model_kwargs or {})
    shape = jax.eval_shape(
        lambda xx: handlers.trace(handlers.seed(model, 0)).get_trace(xx, **model_kwargs)[latent][
            "value"
        ],
        jnp.asarray(x[:1]),
    ).shape
    if len(shape) != 2:
        raise ValueError(
            f"site {latent!r} must have shape (num_examples, num_features); the program gives "
            f"{shape} for one example"
        )
    return int(shape[-1])


def quadratic_energy(
    model: Callable, x, *, latent: str = "s", noise=None, model_kwargs=None, num_features=None
) -> QuadraticEnergy:
    """Coefficients (h, W, constant) of E_x(s) for every example of ``x``.

    See the module docstring for the units. The couplings W are taken from the
    first example: for a program whose log-density is quadratic in s they do
    not depend on x (a Gaussian with mean linear in s; :func:`check_quadratic`
    tests this). Runs jitted when called with concrete arrays, and traces
    inline when called inside ``jit``.

    Returns
    -------
    QuadraticEnergy
        ``linear`` (num_examples, n), ``couplings`` (n, n), ``constant`` (num_examples,).

    Examples
    --------
    GVQ's energy ||x - s @ F||^2 (module docstring) with two features:

    >>> import jax.numpy as jnp
    >>> from ppl_models import gvq
    >>> F, x = jnp.array([[1.0, 0.0], [1.0, 1.0]]), jnp.array([[2.0, 1.0]])
    >>> energy = quadratic_energy(gvq.model, x, model_kwargs={"features": F})
    >>> energy.linear.tolist(), energy.couplings.tolist()  # h_i, w_ij = 2 f_i.f_j
    ([[-3.0, -4.0]], [[0.0, 2.0], [2.0, 0.0]])
    >>> energy(jnp.array([[1, 1]])).tolist(), energy(jnp.array([[1, 0]])).tolist()
    ([0.0], [2.0])
    """
    if is_traced(x) or any(is_traced(v) for v in jax.tree.leaves(model_kwargs)) or \
            is_traced(noise):
        return _quadratic_energy(model, x, latent=latent, noise=noise,
                                 model_kwargs=model_kwargs, num_features=num_features)
    dynamic, static = split_model_kwargs(model_kwargs)
    return _quadratic_energy_jit(jnp.asarray(x), noise, dynamic, model=model, latent=latent,
                                 static_kwargs=static, num_features=num_features)


@partial(jax.jit, static_argnames=("model", "latent", "static_kwargs", "num_features"))
def _quadratic_energy_jit(x, noise, dynamic_kwargs, *, model, latent, static_kwargs,
                          num_features):
    return _quadratic_energy(model, x, latent=latent, noise=noise,
                             model_kwargs={**dynamic_kwargs, **dict(static_kwargs)},
                             num_features=num_features)


def _quadratic_energy(model, x, *, latent, noise, model_kwargs, num_features):
    if num_features is None:
        num_features = latent_size(model, x, latent=latent, model_kwargs=model_kwargs)
    energy = energy_fn(model, latent=latent, noise=noise, model_kwargs=model_kwargs)
    zero = jnp.zeros(num_features, dtype=x.dtype)
    constant = jax.vmap(energy, (0, None))(x, zero)
    gradient = jax.vmap(jax.grad(energy, argnums=1), (0, None))(x, zero)
    hessian = jax.hessian(energy, argnums=1)(x[0], zero)
    hessian = 0.5 * (hessian + hessian.T)
    diagonal = jnp.diagonal(hessian)
    linear = gradient + 0.5 * diagonal
    couplings = hessian - jnp.diag(diagonal)
    return QuadraticEnergy(linear=linear, couplings=couplings, constant=constant)


def check_quadratic(
    model: Callable, x, *, latent: str = "s", noise=None, model_kwargs=None,
    num_checks: int = 8, rtol: float = 1e-4, rng_key=None,
) -> QuadraticEnergy:
    """Build :func:`quadratic_energy` and verify it against the program.

    Evaluates the program's energy at ``num_checks`` random binary states for
    up to 16 examples and compares with the quadratic form. Raises
    ``ValueError`` when they differ by more than ``rtol`` relative to the
    energies' scale: the program is not quadratic in ``latent`` and the
    quadratic-form algorithms do not apply to it. Returns the energy of all of
    ``x``. Not jittable (it raises); the algorithms call it once before their
    loops.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from ppl_models import gvq
    >>> F, x = jnp.array([[1.0, 0.0], [1.0, 1.0]]), jnp.array([[2.0, 1.0]])
    >>> check_quadratic(gvq.model, x, model_kwargs={"features": F}).couplings.shape
    (2, 2)
    >>> binary = {"features": F, "binary": True, "beta": 4.5}  # sigmoid output: not quadratic
    >>> check_quadratic(gvq.model, x, model_kwargs=binary)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: the program's energy is not quadratic in site 's': ...
    """
    if is_traced(x):
        return _quadratic_energy(model, x, latent=latent, noise=noise,
                                 model_kwargs=model_kwargs, num_features=None)
    rng_key = jax.random.key(0) if rng_key is None else rng_key
    dynamic, static = split_model_kwargs(model_kwargs)
    energy_q, exact, approx = _check_quadratic_jit(
        jnp.asarray(x), noise, dynamic, rng_key, model=model, latent=latent,
        static_kwargs=static, num_checks=num_checks)
    scale = float(jnp.max(jnp.abs(exact))) + 1.0
    err = float(jnp.max(jnp.abs(exact - approx)))
    if not np.isfinite(err) or err > rtol * scale:
        raise ValueError(
            f"the program's energy is not quadratic in site {latent!r}: the quadratic form "
            f"differs from the program by {err:.3g} (energy scale {scale:.3g}); the "
            "quadratic-form association methods need a Gaussian observation with mean "
            "linear in the binary states"
        )
    return energy_q


@partial(jax.jit, static_argnames=("model", "latent", "static_kwargs", "num_checks"))
def _check_quadratic_jit(x, noise, dynamic_kwargs, rng_key, *, model, latent, static_kwargs,
                         num_checks):
    kwargs = {**dynamic_kwargs, **dict(static_kwargs)}
    energy_q = _quadratic_energy(model, x, latent=latent, noise=noise, model_kwargs=kwargs,
                                 num_features=None)
    num_features = energy_q.linear.shape[1]
    sub = x[:16]
    states = jax.random.bernoulli(rng_key, 0.5, (num_checks, sub.shape[0], num_features))
    states = states.astype(sub.dtype)
    row_energy = energy_fn(model, latent=latent, noise=noise, model_kwargs=kwargs)
    exact = jax.vmap(jax.vmap(row_energy), (None, 0))(sub, states)
    part = QuadraticEnergy(energy_q.linear[: sub.shape[0]], energy_q.couplings,
                           energy_q.constant[: sub.shape[0]])
    approx = jax.vmap(part)(states)
    return energy_q, exact, approx
