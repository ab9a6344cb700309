"""GVQ learning: EM in the sigma -> 0 limit (M. Westerdijk, D. Barber and W. Wiegerinck,
"Deterministic generative models for fast feature discovery", Data Mining and Knowledge
Discovery 5(4), 2001, sec. 3.1).

The public fit :func:`fit_gvq`: it checks its arguments, builds the starts, runs the
EM step of :mod:`inference.gvq.algorithm` through the engine
(:func:`inference.engine.run`: restarts side by side under ``vmap``, convergence,
trace, progress bar, checkpoints, sharding over devices) and returns the restart with
the least error as a :class:`~inference.gvq.result.GVQResult`. A stream of batches is
fitted by passes (:func:`inference.gvq.stream.fit_gvq_stream`).

``fit_gvq`` is the GVQ case of :func:`inference.fit_map_em`: the same E-step, and its
least-squares M-step is fit_map_em's closed form for a program whose sigma -> 0
energy is ||x - s F||^2 (from the same start both take the same path; the tests and
``benchmarks/your_own_program.py`` show it). A program of the user's whose energy
depends on the features otherwise (an offset, weights, a prior on F) is learned by
fit_map_em itself, its features a parameter of the program.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpyro

from inference.association.map_em import fit_map_em
from inference.engine import run, select, warn_not_converged
from inference.engine.checkpoint import checkpointing
from inference.engine.protocol import method_options_of
from inference.engine.sharding import resolve_mesh
from inference.engine.streaming import is_stream
from inference.gvq.algorithm import (
    LEAST_SQUARES_RTOL,
    GVQInfo,
    GVQState,
    check_program,
    em_algorithm,
    init,
    init_states,
    initial_features,
    initial_set_features,
    least_squares_misfit,
    m_step,
    match_features,
    restart_features,
    step,
)
from inference.gvq.constraints import check_constraints
from inference.gvq.result import GVQResult, GVQTrace
from inference.gvq.stream import fit_gvq_stream
from inference.program.kwargs import freeze_options, split_model_kwargs
from ppl_models import gvq
from ppl_models.diagnostics import NumericalWarning
from ppl_models.validation import (
    MissingKeyError,
    check_positive,
    check_positive_int,
    check_rng_key,
)

__all__ = ["GVQState", "GVQInfo", "GVQResult", "GVQTrace", "init", "step", "fit_gvq",
           "initial_features", "initial_set_features", "m_step", "match_features",
           "restart_features"]


def fit_gvq(
    x,
    num_features: int,
    *,
    method: str = "exact",
    rng_key=None,
    max_iterations: int = 100,
    num_restarts: int = 4,
    init_features=None,
    num_sets: int | None = None,
    sparsity: float | None = None,
    binary: bool = False,
    beta: float | None = None,
    m_step_iterations: int = 50,
    model: Callable | None = None,
    model_kwargs: dict | None = None,
    latent: str = "s",
    noise=None,
    progress_bar: bool = False,
    tol: float | None = None,
    devices=None,
    mesh=None,
    checkpoint_path=None,
    checkpoint_every: int | None = None,
    resume_from=None,
    method_options: dict | None = None,
    **options,
) -> GVQResult:
    """Learn GVQ features by EM in the sigma -> 0 limit.

    Parameters
    ----------
    x : array (num_examples, dim)
        Data.
    num_features : int
        Number of features n (2^n codebook vectors); with ``num_sets``, all
        features of all sets, origins included.
    method : str
        Association method, one of :data:`inference.association.core.METHODS`
        (within each set when ``num_sets`` is given).
    rng_key : jax.random key
        Drives the random initialisation and randomised association methods.
    max_iterations : int
        Maximum number of EM iterations per restart.
    num_restarts : int
        Independent random initialisations, run in parallel under vmap; the one with
        the least final error is returned. EM is a local search (like k-means); on
        the planted problem of the tests one start finds the planted features about
        half of the time, four starts almost always.
    init_features : array (num_features, dim) or (num_restarts, num_features, dim), optional
        Start from these features instead of the random ones
        (:func:`initial_features`, :func:`initial_set_features`; with
        ``binary=True`` they are F_hat).
    num_sets : int, optional
        Multiple feature sets (sec. 5.1): ``num_features / num_sets`` features per
        set, the last of each set its origin (always on within the set); every
        example uses one set (winner-take-all association). One feature per set
        is ordinary vector quantisation (k-means).
    sparsity : float, optional
        lambda >= 0: the energy gains lambda s.s (sec. 5.2), through the program.
    binary, beta : bool, float
        Binary data (sec. 5.3, eq. 10): x in {0, 1}, features sigmoid(F_hat),
        reconstruction sigmoid(beta (s @ sigmoid(F_hat) - 1/2)); the result's
        ``features`` are F_hat. Association by the program's energy at every
        state (``method="exact"``), M-step by L-BFGS on F_hat.
    m_step_iterations : int
        L-BFGS iterations per M-step with ``binary=True``.
    model, model_kwargs, latent, noise
        The program and how its energy is read (see :func:`inference.associate`);
        ``noise=None`` is the GVQ limit, a float gives MAP-EM at that noise. The
        constraints are passed to the program as keyword arguments.
    progress_bar : bool
        Show a tqdm bar over iterations (ticked from inside the compiled loop).
    tol : float, optional
        Also stop when the error changes by at most ``tol`` relative to the last
        iteration. Default: 0 for ``"exact"`` (stop at the fixed point, where no
        association changes; 1e-6 with ``binary=True``, whose L-BFGS M-step moves the
        features a little at every iteration) and 1e-5 for the other methods, whose
        randomised associations may flicker between equally good states.
    devices : None, int or sequence of jax.Device
        Split the examples over these devices (:func:`inference.engine.sharding.resolve_mesh`):
        ``None`` uses all of ``jax.devices()`` when there are several (else the plain
        single-device path), an int the first that many. Each device associates its
        own rows; the M-step's sums S^T S and S^T X and the error are added over the
        devices (``shard_map`` and ``psum``) and F solves the normal equations
        (pseudo-inverse: the same minimum-norm answer as ``lstsq``). With
        ``method="exact"`` the result equals the single-device fit up to float
        rounding; randomised methods draw their random numbers per device, so they
        follow a different (equally valid) path. x is padded with masked rows to a
        multiple of the device count. Not with ``binary=True`` (its L-BFGS M-step)
        or ``progress_bar=True``.
    mesh : jax.sharding.Mesh, optional
        A mesh of your own instead of ``devices`` (one axis, or one named ``"data"``).
    checkpoint_path : str or os.PathLike, optional
        Write a checkpoint (every restart's loop carry: keys, iteration, state, error
        trace; the options and the SHA-256 of x) to this ``.npz`` file every
        ``checkpoint_every`` iterations (:mod:`inference.engine.checkpoint`; atomic: a
        killed process leaves the last one intact). Single device, without
        ``progress_bar``.
    checkpoint_every : int, optional
        Iterations per checkpoint (a positive int; needs ``checkpoint_path``).
    resume_from : str or os.PathLike, optional
        Continue from a checkpoint written by ``fit_gvq`` with the same x and
        options (else ``ValueError`` naming the option). The result is bit-identical
        to the uninterrupted fit; a checkpoint of a finished fit returns at once.
    method_options : dict, optional
        Options of the association method (``inference.associate``'s, e.g.
        ``{"chunk_size": 64}``), the same form as ``associate`` and ``map_states`` take.
    **options
        ``batch_size`` for a stream (below). The association method's options as
        keywords, the old form, still work for one release with a
        ``DeprecationWarning``; pass ``method_options`` instead.

    Returns
    -------
    GVQResult
        ``error`` is the mean reconstruction error per example (eq. 1, or eq. 10
        with ``binary=True``; without the sparsity penalty); ``trace`` a
        :class:`~inference.gvq.result.GVQTrace` cut at ``num_iterations``.

    ``x`` may also be a stream too large for memory (an ``np.memmap``, a callable
    returning a fresh iterator of batches, a list of batches, an
    :class:`inference.engine.streaming.BatchSource`; ``batch_size=`` rows per batch): the
    fit then runs by passes (:func:`inference.gvq.stream.fit_gvq_stream`, the
    same EM; ``states`` is None there, not with ``binary``, devices or checkpoints).

    Examples
    --------
    >>> import jax
    >>> from ppl_models import gvq
    >>> data = gvq.generate_planted(jax.random.key(0), 200, 4, 8, noise_scale=0.1)
    >>> fit = fit_gvq(data.x, 4, rng_key=jax.random.key(1))
    >>> fit.states.shape, bool(fit.converged)
    ((200, 4), True)
    >>> bool(match_features(fit.features, data.features)[1] < 0.05)  # the planted F
    True
    """
    batch_size = {"batch_size": options.pop("batch_size")} if "batch_size" in options else {}
    options = method_options_of("fit_gvq", method_options, options)
    if is_stream(x):
        if (devices, mesh, checkpoint_path, checkpoint_every, resume_from) != (None,) * 5:
            raise ValueError("devices, mesh and checkpoints apply to an in-memory x, not to "
                             "a stream of batches")
        return fit_gvq_stream(
            x, num_features, method=method, rng_key=rng_key, max_iterations=max_iterations,
            num_restarts=num_restarts, init_features=init_features, num_sets=num_sets,
            sparsity=sparsity, binary=binary, beta=beta, model=model,
            model_kwargs=model_kwargs, latent=latent, noise=noise, progress_bar=progress_bar,
            tol=tol, method_options=options, **batch_size)
    if batch_size:
        raise ValueError(f"batch_size applies to a stream of batches; x is one array (got "
                         f"batch_size={batch_size['batch_size']!r})")
    if rng_key is None:
        raise MissingKeyError("fit_gvq needs an explicit rng_key (e.g. jax.random.key(0))")
    check_rng_key(rng_key)
    mesh = resolve_mesh(devices, mesh)
    if mesh is not None and (binary or progress_bar):
        raise ValueError("devices/mesh: the sharded fit needs binary=False and "
                         f"progress_bar=False; got binary={binary!r}, "
                         f"progress_bar={progress_bar!r}")
    num_features = check_positive_int(num_features, "num_features")
    _, x, kwargs, method = check_constraints(
        None, x, num_sets=num_sets, sparsity=sparsity, binary=binary, beta=beta, method=method,
        model_kwargs=model_kwargs, rng_key=rng_key, options=options, num_features=num_features)
    max_iterations = check_positive_int(max_iterations, "max_iterations")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    m_step_iterations = check_positive_int(m_step_iterations, "m_step_iterations")
    if noise is not None:
        check_positive(noise, "noise")
    model = gvq.model if model is None else model
    key_init, key_run = jax.random.split(rng_key)
    keys = jax.random.split(key_run, num_restarts)
    starts = restart_features(key_init, x, num_features, num_restarts, init_features,
                              num_sets=kwargs.get("num_sets"), binary=kwargs.get("binary", False))
    check_constraints(starts[0], x, method=method, model_kwargs=kwargs, rng_key=rng_key,
                      options=options)
    if tol is None:
        tol = 1e-5 if method != "exact" else (1e-6 if kwargs.get("binary") else 0.0)
    if not isinstance(tol, int | float) or not tol >= 0:
        raise ValueError(f"tol must be a non-negative number; got {tol!r}")
    if (model is not gvq.model and not kwargs.get("binary") and "num_sets" not in kwargs
            and not least_squares_misfit(model, x, {**kwargs, "features": starts[0]},
                                         latent) <= LEAST_SQUARES_RTOL):
        return _fit_program(model, x, num_features, kwargs, method=method, rng_key=rng_key,
                            max_iterations=max_iterations, num_restarts=num_restarts,
                            init_features=init_features, latent=latent, noise=noise,
                            progress_bar=progress_bar, tol=tol, options=options,
                            unsupported=dict(devices=devices, mesh=mesh,
                                             checkpoint_path=checkpoint_path,
                                             checkpoint_every=checkpoint_every,
                                             resume_from=resume_from))
    check_program(model, x, kwargs, starts[0], latent, noise)
    dynamic, static = split_model_kwargs(kwargs)
    checkpointed = (checkpoint_path, checkpoint_every, resume_from) != (None, None, None)
    if checkpointed and (mesh is not None or progress_bar):
        raise ValueError("checkpoint_path/checkpoint_every/resume_from need the single-device "
                         f"fit without a progress bar; got devices={devices!r}, mesh={mesh!r}, "
                         f"progress_bar={progress_bar!r}")
    checkpoint = checkpointing(
        checkpoint_path, checkpoint_every, resume_from,
        dict(num_features=num_features, method=method, num_restarts=num_restarts,
             max_iterations=max_iterations, tol=tol, noise=noise,
             m_step_iterations=m_step_iterations, model=model, latent=latent,
             model_kwargs=kwargs, association_options=options, rng_key=rng_key),
        data=(x,), starts=starts)
    algorithm = em_algorithm(method=method, model=model, latent=latent, static_kwargs=static,
                             association_options=freeze_options(options),
                             m_step_iterations=m_step_iterations)
    states = init_states(x, starts, dynamic, static_kwargs=static)
    fitted = run(algorithm, states, (x,), (noise, dynamic, tol), keys=keys,
                 max_iterations=max_iterations, tol=tol, progress_bar=progress_bar, mesh=mesh,
                 checkpoint=checkpoint)
    errors = fitted.state.error
    if not bool(jnp.all(jnp.isfinite(errors))):
        warnings.warn("fit_gvq: some restarts ended with a non-finite error; they are skipped",
                      NumericalWarning, stacklevel=2)
    best = int(jnp.argmin(jnp.where(jnp.isfinite(errors), errors, jnp.inf)))
    state, trace, _, converged = select(fitted, best)
    warn_not_converged("fit_gvq", converged, max_iterations, "associations still changing")
    sets = None
    if "num_sets" in kwargs:
        sets = gvq.set_units(state.states, kwargs["num_sets"])[0]
    return GVQResult(
        features=state.features, states=state.states, error=state.error,
        trace=GVQTrace(trace.objective, trace.num_changed),
        num_iterations=fitted.num_iterations[best], converged=jnp.asarray(converged),
        restart_errors=errors, sets=sets,
    )


class _FeaturesParam:
    """A GVQ-shaped program, ``model(x, features=F, **kwargs)``, with F a
    ``numpyro.param`` drawn by :func:`initial_features` (hashable by the program, so that
    fit_map_em compiles once per program)."""

    def __init__(self, model):
        self.model = model

    def __call__(self, x, num_features, **kwargs):
        features = numpyro.param("features",
                                 lambda key: initial_features(key, x, num_features))
        return self.model(x, features=features, **kwargs)

    def __hash__(self):
        return hash((_FeaturesParam, self.model))

    def __eq__(self, other):
        return isinstance(other, _FeaturesParam) and other.model is self.model


def _fit_program(model, x, num_features, kwargs, *, method, rng_key, max_iterations,
                 num_restarts, init_features, latent, noise, progress_bar, tol, options,
                 unsupported):
    """fit_gvq on a program whose sigma -> 0 energy is not least squares in F: EM with the
    program's own M-step (:func:`inference.fit_map_em`), the features its parameter."""
    given = sorted(name for name, value in unsupported.items() if value is not None)
    if given:
        raise ValueError(
            f"{', '.join(given)}: the program's sigma -> 0 energy is not least squares in the "
            "features (an offset, weights or a prior on F), so fit_gvq learns it through "
            "inference.fit_map_em, which runs in memory on one device without checkpoints")
    init_params = None
    if init_features is not None:
        init_features = jnp.asarray(init_features)
        if init_features.ndim != 2:
            raise ValueError(
                "init_features: the program is learned through inference.fit_map_em, whose "
                "restarts share one start; pass one array (num_features, dim), got shape "
                f"{init_features.shape}")
        init_params = {"features": init_features}
    fitted = fit_map_em(_FeaturesParam(model), jnp.asarray(x), num_features, method=method,
                        rng_key=rng_key, max_iterations=max_iterations, tol=tol,
                        num_restarts=num_restarts, init_params=init_params, noise=noise,
                        sites=latent, method_options=options, progress_bar=progress_bar,
                        **kwargs)
    return GVQResult(
        features=fitted.params["features"], states=fitted.states[latent],
        error=jnp.asarray(fitted.objective), trace=GVQTrace(fitted.trace, fitted.num_changed),
        num_iterations=fitted.num_iterations, converged=jnp.asarray(fitted.converged),
        restart_errors=fitted.restart_objectives, sets=None)
