"""Multiple Cause Vector Quantization fitted by the paper's annealed variational EM
(Ross and Zemel (2003), sec. 3): the public fit.

The mathematics (the free energy F_T, the E-, g- and M-steps from the statistics,
the start, the temperature schedule) is in :mod:`inference.mcvq.core`; this module
runs it on the engine (:mod:`inference.engine.loop`: restarts, convergence, trace,
checkpoints, sharding), dispatches streams to :mod:`inference.mcvq.stream`, and
builds the result. The names of :mod:`inference.mcvq.core` that the fit's users
need are re-exported here.

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003: sec. 3 (free energy, E- and M-steps,
annealing), sec. 5.1-5.2 (schedule, missing data).
"""

from __future__ import annotations

import functools
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference.engine import checkpoint
from inference.engine.loop import Algorithm, run, select
from inference.engine.sharding import resolve_mesh
from inference.mcvq import stream as streaming_fits
from inference.mcvq.core import (
    MCVQInfo,
    MCVQState,
    check_observed,
    data_moments,
    e_step,
    free_energy,
    free_energy_from_statistics,
    gaussian_parameters,
    infer,
    init,
    likelihood_terms,
    linear_schedule,
    natural_parameters,
    priors,
    reconstruct,
    schedule,
    step,
)
from inference.mcvq.result import MCVQResult, MCVQTrace
from inference.mcvq.sources import is_masked_stream
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import (
    MissingKeyError,
    check_positive,
    check_positive_int,
    check_rng_key,
)

__all__ = ["MCVQState", "MCVQInfo", "MCVQResult", "MCVQLoopState", "MCVQLoopInfo", "ALGORITHM",
           "engine_step", "fit_mcvq", "init", "step", "likelihood_terms",
           "gaussian_parameters", "free_energy", "infer_states", "reconstruct",
           "linear_schedule", "schedule", "e_step"]


class MCVQLoopState(NamedTuple):
    """One start's state in the engine's loop (:mod:`inference.engine.loop`): the EM state
    (:class:`MCVQState`'s fields), the iteration (it picks the temperature) and the
    previous F_T (the convergence test)."""

    g: jax.Array
    m: jax.Array
    mu: jax.Array
    sigma: jax.Array
    stats: jax.Array
    iteration: jax.Array
    previous: jax.Array


class MCVQLoopInfo(NamedTuple):
    """One iteration as the engine records it: F_T (``objective``), the temperature, and
    whether F_T changed by at most ``tol`` at an unchanged temperature."""

    objective: jax.Array
    temperature: jax.Array
    converged: jax.Array


def engine_step(rng_key, state: MCVQLoopState, data, params, *, shard=None):
    """:func:`step` at the schedule's temperature of ``state.iteration``, for the engine.

    ``data`` is ``(x, mask)``; ``params`` is ``(a, b, temperatures, floor, tol)``. The
    start has converged when the relative change of F_T (to max(|F_T|, 1)) is at most
    ``tol`` and the temperature equals the previous iteration's. With a ``shard`` every
    sum over examples is added over the devices (:func:`step`).
    """
    del rng_key  # deterministic
    x, mask = data
    a, b, temperatures, floor, tol = params
    axis = None if shard is None else shard.axis_name
    it = state.iteration
    temperature = temperatures[it]
    new, info = step(MCVQState(*state[:5]), x, mask, a, b, temperature, floor, axis)
    same = (it > 0) & (temperature == temperatures[jnp.maximum(it - 1, 0)])
    change = (jnp.abs(state.previous - info.free_energy)
              / jnp.maximum(jnp.abs(info.free_energy), 1.0))
    return (MCVQLoopState(*new, it + 1, info.free_energy),
            MCVQLoopInfo(info.free_energy, info.temperature, same & (change <= tol)))


#: The annealed variational EM as an engine algorithm (m holds one row per example).
ALGORITHM = Algorithm(engine_step, name="fit_mcvq", rows=("m",))


@functools.partial(jax.jit, static_argnames=("num_vqs", "num_states", "batch_size"))
def _init_starts(keys, x, mask, a, b, floor, *, num_vqs, num_states, batch_size):
    """:func:`init` of every start, ``batch_size`` at a time, as engine states."""
    def one(key):
        state = init(key, x, mask, num_vqs, num_states, a, b, floor)
        return MCVQLoopState(*state, jnp.zeros((), jnp.int32), jnp.asarray(jnp.inf, x.dtype))

    return jax.lax.map(one, keys, batch_size=batch_size)


