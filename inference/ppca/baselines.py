"""NumPyro's generic inference on the PPCA program, as baselines for :func:`fit_ppca`.

Both run on the *collapsed* program ``ppl_models.ppca.model(..., collapsed=True)``:
x_n ~ MultivariateNormal(mu, W^T W + sigma^2 I) with z integrated out exactly (the same
program as the one with a z site per example, marginalised; its log-density is the
likelihood that Tipping & Bishop's EM maximises, plus the priors W ~ Normal(0, 1),
mu ~ Normal(0, 10^2), sigma ~ HalfNormal(1)). Marginalising z removes N q latent
dimensions, so NUTS is quick on small data and SVI needs no guide for z.

* :func:`fit_ppca_svi`: SVI with ``AutoDelta`` on W, mu and sigma (a point estimate:
  the maximum a posteriori parameters; with N examples the priors barely move it from
  the maximum-likelihood fit of ``fit_ppca(noise="ml")``), Adam with a cosine-decayed
  step size, all steps in the engine's one compiled loop (:mod:`inference.engine.svi`);
* :func:`fit_ppca_mcmc`: NUTS over W, mu and sigma, summarised by rotation-invariant
  quantities (W is identified only up to W -> Q W): the posterior mean of W^T W, its
  leading q eigenvectors (the posterior's principal subspace) and the posterior mean
  of sigma.

References
----------
M. E. Tipping, C. M. Bishop, "Probabilistic principal component analysis", JRSS B, 1999.
M. D. Hoffman, A. Gelman, "The No-U-Turn Sampler", JMLR 15, 2014.
D. P. Kingma, J. Ba, "Adam: a method for stochastic optimization", ICLR 2015.
"""

from __future__ import annotations

import warnings
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from numpyro.diagnostics import split_gelman_rubin
from numpyro.infer import SVI, Trace_ELBO, init_to_value
from numpyro.infer.autoguide import AutoDelta

from inference.engine.inference_data import NUTSDraws, nuts_draws, to_inference_data
from inference.engine.mcmc import run_nuts
from inference.engine.persistence import register_renamed_fields, wrap_trace
from inference.engine.protocol import follows_protocol, sampler_protocol
from inference.engine.svi import SVIFit, SVIProblem, best_svi_start
from ppl_models import ppca
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import (
    check_data,
    check_positive,
    check_positive_int,
    check_rng_key,
)

__all__ = ["PPCASVIResult", "PPCASVITrace", "PPCAMCMCResult", "fit_ppca_svi", "fit_ppca_mcmc",
           "R_HAT_THRESHOLD"]

#: Largest split R-hat (over W^T W and sigma) of a converged NUTS run (Gelman et al.,
#: Bayesian Data Analysis, 3rd ed., sec. 11.4).
R_HAT_THRESHOLD = 1.1
#: Adam's step size decays by a cosine to this fraction of ``learning_rate``.
_FINAL_FRACTION = 0.01


def _check(x, num_components, rng_key):
    check_rng_key(rng_key)
    x = check_data(x, "x", min_examples=2)
    num_components = check_positive_int(num_components, "num_components",
                                        maximum=x.shape[1] - 1 if x.shape[1] > 1 else 1,
                                        why=" (d - 1: sigma needs a discarded direction)")
    return x, num_components


def _start(rng_key, x, num_components):
    """Initial W (random, scaled to the data), mu (data mean) and sigma (data std)."""
    scale = jnp.sqrt(jnp.mean(jnp.var(x, axis=0)))
    weights = jax.random.normal(rng_key, (num_components, x.shape[1]), x.dtype) * scale
    return {"W": weights, "mu": jnp.mean(x, axis=0), "sigma": scale}


class PPCASVITrace(NamedTuple):
    """Per-step arrays of :func:`fit_ppca_svi` (all ``num_steps`` steps run).

    Attributes
    ----------
    objective : array (num_steps,)
        -ELBO per step divided by the number of examples.
    """

    objective: jax.Array


@follows_protocol("loss", "min")
class PPCASVIResult(NamedTuple):
    """Result of :func:`fit_ppca_svi`.

    Attributes
    ----------
    weights : array (q, d)
        Point estimate of W (one rotation among equally good ones).
    mean : array (d,)
    noise : float
        Point estimate of sigma.
    trace : PPCASVITrace
        ``objective``: -ELBO per step divided by the number of examples (the negative
        mean log joint density at the point estimate: log-likelihood plus priors).
    num_iterations : int
        Steps run (``num_steps``: all of them).
    converged : bool
        The mean loss of the last tenth of the steps differs from that of the tenth
        before by at most ``tol`` (relative).
    restart_objectives : array (num_restarts,) or None
        The final loss per example (``trace.objective[-1]``) of every start when
        ``num_restarts`` > 1 (the result is the start with the lowest); None for one
        start.
    """

    weights: jax.Array
    mean: jax.Array
    noise: float
    trace: PPCASVITrace
    num_iterations: int
    converged: bool
    restart_objectives: jax.Array | None = None


