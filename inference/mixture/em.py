"""EM, hard-cut EM and k-means on the Gaussian-mixture program (Xu (1995), sec. 4-5).

One program (:func:`ppl_models.mixture.model`), three limits of the YING-YANG
alternation (sec. 4.1-4.3), :func:`fit_mixture`'s ``mode``:

* ``"stochastic"`` -- SVQ = EM (eq. 17-18): responsibilities P(y | x_i) from the
  program, then weighted means, covariances and weights n_y / N;
* ``"map"`` -- MAP-VQ = hard-cut EM (eq. 19-20): every example goes to its most
  probable component, then the same updates with 0/1 weights;
* ``"nearest"`` -- NN-VQ = k-means (eq. 21-22): the program with spherical,
  equal covariances and equal weights in the sigma -> 0 limit
  (``inference.program.handlers.noiseless``: the energy of component y is
  ||x - m_y||^2), so every example goes to its nearest mean.

The E-step reads the program: it is traced once with ``y`` conditioned to every
component at once (the shape NumPyro's parallel enumeration uses), and the
log-joint log alpha_y + log N(x_i; m_y, Sigma_y) is the sum of the two sites'
log-probabilities (tested against ``TraceEnum_ELBO``). The M-step is closed form.
Covariances use the new means (the exact maximiser; the paper's eq. 18 prints
the old ones) plus a regulariser on the diagonal, as scikit-learn does (by default
1e-6 times the data's variance along each coordinate: scikit-learn's 1e-6 in the units
of standardised data).

How it is evaluated: a Gaussian log-density is linear in the sufficient
statistics t(x) = [x_i x_j (i <= j), x, 1] of the example, with coefficients
eta_y (the natural parameters) that :func:`natural_parameters` reads from the
traced site's distribution (``MultivariateNormal`` loc and scale_tril, ``Normal``
loc and scale, or ``noiseless``'s ``NoiselessGaussian`` loc) plus log alpha_y from
the site ``y``. So the whole (N, k) log-joint is one GEMM t(x) @ eta^T, and the
M-step's counts, sums and second moments are one GEMM R^T t(x). Every iteration
is a single pass over blocks of t(x) (computed once per fit, on data centred at
its mean to limit float cancellation) doing both products while the block is in
cache; a covariance whose moment form would lose more than a third of its digits
is recomputed about the new means (:func:`_cancellation_limit`). The same
program read by ``noiseless`` gives k-means its energies, ||x||^2 - 2 x . m_y +
||m_y||^2 in that form. ``component_log_joint`` is tested equal to NumPyro's
log-density of the program.

Criteria, computed for every fit at its final parameters (natural logarithms,
per example; the paper's constants -d log h - log N, common to every k, are
left out, b_0 = (d/2) log 2 pi is kept):

* ``L_stocha`` (eq. 14-16) at the posterior responsibilities: minus the mean
  log-likelihood;
* ``L_map`` (eq. 20): the same free energy at the 0/1 assignment to the most
  probable component, with the weights of the assignment (its -sum alpha log
  alpha term);
* ``L_NN`` (eq. 22): nearest-mean assignment, equal weights, one variance
  sigma^2 = E_MSE / d at its optimum; and ``J = log k + (d/2) log E_MSE`` (eq. 24).

For the fits chained as the paper orders them (k-means, then hard-cut EM from
its result, then EM from that) L_stocha <= L_map <= L_NN (tested).

Automatic selection (sec. 5.2, ``prune=True``): after every M-step a component
is discarded when its (soft) count n_y falls below ``min_count`` (default
d + 1 for full covariances, where fewer points make Sigma_y singular; 2
otherwise), or the smallest eigenvalue of its covariance in the data's units
(scaled by one over the data's standard deviation per coordinate) falls below
``variance_threshold`` plus twice the regulariser in those units (collapse onto a
point or a subspace, held up by the regulariser alone), or its weight reaches zero;
its weight becomes 0 and it takes no further part. The result's
``trace.num_components`` records the surviving count per iteration. Started large,
this literal rule rarely removes a redundant component (it keeps its points and stays
non-singular);
``weight_rule="mml"`` is a named variant that does (see :func:`fit_mixture`
and ``examples/yingyang_selection.py``).

Starts: by default ten, each k-means++ seeds refined by Lloyd's k-means with the
clusters' moments as the start (scikit-learn's ``GaussianMixture`` start), run side by
side by the engine; the fit returned is the best by the final objective
(``num_restarts``, ``init``).

The iteration is an engine step (:mod:`inference.mixture.algorithm`):
:func:`fit_mixture` checks its arguments, builds the start and hands the step to
:func:`inference.engine.run`, which runs the loop, keeps the trace, writes the
checkpoints and splits the examples over devices; a stream of batches goes to
:func:`inference.mixture.stream.fit_mixture_stream` (the engine's passes).

References
----------
L. Xu, "YING-YANG machine: a Bayesian-Kullback scheme for unified learnings and new
results on vector quantization", Proceedings of the International Conference on Neural
Information Processing (ICONIP'95), 1995, sec. 4.1-4.3 (eq. 13-22), 5.1 (eq. 24),
5.2.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from inference.engine import host, run, select
from inference.engine.checkpoint import checkpointing, jsonable
from inference.engine.sharding import mesh_size, resolve_mesh
from inference.engine.streaming import is_stream
from inference.mixture import stream as streaming
from inference.mixture import sweep
from inference.mixture.algorithm import (
    Params,
    em_algorithm,
    finish,
    finish_sharded,
    initial_states,
    layout,
    pad_rows,
    prepare,
    prepare_padded,
)
from inference.mixture.checks import (
    check_end,
    check_options,
    check_reg_covar,
    data_scale,
    initial_state,
    is_prefix,
    take,
)
from inference.mixture.criteria import criteria
from inference.mixture.features import component_log_joint, natural_parameters, quadratic_features
from inference.mixture.result import MODES, MixtureResult, MixtureTrace
from inference.mixture.seeding import has_distinct_rows
from inference.mixture.starts import best_start, engine_keys, stack_states, start_keys
from inference.mixture.sweep import EMState
from ppl_models.validation import (
    MissingKeyError,
    check_data,
    check_nonnegative,
    check_positive_int,
    check_rng_key,
)

__all__ = ["MixtureResult", "fit_mixture", "component_log_joint", "criteria", "MODES",
           "quadratic_features", "natural_parameters"]


def fit_mixture(x, num_components: int, *, mode: str = "stochastic", covariance: str = "full",
                prune: bool = True, rng_key=None, init: str = "kmeans", init_means=None,
                init_weights=None, init_covariances=None, max_iterations: int = 200,
                tol: float = 1e-7, reg_covar: float | None = None, min_count=None,
                variance_threshold: float = 1e-6, weight_rule: str = "ml", devices=None,
                mesh=None, batch_size=None, checkpoint_path=None,
                checkpoint_every: int | None = None, resume_from=None,
                progress_bar: bool = False, num_restarts: int | None = None) -> MixtureResult:
    """Fit the Gaussian-mixture program by EM, hard-cut EM or k-means (module docstring).

    The generic call: each mode is :func:`inference.fit_em` on the same program with its
    parameters as ``numpyro.param`` sites (:func:`inference.em.programs.mixture_program`):
    ``"stochastic"`` is ``fit_em(mixture_program, x, k, covariance=..., e_step="soft")``,
    ``"map"`` the same with ``e_step="hard"``, and ``"nearest"`` is
    ``fit_em(mixture_program, x, k, covariance="spherical", weights=..., scales=...,
    e_step="hard", noise=None)`` with the weights fixed equal (the scales, fixed too, drop
    out in the limit). From the same start (``init="program"`` there), with
    ``prune=False`` and ``reg_covar=0``, both give the same iterates and fixed point:
    to rounding for k-means, whose M-step is in closed form on both sides, and to 1e-6
    relative otherwise, where ``fit_em`` solves the M-step by L-BFGS with
    ``m_step_iterations=100`` (its default 30 can stop short of the maximiser by 1e-3
    relative when it learns the weights too; ``tests/test_em_families.py``). This fit is
    the fast one: a closed-form M-step and one pass over the data per iteration.

    Parameters
    ----------
    x : array (num_examples, d)
    num_components : int
        Components at the start (k >= 1, at most the number of distinct examples).
    mode : {"stochastic", "map", "nearest"}
    covariance : {"full", "diag", "spherical"}
        Family of Sigma_y (``"nearest"`` always uses one shared sigma^2 I).
    prune : bool
        Discard collapsing components (sec. 5.2). Without pruning a collapsing
        component stays, held up by ``reg_covar``, and a warning says so.
    rng_key : jax.random key
        For the initial means (required unless ``init_means`` is given). The first
        start draws its means from ``rng_key`` itself (so ``num_restarts=1`` is the
        single fit of earlier versions), the others from keys split off it.
    num_restarts : int, optional
        Starts run side by side (each drawn by ``init``); the fit returned is the one
        with the lowest final objective (``L_stocha`` = minus the mean log-likelihood
        for ``"stochastic"``) among those without a collapsed component (all of them
        if every start collapsed). Default :data:`DEFAULT_RESTARTS` (10) with the
        default ``init="kmeans"``; 1 with ``init_means`` and with ``"kmeans++"`` or
        ``"random"`` (the single starts of earlier versions and of the paper's sec. 5.2
        experiment; pass ``num_restarts`` to run several). One start is a gamble on real data: on
        scikit-learn's iris set at k = 6 single starts end 0.03 - 0.15 nats per example
        below ``GaussianMixture``'s fit and five can still miss it by 0.06; ten reach
        it for every key tried, and on iris, wine and breast cancer (k = 1 .. 6) reach
        or pass every healthy scikit-learn fit (``benchmarks/real_data_parity.py``).
        The starts run one after another in one compiled loop; on data of this size
        ten cost a fraction of a second once compiled.
    init : {"kmeans", "kmeans++", "random"}
        ``"kmeans"`` (default): k-means++ seeds refined by Lloyd's k-means, and the
        weights, means and covariances (plus the regulariser) of its clusters -- the
        start of scikit-learn's ``GaussianMixture``. ``"kmeans++"``: k-means++ seeds
        as the means, or ``"random"``: random examples plus small noise (the paper's
        sec. 5.2 start); both with initial covariances the data's mean variance / k
        times I (sec. 5.2) and equal weights.
    init_means, init_weights, init_covariances : arrays, optional
        Explicit start (k, d), (k,), (k, d, d).
    max_iterations, tol : int, float
        Stop after ``max_iterations`` or when the objective changes by at most
        ``tol`` relative (or, for the hard modes, no assignment changes).
    reg_covar : float, optional
        Added to every covariance's diagonal. Default (None): 1e-6 times the data's
        variance along each coordinate (``"full"``/``"diag"``; the mean variance for
        ``"spherical"``), i.e. scikit-learn's absolute default 1e-6 in the units of the
        standardised data. Relative so that the fit does not depend on the units of a
        feature: an absolute 1e-6 is nothing next to a feature whose variance is 1e5
        and most of one whose variance is 1e-5 (scikit-learn's breast-cancer set has
        both), and a covariance whose scales span ten orders of magnitude loses its
        Cholesky factor in float32. A number: that absolute value on every coordinate
        (scikit-learn's meaning; 0 for none).
    min_count : float, optional
        Pruning threshold on n_y (default d + 1 for full covariances, else 2).
    variance_threshold : float
        Collapse threshold: a component has collapsed when the smallest eigenvalue of
        its covariance in the data's units (scaled by one over the data's standard
        deviation per coordinate, the mean one for ``"spherical"``) is below
        ``variance_threshold`` plus twice the regulariser in those units, i.e. its
        variance in some direction is held up by ``reg_covar`` alone. ``prune=True``
        discards it; ``prune=False`` keeps it and lists it in ``collapsed``.
    weight_rule : {"ml", "mml"}
        ``"ml"``: alpha_y = n_y / N (eq. 17, the paper). ``"mml"``: a named
        variant, not the paper's: alpha_y proportional to max(n_y - p/2, 0) with
        p the free parameters of one component (mean and covariance), the
        minimum-message-length update of Figueiredo and Jain (2002). A component
        that does not pay for its parameters loses weight, then its points, and
        is discarded when its weight reaches zero (sec. 5.2's rule). Needs
        ``prune=True`` and a mode other than ``"nearest"`` (equal weights).
    devices : None, int or sequence of jax.Device
        Split the examples over these devices (:func:`inference.engine.sharding.resolve_mesh`):
        ``None`` uses all of ``jax.devices()`` when there are several (else the plain
        single-device path), an int the first that many. Every iteration's sweep
        runs on each device's rows and its statistics are summed over the devices
        (``shard_map`` and ``psum``); the result equals the single-device fit up to
        float rounding. Any number of examples works: x is padded with masked rows
        to a multiple of the device count. The initial means (k-means++) and the
        input checks run on the whole x as before.
    mesh : jax.sharding.Mesh, optional
        A mesh of your own instead of ``devices`` (one axis, or one named ``"data"``).
    batch_size : int, optional
        Rows per batch when x is read as a stream (below).
    checkpoint_path : str or os.PathLike, optional
        Write a checkpoint (the EM loop's carry and the options, with the SHA-256 of
        x) to this ``.npz`` file every ``checkpoint_every`` iterations
        (:mod:`inference.engine.checkpoint`; atomic: a killed process leaves the last one
        intact). In-memory x on one device only (not streams, ``devices`` or ``mesh``).
    checkpoint_every : int, optional
        Iterations per checkpoint (a positive int; needs ``checkpoint_path``).
    resume_from : str or os.PathLike, optional
        Continue from a checkpoint written by ``fit_mixture`` with the same x and
        options (else ``ValueError`` naming the option). The result is bit-identical
        to the uninterrupted fit; a checkpoint of a finished fit returns at once.
    progress_bar : bool
        A tqdm bar over the iterations (in-memory x on one device).

    ``x`` may also be a stream too large for memory: an ``np.memmap``, a callable
    returning a fresh iterator of (rows, d) batches, a list of batches or a
    :class:`inference.mixture.stream.BatchSource`. The fit then runs by passes over the
    batches (:func:`inference.mixture.stream.fit_mixture_stream`): the same algorithm and
    result, except that ``labels`` is None (call that function with
    ``return_labels=True`` for them). Streams are not split over devices and run one start
    unless ``num_restarts`` says more (``init="kmeans++"`` by default: k-means++ seeds from
    the first batch).

    Returns
    -------
    MixtureResult

    Examples
    --------
    >>> import jax
    >>> from ppl_models import mixture
    >>> data = mixture.generate(jax.random.key(0), 200, 3, 2, separation=8.0)
    >>> fits = [fit_mixture(data.x, 3, mode=mode, rng_key=jax.random.key(1))
    ...         for mode in ("stochastic", "map", "nearest")]  # EM, hard-cut EM, k-means
    >>> [(fit.num_components, bool(fit.converged)) for fit in fits]
    [(3, True), (3, True), (3, True)]
    >>> # each finds the planted clusters: 3 distinct (learned, planted) label pairs
    >>> [len(set(zip(fit.labels.tolist(), data.labels.tolist()))) for fit in fits]
    [3, 3, 3]
    """
    check_options(mode, covariance, weight_rule, prune, init)

    if is_stream(x):
        if devices is not None or mesh is not None:
            raise ValueError("devices= and mesh= apply to an in-memory x, not to a stream "
                             f"of batches; got devices={devices!r}, mesh={mesh!r}")
        if (checkpoint_path, checkpoint_every, resume_from) != (None, None, None):
            raise ValueError("checkpoint_path/checkpoint_every/resume_from apply to an "
                             "in-memory x, not to a stream of batches")
        return streaming.fit_mixture_stream(
            x, num_components, mode=mode, covariance=covariance, prune=prune,
            rng_key=rng_key, init=init, init_means=init_means, init_weights=init_weights,
            init_covariances=init_covariances, max_iterations=max_iterations, tol=tol,
            reg_covar=reg_covar, min_count=min_count, variance_threshold=variance_threshold,
            weight_rule=weight_rule, batch_size=batch_size,
            num_restarts=1 if num_restarts is None else num_restarts, progress_bar=progress_bar)
    if batch_size is not None:
        raise ValueError(f"batch_size applies to a stream of batches; x is one array "
                         f"(got batch_size={batch_size!r})")
    mesh = resolve_mesh(devices, mesh)
    x = check_data(x, "x")
    num, dim = x.shape
    bucket = sweep.BUCKET_ROWS and mesh is None  # read at each call
    k = check_positive_int(num_components, "num_components")
    if not has_distinct_rows(np.asarray(x), k):
        distinct = int(np.unique(np.asarray(x), axis=0).shape[0])
        raise ValueError(f"num_components={k} exceeds the {distinct} distinct example(s) in x")
    if bucket:  # on the host: jnp.var would compile a program per number of examples
        spread = float(np.mean(np.var(np.asarray(x, np.float64), axis=0)))
    else:
        spread = float(jnp.mean(jnp.var(x, axis=0)))
    if spread == 0.0:
        raise ValueError("x has no spread (every example is the same point): nothing to fit")
    max_iterations = check_positive_int(max_iterations, "max_iterations")
    if reg_covar is not None:
        check_nonnegative(reg_covar, "reg_covar")
        check_reg_covar(reg_covar, spread)
    check_nonnegative(tol, "tol")
    check_nonnegative(variance_threshold, "variance_threshold")
    if min_count is not None:
        check_nonnegative(min_count, "min_count")
    if rng_key is not None:
        check_rng_key(rng_key)
    if mode == "nearest":
        covariance = "spherical"
    # After the override: k-means fits spherical clusters, so d + 1 points are not needed.
    min_count = (dim + 1 if covariance == "full" else 2) if min_count is None else min_count
    if init_means is None and rng_key is None:
        raise MissingKeyError("rng_key is required unless init_means is given")
    if num_restarts is None:
        num_restarts = DEFAULT_RESTARTS if init_means is None and init == "kmeans" else 1
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    if init_means is not None and num_restarts > 1:
        raise ValueError(f"num_restarts={num_restarts} needs means drawn by init; "
                         "init_means gives one start (use num_restarts=1)")
    scale = data_scale(x, covariance, reg_covar, variance_threshold)
    devices_count = 1 if mesh is None else mesh_size(mesh)
    block, rows = layout(num, dim, covariance, devices_count, bucket=bucket)
    padded = None
    if bucket:  # x padded to its bucket, num traced: every program below serves the bucket
        padded = (pad_rows(x, rows), jnp.asarray(np.int32(num)))
    starts = [initial_state(x, k, spread, covariance, init, key, init_means, init_weights,
                            init_covariances, weight_rule, reg=scale.reg, padded=padded)
              for key in start_keys(rng_key, num_restarts)]
    weight_offset = starts[0][1]
    state = starts[0][0] if num_restarts == 1 else stack_states([start for start, _ in starts])
    if mesh is not None and (checkpoint_path, checkpoint_every, resume_from) != (None,) * 3:
        raise ValueError("checkpoint_path/checkpoint_every/resume_from: checkpoints need the "
                         f"single-device fit; got devices={devices!r}, mesh={mesh!r}")
    checkpoint = checkpointing(
        checkpoint_path, checkpoint_every, resume_from,
        dict(mode=mode, covariance=covariance, max_iterations=max_iterations, prune=prune,
             num_components=k, tol=tol, reg_covar=reg_covar, min_count=min_count,
             variance_threshold=variance_threshold, weight_rule=weight_rule, init=init,
             rng_key=jsonable(rng_key), num_restarts=num_restarts),
        data=(x,), initial_state=tuple(state))
    if bucket:
        data, shift = prepare_padded(*padded, covariance=covariance, block=block)
    else:
        data, shift = prepare(x, covariance=covariance, block=block, rows=rows)
    params = Params(shift, *(jnp.asarray(value, x.dtype) for value in (
        tol, scale.reg, min_count, scale.floor, weight_offset, scale.inv_scale)),
        num=jnp.asarray(num, x.dtype) if bucket else None)
    algorithm = em_algorithm(mode=mode, covariance=covariance, prune=prune, block=block,
                             num=None if bucket else num)
    states = initial_states(state, labels=rows if mode != "stochastic" else 1)
    fitted = run(algorithm, states, data, params, keys=engine_keys(num_restarts),
                 max_iterations=max_iterations, tol=tol, mesh=mesh, checkpoint=checkpoint,
                 progress_bar=progress_bar)
    best = 0 if num_restarts == 1 else best_start(fitted.state, scale, mode=mode,
                                                   prune=prune)
    final, trace, it, done = select(fitted, best)
    state = EMState(final.weights, final.means, final.covariances, final.active)
    if bucket:
        values, labels, nearest = finish(*data, shift, state, covariance=covariance,
                                         block=block, map_is_nearest=mode == "nearest",
                                         masked=True)
        # The examples' labels, cut on the host (a slice per num would compile).
        labels, nearest = host.head(labels, num), host.head(nearest, num)
    elif mesh is None:
        values, labels, nearest = finish(x, data[1], data[2], shift, state,
                                         covariance=covariance, block=block,
                                         map_is_nearest=mode == "nearest")
    else:
        values, labels, nearest = finish_sharded(data, shift, state, covariance=covariance,
                                                 block=block, map_is_nearest=mode == "nearest",
                                                 mesh=mesh)
        labels, nearest = labels[:num], nearest[:num]
    values, active = jax.device_get((values, state.active))
    keep, collapsed = check_end("fit_mixture", "x", state, active, done, k, num, dim,
                                 mode=mode, prune=prune, min_count=min_count,
                                 variance_threshold=variance_threshold, spread=spread,
                                 reg_covar=reg_covar, max_iterations=max_iterations,
                                 scale=scale)
    weights, means, cov = (take(state.weights, keep), take(state.means, keep),
                           take(state.covariances, keep))
    values = {name: float(value) for name, value in values.items()}
    # Labels index the surviving components (the fit's criteria are over those only).
    labels = nearest if mode == "nearest" else labels
    if not is_prefix(keep):
        labels = host.take(np.asarray(np.cumsum(active) - 1, np.int32), labels)
    traces = (trace.objective, trace.num_components)
    return MixtureResult(
        weights=weights, means=means, covariances=cov, num_components=int(keep.size),
        labels=labels, L_stocha=values["L_stocha"], L_map=values["L_map"],
        L_NN=values["L_NN"], J=values["J"], trace=MixtureTrace(*traces),
        num_iterations=it, converged=bool(done),
        num_start=k, mode=mode, covariance=covariance,
        collapsed=tuple(int(np.searchsorted(keep, c)) for c in collapsed))



#: Starts of :func:`fit_mixture` when its means are drawn (``num_restarts=None``).
DEFAULT_RESTARTS = 10


#: The starts' helpers under their former names here (:mod:`inference.mixture.starts`).
_keys, _start_keys, _stack, _best_start = engine_keys, start_keys, stack_states, best_start
