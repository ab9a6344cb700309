"""NumPyro's generic inference on the clipped-Gaussian program, as baselines (seed 001).

The paper learns W by moment matching (:func:`inference.clipped.fit.fit_clipped_gaussian`,
``shared/MODELS.md`` 2.2). Here NumPyro's generic machinery runs on the *same*
program, :func:`ppl_models.clipped_gaussian.model`, unchanged (its likelihood is
never re-typed here): the finite-noise probit layer P(s_a = +1 | y) =
Phi((W y + xi)_a / sigma) with W ~ Normal(0, 1/sqrt(P)), xi ~ Normal(0, 1) and
one hidden y ~ Normal(0, I_P) per pattern.

* :func:`fit_clipped_svi`: stochastic variational inference, W (and xi) as
  point estimates and a mean-field Gaussian over every pattern's y;
* :func:`fit_clipped_mcmc`: NUTS over W, xi and all y (small problems only),
  summarised by its posterior-predictive moments.

Every learner is scored alike (``inference.clipped.compare``,
``benchmarks/clipped.py``): ``moment_error(model_moments(W, xi, sigma), s_heldout)``,
the predicted means and pair moments <s_a s_b> of the program against held-out
patterns.

Symmetry: the program is invariant under W -> W Q, y -> Q^T y for any
orthogonal Q (the priors on y and W are isotropic), so W is identified only up
to a rotation of its columns. Only rotation-invariant summaries mean anything:
W W^T, the column space of W, and the predicted moments; a posterior *mean* of
W averages over rotations and tends to zero.

References
----------
Lee, Sompolinsky, "Learning a Continuous Hidden Variable Model for Binary Data",
NIPS 1998. Hoffman, Gelman, "The No-U-Turn Sampler", JMLR 15 (2014).
Kingma, Ba, "Adam", ICLR 2015.
"""

from __future__ import annotations

import math
import warnings
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from numpyro import handlers
from numpyro.diagnostics import split_gelman_rubin
from numpyro.infer import NUTS, SVI, TraceMeanField_ELBO, init_to_median, init_to_value
from numpyro.infer.autoguide import AutoDelta, AutoGuideList, AutoNormal

from inference.clipped.fit import model_moments
from inference.engine.progress import progress, tick
from ppl_models import clipped_gaussian
from ppl_models.clipped_gaussian import DEFAULT_NOISE
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import (
    MissingKeyError,
    check_data,
    check_positive,
    check_positive_int,
    check_rng_key,
)

__all__ = ["fit_clipped_svi", "fit_clipped_mcmc", "ClippedSVIResult", "ClippedMCMCResult",
           "MAX_MCMC_DIMENSION", "R_HAT_THRESHOLD"]

#: NUTS state size N P + N + num_examples P above which fit_clipped_mcmc refuses:
#: every gradient touches all patterns and a trajectory takes up to 2^max_tree_depth
#: of them, so beyond a few thousand dimensions a run takes many minutes.
MAX_MCMC_DIMENSION = 5000
#: Largest split R-hat (over the rotation-invariant W W^T and xi) of a converged run
#: (Gelman et al., Bayesian Data Analysis, 3rd ed., sec. 11.4).
R_HAT_THRESHOLD = 1.1
#: Adam's step size decays by a cosine to this fraction of ``learning_rate``.
_FINAL_FRACTION = 0.01

def _check_common(s, num_hidden, rng_key, noise, bias, caller):
    if rng_key is None:
        raise MissingKeyError(f"{caller} needs an explicit rng_key (e.g. jax.random.key(0))")
    check_rng_key(rng_key)
    spins = clipped_gaussian.to_spins(s, "s")
    num_units = spins.shape[1]
    num_hidden = check_positive_int(num_hidden, "num_hidden", maximum=num_units,
                                    why=f" (the number of units N = {num_units} in s)")
    if not isinstance(noise, int | float | np.floating) or isinstance(noise, bool):
        raise TypeError(f"noise must be a positive float; got {noise!r}")
    check_positive(noise, "noise")
    if not isinstance(bias, bool | np.bool_):
        raise TypeError(f"bias must be True or False; got {bias!r}")
    return spins, num_hidden, float(noise), bool(bias)


def _initial_weights(rng_key, init_weights, num_units, num_hidden):
    """``init_weights`` checked, or a draw of W from its prior Normal(0, 1/sqrt(P))."""
    if init_weights is None:
        return jax.random.normal(rng_key, (num_units, num_hidden)) / math.sqrt(num_hidden)
    init_weights = check_data(init_weights, "init_weights", dim=num_hidden)
    if init_weights.shape[0] != num_units:
        raise ValueError(f"init_weights must have shape (N, P) = ({num_units}, {num_hidden}); "
                         f"got {init_weights.shape}")
    return init_weights


