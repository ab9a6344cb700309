"""SVI on the GVQ program, as a baseline (see :mod:`inference.gvq.baselines`): :func:`fit_gvq_svi`.

``TraceEnum_ELBO`` sums the binary units out exactly and a point-mass guide on F
makes the fit maximum a posteriori F of the finite-noise program, by Adam. The SVI
runs through the engine (:func:`inference.engine.run`): an
:class:`~inference.engine.Algorithm` whose step is ``svi.update`` and whose objective
is the loss, run for exactly ``num_steps`` (the restarts side by side, checkpoints).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.infer import SVI, TraceEnum_ELBO
from numpyro.optim import Adam

from inference.association.core import associate
from inference.engine import select
from inference.engine.checkpoint import checkpointing
from inference.engine.svi import SVIFit, SVIProblem
from inference.gvq.algorithm import restart_features
from inference.gvq.baselines_association import MAX_ENUMERATED_FEATURES
from inference.gvq.result import GVQResult, GVQSVITrace
from inference.program.kwargs import split_model_kwargs
from ppl_models import gvq
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import (
    check_data,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_rng_key,
)

__all__ = ["fit_gvq_svi"]


def _gvq_svi(model, start, learning_rate):
    """The SVI of :func:`fit_gvq_svi` from ``start`` (a point-mass guide on F)."""
    def point_guide(x=None, **unused):
        loc = numpyro.param("F_loc", start)
        numpyro.sample("F", dist.Delta(loc).to_event(2))

    return SVI(model, point_guide, Adam(learning_rate), TraceEnum_ELBO(max_plate_nesting=1))


def _make(data, params, start, *, model, static_kwargs, learning_rate, num_features):
    """The SVI of :func:`fit_gvq_svi` (:class:`inference.engine.svi.SVIFit`): ``params`` is
    ``(noise, dynamic model kwargs)``; without a ``start`` zeros stand in for F."""
    (x,) = data
    noise, dynamic_kwargs = params
    if start is None:
        start = jnp.zeros((num_features, x.shape[1]), x.dtype)
    kwargs = {**dynamic_kwargs, **dict(static_kwargs), "sigma": noise, "split_states": True,
              "num_features": num_features}
    return SVIProblem(_gvq_svi(model, start, learning_rate), (x,), kwargs)


def _features(problem, state, data, params):
    """F of one restart from its SVI state."""
    return problem.svi.get_params(state)["F_loc"]


def fit_gvq_svi(
    x,
    num_features: int,
    *,
    rng_key,
    noise=0.1,
    num_steps: int = 1500,
    learning_rate: float = 0.05,
    num_restarts: int = 4,
    init_features=None,
    model: Callable | None = None,
    model_kwargs: dict | None = None,
    tol: float = 1e-4,
    checkpoint_path=None,
    checkpoint_every: int | None = None,
    resume_from=None,
    progress_bar: bool = False,
) -> GVQResult:
    """Learn F by SVI on the finite-noise program with enumerated binary units.

    The guide is a point mass on F (MAP); ``TraceEnum_ELBO`` sums the 2^n
    states of every example exactly, so the loss is -log p(x, F) up to the
    prior. Restarts use :func:`inference.gvq.em.initial_features`, the same
    initialisation as :func:`inference.fit_gvq`, and run in parallel.

    Parameters
    ----------
    x : array (num_examples, dim)
    num_features : int
    rng_key : jax.random key
    noise : float
        Observation noise of the program during learning (its ``sigma``).
    num_steps : int
        Adam steps per restart.
    learning_rate : float
        Adam step size.
    num_restarts : int
        Parallel restarts; the one with the lowest final loss is returned.
    init_features : array, optional
        (num_features, dim) or (num_restarts, num_features, dim).
    tol : float
        ``converged`` when the loss changed by less than ``tol`` (relative)
        over the last tenth of the steps.
    checkpoint_path : str or os.PathLike, optional
        Write a checkpoint (every restart's SVI state, with its key and optimiser
        state, the loss traces and the step; the options and the SHA-256 of x) to
        this ``.npz`` file every ``checkpoint_every`` steps (:mod:`inference.engine.checkpoint`;
        atomic: a killed process leaves the last one intact).
    checkpoint_every : int, optional
        Steps per checkpoint (a positive int; needs ``checkpoint_path``).
    resume_from : str or os.PathLike, optional
        Continue from a checkpoint written by ``fit_gvq_svi`` with the same x and
        options (else ``ValueError`` naming the option); the result is bit-identical
        to the uninterrupted run.
    progress_bar : bool
        A tqdm bar over the steps.

    Returns
    -------
    GVQResult
        ``error`` and ``states`` are those of the exact (sigma -> 0) association
        under the learned F, so they compare directly with :func:`fit_gvq`;
        ``trace.objective`` holds the per-example loss (-ELBO / num_examples) per step;
        ``num_iterations`` is ``num_steps``; ``restart_errors`` the final losses.

    Examples
    --------
    >>> import jax
    >>> from inference.gvq.em import match_features
    >>> from ppl_models import gvq
    >>> data = gvq.generate_planted(jax.random.key(0), 100, 3, 6, noise_scale=0.1)
    >>> fit = fit_gvq_svi(data.x, 3, rng_key=jax.random.key(1), num_steps=200)
    >>> fit.trace.objective.shape, bool(fit.converged)
    ((200,), True)
    >>> bool(match_features(fit.features, data.features)[1] < 0.1)  # the planted F
    True
    """
    x = check_data(x, "x")
    num_features = check_positive_int(num_features, "num_features",
                                      maximum=MAX_ENUMERATED_FEATURES,
                                      why=" for enumeration (2^num_features states)")
    num_steps = check_positive_int(num_steps, "num_steps")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    check_positive(noise, "noise")
    check_positive(learning_rate, "learning_rate")
    check_nonnegative(tol, "tol")
    check_rng_key(rng_key)
    model = gvq.model if model is None else model
    key_init, key_run = jax.random.split(rng_key)
    starts = restart_features(key_init, x, num_features, num_restarts, init_features)
    dynamic, static = split_model_kwargs(model_kwargs)
    keys = jax.random.split(key_run, num_restarts)
    noise_value = jnp.asarray(noise, x.dtype)
    checkpoint = checkpointing(
        checkpoint_path, checkpoint_every, resume_from,
        dict(num_features=num_features, noise=noise, num_steps=num_steps,
             learning_rate=learning_rate, num_restarts=num_restarts, model=model,
             model_kwargs=model_kwargs, rng_key=rng_key),
        data=(x,), starts=starts)
    fit = SVIFit(_make, "fit_gvq_svi", (("model", model), ("static_kwargs", static),
                                        ("learning_rate", learning_rate),
                                        ("num_features", num_features)))
    params = (noise_value, dynamic)
    fitted = fit.run(keys, (x,), params, num_steps=num_steps, starts=starts,
                     checkpoint=checkpoint, progress_bar=progress_bar)
    features = fit.read(fitted.state, (x,), params, _features)
    losses = fitted.trace.objective
    final = losses[:, -1]
    if not bool(jnp.all(jnp.isfinite(final))):
        warnings.warn("fit_gvq_svi: some restarts ended with a non-finite loss; they are skipped",
                      NumericalWarning, stacklevel=2)
    best = int(jnp.argmin(jnp.where(jnp.isfinite(final), final, jnp.inf)))
    _, trace, _, _ = select(fitted, best)
    tail = losses[best, -max(2, num_steps // 10):]
    converged = bool(jnp.abs(tail[-1] - tail[0]) <= tol * (jnp.abs(tail[-1]) + 1.0))
    if not converged:
        warnings.warn(f"fit_gvq_svi: loss still changing after {num_steps} steps; raise num_steps",
                      ConvergenceWarning, stacklevel=2)
    result = associate(features[best], x, model=model, model_kwargs=model_kwargs, check=False)
    error = jnp.mean(result.energy)
    return GVQResult(
        features=features[best], states=result.states, error=error,
        trace=GVQSVITrace(trace.objective / x.shape[0]), num_iterations=jnp.asarray(num_steps),
        converged=jnp.asarray(converged), restart_errors=final / x.shape[0],
    )
