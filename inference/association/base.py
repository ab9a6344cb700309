"""The association registry and its building blocks, below every method.

:class:`AssociationResult`, :class:`AssociationProblem`, :class:`AssociationMethod`,
the registry :data:`METHODS` (with ``"exact"``, the exhaustive search
:func:`exact_search`) and :func:`check_options`. The iterative methods
(:mod:`~inference.association.annealing`, :mod:`~inference.association.message_passing`,
:mod:`~inference.association.directed`, :mod:`~inference.association.directed_bp`) import
this module and add themselves to :data:`METHODS`; :mod:`inference.association.core`, above
them all, imports them and dispatches (``associate``).

``method="exact"`` is the exhaustive search over all 2^n states (Westerdijk, Barber
and Wiegerinck (2001), sec. 3.1, eq. 2). It uses the quadratic form: for each chunk of
states S it computes q(S) = 1/2 diag(S W S^T) once and the energies of all examples as
h @ S^T + q, a matrix product costing n multiply-adds per state and example instead of
the dim of a brute-force distance. The states are generated from their indices chunk
by chunk inside ``lax.scan``, so memory stays at num_examples x chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from inference.program.energy import (
    QuadraticEnergy,
)
from ppl_models.validation import (
    check_positive_int,
)

__all__ = [
    "MAX_EXACT_FEATURES",
    "METHODS",
    "AssociationMethod",
    "AssociationProblem",
    "AssociationResult",
    "check_options",
    "exact_search",
]

#: Exhaustive search refuses more units than this: 2^24 states per example.
MAX_EXACT_FEATURES = 24
#: Elements of the (examples x states) energy block evaluated at once.
_BLOCK_ELEMENTS = 1 << 22


class AssociationResult(NamedTuple):
    """Result of an association method.

    Attributes
    ----------
    states : array (num_examples, num_features), int32 in {0, 1}
        The best state found for each example.
    energy : array (num_examples,)
        Its energy E_x(s) (for GVQ in the sigma -> 0 limit, ||x - s @ F||^2).
    converged : array (num_examples,), bool
        Whether the method reached its stopping criterion (always True for "exact").
    trace : array or None
        Per-sweep trace of iterative methods (None for "exact").
    """

    states: jax.Array
    energy: jax.Array
    converged: jax.Array
    trace: jax.Array | None = None


def _chunk_size(num_features: int, num_examples: int, chunk_size: int | None) -> int:
    total = 1 << num_features
    if chunk_size is None:
        chunk_size = max(64, _BLOCK_ELEMENTS // max(num_examples, 1))
    chunk_size = min(total, 1 << max(0, int(chunk_size).bit_length() - 1))  # a power of two
    return chunk_size


def exact_search(energy: QuadraticEnergy, *, chunk_size: int | None = None):
    """Exhaustive minimisation of a quadratic binary energy.

    Parameters
    ----------
    energy : QuadraticEnergy
        h (num_examples, n), W (n, n), constant (num_examples,).
    chunk_size : int, optional
        States per block (rounded down to a power of two). Default keeps the
        block of energies near 4M elements.

    Returns
    -------
    states : int32 array (num_examples, n)
    energies : array (num_examples,)
        The minimum energy of each example, from the quadratic form.
    """
    num_examples, num_features = energy.linear.shape
    chunk = _chunk_size(num_features, num_examples, chunk_size)
    num_chunks = (1 << num_features) // chunk
    bits = jnp.arange(num_features, dtype=jnp.int32)
    dtype = energy.linear.dtype

    def chunk_states(k):
        index = k * chunk + jnp.arange(chunk, dtype=jnp.int32)
        return ((index[:, None] >> bits) & 1).astype(dtype)  # (chunk, n)

    positions = jnp.arange(chunk, dtype=jnp.int32)

    def search_one(h):  # one example; vmapped below
        def body(carry, k):
            best_energy, best_index = carry
            states = chunk_states(k)
            quad = 0.5 * jnp.sum((states @ energy.couplings) * states, axis=-1)
            energies = states @ h + quad
            # First index of the minimum. XLA's CPU argmin is a slow variadic reduction
            # (it took ~70% of the search, benchmarks/association_exact.py); two plain
            # min reductions give the same index several times faster.
            lowest = jnp.min(energies)
            j = jnp.min(jnp.where(energies == lowest, positions, chunk))
            better = lowest < best_energy
            return (
                jnp.where(better, lowest, best_energy),
                jnp.where(better, k * chunk + j, best_index),
            ), None

        init = (jnp.asarray(jnp.inf, dtype), jnp.asarray(0, jnp.int32))
        chunks = jnp.arange(num_chunks, dtype=jnp.int32)
        (best_energy, best_index), _ = jax.lax.scan(body, init, chunks)
        return best_energy, best_index

    best_energy, best_index = jax.vmap(search_one)(energy.linear)
    states = (best_index[:, None] >> bits) & 1
    return states.astype(jnp.int32), best_energy + energy.constant


class AssociationProblem(NamedTuple):
    """What an association method sees: the program's energy and the data.

    Attributes
    ----------
    energy : QuadraticEnergy
        The target energy E_x(s) read from the program (the sigma -> 0 limit, or
        -2 noise^2 log p at a fixed ``noise``); the best state minimises it.
    features : array (num_features, dim)
        F, for the methods that use the directed graph or the residual x - s @ F.
    x : array (num_examples, dim)
    limit, slope : QuadraticEnergy
        E_sigma = limit + sigma^2 slope, see :meth:`tempered`.
    exact_energy : callable
        ``exact_energy(states)`` -> the program's energy of ``states``, evaluated
        directly (not through the quadratic form).
    """

    energy: QuadraticEnergy
    features: jax.Array
    x: jax.Array
    limit: QuadraticEnergy
    slope: QuadraticEnergy
    exact_energy: Callable

    def tempered(self, sigma) -> QuadraticEnergy:
        """E_sigma = -2 sigma^2 log p(x, s) under ``observation_noise(sigma=sigma)``.

        In energy units: the annealed distribution of the BP, MF and Gibbs
        schedules is p_sigma(s | x) ∝ exp(-E_sigma(s) / (2 sigma^2)). E_sigma is
        affine in sigma^2 up to an s-independent constant (the observed Gaussian
        sites give ||x - loc||^2 plus a normaliser, every other site
        -2 sigma^2 log p), so the program read in the limit and at sigma = 1 gives
        it exactly at every sigma, with no autodiff per sweep. For GVQ with a
        uniform prior it does not depend on sigma.
        """
        sigma2 = jnp.square(sigma)
        return jax.tree.map(lambda a, b: a + sigma2 * b, self.limit, self.slope)

    def take(self, index) -> AssociationProblem:
        """The sub-problem of the examples ``index``; its ``exact_energy`` is the quadratic form."""

        def rows(e: QuadraticEnergy):
            return QuadraticEnergy(e.linear[index], e.couplings, e.constant[index])

        energy = rows(self.energy)
        return AssociationProblem(energy, self.features, self.x[index], rows(self.limit),
                                  rows(self.slope), energy)


class AssociationMethod(NamedTuple):
    """An entry of :data:`METHODS`.

    Attributes
    ----------
    run : callable
        ``run(problem, *, rng_key, **options) -> AssociationResult``, jittable.
    validate : callable or None
        ``validate(features, options)`` on concrete input before jit; raises
        ``ValueError``/``TypeError`` naming the bad option.
    randomized : bool
        Whether ``run`` needs an ``rng_key``.
    """

    run: Callable
    validate: Callable | None = None
    randomized: bool = False


def _exact(problem: AssociationProblem, *, rng_key=None, chunk_size=None):
    states, _ = exact_search(problem.energy, chunk_size=chunk_size)
    converged = jnp.ones(states.shape[0], dtype=bool)
    return AssociationResult(states, problem.exact_energy(states), converged, None)


def _validate_exact(features, options):
    check_positive_int(
        int(features.shape[0]), "features.shape[0] (num_features)", maximum=MAX_EXACT_FEATURES,
        why=" for exhaustive search (2^num_features states per example)")
    check_options(options, chunk_size=int)
    if options.get("chunk_size") is not None:
        check_positive_int(options["chunk_size"], "chunk_size")


def check_options(options: dict, **types):
    """Raise ``TypeError`` for an option not in ``types`` or of the wrong type."""
    for name, value in options.items():
        if name not in types:
            raise TypeError(f"unknown option {name!r}; valid options: {sorted(types)}")
        expected = types[name]
        if value is not None and not isinstance(value, expected) or isinstance(value, bool) and \
                expected is not bool:
            raise TypeError(f"option {name} must be {getattr(expected, '__name__', expected)}; "
                            f"got {value!r}")


#: Association methods by name (see :class:`AssociationMethod`). Other modules add theirs.
METHODS: dict[str, AssociationMethod] = {"exact": AssociationMethod(_exact, _validate_exact)}
