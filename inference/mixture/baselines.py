"""NumPyro's generic inference on the Gaussian-mixture program, as baselines (seed 002).

The paper fits the mixture by EM and its hard limits (:func:`inference.mixture.em.fit_mixture`,
``shared/MODELS.md`` 3). Here NumPyro's generic machinery runs on the *same*
program, :func:`ppl_models.mixture.model`, unchanged: y ~ Categorical(alpha) marked
``infer={"enumerate": "parallel"}``, x | y ~ Normal(m_y, Sigma_y), and the parameters
as sample sites with the program's priors, alpha ~ Dirichlet(1), m ~ Normal(0,
``prior_scale``), standard deviations ``"sd"`` ~ HalfNormal(``prior_scale``) and, for
full covariances, Cholesky factors of correlations ``"corr"`` ~ LKJ(2).

* :func:`fit_mixture_svi`: SVI with ``TraceEnum_ELBO`` (y summed out exactly) and a
  point-mass guide (``AutoDelta``) on alpha, m, sd, corr: the maximum a posteriori
  parameters, by Adam;
* :func:`fit_mixture_mcmc`: NUTS on alpha, m, sd, corr with y summed out (NumPyro
  enumerates it through funsor at every gradient), small data only; its draws
  become an ``arviz.InferenceData`` whose ``log_likelihood`` group holds
  log p(x_i | theta) per example and draw (:meth:`MixtureMCMCResult.to_inference_data`);
* :func:`mixture_loo`: PSIS-LOO (``arviz.loo``) of the program with k components,
  for choosing k by the expected log predictive density.

Every learner is scored alike (``inference.mixture.compare``): the mean
log-likelihood (1/N) sum_i log p(x_i | theta) = -L_stocha (eq. 14-16) of
:func:`inference.mixture.criteria.criteria`, on the learning data and on held-out data.

Label switching: the program is invariant under permutations of the components,
so the posterior has k! symmetric modes and a chain (or chains) may visit more
than one. Only permutation-invariant summaries are computed directly (the mean
log-likelihood, the posterior-predictive density, the sorted weights); component-
wise summaries are taken after aligning every draw to a pivot (:func:`align_draws`).

References
----------
Xu (1995), YING-YANG machine, sec. 4 (eq. 13-18). Hoffman, Gelman, "The No-U-Turn
Sampler", JMLR 15 (2014). Kingma, Ba, "Adam", ICLR 2015. Marin, Mengersen, Robert,
"Bayesian modelling and inference on mixtures of distributions", Handbook of
Statistics 25 (2005), sec. 4.1. Vehtari, Gelman, Gabry, "Practical Bayesian model
evaluation using leave-one-out cross-validation and WAIC", Stat. Comput. 27 (2017).
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
from numpyro.contrib.funsor import enum
from numpyro.diagnostics import split_gelman_rubin
from numpyro.infer import NUTS, SVI, TraceEnum_ELBO, init_to_value
from numpyro.infer.autoguide import AutoDelta

from inference.engine.progress import progress, tick
from inference.mixture.criteria import criteria
from inference.mixture.features import component_log_joint
from inference.mixture.seeding import kmeans_plus_plus
from ppl_models import mixture
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import (
    MissingKeyError,
    check_data,
    check_positive,
    check_positive_int,
    check_rng_key,
)

__all__ = ["fit_mixture_svi", "fit_mixture_mcmc", "mixture_loo", "align_draws",
           "posterior_predictive_log_likelihood", "pointwise_log_likelihood",
           "MixtureSVIResult", "MixtureMCMCResult", "MixtureLOO", "MAX_MCMC_EXAMPLES",
           "MAX_MCMC_COMPONENTS", "R_HAT_THRESHOLD"]

#: fit_mixture_mcmc refuses more examples: every NUTS gradient sums all k components
#: of every example, up to 2^max_tree_depth gradients per iteration, and the
#: log-likelihood group holds num_chains * num_samples * num_examples numbers.
MAX_MCMC_EXAMPLES = 2000
#: ... and more components (k! symmetric modes; the alignment gets ambiguous).
MAX_MCMC_COMPONENTS = 10
#: Largest split R-hat (over label-invariant summaries) of a converged run
#: (Gelman et al., Bayesian Data Analysis, 3rd ed., sec. 11.4).
R_HAT_THRESHOLD = 1.1
#: Adam's step size decays by a cosine to this fraction of ``step_size``.
_FINAL_FRACTION = 0.01
#: Draws per batch when the per-example log-likelihood of all draws is computed.
_DRAW_BATCH = 64

# --- the program's parameters: sites <-> (weights, means, covariances) -----------------

def _site_values(weights, means, covariances, covariance):
    """The program's sample-site values {"alpha", "m", "sd"[, "corr"]} for these parameters."""
    variances = jnp.diagonal(covariances, axis1=-2, axis2=-1)
    sites = {"alpha": weights, "m": means}
    if covariance == "full":
        sd = jnp.sqrt(variances)
        sites["sd"] = sd
        sites["corr"] = jnp.linalg.cholesky(covariances) / sd[..., :, None]
    elif covariance == "diag":
        sites["sd"] = jnp.sqrt(variances)
    else:
        sites["sd"] = jnp.sqrt(jnp.mean(variances, axis=-1))
    return sites


