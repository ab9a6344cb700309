"""SVI on the clipped-Gaussian program, as a baseline (see :mod:`inference.clipped.baselines`):
:func:`fit_clipped_svi`.

W (and xi) are point estimates and every pattern's y has a mean-field Gaussian
guide; the SVI runs through the engine (:func:`inference.engine.run`): an
:class:`~inference.engine.Algorithm` whose step is ``svi.update`` and whose objective
is the loss per observed spin, run for exactly ``num_steps`` (the step reports its own
``converged``, the test on the middle of the run, at the last step).

References
----------
Kingma, Ba, "Adam", ICLR 2015.
"""

from __future__ import annotations

import warnings
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from numpyro import handlers
from numpyro.infer import SVI, TraceMeanField_ELBO, init_to_median, init_to_value
from numpyro.infer.autoguide import AutoDelta, AutoGuideList, AutoNormal

from inference.clipped.baselines_common import check_arguments, initial_weights, program_kwargs
from inference.engine import Algorithm, run, select
from inference.engine.persistence import register_renamed_fields, wrap_trace
from inference.engine.protocol import follows_protocol
from inference.engine.svi import SVIFit, SVIInfo, SVIProblem, svi_init, svi_update
from ppl_models import clipped_gaussian
from ppl_models.clipped_gaussian import DEFAULT_NOISE
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import check_positive, check_positive_int

__all__ = ["fit_clipped_svi", "ClippedSVIResult", "ClippedSVITrace", "ClippedSVIState",
           "svi_step"]

#: Adam's step size decays by a cosine to this fraction of ``learning_rate``.
FINAL_FRACTION = 0.01


class ClippedSVITrace(NamedTuple):
    """Per-step arrays of :func:`fit_clipped_svi` (all ``num_steps`` steps run).

    Attributes
    ----------
    objective : array (num_steps,)
        -ELBO per step divided by the number of observed spins (num_examples N).
    """

    objective: jax.Array


@follows_protocol("loss", "min")
class ClippedSVIResult(NamedTuple):
    """Result of :func:`fit_clipped_svi`.

    Attributes
    ----------
    weights : array (N, P)
        Point estimate of W (one rotation of the columns among equally good ones).
    bias : array (N,)
        Point estimate of xi (zeros with ``bias=False``).
    trace : ClippedSVITrace
        ``objective``: -ELBO per step divided by the number of observed spins.
    num_iterations : int
        Steps run (``num_steps``).
    converged : bool
        The loss levelled off mid-run (see ``tol`` of :func:`fit_clipped_svi`).
    hidden_loc, hidden_scale : arrays (num_examples, P)
        The Gaussian q(y) of every pattern.
    noise : float
        sigma of the program that was fitted (score it at this noise).
    recorded_weights, recorded_bias : arrays (num_records, N, P), (num_records, N)
        W and xi after every ``record_every`` steps, or None.
    restart_objectives : array (num_restarts,) or None
        Every start's mean loss over the last tenth of its steps when ``num_restarts``
        > 1 (the result is the start with the lowest); None for one start.
    """

    weights: jax.Array
    bias: jax.Array
    trace: ClippedSVITrace
    num_iterations: int
    converged: bool
    hidden_loc: jax.Array
    hidden_scale: jax.Array
    noise: float
    recorded_weights: jax.Array | None = None
    recorded_bias: jax.Array | None = None
    restart_objectives: jax.Array | None = None


register_renamed_fields(ClippedSVIResult, {"loss_trace": "trace", "num_steps": "num_iterations",
                                           "checkpoint_weights": "recorded_weights",
                                           "checkpoint_bias": "recorded_bias"},
                        convert=wrap_trace(ClippedSVITrace))


class ClippedSVIState(NamedTuple):
    """One start's state: the SVI state (with its own key and step count), the step
    index, the losses of the fifth and seventh tenths of the steps (the convergence
    test) and W, xi after every ``record_every`` steps."""

    svi: object
    step: jax.Array
    early: jax.Array
    late: jax.Array
    weights: jax.Array
    bias: jax.Array


