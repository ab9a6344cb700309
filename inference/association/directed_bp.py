"""Annealed directed belief propagation (DBP) on the directed graph s -> x of GVQ.

Sec. 4.2 and App. D of M. Westerdijk, D. Barber and W. Wiegerinck, "Deterministic
generative models for fast feature discovery", Data Mining and Knowledge Discovery
5(4), 2001. The messages, the annealing of sigma and the Gauss-Hermite integrals
are described in :mod:`inference.association.directed`, which also holds belief
revision (DBR) and the helpers both use.
"""

from __future__ import annotations

import math
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
from inference.association.directed import (
    DBR_MAX_STATES,
    SCHEDULES,
    check_max_parents,
    joint_states,
    largest_parent_count,
    parent_lists,
    prior_offset,
)
from ppl_models.validation import check_positive, check_positive_int, is_traced

__all__ = ["DBPInfo", "DBPState", "dbp_init", "dbp_step", "resolve_integral", "run_dbp",
           "validate_dbp"]

#: App. D: sigma <- sigma / alpha after every iteration, "in our experiments we use alpha = 2".
DBP_ALPHA = 2.0
#: Half the mean feature weight of sec. 4.3.1 (F ~ N(2, 1)); see the module docstring.
DBP_START_SIGMA = 1.0
#: 12 halvings from sigma = 1 end near 5e-4, the order of App. A's final sigma (1e-4).
DBP_NUM_ITERATIONS = 12
#: Gauss-Hermite nodes: at least this many, and NODES_PER_PARENT per parent of a visible
#: unit. Measured on dense planted problems (F ~ N(0, 1), noise 0.3, 100 examples): 64 nodes
#: reach the exact minimum at 16 and 24 parents but end 88% above it at 32, where 128 reach
#: it. The module docstring of :mod:`inference.association.directed` shows where no number
#: of nodes is enough.
DBP_NUM_NODES = 64
NODES_PER_PARENT = 4
#: A rho message that moves by less than this probability in the last iteration has settled.
DBP_TOL = 1e-3
#: The default message schedule; the module docstring of
#: :mod:`inference.association.directed` gives the measurement behind it.
DBP_SCHEDULE = "sequential"
#: How lambda is computed: the paper's integral transform, or the sum over parent states.
INTEGRALS = ("auto", "exact", "quadrature")
DBP_INTEGRAL = "auto"


# ----------------------------------------------------------------------------- DBP


class DBPState(NamedTuple):
    """State of annealed directed belief propagation.

    Attributes
    ----------
    messages : array (num_examples, n, d)
        log rho_{j->a}(1) - log rho_{j->a}(0) (normalised: rho(0) + rho(1) = 1);
        entries off the edges (F[j, a] = 0) are unused.
    prior : array (num_examples, n)
        log pi_j(1) - log pi_j(0), the program's prior (0 for p = 1/2).
    beliefs : array (num_examples, n)
        Log-odds of the belief pi(s_j) prod_a lambda_{a->j}(s_j) (eq. 33).
    states : int32 array (num_examples, n)
        s_j = [beliefs_j > 0].
    best_states : int32 array (num_examples, n)
        Lowest-energy states visited.
    best_energy : array (num_examples,)
        Their energies (quadratic form).
    sigma : scalar array
        The noise of the next iteration.
    converged : bool array (num_examples,)
        In the last iteration no lambda was clamped and no rho moved by more
        than ``tol``.
    """

    messages: jax.Array
    prior: jax.Array
    beliefs: jax.Array
    states: jax.Array
    best_states: jax.Array
    best_energy: jax.Array
    sigma: jax.Array
    converged: jax.Array


class DBPInfo(NamedTuple):
    """Per iteration.

    Attributes
    ----------
    energy : array (num_examples,)
        Energy of the current states.
    change : array (num_examples,)
        Largest change of a rho(1) message (a probability).
    clamped : int32 array (num_examples,)
        lambda entries (two per edge) whose quadrature came out <= 0 and were clamped.
    clamped_fraction : array (num_examples,)
        ``clamped`` over the number of entries, 2 x (number of edges).
    sigma : scalar array
        The noise this iteration ran at.
    """

    energy: jax.Array
    change: jax.Array
    clamped: jax.Array
    clamped_fraction: jax.Array
    sigma: jax.Array


