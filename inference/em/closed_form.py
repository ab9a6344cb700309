"""Closed-form M-steps of :func:`inference.fit_em`, parameter block by parameter block.

The M-step maximises the expected log-joint ``Q(theta)``. Three shapes of ``Q`` in one
block of parameters (the others held fixed) have a maximiser in closed form, and the
program's log-density often has them:

* **quadratic** in unconstrained (real) parameters: means, regression coefficients,
  features. The normal equations (one Newton step) give the maximiser.
* **log-linear on a simplex**: ``Q = sum_j c_j log w_j + const`` for a parameter ``w``
  with ``constraints.simplex``, the probabilities of a categorical site (with or without
  a Dirichlet-like factor). Then ``c_j = w_j dQ/dw_j`` and the maximiser is
  ``w = c / sum(c)``, the normalised expected counts.
* **a power law in a positive parameter**, element by element: with ``v = log theta``,
  ``Q = a v - b exp(p v) + const``, ``p != 0``: a Gaussian scale (``p = -2``), a variance
  (``p = -1``), a rate or precision (``p = 1``), with or without an inverse-gamma-like
  factor. From the first two derivatives in ``v`` (``g`` and the diagonal ``h`` of the
  Hessian of ``-Q``) the maximiser is ``v + log(1 - p g / h) / p``; ``p`` is the ratio of
  the third derivative to the second.

:func:`choose_blocks` tests each shape on the program (the sites of one shape together;
where that fails, each alone, then those that pass together) by predicting ``Q`` at
random other values from its derivatives, as the quadratic test does;
:func:`closed_form_m_step` then maximises block after block (quadratic, positive,
simplex), each maximisation raising ``Q``: an expectation-conditional-maximisation step,
which is the exact M-step where the blocks' maximisers do not depend on each other (the
mixture's weights, means and scales; a mixture of regressions' coefficients and noise
scales) and a monotone one otherwise. Parameters of no such shape are left to L-BFGS
(:func:`inference.em.lbfgs.minimize`).

References
----------
X.-L. Meng and D. B. Rubin, "Maximum likelihood estimation via the ECM algorithm: a
general framework", Biometrika 80(2), 1993 (conditional maximisation, block by block,
keeps EM monotone).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.distributions import constraints

from inference.association.m_step import DENSE_PARAMETERS, Pattern, colouring, normal_equations

__all__ = ["BLOCK_RTOL", "KINDS", "eligible", "candidate_blocks", "block_checks",
           "choose_blocks", "closed_form_m_step", "hessian_support", "with_patterns",
           "without_patterns"]

#: Relative misfit of the predicted ``Q`` at or below which a block has its shape.
BLOCK_RTOL = 1e-4

#: The shapes, in the order the M-step maximises them.
KINDS = ("quadratic", "positive", "simplex")

# Exponents p are rounded to this grid (the program's p is a small rational: -2, -1, 1, 2).
_P_GRID = 0.5


def eligible(constraint, kind: str) -> bool:
    """Whether a parameter with this constraint can be of shape ``kind``."""
    if kind == "quadratic":
        return isinstance(constraint, type(constraints.real))
    if kind == "simplex":
        return isinstance(constraint, type(constraints.simplex))
    return (isinstance(constraint, constraints._GreaterThan)
            and not isinstance(constraint, constraints._GreaterThanEq)
            and jnp.ndim(constraint.lower_bound) == 0
            and float(constraint.lower_bound) == 0.0)


def _relative(actual, predicted, value):
    """|actual - predicted| relative to the change the move made (both ways), with a
    rounding-level floor: a shape that holds misses by rounding only."""
    eps = jnp.finfo(jnp.result_type(value)).eps
    scale = jnp.abs(actual - value) + jnp.abs(predicted - value) + 64 * eps * (
        1.0 + jnp.abs(value))
    misfit = jnp.abs(actual - predicted) / scale
    return jnp.where(jnp.isfinite(misfit), misfit, jnp.inf)


def _moves(key, shape, dtype, size=0.25):
    """Random moves of at least ``size`` in every coordinate, about three times that at
    most (a small move would leave the change in ``f`` near rounding level, where a shape
    that holds cannot be told from one that does not)."""
    z = jax.random.normal(key, shape, dtype)
    return jnp.where(z < 0, -size, size).astype(dtype) * (1.0 + 2.0 * jnp.abs(z))


def _sub(f, theta, names, transform=lambda s: s):
    """``f`` as a function of the sites ``names`` (through ``transform``), others fixed."""
    def g(sub):
        return f({**theta, **transform(sub)})
    return g


def _quadratic_misfit(f, theta, names, key):
    """Worst relative misfit of a quadratic model of ``f`` in the sites ``names`` at
    random points."""
    flat, unravel = ravel_pytree({n: theta[n] for n in names})
    g = _sub(f, theta, names)

    def fv(vector):
        return g(unravel(vector))

    value, gradient = jax.value_and_grad(fv)(flat)
    directions = _moves(key, (3, flat.shape[0]), flat.dtype) * (1.0 + jnp.abs(flat))

    def misfit(delta):
        curvature = jax.jvp(jax.grad(fv), (flat,), (delta,))[1] @ delta
        return _relative(fv(flat + delta), value + gradient @ delta + 0.5 * curvature,
                         value)

    return jnp.max(jax.vmap(misfit)(directions))


def _positive_derivatives(f, theta, names, third=False):
    """In ``v = log theta`` of the sites ``names``: v, f's gradient g and the Hessian's
    product with ones h (its diagonal where f is separable), and with ``third`` the third
    derivative's (t), as pytrees."""
    v = {n: jnp.log(theta[n]) for n in names}
    g_of = jax.grad(_sub(f, theta, names, lambda s: {n: jnp.exp(x) for n, x in s.items()}))
    ones = jax.tree.map(jnp.ones_like, v)

    def h_of(w):
        return jax.jvp(g_of, (w,), (ones,))[1]

    if not third:
        return v, g_of(v), h_of(v), None
    return v, g_of(v), h_of(v), jax.jvp(h_of, (v,), (ones,))[1]


