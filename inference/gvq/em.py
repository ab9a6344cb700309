"""GVQ learning: EM in the sigma -> 0 limit (seed 000, sec. 3.1; ``shared/MODELS.md`` 1.4).

Each iteration alternates

1. association: s_mu = argmin_s E_x(s) for every example, with the energy read
   from the program (any method of :data:`inference.association.core.METHODS`);
2. M-step: F = argmin_F sum_mu ||x_mu - s_mu @ F||^2, a linear least-squares
   problem (eq. 3-4) solved by ``lstsq`` (SVD), which gives the minimum-norm
   answer for collinear units. A feature that no example uses keeps its
   previous value (it does not enter the error), so it can be picked up later.

With exact association neither step can increase the error, so the error
trace never increases (up to rounding); the iteration stops at a fixed point,
when no association changes. Several random restarts run in parallel under
``vmap`` and the one with the least error is returned.

The constraints of sec. 5 are options of the program and of :func:`fit_gvq`
(``num_sets``, ``sparsity``, ``binary``/``beta``; see
:mod:`inference.gvq.constraints`): feature sets keep the least-squares M-step
(the constrained design is the full state matrix, one set's block per row);
binary data replace it by L-BFGS on the program's energy.

Algorithm layout: pure ``init``/``step`` functions and a driver :func:`fit_gvq`
that loops with ``lax.while_loop`` or, with ``progress_bar=True``, over the
jitted step with a tqdm bar.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P
from tqdm.auto import tqdm

from inference.association.core import MAX_EXACT_FEATURES, METHODS, _load_methods
from inference.engine.sharding import (
    map_shards,
    mesh_axis,
    mesh_size,
    pad_examples,
    psum,
    resolve_mesh,
    shard_examples,
)
from inference.engine.streaming import is_stream
from inference.gvq.constraints import (
    MAX_PROGRAM_SEARCH_UNITS,
    associate_states,
    binary_m_step,
    in_set,
)
from inference.program.energy import check_quadratic
from inference.program.kwargs import freeze_options, split_model_kwargs
from ppl_models import gvq
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import (
    MissingKeyError,
    check_data,
    check_finite,
    check_positive,
    check_positive_int,
    check_rng_key,
)

__all__ = ["GVQState", "GVQInfo", "GVQResult", "init", "step", "fit_gvq", "initial_features",
           "initial_set_features", "m_step", "match_features"]


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
    """Per-step information: ``error`` after the step, ``num_changed`` examples re-associated."""

    error: jax.Array
    num_changed: jax.Array


class GVQResult(NamedTuple):
    """Result of :func:`fit_gvq`.

    Attributes
    ----------
    features : array (num_features, dim)
        Learned F of the best restart.
    states : int32 array (num_examples, num_features)
        Association of every example under the learned F.
    error : float
        Final mean squared reconstruction error per example, ||x - s @ F||^2.
    error_trace : array (num_iterations,)
        Error after each iteration; entries after convergence repeat the final value.
    num_iterations : int
        Iterations run by the best restart.
    converged : bool
        Whether the best restart reached a fixed point within ``num_iterations``.
    restart_errors : array (num_restarts,)
        Final error of every restart.
    sets : int32 array (num_examples,) or None
        With ``num_sets``: the set each example uses.
    """

    features: jax.Array
    states: jax.Array
    error: jax.Array
    error_trace: jax.Array
    num_iterations: jax.Array
    converged: jax.Array
    restart_errors: jax.Array
    sets: jax.Array | None = None


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


def _mean_error(x, states, features, kwargs=None, valid=None, axis_name=None):
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
    return GVQState(features, states, _mean_error(x, states, features, model_kwargs),
                    jnp.asarray(False))


def m_step(x, states, features):
    """Least-squares features for the given association (eq. 3-4); unused rows keep ``features``."""
    design = states.astype(x.dtype)
    solution = jnp.linalg.lstsq(design, x)[0]
    used = jnp.any(states > 0, axis=0)
    return jnp.where(used[:, None], solution, features)


def _sharded_m_step(x, states, features, valid, axis_name):
    """:func:`m_step` with the examples split over devices (inside ``shard_map``).

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


