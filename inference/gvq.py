"""GVQ learning: EM in the sigma -> 0 limit (seed 000, sec. 3.1; ``shared/MODELS.md`` 1.4).

Each iteration alternates

1. association: s_mu = argmin_s E_x(s) for every example, with the energy read
   from the program (any method of :data:`inference.association.METHODS`);
2. M-step: F = argmin_F sum_mu ||x_mu - s_mu @ F||^2, a linear least-squares
   problem (eq. 3-4) solved by ``lstsq`` (SVD), which gives the minimum-norm
   answer for collinear units. A feature that no example uses keeps its
   previous value (it does not enter the error), so it can be picked up later.

With exact association neither step can increase the error, so the error
trace never increases (up to rounding); the iteration stops at a fixed point,
when no association changes. Several random restarts run in parallel under
``vmap`` and the one with the least error is returned.

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
from tqdm.auto import tqdm

from inference._jit import freeze_options, split_model_kwargs
from inference.association import MAX_EXACT_FEATURES, METHODS, _load_methods, associate_energy
from inference.energy import check_quadratic
from ppl_models import gvq
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import check_data, check_positive, check_positive_int

__all__ = ["GVQState", "GVQInfo", "GVQResult", "init", "step", "fit_gvq", "initial_features",
           "m_step", "match_features"]


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
    """

    features: jax.Array
    states: jax.Array
    error: jax.Array
    error_trace: jax.Array
    num_iterations: jax.Array
    converged: jax.Array
    restart_errors: jax.Array


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


def restart_features(rng_key, x, num_features: int, num_restarts: int, init_features=None):
    """Starting features of every restart, shape (num_restarts, num_features, dim).

    Random (:func:`initial_features`, one key per restart) unless
    ``init_features`` is given as (num_features, dim), shared by all restarts,
    or (num_restarts, num_features, dim); it is checked for shape and finiteness.
    """
    dim = x.shape[1]
    if init_features is None:
        return jax.vmap(lambda k: initial_features(k, x, num_features))(
            jax.random.split(rng_key, num_restarts))
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


def _mean_error(x, states, features):
    return jnp.mean(jnp.sum(jnp.square(x - states.astype(x.dtype) @ features), axis=-1))


def init(rng_key, x, num_features: int, *, features=None) -> GVQState:
    """Initial state: ``features`` if given, else :func:`initial_features`."""
    if features is None:
        features = initial_features(rng_key, x, num_features)
    states = jnp.zeros((x.shape[0], num_features), jnp.int32)
    return GVQState(features, states, _mean_error(x, states, features), jnp.asarray(False))


def m_step(x, states, features):
    """Least-squares features for the given association (eq. 3-4); unused rows keep ``features``."""
    design = states.astype(x.dtype)
    solution = jnp.linalg.lstsq(design, x)[0]
    used = jnp.any(states > 0, axis=0)
    return jnp.where(used[:, None], solution, features)


def step(rng_key, state: GVQState, x, *, method="exact", model=None, model_kwargs=None,
         latent="s", noise=None, options=(), tol=0.0):
    """One EM iteration: association with ``method``, then the least-squares M-step. Jittable.

    ``converged`` is set when no association changed, or when the error changed
    by at most ``tol`` relative to the previous one (for randomised methods,
    whose associations keep flickering).
    """
    model = gvq.model if model is None else model
    kwargs = {**(model_kwargs or {}), "features": state.features}
    result = associate_energy(model, x, kwargs, method=method, latent=latent, noise=noise,
                              rng_key=rng_key, options=dict(options),
                              num_features=state.features.shape[0])
    features = m_step(x, result.states, state.features)
    num_changed = jnp.sum(jnp.any(result.states != state.states, axis=1))
    error = _mean_error(x, result.states, features)
    settled = jnp.abs(state.error - error) <= tol * state.error
    new_state = GVQState(features, result.states, error, (num_changed == 0) | settled)
    return new_state, GVQInfo(error, num_changed)


@partial(jax.jit, static_argnames=("num_iterations", "method", "model", "latent",
                                   "static_kwargs", "options"))
def _run(keys, x, init_features, noise, dynamic_kwargs, tol, *, num_iterations, method, model,
         latent, static_kwargs, options):
    kwargs = {**dynamic_kwargs, **dict(static_kwargs)}

    def one_restart(key, features0):
        state = init(None, x, features0.shape[0], features=features0)
        trace = jnp.zeros(num_iterations, x.dtype)

        def cond(carry):
            i, state, _ = carry
            return (i < num_iterations) & ~state.converged

        def body(carry):
            i, state, trace = carry
            state, info = step(jax.random.fold_in(key, i), state, x, method=method,
                               model=model, model_kwargs=kwargs, latent=latent, noise=noise,
                               options=options, tol=tol)
            return i + 1, state, trace.at[i].set(info.error)

        i, state, trace = jax.lax.while_loop(cond, body, (0, state, trace))
        trace = jnp.where(jnp.arange(num_iterations) < i, trace, state.error)
        return state, trace, i

    return jax.vmap(one_restart)(keys, init_features)