def _model_kwargs(bias):
    return {} if bias else {"bias": 0.0}


class ClippedSVIResult(NamedTuple):
    """Result of :func:`fit_clipped_svi`.

    Attributes
    ----------
    weights : array (N, P)
        Point estimate of W (one rotation of the columns among equally good ones).
    bias : array (N,)
        Point estimate of xi (zeros with ``bias=False``).
    loss_trace : array (num_steps,)
        -ELBO per step divided by the number of observed spins (num_examples N).
    num_steps : int
    converged : bool
        The loss levelled off mid-run (see ``rtol`` of :func:`fit_clipped_svi`).
    hidden_loc, hidden_scale : arrays (num_examples, P)
        The Gaussian q(y) of every pattern.
    noise : float
        sigma of the program that was fitted (score it at this noise).
    checkpoint_weights, checkpoint_bias : arrays (num_checkpoints, N, P), (num_checkpoints, N)
        W and xi after every ``checkpoint_every`` steps, or None.
    """

    weights: jax.Array
    bias: jax.Array
    loss_trace: jax.Array
    num_steps: int
    converged: bool
    hidden_loc: jax.Array
    hidden_scale: jax.Array
    noise: float
    checkpoint_weights: jax.Array | None = None
    checkpoint_bias: jax.Array | None = None


def _svi(num_steps, learning_rate, init_values, point_sites):
    """SVI with Adam (cosine decay) and the guide: AutoDelta on W, xi + AutoNormal on y."""
    model = clipped_gaussian.model
    guide = AutoGuideList(model)
    guide.append(AutoDelta(handlers.block(model, expose=point_sites), prefix="point",
                           init_loc_fn=init_to_value(values=init_values)))
    guide.append(AutoNormal(handlers.block(model, hide=point_sites), prefix="hidden",
                            init_loc_fn=init_to_median))
    schedule = optax.cosine_decay_schedule(learning_rate, num_steps, alpha=_FINAL_FRACTION)
    return SVI(model, guide, optax.adam(schedule), TraceMeanField_ELBO())


@partial(jax.jit, static_argnames=("num_hidden", "bias", "num_blocks", "block_steps",
                                   "progress_every"))
def _svi_run(rng_key, spins, noise, learning_rate, init_weights, *, num_hidden, bias, num_blocks,
             block_steps, progress_every):
    point_sites = ["W", "xi"] if bias else ["W"]
    init_values = {"W": init_weights, "xi": jnp.zeros(spins.shape[1], spins.dtype)}
    svi = _svi(num_blocks * block_steps, learning_rate, init_values, point_sites)
    kwargs = {"noise": noise, "num_hidden": num_hidden, **_model_kwargs(bias)}
    state = svi.init(rng_key, spins, **kwargs)

    def step(state, i):
        state, loss = svi.update(state, spins, **kwargs)
        tick(i, progress_every)
        return state, loss

    def block(state, start):
        state, losses = jax.lax.scan(step, state, start + jnp.arange(block_steps))
        params = svi.get_params(state)
        xi = params["xi_point_loc"] if bias else jnp.zeros(spins.shape[1], spins.dtype)
        return state, (params["W_point_loc"], xi, losses)

    state, (weights, xi, losses) = jax.lax.scan(block, state, jnp.arange(num_blocks) * block_steps)
    params = svi.get_params(state)
    return weights, xi, losses.reshape(-1), params["y_hidden_loc"], params["y_hidden_scale"]


