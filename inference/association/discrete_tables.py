"""A program's log-density over the discrete units of an example, as tables.

Two exact representations of ``L_i(z)``, the log-density of example i with its units at
the joint state z (:func:`inference.association.discrete_sites.log_joint`):

* **enumeration** (:func:`joint_states`, :func:`log_joint_table`): L at every joint
  state of an example, a (J, num_examples) table, J the product of the units' numbers
  of values. Exact posteriors, exact maximisers; J must be small (at most
  :data:`MAX_JOINT_STATES` by default).
* **pairwise** (:func:`pairwise_tables`): L written as
  ``c + sum_u a_u[z_u] + sum_{u<w} B_uw[z_u, z_w]`` (a pairwise Markov random field per
  example), read off the program at the all-zero state, every single change and every
  pair of changes (1 + sum_u (K_u - 1) + sum_{u<w} (K_u - 1)(K_w - 1) evaluations) and
  checked at random states (:func:`pairwise_misfit`). It holds for every program whose
  log-density couples at most two units per term: Gaussian layers whose mean is a
  sum of per-unit contributions (binary feature combinations, ``x ~ N(s F)``), a mean
  selected by one categorical and shifted by binary causes, multiple-cause vector
  quantisation (a dimension's owner selects one vector quantiser's state). On it the
  mean-field expectation ``E_q[L]`` and the site-by-site updates are exact
  (:func:`mean_field_sweeps`), whatever J.

Both are pure and jittable, vectorised over the examples, written once for the
binary and the categorical case (a Bernoulli unit is a unit of two values).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inference.association.discrete_sites import DiscreteSites

__all__ = ["MAX_JOINT_STATES", "PAIRWISE_RTOL", "PairwiseTables", "joint_states",
           "log_joint_table", "table_posterior", "table_marginals", "unit_mask",
           "pairwise_tables", "pairwise_value", "pairwise_misfit", "mean_field_sweeps",
           "entropy", "coordinate_ascent"]

#: Joint states of one example at most for enumeration (exact posteriors, exact search).
MAX_JOINT_STATES = 1 << 16
#: Relative misfit at or below which a log-density is pairwise in the units.
PAIRWISE_RTOL = 1e-4
#: Program evaluations at most per vectorised block (the examples times the states).
_BLOCK = 1 << 15


def joint_states(layout: DiscreteSites) -> np.ndarray:
    """Every joint state of one example's units, (J, n) int32, the last unit fastest."""
    if not layout.num_units:
        return np.zeros((1, 0), np.int32)  # no discrete unit: the one empty state
    grids = np.meshgrid(*[np.arange(k) for k in layout.cardinalities], indexing="ij")
    return np.stack([g.ravel() for g in grids], axis=1).astype(np.int32)