def _svi(num_steps, learning_rate, init_weights, bias):
    """SVI with Adam (cosine decay) and the guide: AutoDelta on W, xi + AutoNormal on y."""
    point_sites = ["W", "xi"] if bias else ["W"]
    init_values = {"W": init_weights,
                   "xi": jnp.zeros(init_weights.shape[0], init_weights.dtype)}
    model = clipped_gaussian.model
    guide = AutoGuideList(model)
    guide.append(AutoDelta(handlers.block(model, expose=point_sites), prefix="point",
                           init_loc_fn=init_to_value(values=init_values)))
    guide.append(AutoNormal(handlers.block(model, hide=point_sites), prefix="hidden",
                            init_loc_fn=init_to_median))
    schedule = optax.cosine_decay_schedule(learning_rate, num_steps, alpha=FINAL_FRACTION)
    return SVI(model, guide, optax.adam(schedule), TraceMeanField_ELBO())


def _make(data, params, start, *, num_hidden, bias, num_steps):
    """The SVI of :func:`fit_clipped_svi` (:mod:`inference.engine.svi`): ``params`` is
    ``(noise, learning_rate)``, ``start`` the initial W (None: zeros, where only the
    shapes matter)."""
    (spins,) = data
    noise, learning_rate = params
    if start is None:
        start = jnp.zeros((spins.shape[1], num_hidden), spins.dtype)
    kwargs = {"noise": noise, "num_hidden": num_hidden, **program_kwargs(bias)}
    return SVIProblem(_svi(num_steps, learning_rate, start, bias), (spins,), kwargs)


def _point(svi, svi_state, spins, bias):
    """W and xi (zeros with ``bias=False``) of an SVI state."""
    params = svi.get_params(svi_state)
    xi = params["xi_point_loc"] if bias else jnp.zeros(spins.shape[1], spins.dtype)
    return params["W_point_loc"], xi


