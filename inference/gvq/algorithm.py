"""GVQ-EM's mathematics (Westerdijk, Barber and Wiegerinck (2001), sec. 3.1): state, init, step.

Each iteration alternates

1. association: s_mu = argmin_s E_x(s) for every example, with the energy read
   from the program (any method of :data:`inference.association.core.METHODS`);
2. M-step: F = argmin_F sum_mu ||x_mu - s_mu @ F||^2, a linear least-squares
   problem (eq. 3-4) solved by ``lstsq`` (SVD), which gives the minimum-norm
   answer for collinear units. A feature that no example uses keeps its
   previous value (it does not enter the error), so it can be picked up later.

With exact association neither step can increase the error, so the error
trace never increases (up to rounding); the iteration stops at a fixed point,
when no association changes.

The constraints of sec. 5 are options of the program (``num_sets``,
``sparsity``, ``binary``/``beta``; see :mod:`inference.gvq.constraints`):
feature sets keep the least-squares M-step (the constrained design is the full
state matrix, one set's block per row); binary data replace it by L-BFGS on
the program's energy.

This module holds the pure functions only: :func:`init`, :func:`em_step` (the
:class:`inference.engine.Algorithm` step, sharded or not), the M-steps, the
starts and the checks. :func:`inference.gvq.em.fit_gvq` runs them through the
engine (restarts, convergence, trace, progress bar, checkpoints, sharding).
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference.engine import Algorithm
from inference.engine.sharding import psum
from inference.gvq.constraints import associate_states, binary_m_step, in_set
from inference.program.energy import check_quadratic, energy_fn
from ppl_models import gvq

__all__ = ["GVQState", "GVQInfo", "init", "step", "em_step", "em_algorithm", "init_states",
           "initial_features", "initial_set_features", "restart_features", "mean_error",
           "m_step", "normal_equations_m_step", "check_program", "least_squares_misfit",
           "match_features"]


class GVQState(NamedTuple):
    """State of GVQ-EM.

    Attributes
    ----------
    features : array (num_features, dim)
    states : int32 array (num_examples, num_features)
        The association of the last step (all zeros before the first step).
    error : scalar
        Mean over examples of ||x - s @ F||^2 after the last step.
    converged : bool scalar
        True when the last association did not change any state.
    """

    features: jax.Array
    states: jax.Array
    error: jax.Array
    converged: jax.Array


class GVQInfo(NamedTuple):
    """Per-step information: ``objective`` (the error after the step), ``num_changed``
    examples re-associated, ``converged`` (the step's own stopping test)."""

    objective: jax.Array
    num_changed: jax.Array
    converged: jax.Array


def initial_features(rng_key, x, num_features: int):
    """Random initial features scaled to the data.

    Entries are N(m_j / (n/2), (s_j / sqrt(n/2))^2) for column mean m_j and
    standard deviation s_j of x: a random state with half of its n units on
    then reproduces the data's mean and spread.
    """
    half = 0.5 * num_features
    mean = jnp.mean(x, axis=0) / half
    std = jnp.std(x, axis=0) / jnp.sqrt(half) + 1e-6
    return mean + std * jax.random.normal(rng_key, (num_features, x.shape[1]), x.dtype)


def initial_set_features(rng_key, x, num_features: int, num_sets: int, *, binary=False):
    """Random initial features for ``num_sets`` sets (sec. 5.1), drawn from the data.

    Each origin o is a different random example (as k-means starts from random
    data points); each switchable feature starts half-way from o towards another
    random example x', (x' - o) / 2 plus a little noise, so that every
    single-feature codebook vector o + f lies between data points and sums of
    two features, (x' + x'') / 2, stay inside the data's range. Features that
    start small (around o) are never switched on when the examples lie far from
    their origin, and so are never trained (measured on the image segments of
    ``examples/gvq_compression.py``). With ``binary=True`` the values are F_hat:
    origins logit(1/4 + x/2) of a random example x, switchable features
    logit(0.15 + x'/2) of other random examples x' (plus a little noise).
    """
    per_set = gvq.features_per_set(num_features, num_sets)
    key_rows, key_noise, key_parts = jax.random.split(rng_key, 3)
    replace = num_sets > x.shape[0]
    rows = jax.random.choice(key_rows, x.shape[0], (num_sets,), replace=replace)
    origins = x[rows]
    noise = jax.random.normal(key_noise, (num_sets, per_set - 1, x.shape[1]), x.dtype)
    # Features that a state would use start from examples: a feature too weak to
    # lower any energy is never switched on, so it would never be trained.
    parts = x[jax.random.randint(key_parts, (num_sets, per_set - 1), 0, x.shape[0])]
    if binary:
        origins = jax.scipy.special.logit(0.25 + 0.5 * origins)
        switch = jax.scipy.special.logit(0.15 + 0.5 * parts) + 0.1 * noise
    else:
        switch = 0.5 * (parts - origins[:, None, :]) + 0.05 * noise * jnp.std(x, axis=0)
    blocks = jnp.concatenate([switch, origins[:, None, :]], axis=1)
    return blocks.reshape(num_features, x.shape[1])


def restart_features(rng_key, x, num_features: int, num_restarts: int, init_features=None,
                     *, num_sets=None, binary=False):
    """Starting features of every restart, shape (num_restarts, num_features, dim).

    Random (:func:`initial_features`, one key per restart) unless
    ``init_features`` is given as (num_features, dim), shared by all restarts,
    or (num_restarts, num_features, dim); it is checked for shape and finiteness.
    """
    dim = x.shape[1]
    if init_features is None:
        if num_sets is not None:
            def draw(k):
                return initial_set_features(k, x, num_features, num_sets, binary=binary)
        elif binary:
            def draw(k):
                return jax.random.normal(k, (num_features, dim), x.dtype)
        else:
            def draw(k):
                return initial_features(k, x, num_features)
        return jax.vmap(draw)(jax.random.split(rng_key, num_restarts))
    starts = np.asarray(init_features)
    expected = f"({num_features}, {dim}) or ({num_restarts}, {num_features}, {dim})"
    if starts.ndim == 2:
        starts = np.broadcast_to(starts, (num_restarts, *starts.shape))
    if starts.shape != (num_restarts, num_features, dim):
        raise ValueError(f"init_features must have shape {expected}; got "
                         f"{np.shape(init_features)}")
    if not np.all(np.isfinite(starts)):
        bad = int(np.size(init_features) - np.count_nonzero(np.isfinite(init_features)))
        raise ValueError(f"init_features contains {bad} NaN or infinite value(s); all entries "
                         "must be finite")
    return jnp.asarray(starts, x.dtype)



def mean_error(x, states, features, kwargs=None, valid=None, axis_name=None):
    """Mean over examples of ||x - s @ F||^2; with ``axis_name`` over the ``valid`` rows of
    every device (x one device's rows, inside ``shard_map``)."""
    kwargs = kwargs or {}
    recon = gvq.reconstruction(features, states.astype(x.dtype),
                               binary=bool(kwargs.get("binary", False)), beta=kwargs.get("beta"))
    errors = jnp.sum(jnp.square(x - recon), axis=-1)
    if axis_name is None:
        return jnp.mean(errors)
    total = psum(jnp.sum(jnp.where(valid, errors, 0.0)), axis_name)
    return total / psum(jnp.sum(valid).astype(x.dtype), axis_name)


def init(rng_key, x, num_features: int, *, features=None, model_kwargs=None) -> GVQState:
    """Initial state: ``features`` if given, else :func:`initial_features`; the error is
    that of the all-zero states (no association yet)."""
    if features is None:
        features = initial_features(rng_key, x, num_features)
    states = jnp.zeros((x.shape[0], num_features), jnp.int32)
    return GVQState(features, states, mean_error(x, states, features, model_kwargs),
                    jnp.asarray(False))


@jax.custom_batching.custom_vmap
def lstsq_solution(a, b):
    """``jnp.linalg.lstsq(a, b)[0]``, whose batches (``vmap``, e.g. over restarts) solve
    one matrix after another (``lax.map``) instead of in one batched SVD.

    jaxlib's batched CPU SVD hands its matrices to XLA's intra-op thread pool and blocks
    until they are done; inside a compiled loop that already runs on that pool, a
    process with one CPU (``taskset``, a one-core container or batch-queue slot) has no
    thread left to run them, and the fit hangs forever (jaxlib 0.9). One SVD at a time
    gives the same answer (the same LAPACK routine on each matrix), and these matrices
    are small (N x num_features).
    """
    return jnp.linalg.lstsq(a, b)[0]


@lstsq_solution.def_vmap
def _lstsq_solution_vmap(axis_size, in_batched, a, b):
    a_batched, b_batched = in_batched
    mapped = tuple(v for v, batched in ((a, a_batched), (b, b_batched)) if batched)

    def one(slices):  # an unbatched argument is closed over, not copied per matrix
        return lstsq_solution(slices[0] if a_batched else a, slices[-1] if b_batched else b)

    return jax.lax.map(one, mapped), True


def m_step(x, states, features):
    """Least-squares features for the given association (eq. 3-4); unused rows keep ``features``."""
    design = states.astype(x.dtype)
    solution = lstsq_solution(design, x)
    used = jnp.any(states > 0, axis=0)
    return jnp.where(used[:, None], solution, features)


def normal_equations_m_step(x, states, features, valid, axis_name):
    """:func:`m_step` from the normal equations' sums, added over the devices (inside
    ``shard_map``; also the M-step of the streamed fit).

    The normal equations' sums over examples, S^T S (num_features, num_features)
    and S^T X (num_features, dim), are computed on every device's ``valid`` rows and
    added over the devices (``psum``); F = pinv(S^T S) S^T X is the same
    minimum-norm least-squares answer as ``lstsq(S, X)`` (singular values of S^T S
    below max(N, n) eps times the largest count as zero: a 0/1 design's Gram
    matrix holds exact integer counts, so a collinear design is exactly singular).
    """
    design = jnp.where(valid[:, None], states, 0).astype(x.dtype)
    gram = psum(design.T @ design, axis_name)
    cross = psum(design.T @ x, axis_name)
    num = psum(jnp.sum(valid), axis_name)
    cutoff = jnp.finfo(x.dtype).eps * jnp.maximum(num, design.shape[1]).astype(x.dtype)
    solution = jnp.linalg.pinv(gram, rtol=cutoff, hermitian=True) @ cross
    used = jnp.diagonal(gram) > 0
    return jnp.where(used[:, None], solution, features)



def step(rng_key, state: GVQState, x, *, method="exact", model=None, model_kwargs=None,
         latent="s", noise=None, options=(), tol=0.0, m_step_iterations=50):
    """One EM iteration: association with ``method``, then the M-step. Jittable.

    The M-step is least squares (:func:`m_step`), or L-BFGS on the program's
    energy when ``model_kwargs["binary"]`` (:func:`inference.gvq.constraints.binary_m_step`,
    at most ``m_step_iterations`` iterations). ``converged`` is set when no
    association changed, or when the error changed by at most ``tol`` relative to
    the previous one (for randomised methods, whose associations keep flickering);
    with ``binary`` it needs both (the L-BFGS M-step may still be lowering the error).
    """
    return _step(rng_key, state, x, method=method, model=model, model_kwargs=model_kwargs,
                 latent=latent, noise=noise, options=options, tol=tol,
                 m_step_iterations=m_step_iterations)


def em_step(rng_key, state: GVQState, data, params, *, shard, method, model, latent,
            static_kwargs, association_options, m_step_iterations):
    """:func:`step` as an :class:`inference.engine.Algorithm` step.

    ``data`` is ``(x,)``, ``params`` ``(noise, dynamic model kwargs, tol)``. With a
    ``shard`` (inside ``shard_map``) x and the states are one device's rows (``valid``
    False on padding): association is per device, the M-step's sums
    (:func:`normal_equations_m_step`), the error and the count of changed associations
    are added over the devices. Least-squares M-step only when sharded.
    """
    (x,) = data
    noise, dynamic_kwargs, tol = params
    kwargs = {**dynamic_kwargs, **dict(static_kwargs)}
    valid, axis_name = (None, None) if shard is None else (shard.valid, shard.axis_name)
    return _step(rng_key, state, x, method=method, model=model, model_kwargs=kwargs,
                 latent=latent, noise=noise, options=association_options, tol=tol,
                 m_step_iterations=m_step_iterations, valid=valid, axis_name=axis_name)


def em_algorithm(*, method, model, latent, static_kwargs, association_options,
                 m_step_iterations, name="fit_gvq") -> Algorithm:
    """The engine's :class:`~inference.engine.Algorithm` of GVQ-EM (hashable options)."""
    return Algorithm(em_step, options=(
        ("method", method), ("model", model), ("latent", latent),
        ("static_kwargs", static_kwargs), ("association_options", association_options),
        ("m_step_iterations", m_step_iterations)), name=name, rows=("states",))


@partial(jax.jit, static_argnames=("static_kwargs",))
def init_states(x, starts, dynamic_kwargs, *, static_kwargs):
    """:func:`init` of every start (leading axis of ``starts``), vmapped."""
    kwargs = {**dynamic_kwargs, **dict(static_kwargs)}
    return jax.vmap(lambda f: init(None, x, f.shape[0], features=f, model_kwargs=kwargs))(starts)


def _step(rng_key, state, x, *, method, model, model_kwargs, latent, noise, options, tol,
          m_step_iterations, valid=None, axis_name=None):
    """:func:`step`, sharded when ``axis_name`` is given (see :func:`em_step`)."""
    model = gvq.model if model is None else model
    kwargs = {**(model_kwargs or {}), "features": state.features}
    states, _ = associate_states(model, x, kwargs, method=method, latent=latent, noise=noise,
                                 rng_key=rng_key, options=tuple(options),
                                 num_features=state.features.shape[0])
    if kwargs.get("binary", False):
        features, _ = binary_m_step(model, x, states, kwargs, latent=latent, noise=noise,
                                    max_iterations=m_step_iterations)
    elif axis_name is None:
        features = m_step(x, states, state.features)
    else:
        features = normal_equations_m_step(x, states, state.features, valid, axis_name)
    changed = jnp.any(states != state.states, axis=1)
    if axis_name is None:
        num_changed = jnp.sum(changed)
    else:
        num_changed = psum(jnp.sum(changed & valid), axis_name)
    error = mean_error(x, states, features, kwargs, valid, axis_name)
    settled = jnp.abs(state.error - error) <= tol * state.error
    if kwargs.get("binary", False):  # L-BFGS may still be improving the features
        converged = (num_changed == 0) & settled
    else:
        converged = (num_changed == 0) | settled
    new_state = GVQState(features, states, error, converged)
    return new_state, GVQInfo(error, num_changed, converged)


def check_program(model, x, kwargs, features, latent, noise):
    """The quadratic methods need a program quadratic in ``latent`` (first set, if any),
    and the least-squares M-step a program whose features enter as ||x - s F||^2."""
    if kwargs.get("binary", False):
        return
    kwargs = {**kwargs, "features": features}
    if "num_sets" in kwargs:
        if gvq.features_per_set(features.shape[0], kwargs["num_sets"]) == 1:
            return  # no switchable units: nothing to be quadratic in
        check_quadratic(in_set(model), x, latent=latent, noise=noise,
                        model_kwargs={**kwargs, "set_index": 0})
        return
    check_quadratic(model, x, latent=latent, noise=noise, model_kwargs=kwargs)
    if model is not gvq.model:
        check_least_squares(model, x, kwargs, latent)


def least_squares_misfit(model, x, kwargs, latent) -> float:
    """How far the features' least squares, min_F sum ||x - s F||^2, is from the
    program's sigma -> 0 energy in F: the largest difference between the gradient in F
    of that energy and the least squares' -2 S^T (x - S F), at random states and
    features (up to 64 examples), relative to its scale. Small (<= 1e-3) when fit_gvq's
    M-step is the program's; an offset, weights or a prior on F make it large."""
    features = jnp.asarray(kwargs["features"])
    rows = jnp.asarray(x[:64])
    return float(_least_squares_misfit(
        model, rows, features, latent,
        tuple(sorted((k, v) for k, v in kwargs.items() if k != "features" and _hashable(v))),
        {k: v for k, v in kwargs.items() if k != "features" and not _hashable(v)}))


#: Above this :func:`least_squares_misfit`, fit_gvq's M-step is not the program's.
LEAST_SQUARES_RTOL = 1e-3


def check_least_squares(model, x, kwargs, latent):
    """fit_gvq's streamed M-step solves min_F sum ||x - s F||^2: refuse a program whose
    limit energy depends on the features otherwise (:func:`least_squares_misfit`)."""
    misfit = least_squares_misfit(model, x, kwargs, latent)
    if not misfit <= LEAST_SQUARES_RTOL:
        raise ValueError(
            "the least-squares M-step fits the features by ||x - s F||^2, and the "
            "program's sigma -> 0 energy depends on the features otherwise (its gradient "
            f"in F differs by {misfit:.3g} of its scale): an offset, weights or a "
            "prior that it would ignore. Fit the data in memory with fit_gvq (which then "
            "learns through inference.fit_map_em), or write the parameters as numpyro.param "
            "sites and learn them with inference.fit_map_em")


def _hashable(value):
    try:
        hash(value)
    except TypeError:
        return False
    return not isinstance(value, jax.Array | np.ndarray)


@partial(jax.jit, static_argnames=("model", "latent", "static"))
def _least_squares_misfit(model, rows, features, latent, static, dynamic):
    kwargs = {**dynamic, **dict(static)}
    key_s, key_f = jax.random.split(jax.random.key(0))
    states = jax.random.bernoulli(key_s, 0.5, (rows.shape[0], features.shape[0]))
    states = states.astype(rows.dtype)
    probe = features + jax.random.normal(key_f, features.shape, features.dtype)

    def total(f):
        row_energy = energy_fn(model, latent=latent, noise=None,
                               model_kwargs={**kwargs, "features": f})
        return jnp.sum(jax.vmap(row_energy)(rows, states))

    program = jax.grad(total)(probe)
    least_squares = -2.0 * states.T @ (rows - states @ probe)
    return jnp.max(jnp.abs(program - least_squares)) / (1.0 + jnp.max(jnp.abs(least_squares)))



def match_features(learned, planted):
    """Match learned features to planted ones up to permutation.

    Rows are paired by the Hungarian algorithm on the maximum absolute
    difference between rows (``scipy.optimize.linear_sum_assignment``).

    Returns
    -------
    permutation : int array (num_features,)
        ``learned[permutation]`` is aligned with ``planted``.
    max_abs_error : float
        max |learned[permutation] - planted| over all entries.
    """
    from scipy.optimize import linear_sum_assignment

    learned, planted = np.asarray(learned), np.asarray(planted)
    if learned.shape != planted.shape:
        raise ValueError(
            f"learned and planted must have the same shape; got {learned.shape} and "
            f"{planted.shape}")
    cost = np.abs(planted[:, None, :] - learned[None, :, :]).max(axis=-1)
    rows, cols = linear_sum_assignment(cost)
    permutation = cols[np.argsort(rows)]
    return permutation, float(np.abs(learned[permutation] - planted).max())
