"""The online mixture rules by passes over a stream of batches
(:func:`fit_online_stream`), run through the engine
(:func:`inference.engine.passes.run_online_passes`, one pass an iteration, the step
:func:`inference.mixture.online_passes.batch_step`)."""

from __future__ import annotations

import itertools
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference.engine import host, warn_not_converged
from inference.engine.passes import OnlineAlgorithm, run_online_passes
from inference.engine.persistence import register_renamed_fields
from inference.engine.protocol import follows_protocol
from inference.engine.streaming import batches
from inference.mixture import online as mixture_online
from inference.mixture.online_passes import batch_step
from inference.mixture.seeding import distinct_rows
from ppl_models.diagnostics import NumericalWarning
from ppl_models.validation import (
    MissingKeyError,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_rng_key,
)


class OnlineStreamTrace(NamedTuple):
    """Per-batch arrays of :func:`fit_online_stream` (every batch of every pass).

    ``objective``: the mean log-likelihood of the batch's examples, each under the
    parameters just before its step (the prequential log-likelihood); ``num_active``:
    the active units after the batch."""

    objective: jax.Array
    num_active: jax.Array


@follows_protocol("mean_log_likelihood", "max")
class OnlineStreamResult(NamedTuple):
    """Result of :func:`fit_online_stream` (no statistic needs a further pass).

    Attributes
    ----------
    weights, means, covariances : arrays (m,), (m, d), (m, d, d)
        The m used units: active units whose share of the wins over the passes
        (adaptive EM: of the posterior mass) is at least ``min_share``; weights
        renormalised. (``fit_online`` uses the shares of a final hard assignment,
        which needs one more pass.)
    num_components : int
        m.
    used : bool array (k,)
    shares : array (k,)
        ``win_counts / num_steps``.
    all_weights, all_means, all_covariances : arrays (k,), (k, d), (k, d, d)
        Every starting unit.
    win_counts : array (k,)
    active : bool array (k,)
        False for units adaptive EM pruned.
    state : mixture_online.OnlineState
        The final state (resume with :func:`fit_online_stream`'s ``state`` argument).
    trace : OnlineStreamTrace
        One entry per batch of every pass run (num_iterations * batches per pass).
    num_iterations : int
        Passes run.
    converged : bool
        A pass's mean prequential log-likelihood (its batches' ``trace.objective``
        weighted by rows) changed by at most ``tol`` relative to the pass before;
        always False with ``tol`` = 0 (every pass runs).
    num_steps : int
    nonfinite : bool
    num_start : int
    method, criterion, schedule, covariance : str
    restart_objectives : array (num_restarts,) or None
        The mean prequential log-likelihood of the last pass of every start when
        ``num_restarts`` > 1 (the result is the start with the highest); None for one
        start.
    """

    weights: jax.Array
    means: jax.Array
    covariances: jax.Array
    num_components: int
    used: jax.Array
    shares: jax.Array
    all_weights: jax.Array
    all_means: jax.Array
    all_covariances: jax.Array
    win_counts: jax.Array
    active: jax.Array
    state: mixture_online.OnlineState
    trace: OnlineStreamTrace
    num_iterations: int
    converged: bool
    num_steps: int
    nonfinite: bool
    num_start: int
    method: str
    criterion: str
    schedule: str
    covariance: str
    restart_objectives: jax.Array | None = None


def _old_stream_result(values):
    """An OnlineStreamResult saved with ``log_likelihood_trace`` and ``num_active_trace``
    (one pass, before the passes ran through the engine)."""
    values["trace"] = OnlineStreamTrace(values.pop("log_likelihood_trace"),
                                        values.pop("num_active_trace"))
    values["num_iterations"] = 1
    values["converged"] = False
    return values


register_renamed_fields(OnlineStreamResult, {"log_likelihood_trace": "log_likelihood_trace"},
                        convert=_old_stream_result)