def fit_gvq(
    x,
    num_features: int,
    *,
    method: str = "exact",
    rng_key=None,
    num_iterations: int = 100,
    num_restarts: int = 4,
    init_features=None,
    model: Callable | None = None,
    model_kwargs: dict | None = None,
    latent: str = "s",
    noise=None,
    progress_bar: bool = False,
    tol: float | None = None,
    **options,
) -> GVQResult:
    """Learn GVQ features by EM in the sigma -> 0 limit.

    Parameters
    ----------
    x : array (num_examples, dim)
        Data.
    num_features : int
        Number of features n (2^n codebook vectors).
    method : str
        Association method, one of :data:`inference.association.METHODS`.
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
        Start from these features instead of :func:`initial_features`.
    model, model_kwargs, latent, noise
        The program and how its energy is read (see :func:`inference.associate`);
        ``noise=None`` is the GVQ limit, a float gives MAP-EM at that noise.
    progress_bar : bool
        Show a tqdm bar over iterations (runs the jitted step from Python).
    tol : float, optional
        Also stop when the error changes by at most ``tol`` relative to the last
        iteration. Default: 0 for ``"exact"`` (stop at the fixed point, where no
        association changes) and 1e-5 for the other methods, whose randomised
        associations may flicker between equally good states.
    **options
        Options of the association method.

    Returns
    -------
    GVQResult
    """
    _load_methods()
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}; got {method!r}")
    if rng_key is None:
        raise ValueError("fit_gvq needs an explicit rng_key (e.g. jax.random.key(0))")
    num_features = check_positive_int(
        num_features, "num_features",
        maximum=MAX_EXACT_FEATURES if method == "exact" else None,
        why=" for exhaustive search (2^num_features states per example)")
    x = check_data(x, "x")
    num_iterations = check_positive_int(num_iterations, "num_iterations")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    if noise is not None:
        check_positive(noise, "noise")
    model = gvq.model if model is None else model
    key_init, key_run = jax.random.split(rng_key)
    keys = jax.random.split(key_run, num_restarts)
    starts = restart_features(key_init, x, num_features, num_restarts, init_features)
    if METHODS[method].validate is not None:
        METHODS[method].validate(starts[0], options)
    check_quadratic(model, x, latent=latent, noise=noise,
                    model_kwargs={**(model_kwargs or {}), "features": starts[0]})
    tol = (0.0 if method == "exact" else 1e-5) if tol is None else tol
    if not isinstance(tol, int | float) or not tol >= 0:
        raise ValueError(f"tol must be a non-negative number; got {tol!r}")
    dynamic, static = split_model_kwargs(model_kwargs)
    common = dict(method=method, model=model, latent=latent, static_kwargs=static,
                  options=freeze_options(options))
    if progress_bar:
        states, traces, counts = _run_with_progress(keys, x, starts, noise, dynamic, tol,
                                                    num_iterations, common)
    else:
        states, traces, counts = _run(keys, x, starts, noise, dynamic, tol,
                                      num_iterations=num_iterations, **common)
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
    return GVQResult(
        features=states.features[best], states=states.states[best], error=errors[best],
        error_trace=traces[best], num_iterations=counts[best], converged=jnp.asarray(converged),
        restart_errors=errors,
    )


@partial(jax.jit, static_argnames=("method", "model", "latent", "static_kwargs", "options"))
def _vmapped_step(keys, states, x, noise, dynamic_kwargs, tol, *, method, model, latent,
                  static_kwargs, options):
    kwargs = {**dynamic_kwargs, **dict(static_kwargs)}

    def one(key, state):
        new_state, info = step(key, state, x, method=method, model=model, model_kwargs=kwargs,
                               latent=latent, noise=noise, options=options, tol=tol)
        # A converged restart stays put.
        new_state = jax.tree.map(lambda a, b: jnp.where(state.converged, a, b), state, new_state)
        return new_state

    return jax.vmap(one)(keys, states)


def _run_with_progress(keys, x, starts, noise, dynamic, tol, num_iterations, common):
    states = jax.vmap(lambda f: init(None, x, f.shape[0], features=f))(starts)
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
