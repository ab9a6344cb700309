"""Association: find the binary state that best explains each example.

``associate(features, x, method=...)`` is the one entry point for every
association method of sec. 4 of M. Westerdijk, D. Barber and W. Wiegerinck,
"Deterministic generative models for fast feature discovery", Data Mining and
Knowledge Discovery 5(4), 2001. The energy minimised is read from the program
(:mod:`inference.program.energy`), so a modified program is associated without
changes here.

The registry :data:`METHODS` and the exhaustive search live in
:mod:`inference.association.base`; this module imports every method module (each adds
itself to the registry), so :data:`METHODS` is complete once it is imported.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

import inference.association.annealing
import inference.association.directed
import inference.association.directed_bp
import inference.association.message_passing
import inference.association.tabu  # noqa: F401  (each adds its methods)
from inference.association.base import (
    MAX_EXACT_FEATURES,
    METHODS,
    AssociationMethod,
    AssociationProblem,
    AssociationResult,
    check_options,
    exact_search,
)
from inference.engine.protocol import method_options_of
from inference.engine.sharding import (
    map_shards,
    mesh_axis,
    mesh_size,
    pad_examples,
    resolve_mesh,
    shard_examples,
)
from inference.program.energy import (
    check_quadratic,
    energy_fn,
    quadratic_energy,
)
from inference.program.kwargs import freeze_options, split_model_kwargs
from ppl_models import gvq
from ppl_models.validation import (
    MissingKeyError,
    check_data,
    check_features,
    check_positive,
    check_rng_key,
)

__all__ = [
    "MAX_EXACT_FEATURES",
    "METHODS",
    "AssociationMethod",
    "AssociationProblem",
    "AssociationResult",
    "associate",
    "associate_energy",
    "association_problem",
    "check_options",
    "exact_search",
    "load_methods",
]


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
    method_options: dict | None = None,
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
        ``"mf"``, ``"gibbs"``, ``"dbp"``, ``"dbr"``, ``"br+mf"`` (Westerdijk, Barber
        and Wiegerinck (2001), sec. 4), and ``"tabu"``, multi-walk tabu search
        (:mod:`inference.association.tabu`), which stays at the optimum on overcomplete
        codebooks (more features than dimensions) where the papers' methods do not.
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
    method_options : dict, optional
        Method options (see each method's docstring), e.g. ``{"chunk_size": 4096}`` for
        ``"exact"``, ``{"max_sweeps": 20}`` for ``"br"``: one dict, as for
        :func:`inference.map_states`.
    **options
        Deprecated: method options as keywords (they still work for one release, with a
        ``DeprecationWarning``); pass ``method_options`` instead.
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

    Examples
    --------
    >>> import jax
    >>> from ppl_models import gvq
    >>> data = gvq.generate_planted(jax.random.key(0), 50, 4, 8)
    >>> exact = associate(data.features, data.x, method="exact")
    >>> exact.states.shape, bool((exact.states == data.states).all())  # the planted states
    ((50, 4), True)
    >>> fast = associate(data.features, data.x, method="br", rng_key=jax.random.key(1))
    >>> bool((fast.states == exact.states).all())  # belief revision: the same states
    True
    """
    load_methods()
    options = method_options_of("associate", method_options, options)
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
    load_methods()
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


def load_methods():
    """The registry :data:`METHODS`, every method in it (the method modules register on
    import, and this module imports them all)."""
    return METHODS
