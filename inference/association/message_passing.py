"""Message passing on the pairwise graph of GVQ: annealed BP and belief revision.

Sec. 4.1.1-4.1.2 and App. A-B of M. Westerdijk, D. Barber and W. Wiegerinck,
"Deterministic generative models for fast feature discovery", Data Mining and
Knowledge Discovery 5(4), 2001. The energy
E_x(s) = sum_i h_i s_i + sum_{i<j} w_ij s_i s_j (read from the program) defines
a pairwise graph with an edge wherever w_ij != 0. With binary units every
message is kept as one number, the difference of its two entries:

* ``"br"``, belief revision (min-sum, eq. 22-23). delta_ij = m_ij(1) - m_ij(0),
  the message from j into i; with a_j = g_j - delta_ji, where
  g_j = h_j + sum_k delta_jk is unit j's total field,
      delta_ij = min(0, w_ij + a_j) - min(0, a_j),
  and s_i = 1 exactly when g_i < 0. Visiting a node updates all its incoming
  messages (O(n)), a sweep visits all nodes in a random order (O(n^2)).
  Sweeps stop when no message changes by more than ``tol`` (``converged``) or
  after ``max_sweeps``; optional ``damping`` mixes in the old message.
  Exact on trees.
* ``"bp"``, annealed loopy sum-product (eq. 17-18) in the log domain:
  l_ij = log lambda_ij(1) - log lambda_ij(0), with a_j = G_j - l_ji and
  G_j = -beta h_j + sum_k l_jk the log-odds of unit j's belief,
      l_ij = softplus(a_j - beta w_ij) - softplus(a_j),
  beta = 1 / (2 sigma^2). App. A: start at sigma = 0.1, halve sigma^2 after
  every sweep, stop at sigma = 1e-4; the coefficients at each sigma are read
  from the program under ``observation_noise`` (``AssociationProblem.tempered``).
  After each sweep s_i = [G_i > 0].
* ``"br+mf"``: BR, and annealed mean-field on the examples where BR did not
  converge, keeping the lower energy (sec. 4.3.1: when BR converged its answer
  was optimal in every trial of the paper). ``converged`` is True everywhere:
  MF, the fallback, always ends with a state.

All keep the lowest-energy state visited (App. A-B).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from inference.association.annealing import run_mf, validate_annealed
from inference.association.base import (
    METHODS,
    AssociationMethod,
    AssociationProblem,
    AssociationResult,
    check_options,
)
from inference.association.sweeps import (
    Best,
    check_order,
    check_schedule_options,
    geometric_schedule,
    halving_schedule,
    keep_best,
    random_orders,
)
from ppl_models.validation import check_positive, check_positive_int

__all__ = ["BRState", "BPState", "MessageInfo", "br_init", "br_step", "run_br", "bp_init",
           "bp_step", "run_bp", "run_br_mf"]

#: App. B gives no number; BR on dense loopy graphs either settles within tens of sweeps
#: or oscillates for ever.
MAX_SWEEPS = 50
#: BR sweeps inside br+mf. On dense problems most examples that BR settles at all
#: settle within 10 sweeps (about 88% at n = 12, dim = 24; 99.4% after 50), so
#: handing the rest to MF after 10 sweeps costs less than waiting for the slow
#: ones, at no loss of energy (``benchmarks/association.py``).
BR_MF_MAX_SWEEPS = 10
#: Messages that change by less than this (relative to the largest |w_ij| + |h_i|) are settled.
TOL = 1e-5
#: App. A: BP starts at sigma = 0.1 (beta = 50) and stops at sigma = 1e-4.
BP_START_SIGMA, BP_END_SIGMA = 0.1, 1e-4
#: Examples per MF call of the br+mf fallback: small enough that a few failures do
#: not pay for a large block, large enough to keep the batched sweep efficient.
CHUNK_SIZE = 256


class BRState(NamedTuple):
    """Belief-revision state.

    Attributes
    ----------
    messages : array (n, n, num_examples)
        delta[i, j, e] = m_ij(1) - m_ij(0), the message from j into i for example
        e. Stored units-major, so that visiting node i reads and writes
        contiguous rows for all examples at once.
    converged : array (num_examples,) bool
        No message changed by more than ``tol`` in the last sweep.
    best : Best
        Lowest-energy state visited.
    """

    messages: jax.Array
    converged: jax.Array
    best: Best


class MessageInfo(NamedTuple):
    """Per sweep: mean ``energy`` of the current states, largest message ``change`` per example."""

    energy: jax.Array
    change: jax.Array


def _min_sum_update(g, delta_col, w_row):
    """New messages into one node from all others (min-sum, binary units).

    ``g`` and ``delta_col`` are (n,) or (n, examples); ``w_row`` is (n,).
    """
    a = g - delta_col  # the field of each j without the message it got from i
    w = w_row.reshape(w_row.shape + (1,) * (a.ndim - 1))
    return jnp.minimum(0.0, w + a) - jnp.minimum(0.0, a)


def br_init(problem: AssociationProblem) -> BRState:
    """All messages zero (equivalent to App. B's initialisation after one update)."""
    h = problem.energy.linear
    num_examples, n = h.shape
    states = (h < 0).astype(jnp.int32)
    return BRState(jnp.zeros((n, n, num_examples), h.dtype), jnp.zeros(num_examples, bool),
                   keep_best(None, states, problem.energy(states)))


def br_step(rng_key, state: BRState, problem: AssociationProblem, *, damping=0.0, tol=TOL,
            order="shared"):
    """One belief-revision sweep in a random node order; returns (state, MessageInfo)."""
    energy = problem.energy
    W = energy.couplings
    num_examples, n = energy.linear.shape
    orders, axis = random_orders(rng_key, num_examples, n, order)
    scale = jnp.max(jnp.abs(W)) + jnp.max(jnp.abs(energy.linear), axis=1) + 1e-12

    def sweep(delta, h, order):  # delta (n, n, examples), h (n, examples); or one example
        def visit(k, carry):
            delta, g = carry
            i = order[k]
            new = _min_sum_update(g, delta[:, i], W[i])
            new = (1.0 - damping) * new + damping * delta[i]
            delta = delta.at[i].set(new)
            return delta, g.at[i].set(h[i] + jnp.sum(new, axis=0))

        g = h + jnp.sum(delta, axis=1)
        delta, g = jax.lax.fori_loop(0, n, visit, (delta, g))
        return delta, g < 0

    h = energy.linear.T
    if axis is None:
        delta, negative = sweep(state.messages, h, orders)
    else:
        # One order per example: vmap over examples-major copies (see annealing.mf_step).
        delta, negative = jax.vmap(sweep)(jnp.moveaxis(state.messages, 2, 0), energy.linear,
                                          orders)
        delta, negative = jnp.moveaxis(delta, 0, 2), negative.T
    states = negative.T.astype(jnp.int32)
    change = jnp.max(jnp.abs(delta - state.messages), axis=(0, 1))
    converged = change <= tol * scale
    current = energy(states)
    best = keep_best(state.best, states, current)
    return BRState(delta, converged, best), MessageInfo(jnp.mean(current), change)


def run_br(problem: AssociationProblem, *, rng_key, max_sweeps=MAX_SWEEPS, damping=0.0,
           tol=TOL, order="shared") -> AssociationResult:
    """Belief revision until every example converged or ``max_sweeps`` (module docstring)."""
    state = br_init(problem)
    trace = jnp.zeros(max_sweeps, problem.x.dtype)

    def cond(carry):
        sweep, state, _ = carry
        return (sweep < max_sweeps) & ~jnp.all(state.converged)

    def body(carry):
        sweep, state, trace = carry
        state, info = br_step(jax.random.fold_in(rng_key, sweep), state, problem,
                              damping=damping, tol=tol, order=order)
        return sweep + 1, state, trace.at[sweep].set(info.energy)

    sweeps, state, trace = jax.lax.while_loop(cond, body, (0, state, trace))
    trace = jnp.where(jnp.arange(max_sweeps) < sweeps, trace, trace[jnp.maximum(sweeps - 1, 0)])
    best = state.best
    return AssociationResult(best.states, problem.exact_energy(best.states), state.converged,
                             trace)


class BPState(NamedTuple):
    """Annealed-BP state: log-ratio ``messages`` (num_examples, n, n), ``states``, best visited."""

    messages: jax.Array
    states: jax.Array
    best: Best


def bp_init(problem: AssociationProblem) -> BPState:
    """All log-ratio messages zero (uniform messages)."""
    h = problem.energy.linear
    num_examples, n = h.shape
    states = (h < 0).astype(jnp.int32)
    return BPState(jnp.zeros((num_examples, n, n), h.dtype), states,
                   keep_best(None, states, problem.energy(states)))


def bp_step(rng_key, state: BPState, problem: AssociationProblem, sigma, order="shared"):
    """One sum-product sweep at noise ``sigma``; returns (state, MessageInfo)."""
    tempered = problem.tempered(sigma)
    beta = 1.0 / (2.0 * jnp.square(sigma))
    W = beta * tempered.couplings
    num_examples, n = tempered.linear.shape
    orders, axis = random_orders(rng_key, num_examples, n, order)

    def sweep_one(messages, h, order):
        def visit(k, carry):
            messages, G = carry
            i = order[k]
            a = G - messages[:, i]
            new = jax.nn.softplus(a - W[i]) - jax.nn.softplus(a)
            new = jnp.where(W[i] == 0.0, 0.0, new)  # no edge, no message
            messages = messages.at[i].set(new)
            return messages, G.at[i].set(-h[i] + jnp.sum(new))

        G = -h + jnp.sum(messages, axis=1)
        messages, G = jax.lax.fori_loop(0, n, visit, (messages, G))
        return messages, (G > 0).astype(jnp.int32)

    messages, states = jax.vmap(sweep_one, (0, 0, axis))(state.messages,
                                                          beta * tempered.linear, orders)
    change = jnp.max(jnp.abs(messages - state.messages), axis=(1, 2))
    current = problem.energy(states)
    new_state = BPState(messages, states, keep_best(state.best, states, current))
    return new_state, MessageInfo(jnp.mean(current), change)


def run_bp(problem: AssociationProblem, *, rng_key, start_sigma=BP_START_SIGMA,
           end_sigma=BP_END_SIGMA, schedule="halve_variance", num_sweeps=None,
           order="shared") -> AssociationResult:
    """Annealed loopy BP (module docstring).

    ``schedule="halve_variance"`` (App. A) halves sigma^2 per sweep from
    ``start_sigma`` to ``end_sigma``; ``"geometric"`` spreads ``num_sweeps``
    sigmas geometrically between them. ``converged``: the state did not change
    in the last sweep.
    """
    if schedule == "halve_variance":
        sigmas = halving_schedule(start_sigma, end_sigma)
    else:
        sigmas = geometric_schedule(start_sigma, end_sigma, num_sweeps or 20)

    def body(state, inputs):
        key, sigma = inputs
        new_state, info = bp_step(key, state, problem, sigma, order)
        changed = jnp.any(new_state.states != state.states, axis=1)
        return new_state, (info.energy, changed)

    keys = jax.random.split(rng_key, sigmas.shape[0])
    state, (trace, changed) = jax.lax.scan(body, bp_init(problem), (keys, sigmas))
    best = state.best
    return AssociationResult(best.states, problem.exact_energy(best.states), ~changed[-1],
                             trace)


def run_br_mf(problem: AssociationProblem, *, rng_key, max_sweeps=BR_MF_MAX_SWEEPS, damping=0.0,
              tol=TOL, chunk_size=CHUNK_SIZE, order="shared", **mf_options
              ) -> AssociationResult:
    """BR, then annealed MF on the examples where BR did not converge; the lower energy wins.

    The non-converged examples are gathered and run through MF in chunks of
    ``chunk_size``, so the fallback costs in proportion to how often BR fails,
    not to the number of examples. ``order`` applies to both BR and MF. BR gets
    ``max_sweeps`` (default ``BR_MF_MAX_SWEEPS`` = 10, fewer than plain BR's 50).
    """
    key_br, key_mf = jax.random.split(rng_key)
    br = run_br(problem, rng_key=key_br, max_sweeps=max_sweeps, damping=damping, tol=tol,
                order=order)
    failed = ~br.converged
    num_examples = failed.shape[0]
    chunk = min(chunk_size, num_examples)
    ranking = jnp.argsort(~failed, stable=True)  # failed examples first
    num_failed = jnp.sum(failed)

    def cond(carry):
        start, _, _ = carry
        return start < num_failed

    def body(carry):
        start, states, energy = carry
        # dynamic_slice clamps the last chunk into range: it may revisit a few examples,
        # which only ever lowers their energy.
        index = jax.lax.dynamic_slice(ranking, (start,), (chunk,))
        mf = run_mf(problem.take(index), rng_key=jax.random.fold_in(key_mf, start),
                    order=order, **mf_options)
        better = failed[index] & (mf.energy < energy[index])
        states = states.at[index].set(jnp.where(better[:, None], mf.states, states[index]))
        energy = energy.at[index].set(jnp.where(better, mf.energy, energy[index]))
        return start + chunk, states, energy

    _, states, _ = jax.lax.while_loop(
        cond, body, (jnp.asarray(0, num_failed.dtype), br.states, problem.energy(br.states)))
    return AssociationResult(states, problem.exact_energy(states), jnp.ones_like(failed), br.trace)


def _validate_br(features, options, extra=None):
    check_options(options, max_sweeps=int, damping=(int, float), tol=(int, float), order=str,
                  **(extra or {}))
    check_order(options.get("order", "shared"))
    check_positive_int(options.get("max_sweeps", MAX_SWEEPS), "max_sweeps")
    damping = float(options.get("damping", 0.0))
    if not 0.0 <= damping < 1.0:
        raise ValueError(f"damping must lie in [0, 1); got {damping}")
    check_positive(options.get("tol", TOL), "tol")


def _validate_bp(features, options):
    check_options(options, start_sigma=(int, float), end_sigma=(int, float), schedule=str,
                  num_sweeps=int, order=str)
    check_order(options.get("order", "shared"))
    schedule = options.get("schedule", "halve_variance")
    if schedule not in ("halve_variance", "geometric"):
        raise ValueError(f"schedule must be 'halve_variance' or 'geometric'; got {schedule!r}")
    check_schedule_options(options.get("start_sigma", BP_START_SIGMA),
                           options.get("end_sigma", BP_END_SIGMA), options.get("num_sweeps"))


def _validate_br_mf(features, options):
    br_names = {"max_sweeps", "damping", "tol", "chunk_size", "order"}
    _validate_br(features, {k: v for k, v in options.items() if k in br_names},
                 extra={"chunk_size": int})
    check_positive_int(options.get("chunk_size", CHUNK_SIZE), "chunk_size")
    validate_annealed(features, {k: v for k, v in options.items() if k not in br_names})


METHODS["br"] = AssociationMethod(run_br, _validate_br, randomized=True)
METHODS["bp"] = AssociationMethod(run_bp, _validate_bp, randomized=True)
METHODS["br+mf"] = AssociationMethod(run_br_mf, _validate_br_mf, randomized=True)