@functools.partial(jax.jit, static_argnames=("batch_size",))
def _final_energies(states, x, mask, a, b, temperature, *, batch_size):
    """F_T of every start's last state at the schedule's last ``temperature`` (so that
    starts which stopped at different iterations compare)."""
    moments, shift = data_moments(x, mask)

    def one(state):
        return free_energy_from_statistics(
            state.stats, natural_parameters(state.mu, state.sigma, shift), state.g, state.m, a,
            b, temperature)

    return jax.lax.map(one, states, batch_size=batch_size)


def fit_mcvq(x, num_vqs: int, num_states: int, *, mask=None, rng_key,
             temperature_schedule=None, max_iterations: int = 100,
             initial_temperature: float | None = None, variance_floor: float = 1e-3,
             tol: float = 1e-6, a=None, b=None, num_restarts: int = 1,
             restart_batch_size: int = 1, devices=None, mesh=None, checkpoint_path=None,
             checkpoint_every: int | None = None, resume_from=None,
             progress_bar: bool = False) -> MCVQResult:
    """Fit the MCVQ program by the paper's annealed variational EM (module docstring).

    Parameters
    ----------
    x : array (N, D)
        Data; entries where ``mask`` is False may hold anything, NaN included.
        Also a stream too large for memory (an ``np.memmap``, a callable returning a
        fresh iterator of batches or of ``(x, mask)`` pairs, a list of either, an
        :class:`inference.mixture.stream.BatchSource`): the fit then runs by passes
        (:func:`inference.mcvq.stream.fit_mcvq_stream`: the same EM and result,
        ``m`` None; ``mask`` then a source cut like x, or None).
    num_vqs, num_states : int
        K VQs of J states each (both >= 1).
    mask : bool array (N, D), optional
        True where x is observed (default: all). Every example and every
        dimension needs at least one observed entry.
    rng_key : jax.random key
        For the initial state (:func:`init`).
    temperature_schedule : float or array (max_iterations,), optional
        Temperature T of every iteration (positive): a constant, or an array
        whose length sets the number of iterations. Default:
        :func:`linear_schedule` from ``initial_temperature`` to 1 over the first
        half of ``max_iterations``.
    max_iterations : int
        Maximum number of iterations (when the schedule is not an array).
    initial_temperature : float, optional
        Start of the default schedule: the paper's "integer less than C",
        default max(N - 1, 1).
    variance_floor : float
        sigma^2 >= ``variance_floor`` times the mean variance of the observed
        data per dimension (absolute floor in the result).
    tol : float
        Stop when ``|Delta F_T| <= tol max(|F_T|, 1)`` between two iterations at the
        same temperature.
    a : array (D, K), optional
    b : array (K, J), optional
        Selection priors (fixed; uniform by default, as in the paper).
    num_restarts : int
        Number of starts, all in one compiled call; the one with the lowest
        final F_T at the schedule's last temperature is kept
        (``restart_free_energies`` lists them all). One start uses
        ``rng_key`` itself, more use ``jax.random.split(rng_key, num_restarts)``.
    restart_batch_size : int
        Starts run side by side (vmapped) at a time. A vmapped batch iterates
        until its slowest start has converged, so the default, 1 (one start
        after another), is fastest on a CPU; on an accelerator a larger batch
        fills the device. Memory grows with it.
    devices : None, int or sequence of jax.Device
        Split the examples over these devices (:func:`inference.engine.sharding.resolve_mesh`):
        ``None`` uses all of ``jax.devices()`` when there are several (else the plain
        single-device path), an int the first that many. Every E-step runs on each
        device's rows; the statistics (matrix products over examples), the observed
        means and the free energy's sum over examples are added over the devices
        (``shard_map`` and ``psum``). The result equals the single-device fit up to
        float rounding; x is padded with unobserved rows to a multiple of the device
        count, so any number of examples works.
    mesh : jax.sharding.Mesh, optional
        A mesh of your own instead of ``devices`` (one axis, or one named ``"data"``).
    checkpoint_path : str or os.PathLike, optional
        Write a checkpoint (the loop carry of every start and the options, with the
        SHA-256 of x and mask) to this file every ``checkpoint_every`` iterations
        (:mod:`inference.engine.checkpoint`; atomic: a killed process leaves the last one
        intact). Single device only (not with ``devices``/``mesh``).
    checkpoint_every : int, optional
        Iterations per checkpoint (a positive int; needs ``checkpoint_path``).
    resume_from : str or os.PathLike, optional
        Continue from a checkpoint written by ``fit_mcvq`` with the same data and
        options (``rng_key`` included; else ``ValueError`` naming the option). The
        result is bit-identical to the uninterrupted fit; a checkpoint of a finished
        fit returns its result at once.
    progress_bar : bool
        A tqdm bar over the iterations (one device only).

    Returns
    -------
    MCVQResult

    Notes
    -----
    The generic call: with one VQ and ``temperature_schedule=1.0`` this fit is
    ``fit_em(mcvq_program, x, 1, num_states, e_step="mean-field")`` on the same program
    with mu and sigma as ``numpyro.param`` sites
    (:func:`inference.em.programs.mcvq_program`): from this fit's start, the same free
    energy after every iteration and the same parameters to 1e-6 relative
    (``tests/test_em_families.py``). With several VQs the two are variational EM on the
    same program in different families of posteriors: ``fit_em``'s has a factor Q(r) for
    every example, this fit's one factor g shared by all of them (the paper's
    consistency constraint), and this fit anneals towards the program with one r for all
    examples, which ``fit_em`` does not fit (its discrete sites lie in the example
    plate). Where every example's Q(r) is the same g, the free energy that ``fit_em``
    lowers is this fit's F at T = N.

    Variational EM finds local optima (a VQ left without dimensions, or two
    planted groups merged into one VQ, are the common ones): use
    ``num_restarts`` (measured on planted data in ``tests/test_mcvq.py``: one
    start recovers the planted partition about two times in three, the best
    of five nearly always); a spare state per VQ (J above the expected
    number) helps too.

    Examples
    --------
    >>> import jax
    >>> from ppl_models import mcvq
    >>> data = mcvq.generate(jax.random.key(2), num_examples=60, dim=9, num_vqs=3,
    ...                      num_states=3)
    >>> result = fit_mcvq(data.x, 3, 4, rng_key=jax.random.key(10), max_iterations=150)
    >>> result.g.shape, result.m.shape, result.mu.shape
    ((9, 3), (60, 3, 4), (9, 3, 4))
    >>> bool(result.converged), result.trace.objective.shape == (result.num_iterations,)
    (True, True)
    """
    if is_masked_stream(x):  # memmap, callable, batches, (x, mask) pairs
        if (devices, mesh, checkpoint_path, checkpoint_every, resume_from) != (None,) * 5:
            raise ValueError("devices, mesh and checkpoints apply to an in-memory x, not to "
                             "a stream of batches")
        return streaming_fits.fit_mcvq_stream(
            x, num_vqs, num_states, mask=mask, rng_key=rng_key,
            temperature_schedule=temperature_schedule, max_iterations=max_iterations,
            initial_temperature=initial_temperature, variance_floor=variance_floor, tol=tol,
            a=a, b=b, num_restarts=num_restarts)
    num_vqs = check_positive_int(num_vqs, "num_vqs")
    num_states = check_positive_int(num_states, "num_states")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    restart_batch_size = min(check_positive_int(restart_batch_size, "restart_batch_size"),
                             num_restarts)
    if rng_key is None:
        raise MissingKeyError("fit_mcvq needs an explicit rng_key (e.g. jax.random.key(0))")
    check_rng_key(rng_key)
    mesh = resolve_mesh(devices, mesh)
    x, mask = check_observed(x, mask, "x")
    num, dim = x.shape
    empty_rows = np.flatnonzero(~np.asarray(mask).any(axis=1))
    if empty_rows.size:
        raise ValueError(f"mask leaves example(s) {empty_rows[:10].tolist()} (rows of x) "
                         "without any observed entry; drop them")
    empty_cols = np.flatnonzero(~np.asarray(mask).any(axis=0))
    if empty_cols.size:
        raise ValueError(f"mask leaves dimension(s) {empty_cols[:10].tolist()} (columns of x) "
                         "without any observed entry; drop them")
    check_positive(variance_floor, "variance_floor")
    check_positive(tol, "tol") if tol else None
    temperatures, num_iterations = schedule(temperature_schedule, max_iterations,
                                            initial_temperature, num)
    temperatures = jnp.asarray(temperatures, x.dtype)
    a, b = priors(a, b, dim, num_vqs, num_states, x.dtype)
    obs = np.asarray(mask)
    xs = np.asarray(x, dtype=float)
    count = obs.sum(axis=0)
    col_mean = (obs * xs).sum(axis=0) / count
    spread = float(np.mean((obs * (xs - col_mean) ** 2).sum(axis=0) / count))
    floor = variance_floor * (spread if spread > 0 else 1.0)
    if mesh is not None and (checkpoint_path, checkpoint_every, resume_from) != (None,) * 3:
        raise ValueError("checkpoint_path/checkpoint_every/resume_from: checkpoints need the "
                         f"single-device fit; got devices={devices!r}, mesh={mesh!r}")
    saving = checkpoint.checkpointing(
        checkpoint_path, checkpoint_every, resume_from,
        dict(num_vqs=num_vqs, num_states=num_states, num_restarts=num_restarts,
             restart_batch_size=restart_batch_size, max_iterations=num_iterations,
             variance_floor=variance_floor, tol=tol, rng_key=checkpoint.jsonable(rng_key)),
        data=(x, mask), temperature_schedule=temperatures, a=a, b=b)
    keys = rng_key[None] if num_restarts == 1 else jax.random.split(rng_key, num_restarts)
    floor_x = jnp.asarray(floor, x.dtype)
    starts = _init_starts(keys, x, mask, a, b, floor_x, num_vqs=num_vqs, num_states=num_states,
                          batch_size=restart_batch_size)
    runs = run(ALGORITHM, starts, (x, mask), (a, b, temperatures, floor_x,
                                              jnp.asarray(tol, x.dtype)),
               keys=keys, max_iterations=num_iterations, tol=tol,
               restart_batch=None if mesh is not None else restart_batch_size, mesh=mesh,
               checkpoint=saving, progress_bar=progress_bar)
    finals = _final_energies(runs.state, x, mask, a, b, temperatures[-1],
                             batch_size=restart_batch_size)
    # NaN finals (a start that broke down) never win; if all are NaN the first is kept.
    best = int(jnp.argmin(jnp.where(jnp.isnan(finals), jnp.inf, finals)))
    state, trace, it, done = select(runs, best)
    energies = trace.objective
    if not bool(np.all(np.isfinite(np.asarray(energies)))):  # host: its length varies
        warnings.warn("fit_mcvq: the free energy became non-finite; check the data scale and "
                      "variance_floor", NumericalWarning, stacklevel=2)
    if not done:
        warnings.warn(f"fit_mcvq: not converged after {it} iterations (tol={tol}); raise "
                      "max_iterations or lengthen the schedule at T = 1",
                      ConvergenceWarning, stacklevel=2)
    return MCVQResult(g=state.g, m=state.m, mu=state.mu, sigma=state.sigma, a=a, b=b,
                      trace=MCVQTrace(energies, trace.temperature),
                      num_iterations=it, converged=done, variance_floor=floor,
                      restart_free_energies=finals, best_restart=best,
                      restart_converged=runs.converged)


