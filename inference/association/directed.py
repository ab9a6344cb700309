"""Association on the directed graph s -> x of GVQ: directed BP (DBP) and belief revision (DBR).

This module holds DBR and what both share; DBP is in :mod:`inference.association.directed_bp`.

Westerdijk, Barber and Wiegerinck (2001; full citation under References), sec. 4.2
and App. D-E. The joint
p(x, s) = p(s) prod_a p(x_a | s) (eq. 9) is a bipartite directed graph: hidden
unit S_j is a parent of visible unit X_a when F[j, a] != 0. Messages flow both
ways along its edges: rho_{j->a}(s_j) from parent to child (eq. 32) and
lambda_{a->j}(s_j) from child to parent (eq. 31). Both methods are
deterministic and keep the lowest-energy state visited. After each iteration
s_j is set from the belief pi(s_j) prod_a lambda_{a->j}(s_j) (eq. 33, 37).

*Schedule* (option ``schedule`` of both). App. D lists one iteration as "every
lambda from the current rho, then every rho" (``"parallel"``, a flooding
schedule). The default ``"sequential"`` visits the visible units in order: each
sends its lambda messages to its parents, whose rho messages to the other visible
units change at once (the serial schedule of Pearl's algorithm). Same cost per
iteration, same fixed points, both exact on graphs without cycles; on loopy graphs
the parallel schedule oscillates. Measured on the paper's problems (noise variance
0.1, error mean |x - s F| per visible unit, 60-100 trials per point):

    problem                    exact    MF    DBR par  DBR seq  DBP par  DBP seq
    Fig. 4a, k = 6 of 12       0.240  0.395   0.288    0.250    0.453    0.326
    Fig. 4a, k = 8 of 12       0.212  0.494   0.572    0.232    0.661    0.443
    Fig. 4a, k = 10 of 12      0.222  0.558   1.073    0.288    2.036    0.548
    Fig. 5, gamma = 4          0.250  1.070   2.118    0.319   10.312    0.417
    Fig. 5, gamma = 6          0.228  1.088   1.225    0.291    7.547    0.238
    Fig. 5, gamma = 8          0.242  1.173   1.543    0.264    9.739    0.262

(DBP with the exact lambda sums of ``integral="auto"``, below.) With the parallel
schedule the states of the last iterations alternate between too many and too
few units on. The paper's Fig. 4a finding that DBR degrades past k/n ~ 0.65
is the parallel schedule's: the sequential one stays near exact search to k = 10.

* ``"dbr"`` (sec. 4.2.2, App. E, eq. 36-37), the sigma -> 0 limit: max-product,
  kept here as min-sum in energy units (-2 log of the paper's messages with its
  sigma = 1; the max and sum operations are homogeneous, so the states do not
  depend on that scale). With r = x_a - F[j, a] s_j - sum_k F[k, a] s'_k,
      lambda_{a->j}(s_j) = min_{s' of Pa(a)\\j} [ r^2 + sum_k mu_{k->a}(s'_k) ],
      mu_{j->a}(s_j)     = c_j s_j + sum_{b in Ch(j)\\a} lambda_{b->j}(s_j),
      s_j = argmin_s [ c_j s + sum_a lambda_{a->j}(s) ]     (ties -> 0),
  where mu = -2 log rho and c_j is the prior's linear term (0 for the paper's
  p(s_j) = 1/2). Each message is stored as its difference m(1) - m(0). The
  minimum runs over the 2^K joint states of a visible unit's K parents: the
  cost is O(d 2^K K) per example and iteration, exponential in the number of
  parents, so DBR is for sparse F only (sec. 4.2.2); :func:`validate_dbr`
  refuses 2^K above ``max_states``. Iterates until no message changes by more
  than ``tol`` (relative to the largest squared residual) or ``max_iterations``.
  Exact on graphs without cycles; the paper (sec. 4.3.1) finds it exact at zero
  noise for sparse F.
* ``"dbp"`` (sec. 4.2.1, App. D, eq. 31-35), annealed sum-product:
      lambda_{a->j}(s_j) = sum_{s' of Pa(a)\\j} p(x_a | s_j, s') prod_k rho_{k->a}(s'_k),
      rho_{j->a}(s_j)   ∝ pi(s_j) prod_{b != a} lambda_{b->j}(s_j),
  with p(x_a | s) = exp(-(x_a - sum_k F[k, a] s_k)^2 / (2 sigma^2)); rho is kept as
  a log-odds and pi is the program's prior on s. Annealing (App. D): sigma <-
  sigma / alpha after every iteration with the paper's alpha = 2, from
  ``start_sigma`` (default 1, half the mean feature weight 2 of sec. 4.3.1) for
  ``num_iterations`` (default 12, down to 5e-4).

  *The integral.* ``integral="exact"`` sums eq. 31 over the 2^K joint states of a
  visible unit's K parents in the log domain (``logsumexp``): exact at every
  sigma, O(d 2^K K) per example and iteration, like DBR. ``integral="quadrature"``
  is the paper's transform, which makes the sum linear in the number of parents
  by the Gaussian integral (eq. 34)
      exp(-u^2 / (2 sigma^2)) = pi^{-1/2} int dy exp(-y^2 + i sqrt(2) y u / sigma),
  which factorises the sum over s' into
      lambda_{a->j}(s_j) ∝ int dy e^{-y^2} e^{i t y (x_a - F[j,a] s_j)}
                           prod_{k in Pa(a)\\j} [rho_k(0) + rho_k(1) e^{-i t y F[k,a]}],
  t = sqrt(2) / sigma. *(corrected)*: the paper's eq. 35 drops the sqrt(2) and
  has e^{+i y f/sigma} in the product, which does not match its own
  u = x - f_j s_j - sum_k f_k s_k. The integral is a Gauss-Hermite sum over
  ``num_nodes`` = Q nodes (default max(64, 4 K): a sum of more parents spreads
  wider and needs more), in complex arithmetic: O(n d Q). The default
  ``integral="auto"`` sums exactly where 2^K <= ``max_states`` (4096: K <= 12, all
  of the paper's problems) and uses the quadrature beyond.

  Where the quadrature breaks down: it returns lambda (a number in [0, 1]) as
  a sum of O(1) oscillating terms, so its absolute error is the quadrature
  error, and never below the float epsilon. An entry whose true value (about
  exp(-u^2 / (2 sigma^2)) at the best other-parent states) is smaller comes
  out as noise, often <= 0: it is clamped to the smallest positive float and
  counted (:class:`DBPInfo` ``clamped``), and ``converged`` is False for an
  example with a clamped entry in its last iteration. In float32 that is
  u^2 / (2 sigma^2) > ~16: the wrong value of s_j (|u| ~ |F[j, a]|) is lost below
  sigma ~ |F| / 6, and both values are lost once sigma is below the residual of
  the best state. More nodes push the quadrature error down, but not below that
  floor. Measured on the problems of sec. 4.3.1 (n = 12, d = 4, two parents per
  visible unit, F ~ N(2, 1), noise variance 0.1; 20 F x 10 examples; parallel
  schedule, sigma 1 -> 5e-4): the fraction of lambda entries clamped in the
  iteration at each sigma, and the fraction of examples whose lowest energy
  visited is the exact minimum:

      sigma        1     0.5    0.25   0.125  0.0625  0.031  <= 0.016   = exact
      Q = 16     0.03   0.24   0.35   0.36   0.46    0.51    ~0.5      0.885
      Q = 64     0      0.04   0.24   0.35   0.37    0.48    ~0.5      0.995
      Q = 256    0      0.03   0.11   0.27   0.37    0.43    ~0.5      1.000

  There two parents per visible unit keep the lambda sums short and the best
  state is found by sigma ~ 0.25. On Fig. 5's problems (ten parents per visible
  unit, weights ~ gamma) it is not: the quadrature is clamped from the first
  iteration once gamma >= 4, and the sequential schedule with Q = 64 (256) ends
  at an error of 6.7 (3.1) at gamma = 4 and 14.0 (9.5) at gamma = 8, against 0.42
  and 0.26 with the exact sum (``examples/gvq_association.py`` prints the error
  against the final sigma and Q). This is the paper's remark (sec. 4.3.1) that
  retaining the accuracy of the transform at small sigma became computationally
  burdensome.

Both methods read the energy from the program (:class:`AssociationProblem`):
the prior of each unit is the program's linear term minus the likelihood's,
sum_a F[j, a]^2 - 2 F[j] . x (offsets below 1e-5 of that scale are rounding
and set to 0). The graph is that of the likelihood ||x - s @ F||^2; a
program with further couplings between the units is outside these methods.

References
----------
M. Westerdijk, D. Barber and W. Wiegerinck, "Deterministic generative models for fast
feature discovery", Data Mining and Knowledge Discovery 5(4), 2001, sec. 4.2, App. D
(eq. 31-35), App. E (eq. 36-37).
Pearl, "Probabilistic Reasoning in Intelligent Systems" (1988), ch. 4-5.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference.association.base import (
    METHODS,
    AssociationMethod,
    AssociationProblem,
    AssociationResult,
    check_options,
)
from ppl_models.validation import check_positive, check_positive_int, is_traced

__all__ = [
    "DBR_MAX_STATES",
    "DBRInfo",
    "DBRState",
    "check_max_parents",
    "dbr_init",
    "dbr_step",
    "joint_states",
    "largest_parent_count",
    "parent_lists",
    "prior_offset",
    "run_dbr",
    "validate_dbr",
]

#: App. E gives no number. On sec. 4.3.1's problems (noise variance 0.1, 200 examples per k)
#: DBR settles in a median of 3 (k = 2), 5 (k = 4) and 10 (k = 6) iterations, and within 30
#: for 99.5 %, 95.5 % and 71.5 % of the examples.
DBR_MAX_ITERATIONS = 30
#: Messages changing by less than this, relative to the largest squared residual, are settled.
DBR_TOL = 1e-6
#: Joint parent states enumerated per visible unit: 2^12, the n = 12 of sec. 4.3.1.
DBR_MAX_STATES = 2**12
#: Message schedules of DBR and DBP (module docstring).
SCHEDULES = ("sequential", "parallel")
DBR_SCHEDULE = "sequential"
#: Prior offsets below this fraction of the likelihood's linear scale are rounding.
_PRIOR_SNAP = 1e-5


def parent_lists(features, max_parents: int):
    """Parents of every visible unit, padded to ``max_parents`` (jittable).

    Parameters
    ----------
    features : array (n, d)
        F; hidden unit j is a parent of visible unit a when F[j, a] != 0.
    max_parents : int
        K, static. Parents beyond the first K (in index order) are dropped.

    Returns
    -------
    parents : int32 array (d, K)
        Parent indices, real parents first; padding slots hold other indices.
    mask : bool array (d, K)
        Which slots are real parents.
    """
    connected = (features != 0).T  # (d, n)
    order = jnp.argsort(~connected, axis=1, stable=True)[:, :max_parents]
    return order.astype(jnp.int32), jnp.take_along_axis(connected, order, axis=1)


def largest_parent_count(features) -> int:
    """Largest number of parents of a visible unit, for concrete features."""
    return int(np.max(np.sum(np.asarray(features) != 0, axis=0), initial=0))


def prior_offset(linear, x, features):
    """The prior's linear term c (num_examples, n): the program's h minus the likelihood's."""
    sq = jnp.sum(jnp.square(features), axis=1)
    likelihood = sq - 2.0 * x @ features.T
    offset = linear - likelihood
    scale = sq + 2.0 * jnp.abs(x) @ jnp.abs(features).T + 1.0
    return jnp.where(jnp.abs(offset) <= _PRIOR_SNAP * scale, 0.0, offset)