def _parameters(sites, covariance, dim):
    """(weights, means, covariances (..., k, d, d)) from site values (any leading draw axes)."""
    sd = sites["sd"]
    eye = jnp.eye(dim, dtype=sd.dtype)
    if covariance == "full":
        tril = sd[..., :, None] * sites["corr"]
        cov = tril @ jnp.swapaxes(tril, -1, -2)
    elif covariance == "diag":
        cov = sd[..., :, None] ** 2 * eye
    else:
        cov = sd[..., None, None] ** 2 * eye
    return sites["alpha"], sites["m"], cov


def _model_kwargs(covariance, num_components, prior_scale):
    return {"covariance": covariance, "num_components": num_components,
            "prior_scale": prior_scale}


# --- argument checks and the shared start ---------------------------------------------

def _check_common(x, num_components, covariance, rng_key, prior_scale, caller):
    if rng_key is None:
        raise MissingKeyError(f"{caller} needs an explicit rng_key (e.g. jax.random.key(0))")
    check_rng_key(rng_key)
    if covariance not in mixture.COVARIANCES:
        raise ValueError(f"covariance must be one of {mixture.COVARIANCES}; got {covariance!r}")
    x = check_data(x, "x")
    k = check_positive_int(num_components, "num_components")
    distinct = int(np.unique(np.asarray(x), axis=0).shape[0])
    if k > distinct:
        raise ValueError(f"num_components={k} exceeds the {distinct} distinct example(s) in x")
    if float(jnp.mean(jnp.var(x, axis=0))) == 0.0:
        raise ValueError("x has no spread (every example is the same point): nothing to fit")
    if not isinstance(prior_scale, int | float | np.floating) or isinstance(prior_scale, bool):
        raise TypeError(f"prior_scale must be a positive float; got {prior_scale!r}")
    check_positive(prior_scale, "prior_scale")
    return x, k


def _initial_parameters(key, x, k, covariance, init_means, init_weights, init_covariances):
    """The start of :func:`inference.mixture.em.fit_mixture` (``init="kmeans++"``), or the
    given one.

    Means: k-means++ seeding with ``key`` (the first half of the split of the
    ``rng_key`` that fit_mixture uses, so equal keys give equal starts); weights
    equal; covariances (data's mean variance / k) I (paper sec. 5.2).
    """
    num, dim = x.shape
    if init_means is None:
        means = kmeans_plus_plus(key, x, k)
    else:
        means = jnp.asarray(init_means, x.dtype)
        if means.shape != (k, dim) or not bool(jnp.all(jnp.isfinite(means))):
            raise ValueError(f"init_means must be finite with shape ({k}, {dim}); "
                             f"got shape {means.shape}")
    if init_weights is None:
        weights = jnp.full(k, 1.0 / k, x.dtype)
    else:
        weights = jnp.asarray(init_weights, x.dtype)
        if weights.shape != (k,) or not bool(jnp.all(weights > 0)):
            raise ValueError(f"init_weights must be positive with shape ({k},); got {weights}")
        weights = weights / jnp.sum(weights)
    if init_covariances is None:
        spread = jnp.mean(jnp.var(x, axis=0))
        cov = jnp.broadcast_to(spread / k * jnp.eye(dim, dtype=x.dtype), (k, dim, dim))
    else:
        cov = jnp.asarray(init_covariances, x.dtype)
        if cov.shape != (k, dim, dim):
            raise ValueError(f"init_covariances must have shape ({k}, {dim}, {dim}); "
                             f"got {cov.shape}")
        if not (bool(jnp.allclose(cov, jnp.swapaxes(cov, -1, -2), rtol=1e-5, atol=1e-8))
                and bool(jnp.all(jnp.isfinite(jnp.linalg.cholesky(cov))))):
            raise ValueError("init_covariances must be symmetric positive definite matrices")
    return weights, means, cov


# --- SVI -------------------------------------------------------------------------------

class MixtureSVIResult(NamedTuple):
    """Result of :func:`fit_mixture_svi`.

    Attributes
    ----------
    weights : array (k,)
    means : array (k, d)
    covariances : array (k, d, d)
        The MAP parameters (covariances of the fitted family, positive definite).
    log_likelihood : float
        Mean log-likelihood (1/N) sum_i log p(x_i | theta) on the data, i.e.
        ``-criteria(...)["L_stocha"]``, the quantity EM maximises.
    log_prior : float
        log p(theta) of the program's priors at the result (total, not per example).
    loss_trace : array (num_steps,)
        -ELBO / num_examples per step, before that step's update. The guide is a
        point mass and y is summed out, so the loss is exact (no sampling noise):
        -(log p(x | theta) + log p(theta)) / N = -log_likelihood - log_prior / N.
    labels : int32 array (num_examples,)
        Most probable component of every example.
    num_components, num_steps : int
    converged : bool
        The loss changed by at most ``tol`` (nats per example) over the second
        half of the run.
    covariance : str
    """

    weights: jax.Array
    means: jax.Array
    covariances: jax.Array
    log_likelihood: float
    log_prior: float
    loss_trace: jax.Array
    labels: jax.Array
    num_components: int
    num_steps: int
    converged: bool
    covariance: str


