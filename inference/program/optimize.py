"""Deterministic smooth minimisation shared by the zoo's algorithms.

:func:`lbfgs_minimize` wraps ``optax.lbfgs`` (zoom line search, strong Wolfe
conditions) in a ``lax.while_loop``, so that it is jittable and ``vmap``-able.
Users: the binary GVQ M-step (``inference.gvq.constraints.binary_m_step``,
Westerdijk, Barber and Wiegerinck (2001), sec. 5.3) and the MAP of the hidden causes of
the clipped-Gaussian model (``inference.clipped.fit.infer_hidden``, Lee and Sompolinsky
(1999)).

References
----------
M. Westerdijk, D. Barber and W. Wiegerinck, "Deterministic generative models for fast
feature discovery", Data Mining and Knowledge Discovery 5(4), 2001.
D. D. Lee and H. Sompolinsky, "Learning a continuous hidden variable model for binary
data", Advances in Neural Information Processing Systems 11 (NIPS 1998), 1999.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

__all__ = ["lbfgs_minimize"]


def lbfgs_minimize(fun, x0, *, max_iterations, tol=1e-5, memory_size=10):
    """Minimise ``fun`` from the flat array ``x0`` by L-BFGS (``optax.lbfgs``); jittable.

    Stops after ``max_iterations`` iterations or once the gradient's Euclidean norm
    is below ``tol`` times its norm at ``x0`` (relative, so that the criterion is
    reachable in float32 whatever the objective's scale). Returns
    ``(x, value, converged)``, ``converged`` meaning the gradient criterion was
    met. The returned point is never worse than ``x0``.
    """
    threshold = tol * jnp.linalg.norm(jax.grad(fun)(x0))
    optimizer = optax.lbfgs(memory_size=memory_size)
    value_and_grad = optax.value_and_grad_from_state(fun)

    def step(carry):
        params, state = carry
        value, grad = value_and_grad(params, state=state)
        updates, state = optimizer.update(grad, state, params, value=value, grad=grad,
                                          value_fn=fun)
        return optax.apply_updates(params, updates), state

    def gradient_norm(state):
        return optax.tree.norm(optax.tree.get(state, "grad"))

    def running(carry):
        _, state = carry
        count = optax.tree.get(state, "count")
        return (count == 0) | ((count < max_iterations) & (gradient_norm(state) > threshold))

    x, state = jax.lax.while_loop(running, step, (x0, optimizer.init(x0)))
    start_value, value = fun(x0), fun(x)
    better = value <= start_value  # also False for a NaN value
    return (jnp.where(better, x, x0), jnp.where(better, value, start_value),
            better & (gradient_norm(state) <= threshold))