def _step(rng_key, state, x, *, method, model, model_kwargs, latent, noise, options, tol,
          m_step_iterations, valid=None, axis_name=None):
    """:func:`step`; with ``axis_name`` (inside ``shard_map``) x and the states are one
    device's rows (``valid`` False on padding): association is per device, the
    M-step's sums (:func:`_sharded_m_step`), the error and the count of changed
    associations are added over the devices. Least-squares M-step only."""
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
        features = _sharded_m_step(x, states, state.features, valid, axis_name)
    changed = jnp.any(states != state.states, axis=1)
    if axis_name is None:
        num_changed = jnp.sum(changed)
    else:
        num_changed = psum(jnp.sum(changed & valid), axis_name)
    error = _mean_error(x, states, features, kwargs, valid, axis_name)
    settled = jnp.abs(state.error - error) <= tol * state.error
    if kwargs.get("binary", False):  # L-BFGS may still be improving the features
        converged = (num_changed == 0) & settled
    else:
        converged = (num_changed == 0) | settled
    new_state = GVQState(features, states, error, converged)
    return new_state, GVQInfo(error, num_changed)


@partial(jax.jit, static_argnames=("num_iterations", "method", "model", "latent",
                                   "static_kwargs", "options", "m_step_iterations"))
def _run(keys, x, init_features, noise, dynamic_kwargs, tol, *, num_iterations, method, model,
         latent, static_kwargs, options, m_step_iterations):
    """EM of every restart (vmapped) in one program: :func:`_start`, :func:`_advance` to
    ``num_iterations``, :func:`_finish`. ``fit_gvq`` runs the same three as separate
    jitted calls (:func:`_run_checkpointed`) so that a fit can stop between chunks."""
    carry = _start(keys, x, init_features, dynamic_kwargs, num_iterations=num_iterations,
                   static_kwargs=static_kwargs)
    carry = _advance(carry, x, noise, dynamic_kwargs, tol, num_iterations, method=method,
                     model=model, latent=latent, static_kwargs=static_kwargs, options=options,
                     m_step_iterations=m_step_iterations)
    return _finish(carry)


def _start(keys, x, init_features, dynamic_kwargs, *, num_iterations, static_kwargs):
    """The loop carry of every restart before the first iteration: (keys, i, state, trace)."""
    kwargs = {**dynamic_kwargs, **dict(static_kwargs)}

    def one(features0):
        return init(None, x, features0.shape[0], features=features0, model_kwargs=kwargs)

    states = jax.vmap(one)(init_features)
    return (keys, jnp.zeros(keys.shape[0], jnp.int32), states,
            jnp.zeros((keys.shape[0], num_iterations), x.dtype))


def _advance(carry, x, noise, dynamic_kwargs, tol, stop_at, *, method, model, latent,
             static_kwargs, options, m_step_iterations):
    """EM iterations of every restart (vmapped) until converged or at iteration ``stop_at``.

    ``stop_at`` (traced, at most ``num_iterations``) splits the fit into chunks for
    checkpoints (:mod:`inference.engine.checkpoint`); iteration i's key is
    ``fold_in(key, i)``, so the chunks give the one-chunk result bit for bit.
    """
    kwargs = {**dynamic_kwargs, **dict(static_kwargs)}

    def one_restart(key, i, state, trace):
        bound = jnp.minimum(stop_at, trace.shape[0])

        def cond(carry):
            i, state, _ = carry
            return (i < bound) & ~state.converged

        def body(carry):
            i, state, trace = carry
            state, info = step(jax.random.fold_in(key, i), state, x, method=method,
                               model=model, model_kwargs=kwargs, latent=latent, noise=noise,
                               options=options, tol=tol, m_step_iterations=m_step_iterations)
            return i + 1, state, trace.at[i].set(info.error)

        return (key, *jax.lax.while_loop(cond, body, (i, state, trace)))

    return jax.vmap(one_restart)(*carry)


def _finish(carry):
    """``(states, traces, counts)`` of every restart; traces padded with the final error."""
    _, i, states, traces = carry
    traces = jnp.where(jnp.arange(traces.shape[1]) < i[:, None], traces, states.error[:, None])
    return states, traces, i