def joint_states(num_parents: int, dtype):
    """All 2^K parent states (2^K, K); row i holds the bits of i, bit j in column j."""
    index = np.arange(1 << num_parents)[:, None]
    return jnp.asarray((index >> np.arange(num_parents)) & 1, dtype)


# ----------------------------------------------------------------------------- DBR


class DBRState(NamedTuple):
    """State of directed belief revision.

    Attributes
    ----------
    messages : array (num_examples, d, K)
        lambda_{a->j}(1) - lambda_{a->j}(0) for the k-th parent j of visible
        unit a (:func:`parent_lists`), in energy units; 0 on padding slots.
    prior : array (num_examples, n)
        c: the prior's linear term per unit (energy units; 0 for p = 1/2).
    beliefs : array (num_examples, n)
        c_j + sum_a messages into j. On a tree, once settled, the difference of
        min-marginal energies min_{s: s_j = 1} E(s) - min_{s: s_j = 0} E(s).
    states : int32 array (num_examples, n)
        s_j = [beliefs_j < 0], the current states.
    best_states : int32 array (num_examples, n)
        Lowest-energy states visited.
    best_energy : array (num_examples,)
        Their energies (quadratic form).
    converged : bool array (num_examples,)
        No message changed by more than ``tol`` in the last iteration, and no
        visible unit has more parents than K.
    """

    messages: jax.Array
    prior: jax.Array
    beliefs: jax.Array
    states: jax.Array
    best_states: jax.Array
    best_energy: jax.Array
    converged: jax.Array


