"""Tabu search: association that stays optimal on overcomplete codebooks.

With more features than dimensions (n > dim) the energy E_x(s) = ||x - s F||^2 has
many deep local minima far apart in Hamming distance (sums of features nearly cancel),
and the papers' methods (BP, BR, MF, Gibbs), which settle into the first minimum they
meet, end tens to hundreds of percent above the optimum. Association is then a binary quadratic
program per example, the problem that quadratic unconstrained binary optimisation
(QUBO) solvers address; among their heuristics, one-flip tabu search (F. Glover,
"Tabu search -- Part I", ORSA Journal on Computing 1(3), 1989; for QUBO: F. Glover,
G. Kochenberger and B. Alidaee, "Adaptive memory tabu search for binary quadratic
programs", Management Science 44(3), 1998) reaches the optimum of small dense problems
in a few thousand moves.

``method="tabu"`` runs ``num_walks`` independent walks per example, each from a random
state, for ``num_iterations`` moves. A move flips the unit whose flip lowers the
energy most (or raises it least) among the units not flipped in the last ``tenure``
moves (plus a small random part, different per walk and move, so that walks do not
cycle in step); a tabu unit may still flip if that reaches an energy below the best
the walk has seen (aspiration). Every walk keeps the lowest-energy state it visits;
the example's state is the best of its walks. The energy change of every flip is
kept in a field g = h + W s updated with one row of W per move (O(n)), and the
states are packed 32 units to a uint32 word, so a move costs a few passes over n
floats per walk; the walks of a chunk of examples (about 4,000 walks, so that their
fields stay in cache) move together, held unit-major so that each pass runs along the
walks, one ``lax.scan`` over the moves, and the chunks follow one another
(``lax.map``).

``converged`` means that at least two walks of the example, started independently,
ended at the same lowest energy (relative tolerance 1e-5): a second, independent
confirmation of the optimum, not a proof. With one walk it is always False.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from inference.association.base import (
    METHODS,
    AssociationMethod,
    AssociationProblem,
    AssociationResult,
    check_options,
)
from inference.program.energy import QuadraticEnergy
from ppl_models.validation import check_positive_int

__all__ = ["default_budget", "tenure_jitter", "tabu_search", "run_tabu", "AGREEMENT_RTOL"]

#: Walks that move together in one chunk (see :func:`tabu_search`).
CHUNK_WALKS = 4096
#: Two walks agree on the optimum when their energies differ by at most this (relative).
AGREEMENT_RTOL = 1e-5
_WORD = 32
# Constants of the integer hash that draws each walk's tenure jitter per move.
_GOLDEN, _MIX = 0x9E3779B9, 0x85EBCA6B


def default_budget(num_features: int, dim: int) -> tuple[int, int]:
    """Default ``(num_walks, num_iterations)`` for ``n`` features in ``dim`` dimensions.

    Measured on planted GVQ data (``benchmarks/association.py``: dense features
    F ~ N(0, 1), noise 0.3, exhaustive search as the reference up to n = 24): the
    smallest budgets that kept the mean gap under 0.1% and at least 99.9% of 10,000
    examples at the reference, with a margin for other draws, were 8 walks of 2n moves
    when ``dim >= n`` (4 walks left one example in 1,000 at n = 24 far above it), and
    for overcomplete codebooks (``dim < n``), which need many more moves growing with n
    (more walks helping more than longer ones), 32 walks of 4n moves up to n = 16, 32
    of 8n at n = 24 and 32 of 16n at n = 32. (16 walks of 4n were enough at n = 12 on
    the benchmark's draws, but on the codebooks of the tests, 3,000 examples each, they
    left 0.03-0.2% of the examples above the optimum, and mean gaps of up to 0.46% in
    300 examples; 32 walks left none of 12,000, 16 walks of 6n still two.) Beyond
    n = 32 the budget is not measured: raise ``num_iterations`` and check
    ``converged``, which is True on most of the rare misses too (two walks can end in
    the same local minimum), so it flags a budget far too small, not a single miss.

    Codebooks learned from real data are harder than random ones: on the features that
    EM learns from 4 x 4 image patches (``examples/overcomplete_gvq.py``, n = 32,
    dim = 16) this budget ends above a run with 8 times the moves on about a fifth of
    the patches (by 3% of the energy on average), and only about 60% of the examples
    are ``converged``; the example shows what a larger budget buys there. Features
    that share a large common part are harder too: on the papers' generator (dense
    F ~ N(2, 1)) this budget leaves 0.6-7% of the examples above exhaustive search at
    n = 12-20 with dim < 2n (``benchmarks/association_choice.py``), and four times the
    walks brings that to 0.1-0.5%.
    """
    n = int(num_features)
    if dim >= n:
        return 8, max(8, 2 * n)
    return 32, max(16, (4 if n <= 16 else 8 if n <= 24 else 16) * n)


def default_tenure(num_features: int) -> int:
    """Default tabu tenure: a quarter of the units, at least 4 (at most n - 1).

    On planted overcomplete GVQ data a tenure of n/5 to n/4 gave the best walks at
    n = 32 (n/3 left 0.1-0.2% of the examples above the optimum), 4 to 6 at n = 12
    and 16 (3 left 0.1%)."""
    return max(0, min(num_features - 1, max(4, num_features // 4)))


def tenure_jitter(num_features: int, tenure: int, jitter: int | None = None) -> int:
    """The tenure jitter :func:`tabu_search` uses: ``jitter`` (default ``max(1, tenure //
    2)``) cut so that some unit is always free (``tenure + jitter < num_features``)."""
    jitter = max(1, tenure // 2) if jitter is None else int(jitter)
    return max(0, min(jitter, num_features - 1 - tenure))


def _unpack(words, num_features: int):
    """(..., num_words) uint32 -> (..., n) bool."""
    index = jnp.arange(num_features)
    bits = jnp.uint32(1) << (index % _WORD).astype(jnp.uint32)
    return (words[..., index // _WORD] & bits) != 0


def _pack(states):
    """(..., n) {0, 1} -> (..., num_words) uint32."""
    n = states.shape[-1]
    num_words = -(-n // _WORD)
    padded = jnp.pad(states.astype(jnp.uint32), [(0, 0)] * (states.ndim - 1)
                     + [(0, num_words * _WORD - n)])
    shifts = jnp.arange(_WORD, dtype=jnp.uint32)
    grouped = padded.reshape(*states.shape[:-1], num_words, _WORD) << shifts
    return jnp.sum(grouped, axis=-1, dtype=jnp.uint32)  # disjoint bits: the sum is the OR


def _walk_chunk(h, W, rng_key, valid, *, num_walks, num_iterations, tenure, jitter):
    """The walks of one chunk of examples: their best states (examples, walks, n) as
    {0, 1}, their best energies (no constant), and after each move the sum of the best
    energies of the walks of the ``valid`` examples (the others are padding).

    The walks' arrays are held unit-major, (n, walks) and (num_words, walks), so that
    every per-move operation, the minimum over the units included, runs along the long
    axis of walks (vectorised); walk-major (walks, n) reductions over n took 1.4-2.7
    times as long per move at n = 12-32.
    """
    num_examples, n = h.shape
    dtype = h.dtype
    walks = num_examples * num_walks
    num_words = -(-n // _WORD)
    start_key, seed_key = jax.random.split(rng_key)
    start = jax.random.bits(start_key, (walks, num_words), jnp.uint32)
    last = n - (num_words - 1) * _WORD  # units in the last word
    mask = [0xFFFFFFFF] * (num_words - 1) + [(1 << last) - 1]
    start = start & jnp.asarray(mask, jnp.uint32)
    seeds = jax.random.bits(seed_key, (walks,), jnp.uint32)
    hw = jnp.repeat(h, num_walks, axis=0)
    counted = jnp.repeat(valid, num_walks)
    s0 = _unpack(start, n).astype(dtype)
    field = (hw + s0 @ W).T  # (n, walks)
    e0 = jnp.sum(hw * s0, axis=1) + 0.5 * jnp.sum((s0 @ W) * s0, axis=1)
    units = jnp.arange(n, dtype=jnp.int32)[:, None]
    word_index = jnp.arange(num_words)[:, None]
    bit_of = jnp.uint32(1) << (units % _WORD).astype(jnp.uint32)  # (n, 1)
    word_of = units[:, 0] // _WORD
    tenure_base = jnp.int32(tenure + 1)

    def move(carry, t):
        states, field, e, tabu, best_e, best_states = carry
        words = states if num_words == 1 else states[word_of]  # one word: a broadcast
        on = (words & bit_of) != 0
        delta = jnp.where(on, -field, field)
        allowed = (tabu <= t) | (e + delta < best_e)
        score = jnp.where(allowed, delta, jnp.inf)
        lowest = jnp.min(score, axis=0)
        # The first unit at the minimum: two plain reductions (XLA's CPU argmin is slow).
        j = jnp.min(jnp.where(score == lowest, units, n), axis=0)
        bit = jnp.uint32(1) << (j % _WORD).astype(jnp.uint32)
        if num_words == 1:
            flip = bit[None, :]
        else:
            flip = jnp.where(word_index == j // _WORD, bit, jnp.uint32(0))
        was_on = jnp.any((states & flip) != 0, axis=0)
        states = states ^ flip
        field = field + jnp.where(was_on, -1.0, 1.0).astype(dtype) * jnp.take(W, j, axis=1)
        e = e + lowest
        mixed = (seeds ^ (t.astype(jnp.uint32) * jnp.uint32(_GOLDEN))) * jnp.uint32(_MIX)
        extra = ((mixed >> 16) % jnp.uint32(jitter + 1)).astype(jnp.int32)
        tabu = jnp.where(units == j, t + tenure_base + extra, tabu)
        better = e < best_e
        best_e = jnp.where(better, e, best_e)
        best_states = jnp.where(better, states, best_states)
        return (states, field, e, tabu, best_e, best_states), jnp.sum(
            jnp.where(counted, best_e, 0.0))

    start = start.T  # (num_words, walks)
    init = (start, field, e0, jnp.zeros((n, walks), jnp.int32), e0, start)
    carry, trace = jax.lax.scan(move, init, jnp.arange(num_iterations, dtype=jnp.int32))
    best = _unpack(carry[5].T, n).astype(dtype)  # (walks, n)
    # Each walk's best energy afresh from the quadratic form: the running sums drift.
    walk_energy = jnp.sum(hw * best, axis=1) + 0.5 * jnp.sum((best @ W) * best, axis=1)
    return (best.reshape(num_examples, num_walks, n),
            walk_energy.reshape(num_examples, num_walks), trace)


def tabu_search(energy: QuadraticEnergy, rng_key, *, num_walks: int, num_iterations: int,
                tenure: int, jitter: int | None = None, chunk_size: int | None = None):
    """Minimise a quadratic binary energy per example by multi-walk tabu search.

    Parameters
    ----------
    energy : QuadraticEnergy
        h (num_examples, n), W (n, n) with zero diagonal, constant (num_examples,).
    rng_key : jax.random key
        Draws the walks' starting states and tenure jitter.
    num_walks, num_iterations : int
        Walks per example and moves per walk.
    tenure : int
        Moves for which a flipped unit stays tabu (before jitter), ``0 <= tenure < n``.
    jitter : int, optional
        Each move's tenure is ``tenure`` plus a pseudo-random integer in
        ``[0, jitter]``; default ``max(1, tenure // 2)``, cut so that some unit is
        always free (``tenure + jitter < n``).
    chunk_size : int, optional
        Examples whose walks move together; the chunks run one after the other
        (``lax.map``). Default: as many as make about :data:`CHUNK_WALKS` walks, which
        keeps a chunk's fields and tabu lists in the processor's cache (at n = 12-32 a
        move of a walk took 1.1-1.3 times as long with chunks of 16,384 walks, and about
        1.5 times as long with all 4,000 examples of a test at once). The states
        depend on the chunking: each chunk draws its walks from its own key.

    Returns
    -------
    states : int32 array (num_examples, n)
        The best state of each example over its walks.
    walk_energy : array (num_examples, num_walks)
        Each walk's best energy, from the quadratic form (constant included).
    trace : array (num_iterations,)
        Mean over walks and examples of the best energy so far, after each move
        (constant included).
    """
    h, W, constant = energy.linear, energy.couplings, energy.constant
    num_examples, n = h.shape
    jitter = tenure_jitter(n, tenure, jitter)
    chunk = max(1, CHUNK_WALKS // num_walks) if chunk_size is None else int(chunk_size)
    chunk = min(chunk, num_examples)
    num_chunks = -(-num_examples // chunk)
    options = dict(num_walks=num_walks, num_iterations=num_iterations, tenure=tenure,
                   jitter=jitter)
    if num_chunks == 1:
        best, walk_energy, trace = _walk_chunk(h, W, rng_key, jnp.ones(num_examples, bool),
                                               **options)
    else:  # the last chunk padded with copies of the last example, dropped below
        total = num_chunks * chunk
        padded = jnp.concatenate([h, jnp.repeat(h[-1:], total - num_examples, axis=0)])
        valid = jnp.arange(total) < num_examples
        keys = jax.random.split(rng_key, num_chunks)
        best, walk_energy, traces = jax.lax.map(
            lambda args: _walk_chunk(args[0], W, args[1], args[2], **options),
            (padded.reshape(num_chunks, chunk, n), keys, valid.reshape(num_chunks, chunk)))
        best = best.reshape(total, num_walks, n)[:num_examples]
        walk_energy = walk_energy.reshape(total, num_walks)[:num_examples]
        trace = jnp.sum(traces, axis=0)
    walk_energy = walk_energy + constant[:, None]
    pick = jnp.argmin(walk_energy, axis=1)
    states = best[jnp.arange(num_examples), pick]
    trace = trace / (num_examples * num_walks) + jnp.mean(constant)
    return states.astype(jnp.int32), walk_energy, trace


def run_tabu(problem: AssociationProblem, *, rng_key, num_walks=None, num_iterations=None,
             tenure=None, chunk_size=None) -> AssociationResult:
    """``method="tabu"``: multi-walk tabu search on the program's energy (module docstring).

    Options: ``num_walks`` and ``num_iterations`` (moves per walk; defaults
    :func:`default_budget`), ``tenure`` (default :func:`default_tenure`), ``chunk_size``
    (examples whose walks move together, see :func:`tabu_search`).
    """
    n = problem.energy.linear.shape[1]
    walks, iterations = default_budget(n, problem.features.shape[-1])
    num_walks = walks if num_walks is None else num_walks
    num_iterations = iterations if num_iterations is None else num_iterations
    tenure = default_tenure(n) if tenure is None else tenure
    states, walk_energy, trace = tabu_search(problem.energy, rng_key, num_walks=num_walks,
                                             num_iterations=num_iterations, tenure=tenure,
                                             chunk_size=chunk_size)
    best = jnp.min(walk_energy, axis=1, keepdims=True)
    agree = walk_energy <= best + AGREEMENT_RTOL * jnp.maximum(jnp.abs(best), 1.0)
    converged = jnp.sum(agree, axis=1) >= 2
    return AssociationResult(states, problem.exact_energy(states), converged, trace)


def _validate_tabu(features, options):
    check_options(options, num_walks=int, num_iterations=int, tenure=int, chunk_size=int)
    n = int(features.shape[0])
    for name in ("num_walks", "num_iterations", "chunk_size"):
        if options.get(name) is not None:
            check_positive_int(options[name], name)
    tenure = options.get("tenure")
    if tenure is not None and not 0 <= tenure < max(n, 1):
        raise ValueError(f"tenure must be an integer in [0, num_features - 1] = [0, {n - 1}] "
                         f"(a tenure of n or more leaves no unit free to flip); got {tenure}")


METHODS["tabu"] = AssociationMethod(run_tabu, _validate_tabu, randomized=True)
