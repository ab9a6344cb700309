"""The mixture sampled by NUTS on the enumerated program (:func:`fit_mixture_mcmc`),
label alignment, predictive log likelihoods and PSIS-LOO (:func:`mixture_loo`)."""

from __future__ import annotations

import warnings
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.contrib.funsor import enum
from numpyro.diagnostics import split_gelman_rubin

from inference.engine.inference_data import NUTSDraws, nuts_draws, to_inference_data
from inference.engine.mcmc import run_nuts
from inference.engine.protocol import sampler_protocol
from inference.mixture.baselines_common import (
    DRAW_BATCH,
    MAX_MCMC_COMPONENTS,
    MAX_MCMC_EXAMPLES,
    R_HAT_THRESHOLD,
    check_common,
    initial_parameters,
    model_kwargs,
    parameters_from_sites,
    site_values,
)
from ppl_models import mixture
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import (
    check_data,
    check_positive_int,
)


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
    return jax.lax.map(one, flat_sites, batch_size=DRAW_BATCH)


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


@sampler_protocol
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
    mcmc : NUTSDraws or None
        The aligned draws, NumPyro's extra fields per draw, the data and the program's
        arguments: what :meth:`to_inference_data` converts (None in results saved
        before it was kept).
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
    mcmc: NUTSDraws | None = None


    def to_inference_data(self, x=None):
        """An ``arviz.InferenceData`` built by ``arviz.from_numpyro``; ``arviz.loo``,
        ``arviz.waic``, ``arviz.summary`` and ``arviz.plot_trace`` run on it.

        Groups: ``posterior`` (the aligned draws of alpha, m, sd and corr),
        ``sample_stats`` (``diverging``, ``energy``, ``lp``, ...), ``log_likelihood``
        ("x": ``pointwise_log_likelihood``, y summed out), ``observed_data`` ("x"), with
        the dimensions "component", "dim", "dim_col" and "example"
        (:func:`inference.engine.mcmc.to_inference_data`).

        Parameters
        ----------
        x : array (num_examples, d), optional
            The data the result was fitted to (it is kept; a different ``x`` is refused).
            A result saved before the chains were kept (``mcmc`` None) converts by
            ``arviz.from_dict`` instead: posterior, log_likelihood and, given ``x``,
            observed_data, without sample_stats.

        Returns
        -------
        arviz.InferenceData
        """
        if self.mcmc is None:
            import arviz as az

            observed = None if x is None else {"x": np.asarray(x)}
            return az.from_dict(
                posterior={name: np.asarray(v) for name, v in self.samples.items()},
                log_likelihood={"x": np.asarray(self.pointwise_log_likelihood)},
                observed_data=observed, dims={"x": ["example"]})
        if x is not None:
            kept = np.asarray(self.mcmc.model_args[0])
            if np.shape(x) != kept.shape or not np.allclose(np.asarray(x, kept.dtype), kept):
                raise ValueError(f"x is not the data this result was fitted to (shape "
                                 f"{np.shape(x)}, fitted to {kept.shape})")
        return to_inference_data(self.mcmc, log_likelihood={
            "x": np.asarray(self.pointwise_log_likelihood)})