def fit_clipped_svi(s, num_hidden: int, *, rng_key, noise: float = DEFAULT_NOISE,
                    bias: bool = True, num_steps: int = 2000, learning_rate: float = 0.1,
                    init_weights=None, checkpoint_every: int | None = None, rtol: float = 0.05,
                    progress_bar: bool = False) -> ClippedSVIResult:
    """Learn W (and xi) by SVI on the clipped-Gaussian program at noise sigma.

    Guide: ``AutoGuideList`` of ``AutoDelta`` on the global W and xi (point
    estimates: the maximum a posteriori W, as EM would give, and a point W is
    what the paper learns; a distribution over W would only smear it over its
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
    sweeps ``learning_rate``). All steps run in one jitted ``lax.scan``.

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
    checkpoint_every : int, optional
        Record W and xi every this many steps (must divide ``num_steps``).
    rtol : float
        ``converged`` when the mean loss fell by at most ``rtol`` (relative) from
        the fifth to the seventh tenth of the steps, while the step size is still
        65% to 35% of its start. The end of the run says nothing: there the
        decaying step size itself lowers the loss (less gradient noise), by a few
        percent in runs that have long stopped learning, and flattens it in runs
        far too short.
    progress_bar : bool
        tqdm bar over the steps, advanced from inside the jitted loop.

    Returns
    -------
    ClippedSVIResult

    Warns
    -----
    ConvergenceWarning
        When the loss is still changing by more than ``rtol`` at the end.
    NumericalWarning
        When the loss or W is not finite.
    """
    spins, num_hidden, noise, bias = _check_common(s, num_hidden, rng_key, noise, bias,
                                                   "fit_clipped_svi")
    num_steps = check_positive_int(num_steps, "num_steps")
    check_positive(learning_rate, "learning_rate")
    check_positive(rtol, "rtol")
    block_steps = num_steps
    if checkpoint_every is not None:
        block_steps = check_positive_int(checkpoint_every, "checkpoint_every", maximum=num_steps,
                                         why=f" (num_steps = {num_steps})")
        if num_steps % block_steps:
            raise ValueError(f"checkpoint_every must divide num_steps = {num_steps}; got "
                             f"{checkpoint_every}")
    num_units = spins.shape[1]
    key_init, key_run = jax.random.split(rng_key)
    init_weights = _initial_weights(key_init, init_weights, num_units, num_hidden)
    with progress(num_steps, "clipped SVI", progress_bar) as progress_every:
        weights, xi, losses, loc, scale = jax.block_until_ready(_svi_run(
            key_run, spins, jnp.asarray(noise, spins.dtype),
            jnp.asarray(learning_rate, spins.dtype), init_weights.astype(spins.dtype),
            num_hidden=num_hidden, bias=bias, num_blocks=num_steps // block_steps,
            block_steps=block_steps, progress_every=progress_every))
    losses = losses / spins.size
    if not (bool(jnp.all(jnp.isfinite(losses[-1:]))) and bool(jnp.all(jnp.isfinite(weights[-1])))):
        warnings.warn("fit_clipped_svi: the loss or W is not finite; lower learning_rate",
                      NumericalWarning, stacklevel=2)
    tenth = max(1, num_steps // 10)
    early, late = (jnp.mean(losses[i * tenth:(i + 1) * tenth]) for i in (4, 6))
    converged = num_steps >= 20 and bool(early - late <= rtol * jnp.abs(late))
    if not converged:
        warnings.warn(f"fit_clipped_svi: the loss still falls by more than rtol={rtol:g} "
                      f"(relative) in the middle of the {num_steps} steps; raise num_steps",
                      ConvergenceWarning, stacklevel=2)
    checkpoints = (weights, xi) if checkpoint_every is not None else (None, None)
    return ClippedSVIResult(weights[-1], xi[-1], losses, num_steps, converged, loc, scale, noise,
                            *checkpoints)


class ClippedMCMCResult(NamedTuple):
    """Result of :func:`fit_clipped_mcmc`.

    Attributes
    ----------
    means : array (N,)
        Posterior-predictive <s_a>: ``model_moments`` averaged over the kept draws.
    second_moments : array (N, N)
        Posterior-predictive <s_a s_b>, likewise (unit diagonal).
    weights_gram : array (N, N)
        Posterior mean of W W^T, rotation-invariant (its leading P eigenvectors
        span the posterior's typical column space of W). There is no meaningful
        posterior mean of W itself (module docstring).
    weight_samples, bias_samples : arrays (num_chains, num_samples, N, P), (..., N)
        Post-warm-up draws of W (each in its own rotation) and xi (zeros with ``bias=False``).
    potential_energy : array (num_chains, num_warmup + num_samples)
        -log p(s, W, xi, y) at every iteration, warm-up included.
    r_hat : float
        Largest split R-hat over the entries of W W^T and xi.
    num_divergent : int
        Divergent transitions after warm-up, all chains.
    mean_num_steps, num_gradients : float, int
        Leapfrog steps per post-warm-up iteration; all of them, warm-up included (the cost).
    converged : bool
        ``r_hat <= R_HAT_THRESHOLD`` and no divergent transition.
    num_predictive_draws : int
        Draws averaged into ``means`` and ``second_moments``.
    noise : float
    """

    means: jax.Array
    second_moments: jax.Array
    weights_gram: jax.Array
    weight_samples: jax.Array
    bias_samples: jax.Array
    potential_energy: jax.Array
    r_hat: float
    num_divergent: int
    mean_num_steps: float
    num_gradients: int
    converged: bool
    num_predictive_draws: int
    noise: float


_NUTS_STATIC = ("num_hidden", "bias", "num_warmup", "num_samples", "target_accept_prob",
                "max_tree_depth", "progress_every")


@partial(jax.jit, static_argnames=_NUTS_STATIC)
def _nuts_chain(rng_key, spins, noise, init_weights, *, num_hidden, bias, num_warmup,
                num_samples, target_accept_prob, max_tree_depth, progress_every):
    """One NUTS chain over W, xi and every y of the program; per-iteration arrays."""
    num_examples, num_units = spins.shape
    start = {"W": init_weights, "xi": jnp.zeros(num_units, spins.dtype),
             "y": jnp.zeros((num_examples, num_hidden), spins.dtype)}
    kernel = NUTS(clipped_gaussian.model, init_strategy=init_to_value(values=start),
                  target_accept_prob=target_accept_prob, max_tree_depth=max_tree_depth)
    kwargs = {"noise": noise, "num_hidden": num_hidden, **_model_kwargs(bias)}
    state = kernel.init(rng_key, num_warmup, None, (spins,), kwargs)

    def body(state, i):
        state = kernel.sample(state, (spins,), kwargs)
        tick(i, progress_every)
        xi = state.z["xi"] if bias else jnp.zeros(num_units, spins.dtype)
        return state, (state.z["W"], xi, state.potential_energy, state.diverging,
                       state.num_steps)

    _, out = jax.lax.scan(body, state, jnp.arange(num_warmup + num_samples))
    return out


def fit_clipped_mcmc(s, num_hidden: int, *, rng_key, noise: float = DEFAULT_NOISE,
                     num_warmup: int = 300, num_samples: int = 300, num_chains: int = 1,
                     bias: bool = True, init_weights=None, target_accept_prob: float = 0.8,
                     max_tree_depth: int = 8, num_predictive_draws: int = 50,
                     progress_bar: bool = False) -> ClippedMCMCResult:
    """Sample W, xi and all hidden y by NUTS; posterior-predictive moments (small problems).

    NUTS (step size and diagonal mass matrix adapted in warm-up) runs on the
    program's joint density over W (N, P), xi (N,) and y (num_examples, P),
    N P + N + num_examples P dimensions, capped at :data:`MAX_MCMC_DIMENSION`.
    The result is summarised by what is invariant under the rotation
    W -> W Q, y -> Q^T y that leaves the program unchanged: the posterior-
    predictive moments, ``model_moments(W_draw, xi_draw, noise)`` averaged over
    ``num_predictive_draws`` evenly thinned draws of all chains, and the
    posterior mean of W W^T. A posterior mean of W is meaningless (draws in
    different rotations cancel) and is not given; R-hat is computed on W W^T and xi.

    Parameters
    ----------
    s : array (num_examples, N)
        Patterns of -1 / +1, or of 0 / 1.
    num_hidden : int
        P, 1 <= P <= N.
    rng_key : jax.random key
    noise : float
        sigma of the program (> 0). Small sigma makes the posterior of y nearly
        piecewise flat with steep walls (the clip), which needs small steps.
    num_warmup, num_samples : int
        Per chain; ``num_samples >= 4`` (split R-hat).
    num_chains : int
        Chains, run one after the other (one compiled chain).
    bias : bool
        Sample xi; ``False`` fixes it at 0.
    init_weights : array (N, P), optional
        Initial W of every chain (default: a prior draw per chain); y starts at 0, xi at 0.
    target_accept_prob, max_tree_depth : NUTS settings
        A trajectory takes at most 2^max_tree_depth - 1 gradients. 8 (NumPyro's
        default is 10) bounds what a stuck trajectory costs; the runs of
        ``ppl-zoo compare clipped`` take 30-130 gradients per iteration, below the cap.
    num_predictive_draws : int
        Draws averaged into the predictive moments.
    progress_bar : bool
        tqdm bar over all iterations.

    Returns
    -------
    ClippedMCMCResult

    Warns
    -----
    ConvergenceWarning
        Split R-hat above ``R_HAT_THRESHOLD`` or divergent transitions.
    """
    spins, num_hidden, noise, bias = _check_common(s, num_hidden, rng_key, noise, bias,
                                                   "fit_clipped_mcmc")
    num_examples, num_units = spins.shape
    dimension = num_units * num_hidden + num_units * bias + num_examples * num_hidden
    if dimension > MAX_MCMC_DIMENSION:
        raise ValueError(
            f"fit_clipped_mcmc is for small problems: NUTS would run in N P + N + num_examples P "
            f"= {dimension} dimensions (N = {num_units}, P = {num_hidden}, num_examples = "
            f"{num_examples}); at most {MAX_MCMC_DIMENSION}. Use fewer patterns or fit_clipped_svi")
    num_warmup = check_positive_int(num_warmup, "num_warmup")
    num_samples = check_positive_int(num_samples, "num_samples")
    if num_samples < 4:
        raise ValueError(f"num_samples must be at least 4 (split R-hat); got {num_samples}")
    num_chains = check_positive_int(num_chains, "num_chains")
    max_tree_depth = check_positive_int(max_tree_depth, "max_tree_depth")
    num_predictive_draws = check_positive_int(num_predictive_draws, "num_predictive_draws")
    if not isinstance(target_accept_prob, int | float) or not 0 < target_accept_prob < 1:
        raise ValueError(f"target_accept_prob must be in (0, 1); got {target_accept_prob!r}")
    keys = jax.random.split(rng_key, 2 * num_chains)
    starts = [_initial_weights(k, init_weights, num_units, num_hidden) for k in keys[num_chains:]]
    settings = dict(num_hidden=num_hidden, bias=bias, num_warmup=num_warmup,
                    num_samples=num_samples, target_accept_prob=float(target_accept_prob),
                    max_tree_depth=max_tree_depth)
    with progress((num_warmup + num_samples) * num_chains, "clipped NUTS",
                   progress_bar, loop_length=num_warmup + num_samples) as every:
        chains = [_nuts_chain(keys[c], spins, jnp.asarray(noise, spins.dtype),
                              starts[c].astype(spins.dtype), progress_every=every, **settings)
                  for c in range(num_chains)]
        weights, xi, potential, diverging, steps = jax.block_until_ready(
            jax.tree.map(lambda *a: jnp.stack(a), *chains))
    weights, xi = np.asarray(weights[:, num_warmup:]), np.asarray(xi[:, num_warmup:])
    if not (np.all(np.isfinite(weights)) and np.all(np.isfinite(xi))):
        warnings.warn("fit_clipped_mcmc: non-finite draws of W or xi", NumericalWarning,
                      stacklevel=2)
    gram = np.einsum("csap,csbp->csab", weights, weights)
    rows, cols = np.triu_indices(num_units)
    invariants = np.concatenate([gram[..., rows, cols], xi], axis=-1) if bias else \
        gram[..., rows, cols]
    r_hat = float(np.nanmax(split_gelman_rubin(invariants)))
    num_divergent = int(np.sum(np.asarray(diverging[:, num_warmup:])))
    converged = r_hat <= R_HAT_THRESHOLD and num_divergent == 0
    if not r_hat <= R_HAT_THRESHOLD:
        warnings.warn(f"fit_clipped_mcmc: largest split R-hat over W W^T and xi is {r_hat:.3g} "
                      f"> {R_HAT_THRESHOLD}; raise num_warmup / num_samples",
                      ConvergenceWarning, stacklevel=2)
    if num_divergent:
        warnings.warn(f"fit_clipped_mcmc: {num_divergent} divergent transition(s) after warm-up; "
                      "raise target_accept_prob", ConvergenceWarning, stacklevel=2)
    flat_w, flat_xi = weights.reshape(-1, num_units, num_hidden), xi.reshape(-1, num_units)
    picks = np.unique(np.linspace(0, len(flat_w) - 1, min(num_predictive_draws, len(flat_w)))
                      .round().astype(int))
    moments = [model_moments(flat_w[i], flat_xi[i], noise) for i in picks]
    dtype = spins.dtype
    return ClippedMCMCResult(
        means=jnp.asarray(np.mean([m[0] for m in moments], axis=0), dtype),
        second_moments=jnp.asarray(np.mean([m[1] for m in moments], axis=0), dtype),
        weights_gram=jnp.asarray(gram.mean(axis=(0, 1)), dtype),
        weight_samples=jnp.asarray(weights), bias_samples=jnp.asarray(xi),
        potential_energy=jnp.asarray(potential), r_hat=r_hat, num_divergent=num_divergent,
        mean_num_steps=float(np.mean(np.asarray(steps[:, num_warmup:]))),
        num_gradients=int(np.sum(np.asarray(steps, np.int64))), converged=converged,
        num_predictive_draws=int(len(picks)), noise=noise)