def fit_online_stream(source, num_components: int, *, method: str = "rpcl", rng_key=None,
                      learning_rate: float = 0.05, delearning_rate: float = 0.02,
                      schedule: str = "constant", criterion=None, delearning=None,
                      covariance: str = "full", init: str = "kmeans++", init_means=None,
                      init_covariances=None, prior_count=None, min_share: float = 0.01,
                      reg_covar: float = 1e-6, min_weight: float = 1e-4, state=None,
                      batch_size=None, max_iterations: int = 1, tol: float = 0.0,
                      progress_bar: bool = False, num_restarts: int = 1) -> OnlineStreamResult:
    """Passes of an online method (:mod:`inference.mixture.online`) over a batch source.

    The stream is the rows of ``source`` in their order (a stream cannot be
    shuffled as ``fit_online`` shuffles its data set: shuffle when writing it).
    The state is carried from batch to batch and from pass to pass, so the steps
    are exactly those of ``mixture_online.run`` over the concatenated rows, and one
    pass those of ``fit_online`` with ``max_iterations=1`` when the rows come in its
    order ``stream_order`` and the start is the same (tested). A one-shot iterator
    is fine for one pass. Every pass runs through the engine
    (:func:`inference.engine.passes.run_online_passes`), one pass an iteration.

    Parameters
    ----------
    source : array, np.memmap, callable, iterable or iterator of arrays (:class:`BatchSource`)
    num_components : int
        Units k.
    method, learning_rate, delearning_rate, schedule, criterion, delearning, covariance, \
prior_count, min_share, reg_covar, min_weight
        As ``mixture_online.fit_online`` (adaptive EM uses ``old_posterior="zero"``:
        in one pass every example is new).
    rng_key : jax.random key
        ``fit_online``'s: ``split(rng_key)[0]`` draws the initial means; required
        unless ``init_means`` or ``state`` is given.
    init : {"kmeans++", "random"}
        Seeding of the initial means on the **first batch**; the starting
        covariances are sigma^2 I with sigma^2 from the first batch too
        (``mixture_online.init``).
    init_means, init_covariances : arrays (k, d), (k, d, d), optional
    state : mixture_online.OnlineState, optional
        Continue from this state (a previous result's ``state``) instead of starting.
    batch_size : int, optional
        Rows per batch (:class:`BatchSource`).
    max_iterations : int
        Passes over the source at most (each in the source's order; more than one
        needs a re-iterable source).
    tol : float
        Stop after a pass whose mean prequential log-likelihood changed by at most
        ``tol`` relative to the pass before; 0 (the default) runs every pass.
    progress_bar : bool
        A tqdm bar over the passes (the engine's).
    num_restarts : int
        Starts, each with its own initial means drawn from a key split off ``rng_key``
        (start i is the fit with ``rng_key=jax.random.split(rng_key, num_restarts)[i]``;
        the default 1 uses ``rng_key`` itself). They run one after another, each over
        its own passes of the source (so more than one needs a re-iterable source),
        and the fit returned is the one with the highest mean prequential
        log-likelihood over its last pass (the objective of the stopping test);
        ``restart_objectives`` lists every start's. More than one needs ``rng_key``
        and means drawn by ``init`` (not ``init_means`` or ``state``: the stream's
        order is fixed, so such starts would all be the same fit).

    Returns
    -------
    OnlineStreamResult

    Examples
    --------
    >>> import jax, numpy as np
    >>> from ppl_models import mixture
    >>> data = mixture.generate(jax.random.key(0), 400, 3, 2, separation=8.0, unequal=False)
    >>> x = np.asarray(data.x)  # rows in random order (a stream is not shuffled)
    >>> fit = fit_online_stream(x, 6, method="rpcl", rng_key=jax.random.key(2), batch_size=100,
    ...                         max_iterations=10)
    >>> fit.num_components, fit.num_iterations, fit.num_steps  # 3 of the 6 units stay in use
    (3, 10, 4000)
    >>> fit.trace.objective.shape  # one entry per batch of every pass
    (40,)
    """
    rate = mixture_online.check_rate
    criterion, delearning = mixture_online.check_options(method, schedule, covariance, init,
                                                         criterion, delearning)
    k = check_positive_int(num_components, "num_components")
    numbers = {"learning_rate": rate(learning_rate, "learning_rate"),
               "delearning_rate": rate(delearning_rate, "delearning_rate", lower_open=False),
               "reg_covar": float(reg_covar), "min_weight": rate(min_weight, "min_weight")}
    min_share = rate(min_share, "min_share", lower_open=False)
    if reg_covar:
        check_positive(reg_covar, "reg_covar")
    if prior_count is not None:
        check_positive(prior_count, "prior_count")
    if state is None and init_means is None and rng_key is None:
        raise MissingKeyError("rng_key is required unless init_means or state is given")
    if rng_key is not None:
        check_rng_key(rng_key)
    options = (("covariance", covariance), ("criterion", criterion), ("delearning", delearning),
               ("method", method), ("num_examples", None), ("old_posterior", "zero"),
               ("schedule", schedule))
    max_iterations = check_positive_int(max_iterations, "max_iterations")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    if num_restarts > 1:
        if state is not None or init_means is not None:
            raise ValueError(f"num_restarts={num_restarts} needs means drawn by init; "
                             "state and init_means give one start (use num_restarts=1)")
        if rng_key is None:
            raise MissingKeyError(f"rng_key is required for num_restarts={num_restarts} "
                                  "(it draws every start's means)")
    tol = check_nonnegative(tol, "tol")
    data = batches(source, batch_size)
    if not data.reusable and max_iterations > 1:
        raise ValueError(f"source is a one-shot iterator, but max_iterations={max_iterations} "
                         "passes read it again; pass an array, np.memmap, list of arrays or "
                         "a callable that returns a fresh iterator")
    if not data.reusable and num_restarts > 1:
        raise ValueError(f"source is a one-shot iterator, but num_restarts={num_restarts} "
                         "starts read it again; pass an array, np.memmap, list of arrays or "
                         "a callable that returns a fresh iterator")
    rows_iter = iter(data)
    first = next(rows_iter)  # the source raises ValueError when it is empty
    dtype = (jax.dtypes.canonicalize_dtype(first.dtype)
             if np.issubdtype(first.dtype, np.floating) else jnp.result_type(float))
    dim = first.shape[1]
    if state is None:
        keys = [rng_key] if num_restarts == 1 else list(jax.random.split(rng_key, num_restarts))
        starts = [_online_start(key, np.asarray(first, dtype), k, init, init_means,
                                init_covariances, covariance, prior_count) for key in keys]
    elif state.means.shape != (k, dim):
        raise ValueError(f"state must have means of shape ({k}, {dim}); got "
                         f"{state.means.shape}")
    else:
        starts = [state]
    # Steps are per row: batches are padded to the first batch's rows (block=1).
    algorithm = OnlineAlgorithm(batch_step, name="fit_online_stream",
                                options=(("options", options),))
    # The first start's first pass goes on from the batch already read; later starts
    # read the source anew.
    runs = [run_online_passes(algorithm, start, data, numbers, max_iterations=max_iterations,
                              tol=tol, dtype=dtype, progress_bar=progress_bar,
                              first_pass=itertools.chain([first], rows_iter) if index == 0
                              else None)
            for index, start in enumerate(starts)]
    best, restart_objectives = 0, None
    if num_restarts > 1:
        restart_objectives = jnp.stack([run.objective[-1] for run in runs])
        finals = np.asarray(restart_objectives, np.float64)
        best = int(np.argmax(np.where(np.isnan(finals), -np.inf, finals)))
    fitted = runs[best]
    state = fitted.state
    if tol > 0:
        warn_not_converged("fit_online_stream", fitted.converged, max_iterations, f"tol={tol}")
    steps = int(state.num_steps)
    counts = state.counts
    shares = counts / jnp.maximum(jnp.sum(counts), 1e-30)
    used = np.asarray(state.active & (shares >= min_share))
    if not used.any():
        used = np.arange(k) == int(jnp.argmax(shares))
    keep = np.flatnonzero(used)
    nonfinite = not all(bool(jnp.all(jnp.isfinite(a)))
                        for a in (state.weights, state.means, state.covariances))
    if nonfinite:
        warnings.warn(f"fit_online_stream: non-finite parameters after {method!r}; lower the "
                      "learning rates or raise reg_covar", NumericalWarning, stacklevel=2)
    weights = mixture_online.used_weights(state.weights, used, keep)
    return OnlineStreamResult(
        weights=weights, means=host.take(state.means, keep),
        covariances=host.take(state.covariances, keep),
        num_components=int(keep.size), used=host.array(used), shares=shares,
        all_weights=state.weights, all_means=state.means, all_covariances=state.covariances,
        win_counts=counts, active=state.active, state=state,
        trace=OnlineStreamTrace(*fitted.trace), num_iterations=fitted.num_iterations,
        converged=fitted.converged, num_steps=steps, nonfinite=nonfinite, num_start=k,
        method=method, criterion=criterion, schedule=schedule, covariance=covariance,
        restart_objectives=restart_objectives)