def _exponent(h, t):
    """The site's exponent p = t / h, the median over its elements with h > 0, rounded
    to the grid (0 where none)."""
    ratio = jnp.where(h > 0, t / jnp.where(h > 0, h, 1.0), jnp.nan)
    p = jnp.nanmedian(ratio.ravel())
    p = jnp.round(p / _P_GRID) * _P_GRID
    return jnp.where(jnp.isfinite(p), p, 0.0)


def _positive_misfit(f, theta, names, powers, key):
    """Worst relative misfit of ``f = -a v + b exp(p v)`` (element by element; the sites'
    exponents ``powers``, or estimated where None) at random ``v``: (misfit, exponents)."""
    v, gradient, h, t = _positive_derivatives(f, theta, names, third=powers is None)
    if powers is None:
        exponents = [_exponent(h[n], t[n]) for n in names]
    else:
        exponents = [jnp.asarray(p, v[names[0]].dtype) for p in powers]
    value = f(theta)
    misfits = []
    for draw in range(3):
        keys = jax.random.split(jax.random.fold_in(key, draw), len(names))
        delta = {n: _moves(k, jnp.shape(v[n]), v[n].dtype, 0.5)
                 for n, k in zip(names, keys, strict=True)}
        predicted = value
        for n, p in zip(names, exponents, strict=True):
            p = jnp.where(p == 0, 1.0, p)
            predicted = predicted + jnp.sum(
                (gradient[n] - h[n] / p) * delta[n] + h[n] / p ** 2 * jnp.expm1(p * delta[n]))
        actual = f({**theta, **{n: jnp.exp(v[n] + delta[n]) for n in names}})
        misfits.append(_relative(actual, predicted, value))
    bad = jnp.any(jnp.stack([p == 0 for p in exponents]))
    return jnp.where(bad, jnp.inf, jnp.max(jnp.stack(misfits))), jnp.stack(exponents)


def _simplex_misfit(f, theta, names, key):
    """Worst relative misfit of ``f = -sum_j c_j log w_j`` (``c_j = -w_j df/dw_j``) at
    random points of the simplices."""
    gradient = jax.grad(_sub(f, theta, names))({n: theta[n] for n in names})
    value = f(theta)
    misfits = []
    for draw in range(3):
        keys = jax.random.split(jax.random.fold_in(key, draw), len(names))
        moved, predicted = {}, value
        for n, k in zip(names, keys, strict=True):
            w = theta[n]
            moved[n] = jax.nn.softmax(jnp.log(w) + _moves(k, jnp.shape(w), w.dtype, 0.5),
                                      axis=-1)
            counts = -w * gradient[n]
            predicted = predicted - jnp.sum(counts * (jnp.log(moved[n]) - jnp.log(w)))
        misfits.append(_relative(f({**theta, **moved}), predicted, value))
    return jnp.max(jnp.stack(misfits))


def candidate_blocks(constraint_of) -> tuple:
    """Every parameter that could have a closed form, by shape: ``((kind, sites, None),
    ...)`` (the exponents not yet known)."""
    names = sorted(constraint_of)
    blocks = []
    for kind in KINDS:
        sites = tuple(n for n in names if eligible(constraint_of[n], kind))
        if sites:
            blocks.append((kind, sites, None))
    return tuple(blocks)


def block_checks(f, theta, blocks, key):
    """The shape tests of ``f = -Q / N`` at constrained parameters ``theta``, one per block
    ``(kind, sites, exponents or None)``: a tuple of (relative misfit, exponents) (the
    exponents estimated where None; zeros for the other kinds). Jittable with ``blocks``
    static."""
    out = []
    for index, (kind, sites, powers) in enumerate(blocks):
        key_block = jax.random.fold_in(key, index)
        exponents = jnp.zeros(len(sites))
        if kind == "quadratic":
            misfit = _quadratic_misfit(f, theta, sites, key_block)
        elif kind == "positive":
            misfit, exponents = _positive_misfit(f, theta, sites, powers, key_block)
        else:
            misfit = _simplex_misfit(f, theta, sites, key_block)
        out.append((misfit, exponents))
    return tuple(out)