def svi_step(rng_key, state, data, params, *, shard, num_hidden, bias, num_steps,
             record_every):
    """One Adam step (``svi.update``) as an :class:`~inference.engine.Algorithm` step.

    The SVI state carries its own key, so ``rng_key`` is unused. The losses of the
    fifth and seventh tenths of the steps are kept; at the last step ``converged`` is
    their test (``tol`` of :func:`fit_clipped_svi`), before it always False.
    """
    (spins,) = data
    noise, learning_rate, tol = params
    problem, svi_state, loss = svi_update(_make, state.svi, data, (noise, learning_rate),
                                          num_hidden=num_hidden, bias=bias,
                                          num_steps=num_steps)
    loss = loss / spins.size
    i = state.step
    tenth = state.early.shape[0]

    def kept(block, index):  # the loss written into its slot of a tenth of the steps
        inside = (index >= 0) & (index < tenth)
        slot = jnp.clip(index, 0, tenth - 1)
        return block.at[slot].set(jnp.where(inside, loss, block[slot]))

    early, late = kept(state.early, i - 4 * tenth), kept(state.late, i - 6 * tenth)
    weights, xi = _point(problem.svi, svi_state, spins, bias)
    slot = jnp.clip((i + 1) // record_every - 1, 0, state.weights.shape[0] - 1)
    write = (i + 1) % record_every == 0
    history_w = state.weights.at[slot].set(jnp.where(write, weights, state.weights[slot]))
    history_b = state.bias.at[slot].set(jnp.where(write, xi, state.bias[slot]))
    mean_early, mean_late = jnp.mean(early), jnp.mean(late)
    levelled = (num_steps >= 20) & (mean_early - mean_late <= tol * jnp.abs(mean_late))
    converged = (i == num_steps - 1) & levelled
    return (ClippedSVIState(svi_state, i + 1, early, late, history_w, history_b),
            SVIInfo(loss, converged))


@partial(jax.jit, static_argnames=("num_hidden", "bias", "num_steps", "record_every"))
def _svi_states(keys, spins, noise, learning_rate, init_weights, *, num_hidden, bias,
                num_steps, record_every):
    """The state of every start before the first step: ``init_weights`` (N, P) shared by
    the starts, or (num_starts, N, P), one per start."""
    tenth = max(1, num_steps // 10)
    count = num_steps // record_every
    num_units = spins.shape[1]

    def one(key, init_weights):
        svi_state = svi_init(_make, key, (spins,), (noise, learning_rate), init_weights,
                             num_hidden=num_hidden, bias=bias, num_steps=num_steps)
        return ClippedSVIState(svi_state, jnp.zeros((), jnp.int32),
                               jnp.zeros(tenth, spins.dtype), jnp.zeros(tenth, spins.dtype),
                               jnp.zeros((count, num_units, num_hidden), spins.dtype),
                               jnp.zeros((count, num_units), spins.dtype))

    return jax.vmap(one, in_axes=(0, 0 if init_weights.ndim == 3 else None))(keys, init_weights)


def _hidden(problem, svi_state, data, params):
    """The Gaussian q(y) of every pattern (loc, scale) from a final SVI state."""
    values = problem.svi.get_params(svi_state)
    return values["y_hidden_loc"], values["y_hidden_scale"]


def fit_clipped_svi(s, num_hidden: int, *, rng_key, noise: float = DEFAULT_NOISE,
                    bias: bool = True, num_steps: int = 2000, learning_rate: float = 0.1,
                    init_weights=None, record_every: int | None = None, tol: float = 0.05,
                    progress_bar: bool = False, num_restarts: int = 1) -> ClippedSVIResult:
    """Learn W (and xi) by SVI on the clipped-Gaussian program at noise sigma.

    Guide: ``AutoGuideList`` of ``AutoDelta`` on the global W and xi (point
    estimates: the maximum a posteriori W, as EM would give, and a point W is
    what Lee and Sompolinsky (1999) learn; a distribution over W would only smear it over its
    rotations) and ``AutoNormal`` on the per-pattern y (a mean-field Gaussian
    q(y_mu) per pattern, whose parameters are (num_examples, P) arrays in the
    plate; ``AutoMultivariateNormal`` would couple all num_examples P hidden
    values in one dense covariance). Both guides are built from the program by
    blocking sites, so nothing is re-typed. Loss: ``TraceMeanField_ELBO``,
    which uses the closed-form KL(q(y) || N(0, I)) and so removes the prior's
    sampling noise from the gradient (the likelihood is still estimated from one
    draw of y). Optimiser: Adam with its step size decayed by a cosine from
    ``learning_rate`` to 1% of it over ``num_steps`` (constant step sizes were
    seen to stall at the gradient noise and then drift; ``benchmarks/clipped.py``
    sweeps ``learning_rate``). The steps run in the engine's one jitted loop
    (:func:`inference.engine.run`).

    At small sigma the posterior of a pattern's y is a cell of hidden space with
    steep walls, far from the Gaussian q(y): started at the planted W the ELBO's
    optimum still shrinks W (row norms about 0.8 instead of 1) and biases xi, so
    the held-out moment error of SVI levels off at 1.5-3x the arcsine fit's
    (``ppl-zoo compare clipped``, ``benchmarks/clipped.py``).

    Parameters
    ----------
    s : array (num_examples, N)
        Patterns of -1 / +1, or of 0 / 1.
    num_hidden : int
        P, 1 <= P <= N.
    rng_key : jax.random key
        Drives the initial W (a draw from its prior unless ``init_weights``) and SVI.
    noise : float
        sigma of the program's probit layer (> 0).
    bias : bool
        Learn xi; ``False`` fits the zero-bias program (``bias=0.0``).
    num_steps : int
        Adam steps.
    learning_rate : float
        Adam's initial step size.
    init_weights : array (N, P), optional
        Initial W.
    record_every : int, optional
        Record W and xi every this many steps (must divide ``num_steps``):
        ``recorded_weights``, ``recorded_bias`` of the result.
    tol : float
        ``converged`` when the mean loss fell by at most ``tol`` (relative) from
        the fifth to the seventh tenth of the steps, while the step size is still
        65% to 35% of its start. The end of the run says nothing: there the
        decaying step size itself lowers the loss (less gradient noise), by a few
        percent in runs that have long stopped learning, and flattens it in runs
        far too short.
    progress_bar : bool
        tqdm bar over the steps, advanced from inside the jitted loop.
    num_restarts : int
        Starts run side by side (``vmap``) in the engine's one compiled loop, each with
        its own initial W (unless ``init_weights``) and SVI key; the fit returned is the
        one with the lowest mean loss over the last tenth of its steps (the loss of one
        step is a one-draw estimate, too noisy to rank starts by; non-finite ones are
        skipped). One start (the default) uses ``rng_key`` itself, more
        ``jax.random.split(rng_key, num_restarts)`` (start i is the fit with ``rng_key``
        that key, up to float rounding); ``restart_objectives`` lists every start's.

    Returns
    -------
    ClippedSVIResult

    Warns
    -----
    ConvergenceWarning
        When the loss still falls by more than ``tol`` in the middle of the run.
    NumericalWarning
        When the loss or W is not finite.

    Examples
    --------
    >>> import jax, jax.numpy as jnp
    >>> from jax.scipy.stats import norm
    >>> from ppl_models import clipped_gaussian
    >>> data = clipped_gaussian.generate(jax.random.key(0), 500, 8, 2)
    >>> result = fit_clipped_svi(data.s, 2, rng_key=jax.random.key(1), num_steps=500)
    >>> result.weights.shape, result.hidden_loc.shape, bool(result.converged)
    ((8, 2), (500, 2), True)
    >>> # P(s_a = +1) = Phi(xi_a / sd(x_a)) of the fit against the planted Phi(xi_a)
    >>> sd = jnp.sqrt(jnp.sum(result.weights ** 2, axis=1) + result.noise ** 2)
    >>> bool(jnp.abs(norm.cdf(result.bias / sd) - norm.cdf(data.bias)).max() < 0.1)
    True
    """
    spins, num_hidden, noise, bias = check_arguments(s, num_hidden, rng_key, noise, bias,
                                                     "fit_clipped_svi")
    num_steps = check_positive_int(num_steps, "num_steps")
    check_positive(learning_rate, "learning_rate")
    check_positive(tol, "tol")
    block_steps = num_steps
    if record_every is not None:
        block_steps = check_positive_int(record_every, "record_every", maximum=num_steps,
                                         why=f" (num_steps = {num_steps})")
        if num_steps % block_steps:
            raise ValueError(f"record_every must divide num_steps = {num_steps}; got "
                             f"{record_every}")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    num_units = spins.shape[1]
    start_keys = [rng_key] if num_restarts == 1 else list(jax.random.split(rng_key, num_restarts))
    key_pairs = [jax.random.split(key) for key in start_keys]
    starts = [initial_weights(key_init, init_weights, num_units, num_hidden).astype(spins.dtype)
              for key_init, _ in key_pairs]
    start = starts[0] if num_restarts == 1 else jnp.stack(starts)
    static = dict(num_hidden=num_hidden, bias=bias, num_steps=num_steps)
    noise_value = jnp.asarray(noise, spins.dtype)
    rate = jnp.asarray(learning_rate, spins.dtype)
    keys = jnp.stack([key_run for _, key_run in key_pairs])
    states = _svi_states(keys, spins, noise_value, rate, start, record_every=block_steps,
                         **static)
    algorithm = Algorithm(svi_step, options=(*static.items(), ("record_every", block_steps)),
                          name="fit_clipped_svi")
    fitted = run(algorithm, states, (spins,), (noise_value, rate, jnp.asarray(tol, spins.dtype)),
                 keys=keys, max_iterations=num_steps, progress_bar=progress_bar)
    best, restart_objectives = 0, None
    if num_restarts > 1:
        tenth = max(1, num_steps // 10)
        restart_objectives = jnp.mean(fitted.trace.objective[:, -tenth:], axis=1)
        best = int(jnp.argmin(jnp.where(jnp.isfinite(restart_objectives), restart_objectives,
                                        jnp.inf)))
    state, trace, num_iterations, converged = select(fitted, best)
    fit = SVIFit(_make, "fit_clipped_svi", tuple(static.items()))
    loc, scale = (leaf[best] for leaf in fit.read(fitted.state.svi, (spins,),
                                                  (noise_value, rate), _hidden))
    losses, weights = trace.objective, state.weights[-1]
    if not (bool(jnp.all(jnp.isfinite(losses[-1:]))) and bool(jnp.all(jnp.isfinite(weights)))):
        warnings.warn("fit_clipped_svi: the loss or W is not finite; lower learning_rate",
                      NumericalWarning, stacklevel=2)
    if not converged:
        warnings.warn(f"fit_clipped_svi: the loss still falls by more than tol={tol:g} "
                      f"(relative) in the middle of the {num_steps} steps; raise num_steps",
                      ConvergenceWarning, stacklevel=2)
    records = (state.weights, state.bias) if record_every is not None else (None, None)
    return ClippedSVIResult(weights, state.bias[-1], ClippedSVITrace(losses), num_iterations,
                            converged, loc, scale, noise, *records, restart_objectives)