def dbp_init(problem: AssociationProblem, *, start_sigma=DBP_START_SIGMA) -> DBPState:
    """rho = the prior pi, states from the prior, sigma = ``start_sigma``.

    The prior is read from the program at noise 1 (``problem.tempered(1.0)``):
    -2 log p(x, s) there is ||x - s @ F||^2 - 2 log p(s) + const.
    """
    features, x = problem.features, problem.x
    dim = features.shape[1]
    num_examples = x.shape[0]
    prior = -0.5 * prior_offset(problem.tempered(1.0).linear, x, features)
    states = (prior > 0).astype(jnp.int32)
    energy = problem.energy(states)
    return DBPState(
        messages=jnp.repeat(prior[:, :, None], dim, axis=2), prior=prior, beliefs=prior,
        states=states, best_states=states, best_energy=energy,
        sigma=jnp.asarray(start_sigma, x.dtype), converged=jnp.zeros(num_examples, bool))


def _exclusive_product(factors, axis):
    """prod over ``axis`` of all the other entries, without division (prefix x suffix)."""
    ones = jnp.ones_like(jax.lax.slice_in_dim(factors, 0, 1, axis=axis))
    before = jnp.cumprod(jnp.concatenate(
        [ones, jax.lax.slice_in_dim(factors, 0, -1, axis=axis)], axis=axis), axis=axis)
    flipped = jnp.flip(factors, axis=axis)
    after = jnp.cumprod(jnp.concatenate(
        [ones, jax.lax.slice_in_dim(flipped, 0, -1, axis=axis)], axis=axis), axis=axis)
    return before * jnp.flip(after, axis=axis)


def _quadrature_column(rho, weights, x_a, sigma, nodes, node_weights):
    """log lambda_{a->j}(1) / lambda_{a->j}(0) for every j, by the integral transform (eq. 35).

    rho (n,): log-odds of rho_{j->a}; weights (n,): F[:, a] (0 off the edges).
    Returns the log-ratios (n,) and the number of entries that came out <= 0
    (clamped to the smallest positive float; counted on the edges only).
    """
    t = math.sqrt(2.0) * nodes / sigma  # (Q,)
    phase = jax.lax.complex(jnp.cos(t[:, None] * weights), -jnp.sin(t[:, None] * weights))
    factors = jax.nn.sigmoid(-rho) + jax.nn.sigmoid(rho) * phase  # (Q, n)
    front = node_weights * jax.lax.complex(jnp.cos(t * x_a), jnp.sin(t * x_a))  # (Q,)
    integrand = front[:, None] * _exclusive_product(factors, axis=1)
    lam0 = jnp.real(jnp.sum(integrand, axis=0))
    lam1 = jnp.real(jnp.sum(integrand * phase, axis=0))
    edge = weights != 0
    clamped = jnp.sum(edge & (lam0 <= 0)) + jnp.sum(edge & (lam1 <= 0))
    tiny = jnp.finfo(lam0.dtype).tiny
    ratio = jnp.log(jnp.maximum(lam1, tiny)) - jnp.log(jnp.maximum(lam0, tiny))
    return jnp.where(edge, ratio, 0.0), clamped


def _exact_column(rho, weights, x_a, sigma, parents, mask, joint):
    """log lambda_{a->j}(1) / lambda_{a->j}(0) by summing eq. 31 over the parents' 2^K states.

    In the log domain (``logsumexp``), so exact at every sigma; nothing is clamped.
    parents, mask (K,): the visible unit's parent slots; joint (2^K, K) their states.
    """
    w = jnp.where(mask, weights[parents], 0.0)
    m = jnp.where(mask, rho[parents], 0.0)
    log_rho = joint * jax.nn.log_sigmoid(m) + (1.0 - joint) * jax.nn.log_sigmoid(-m)
    log_rho = jnp.where(mask, log_rho, 0.0)  # (2^K, K)
    total = -jnp.square(x_a - joint @ w) / (2.0 * jnp.square(sigma)) + jnp.sum(log_rho, axis=1)
    others = total[:, None] - log_rho  # (2^K, K): without each slot's own rho
    on = joint == 1
    log1 = jax.nn.logsumexp(jnp.where(on, others, -jnp.inf), axis=0)
    log0 = jax.nn.logsumexp(jnp.where(on, -jnp.inf, others), axis=0)
    ratio = jnp.zeros_like(rho).at[parents].add(jnp.where(mask, log1 - log0, 0.0))
    return ratio, jnp.zeros((), jnp.int32)