def _mixture_svi(init_values, step_size, covariance, num_steps):
    """The SVI of :func:`fit_mixture_svi`: AutoDelta, Adam with a cosine-decayed step."""
    # The guide sees the program with y hidden: y is summed out by TraceEnum_ELBO.
    guide = AutoDelta(handlers.block(mixture.model, hide=["y"]),
                      init_loc_fn=init_to_value(values=init_values))
    schedule = optax.cosine_decay_schedule(step_size, num_steps, alpha=_FINAL_FRACTION)
    return SVI(mixture.model, guide, optax.adam(schedule), TraceEnum_ELBO(max_plate_nesting=1))


@partial(jax.jit, static_argnames=("covariance", "num_components", "num_steps"))
def _svi_start(rng_key, x, init_values, step_size, prior_scale, *, covariance, num_components,
               num_steps):
    """The SVI carry before the first step (:func:`inference.engine.checkpoint.svi_start`)."""
    from inference.engine.checkpoint import svi_start

    kwargs = _model_kwargs(covariance, num_components, prior_scale)
    svi = _mixture_svi(init_values, step_size, covariance, num_steps)
    return svi_start(svi.init(rng_key, x, **kwargs), num_steps, x.dtype)


@partial(jax.jit, static_argnames=("covariance", "num_components", "num_steps",
                                   "progress_every"))
def _svi_advance(carry, x, init_values, step_size, prior_scale, stop_at, *, covariance,
                 num_components, num_steps, progress_every=0):
    """SVI steps until step ``stop_at`` (traced; chunks for checkpoints,
    :func:`inference.engine.checkpoint.svi_advance`)."""
    from inference.engine.checkpoint import svi_advance, svi_ready

    kwargs = _model_kwargs(covariance, num_components, prior_scale)
    svi = svi_ready(_mixture_svi(init_values, step_size, covariance, num_steps), carry[0], x,
                    **kwargs)
    return svi_advance(lambda state: svi.update(state, x, **kwargs), carry, stop_at,
                       progress_every)


@partial(jax.jit, static_argnames=("covariance", "num_components", "num_steps"))
def _svi_finish(carry, x, init_values, step_size, prior_scale, *, covariance, num_components,
                num_steps):
    """(sites, losses, log prior) from the last SVI carry."""
    from inference.engine.checkpoint import svi_ready

    model = mixture.model
    kwargs = _model_kwargs(covariance, num_components, prior_scale)
    state, losses, _ = carry
    svi = svi_ready(_mixture_svi(init_values, step_size, covariance, num_steps), state, x,
                    **kwargs)
    params = svi.get_params(state)  # constrained values
    sites = {name: params[f"{name}_auto_loc"] for name in init_values}
    trace = handlers.trace(handlers.seed(handlers.substitute(model, data=sites), 0)).get_trace(
        x, **kwargs)
    log_prior = sum(jnp.sum(trace[name]["fn"].log_prob(trace[name]["value"])) for name in sites)
    return sites, losses, log_prior


def _svi_checkpointed(rng_key, x, init_values, step_size, prior_scale, *, covariance,
                      num_components, num_steps, progress_every, checkpoint_path,
                      checkpoint_every, resume_from, options):
    """All SVI steps through :func:`inference.engine.checkpoint.run_chunks` (one chunk without
    checkpoint options); returns (sites, losses, log prior). ``options`` are saved with
    the checkpoints beside x's and the start's SHA-256."""
    from inference.engine import checkpoint

    path, every, resume, saved = checkpoint.prepare(
        checkpoint_path, checkpoint_every, resume_from, options, data=(x,),
        start=tuple(init_values.values()))
    common = dict(covariance=covariance, num_components=num_components, num_steps=num_steps)
    carry = checkpoint.run_chunks(
        lambda carry, stop_at: _svi_advance(carry, x, init_values, step_size, prior_scale,
                                            stop_at, progress_every=progress_every, **common),
        lambda: _svi_start(rng_key, x, init_values, step_size, prior_scale, **common),
        total=num_steps, finished=lambda carry: False, kind="fit_mixture_svi", options=saved,
        checkpoint_path=path, checkpoint_every=every, resume_from=resume)
    return _svi_finish(carry, x, init_values, step_size, prior_scale, **common)