def _block(count, num_examples):
    return int(max(1, min(count, _BLOCK // max(num_examples, 1))))


def log_joint_table(evaluate, layout: DiscreteSites, states) -> jax.Array:
    """L_i at every joint state ``states`` (J, n): the (J, num_examples) table."""
    num, n = layout.num_examples, layout.num_units

    def one(row):
        return evaluate(jnp.broadcast_to(row, (num, n)))[0]

    states = jnp.asarray(states)
    return jax.lax.map(one, states, batch_size=_block(states.shape[0], num))


def table_posterior(table, temperature=1.0):
    """Each example's posterior over the joint states, p(z | x)^(1/T) normalised:
    ((J, num_examples) probabilities, (num_examples,) log normaliser of L / T)."""
    scaled = table / temperature
    scaled = jnp.where(jnp.isnan(scaled), -jnp.inf, scaled)
    norm = jax.scipy.special.logsumexp(scaled, axis=0)
    return jnp.exp(scaled - norm), norm


def table_marginals(posterior, states, layout: DiscreteSites):
    """Per-unit marginals (num_examples, n, max_values) of a posterior over the joint
    ``states`` (J, n)."""
    one_hot = jax.nn.one_hot(jnp.asarray(states), layout.max_values, dtype=posterior.dtype)
    return jnp.einsum("jn,juk->nuk", posterior, one_hot)


def unit_mask(layout: DiscreteSites) -> np.ndarray:
    """(n, max_values) bool: which values each unit can take."""
    k = np.asarray(layout.cardinalities)
    return np.arange(layout.max_values)[None, :] < k[:, None]


class PairwiseTables(NamedTuple):
    """``L(z) = constant + sum_u single[u, z_u] + 1/2 sum_{u != w} pair[u, w, z_u, z_w]``,
    per example (gauge: value 0 of a unit contributes nothing).

    Attributes
    ----------
    constant : (num_examples,)
    single : (num_examples, n, K)
    pair : (num_examples, n, n, K, K), symmetric (pair[u, w, v, v'] = pair[w, u, v', v])
        with zero diagonal blocks.
    """

    constant: jax.Array
    single: jax.Array
    pair: jax.Array


def _changes(layout: DiscreteSites):
    """The single changes (u, v) and the pair changes (u, w, v, v') from the zero state."""
    cards = layout.cardinalities
    singles = [(u, v) for u in range(len(cards)) for v in range(1, cards[u])]
    pairs = [(u, w, v, x) for u in range(len(cards)) for w in range(u + 1, len(cards))
             for v in range(1, cards[u]) for x in range(1, cards[w])]
    return np.asarray(singles, np.int32).reshape(-1, 2), np.asarray(pairs, np.int32).reshape(-1, 4)


def pairwise_tables(evaluate, layout: DiscreteSites) -> PairwiseTables:
    """The pairwise expansion of L (module docstring), exact when L is pairwise."""
    num, n, k = layout.num_examples, layout.num_units, layout.max_values
    singles, pairs = _changes(layout)
    zeros = jnp.zeros((num, n), jnp.int32)
    base = evaluate(zeros)[0]
    dtype = base.dtype

    def at(change):  # change: (units (2,), values (2,)); a unit of -1 is no change
        units, values = change
        state = zeros
        for i in range(2):
            state = jnp.where(units[i] >= 0, state.at[:, jnp.maximum(units[i], 0)].set(values[i]),
                              state)
        return evaluate(state)[0]

    def evaluate_all(units, values):
        if units.shape[0] == 0:
            return jnp.zeros((0, num), dtype)
        return jax.lax.map(at, (jnp.asarray(units), jnp.asarray(values)),
                           batch_size=_block(units.shape[0], num))

    one_units = np.stack([singles[:, 0], -np.ones(len(singles), np.int32)], axis=1)
    one_values = np.stack([singles[:, 1], np.zeros(len(singles), np.int32)], axis=1)
    one = evaluate_all(one_units, one_values) - base  # (P1, num)
    single = jnp.zeros((num, n, k), dtype).at[:, singles[:, 0], singles[:, 1]].set(one.T)
    pair = jnp.zeros((num, n, n, k, k), dtype)
    if len(pairs):
        two = evaluate_all(pairs[:, :2], pairs[:, 2:]) - base  # (P2, num)
        u, w, v, x = (pairs[:, i] for i in range(4))
        interaction = (two - single[:, u, v].T - single[:, w, x].T).T  # (num, P2)
        # A value of zero probability makes its rows -inf - (-inf): no interaction to
        # read there (its q is 0); a real infinite coupling shows in pairwise_misfit.
        interaction = jnp.where(jnp.isfinite(interaction), interaction, 0.0)
        pair = pair.at[:, u, w, v, x].set(interaction).at[:, w, u, x, v].set(interaction)
    return PairwiseTables(base, single, pair)


def pairwise_value(tables: PairwiseTables, q) -> jax.Array:
    """``E_q[L]`` per example for a factorised q (num_examples, n, K) of per-unit
    probabilities (one-hot rows: L at those states)."""
    first = jnp.sum(jnp.where(q > 0, q * tables.single, 0.0), axis=(1, 2))
    second = 0.5 * jnp.einsum("nuk,nuwkl,nwl->n", q, tables.pair, q)
    return tables.constant + first + second


def pairwise_misfit(tables: PairwiseTables, evaluate, layout: DiscreteSites, rng_key):
    """The largest difference between L and its pairwise expansion at eight random
    joint states, relative to L's scale (small, at most :data:`PAIRWISE_RTOL`, when L
    is pairwise)."""
    num, n = layout.num_examples, layout.num_units
    cards = jnp.asarray(layout.cardinalities)
    probes = jnp.floor(jax.random.uniform(rng_key, (8, num, n)) * cards).astype(jnp.int32)
    probes = jnp.minimum(probes, cards - 1)
    exact = jax.vmap(lambda s: evaluate(s)[0])(probes)
    one_hot = jax.nn.one_hot(probes, layout.max_values, dtype=exact.dtype)
    approx = jax.vmap(lambda q: pairwise_value(tables, q))(one_hot)
    both_impossible = jnp.isneginf(exact) & jnp.isneginf(approx)
    exact = jnp.where(both_impossible, 0.0, exact)
    approx = jnp.where(both_impossible, 0.0, approx)
    scale = jnp.max(jnp.where(jnp.isfinite(exact), jnp.abs(exact), 0.0)) + 1.0
    misfit = jnp.max(jnp.abs(exact - approx)) / scale
    return jnp.where(jnp.isfinite(misfit), misfit, jnp.inf)


def entropy(q) -> jax.Array:
    """The entropy of a factorised q (num_examples, n, K), per example (0 log 0 = 0)."""
    return -jnp.sum(jnp.where(q > 0, q * jnp.log(jnp.where(q > 0, q, 1.0)), 0.0), axis=(1, 2))


def mean_field_sweeps(tables: PairwiseTables, q, mask, num_sweeps, temperature=1.0):
    """``num_sweeps`` sweeps of the mean-field updates, unit by unit in order:
    q_u(v) proportional to exp((single[u, v] + sum_w pair[u, w, v, :] . q_w) / T).
    Each update minimises the free energy ``-E_q[L] / T - H(q)`` in q_u exactly, so the
    free energy never increases. ``mask`` (n, K): the values each unit can take."""
    mask = jnp.asarray(mask)
    n = q.shape[1]

    def update(u, q):
        field = tables.single[:, u] + jnp.einsum("nwkl,nwl->nk", tables.pair[:, u], q)
        field = jnp.where(mask[u], field / temperature, -jnp.inf)
        return q.at[:, u].set(jax.nn.softmax(field, axis=-1))

    def sweep(q, _):
        return jax.lax.fori_loop(0, n, update, q), None

    q, _ = jax.lax.scan(sweep, q, None, length=num_sweeps)
    return q


def coordinate_ascent(evaluate, layout: DiscreteSites, states, num_sweeps):
    """Iterated conditional modes on the program itself: each unit in turn set to its
    best value given the others (the program evaluated at each of its values), for
    every example at once, until a sweep changes nothing or ``num_sweeps`` sweeps.
    Never lowers L. Returns (states, L per example, converged per example)."""
    n, k = layout.num_units, layout.max_values
    cards = jnp.asarray(layout.cardinalities)
    values = jnp.arange(k, dtype=jnp.int32)

    def update(u, carry):
        states, changed = carry
        tried = jax.vmap(lambda v: evaluate(states.at[:, u].set(v))[0])(values)  # (K, num)
        tried = jnp.where((values < cards[u])[:, None] & ~jnp.isnan(tried), tried, -jnp.inf)
        best = jnp.argmax(tried, axis=0).astype(jnp.int32)
        # Keep the current value on ties (no cycling between equal states).
        current = jnp.take_along_axis(tried, states[:, u][None], axis=0)[0]
        keep = current >= jnp.max(tried, axis=0)
        new = jnp.where(keep, states[:, u], best)
        return states.at[:, u].set(new), changed | (new != states[:, u])

    def cond(carry):
        _, changed, sweeps = carry
        return jnp.any(changed) & (sweeps < num_sweeps)

    def body(carry):
        states, _, sweeps = carry
        states, changed = jax.lax.fori_loop(
            0, n, update, (states, jnp.zeros(states.shape[0], bool)))
        return states, changed, sweeps + 1

    states, changed, _ = jax.lax.while_loop(
        cond, body, (states, jnp.ones(states.shape[0], bool), jnp.zeros((), jnp.int32)))
    return states, evaluate(states)[0], ~changed