class DBRInfo(NamedTuple):
    """Per iteration.

    Attributes
    ----------
    energy : array (num_examples,)
        Energy of the current states (quadratic form).
    change : array (num_examples,)
        Largest change of a lambda message.
    """

    energy: jax.Array
    change: jax.Array


def dbr_init(problem: AssociationProblem, *, max_parents: int | None = None) -> DBRState:
    """Zero lambda messages (rho = the prior), states from the prior alone.

    Parameters
    ----------
    problem : AssociationProblem
    max_parents : int, optional
        K, the number of parent slots per visible unit (static): at least the
        largest number of parents. Default: the true maximum when the features
        are concrete, else n (all 2^n states: pass it under ``jit``).
    """
    features, x = problem.features, problem.x
    num_features, dim = features.shape
    if max_parents is None:
        max_parents = num_features if is_traced(features) else largest_parent_count(features)
    max_parents = max(1, min(int(max_parents), num_features))
    prior = prior_offset(problem.energy.linear, x, features)
    states = (prior < 0).astype(jnp.int32)
    energy = problem.energy(states)
    num_examples = x.shape[0]
    return DBRState(
        messages=jnp.zeros((num_examples, dim, max_parents), x.dtype), prior=prior,
        beliefs=prior, states=states, best_states=states, best_energy=energy,
        converged=jnp.zeros(num_examples, bool))