def fit_mixture_svi(x, num_components: int, *, rng_key, covariance: str = "full",
                    num_steps: int = 1000, step_size: float = 0.05, prior_scale: float = 10.0,
                    init_means=None, init_weights=None, init_covariances=None,
                    tol: float = 1e-4, progress_bar: bool = False, checkpoint_path=None,
                    checkpoint_every: int | None = None,
                    resume_from=None) -> MixtureSVIResult:
    """MAP parameters of the mixture program by SVI, y summed out (``TraceEnum_ELBO``).

    Guide: ``AutoDelta`` (a point mass) on alpha, m, sd and, for ``"full"``, corr,
    built from the program with y hidden; ``TraceEnum_ELBO`` sums y over its k
    values in parallel, so the loss is exactly -log p(x, theta) = -sum_i log
    sum_y alpha_y N(x_i; m_y, Sigma_y) - log p(theta): no sampling noise, and its
    minimiser is the maximum a posteriori theta (the point mass has no entropy
    term). Optimiser: Adam on the unconstrained parameters (NumPyro's bijections:
    stick-breaking for alpha, exp for sd, the LKJ Cholesky map for corr) with its
    step size decayed by a cosine from ``step_size`` to 1% of it; all steps run
    in one jitted ``lax.scan``.

    MAP, not maximum likelihood: the objective adds log p(theta) to the
    log-likelihood. The Dirichlet(1) prior on alpha is flat (no effect), the
    Normal(0, prior_scale) prior on the means and the HalfNormal(prior_scale) prior
    on the standard deviations pull by x^2 / (2 prior_scale^2) nats each (0.005
    per unit at the default 10), and LKJ(2) adds log det(corr) per component,
    pulling correlations towards 0. Against N log-likelihood terms these shift
    the optimum by O(1 / N). Measured (k = 3, d = 2, separation 4-6, SVI started
    at EM's optimum): on 400 examples SVI's mean log-likelihood ends 2e-6 nats per
    example below EM's (float64); on 200, 1e-5 to 3e-4 (four data sets, float32);
    on 100, 8e-4 (float64). The gap is the LKJ(2) prior acting on a small component's
    correlation: ``prior_scale=1000`` leaves it unchanged. The prior's share of the
    objective, log p(theta) / N (``log_prior`` of the result over N), is about -0.09
    nats per example on 400 examples at the default ``prior_scale``.

    Parameters
    ----------
    x : array (num_examples, d)
    num_components : int
        k, at most the number of distinct examples.
    rng_key : jax.random key
        ``jax.random.split(rng_key)[0]`` seeds the k-means++ start exactly as in
        :func:`inference.mixture.em.fit_mixture` (equal keys: equal starts).
    covariance : {"full", "diag", "spherical"}
    num_steps : int
        Adam steps (from a k-means++ start the runs of ``ppl-zoo compare mixture``
        settle within about 100).
    step_size : float
        Adam's initial step size.
    prior_scale : float
        The program's prior scale of means and standard deviations; larger is a
        weaker prior (closer to maximum likelihood). Data far outside
        +-prior_scale make the prior matter: standardise them first.
    init_means, init_weights, init_covariances : arrays (k, d), (k,), (k, d, d), optional
        Explicit start (e.g. an EM result), projected to the family.
    tol : float
        ``converged`` when the per-example loss changed by at most ``tol`` nats
        between the middle and the end of the run (the loss is deterministic,
        so a change is progress, not noise).
    progress_bar : bool
        tqdm bar over the steps, advanced from inside the jitted loop.
    checkpoint_path : str or os.PathLike, optional
        Write a checkpoint (the SVI state, with its key and optimiser state, the loss
        trace and the step; the options and the SHA-256 of x) to this ``.npz`` file
        every ``checkpoint_every`` steps (:mod:`inference.engine.checkpoint`; atomic: a
        killed process leaves the last one intact).
    checkpoint_every : int, optional
        Steps per checkpoint (a positive int; needs ``checkpoint_path``).
    resume_from : str or os.PathLike, optional
        Continue from a checkpoint written by ``fit_mixture_svi`` with the same x and
        options (else ``ValueError`` naming the option); the result is bit-identical
        to the uninterrupted run.

    Returns
    -------
    MixtureSVIResult

    Warns
    -----
    ConvergenceWarning
        When the loss still moves by more than ``tol`` in the second half.
    NumericalWarning
        When the loss or the parameters are not finite.
    """
    x, k = _check_common(x, num_components, covariance, rng_key, prior_scale,
                         "fit_mixture_svi")
    num_steps = check_positive_int(num_steps, "num_steps")
    check_positive(step_size, "step_size")
    check_positive(tol, "tol")
    num, dim = x.shape
    key_means, key_run = jax.random.split(rng_key)
    weights, means, cov = _initial_parameters(key_means, x, k, covariance, init_means,
                                              init_weights, init_covariances)
    init_values = _site_values(weights, means, cov, covariance)
    with progress(num_steps, "mixture SVI", progress_bar) as every:
        sites, losses, log_prior = jax.block_until_ready(_svi_checkpointed(
            key_run, x, init_values, jnp.asarray(step_size, x.dtype),
            jnp.asarray(prior_scale, x.dtype), covariance=covariance, num_components=k,
            num_steps=num_steps, progress_every=every, checkpoint_path=checkpoint_path,
            checkpoint_every=checkpoint_every, resume_from=resume_from,
            options=dict(num_components=k, covariance=covariance, num_steps=num_steps,
                         step_size=step_size, prior_scale=prior_scale, rng_key=rng_key)))
    losses = losses / num
    weights, means, cov = _parameters(sites, covariance, dim)
    finite = all(bool(jnp.all(jnp.isfinite(v))) for v in (losses[-1], weights, means, cov))
    if not finite:
        warnings.warn("fit_mixture_svi: the loss or the parameters are not finite; lower "
                      "step_size", NumericalWarning, stacklevel=2)
    change = float(jnp.abs(losses[num_steps // 2] - losses[-1]))
    converged = finite and num_steps >= 10 and change <= tol
    if finite and not converged:
        warnings.warn(f"fit_mixture_svi: the loss still changed by {change:.3g} nats per example "
                      f"over the second half of the {num_steps} steps (tol={tol:g}); raise "
                      "num_steps", ConvergenceWarning, stacklevel=2)
    values = criteria(x, weights, means, cov, covariance) if finite else {"L_stocha": math.nan}
    labels = jnp.argmax(component_log_joint(x, weights, means, cov, covariance=covariance),
                        axis=1).astype(jnp.int32)
    return MixtureSVIResult(
        weights=weights, means=means, covariances=cov, log_likelihood=-values["L_stocha"],
        log_prior=float(log_prior), loss_trace=losses, labels=labels, num_components=k,
        num_steps=num_steps, converged=converged, covariance=covariance)


# --- NUTS ------------------------------------------------------------------------------

def _log_likelihood_one(x, sites, *, covariance, num_components):
    """log p(x_i | theta) (N,) for one draw: the program's own enumeration of y.

    Under ``enum`` the site y takes all k values along dimension -2 (the plate of
    examples is -1), so x's log-probability is (k, N) and y's (k, 1); y is summed out
    by log-sum-exp over that dimension.
    """
    program = enum(handlers.substitute(mixture.model, data=sites), first_available_dim=-2)
    trace = handlers.trace(program).get_trace(
        x, covariance=covariance, num_components=num_components)
    site_x, site_y = trace["x"], trace["y"]
    log_joint = site_x["fn"].log_prob(site_x["value"]) + site_y["fn"].log_prob(site_y["value"])
    return jax.nn.logsumexp(jnp.broadcast_to(log_joint, (num_components, x.shape[0])), axis=0)


@partial(jax.jit, static_argnames=("covariance", "num_components"))
def _log_likelihood_draws(x, flat_sites, *, covariance, num_components):
    one = partial(_log_likelihood_one, x, covariance=covariance, num_components=num_components)
    return jax.lax.map(one, flat_sites, batch_size=_DRAW_BATCH)


def pointwise_log_likelihood(x, samples, *, covariance: str = "full"):
    """log p(x_i | theta_s) for every draw s and example i, y summed out.

    Parameters
    ----------
    x : array (num_examples, d)
    samples : dict of arrays
        Site values with any number of leading draw axes: "alpha" (..., k),
        "m" (..., k, d), "sd" and, for ``"full"``, "corr" (..., k, d, d).
    covariance : {"full", "diag", "spherical"}

    Returns
    -------
    array (..., num_examples)
    """
    x = check_data(x, "x")
    lead = samples["alpha"].shape[:-1]
    k = samples["alpha"].shape[-1]
    flat = {name: jnp.reshape(jnp.asarray(v, x.dtype), (-1, *jnp.shape(v)[len(lead):]))
            for name, v in samples.items()}
    values = _log_likelihood_draws(x, flat, covariance=covariance, num_components=k)
    return values.reshape(*lead, x.shape[0])


class MixtureMCMCResult(NamedTuple):
    """Result of :func:`fit_mixture_mcmc`.

    Attributes
    ----------
    weights, means, covariances : arrays (k,), (k, d), (k, d, d)
        Posterior means of the *aligned* draws (:func:`align_draws`; the
        covariance matrices are averaged, not sd and corr).
    log_likelihood : float
        Posterior mean of the mean log-likelihood (1/N) sum_i log p(x_i | theta)
        on the data (label-invariant).
    predictive_log_likelihood : float
        (1/N) sum_i log (1/S) sum_s p(x_i | theta_s): the posterior-predictive
        density of the data (lppd / N; label-invariant).
    pointwise_log_likelihood : array (num_chains, num_samples, num_examples)
        log p(x_i | theta_s), y summed out: the ``log_likelihood`` group of
        :meth:`to_inference_data`.
    samples : dict of arrays (num_chains, num_samples, ...)
        Aligned post-warm-up draws of the sites "alpha", "m", "sd" (and "corr").
    potential_energy : array (num_chains, num_warmup + num_samples)
        -log p(x, theta) (y summed out) at every iteration, warm-up included.
    r_hat : float
        Largest split R-hat over the label-invariant summaries of each draw: its
        mean log-likelihood and its sorted weights.
    num_divergent : int
        Divergent transitions after warm-up, all chains.
    num_relabelled : int
        Post-warm-up draws whose components were permuted by the alignment.
    mean_num_steps, num_gradients : float, int
        Leapfrog steps per post-warm-up iteration; all of them, warm-up included.
    converged : bool
        ``r_hat <= R_HAT_THRESHOLD`` and no divergent transition.
    num_components : int
    covariance : str
    """

    weights: jax.Array
    means: jax.Array
    covariances: jax.Array
    log_likelihood: float
    predictive_log_likelihood: float
    pointwise_log_likelihood: np.ndarray
    samples: dict
    potential_energy: jax.Array
    r_hat: float
    num_divergent: int
    num_relabelled: int
    mean_num_steps: float
    num_gradients: int
    converged: bool
    num_components: int
    covariance: str

    def to_inference_data(self, x=None):
        """An ``arviz.InferenceData``: posterior (aligned draws), log_likelihood ("x"),
        and observed_data when ``x`` is given; ``arviz.loo`` and ``arviz.waic`` run on it."""
        import arviz as az

        observed = None if x is None else {"x": np.asarray(x)}
        return az.from_dict(
            posterior={name: np.asarray(v) for name, v in self.samples.items()},
            log_likelihood={"x": np.asarray(self.pointwise_log_likelihood)},
            observed_data=observed, dims={"x": ["example"]})


_NUTS_STATIC = ("covariance", "num_components", "num_warmup", "num_samples",
                "target_accept_prob", "max_tree_depth", "progress_every")


@partial(jax.jit, static_argnames=_NUTS_STATIC)
def _nuts_chain(rng_key, x, init_values, prior_scale, *, covariance, num_components,
                num_warmup, num_samples, target_accept_prob, max_tree_depth, progress_every):
    """One NUTS chain on alpha, m, sd (, corr), y enumerated; per-iteration arrays."""
    kwargs = _model_kwargs(covariance, num_components, prior_scale)
    kernel = NUTS(mixture.model, init_strategy=init_to_value(values=init_values),
                  target_accept_prob=target_accept_prob, max_tree_depth=max_tree_depth)
    state = kernel.init(rng_key, num_warmup, None, (x,), kwargs)
    constrain = kernel.postprocess_fn((x,), kwargs)  # state.z is unconstrained

    def body(state, i):
        state = kernel.sample(state, (x,), kwargs)
        tick(i, progress_every)
        return state, (constrain(state.z), state.potential_energy, state.diverging,
                       state.num_steps)

    _, out = jax.lax.scan(body, state, jnp.arange(num_warmup + num_samples))
    return out


def align_draws(samples, pivot_means):
    """Undo label switching: permute every draw's components to match ``pivot_means``.

    The rule (pivotal reordering, Marin, Mengersen & Robert 2005, sec. 4.1): for
    each draw the permutation of its components minimising the summed squared
    Euclidean distance between its means and the pivot's is found by the
    Hungarian algorithm; every site of the draw is permuted alike.

    Parameters
    ----------
    samples : dict of arrays (..., k, ...)
        Site values "alpha" (..., k), "m" (..., k, d), "sd" (..., k[, d]) and
        optionally "corr" (..., k, d, d), with the same leading draw axes.
    pivot_means : array (k, d)

    Returns
    -------
    aligned : dict of ndarrays, shapes as ``samples``
    num_permuted : int
        Draws whose permutation is not the identity.
    """
    from scipy.optimize import linear_sum_assignment

    pivot = np.asarray(pivot_means)
    means = np.asarray(samples["m"])
    if means.shape[-2:] != pivot.shape:
        raise ValueError(f"samples['m'] must end in the pivot's shape {pivot.shape}; got "
                         f"{means.shape}")
    lead = means.shape[:-2]
    flat = means.reshape(-1, *pivot.shape)
    cost = np.sum(np.square(pivot[None, :, None, :] - flat[:, None, :, :]), axis=-1)
    perms = np.stack([linear_sum_assignment(c)[1] for c in cost])
    index = np.arange(len(flat))[:, None]
    aligned = {}
    for name, value in samples.items():
        value = np.asarray(value)
        per_draw = value.reshape(len(flat), *value.shape[len(lead):])
        aligned[name] = per_draw[index, perms].reshape(value.shape)
    num_permuted = int(np.sum(np.any(perms != np.arange(pivot.shape[0]), axis=1)))
    return aligned, num_permuted


def fit_mixture_mcmc(x, num_components: int, *, rng_key, covariance: str = "full",
                     num_warmup: int = 500, num_samples: int = 500, num_chains: int = 1,
                     prior_scale: float = 10.0, init_means=None, init_weights=None,
                     init_covariances=None, target_accept_prob: float = 0.8,
                     max_tree_depth: int = 8, progress_bar: bool = False) -> MixtureMCMCResult:
    """Sample the posterior of the mixture's parameters by NUTS, y summed out (small data).

    NUTS (step size and diagonal mass matrix adapted in warm-up) runs on the
    program's continuous sites alpha, m, sd (and corr) with potential
    -log p(theta) - sum_i log sum_y alpha_y N(x_i; m_y, Sigma_y): NumPyro sees
    that y is marked for parallel enumeration and sums it out (through funsor)
    at every gradient. Cost O(num_examples k d^2) per gradient, up to
    2^max_tree_depth - 1 gradients per iteration; hence at most
    :data:`MAX_MCMC_EXAMPLES` examples and :data:`MAX_MCMC_COMPONENTS` components.

    Label switching (module docstring): the draws are aligned to the post-warm-up
    draw with the highest log joint (:func:`align_draws`, on the means), and the
    summaries ``weights``, ``means``, ``covariances`` are the aligned posterior
    means. ``log_likelihood``, ``predictive_log_likelihood`` and R-hat use only
    label-invariant quantities (each draw's mean log-likelihood and sorted
    weights), so they hold whether or not the chains switch labels; chains in
    different non-symmetric optima show as R-hat > 1.1.

    Parameters
    ----------
    x : array (num_examples, d)
        At most ``MAX_MCMC_EXAMPLES`` examples.
    num_components : int
        k, at most ``MAX_MCMC_COMPONENTS``.
    rng_key : jax.random key
        ``jax.random.split(rng_key)[0]`` seeds chain 0's k-means++ start as
        :func:`inference.mixture.em.fit_mixture` does (chain c > 0: that key folded
        with c); the other half drives NUTS.
    covariance : {"full", "diag", "spherical"}
    num_warmup, num_samples : int
        Per chain; ``num_samples >= 4`` (split R-hat).
    num_chains : int
        Chains, run one after the other (one compiled chain).
    prior_scale : float
        The program's prior scale (see :func:`fit_mixture_svi`).
    init_means, init_weights, init_covariances : arrays, optional
        Start of every chain (e.g. an EM fit); default as described under ``rng_key``.
    target_accept_prob, max_tree_depth : NUTS settings
        8 (NumPyro's default is 10) bounds what a stuck trajectory costs.
    progress_bar : bool
        tqdm bar over all iterations.

    Returns
    -------
    MixtureMCMCResult

    Warns
    -----
    ConvergenceWarning
        Split R-hat above ``R_HAT_THRESHOLD`` or divergent transitions.
    NumericalWarning
        Non-finite draws or log-likelihoods.
    """
    x, k = _check_common(x, num_components, covariance, rng_key, prior_scale,
                         "fit_mixture_mcmc")
    num, dim = x.shape
    if num > MAX_MCMC_EXAMPLES:
        raise ValueError(
            f"fit_mixture_mcmc is for small data: x has {num} examples, at most "
            f"{MAX_MCMC_EXAMPLES} (every NUTS gradient sums all components of every example); "
            "subsample x or use fit_mixture_svi")
    k = check_positive_int(k, "num_components", maximum=MAX_MCMC_COMPONENTS,
                           why=" for NUTS (k! symmetric posterior modes)")
    num_warmup = check_positive_int(num_warmup, "num_warmup")
    num_samples = check_positive_int(num_samples, "num_samples")
    if num_samples < 4:
        raise ValueError(f"num_samples must be at least 4 (split R-hat); got {num_samples}")
    num_chains = check_positive_int(num_chains, "num_chains")
    max_tree_depth = check_positive_int(max_tree_depth, "max_tree_depth")
    if not isinstance(target_accept_prob, int | float) or not 0 < target_accept_prob < 1:
        raise ValueError(f"target_accept_prob must be in (0, 1); got {target_accept_prob!r}")
    key_means, key_run = jax.random.split(rng_key)
    starts = []
    for c in range(num_chains):
        key = key_means if c == 0 else jax.random.fold_in(key_means, c)
        starts.append(_site_values(*_initial_parameters(
            key, x, k, covariance, init_means, init_weights, init_covariances), covariance))
    keys = jax.random.split(key_run, num_chains)
    settings = dict(covariance=covariance, num_components=k, num_warmup=num_warmup,
                    num_samples=num_samples, target_accept_prob=float(target_accept_prob),
                    max_tree_depth=max_tree_depth)
    prior = jnp.asarray(prior_scale, x.dtype)
    with progress((num_warmup + num_samples) * num_chains, "mixture NUTS",
                   progress_bar) as every:
        chains = [_nuts_chain(keys[c], x, starts[c], prior, progress_every=every, **settings)
                  for c in range(num_chains)]
        draws, potential, diverging, steps = jax.block_until_ready(
            jax.tree.map(lambda *a: jnp.stack(a), *chains))
    kept = {name: np.asarray(v[:, num_warmup:]) for name, v in draws.items()}
    pointwise = np.asarray(pointwise_log_likelihood(x, kept, covariance=covariance))
    if not (all(np.all(np.isfinite(v)) for v in kept.values()) and np.all(np.isfinite(pointwise))):
        warnings.warn("fit_mixture_mcmc: non-finite draws or log-likelihoods", NumericalWarning,
                      stacklevel=2)
    log_joint = -np.asarray(potential[:, num_warmup:])
    pivot_index = np.unravel_index(
        np.argmax(np.where(np.isfinite(log_joint), log_joint, -np.inf)), log_joint.shape)
    aligned, num_relabelled = align_draws(kept, kept["m"][pivot_index])
    mean_log_likelihood = pointwise.mean(axis=-1)  # (chains, samples)
    invariants = np.concatenate([mean_log_likelihood[..., None],
                                 np.sort(kept["alpha"], axis=-1)], axis=-1)
    r_hat = float(np.nanmax(split_gelman_rubin(invariants)))
    num_divergent = int(np.sum(np.asarray(diverging[:, num_warmup:])))
    converged = r_hat <= R_HAT_THRESHOLD and num_divergent == 0
    if not r_hat <= R_HAT_THRESHOLD:
        warnings.warn(f"fit_mixture_mcmc: largest split R-hat over the label-invariant summaries "
                      f"is {r_hat:.3g} > {R_HAT_THRESHOLD}; raise num_warmup / num_samples, or "
                      "start from an EM fit", ConvergenceWarning, stacklevel=2)
    if num_divergent:
        warnings.warn(f"fit_mixture_mcmc: {num_divergent} divergent transition(s) after warm-up; "
                      "raise target_accept_prob", ConvergenceWarning, stacklevel=2)
    weights, means, cov = _parameters({n: jnp.asarray(v) for n, v in aligned.items()},
                                      covariance, dim)
    flat = pointwise.reshape(-1, num)
    lppd = np.mean(_logmeanexp(flat, axis=0))
    return MixtureMCMCResult(
        weights=jnp.asarray(np.mean(np.asarray(weights), axis=(0, 1)), x.dtype),
        means=jnp.asarray(np.mean(np.asarray(means), axis=(0, 1)), x.dtype),
        covariances=jnp.asarray(np.mean(np.asarray(cov), axis=(0, 1)), x.dtype),
        log_likelihood=float(mean_log_likelihood.mean()), predictive_log_likelihood=float(lppd),
        pointwise_log_likelihood=pointwise, samples=aligned,
        potential_energy=jnp.asarray(potential), r_hat=r_hat, num_divergent=num_divergent,
        num_relabelled=num_relabelled,
        mean_num_steps=float(np.mean(np.asarray(steps[:, num_warmup:]))),
        num_gradients=int(np.sum(np.asarray(steps, np.int64))), converged=converged,
        num_components=k, covariance=covariance)


def _logmeanexp(values, axis):
    values = np.asarray(values, np.float64)
    top = np.max(values, axis=axis, keepdims=True)
    return np.squeeze(top, axis) + np.log(np.mean(np.exp(values - top), axis=axis))


def posterior_predictive_log_likelihood(result: MixtureMCMCResult, x) -> float:
    """(1/N) sum_i log (1/S) sum_s p(x_i | theta_s) on new data x (label-invariant).

    The posterior-predictive density of the MCMC draws, the Bayesian counterpart
    of a point estimate's held-out mean log-likelihood.
    """
    x = check_data(x, "x", dim=int(result.means.shape[1]))
    pointwise = np.asarray(pointwise_log_likelihood(x, result.samples,
                                                    covariance=result.covariance))
    return float(np.mean(_logmeanexp(pointwise.reshape(-1, x.shape[0]), axis=0)))


class MixtureLOO(NamedTuple):
    """PSIS-LOO of a k-component mixture (:func:`mixture_loo`); unpacks as a 3-tuple.

    Attributes
    ----------
    elpd_loo : float
        Expected log pointwise predictive density, summed over examples (higher is better).
    se : float
        Its standard error.
    pareto_k_max : float
        Largest Pareto shape estimate over examples; above arviz's ``good_k``
        (0.7 for 2,200+ draws, less for fewer) the estimate is unreliable.
    """

    elpd_loo: float
    se: float
    pareto_k_max: float


def mixture_loo(x, num_components: int, *, rng_key, covariance: str = "full",
                num_warmup: int = 500, num_samples: int = 500, num_chains: int = 1,
                **mcmc_kwargs) -> MixtureLOO:
    """Leave-one-out expected log predictive density of the k-component program.

    Runs :func:`fit_mixture_mcmc` (small data only) and ``arviz.loo`` (Pareto-
    smoothed importance sampling, Vehtari et al. 2017) on its
    :meth:`~MixtureMCMCResult.to_inference_data`. For choosing k, take the
    largest ``elpd_loo`` (or minimise ``-elpd_loo / num_examples``, per example
    like L_stocha); differences within a couple of ``se`` are not decisive.

    Parameters
    ----------
    x : array (num_examples, d)
    num_components : int
    rng_key : jax.random key
    covariance, num_warmup, num_samples, num_chains, **mcmc_kwargs
        Passed to :func:`fit_mixture_mcmc`.

    Returns
    -------
    MixtureLOO
        (elpd_loo, se, pareto_k_max).

    Warns
    -----
    NumericalWarning
        When some Pareto k exceeds arviz's ``good_k`` (arviz's own UserWarning is
        replaced by it).
    ConvergenceWarning
        From :func:`fit_mixture_mcmc`.
    """
    import arviz as az

    result = fit_mixture_mcmc(x, num_components, rng_key=rng_key, covariance=covariance,
                              num_warmup=num_warmup, num_samples=num_samples,
                              num_chains=num_chains, **mcmc_kwargs)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Pareto distribution", category=UserWarning)
        loo = az.loo(result.to_inference_data(), pointwise=True)
    pareto_k_max = float(np.max(np.asarray(loo.pareto_k)))
    good_k = float(getattr(loo, "good_k", 0.7))
    if pareto_k_max > good_k:
        warnings.warn(f"mixture_loo: largest Pareto k is {pareto_k_max:.3g} > {good_k:.3g} "
                      f"(k={num_components}); the PSIS-LOO estimate is unreliable for some "
                      "examples; raise num_samples", NumericalWarning, stacklevel=2)
    return MixtureLOO(float(loo.elpd_loo), float(loo.se), pareto_k_max)
