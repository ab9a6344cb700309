"""Association: find the binary state that best explains each example.

``associate(features, x, method=...)`` is the one entry point for every
association method of seed 000 sec. 4 (``shared/MODELS.md`` 1.3). The energy
minimised is read from the program (:mod:`inference.program.energy`), so a modified
program is associated without changes here.

``method="exact"`` is the exhaustive search over all 2^n states (sec. 3.1,
eq. 2). It uses the quadratic form: for each chunk of states S it computes
q(S) = 1/2 diag(S W S^T) once and the energies of all examples as h @ S^T + q,
a matrix product costing n multiply-adds per state and example instead of the
dim of a brute-force distance. The states are generated from their indices
chunk by chunk inside ``lax.scan``, so memory stays at num_examples x chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from inference.engine.sharding import (
    map_shards,
    mesh_axis,
    mesh_size,
    pad_examples,
    resolve_mesh,
    shard_examples,
)
from inference.program.energy import QuadraticEnergy, check_quadratic, energy_fn, quadratic_energy
from inference.program.kwargs import freeze_options, split_model_kwargs
from ppl_models import gvq
from ppl_models.validation import (
    MissingKeyError,
    check_data,
    check_features,
    check_positive,
    check_positive_int,
    check_rng_key,
)

__all__ = ["AssociationResult", "AssociationProblem", "AssociationMethod", "associate",
           "association_problem", "exact_search", "MAX_EXACT_FEATURES", "METHODS",
           "associate_energy", "check_options"]

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


def associate(
    features,
    x,
    method: str = "exact",
    *,
    rng_key=None,
    model: Callable | None = None,
    model_kwargs: dict | None = None,
    latent: str = "s",
    noise=None,
    check: bool = True,
    devices=None,
    mesh=None,
    **options,
) -> AssociationResult:
    """Find, for every example, the binary state that minimises the program's energy.

    Parameters
    ----------
    features : array (num_features, dim)
        The features F, passed to the program as ``features=``.
    x : array (num_examples, dim)
        Data, one example per row.
    method : str
        One of :data:`METHODS`: ``"exact"`` (exhaustive search), ``"bp"``, ``"br"``,
        ``"mf"``, ``"gibbs"``, ``"dbp"``, ``"dbr"``, ``"br+mf"`` (seed 000 sec. 4).
    rng_key : jax.random key, optional
        Required by the randomised methods (random sequential orders, Gibbs).
    model : callable, optional
        The program; default :func:`ppl_models.gvq.model`. A variant must take
        ``model(x, features=F, **model_kwargs)`` and have the binary site
        ``latent`` of shape (num_examples, num_features).
    model_kwargs : dict, optional
        Further keyword arguments of the program (e.g. ``prior_probs``).
    noise : float or None
        ``None`` (default): the deterministic sigma -> 0 limit, E = ||x - s F||^2
        for GVQ. A positive float: the MAP state at that observation noise,
        where priors on s count (E = -2 noise^2 log p(x, s)).
    check : bool
        Verify once that the program is quadratic in ``latent`` (skipped under jit).
    **options
        Method options (see each method's docstring), e.g. ``chunk_size`` for
        ``"exact"``, ``max_sweeps`` for ``"br"``.
    devices : None, int or sequence of jax.Device
        Split the examples over these devices (:func:`inference.engine.sharding.resolve_mesh`):
        ``None`` uses all of ``jax.devices()`` when there are several (else the plain
        single-device path), an int the first that many. Association is per
        example, so each device runs ``method`` on its own rows under ``shard_map``
        (nothing to sum); x is padded with zero rows to a multiple of the device
        count and the padding is dropped from the result. Deterministic methods
        give the single-device states; randomised ones draw per device (the key
        folded with the device's index).
    mesh : jax.sharding.Mesh, optional
        A mesh of your own instead of ``devices`` (one axis, or one named ``"data"``).

    Returns
    -------
    AssociationResult
        ``states`` (num_examples, num_features), ``energy`` (num_examples,),
        ``converged`` (num_examples,), ``trace`` (per sweep, for iterative methods;
        with several devices, one trace per device, of its rows padding included,
        stacked on a new leading axis).
    """
    _load_methods()
    mesh = resolve_mesh(devices, mesh)
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}; got {method!r}")
    spec = METHODS[method]
    features = check_features(features)
    x = check_data(x, "x", dim=int(features.shape[1]))
    if spec.validate is not None:
        spec.validate(features, options)
    if spec.randomized and rng_key is None:
        raise MissingKeyError(f"method {method!r} is randomised: pass rng_key=jax.random.key(...)")
    if rng_key is not None:
        check_rng_key(rng_key)
    if noise is not None:
        check_positive(noise, "noise")
    model = gvq.model if model is None else model
    dynamic, static = split_model_kwargs(model_kwargs)
    if check:
        check_quadratic(model, x, latent=latent, noise=noise,
                        model_kwargs={**(model_kwargs or {}), "features": features})
    common = dict(method=method, model=model, latent=latent, static_kwargs=static,
                  options=freeze_options(options))
    if mesh is None:
        return _associate_jit(features, x, noise, dynamic, rng_key, **common)
    padded = shard_examples(mesh, pad_examples(x, mesh_size(mesh))[0])
    result = _associate_sharded(features, padded, noise, dynamic, rng_key, mesh=mesh, **common)
    num = x.shape[0]
    return result._replace(states=result.states[:num], energy=result.energy[:num],
                           converged=result.converged[:num])


def association_problem(model, x, model_kwargs, *, latent="s", noise=None,
                        num_features=None) -> AssociationProblem:
    """Build the :class:`AssociationProblem` of ``model(x, **model_kwargs)`` (jittable)."""
    energy = quadratic_energy(model, x, latent=latent, noise=noise, model_kwargs=model_kwargs,
                              num_features=num_features)
    row_energy = energy_fn(model, latent=latent, noise=noise, model_kwargs=model_kwargs)
    num_features = energy.linear.shape[1]

    def exact_energy(states):
        return jax.vmap(row_energy)(x, states.astype(x.dtype))

    limit = energy if noise is None else quadratic_energy(
        model, x, latent=latent, noise=None, model_kwargs=model_kwargs,
        num_features=num_features)
    at_one = quadratic_energy(model, x, latent=latent, noise=1.0, model_kwargs=model_kwargs,
                              num_features=num_features)
    slope = jax.tree.map(jnp.subtract, at_one, limit)
    return AssociationProblem(energy, model_kwargs["features"], x, limit, slope, exact_energy)


def associate_energy(model, x, model_kwargs, *, method, latent="s", noise=None, rng_key=None,
                     options=None, num_features=None) -> AssociationResult:
    """Associate ``x`` under the program's energy (no validation; jittable).

    The common core of :func:`associate` and the EM drivers: builds the
    :class:`AssociationProblem` of ``model(x, **model_kwargs)`` and runs ``method``.
    """
    _load_methods()
    problem = association_problem(model, x, model_kwargs, latent=latent, noise=noise,
                                  num_features=num_features)
    return METHODS[method].run(problem, rng_key=rng_key, **(options or {}))


@partial(jax.jit, static_argnames=("method", "model", "latent", "static_kwargs", "options"))
def _associate_jit(features, x, noise, dynamic_kwargs, rng_key, *, method, model, latent,
                   static_kwargs, options):
    kwargs = {**dynamic_kwargs, **dict(static_kwargs), "features": features}
    return associate_energy(model, x, kwargs, method=method, latent=latent, noise=noise,
                            rng_key=rng_key, options=dict(options),
                            num_features=features.shape[0])


@partial(jax.jit, static_argnames=("method", "model", "latent", "static_kwargs", "options",
                                   "mesh"))
def _associate_sharded(features, x, noise, dynamic_kwargs, rng_key, *, method, model, latent,
                       static_kwargs, options, mesh):
    """:func:`_associate_jit` on every device's rows of x (split along ``mesh``)."""
    axis = mesh_axis(mesh)

    def per_shard(x, features, noise, dynamic_kwargs, rng_key):
        key = rng_key if rng_key is None else jax.random.fold_in(rng_key,
                                                                 jax.lax.axis_index(axis))
        kwargs = {**dynamic_kwargs, **dict(static_kwargs), "features": features}
        result = associate_energy(model, x, kwargs, method=method, latent=latent, noise=noise,
                                  rng_key=key, options=dict(options),
                                  num_features=features.shape[0])
        trace = None if result.trace is None else jax.tree.map(lambda t: t[None], result.trace)
        return result._replace(trace=trace)

    split = P(axis)
    run = map_shards(per_shard, mesh, 1, AssociationResult(split, split, split, split))
    return run(x, features, noise, dynamic_kwargs, rng_key)


def _load_methods():
    """Import the modules that add the iterative methods to :data:`METHODS`."""
    import inference.association.annealing  # noqa: F401
    import inference.association.directed  # noqa: F401
    import inference.association.message_passing  # noqa: F401
