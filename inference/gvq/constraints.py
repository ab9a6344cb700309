"""Association and M-steps for the constrained GVQ programs.

The constraints are those of sec. 5 of M. Westerdijk, D. Barber and W. Wiegerinck,
"Deterministic generative models for fast feature discovery", Data Mining and
Knowledge Discovery 5(4), 2001. :func:`ppl_models.gvq.model` takes three of them:

* ``num_sets=G`` (sec. 5.1): the features form G sets, each with an origin that
  is always on within its set; an example uses exactly one set. Association is
  winner-take-all: for every set g the program is conditioned on ``set = g``
  (a NumPyro ``condition`` handler, :func:`in_set`), its energy in the set's
  switchable units is minimised by any association method, and each example
  keeps the set with the least energy. The energy of set g is the ordinary GVQ
  energy of x - o_g under the set's features, so every method applies unchanged.
* ``sparsity=lambda`` (sec. 5.2) is part of the program's energy, so the
  association methods see it with no change here.
* ``binary=True`` (sec. 5.3) makes the energy non-quadratic in s. Association
  then evaluates the program's energy at every state (:func:`search_program`,
  exhaustive, 2^units states per example: the sets of the paper's digits run
  have 4 switchable units), and the M-step minimises the program's total
  energy over the unconstrained features F_hat with L-BFGS
  (``optax.lbfgs`` via :func:`inference.program.optimize.lbfgs_minimize`; :func:`binary_m_step`).

A quasi-Newton method rather than a first-order one: the M-step is a smooth,
deterministic, full-batch problem of a few thousand parameters, which is what
quasi-Newton methods are for; it needs no learning rate, it is the nearest
method in JAX to the paper's scaled conjugate gradient, and its line search
(zoom, strong Wolfe conditions) only accepts steps that lower the objective.
Limited memory rather than BFGS (``jax.scipy.optimize.minimize``): BFGS updates
a dense (num_features * dim)^2 inverse Hessian with matrix products, O(P^3) per
iteration, which measured 50-80 ms per iteration on the digits run (P = 20 * 64)
against 0.3 ms for the objective and its gradient; L-BFGS with 10 pairs costs
O(10 P) per iteration and lowered the same objective further in the same
number of iterations.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.infer.util import log_density

from inference.association.core import (
    MAX_EXACT_FEATURES,
    METHODS,
    association_problem,
    load_methods,
)
from inference.engine.protocol import method_options_of
from inference.program.handlers import noiseless, observation_noise
from inference.program.kwargs import freeze_options, split_model_kwargs
from inference.program.optimize import lbfgs_minimize
from ppl_models import gvq
from ppl_models.validation import (
    MissingKeyError,
    check_data,
    check_finite,
    check_positive,
    check_positive_int,
)

__all__ = ["in_set", "search_program", "associate_sets", "associate_states", "binary_m_step",
           "program_energy", "check_constraints"]


@functools.cache
def in_set(model: Callable) -> Callable:
    """``model`` conditioned on site ``"set"`` = ``set_index`` (a new keyword argument).

    ``set_index`` is an int or an int array (num_examples,). Cached, so that the
    conditioned program is one object per model (a static argument of ``jit``).
    """

    def conditioned(x=None, *, set_index, **kwargs):
        num_examples = jnp.shape(x)[0]
        value = jnp.broadcast_to(jnp.asarray(set_index, jnp.int32), (num_examples,))
        with handlers.condition(data={"set": value}):
            return model(x, **kwargs)

    conditioned.__name__ = f"in_set({getattr(model, '__name__', 'model')})"
    return conditioned


def _handled(model, noise):
    if noise is None:
        return noiseless(model), 1.0
    return observation_noise(model, sigma=noise), 2.0 * jnp.square(noise)


def program_energy(model, x, model_kwargs, values: dict, *, noise=None, per_example=True):
    """The program's energy at the latent ``values``: -log p under ``noiseless``
    (``noise=None``) or -2 noise^2 log p at ``noise``.

    ``per_example=True`` returns one energy per example (each row run through the
    program on its own), else the total.
    """
    handled, scale = _handled(model, noise)
    if not per_example:
        logp, _ = log_density(handled, (x,), model_kwargs, values)
        return -scale * logp

    def one(x_row, row_values):
        logp, _ = log_density(handled, (x_row[None],), model_kwargs,
                              {k: v[None] for k, v in row_values.items()})
        return -scale * logp

    return jax.vmap(one)(x, values)


def search_program(model, x, model_kwargs, *, num_units: int, latent="s", noise=None,
                   extra_values=None):
    """Exhaustive association that only evaluates the program's energy.

    Works for any energy (no quadratic form needed): every one of the
    2^``num_units`` states is scored by running the program (vmapped over the
    examples) and the lowest is kept, first index on ties. Jittable.

    Returns
    -------
    states : int32 array (num_examples, num_units)
    energy : array (num_examples,)
    """
    num_examples = x.shape[0]
    bits = jnp.arange(num_units, dtype=jnp.int32)
    extra = dict(extra_values or {})

    def body(carry, index):
        best_energy, best_index = carry
        state = ((index >> bits) & 1).astype(x.dtype)
        values = {**extra, latent: jnp.broadcast_to(state, (num_examples, num_units))}
        energy = program_energy(model, x, model_kwargs, values, noise=noise)
        better = energy < best_energy
        return (jnp.where(better, energy, best_energy),
                jnp.where(better, index, best_index)), None

    init = (jnp.full(num_examples, jnp.inf, x.dtype), jnp.zeros(num_examples, jnp.int32))
    (energy, index), _ = jax.lax.scan(body, init, jnp.arange(1 << num_units, dtype=jnp.int32))
    states = (index[:, None] >> bits) & 1
    return states.astype(jnp.int32), energy


def _associate_units(model, x, kwargs, *, method, latent, noise, rng_key, options, num_units,
                     binary, features=None, offset=None):
    """States and energies of one (possibly conditioned) program; jittable."""
    if num_units == 0:  # nothing to switch: the energy of the one state
        states = jnp.zeros((x.shape[0], 0), jnp.int32)
        return states, program_energy(model, x, kwargs, {latent: states.astype(x.dtype)},
                                      noise=noise)
    if binary:
        return search_program(model, x, kwargs, num_units=num_units, latent=latent, noise=noise)
    problem = association_problem(model, x, kwargs, latent=latent, noise=noise,
                                  num_features=num_units)
    if features is not None:  # the residual methods see x - o_g and the set's own features
        problem = problem._replace(features=features, x=x - offset)
    result = METHODS[method].run(problem, rng_key=rng_key, **dict(options))
    return result.states, result.energy


def associate_states(model, x, kwargs, *, method="exact", latent="s", noise=None, rng_key=None,
                     options=(), num_features: int):
    """States of all features (num_examples, num_features) and their energies; jittable.

    Dispatches on ``kwargs``: ``num_sets`` (winner-take-all over the sets) and
    ``binary`` (energy-only exhaustive search). The common core of
    :func:`associate_sets` and the EM step of :func:`inference.gvq.em.fit_gvq`.
    """
    load_methods()
    num_sets = kwargs.get("num_sets")
    binary = bool(kwargs.get("binary", False))
    common = dict(method=method, latent=latent, noise=noise, options=options, binary=binary)
    if num_sets is None:
        return _associate_units(model, x, kwargs, rng_key=rng_key, num_units=num_features,
                                **common)
    per_set = gvq.features_per_set(num_features, num_sets)
    blocks = kwargs["features"].reshape(num_sets, per_set, -1)
    conditioned = in_set(model)
    keys = (jax.random.split(rng_key, num_sets) if rng_key is not None
            else jnp.zeros(num_sets, jnp.int32))

    def one_set(g, key):
        return _associate_units(conditioned, x, {**kwargs, "set_index": g},
                                rng_key=key if rng_key is not None else None,
                                num_units=per_set - 1, features=blocks[g, :-1],
                                offset=blocks[g, -1], **common)

    units, energies = jax.vmap(one_set)(jnp.arange(num_sets), keys)  # (G, N, m-1), (G, N)
    sets = jnp.argmin(energies, axis=0)
    chosen = jnp.take_along_axis(units, sets[None, :, None], axis=0)[0]
    energy = jnp.take_along_axis(energies, sets[None], axis=0)[0]
    return gvq.full_states(sets, chosen, num_sets), energy


def associate_sets(features, x, num_sets: int, method: str = "exact", *, rng_key=None,
                   model=None, model_kwargs=None, latent="s", noise=None,
                   method_options: dict | None = None, **options):
    """Winner-take-all association over feature sets (Westerdijk, Barber and Wiegerinck
    (2001), sec. 5.1).

    Parameters
    ----------
    features : array (num_features, dim)
        ``num_sets`` consecutive blocks of m rows, the last row of each block
        being that set's origin (see :func:`ppl_models.gvq.model`).
    x : array (num_examples, dim)
    num_sets : int
    method : str
        Association method within a set (any of
        :data:`inference.association.core.METHODS`); ``"exact"`` with ``binary=True``.
    model_kwargs : dict, optional
        Further arguments of the program (``sparsity``, ``binary``, ``beta``, ...).
    method_options : dict, optional
        Options of the method (as ``inference.associate`` takes them).
    **options
        The method's options as keywords, the old form: they still work for one release
        with a ``DeprecationWarning``; pass ``method_options`` instead.

    Returns
    -------
    states : int32 array (num_examples, num_features)
        The chosen set's origin and switchable units, zeros elsewhere.
    sets : int32 array (num_examples,)
    energy : array (num_examples,)

    Examples
    --------
    Two sets of two switchable units and an origin; four noiseless examples:

    >>> import jax, jax.numpy as jnp
    >>> from ppl_models import gvq
    >>> F = gvq.planted_features(jax.random.key(0), 6, 8)
    >>> sets, units = jnp.array([0, 1, 1, 0]), jnp.array([[1, 0], [0, 1], [1, 1], [0, 0]])
    >>> planted = gvq.full_states(sets, units, 2)
    >>> states, chosen, energy = associate_sets(F, planted @ F, 2)
    >>> chosen.tolist(), bool((states == planted).all())
    ([0, 1, 1, 0], True)
    """
    options = method_options_of("associate_sets", method_options, options)
    features, x, kwargs, method = check_constraints(
        features, x, num_sets=num_sets, method=method, model_kwargs=model_kwargs,
        rng_key=rng_key, options=options)
    model = gvq.model if model is None else model
    states, energy = _associate_jit(x, noise, features, rng_key, kwargs, model=model,
                                    method=method, latent=latent,
                                    options=freeze_options(options))
    return states, gvq.set_units(states, num_sets)[0], energy


def _associate_jit(x, noise, features, rng_key, kwargs, *, model, method, latent, options):
    dynamic, static = split_model_kwargs(kwargs)
    return _associate_jit_inner(x, noise, features, rng_key, dynamic, model=model,
                                method=method, latent=latent, options=options,
                                static_kwargs=static)


@functools.partial(jax.jit, static_argnames=("model", "method", "latent", "options",
                                             "static_kwargs"))
def _associate_jit_inner(x, noise, features, rng_key, dynamic, *, model, method, latent,
                         options, static_kwargs):
    kwargs = {**dynamic, **dict(static_kwargs), "features": features}
    return associate_states(model, x, kwargs, method=method, latent=latent, noise=noise,
                            rng_key=rng_key, options=options, num_features=features.shape[0])


def _latent_values(states, kwargs, latent):
    num_sets = kwargs.get("num_sets")
    if num_sets is None:
        return {latent: states}
    sets, units = gvq.set_units(states, num_sets)
    return {latent: units, "set": sets}


def binary_m_step(model, x, states, kwargs, *, latent="s", noise=None, max_iterations=50):
    """Minimise the program's total energy over the features (F_hat) at fixed states.

    L-BFGS (:func:`lbfgs_minimize`) from the current ``kwargs["features"]``, on the
    mean energy per example (eq. 10 plus any penalty); jittable. Returns the new
    features (never worse than the current ones) and whether the gradient norm
    fell to 1e-5 of its starting value within ``max_iterations`` iterations.
    """
    start = kwargs["features"]
    values = {k: v.astype(x.dtype) if k == latent else v
              for k, v in _latent_values(states, kwargs, latent).items()}
    num_examples = x.shape[0]

    def objective(flat):
        features = flat.reshape(start.shape)
        total = program_energy(model, x, {**kwargs, "features": features}, values, noise=noise,
                               per_example=False)
        return total / num_examples

    flat, _, converged = lbfgs_minimize(objective, start.reshape(-1),
                                        max_iterations=max_iterations)
    return flat.reshape(start.shape), converged


#: Largest number of switchable units per set for energy-only exhaustive search.
MAX_PROGRAM_SEARCH_UNITS = min(MAX_EXACT_FEATURES, 16)


def check_constraints(features, x, *, num_sets=None, sparsity=None, binary=False, beta=None,
                       method="exact", model_kwargs=None, rng_key=None, options=None,
                       num_features=None):
    """Validate the constraint options of ``fit_gvq`` / ``associate_sets``.

    Returns (features, x, model_kwargs with the constraints added, method).
    ``features`` may be None (fit_gvq checks ``num_features`` instead).
    """
    load_methods()
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}; got {method!r}")
    kwargs = dict(model_kwargs or {})
    num_sets = kwargs.pop("num_sets", None) if num_sets is None else num_sets
    sparsity = kwargs.pop("sparsity", None) if sparsity is None else sparsity
    binary = bool(kwargs.pop("binary", False)) or bool(binary)
    beta = kwargs.pop("beta", None) if beta is None else beta
    if features is not None:
        features = jnp.asarray(check_data(features, "features"))
        num_features = int(features.shape[0])
        x = check_data(x, "x", dim=int(features.shape[1]))
    else:
        x = check_data(x, "x")
    units = num_features
    if num_sets is not None:
        units = gvq.features_per_set(num_features, num_sets) - 1
        kwargs["num_sets"] = int(num_sets)
    if sparsity is not None:
        check_finite(sparsity, "sparsity")
        if float(sparsity) < 0:
            raise ValueError(f"sparsity must be >= 0 (lambda of the penalty lambda s.s); got "
                             f"{sparsity}")
        kwargs["sparsity"] = float(sparsity)
    if binary:
        if beta is None:
            raise ValueError("binary=True needs beta > 0, the steepness of the squashing "
                             "sigmoid(beta (s @ F - 1/2)) (paper: 4.5)")
        check_positive(beta, "beta")
        values = np.unique(np.asarray(x))
        if not np.all(np.isin(values, (0.0, 1.0))):
            raise ValueError(
                f"binary=True needs data in {{0, 1}}; x has other values, e.g. "
                f"{values[~np.isin(values, (0.0, 1.0))][:5].tolist()}")
        if method != "exact":
            raise ValueError(
                f"binary=True: the energy is not quadratic in the states, so method {method!r} "
                "does not apply; use method='exact' (the program's energy at every state)")
        if units > MAX_PROGRAM_SEARCH_UNITS:
            raise ValueError(
                f"binary=True searches 2^units states per example; {units} switchable units "
                f"exceed the limit {MAX_PROGRAM_SEARCH_UNITS} (use feature sets)")
        kwargs["binary"], kwargs["beta"] = True, float(beta)
    elif beta is not None:
        raise ValueError("beta applies only with binary=True")
    if method == "exact" and num_sets is None:
        check_positive_int(num_features, "num_features", maximum=MAX_EXACT_FEATURES,
                           why=" for exhaustive search (2^num_features states per example)")
    elif method == "exact" and units > MAX_EXACT_FEATURES:
        raise ValueError(
            f"method 'exact' searches 2^{units} states per example; the limit is "
            f"{MAX_EXACT_FEATURES} units ({'per set' if num_sets else 'num_features'})")
    if METHODS[method].randomized and rng_key is None:
        raise MissingKeyError(f"method {method!r} is randomised: pass rng_key=jax.random.key(...)")
    if features is not None and METHODS[method].validate is not None and units > 0:
        sub = features if num_sets is None else features.reshape(
            num_sets, units + 1, -1)[0, :-1]
        METHODS[method].validate(sub, dict(options or {}))
    return features, x, kwargs, method
