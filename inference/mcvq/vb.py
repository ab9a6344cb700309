"""Variational Bayes MCVQ with pruning of VQs and states: the fit, :func:`fit_vb_mcvq`.

The coordinate ascent on the bound (:mod:`inference.mcvq.vb_maths`: the state, one
:func:`~inference.mcvq.vb_maths.step`, the bound) runs on the engine
(:mod:`inference.engine.loop`) until the bound settles at a constant temperature; then,
with ``moves=True``, merge and refresh moves (:mod:`inference.mcvq.vb_moves`) are
searched and the fit re-converges after every accepted one. Checkpoints cover both
phases (:mod:`inference.engine.checkpoint`). The mathematics' public names (the state,
:func:`init`, :func:`step`, :func:`bound`) and the result class
(:mod:`inference.mcvq.vb_result`) are importable from here too.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference.engine import host
from inference.engine.loop import Algorithm, run, select
from inference.mcvq import core, vb_moves
from inference.mcvq.vb_maths import (
    VBMCVQInfo,
    VBMCVQState,
    bound,
    centred_prior,
    init,
    step,
    update_parameters,
)
from inference.mcvq.vb_result import VBMCVQResult, VBMCVQTrace
from ppl_models import mcvq as program
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import (
    MissingKeyError,
    check_fraction,
    check_positive_int,
    check_rng_key,
    check_tolerance,
)

__all__ = ["VBMCVQState", "VBMCVQInfo", "VBMCVQResult", "VBMCVQTrace", "init", "step", "bound",
           "centred_prior", "update_parameters", "check_covered", "fit_vb_mcvq"]


class VBMCVQLoopInfo(NamedTuple):
    """One iteration as the engine records it: L_T (``objective``), the active VQs and
    states, whether the step pruned, and whether the loop stops (settled at an unchanged
    temperature, everything pruned, or a non-finite bound)."""

    objective: jax.Array
    num_vqs: jax.Array
    num_states: jax.Array
    pruned: jax.Array
    converged: jax.Array


def engine_step(rng_key, state: VBMCVQState, data, params, *, shard=None, conditional=True):
    """:func:`step` for the engine (:mod:`inference.engine.loop`).

    ``data`` is ``(x, mask)``; ``params`` ``(prior, prune_threshold, temperatures, tol,
    start)``: iteration ``state.iteration - start`` of this run uses that entry of
    ``temperatures``. It has converged when the relative change of the bound is at most
    ``tol`` at an unchanged temperature without pruning (the first iteration of a run
    never is).
    """
    del rng_key, shard  # deterministic, one device
    x, mask = data
    prior, prune_threshold, temperatures, tol, start = params
    t = state.iteration - start
    temperature = temperatures[t]
    new, info = step(state, x, mask, prior, prune_threshold, temperature, conditional)
    same = (t > 0) & (temperature == temperatures[jnp.maximum(t - 1, 0)])
    change = jnp.abs(info.bound_change) / jnp.maximum(jnp.abs(info.bound), 1.0)
    settled = same & ~info.pruned & (change <= tol)
    done = settled | new.all_pruned | ~jnp.isfinite(info.bound)
    return new, VBMCVQLoopInfo(info.bound, info.num_vqs, info.num_states, info.pruned, done)


def algorithm(conditional: bool) -> Algorithm:
    """The variational Bayes iteration as an engine algorithm (cached per ``conditional``)."""
    return Algorithm(engine_step, options=(("conditional", bool(conditional)),),
                     name="fit_vb_mcvq")


_init_jit = jax.jit(init, static_argnames=("max_vqs", "max_states"))


def _iterate(state, rng_key, x, mask, prior, prune_threshold, temperatures, max_iterations,
             tol, *, conditional, checkpoint=None, progress_bar=False):
    """Steps from ``state`` until convergence or ``max_iterations`` more iterations, on the
    engine. Returns the state and the traces (bound, VQs, states, pruned) of this run."""
    runs = run(algorithm(conditional), jax.tree.map(lambda leaf: leaf[None], state), (x, mask),
               (prior, prune_threshold, temperatures, tol, state.iteration),
               keys=rng_key[None], max_iterations=max_iterations, checkpoint=checkpoint,
               progress_bar=progress_bar)
    state, trace, _, _ = select(runs, 0)
    return state, [np.asarray(t) for t in trace[:4]]


def _schedule(temperature_schedule, max_iterations):
    if temperature_schedule is None:
        return np.ones(max_iterations)
    temperatures = np.asarray(temperature_schedule, dtype=float)
    if temperatures.ndim == 0:
        temperatures = np.full(max_iterations, float(temperatures))
    if temperatures.ndim != 1 or temperatures.size < 1 or not np.all(
            np.isfinite(temperatures) & (temperatures > 0)):
        raise ValueError("temperature_schedule must be a positive number or a 1-D array of "
                         f"positive temperatures; got {temperature_schedule!r}")
    return temperatures


def check_covered(x, mask):
    """``inference.mcvq.em``'s checks of x and mask, and an observed entry in every row and column.

    Returns
    -------
    (x, mask) as ``inference.mcvq.core.check_observed`` returns them.
    """
    x, mask = core.check_observed(x, mask, "x")
    for axis, what in ((1, "example(s) (rows of x)"), (0, "dimension(s) (columns of x)")):
        empty = np.flatnonzero(~np.asarray(mask).any(axis=axis))
        if empty.size:
            raise ValueError(f"mask leaves {what} {empty[:10].tolist()} without any observed "
                             "entry; drop them")
    return x, mask


def _move_rounds(state, rng_key, x, mask, prior, threshold, tol, temperature, max_iterations,
                 move_steps, conditional, parts, temps, *, resume=None, on_round=None):
    """Searches for a bound-raising move and re-converges until none is found.

    Appends every continuation's traces to ``parts`` and ``temps``; its first
    iteration is flagged as a structural change (like a pruning) so that the
    monotonicity check skips the jump. Returns the state and the moves accepted.
    ``resume``: (key, first round, moves accepted) of a checkpoint; ``on_round``:
    called as ``on_round(state, key, next round, moves accepted)`` after every
    accepted move (the checkpoints of :func:`fit_vb_mcvq`).
    """
    key = jax.random.fold_in(rng_key, 1)
    constant = jnp.full(core.bucket(max_iterations), temperature, x.dtype)
    num_moves, first = 0, 0
    if resume is not None:
        key, first, num_moves = resume
    for round_ in range(first, 4 * state.pi.shape[0]):
        key, sub = jax.random.split(key)
        best, _, _ = vb_moves.search(state, sub, x, mask, prior, threshold,
                                     jnp.asarray(temperature, x.dtype),
                                     num_steps=move_steps, conditional=conditional)
        current = float(state.bound)
        if not float(best.bound) - current > float(tol) * max(abs(current), 1.0):
            break
        num_moves += 1
        state, part = _iterate(best._replace(iteration=state.iteration), rng_key, x, mask,
                               prior, threshold, constant, max_iterations, tol,
                               conditional=conditional)
        its = part[0].shape[0]
        part[3] = part[3].copy()
        part[3][0] = True
        parts.append(part)
        temps.append(np.full(its, temperature))
        if on_round is not None:
            on_round(state, key, round_ + 1, num_moves)
        if bool(state.all_pruned):
            break
    return state, num_moves


def _run_checkpointed(rng_key, x, mask, prior, threshold, padded, num_iterations, tol, *,
                      max_vqs, max_states, conditional, moves, max_iterations, move_steps,
                      checkpoint_path, checkpoint_every, resume_from, options,
                      progress_bar=False):
    """The main loop, then the move rounds, with checkpoints (:mod:`inference.engine.checkpoint`).

    The main loop runs through :func:`inference.engine.checkpoint.run_chunks` (one chunk
    without checkpoint options); its checkpoints hold ``{"phase": "main"}`` beside the
    carry. The move rounds save ``{"phase": "moves", state, key, round, ...}``
    after every accepted move and ``"done"`` at the end. Returns ``(state, parts,
    temps, num_moves)``: the final state, the traces and temperatures per segment,
    and the moves accepted.
    """
    from inference.engine import checkpoint

    path, every, resume, saved = checkpoint.prepare(
        checkpoint_path, checkpoint_every, resume_from, options, data=(x, mask),
        temperature_schedule=padded[:num_iterations], prior=tuple(prior))
    kind = "fit_vb_mcvq"
    tree = None
    if resume is not None:
        tree = checkpoint.load_checkpoint(resume, kind=kind, options=saved)
    if tree is not None and tree.get("phase") != "main":
        state, parts, temps = tree["state"], tree["parts"], tree["temps"]
        if tree["phase"] == "done":
            return state, parts, temps, tree["num_moves"]
        resume_moves = (tree["key"], tree["round"], tree["num_moves"])
    else:
        temperatures = jnp.asarray(padded, x.dtype)
        saving = None
        if path is not None or resume is not None:
            saving = checkpoint.Checkpointing(path, every, resume, saved, resumed=tree,
                                              extra={"phase": "main"})
        state, parts = _iterate(_init_jit(rng_key, x, mask, max_vqs, max_states, prior),
                                rng_key, x, mask, prior, threshold, temperatures, num_iterations,
                                tol, conditional=conditional, checkpoint=saving,
                                progress_bar=progress_bar)
        parts = [parts]
        its = parts[0][0].shape[0]
        temps = [np.asarray(padded[:its])]
        resume_moves = None

    def save(phase, state, key, round_, num_moves):
        if path is not None:
            checkpoint.save_checkpoint(
                path, {"phase": phase, "state": state, "key": key, "round": round_,
                       "num_moves": num_moves, "parts": parts, "temps": temps},
                kind=kind, options=saved)

    num_moves = 0 if resume_moves is None else resume_moves[2]
    if moves and not bool(state.all_pruned) and np.isfinite(float(state.bound)):
        state, num_moves = _move_rounds(
            state, rng_key, x, mask, prior, threshold, tol,
            float(padded[int(parts[0][0].shape[0]) - 1]), max_iterations, move_steps,
            conditional, parts, temps, resume=resume_moves,
            on_round=lambda *args: save("moves", *args))
    save("done", state, None, 0, num_moves)
    return state, parts, temps, num_moves


def fit_vb_mcvq(x, max_vqs: int, max_states: int, *, mask=None, rng_key,
                prune_threshold: float = 1e-3, max_iterations: int = 300, tol: float = 1e-5,
                temperature_schedule=None, mean_prior_mean=None, mean_prior_scale=None,
                precision_prior_shape=None, precision_prior_rate=None,
                conditional: bool = True, moves: bool = True,
                move_steps: int = 20, checkpoint_path=None,
                checkpoint_every: int | None = None, resume_from=None,
                progress_bar: bool = False, num_restarts: int = 1) -> VBMCVQResult:
    """Variational Bayes MCVQ with type-II ML weights and pruning (module docstring).

    Parameters
    ----------
    x : array (N, D)
        Data; entries where ``mask`` is False may hold anything, NaN included.
    max_vqs, max_states : int
        K VQs of J states at the start (generous: unneeded ones are removed), >= 1.
    mask : bool array (N, D), optional
        True where x is observed (default: all); every example and dimension
        needs an observed entry.
    rng_key : jax.random key
        For the start (:func:`init`) and the moves' proposals.
    prune_threshold : float in (0, 1)
        A VQ with alpha_k, or a state with pi_kj, below it is removed. The
        default 1e-3 is far below the weight of any VQ that explains one
        dimension (1 / D) or any state one example uses (1 / N) for D, N up to
        a few hundred, and far above the weights the unused slots decay to.
    max_iterations : int
        Iterations at most (when ``temperature_schedule`` is not an array).
    tol : float
        Convergence: ``|Delta L| <= tol max(|L|, 1)`` at a constant temperature in an
        iteration that removed nothing. The default 1e-5 sits above the float32
        rounding of L (changes of about ``1e-6 |L|`` were seen to alternate in sign at
        a fixed point); use a smaller one with float64 data.
    temperature_schedule : float or array, optional
        T per iteration (module docstring); default 1 (no annealing). An array
        sets the number of iterations.
    mean_prior_mean, mean_prior_scale, precision_prior_shape, precision_prior_rate : optional
        m0 (scalar or (D,)), beta0^-1/2, a0, b0; defaults from the data scale
        (``ppl_models.mcvq.prior_from_data``).
    conditional : bool
        The family of Q (module docstring): Q(mu, tau | r) (default) or the fully
        factorised Q(mu) Q(tau) Q(R) (which keeps g at its start; see there).
    moves : bool
        After convergence, search merges of two VQs and refreshes of one VQ's
        states (``inference.mcvq.vb_moves``), keep the best if it raises the bound
        after ``move_steps`` iterations, re-converge, and repeat until no move
        raises the bound (at most 4 ``max_vqs`` moves). Off: plain coordinate
        ascent, which stalls with causes split over several VQs.
    move_steps : int
        Iterations of coordinate ascent from a proposal before it is scored.
    checkpoint_path : str or os.PathLike, optional
        Write a checkpoint to this ``.npz`` file (:mod:`inference.engine.checkpoint`;
        atomic: a killed process leaves the last one intact): every
        ``checkpoint_every`` iterations of the main loop (its carry: state, traces,
        done flag), then after every accepted move (state, key, traces) and at the end.
    checkpoint_every : int, optional
        Iterations per checkpoint of the main loop (a positive int; needs
        ``checkpoint_path``).
    resume_from : str or os.PathLike, optional
        Continue from a checkpoint written by ``fit_vb_mcvq`` with the same data and
        options (``rng_key`` included; else ``ValueError`` naming the option). The
        result is bit-identical to the uninterrupted fit; a checkpoint of a finished
        fit returns its result at once.
    progress_bar : bool
        A tqdm bar over the iterations of the main loop (of every start).
    num_restarts : int
        Starts, each the whole fit (main loop and moves) from its own key: ``rng_key``
        itself for one (the default), ``jax.random.split(rng_key, num_restarts)`` for
        more (start i is the fit with ``rng_key`` that key). They run one after
        another (the moves are a search on the host), and the fit returned is the one
        with the highest final bound among those whose pruning left every VQ a state;
        ``restart_objectives`` lists every start's bound. Checkpoints need one start.

    Returns
    -------
    VBMCVQResult

    Raises
    ------
    ValueError
        Bad data or mask, ``max_vqs`` or ``max_states`` < 1, ``prune_threshold``
        outside (0, 1), a non-positive prior scale, shape or rate, a bad
        schedule, or a run whose pruning would remove every VQ (or every state
        of a VQ).
    TypeError
        Wrong argument types, or no ``rng_key``.

    Warns
    -----
    ConvergenceWarning
        Not converged within the iterations (``converged=False``).
    NumericalWarning
        A non-finite bound, or a decrease at a fixed temperature that pruning
        does not explain (``monotone=False``).

    Notes
    -----
    Like the paper's variational EM, coordinate ascent finds local optima; the
    moves (``moves=True``) leave the two kinds measured here, and pruning helps
    only where the bound prefers fewer VQs. Measured (defaults): from K = J = 6
    on ``ppl_models.mcvq.generate(key(seed), 100, 12, 3, 4)`` (3 planted VQs),
    3 VQs survive in 6 of 8 seeds, 2 (two planted groups merged; a split move
    would be needed) in the others; the moves raise the bound by 38-240 nats in
    the seeds where coordinate ascent stalls (``tests/test_vb_mcvq.py``).
    On the shapes training images (``ppl_models.datasets.shapes``, 100 binary
    images), from K = 8, J = 10, data seeds 100-119: without moves 7-8 VQs
    survive with the shapes split over several VQs (bounds 17,900-22,600 in
    seeds 0-5); with moves the bound rises to 23,000-24,700 and 6-8 VQs survive
    (0 of 20 with 3): two or three VQs of 8-9 states, one per shape, and VQs
    of 2-7 states that take pixels a shape lights at only some of its
    positions. That is the bound's own preference, not a failure to reach 3:
    started from the true partition and positions, the 3-VQ solution converges
    to a bound of 20,787, below every solution the moves find. In the
    conditional family a dimension pays the KL of every state of its VQ, so
    pixels that are almost always off are cheaper in a VQ with 2 states than
    in one with 9; the KL(m || pi) an extra VQ costs grows with N, so more
    training images or a prior that expects noise (``precision_prior_shape``
    100, rate 1: sigma about 0.1) shrink the extra VQs to 2-4 states but do not
    remove them (measured at N = 100 and 400).

    Examples
    --------
    >>> import jax
    >>> from ppl_models import mcvq
    >>> data = mcvq.generate(jax.random.key(0), 80, 12, 3, 3)
    >>> fit = fit_vb_mcvq(data.x, 5, 5, rng_key=jax.random.key(1))
    >>> fit.g.shape[1] == fit.num_vqs <= 5
    True
    """
    max_vqs = check_positive_int(max_vqs, "max_vqs")
    max_states = check_positive_int(max_states, "max_states")
    if rng_key is None:
        raise MissingKeyError("fit_vb_mcvq needs an explicit rng_key (e.g. jax.random.key(0))")
    check_rng_key(rng_key)
    prune_threshold = check_fraction(prune_threshold, "prune_threshold")
    max_iterations = check_positive_int(max_iterations, "max_iterations")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    if num_restarts > 1 and (checkpoint_path, checkpoint_every, resume_from) != (None,) * 3:
        raise ValueError(f"checkpoint_path/checkpoint_every/resume_from need one start; got "
                         f"num_restarts={num_restarts}")
    move_steps = check_positive_int(move_steps, "move_steps")
    tol = check_tolerance(tol, "tol")
    x, mask = check_covered(x, mask)
    prior = program.prior_from_data(x, mask, mean_prior_mean=mean_prior_mean,
                                    mean_prior_scale=mean_prior_scale,
                                    precision_prior_shape=precision_prior_shape,
                                    precision_prior_rate=precision_prior_rate)
    if np.ndim(prior.mean) not in (0, 1) or np.size(prior.mean) not in (1, x.shape[1]):
        raise ValueError(f"mean_prior_mean must be a scalar or have shape ({x.shape[1]},); "
                         f"got shape {np.shape(prior.mean)}")
    temperatures = _schedule(temperature_schedule, max_iterations)
    num_iterations = temperatures.size
    padded = np.ones(core.bucket(num_iterations))
    padded[:num_iterations] = temperatures
    threshold = jnp.asarray(prune_threshold, x.dtype)
    tol_array = jnp.asarray(tol, x.dtype)
    start_keys = [rng_key] if num_restarts == 1 else list(jax.random.split(rng_key, num_restarts))
    runs = [_run_checkpointed(
        key, x, mask, prior, threshold, padded, num_iterations, tol_array,
        max_vqs=max_vqs, max_states=max_states, conditional=bool(conditional), moves=moves,
        max_iterations=max_iterations, move_steps=move_steps, checkpoint_path=checkpoint_path,
        checkpoint_every=checkpoint_every, resume_from=resume_from, progress_bar=progress_bar,
        options=dict(max_vqs=max_vqs, max_states=max_states, prune_threshold=prune_threshold,
                     max_iterations=max_iterations, tol=tol, conditional=bool(conditional),
                     moves=bool(moves), move_steps=move_steps, rng_key=key))
        for key in start_keys]
    best, restart_objectives = 0, None
    if num_restarts > 1:  # the highest bound; a start that pruned everything never wins
        finals = np.array([-np.inf if bool(run[0].all_pruned) else float(run[0].bound)
                           for run in runs])
        best = int(np.argmax(np.where(np.isnan(finals), -np.inf, finals)))
        restart_objectives = host.array(finals, x.dtype)
    state, parts, temps, num_moves = runs[best]
    if bool(state.all_pruned):
        raise ValueError(
            f"prune_threshold={prune_threshold} would remove every VQ, or every state of a VQ "
            f"(at iteration {int(state.iteration)}); lower it")
    its = int(state.iteration)
    bounds, vqs, states, pruned = (host.array(np.concatenate(t)) for t in zip(*parts, strict=True))
    temps = np.concatenate(temps)
    finite = bool(np.all(np.isfinite(np.asarray(bounds))))
    values = np.asarray(bounds, np.float64)
    change = np.diff(values)
    checked = (temps[1:] == temps[:-1]) & ~np.asarray(pruned)[1:]
    rounding = 128 * float(jnp.finfo(x.dtype).eps) * np.maximum(np.abs(values[1:]), 1.0)
    monotone = finite and bool(np.all((change >= -rounding) | ~checked))
    converged = (finite and its >= 2 and bool(checked[-1])
                 and abs(change[-1]) <= tol * max(abs(values[-1]), 1.0))
    if not finite:
        warnings.warn("fit_vb_mcvq: the bound became non-finite; check the data scale and the "
                      "priors", NumericalWarning, stacklevel=2)
    elif not monotone:
        warnings.warn(f"fit_vb_mcvq: the bound decreased by {-float(np.min(change[checked])):.3g}"
                      " at a fixed temperature without pruning", NumericalWarning, stacklevel=2)
    if finite and not converged:
        warnings.warn(f"fit_vb_mcvq: not converged after {its} iterations (tol={tol}); raise "
                      "max_iterations", ConvergenceWarning, stacklevel=2)
    # The surviving VQs depend on the data: the arithmetic runs on every VQ (a fixed
    # shape; entry by entry the same values) and the survivors are taken on the host
    # (inference.engine.host), so that a repeated fit compiles nothing new.
    keep = np.flatnonzero(np.asarray(state.vq_active))
    _, shift = core.data_moments(x, mask)
    shift = shift[:, None, None]
    active = host.take(state.state_active, keep)
    shape, rate = host.take(state.shape, keep, axis=1), host.take(state.rate, keep, axis=1)
    mean = host.take(state.mean + shift, keep, axis=1)
    sigma = host.take(jnp.sqrt(state.rate / state.shape), keep, axis=1)
    return VBMCVQResult(
        num_vqs=int(keep.size),
        num_states=tuple(int(n) for n in np.sum(np.asarray(active), axis=1)),
        vq_index=host.array(keep), state_active=active, alpha=host.take(state.alpha, keep),
        pi=host.take(state.pi, keep), g=host.take(state.g, keep, axis=1),
        m=host.take(state.m, keep, axis=1), mean_mean=mean,
        mean_precision=host.take(state.precision, keep, axis=1), precision_shape=shape,
        precision_rate=rate, mu=mean, sigma=sigma, bound=float(state.bound),
        trace=VBMCVQTrace(bounds, host.array(temps, x.dtype), vqs, states), num_iterations=its,
        converged=converged, monotone=monotone,
        prior=prior, num_moves=num_moves,
        num_causes=int(np.sum(np.sum(np.asarray(active), axis=1) > 1)),
        restart_objectives=restart_objectives)