def resolve_integral(features, integral=DBP_INTEGRAL, max_parents=None,
                     max_states=DBR_MAX_STATES):
    """The lambda computation that ``integral`` means here, and K: ``(name, max_parents)``.

    ``"auto"`` is ``"exact"`` when the 2^K joint states of a visible unit's K parents
    number at most ``max_states``, else ``"quadrature"``. K is ``max_parents`` if
    given, else the largest number of parents for concrete features, else n.
    Static: it runs at trace time.
    """
    if integral not in INTEGRALS:
        raise ValueError(f"integral must be one of {INTEGRALS}; got {integral!r}")
    num_features = features.shape[0]
    if max_parents is None:
        max_parents = num_features if is_traced(features) else largest_parent_count(features)
    max_parents = max(1, min(int(max_parents), num_features))
    if integral == "auto":
        integral = "exact" if 2**max_parents <= max_states else "quadrature"
    return integral, max_parents


def dbp_step(state: DBPState, problem: AssociationProblem, *, num_nodes=None,
             tol=DBP_TOL, schedule=DBP_SCHEDULE, integral=DBP_INTEGRAL, max_parents=None,
             max_states=DBR_MAX_STATES, alpha=DBP_ALPHA):
    """One DBP iteration: lambda (eq. 35 or 31), rho (eq. 32), states; then sigma / ``alpha``.

    ``schedule="sequential"`` visits the visible units in order, each sending its
    lambda messages to its parents, whose rho messages to the other visible units
    change at once; ``"parallel"`` computes every lambda from the same rho (App. D
    read literally). ``integral="quadrature"`` is the paper's Gauss-Hermite integral
    transform, O(n d Q); ``"exact"`` sums eq. 31 over the parents' joint states in
    the log domain, O(d 2^K K) (``max_parents`` = K, static; default as
    :func:`dbr_init`); ``"auto"`` picks (:func:`resolve_integral`).

    Returns
    -------
    (DBPState, DBPInfo)
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}; got {schedule!r}")
    features, x = problem.features, problem.x
    integral, max_parents = resolve_integral(features, integral, max_parents, max_states)
    num_features, dim = features.shape
    dtype = x.dtype
    edges = features != 0  # (n, d)
    num_entries = jnp.maximum(2 * jnp.sum(edges), 1)
    sigma = jnp.asarray(state.sigma, dtype)
    if integral == "quadrature":
        if num_nodes is None:
            num_nodes = max(DBP_NUM_NODES, NODES_PER_PARENT * max_parents)
        nodes, node_weights = np.polynomial.hermite.hermgauss(num_nodes)
        nodes = jnp.asarray(nodes, dtype)
        node_weights = jnp.asarray(node_weights / math.sqrt(math.pi), dtype)

        def column(rho, a, x_a):
            return _quadrature_column(rho, features[:, a], x_a, sigma, nodes, node_weights)
    else:
        parents, mask = parent_lists(features, max_parents)
        joint = joint_states(max_parents, dtype)

        def column(rho, a, x_a):
            return _exact_column(rho, features[:, a], x_a, sigma, parents[a], mask[a], joint)

    def update_one(x_row, prior, messages, beliefs):
        if schedule == "parallel":
            ratio, clamped = jax.vmap(column, in_axes=(1, 0, 0), out_axes=(1, 0))(
                messages, jnp.arange(dim), x_row)
            clamped = jnp.sum(clamped)
        else:
            def visit(carry, a):
                ratio, clamped = carry
                rho = prior + jnp.sum(ratio, axis=1) - ratio[:, a]
                new, count = column(rho, a, x_row[a])
                return (ratio.at[:, a].set(new), clamped + count), None

            ratio = jnp.where(edges, beliefs[:, None] - messages, 0.0)
            (ratio, clamped), _ = jax.lax.scan(visit, (ratio, jnp.zeros((), jnp.int32)),
                                               jnp.arange(dim))
        beliefs = prior + jnp.sum(ratio, axis=1)
        return beliefs[:, None] - ratio, beliefs, clamped.astype(jnp.int32)

    messages, beliefs, clamped = jax.vmap(update_one)(x, state.prior, state.messages,
                                                      state.beliefs)
    states = (beliefs > 0).astype(jnp.int32)
    energy = problem.energy(states)
    better = energy < state.best_energy
    moved = jnp.abs(jax.nn.sigmoid(messages) - jax.nn.sigmoid(state.messages))
    change = jnp.max(jnp.where(edges, moved, 0.0), axis=(1, 2))
    new_state = DBPState(
        messages=messages, prior=state.prior, beliefs=beliefs, states=states,
        best_states=jnp.where(better[:, None], states, state.best_states),
        best_energy=jnp.where(better, energy, state.best_energy),
        sigma=sigma / alpha, converged=(clamped == 0) & (change <= tol))
    info = DBPInfo(energy, change, clamped, clamped / num_entries, sigma)
    return new_state, info


def run_dbp(problem: AssociationProblem, *, rng_key=None, start_sigma=DBP_START_SIGMA,
            num_iterations=DBP_NUM_ITERATIONS, num_nodes=None, tol=DBP_TOL,
            schedule=DBP_SCHEDULE, integral=DBP_INTEGRAL, max_parents=None,
            max_states=DBR_MAX_STATES, alpha=DBP_ALPHA) -> AssociationResult:
    """Annealed directed belief propagation (module docstring), jittable.

    Parameters
    ----------
    problem : AssociationProblem
    rng_key : ignored
        DBP is deterministic.
    start_sigma : float
        Noise of the first iteration (default 1.0); sigma is divided by ``alpha``
        after each.
    num_iterations : int
        Iterations (default 12); the last runs at
        start_sigma / alpha^(num_iterations - 1).
    num_nodes : int, optional
        Gauss-Hermite nodes Q of the quadrature (default max(64, 4 K), K the
        largest number of parents of a visible unit).
    tol : float
        Largest change of a rho probability in the last iteration for ``converged``.
    schedule : {"sequential", "parallel"}
        Message schedule (default sequential; see :func:`dbp_step`).
    integral : {"auto", "exact", "quadrature"}
        How lambda is computed (default ``"auto"``: the exact sum where a visible
        unit's parents have at most ``max_states`` joint states, else the paper's
        quadrature; see :func:`dbp_step`).
    max_parents : int, optional
        K of the exact sum (static), as ``"dbr"``'s option: under ``jit`` with
        traced features the default is n.
    max_states : int
        Most joint parent states the exact sum may enumerate (default 2^12).
    alpha : float
        Annealing factor (default 2, App. D); 1 holds sigma fixed.

    Returns
    -------
    AssociationResult
        ``trace`` (num_iterations,): mean energy of the current states after each.
    """
    del rng_key

    def body(state, _):
        state, info = dbp_step(state, problem, num_nodes=num_nodes, tol=tol, schedule=schedule,
                               integral=integral, max_parents=max_parents,
                               max_states=max_states, alpha=alpha)
        return state, jnp.mean(info.energy)

    state, trace = jax.lax.scan(body, dbp_init(problem, start_sigma=start_sigma), None,
                                length=num_iterations)
    best = state.best_states
    return AssociationResult(best, problem.exact_energy(best), state.converged, trace)


def validate_dbp(features, options):
    """Check the options of ``"dbp"`` (names, types, values) before ``jit``.

    Raises
    ------
    TypeError
        Unknown option or wrong type.
    ValueError
        Non-positive numbers, ``alpha`` below 1, an unknown ``schedule`` or
        ``integral``, and for ``integral="exact"`` the checks of ``"dbr"`` on
        ``max_parents`` and ``max_states`` (2^K joint parent states).
    """
    check_options(options, start_sigma=(int, float), num_iterations=int, num_nodes=int,
                  tol=(int, float), schedule=str, integral=str, max_parents=int,
                  max_states=int, alpha=(int, float))
    check_positive(options.get("start_sigma", DBP_START_SIGMA), "start_sigma")
    check_positive_int(options.get("num_iterations", DBP_NUM_ITERATIONS), "num_iterations")
    if options.get("num_nodes") is not None:
        check_positive_int(options["num_nodes"], "num_nodes")
    check_positive(options.get("tol", DBP_TOL), "tol")
    alpha = options.get("alpha", DBP_ALPHA)
    if not alpha >= 1:
        raise ValueError(f"alpha (the annealing factor) must be >= 1; got {alpha!r}")
    for name, valid in (("schedule", SCHEDULES), ("integral", INTEGRALS)):
        value = options.get(name)
        if value is not None and value not in valid:
            raise ValueError(f"{name} must be one of {valid}; got {value!r}")
    max_states = check_positive_int(options.get("max_states", DBR_MAX_STATES), "max_states")
    max_parents = check_max_parents(features, options.get("max_parents"))
    slots = largest_parent_count(features) if max_parents is None else max_parents
    if options.get("integral") == "exact" and 2**slots > max_states:
        raise ValueError(
            f"dbp: integral='exact' sums over the 2^{slots} = {2**slots} joint states of a "
            f"visible unit's parents, more than max_states={max_states}; use "
            "integral='quadrature' (the integral transform) or raise max_states")


METHODS["dbp"] = AssociationMethod(run=run_dbp, validate=validate_dbp, randomized=False)