def _dims(covariance):
    """Dimension names of the program's sites (:class:`~inference.engine.mcmc.NUTSDraws`)."""
    sd = ["component"] if covariance == "spherical" else ["component", "dim"]
    return {"alpha": ["component"], "m": ["component", "dim"], "sd": sd,
            "corr": ["component", "dim", "dim_col"], "x": ["example", "dim"]}


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
        ``to_inference_data()`` converts it for arviz.

    Warns
    -----
    ConvergenceWarning
        Split R-hat above ``R_HAT_THRESHOLD`` or divergent transitions.
    NumericalWarning
        Non-finite draws or log-likelihoods.

    Examples
    --------
    >>> import arviz as az
    >>> import jax
    >>> from ppl_models import mixture
    >>> data = mixture.generate(jax.random.key(2), 100, 2, 2, separation=6.0)
    >>> result = fit_mixture_mcmc(data.x, 2, rng_key=jax.random.key(1), covariance="diag",
    ...                           num_warmup=200, num_samples=500, num_chains=2)
    >>> result.means.shape, bool(result.converged)
    ((2, 2), True)
    >>> idata = result.to_inference_data()
    >>> sorted(idata.groups())
    ['log_likelihood', 'observed_data', 'posterior', 'sample_stats']
    >>> idata.posterior["m"].dims, idata.log_likelihood["x"].dims
    (('chain', 'draw', 'component', 'dim'), ('chain', 'draw', 'example'))
    >>> int(idata.sample_stats["diverging"].sum())
    0
    >>> az.summary(idata, var_names=["alpha"]).shape
    (2, 9)
    """
    x, k = check_common(x, num_components, covariance, rng_key, prior_scale,
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
        starts.append(site_values(*initial_parameters(
            key, x, k, covariance, init_means, init_weights, init_covariances), covariance))
    keys = jax.random.split(key_run, num_chains)
    kwargs = model_kwargs(covariance, k, jnp.asarray(prior_scale, x.dtype))
    static = {name: v for name, v in kwargs.items() if name != "prior_scale"}
    chains = run_nuts(
        mixture.model, keys, (x,), {"prior_scale": kwargs["prior_scale"]},
        jax.tree.map(lambda *v: jnp.stack(v), *starts), static_kwargs=static,
        num_warmup=num_warmup, num_samples=num_samples, target_accept_prob=target_accept_prob,
        max_tree_depth=max_tree_depth, progress_bar=progress_bar, desc="mixture NUTS")
    draws, potential, diverging, steps = chains[:4]
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
    weights, means, cov = parameters_from_sites({n: jnp.asarray(v) for n, v in aligned.items()},
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
        num_components=k, covariance=covariance,
        mcmc=nuts_draws(chains, num_warmup, mixture.model, (x,), kwargs, samples=aligned,
                        dims=_dims(covariance)))


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
    """PSIS-LOO summary that :func:`mixture_loo` returned before it returned arviz's
    ``ELPDData`` (deprecated; kept so that results saved by earlier versions load).

    ``MixtureLOO.from_elpd(mixture_loo(...))`` gives the old 3-tuple.

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

    @classmethod
    def from_elpd(cls, loo) -> MixtureLOO:
        """The (elpd_loo, se, largest Pareto k) of an ``arviz.ELPDData``."""
        return cls(float(loo.elpd_loo), float(loo.se), float(np.max(np.asarray(loo.pareto_k))))


def mixture_loo(x, num_components: int, *, rng_key, covariance: str = "full",
                num_warmup: int = 500, num_samples: int = 500, num_chains: int = 1,
                **mcmc_kwargs):
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
    arviz.ELPDData
        ``arviz.loo(..., pointwise=True)``: ``elpd_loo``, ``se``, ``p_loo``, ``loo_i``
        and ``pareto_k`` per example, ``good_k``; ``arviz.compare`` takes a dict of them.
        (It returned a :class:`MixtureLOO` before; ``MixtureLOO.from_elpd`` gives that.)

    Warns
    -----
    NumericalWarning
        When some Pareto k exceeds arviz's ``good_k`` (arviz's own UserWarning is
        replaced by it).
    ConvergenceWarning
        From :func:`fit_mixture_mcmc`.

    Examples
    --------
    >>> import arviz as az
    >>> import jax
    >>> from ppl_models import mixture
    >>> data = mixture.generate(jax.random.key(2), 100, 2, 2, separation=6.0)
    >>> loo = mixture_loo(data.x, 2, rng_key=jax.random.key(1), covariance="diag",
    ...                   num_warmup=200, num_samples=500, num_chains=2)
    >>> isinstance(loo, az.ELPDData), loo.loo_i.shape, bool(loo.pareto_k.max() < loo.good_k)
    (True, (100,), True)
    >>> MixtureLOO.from_elpd(loo)._fields
    ('elpd_loo', 'se', 'pareto_k_max')
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
    return loo