@partial(jax.jit, static_argnames=("num_iterations", "static_kwargs"))
def _start_jit(keys, x, init_features, dynamic_kwargs, *, num_iterations, static_kwargs):
    return _start(keys, x, init_features, dynamic_kwargs, num_iterations=num_iterations,
                  static_kwargs=static_kwargs)


_advance_jit = jax.jit(_advance, static_argnames=("method", "model", "latent", "static_kwargs",
                                                  "options", "m_step_iterations"))
_finish_jit = jax.jit(_finish)


def _run_checkpointed(keys, x, starts, noise, dynamic, tol, num_iterations, common, *,
                      checkpoint_path, checkpoint_every, resume_from, options):
    """The single-device fit through :func:`inference.engine.checkpoint.run_chunks`.

    Without checkpoint options the loop runs as one chunk. ``options``: what
    determines the result, saved with the checkpoint beside x's shape, dtype and
    SHA-256 and the starts' SHA-256.
    """
    from inference.engine import checkpoint

    path, every, resume, saved = checkpoint.prepare(
        checkpoint_path, checkpoint_every, resume_from, options, data=(x,), starts=starts)
    carry = checkpoint.run_chunks(
        lambda carry, stop_at: _advance_jit(carry, x, noise, dynamic, tol, stop_at, **common),
        lambda: _start_jit(keys, x, starts, dynamic, num_iterations=num_iterations,
                           static_kwargs=common["static_kwargs"]),
        total=num_iterations,
        finished=lambda carry: bool(np.all(np.asarray(carry[2].converged))),
        kind="fit_gvq", options=saved, checkpoint_path=path, checkpoint_every=every,
        resume_from=resume)
    return _finish_jit(carry)


@partial(jax.jit, static_argnames=("num_iterations", "method", "model", "latent",
                                   "static_kwargs", "options", "m_step_iterations", "mesh"))
def _run_sharded(keys, x, valid, init_features, noise, dynamic_kwargs, tol, *, num_iterations,
                 method, model, latent, static_kwargs, options, m_step_iterations, mesh):
    """:func:`_run` with the examples split over ``mesh`` (x and ``valid`` padded to a
    multiple of its size). Each device associates its own rows; the M-step's
    S^T S and S^T X, the error and the changed count are summed over the devices,
    so the features stay the same on every device. A randomised method draws its
    random numbers per device (the key folded with the device's index). The
    states come back split by rows, (restarts, padded N, num_features)."""
    axis = mesh_axis(mesh)
    kwargs_static = dict(static_kwargs)

    def per_shard(x, valid, keys, init_features, noise, dynamic_kwargs, tol):
        kwargs = {**dynamic_kwargs, **kwargs_static}
        shard = jax.lax.axis_index(axis)

        def one_restart(key, features0):
            states0 = jnp.zeros((x.shape[0], features0.shape[0]), jnp.int32)
            state = GVQState(features0, states0,
                             _mean_error(x, states0, features0, kwargs, valid, axis),
                             jnp.asarray(False))
            trace = jnp.zeros(num_iterations, x.dtype)

            def cond(carry):
                i, state, _ = carry
                return (i < num_iterations) & ~state.converged

            def body(carry):
                i, state, trace = carry
                key_i = jax.random.fold_in(jax.random.fold_in(key, i), shard)
                state, info = _step(key_i, state, x, method=method, model=model,
                                    model_kwargs=kwargs, latent=latent, noise=noise,
                                    options=options, tol=tol,
                                    m_step_iterations=m_step_iterations, valid=valid,
                                    axis_name=axis)
                return i + 1, state, trace.at[i].set(info.error)

            i, state, trace = jax.lax.while_loop(cond, body, (0, state, trace))
            trace = jnp.where(jnp.arange(num_iterations) < i, trace, state.error)
            return state, trace, i

        return jax.vmap(one_restart)(keys, init_features)

    states = GVQState(P(), P(None, axis), P(), P())
    run = map_shards(per_shard, mesh, 2, (states, P(), P()))
    return run(x, valid, keys, init_features, noise, dynamic_kwargs, tol)


