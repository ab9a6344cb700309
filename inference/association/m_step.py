"""The M-step of :func:`inference.fit_map_em`: the mean energy of the examples at their
states as a function of the program's ``numpyro.param`` sites, the check that it is
quadratic in them, and its minimisers.

* :func:`quadratic_misfits`: value, gradient and Hessian-vector products at a point
  predict the mean energy at random other points exactly when it is quadratic;
* :func:`hessian_support` and :func:`colouring`: the Hessian's sparsity (the union of
  its non-zeros at probe states) and a colouring of its columns (Curtis, Powell and
  Reid, "On the estimation of sparse Jacobian matrices", IMA Journal of Applied
  Mathematics 13, 1974), so that one Hessian-vector product per colour gives the whole
  Hessian;
* :func:`normal_equations`: the closed-form minimiser (Cholesky with a rounding-level
  ridge and iterative refinement; conjugate gradients for many parameters);
* :func:`lbfgs`: L-BFGS (optax) where the energy is not quadratic.

Parameters are handled unconstrained: :func:`constrain` / :func:`unconstrain` map them
through the ``constraint`` of their ``numpyro.param`` site.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree
from numpyro.distributions import biject_to

from inference.association.program_sites import program_energy
from inference.program.kwargs import join_args

__all__ = ["ConstraintKey", "Pattern", "colouring", "constrain", "hessian_support", "lbfgs",
           "mean_energy", "normal_equations", "quadratic_misfits", "quadratic_misfits_of",
           "quadratic_misfits_of_objective",
           "unconstrain", "DENSE_PARAMETERS"]

#: Parameters at most for the dense normal equations (else conjugate gradients).
DENSE_PARAMETERS = 4096


def constrain(params, constraint_of):
    return {name: biject_to(constraint_of[name])(value) for name, value in params.items()}


def unconstrain(params, constraint_of):
    return {name: biject_to(constraint_of[name]).inv(value) for name, value in params.items()}


class ConstraintKey:
    """A constraint as a hashable, comparable option (by identity of the object)."""

    def __init__(self, constraint):
        self.constraint = constraint

    def __hash__(self):
        return id(self.constraint)

    def __eq__(self, other):
        return isinstance(other, ConstraintKey) and other.constraint is self.constraint

    def __lt__(self, other):
        return id(self.constraint) < id(other.constraint)


def mean_energy(unconstrained, states, args, kwargs, layout, noise_mode, noise_value,
                 constraint_of, model):
    params = constrain(unconstrained, constraint_of)
    noise = None if noise_mode is None else ("program" if noise_mode == "program"
                                             else noise_value)
    energy = program_energy(model, (params, *args), kwargs, layout, noise)
    return jnp.mean(energy(states.astype(jnp.result_type(float))))


def probe_states(layout, seed):
    return jax.random.bernoulli(jax.random.key(seed), 0.5,
                                (layout.num_examples, layout.num_units))


@partial(jax.jit, static_argnames=("model", "static_args", "static_kwargs", "layout",
                                   "noise_mode", "constraints"))
def quadratic_misfits(unconstrained, args, dynamic, noise_value, *, model, static_args,
                       static_kwargs, layout, noise_mode, constraints):
    constraint_of = {name: key.constraint for name, key in constraints}
    return quadratic_misfits_of(unconstrained, args, dynamic, noise_value, model, static_args,
                                static_kwargs, layout, noise_mode, constraint_of)


def quadratic_misfits_of(unconstrained, args, dynamic, noise_value, model, static_args,
                         static_kwargs, layout, noise_mode, constraint_of):
    """Whether the mean energy is quadratic in the parameters (unconstrained), at
    ``unconstrained`` and random binary states: value, gradient and Hessian there give it
    at three random other points; returns the three relative misfits."""
    kwargs = {**dynamic, **dict(static_kwargs)}
    args = join_args(args, static_args)
    states = probe_states(layout, 1)
    return quadratic_misfits_of_objective(
        lambda params: mean_energy(params, states, args, kwargs, layout, noise_mode,
                                   noise_value, constraint_of, model), unconstrained)


def quadratic_misfits_of_objective(objective, params):
    """Whether ``objective`` (of a pytree of parameters) is quadratic: its value, gradient
    and Hessian at ``params`` predict it at three random other points; returns the three
    relative misfits (all small for a quadratic). Jittable."""
    flat, unravel = ravel_pytree(params)

    def f(vector):
        return objective(unravel(vector))

    value, gradient = jax.value_and_grad(f)(flat)
    directions = jax.random.normal(jax.random.key(2), (3, flat.shape[0]), flat.dtype)
    directions = directions * (1.0 + jnp.abs(flat))

    def misfit(delta):
        curvature = jax.jvp(jax.grad(f), (flat,), (delta,))[1] @ delta
        predicted = value + gradient @ delta + 0.5 * curvature
        actual = f(flat + delta)
        return jnp.abs(actual - predicted) / (1.0 + jnp.abs(actual) + jnp.abs(predicted))

    return jax.vmap(misfit)(directions)


@partial(jax.jit, static_argnames=("model", "static_args", "static_kwargs", "layout",
                                   "noise_mode", "constraints"))
def hessian_support(unconstrained, args, dynamic, noise_value, *, model, static_args,
                     static_kwargs, layout, noise_mode, constraints):
    """Where the mean energy's Hessian in the parameters can be non-zero: the union of
    its non-zeros at every unit off, every unit on and two random states (a coupling
    gated by the states shows at one of them). None of the pattern when the parameters
    are too many for a dense Hessian."""
    constraint_of = {name: key.constraint for name, key in constraints}
    kwargs = {**dynamic, **dict(static_kwargs)}
    args = join_args(args, static_args)
    flat, unravel = ravel_pytree(unconstrained)
    shape = (layout.num_examples, layout.num_units)
    probes = jnp.stack([jnp.zeros(shape, bool), jnp.ones(shape, bool),
                        probe_states(layout, 3), probe_states(layout, 4)])

    def support(states):
        def f(vector):
            return mean_energy(unravel(vector), states, args, kwargs, layout, noise_mode,
                                noise_value, constraint_of, model)
        return jax.hessian(f)(flat) != 0

    return jnp.any(jax.lax.map(support, probes), axis=0)


def colouring(support: np.ndarray):
    """A colouring of the Hessian's columns in which no two columns of one colour share a
    row (Curtis, Powell and Reid, "On the estimation of sparse Jacobian matrices", IMA
    J. Appl. Math. 1974): one Hessian-vector product per colour gives every entry.
    Returns (rows, cols, colours, num colours) of the non-zeros, or None when the
    colouring saves little (half the columns or more)."""
    size = support.shape[0]
    if size > DENSE_PARAMETERS:
        return None
    support = support | support.T
    colours = np.zeros(size, int)
    used = np.zeros((size, size + 1), bool)  # row -> colours of the columns it meets
    for column in range(size):
        rows = np.flatnonzero(support[:, column])
        free = ~np.any(used[rows], axis=0) if rows.size else np.ones(size + 1, bool)
        colours[column] = int(np.argmax(free))
        used[rows, colours[column]] = True
    count = int(colours.max()) + 1 if size else 0
    if count * 2 > size:
        return None
    rows, cols = np.nonzero(support)
    return Pattern(rows, cols, colours, count)


class Pattern:
    """The Hessian's non-zeros (``rows``, ``cols``) and its columns' ``colours``
    (:func:`colouring`); hashed by identity, as a static option of the compiled step
    (a fit keeps the same object for its program and shapes)."""

    def __init__(self, rows, cols, colours, count):
        self.rows, self.cols, self.colours, self.count = rows, cols, colours, count


def normal_equations(objective, params, pattern=None):
    """The minimiser of a quadratic ``objective`` with a positive semi-definite Hessian H:
    params - H^+ g. Returns (new params, solved, missed): ``solved`` is False where H is
    not positive semi-definite (the parameters are then kept); ``missed`` is True where
    H has a non-zero outside ``pattern`` (the caller then solves again without it).

    H: with a ``pattern`` (:func:`colouring`), one Hessian-vector product per colour,
    checked against one more product in a random direction; else the dense Hessian. Up
    to :data:`DENSE_PARAMETERS` parameters: Cholesky of H + lambda I, lambda a
    rounding-level ridge (so that parameters the states leave undetermined, H singular,
    get no step), then two steps of iterative refinement on H itself, which remove the
    ridge's bias on every well-determined direction. Beyond: conjugate gradients on
    Hessian-vector products, from zero (which stay in the range of H).
    """
    flat, unravel = ravel_pytree(params)

    def f(vector):
        return objective(unravel(vector))

    def hvp(vector):
        return jax.jvp(jax.grad(f), (flat,), (vector,))[1]

    gradient = jax.grad(f)(flat)
    size = flat.shape[0]
    missed = jnp.asarray(False)
    if size > DENSE_PARAMETERS:
        delta = jax.scipy.sparse.linalg.cg(hvp, -gradient, maxiter=size)[0]
        solved = jnp.all(jnp.isfinite(delta))
        return unravel(flat + jnp.where(solved, delta, 0.0)), solved, missed
    if pattern is None:
        hessian = jax.hessian(f)(flat)
    else:
        seeds = jax.nn.one_hot(jnp.asarray(pattern.colours), pattern.count,
                               dtype=flat.dtype).T
        compressed = jax.vmap(hvp)(seeds)  # (colours, size): sums of same-colour columns
        rows, cols = jnp.asarray(pattern.rows), jnp.asarray(pattern.cols)
        entries = compressed[jnp.asarray(pattern.colours)[cols], rows]
        hessian = jnp.zeros((size, size), flat.dtype).at[rows, cols].set(entries)
        direction = jax.random.normal(jax.random.key(5), (size,), flat.dtype)
        product = hvp(direction)
        missed = ~(jnp.max(jnp.abs(product - hessian @ direction))
                   <= 1e-3 * (jnp.max(jnp.abs(product)) + jnp.finfo(flat.dtype).tiny))
    hessian = 0.5 * (hessian + hessian.T)
    scale = jnp.maximum(jnp.max(jnp.abs(jnp.diagonal(hessian))), jnp.finfo(flat.dtype).tiny)
    ridge = scale * size * jnp.finfo(flat.dtype).eps * 10
    factor = jax.scipy.linalg.cho_factor(hessian + ridge * jnp.eye(size, dtype=flat.dtype))
    delta = jax.scipy.linalg.cho_solve(factor, -gradient)
    for _ in range(2):
        delta = delta + jax.scipy.linalg.cho_solve(factor, -gradient - hessian @ delta)
    solved = jnp.all(jnp.isfinite(delta))
    return unravel(flat + jnp.where(solved, delta, 0.0)), solved, missed


def lbfgs(objective, params, num_steps):
    """``num_steps`` of L-BFGS (optax, with its zoom line search) from ``params``."""
    solver = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(objective)

    def body(carry, _):
        params, opt_state = carry
        value, grad = value_and_grad(params, state=opt_state)
        updates, opt_state = solver.update(grad, opt_state, params, value=value, grad=grad,
                                           value_fn=objective)
        return (optax.apply_updates(params, updates), opt_state), None

    (params, _), _ = jax.lax.scan(body, (params, solver.init(params)), None, length=num_steps)
    return params
