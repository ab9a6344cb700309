"""A monotone L-BFGS for the M-step of :func:`inference.fit_em`: no step raises the objective.

Limited-memory BFGS (the two-loop recursion; J. Nocedal and S. J. Wright, "Numerical
Optimization", 2nd ed., Springer, 2006, algorithm 7.4) with a backtracking line search
that accepts a step only where the objective falls (Armijo's condition), at most
:data:`MAX_BACKTRACKS` halvings, else keeps the point. Every loop has a fixed bound, so
the restarts of a fit can run side by side under ``vmap`` without one restart's line
search holding the others, and the M-step never undoes the E-step's progress: the
EM objective stays monotone whatever the number of steps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

__all__ = ["minimize", "MAX_BACKTRACKS", "HISTORY"]

#: Halvings of the step at most per iteration.
MAX_BACKTRACKS = 30
#: Pairs (s, y) kept for the inverse-Hessian approximation.
HISTORY = 8
_ARMIJO = 1e-4


def _direction(gradient, s_hist, y_hist, rho, count):
    """-H g by the two-loop recursion over the ``count`` newest pairs (a ring)."""
    m = s_hist.shape[0]
    order = (count - 1 - jnp.arange(m)) % m  # newest first
    valid = jnp.arange(m) < jnp.minimum(count, m)

    def first(q, i):
        j = order[i]
        alpha = jnp.where(valid[i], rho[j] * (s_hist[j] @ q), 0.0)
        return q - alpha * y_hist[j], alpha

    q, alphas = jax.lax.scan(first, gradient, jnp.arange(m))
    newest = order[0]
    yy = y_hist[newest] @ y_hist[newest]
    gamma = jnp.where((count > 0) & (yy > 0), (s_hist[newest] @ y_hist[newest]) / yy, 1.0)
    r = gamma * q

    def second(r, i):
        j = order[i]
        beta = rho[j] * (y_hist[j] @ r)
        return jnp.where(valid[i], r + s_hist[j] * (alphas[i] - beta), r), None

    r, _ = jax.lax.scan(second, r, jnp.arange(m)[::-1])
    return -r


def minimize(objective, params, num_steps: int):
    """``num_steps`` iterations of monotone L-BFGS on ``objective`` from ``params`` (a
    pytree); returns the parameters reached (never worse than ``params``)."""
    flat, unravel = ravel_pytree(params)

    def f(vector):
        return objective(unravel(vector))

    value_and_grad = jax.value_and_grad(f)
    size = flat.shape[0]
    dtype = flat.dtype
    value, gradient = value_and_grad(flat)

    def step(carry, _):
        x, value, gradient, s_hist, y_hist, rho, count = carry
        direction = _direction(gradient, s_hist, y_hist, rho, count)
        slope = direction @ gradient
        use_gradient = ~(slope < 0) | ~jnp.all(jnp.isfinite(direction))
        direction = jnp.where(use_gradient, -gradient, direction)
        slope = jnp.where(use_gradient, -(gradient @ gradient), slope)
        # The first step (and a steepest-descent fallback) moves by about one unit.
        scale = jnp.where((count == 0) | use_gradient,
                          1.0 / jnp.maximum(jnp.sqrt(gradient @ gradient), 1.0), 1.0)

        def search_cond(state):
            tries, _, new_value, _ = state
            accepted = jnp.isfinite(new_value) & (
                new_value <= value + _ARMIJO * (scale * 0.5 ** (tries - 1)) * slope)
            return (tries < MAX_BACKTRACKS) & ~(accepted & (tries > 0))

        def search_body(state):
            tries, _, _, _ = state
            t = scale * 0.5 ** tries
            candidate = x + t * direction
            return tries + 1, candidate, f(candidate), t

        tries, candidate, new_value, _ = jax.lax.while_loop(
            search_cond, search_body,
            (jnp.zeros((), jnp.int32), x, jnp.asarray(jnp.inf, value.dtype),
             jnp.zeros((), dtype)))
        better = jnp.isfinite(new_value) & (new_value < value) & (slope < 0)
        new_x = jnp.where(better, candidate, x)
        new_value_, new_gradient = value_and_grad(new_x)
        s = new_x - x
        y = new_gradient - gradient
        sy = s @ y
        keep = better & (sy > 1e-10 * jnp.sqrt((s @ s) * (y @ y)))
        slot = count % HISTORY
        s_hist = jnp.where(keep, s_hist.at[slot].set(s), s_hist)
        y_hist = jnp.where(keep, y_hist.at[slot].set(y), y_hist)
        rho = jnp.where(keep, rho.at[slot].set(1.0 / jnp.where(keep, sy, 1.0)), rho)
        count = count + keep.astype(jnp.int32)
        del tries
        return (new_x, new_value_, new_gradient, s_hist, y_hist, rho, count), None

    history = jnp.zeros((HISTORY, size), dtype)
    carry = (flat, value, gradient, history, history, jnp.zeros(HISTORY, dtype),
             jnp.zeros((), jnp.int32))
    carry, _ = jax.lax.scan(step, carry, None, length=num_steps)
    return unravel(carry[0])