def _check_constraints(features, x, *, num_sets=None, sparsity=None, binary=False, beta=None,
                       method="exact", model_kwargs=None, rng_key=None, options=None,
                       num_features=None):
    """Validate the constraint options of :func:`fit_gvq` / :func:`associate_sets`.

    Returns (features, x, model_kwargs with the constraints added, method).
    ``features`` may be None (fit_gvq checks ``num_features`` instead).
    """
    _load_methods()
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}; got {method!r}")
    kwargs = dict(model_kwargs or {})
    num_sets = kwargs.pop("num_sets", None) if num_sets is None else num_sets
    sparsity = kwargs.pop("sparsity", None) if sparsity is None else sparsity
    binary = bool(kwargs.pop("binary", False)) or bool(binary)
    beta = kwargs.pop("beta", None) if beta is None else beta
    if features is not None:
        features = jnp.asarray(check_data(features, "features"))
        num_features = int(features.shape[0])
        x = check_data(x, "x", dim=int(features.shape[1]))
    else:
        x = check_data(x, "x")
    units = num_features
    if num_sets is not None:
        units = gvq.features_per_set(num_features, num_sets) - 1
        kwargs["num_sets"] = int(num_sets)
    if sparsity is not None:
        check_finite(sparsity, "sparsity")
        if float(sparsity) < 0:
            raise ValueError(f"sparsity must be >= 0 (lambda of the penalty lambda s.s); got "
                             f"{sparsity}")
        kwargs["sparsity"] = float(sparsity)
    if binary:
        if beta is None:
            raise ValueError("binary=True needs beta > 0, the steepness of the squashing "
                             "sigmoid(beta (s @ F - 1/2)) (paper: 4.5)")
        check_positive(beta, "beta")
        values = np.unique(np.asarray(x))
        if not np.all(np.isin(values, (0.0, 1.0))):
            raise ValueError(
                f"binary=True needs data in {{0, 1}}; x has other values, e.g. "
                f"{values[~np.isin(values, (0.0, 1.0))][:5].tolist()}")
        if method != "exact":
            raise ValueError(
                f"binary=True: the energy is not quadratic in the states, so method {method!r} "
                "does not apply; use method='exact' (the program's energy at every state)")
        if units > MAX_PROGRAM_SEARCH_UNITS:
            raise ValueError(
                f"binary=True searches 2^units states per example; {units} switchable units "
                f"exceed the limit {MAX_PROGRAM_SEARCH_UNITS} (use feature sets)")
        kwargs["binary"], kwargs["beta"] = True, float(beta)
    elif beta is not None:
        raise ValueError("beta applies only with binary=True")
    if method == "exact" and num_sets is None:
        check_positive_int(num_features, "num_features", maximum=MAX_EXACT_FEATURES,
                           why=" for exhaustive search (2^num_features states per example)")
    elif method == "exact" and units > MAX_EXACT_FEATURES:
        raise ValueError(
            f"method 'exact' searches 2^{units} states per example; the limit is "
            f"{MAX_EXACT_FEATURES} units ({'per set' if num_sets else 'num_features'})")
    if METHODS[method].randomized and rng_key is None:
        raise MissingKeyError(f"method {method!r} is randomised: pass rng_key=jax.random.key(...)")
    if features is not None and METHODS[method].validate is not None and units > 0:
        sub = features if num_sets is None else features.reshape(
            num_sets, units + 1, -1)[0, :-1]
        METHODS[method].validate(sub, dict(options or {}))
    return features, x, kwargs, method


def _check_program(model, x, kwargs, features, latent, noise):
    """The quadratic methods need a program quadratic in ``latent`` (first set, if any)."""
    if kwargs.get("binary", False):
        return
    kwargs = {**kwargs, "features": features}
    if "num_sets" in kwargs:
        if gvq.features_per_set(features.shape[0], kwargs["num_sets"]) == 1:
            return  # no switchable units: nothing to be quadratic in
        model, kwargs = in_set(model), {**kwargs, "set_index": 0}
    check_quadratic(model, x, latent=latent, noise=noise, model_kwargs=kwargs)