def _online_start(rng_key, first, k, init, init_means, init_covariances, covariance,
                  prior_count):
    """``mixture_online.init`` on the first batch, with ``fit_online``'s key split."""
    dim = first.shape[1]
    if init_means is None:
        if distinct_rows(first, k).shape[0] < k:
            raise ValueError(f"the first batch of source has fewer than num_components={k} "
                             "distinct rows to seed from; pass init_means or larger batches")
    else:
        init_means = jnp.asarray(init_means, first.dtype)
        if init_means.shape != (k, dim) or not bool(jnp.all(jnp.isfinite(init_means))):
            raise ValueError(f"init_means must be finite with shape ({k}, {dim}); "
                             f"got shape {init_means.shape}")
    if init_covariances is not None:
        init_covariances = jnp.asarray(init_covariances, first.dtype)
        if init_covariances.shape != (k, dim, dim):
            raise ValueError(f"init_covariances must have shape ({k}, {dim}, {dim}); "
                             f"got {init_covariances.shape}")
    key_init = jax.random.split(rng_key)[0] if rng_key is not None else jax.random.key(0)
    return mixture_online.init_jit(key_init, jnp.asarray(first), k, init_method=init,
                                    means=init_means, covariances=init_covariances,
                                    covariance=covariance, prior_count=prior_count)