register_renamed_fields(PPCASVIResult, {"loss_trace": "trace", "num_steps": "num_iterations"},
                        convert=wrap_trace(PPCASVITrace))


def _svi_make(data, params, start, *, num_steps):
    """The SVI of :func:`fit_ppca_svi` (:class:`inference.engine.svi.SVIFit`): ``params``
    is ``(initial sites, learning_rate)`` (the start is in ``params``, or in ``start``
    when the fit has several)."""
    (x,) = data
    init_values, learning_rate = params
    if start is not None:
        init_values = start
    model = partial(ppca.model, collapsed=True, sigma=None)
    guide = AutoDelta(model, init_loc_fn=init_to_value(values=init_values))
    schedule = optax.cosine_decay_schedule(learning_rate, num_steps, alpha=_FINAL_FRACTION)
    return SVIProblem(SVI(model, guide, optax.adam(schedule), Trace_ELBO()), (x,),
                      {"num_components": init_values["W"].shape[0]})


def _svi_sites(problem, state, data, params):
    """W, mu and sigma (constrained) of a final SVI state."""
    return problem.svi.guide.median(problem.svi.get_params(state))


def fit_ppca_svi(x, num_components: int, *, rng_key, num_steps: int = 2000,
                 learning_rate: float = 0.05, tol: float = 1e-3,
                 progress_bar: bool = False, num_restarts: int = 1) -> PPCASVIResult:
    """MAP W, mu and sigma of the collapsed PPCA program by SVI (``AutoDelta``, Adam).

    Parameters
    ----------
    x : array (num_examples, d)
    num_components : int
        q, 1 <= q <= d - 1.
    rng_key : jax.random key
        Draws the initial W (Normal(0, 1) entries times the data's standard deviation;
        mu starts at the data mean and sigma at the data's standard deviation).
    num_steps : int
        Adam steps.
    learning_rate : float
        Adam's initial step size (decayed by a cosine to 1% of it).
    tol : float
        Convergence test on the loss (see :class:`PPCASVIResult`).
    progress_bar : bool
        tqdm bar over the steps, advanced from inside the jitted loop.
    num_restarts : int
        Starts (random initial W) run side by side (``vmap``) in the engine's one
        compiled loop; the fit returned is the one with the lowest final loss
        (``trace.objective[-1]``, non-finite ones skipped). One start (the default) is
        drawn from ``rng_key`` itself, more from ``jax.random.split(rng_key,
        num_restarts)`` (start i is the fit with ``rng_key`` that key, up to float
        rounding); ``restart_objectives`` lists every start's final loss.

    Returns
    -------
    PPCASVIResult

    Warns
    -----
    ConvergenceWarning
        When the loss still changes by more than ``tol`` at the end.
    NumericalWarning
        When the loss or the estimates are not finite.

    Examples
    --------
    >>> import jax
    >>> from inference.ppca.compare import largest_angle
    >>> from ppl_models import ppca
    >>> data = ppca.generate(jax.random.key(0), 300, 5, 2, noise=0.1)
    >>> fit = fit_ppca_svi(data.x, 2, rng_key=jax.random.key(1), num_steps=200)
    >>> fit.weights.shape, bool(fit.converged), round(float(fit.noise), 1)  # sigma = 0.1
    ((2, 5), True, 0.1)
    >>> largest_angle(fit.weights, data.weights) < 0.05  # the planted subspace (radians)
    True
    """
    x, num_components = _check(x, num_components, rng_key)
    num_steps = check_positive_int(num_steps, "num_steps")
    check_positive(learning_rate, "learning_rate")
    check_positive(tol, "tol")
    num_restarts = check_positive_int(num_restarts, "num_restarts")
    start_keys = [rng_key] if num_restarts == 1 else list(jax.random.split(rng_key, num_restarts))
    key_pairs = [jax.random.split(key) for key in start_keys]
    inits = [_start(key_init, x, num_components) for key_init, _ in key_pairs]
    # One start: in params (as ever); several: stacked, one per start (``_svi_make``'s).
    starts = None if num_restarts == 1 else jax.tree.map(lambda *v: jnp.stack(v), *inits)
    fit = SVIFit(_svi_make, "fit_ppca_svi", (("num_steps", num_steps),))
    params = (inits[0], jnp.asarray(learning_rate, x.dtype))
    fitted = fit.run(jnp.stack([key_run for _, key_run in key_pairs]), (x,), params,
                     num_steps=num_steps, starts=starts, progress_bar=progress_bar)
    best, restart_objectives = best_svi_start(fitted, x.shape[0], num_restarts)
    sites = jax.tree.map(lambda leaf: leaf[best], jax.block_until_ready(
        fit.read(fitted.state, (x,), params, _svi_sites)))
    losses = fitted.trace.objective[best]
    losses = losses / x.shape[0]
    tenth = max(1, num_steps // 10)
    before, last = (float(jnp.mean(losses[-2 * tenth:-tenth])), float(jnp.mean(losses[-tenth:])))
    finite = bool(jnp.all(jnp.isfinite(sites["W"]))) and np.isfinite(last)
    if not finite:
        warnings.warn("fit_ppca_svi: the loss or the estimates are not finite; lower "
                      "learning_rate", NumericalWarning, stacklevel=2)
    converged = num_steps >= 20 and finite and abs(before - last) <= tol * abs(last)
    if not converged:
        warnings.warn(f"fit_ppca_svi: the loss still changes by more than tol={tol:g} "
                      f"(relative) over the last fifth of the {num_steps} steps; raise num_steps",
                      ConvergenceWarning, stacklevel=2)
    return PPCASVIResult(sites["W"], sites["mu"], float(sites["sigma"]), PPCASVITrace(losses),
                         num_steps, converged, restart_objectives)


@sampler_protocol
class PPCAMCMCResult(NamedTuple):
    """Result of :func:`fit_ppca_mcmc`.

    Attributes
    ----------
    weights_gram : array (d, d)
        Posterior mean of W^T W (rotation-invariant).
    subspace : array (q, d)
        Orthonormal rows: the leading q eigenvectors of ``weights_gram``.
    mean : array (d,)
        Posterior mean of mu.
    noise : float
        Posterior mean of sigma.
    noise_samples : array (num_chains, num_samples)
    r_hat : float
        Largest split R-hat over the entries of W^T W and sigma.
    num_divergent : int
        Divergent transitions after warm-up, all chains.
    num_gradients : int
        Leapfrog steps after warm-up, all chains (the cost).
    converged : bool
        ``r_hat <= R_HAT_THRESHOLD`` and no divergent transition.
    mcmc : NUTSDraws or None
        The draws of W, mu and sigma, NumPyro's extra fields per draw, the data and the
        program's arguments: what :meth:`to_inference_data` converts (None in results
        saved before it was kept).
    potential_energy : array (num_chains, num_warmup + num_samples) or None
        -log density of every draw, warm-up included (``trace.objective``; None in results
        saved before it was kept).
    """

    weights_gram: jax.Array
    subspace: jax.Array
    mean: jax.Array
    noise: float
    noise_samples: jax.Array
    r_hat: float
    num_divergent: int
    num_gradients: int
    converged: bool
    mcmc: NUTSDraws | None = None
    potential_energy: jax.Array | None = None


    def to_inference_data(self):
        """An ``arviz.InferenceData`` built by ``arviz.from_numpyro``
        (:func:`inference.engine.inference_data.to_inference_data`).

        Groups: ``posterior`` ("W" over "component" and "dim", each draw in its own
        rotation; "mu" over "dim"; "sigma"), ``sample_stats`` (``diverging``,
        ``energy``, ``lp``, ...), ``log_likelihood`` ("x": log p(x_n | W, mu, sigma),
        z integrated out, per "example") and ``observed_data`` ("x").

        Returns
        -------
        arviz.InferenceData
        """
        return to_inference_data(self.mcmc, result=self)


#: The collapsed program (z integrated out, sigma sampled) that fit_ppca_mcmc samples.
_COLLAPSED = partial(ppca.model, collapsed=True, sigma=None)


def fit_ppca_mcmc(x, num_components: int, *, rng_key, num_warmup: int = 300,
                  num_samples: int = 300, num_chains: int = 2,
                  target_accept_prob: float = 0.8, max_tree_depth: int = 6,
                  progress_bar: bool = False) -> PPCAMCMCResult:
    """Sample W, mu and sigma of the collapsed PPCA program by NUTS.

    Parameters
    ----------
    x : array (num_examples, d)
    num_components : int
        q, 1 <= q <= d - 1.
    rng_key : jax.random key
        Draws the initial W (shared by the chains; mu starts at the data mean, sigma at
        the data's standard deviation) and the chains.
    num_warmup, num_samples : int
        Per chain; ``num_samples >= 4`` (split R-hat).
    num_chains : int
        Chains, run one after the other (one compiled chain).
    target_accept_prob : float
        NUTS's step-size adaptation target, in (0, 1).
    max_tree_depth : int
        A trajectory takes at most 2^max_tree_depth - 1 gradients. 6 (NumPyro's default
        is 10): the rotation W -> Q W is a flat direction of the likelihood, held only
        by the prior, along which trajectories would otherwise run to the cap.
    progress_bar : bool
        tqdm bar over all iterations, advanced from inside the jitted chain.

    Returns
    -------
    PPCAMCMCResult
        ``to_inference_data()`` converts it for arviz.

    Warns
    -----
    ConvergenceWarning
        Split R-hat above ``R_HAT_THRESHOLD`` or divergent transitions.

    Examples
    --------
    >>> import arviz as az
    >>> import jax
    >>> from ppl_models import ppca
    >>> data = ppca.generate(jax.random.key(0), 100, 4, 1, noise=0.3)
    >>> result = fit_ppca_mcmc(data.x, 1, rng_key=jax.random.key(1), num_warmup=100,
    ...                        num_samples=100)
    >>> result.subspace.shape, bool(result.converged)
    ((1, 4), True)
    >>> idata = result.to_inference_data()
    >>> sorted(idata.groups())
    ['log_likelihood', 'observed_data', 'posterior', 'sample_stats']
    >>> idata.posterior["W"].dims, idata.log_likelihood["x"].shape
    (('chain', 'draw', 'component', 'dim'), (2, 100, 100))
    >>> az.bfmi(idata).shape  # energy Bayesian fraction of missing information, per chain
    (2,)
    """
    x, num_components = _check(x, num_components, rng_key)
    num_warmup = check_positive_int(num_warmup, "num_warmup")
    num_samples = check_positive_int(num_samples, "num_samples")
    if num_samples < 4:
        raise ValueError(f"num_samples must be at least 4 (split R-hat); got {num_samples}")
    num_chains = check_positive_int(num_chains, "num_chains")
    max_tree_depth = check_positive_int(max_tree_depth, "max_tree_depth")
    if isinstance(target_accept_prob, bool) or not isinstance(
            target_accept_prob, int | float) or not 0 < target_accept_prob < 1:
        raise ValueError(f"target_accept_prob must be in (0, 1); got {target_accept_prob!r}")
    key_init, key_run = jax.random.split(rng_key)
    start = _start(key_init, x, num_components)
    # The chains' keys as numpyro's MCMC splits them (one chain: the key itself).
    keys = jax.random.split(key_run, num_chains) if num_chains > 1 else key_run[None]
    chains = run_nuts(
        _COLLAPSED, keys, (x,), None, jax.tree.map(lambda v: jnp.stack([v] * num_chains), start),
        static_kwargs={"num_components": num_components}, num_warmup=num_warmup,
        num_samples=num_samples, target_accept_prob=target_accept_prob,
        max_tree_depth=max_tree_depth, progress_bar=progress_bar, desc="PPCA NUTS")
    sites, diverging, steps = chains.z, chains.diverging, chains.num_steps
    draws = {name: value[:, num_warmup:] for name, value in sites.items()}
    weights = np.asarray(draws["W"], np.float64)
    gram = np.einsum("csqa,csqb->csab", weights, weights)
    rows, cols = np.triu_indices(x.shape[1])
    sigma = np.asarray(draws["sigma"])
    invariants = np.concatenate([gram[..., rows, cols], sigma[..., None]], axis=-1)
    r_hat = float(np.nanmax(split_gelman_rubin(invariants)))
    num_divergent = int(np.sum(np.asarray(diverging[:, num_warmup:])))
    num_gradients = int(np.sum(np.asarray(steps[:, num_warmup:], np.int64)))
    converged = r_hat <= R_HAT_THRESHOLD and num_divergent == 0
    if not r_hat <= R_HAT_THRESHOLD:
        warnings.warn(f"fit_ppca_mcmc: largest split R-hat over W^T W and sigma is {r_hat:.3g} "
                      f"> {R_HAT_THRESHOLD}; raise num_warmup / num_samples",
                      ConvergenceWarning, stacklevel=2)
    if num_divergent:
        warnings.warn(f"fit_ppca_mcmc: {num_divergent} divergent transition(s) after warm-up; "
                      "raise target_accept_prob", ConvergenceWarning, stacklevel=2)
    mean_gram = gram.mean(axis=(0, 1))
    _, vectors = np.linalg.eigh(mean_gram)
    subspace = vectors[:, ::-1][:, :num_components].T
    dtype = x.dtype
    record = nuts_draws(chains, num_warmup, _COLLAPSED, (x,), {"num_components": num_components},
                        dims={"W": ["component", "dim"], "mu": ["dim"], "x": ["example", "dim"]})
    return PPCAMCMCResult(jnp.asarray(mean_gram, dtype), jnp.asarray(subspace, dtype),
                          jnp.asarray(np.asarray(draws["mu"]).mean(axis=(0, 1)), dtype),
                          float(sigma.mean()), jnp.asarray(sigma, dtype), r_hat, num_divergent,
                          num_gradients, converged, mcmc=record,
                          potential_energy=jnp.asarray(chains.potential_energy))