def fit_gvq(
    x,
    num_features: int,
    *,
    method: str = "exact",
    rng_key=None,
    num_iterations: int = 100,
    num_restarts: int = 4,
    init_features=None,
    num_sets: int | None = None,
    sparsity: float | None = None,
    binary: bool = False,
    beta: float | None = None,
    m_step_iterations: int = 50,
    model: Callable | None = None,
    model_kwargs: dict | None = None,
    latent: str = "s",
    noise=None,
    progress_bar: bool = False,
    tol: float | None = None,
    devices=None,
    mesh=None,
    checkpoint_path=None,
    checkpoint_every: int | None = None,
    resume_from=None,
    **options,
) -> GVQResult:
    """Learn GVQ features by EM in the sigma -> 0 limit.

    Parameters
    ----------
    x : array (num_examples, dim)
        Data.
    num_features : int
        Number of features n (2^n codebook vectors); with ``num_sets``, all
        features of all sets, origins included.
    method : str
        Association method, one of :data:`inference.association.core.METHODS`
        (within each set when ``num_sets`` is given).
    rng_key : jax.random key
        Drives the random initialisation and randomised association methods.
    num_iterations : int
        Maximum number of EM iterations per restart.
    num_restarts : int
        Independent random initialisations, run in parallel under vmap; the one with
        the least final error is returned. EM is a local search (like k-means); on
        the planted problem of the tests one start finds the planted features about
        half of the time, four starts almost always.
    init_features : array (num_features, dim) or (num_restarts, num_features, dim), optional
        Start from these features instead of the random ones
        (:func:`initial_features`, :func:`initial_set_features`; with
        ``binary=True`` they are F_hat).
    num_sets : int, optional
        Multiple feature sets (sec. 5.1): ``num_features / num_sets`` features per
        set, the last of each set its origin (always on within the set); every
        example uses one set (winner-take-all association). One feature per set
        is ordinary vector quantisation (k-means).
    sparsity : float, optional
        lambda >= 0: the energy gains lambda s.s (sec. 5.2), through the program.
    binary, beta : bool, float
        Binary data (sec. 5.3, eq. 10): x in {0, 1}, features sigmoid(F_hat),
        reconstruction sigmoid(beta (s @ sigmoid(F_hat) - 1/2)); the result's
        ``features`` are F_hat. Association by the program's energy at every
        state (``method="exact"``), M-step by L-BFGS on F_hat.
    m_step_iterations : int
        L-BFGS iterations per M-step with ``binary=True``.
    model, model_kwargs, latent, noise
        The program and how its energy is read (see :func:`inference.associate`);
        ``noise=None`` is the GVQ limit, a float gives MAP-EM at that noise. The
        constraints are passed to the program as keyword arguments.
    progress_bar : bool
        Show a tqdm bar over iterations (runs the jitted step from Python).
    tol : float, optional
        Also stop when the error changes by at most ``tol`` relative to the last
        iteration. Default: 0 for ``"exact"`` (stop at the fixed point, where no
        association changes; 1e-6 with ``binary=True``, whose L-BFGS M-step moves the
        features a little at every iteration) and 1e-5 for the other methods, whose
        randomised associations may flicker between equally good states.
    devices : None, int or sequence of jax.Device
        Split the examples over these devices (:func:`inference.engine.sharding.resolve_mesh`):
        ``None`` uses all of ``jax.devices()`` when there are several (else the plain
        single-device path), an int the first that many. Each device associates its
        own rows; the M-step's sums S^T S and S^T X and the error are added over the
        devices (``shard_map`` and ``psum``) and F solves the normal equations
        (pseudo-inverse: the same minimum-norm answer as ``lstsq``). With
        ``method="exact"`` the result equals the single-device fit up to float
        rounding; randomised methods draw their random numbers per device, so they
        follow a different (equally valid) path. x is padded with masked rows to a
        multiple of the device count. Not with ``binary=True`` (its L-BFGS M-step)
        or ``progress_bar=True``.
    mesh : jax.sharding.Mesh, optional
        A mesh of your own instead of ``devices`` (one axis, or one named ``"data"``).
    checkpoint_path : str or os.PathLike, optional
        Write a checkpoint (every restart's loop carry: keys, iteration, state, error
        trace; the options and the SHA-256 of x) to this ``.npz`` file every
        ``checkpoint_every`` iterations (:mod:`inference.engine.checkpoint`; atomic: a
        killed process leaves the last one intact). Single device, without
        ``progress_bar``.
    checkpoint_every : int, optional
        Iterations per checkpoint (a positive int; needs ``checkpoint_path``).
    resume_from : str or os.PathLike, optional
        Continue from a checkpoint written by ``fit_gvq`` with the same x and
        options (else ``ValueError`` naming the option). The result is bit-identical
        to the uninterrupted fit; a checkpoint of a finished fit returns at once.
    **options
        Options of the association method.

    Returns
    -------
    GVQResult
        ``error`` is the mean reconstruction error per example (eq. 1, or eq. 10
        with ``binary=True``; without the sparsity penalty).

    ``x`` may also be a stream too large for memory (an ``np.memmap``, a callable
    returning a fresh iterator of batches, a list of batches, an
    :class:`inference.mixture.stream.BatchSource`; ``batch_size=`` rows per batch): the
    fit then runs by passes (:func:`inference.gvq.stream.fit_gvq_stream`, the
    same EM; ``states`` is None there, not with ``binary``, devices or checkpoints).
    """
    from inference.gvq import stream as streaming_fits  # it imports this module

    if is_stream(x):
        if (devices, mesh, checkpoint_path, checkpoint_every, resume_from) != (None,) * 5:
            raise ValueError("devices, mesh and checkpoints apply to an in-memory x, not to "
                             "a stream of batches")
        return streaming_fits.fit_gvq_stream(
            x, num_features, method=method, rng_key=rng_key, num_iterations=num_iterations,
            num_restarts=num_restarts, init_features=init_features, num_sets=num_sets,
            sparsity=sparsity, binary=binary, beta=beta, model=model,
            model_kwargs=model_kwargs, latent=latent, noise=noise, progress_bar=progress_bar,
            tol=tol, **options)
    if "batch_size" in options:
        raise ValueError(f"batch_size applies to a stream of batches; x is one array (got "
                         f"batch_size={options['batch_size']!r})")
    if rng_key is None:
        raise MissingKeyError("fit_gvq needs an explicit rng_key (e.g. jax.random.key(0))")
    check_rng_key(rng_key)
    mesh = resolve_mesh(devices, mesh)
    if mesh is not None and (binary or progress_bar):
        raise ValueError("devices/mesh: the sharded fit needs binary=False and "
                         f"progress_bar=False; got binary={binary!r}, "
                         f"progress_bar={progress_bar!r}")
    num_features = check_positive_int(num_features, "num_features")
    _, x, kwargs, method = _check_constraints(
        None, x, num_sets=num_sets, sparsity=sparsity, binary=binary, beta=beta, method=method,
        model_kwargs=model_kwargs, rng_key=rng_key, options=options, num_features=num_features)
    num_iterations = check_positive_int(num_iterations, "num_iterations")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    m_step_iterations = check_positive_int(m_step_iterations, "m_step_iterations")
    if noise is not None:
        check_positive(noise, "noise")
    model = gvq.model if model is None else model
    key_init, key_run = jax.random.split(rng_key)
    keys = jax.random.split(key_run, num_restarts)
    starts = restart_features(key_init, x, num_features, num_restarts, init_features,
                              num_sets=kwargs.get("num_sets"), binary=kwargs.get("binary", False))
    _check_constraints(starts[0], x, method=method, model_kwargs=kwargs, rng_key=rng_key,
                       options=options)
    _check_program(model, x, kwargs, starts[0], latent, noise)
    if tol is None:
        tol = 1e-5 if method != "exact" else (1e-6 if kwargs.get("binary") else 0.0)
    if not isinstance(tol, int | float) or not tol >= 0:
        raise ValueError(f"tol must be a non-negative number; got {tol!r}")
    dynamic, static = split_model_kwargs(kwargs)
    common = dict(method=method, model=model, latent=latent, static_kwargs=static,
                  options=freeze_options(options), m_step_iterations=m_step_iterations)
    checkpointing = (checkpoint_path, checkpoint_every, resume_from) != (None, None, None)
    if checkpointing and (mesh is not None or progress_bar):
        raise ValueError("checkpoint_path/checkpoint_every/resume_from need the single-device "
                         f"fit without a progress bar; got devices={devices!r}, mesh={mesh!r}, "
                         f"progress_bar={progress_bar!r}")
    if mesh is not None:
        padded, valid = shard_examples(mesh, *pad_examples(x, mesh_size(mesh)))
        states, traces, counts = _run_sharded(keys, padded, valid, starts, noise, dynamic, tol,
                                              num_iterations=num_iterations, mesh=mesh,
                                              **common)
        states = states._replace(states=states.states[:, :x.shape[0]])
    elif progress_bar:
        states, traces, counts = _run_with_progress(keys, x, starts, noise, dynamic, tol,
                                                    num_iterations, common)
    else:
        states, traces, counts = _run_checkpointed(
            keys, x, starts, noise, dynamic, tol, num_iterations, common,
            checkpoint_path=checkpoint_path, checkpoint_every=checkpoint_every,
            resume_from=resume_from,
            options=dict(num_features=num_features, method=method, num_restarts=num_restarts,
                         num_iterations=num_iterations, tol=tol, noise=noise,
                         m_step_iterations=m_step_iterations, model=model, latent=latent,
                         model_kwargs=kwargs, association_options=options,
                         rng_key=rng_key))
    errors = states.error
    if not bool(jnp.all(jnp.isfinite(errors))):
        warnings.warn("fit_gvq: some restarts ended with a non-finite error; they are skipped",
                      NumericalWarning, stacklevel=2)
    best = int(jnp.argmin(jnp.where(jnp.isfinite(errors), errors, jnp.inf)))
    converged = bool(states.converged[best])
    if not converged:
        warnings.warn(
            f"fit_gvq: not converged after {num_iterations} iterations (associations still "
            "changing); raise num_iterations", ConvergenceWarning, stacklevel=2)
    sets = None
    if "num_sets" in kwargs:
        sets = gvq.set_units(states.states[best], kwargs["num_sets"])[0]
    return GVQResult(
        features=states.features[best], states=states.states[best], error=errors[best],
        error_trace=traces[best], num_iterations=counts[best], converged=jnp.asarray(converged),
        restart_errors=errors, sets=sets,
    )