def infer_states(result: MCVQResult, x_new, *, mask=None):
    """Q(s_k = j) for new examples with the fitted parameters fixed, (N_new, K, J).

    One E-step with g, mu, sigma and b of ``result`` (exact: with g fixed the
    E-step minimises F over m in closed form). Missing entries (``mask`` False,
    any value, NaN included) drop out; an example with no observed entry gets
    the prior b.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from ppl_models import mcvq
    >>> data = mcvq.generate(jax.random.key(2), num_examples=80, dim=9, num_vqs=3,
    ...                      num_states=3)
    >>> result = fit_mcvq(data.x[:60], 3, 4, rng_key=jax.random.key(10), max_iterations=150)
    >>> q = infer_states(result, data.x[60:])  # 20 examples the fit has not seen
    >>> q.shape, bool(jnp.allclose(q.sum(axis=-1), 1.0))
    ((20, 3, 4), True)
    >>> x_hat = reconstruct(result.g, q, result.mu)  # held-out error at the noise sd 0.3
    >>> round(float(jnp.sqrt(jnp.mean((x_hat - data.x[60:]) ** 2))), 1)
    0.3
    """
    if not isinstance(result, MCVQResult):
        raise TypeError(f"result must be an MCVQResult (from fit_mcvq); got "
                        f"{type(result).__name__}")
    dim = result.mu.shape[0]
    x_new, mask = check_observed(x_new, mask, "x_new", dim=dim)
    return infer(x_new.astype(result.mu.dtype), mask, result.g, result.mu, result.sigma,
                  result.b)