def dbr_step(state: DBRState, problem: AssociationProblem, *, tol=DBR_TOL,
             schedule=DBR_SCHEDULE):
    """One DBR iteration: lambda messages (eq. 36), rho (eq. 32), then the states (eq. 37).

    ``schedule="parallel"`` computes every lambda from the current rho (App. E);
    ``"sequential"`` visits the visible units in order, each one's lambda messages
    computed from the rho messages its predecessors' messages just changed (as DBP's).

    Returns
    -------
    (DBRState, DBRInfo)
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}; got {schedule!r}")
    features, x = problem.features, problem.x
    num_features, dim = features.shape
    max_parents = state.messages.shape[-1]
    parents, mask = parent_lists(features, max_parents)
    weights = jnp.where(mask, features[parents, jnp.arange(dim)[:, None]], 0.0)  # (d, K)
    joint = joint_states(max_parents, x.dtype)  # (2^K, K)
    predictions = joint @ weights.T  # (2^K, d)

    def scatter(messages):  # sum of the messages into each hidden unit
        return jnp.zeros(num_features, x.dtype).at[parents].add(messages)

    def rows(x_rows, predictions, parents, mask, messages, total):
        """New messages (m, K) of m visible units, from the totals of their parents."""
        m = x_rows.shape[0]
        mu = jnp.where(mask, total[parents] - messages, 0.0)  # (m, K): mu(1) - mu(0)
        cost = jnp.square(x_rows - predictions) + joint @ mu.T  # (2^K, m)
        cost = cost.T.reshape((m,) + (2,) * max_parents)  # axis K - k <-> bit k
        new = []
        for k in range(max_parents):
            others = tuple(axis for axis in range(1, max_parents + 1) if axis != max_parents - k)
            lowest = jnp.min(cost, axis=others)  # (m, 2): min over states with s_k = 0, 1
            new.append(lowest[:, 1] - mu[:, k] - lowest[:, 0])
        return jnp.where(mask, jnp.stack(new, axis=1), 0.0)

    def update_one(x_row, prior, messages):
        if schedule == "parallel":
            new = rows(x_row, predictions, parents, mask, messages, prior + scatter(messages))
            return new, prior + scatter(new)

        def visit(messages, a):
            row = rows(x_row[a, None], predictions[:, a, None], parents[a, None], mask[a, None],
                       messages[a, None], prior + scatter(messages))
            return messages.at[a].set(row[0]), None

        messages, _ = jax.lax.scan(visit, messages, jnp.arange(dim))
        return messages, prior + scatter(messages)

    messages, beliefs = jax.vmap(update_one)(x, state.prior, state.messages)
    states = (beliefs < 0).astype(jnp.int32)
    energy = problem.energy(states)
    better = energy < state.best_energy
    change = jnp.max(jnp.abs(messages - state.messages), axis=(1, 2))
    largest = jnp.max(jnp.abs(x) + jnp.sum(jnp.abs(features), axis=0), axis=1)
    complete = jnp.max(jnp.sum(features != 0, axis=0)) <= max_parents
    converged = (change <= tol * (1.0 + jnp.square(largest))) & complete
    new_state = DBRState(
        messages=messages, prior=state.prior, beliefs=beliefs, states=states,
        best_states=jnp.where(better[:, None], states, state.best_states),
        best_energy=jnp.where(better, energy, state.best_energy), converged=converged)
    return new_state, DBRInfo(energy, change)


def run_dbr(problem: AssociationProblem, *, rng_key=None, max_iterations=DBR_MAX_ITERATIONS,
            tol=DBR_TOL, max_parents=None, max_states=DBR_MAX_STATES,
            schedule=DBR_SCHEDULE) -> AssociationResult:
    """Directed belief revision (module docstring), jittable.

    Parameters
    ----------
    problem : AssociationProblem
    rng_key : ignored
        DBR is deterministic.
    max_iterations : int
        Iterations at most (default 30); stops earlier when every example converged.
    tol : float
        Relative message tolerance of convergence (default 1e-6).
    max_parents : int, optional
        K (static), at least the largest number of parents of a visible unit;
        the cost is O(d 2^K K), so passing the true maximum is much faster than
        the default (n under ``jit``; see :func:`dbr_init`). If it is smaller,
        edges are dropped and ``converged`` is False: inside EM, where F
        changes under ``jit`` and :func:`validate_dbr` saw only the first F, it
        must bound the parents of every F met (an M-step usually fills F in).
    max_states : int
        Checked by :func:`validate_dbr` (2^K must not exceed it); unused here.

    Returns
    -------
    AssociationResult
        ``trace`` (max_iterations,): mean energy of the current states after
        each iteration, the last value repeated after an early stop.
    """
    del rng_key, max_states
    state = dbr_init(problem, max_parents=max_parents)
    trace = jnp.zeros(max_iterations, problem.x.dtype)

    def cond(carry):
        iteration, state, _ = carry
        return (iteration < max_iterations) & ~jnp.all(state.converged)

    def body(carry):
        iteration, state, trace = carry
        state, info = dbr_step(state, problem, tol=tol, schedule=schedule)
        return iteration + 1, state, trace.at[iteration].set(jnp.mean(info.energy))

    iterations, state, trace = jax.lax.while_loop(cond, body, (0, state, trace))
    last = trace[jnp.maximum(iterations - 1, 0)]
    trace = jnp.where(jnp.arange(max_iterations) < iterations, trace, last)
    best = state.best_states
    return AssociationResult(best, problem.exact_energy(best), state.converged, trace)


def check_max_parents(features, max_parents):
    """Check the option ``max_parents`` (K) of DBR and DBP on concrete features; return it.

    Raises ``TypeError``/``ValueError`` unless it is None or an integer between the
    largest number of parents of a visible unit and n.
    """
    if max_parents is None:
        return None
    check_positive_int(max_parents, "max_parents", maximum=int(features.shape[0]),
                       why=" (num_features)")
    largest = largest_parent_count(features)
    if max_parents < largest:
        raise ValueError(
            f"max_parents must be at least the largest number of parents of a visible "
            f"unit, {largest}; got {max_parents}")
    return max_parents


def validate_dbr(features, options):
    """Check the options of ``"dbr"`` on concrete features (before ``jit``).

    Raises
    ------
    TypeError
        Unknown option or wrong type.
    ValueError
        Non-positive ``max_iterations``/``tol``/``max_states``; ``max_parents``
        below the largest number of parents or above n; 2^K above ``max_states``.
    """
    check_options(options, max_iterations=int, tol=(int, float), max_parents=int,
                  max_states=int, schedule=str)
    if options.get("schedule") is not None and options["schedule"] not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}; got {options['schedule']!r}")
    check_positive_int(options.get("max_iterations", DBR_MAX_ITERATIONS), "max_iterations")
    check_positive(options.get("tol", DBR_TOL), "tol")
    max_states = check_positive_int(options.get("max_states", DBR_MAX_STATES), "max_states")
    num_features = int(features.shape[0])
    largest = largest_parent_count(features)
    if 2**largest > max_states:
        raise ValueError(
            f"dbr: a visible unit has {largest} parents: 2^{largest} = {2**largest} joint "
            f"states exceed max_states={max_states}; DBR is exponential in the number of "
            "parents and needs a sparse F (paper sec. 4.2.2): use 'mf', 'br' or 'dbp', or "
            "raise max_states")
    max_parents = check_max_parents(features, options.get("max_parents"))
    slots = num_features if max_parents is None else max_parents
    if 2**slots > max_states:
        raise ValueError(
            f"dbr: max_parents={max_parents} enumerates 2^{slots} = {2**slots} joint states "
            f"per visible unit, more than max_states={max_states}; pass "
            f"max_parents={max(largest, 1)} (the largest number of parents here)")


METHODS["dbr"] = AssociationMethod(run=run_dbr, validate=validate_dbr, randomized=False)