def choose_blocks(measure, constraint_of) -> tuple:
    """The M-step's closed-form blocks: ``measure(blocks)`` returns
    :func:`block_checks`' values for ``blocks``. Each shape's parameters are tested
    together; where that fails, each alone, then those that pass together. Returns
    ``((kind, sites, exponents), ...)`` in the order of :data:`KINDS`."""
    candidates = candidate_blocks(constraint_of)
    if not candidates:
        return ()
    chosen = []
    for (kind, sites, _), (misfit, exponents) in zip(
            candidates, jax.device_get(measure(candidates)), strict=True):
        if misfit > BLOCK_RTOL and len(sites) > 1:
            alone = jax.device_get(measure(tuple((kind, (n,), None) for n in sites)))
            passing = [(n, float(e[0])) for n, (m, e) in zip(sites, alone, strict=True)
                       if m <= BLOCK_RTOL]
            sites = tuple(n for n, _ in passing)
            if not sites:
                continue
            powers = tuple(e for _, e in passing) if kind == "positive" else None
            (misfit, exponents), = jax.device_get(measure(((kind, sites, powers),)))
        if misfit <= BLOCK_RTOL:
            powers = tuple(float(e) for e in exponents) if kind == "positive" else ()
            chosen.append((kind, sites, powers))
    return tuple(chosen)


def hessian_support(f, theta, sites):
    """Where the Hessian of ``f`` in the sites ``sites`` is non-zero (dense; jittable), or
    None when they are more than the dense limit."""
    flat, unravel = ravel_pytree({n: theta[n] for n in sites})
    if flat.shape[0] > DENSE_PARAMETERS:
        return None
    g = _sub(f, theta, sites)
    return jax.hessian(lambda vector: g(unravel(vector)))(flat) != 0


def with_patterns(blocks, support) -> tuple:
    """``blocks`` with the quadratic block's Hessian sparsity pattern (a colouring of its
    columns: one Hessian-vector product per colour instead of one per parameter; as in
    :func:`inference.fit_map_em`) in place of its empty exponents, where it saves work.
    ``support(sites)``: the union of the Hessian's non-zeros (host array) or None."""
    out = []
    for kind, sites, powers in blocks:
        if kind == "quadratic":
            found = support(sites)
            pattern = None if found is None else colouring(np.asarray(found))
            powers = pattern if pattern is not None else ()
        out.append((kind, sites, powers))
    return tuple(out)


def without_patterns(blocks) -> tuple:
    """``blocks`` as :func:`choose_blocks` gives them (no sparsity patterns)."""
    return tuple((kind, sites, () if kind == "quadratic" else powers)
                 for kind, sites, powers in blocks)


def closed_form_m_step(f, theta, blocks):
    """Maximise ``Q`` (minimise ``f = -Q / N``, of constrained parameters) block after
    block from ``theta``: (new theta, solved: False where a quadratic block's Hessian was
    not positive semi-definite, or had a non-zero outside its pattern, and its parameters
    were kept)."""
    solved = jnp.asarray(True)
    for kind, sites, powers in blocks:
        if kind == "quadratic":
            # powers: the Hessian's sparsity pattern (quadratic_pattern), or () for dense.
            pattern = powers if isinstance(powers, Pattern) else None
            old = {n: theta[n] for n in sites}
            new, ok, missed = normal_equations(_sub(f, theta, sites), old, pattern)
            new = jax.tree.map(lambda a, b, m=missed: jnp.where(m, b, a), new, old)
            theta, solved = {**theta, **new}, solved & ok & ~missed
        elif kind == "positive":
            v, gradient, h, _ = _positive_derivatives(f, theta, sites)
            for n, p in zip(sites, powers, strict=True):
                ratio = 1.0 - p * gradient[n] / jnp.where(h[n] > 0, h[n], 1.0)
                good = (h[n] > 0) & (ratio > 0)
                step = jnp.where(good, jnp.log(jnp.where(good, ratio, 1.0)) / p, 0.0)
                theta = {**theta, n: jnp.exp(v[n] + step)}
        else:
            gradient = jax.grad(_sub(f, theta, sites))({n: theta[n] for n in sites})
            for n in sites:
                counts = jnp.maximum(-theta[n] * gradient[n], 0.0)
                total = jnp.sum(counts, axis=-1, keepdims=True)
                # A value no example takes keeps a tiny probability, so that the
                # unconstrained (stick-breaking) coordinates stay finite.
                w = jnp.maximum(counts / jnp.where(total > 0, total, 1.0),
                                jnp.finfo(counts.dtype).tiny)
                theta = {**theta, n: jnp.where(total > 0, w, theta[n])}
    return theta, solved