@partial(jax.jit, static_argnames=("method", "model", "latent", "static_kwargs", "options",
                                   "m_step_iterations"))
def _vmapped_step(keys, states, x, noise, dynamic_kwargs, tol, *, method, model, latent,
                  static_kwargs, options, m_step_iterations):
    kwargs = {**dynamic_kwargs, **dict(static_kwargs)}

    def one(key, state):
        new_state, info = step(key, state, x, method=method, model=model, model_kwargs=kwargs,
                               latent=latent, noise=noise, options=options, tol=tol,
                               m_step_iterations=m_step_iterations)
        # A converged restart stays put.
        new_state = jax.tree.map(lambda a, b: jnp.where(state.converged, a, b), state, new_state)
        return new_state

    return jax.vmap(one)(keys, states)


def _run_with_progress(keys, x, starts, noise, dynamic, tol, num_iterations, common):
    kwargs = {**dynamic, **dict(common["static_kwargs"])}
    states = jax.vmap(lambda f: init(None, x, f.shape[0], features=f, model_kwargs=kwargs))(starts)
    traces, counts = [], jnp.zeros(keys.shape[0], jnp.int32)
    with tqdm(total=num_iterations, desc="GVQ-EM", leave=False) as bar:
        for i in range(num_iterations):
            step_keys = jax.vmap(jax.random.fold_in, (0, None))(keys, i)
            counts = counts + (~states.converged).astype(jnp.int32)
            states = _vmapped_step(step_keys, states, x, noise, dynamic, tol, **common)
            traces.append(states.error)
            bar.update(1)
            bar.set_postfix(error=f"{float(jnp.min(states.error)):.4g}")
            if bool(jnp.all(states.converged)):
                break
    trace = jnp.stack(traces, axis=1)
    pad = num_iterations - trace.shape[1]
    trace = jnp.concatenate([trace, jnp.repeat(trace[:, -1:], pad, axis=1)], axis=1)
    return states, trace, counts


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
