"""NUTS on the GVQ program's F with the binary units summed out, as a baseline (see
:mod:`inference.gvq.baselines`): :func:`fit_gvq_mcmc` and :class:`GVQMCMCResult`.

The chains run through the engine's NUTS runner (:func:`inference.engine.mcmc.run_nuts`):
a fixed number of warm-up and sampling iterations, whose per-iteration arrays are the
samples themselves (their ``trace``), diagnosed by split R-hat.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.diagnostics import effective_sample_size, split_gelman_rubin

from inference.association.core import associate
from inference.engine.inference_data import NUTSDraws, nuts_draws, to_inference_data
from inference.engine.mcmc import run_nuts
from inference.engine.persistence import register_renamed_fields
from inference.engine.protocol import follows_protocol
from inference.gvq.algorithm import restart_features
from inference.gvq.result import GVQTrace
from inference.program.kwargs import split_model_kwargs
from ppl_models import gvq
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import (
    MissingKeyError,
    check_choice,
    check_data,
    check_positive,
    check_positive_int,
    check_rng_key,
)

__all__ = ["fit_gvq_mcmc", "GVQMCMCResult", "relabel_samples", "MAX_MCMC_FEATURES",
           "R_HAT_THRESHOLD"]

#: NUTS sums the 2^n states of every example at *every* gradient evaluation
#: (hundreds to thousands per kept sample): refused beyond 8 units (256 states).
MAX_MCMC_FEATURES = 8
#: A chain counts as converged when the largest split R-hat over the entries of
#: F is at most this (Gelman et al., Bayesian Data Analysis, 3rd ed., sec. 11.4).
R_HAT_THRESHOLD = 1.1



@follows_protocol("potential_energy_per_example", "min")
class GVQMCMCResult(NamedTuple):
    """Result of :func:`fit_gvq_mcmc`.

    The first six fields are those of :class:`~inference.gvq.em.GVQResult`, so code
    reading ``features``, ``states``, ``error`` works on both.

    Attributes
    ----------
    features : array (num_features, dim)
        The posterior summary of F: the mean of the relabelled post-warm-up
        samples of all chains (``summary="mean"``) or of the chain that holds
        the pivot (``"chain"``), or the pivot itself, the sample with the highest
        log joint (``"best"``).
    states : int32 array (num_examples, num_features)
        Exact (sigma -> 0) association of every example under ``features``.
    error : scalar
        Mean over examples of ||x - s @ F||^2 for ``states`` and ``features``.
    trace : GVQTrace
        ``objective`` (num_chains, num_warmup + num_samples): -log p(x, F) /
        num_examples (the units summed out; NUTS's potential energy per example)
        at every iteration, warm-up included; the same quantity as
        :func:`fit_gvq_svi`'s loss trace.
    num_iterations : int
        num_warmup + num_samples, per chain.
    converged : bool
        Largest split R-hat over the entries of F at most ``R_HAT_THRESHOLD``
        (1.1) and no divergent transition after warm-up.
    samples : array (num_chains, num_samples, num_features, dim)
        Post-warm-up samples of F, the rows of each permuted to match the pivot.
    log_joint : array (num_chains, num_samples)
        log p(x, F) of every sample, the units summed out.
    best_features : array (num_features, dim)
        The pivot (see ``features``).
    r_hat, ess : arrays (num_features, dim)
        Split R-hat and effective sample size of every entry of F over the
        relabelled samples of all chains (``numpyro.diagnostics``; with one
        chain, R-hat compares its two halves).
    num_divergent : int
        Divergent transitions after warm-up, all chains.
    num_relabelled : int
        Post-warm-up samples whose rows were permuted (label switches undone).
    mean_num_steps : float
        Mean number of leapfrog steps (gradient evaluations) per post-warm-up
        iteration; 2^max_tree_depth - 1 means every trajectory hit the cap.
    num_gradients : int
        Leapfrog steps of all iterations of all chains, warm-up included: the cost.
    mcmc : NUTSDraws or None
        The relabelled samples, NumPyro's extra fields per draw, the data and the
        program's arguments: what :meth:`to_inference_data` converts (None in results
        saved before it was kept).
    """

    features: jax.Array
    states: jax.Array
    error: jax.Array
    trace: GVQTrace
    num_iterations: jax.Array
    converged: jax.Array
    samples: jax.Array
    log_joint: jax.Array
    best_features: jax.Array
    r_hat: np.ndarray
    ess: np.ndarray
    num_divergent: int
    num_relabelled: int
    mean_num_steps: float
    num_gradients: int
    mcmc: NUTSDraws | None = None

    def to_inference_data(self, model=None):
        """An ``arviz.InferenceData`` built by ``arviz.from_numpyro``
        (:func:`inference.engine.inference_data.to_inference_data`).

        Groups: ``posterior`` ("F", the relabelled samples, dimensions "feature" and
        "dim"), ``sample_stats`` (``diverging``, ``energy``, ``lp``, ...),
        ``log_likelihood`` ("x": log p(x_mu | F) per "example", the units summed out)
        and ``observed_data`` ("x").

        Parameters
        ----------
        model : callable, optional
            The program, needed only when it was not one of ``inference`` or
            ``ppl_models`` (a ``model=`` passed to :func:`fit_gvq_mcmc` that has no
            importable name).

        Returns
        -------
        arviz.InferenceData
        """
        return to_inference_data(self.mcmc, model, result=self)


def relabel_samples(samples, pivot):
    """Undo label switching: permute the rows of every sample to match ``pivot``.

    Pivotal reordering (Marin, Mengersen & Robert 2005, sec. 4.1): for each
    sample the permutation of its rows (features) minimising the summed squared
    Euclidean distance to the pivot's rows is found by the Hungarian algorithm
    (``scipy.optimize.linear_sum_assignment``).

    Parameters
    ----------
    samples : array (..., num_features, dim)
    pivot : array (num_features, dim)

    Returns
    -------
    relabelled : ndarray, the shape of ``samples``
    num_permuted : int
        Samples whose permutation is not the identity.
    """
    from scipy.optimize import linear_sum_assignment

    samples, pivot = np.asarray(samples), np.asarray(pivot)
    if samples.shape[-2:] != pivot.shape:
        raise ValueError(f"samples must end in the pivot's shape {pivot.shape}; got "
                         f"{samples.shape}")
    flat = samples.reshape(-1, *pivot.shape)
    # cost[k, i, j] = ||pivot[i] - sample_k[j]||^2
    cost = np.sum(np.square(pivot[None, :, None, :] - flat[:, None, :, :]), axis=-1)
    perms = np.stack([linear_sum_assignment(c)[1] for c in cost]) if len(flat) else \
        np.zeros((0, pivot.shape[0]), int)
    relabelled = np.take_along_axis(flat, perms[:, :, None], axis=1)
    num_permuted = int(np.sum(np.any(perms != np.arange(pivot.shape[0]), axis=1)))
    return relabelled.reshape(samples.shape), num_permuted


def fit_gvq_mcmc(
    x,
    num_features: int,
    *,
    rng_key,
    noise=0.1,
    num_warmup: int = 500,
    num_samples: int = 500,
    num_chains: int = 1,
    chain_method: str = "sequential",
    init_features=None,
    summary: str = "mean",
    target_accept_prob: float = 0.8,
    max_tree_depth: int = 10,
    dense_mass: bool = False,
    model: Callable | None = None,
    model_kwargs: dict | None = None,
    progress_bar: bool = False,
) -> GVQMCMCResult:
    """Sample the posterior over F by NUTS, the binary units summed out (small n only).

    Model: the GVQ program at finite noise (:func:`ppl_models.gvq.model` with
    ``split_states=True``),

        F ~ Normal(0, feature_scale),  s_i ~ Bernoulli(p_i),  x ~ Normal(s @ F, sigma^2 I),

    whose unit sites ``s_0 .. s_{n-1}`` are marked for parallel enumeration.
    NumPyro's MCMC sums them out exactly (through funsor), so NUTS (Hoffman &
    Gelman 2014; step size and diagonal mass matrix adapted during warm-up)
    runs on the continuous F alone, with potential energy
    -log p(F) - sum_mu log sum_s p(s) N(x_mu; s @ F, sigma^2 I).

    Cost: every gradient of that potential touches all 2^n states of every
    example, O(num_examples 2^n dim), and every NUTS iteration takes up to
    2^max_tree_depth gradients (``mean_num_steps`` reports how many it took);
    the total is O((num_warmup + num_samples) num_chains steps num_examples 2^n dim).
    Hence ``num_features <= MAX_MCMC_FEATURES`` (8).

    Label switching: the posterior is invariant under permutations of the
    rows of F (the units relabelled alike), n! symmetric modes, besides the
    non-symmetric local optima that EM meets too. At small sigma a chain
    practically never crosses between symmetric modes (the barriers grow
    like num_examples / sigma^2 in log density), but different chains land
    in different permutations, and averaging them unaligned is meaningless.
    The samples are therefore relabelled against a pivot (:func:`relabel_samples`):
    the pivot is the post-warm-up sample with the highest log joint over all
    chains. The summary ``features`` is the mean of the relabelled samples
    (``summary="mean"``, the default: the posterior mean within the pivot's
    mode, the Bayes estimate under squared loss and, unlike a single sample,
    free of the posterior's own spread). R-hat and ESS are computed on the
    relabelled samples, so chains stuck in different non-symmetric optima
    still show as R-hat > 1.1 (a warning and ``converged=False``). Such chains
    are like EM's restarts, and averaging across them is meaningless:
    ``summary="chain"`` then averages only the chain holding the pivot (the
    best restart, as :func:`inference.fit_gvq` keeps the best restart), and
    ``"best"`` returns the pivot itself. In a poor optimum loosely determined
    features may swap places within a chain; ``num_relabelled`` counts those
    swaps too.

    Parameters
    ----------
    x : array (num_examples, dim)
    num_features : int
        n, at most 8.
    rng_key : jax.random key
        Drives the initial features (when ``init_features`` is None) and NUTS.
    noise : float
        Observation noise of the program (its ``sigma``).
    num_warmup, num_samples : int
        Warm-up (adaptation) iterations and kept samples per chain;
        ``num_samples >= 4`` (split R-hat halves each chain).
    num_chains : int
        Independent chains, each from its own initial features.
    chain_method : {"sequential", "vectorized"}
        Run the chains one after the other (one compiled chain) or under ``vmap``.
    init_features : array, optional
        (num_features, dim), shared by all chains, or (num_chains, num_features, dim);
        default :func:`inference.gvq.em.initial_features`, as for :func:`inference.fit_gvq`.
    summary : {"mean", "chain", "best"}
        How ``features`` summarises the samples (see above).
    target_accept_prob, max_tree_depth, dense_mass
        NUTS settings (NumPyro's defaults 0.8, 10, False).
    model, model_kwargs
        The program (``split_states`` support, F a latent site ``"F"``) and
        further keyword arguments (e.g. ``prior_probs``, ``feature_scale``).
    progress_bar : bool
        Show a tqdm bar over all iterations (advanced from inside the jitted chain).

    Returns
    -------
    GVQMCMCResult
        ``to_inference_data()`` converts it for arviz.

    Notes
    -----
    From random initial features many chains settle in poor optima (as EM's
    restarts do; ``ppl-zoo compare gvq_learning`` shows how many). Such a
    chain was seen to spread its features by several units (against about
    0.04 in the planted optimum), and its trajectories run to the tree-depth
    cap at almost every iteration, so it costs up to 2^max_tree_depth - 1
    gradients per iteration (``mean_num_steps``, ``num_gradients``). A lower
    ``max_tree_depth`` bounds that cost; starting from EM's features
    (``init_features=fit_gvq(...).features``) samples the posterior around
    EM's optimum.

    References
    ----------
    Hoffman, Gelman, "The No-U-Turn Sampler", JMLR 15 (2014).
    Marin, Mengersen, Robert, "Bayesian modelling and inference on mixtures of
    distributions", Handbook of Statistics 25 (2005), sec. 4.1.

    Examples
    --------
    >>> import arviz as az
    >>> import jax
    >>> from ppl_models import gvq
    >>> data = gvq.generate_planted(jax.random.key(0), 16, 2, 4, noise_scale=0.3)
    >>> result = fit_gvq_mcmc(data.x, 2, rng_key=jax.random.key(1), noise=0.3,
    ...                       init_features=data.features, num_warmup=50, num_samples=50,
    ...                       num_chains=2)
    >>> result.samples.shape, bool(result.converged)
    ((2, 50, 2, 4), True)
    >>> idata = result.to_inference_data()
    >>> sorted(idata.groups())
    ['log_likelihood', 'observed_data', 'posterior', 'sample_stats']
    >>> idata.posterior["F"].dims
    ('chain', 'draw', 'feature', 'dim')
    >>> az.summary(idata, var_names=["F"]).shape  # 2 x 4 entries of F, 9 statistics
    (8, 9)
    """
    if rng_key is None:
        raise MissingKeyError("fit_gvq_mcmc needs an explicit rng_key (e.g. jax.random.key(0))")
    check_rng_key(rng_key)
    x = check_data(x, "x")
    num_features = check_positive_int(
        num_features, "num_features", maximum=MAX_MCMC_FEATURES,
        why=" for NUTS with enumerated units (2^num_features states per example at every "
            "gradient evaluation)")
    num_warmup = check_positive_int(num_warmup, "num_warmup")
    num_samples = check_positive_int(num_samples, "num_samples")
    if num_samples < 4:
        raise ValueError(f"num_samples must be at least 4 (split R-hat compares the two halves "
                         f"of each chain); got {num_samples}")
    num_chains = check_positive_int(num_chains, "num_chains")
    max_tree_depth = check_positive_int(max_tree_depth, "max_tree_depth")
    check_choice(chain_method, "chain_method", ("sequential", "vectorized"))
    check_choice(summary, "summary", ("mean", "chain", "best"))
    check_positive(noise, "noise")
    if not isinstance(target_accept_prob, int | float) or not 0 < target_accept_prob < 1:
        raise ValueError(f"target_accept_prob must be in (0, 1); got {target_accept_prob!r}")
    if "features" in (model_kwargs or {}):
        raise ValueError("model_kwargs must not fix 'features': MCMC samples F")
    model = gvq.model if model is None else model
    key_init, key_run = jax.random.split(rng_key)
    starts = restart_features(key_init, x, num_features, num_chains, init_features)
    keys = jax.random.split(key_run, num_chains)
    dynamic, static = split_model_kwargs(model_kwargs)
    total = num_warmup + num_samples
    chains = run_nuts(
        model, keys, (x,), {**dynamic, "sigma": jnp.asarray(noise, x.dtype)}, {"F": starts},
        static_kwargs=(*static, ("split_states", True), ("num_features", int(starts.shape[1]))),
        num_warmup=num_warmup, num_samples=num_samples, chain_method=chain_method,
        target_accept_prob=target_accept_prob, max_tree_depth=max_tree_depth,
        dense_mass=dense_mass, constrained=False, progress_bar=progress_bar, desc="GVQ NUTS")
    draws, potential, diverging, num_steps = (chains.z["F"], chains.potential_energy,
                                              chains.diverging, chains.num_steps)
    log_joint = -np.asarray(potential[:, num_warmup:])
    if not np.all(np.isfinite(log_joint)):
        warnings.warn("fit_gvq_mcmc: non-finite log density among the samples; they are "
                      "skipped when choosing the pivot", NumericalWarning, stacklevel=2)
    pivot_index = np.unravel_index(
        np.argmax(np.where(np.isfinite(log_joint), log_joint, -np.inf)), log_joint.shape)
    kept = np.asarray(draws[:, num_warmup:])
    pivot = kept[pivot_index]
    samples, num_relabelled = relabel_samples(kept, pivot)
    r_hat = split_gelman_rubin(samples)
    ess = effective_sample_size(samples)
    num_divergent = int(np.sum(np.asarray(diverging[:, num_warmup:])))
    max_r_hat = float(np.nanmax(r_hat))
    converged = bool(max_r_hat <= R_HAT_THRESHOLD) and num_divergent == 0
    if max_r_hat > R_HAT_THRESHOLD or not np.isfinite(max_r_hat):
        warnings.warn(
            f"fit_gvq_mcmc: largest split R-hat over F is {max_r_hat:.3g} > {R_HAT_THRESHOLD} "
            "(chains in different optima, or not mixed within the chain); raise num_warmup / "
            "num_samples, or use summary='chain'", ConvergenceWarning, stacklevel=2)
    if num_divergent:
        warnings.warn(
            f"fit_gvq_mcmc: {num_divergent} divergent transition(s) after warm-up; raise "
            "target_accept_prob", ConvergenceWarning, stacklevel=2)
    if summary == "mean":
        features = samples.reshape(-1, *pivot.shape).mean(axis=0)
    elif summary == "chain":
        features = samples[pivot_index[0]].mean(axis=0)
    else:
        features = pivot
    features = jnp.asarray(features, x.dtype)
    result = associate(features, x, model=model, model_kwargs=model_kwargs, check=False)
    program_kwargs = {**dynamic, "sigma": jnp.asarray(noise, x.dtype), **dict(static),
                      "split_states": True, "num_features": int(starts.shape[1])}
    record = nuts_draws(chains, num_warmup, model, (x,), program_kwargs,
                        samples={"F": samples}, dims={"F": ["feature", "dim"],
                                                      "x": ["example", "dim"]})
    return GVQMCMCResult(
        features=features, states=result.states, error=jnp.mean(result.energy),
        trace=GVQTrace(jnp.asarray(potential) / x.shape[0]), num_iterations=jnp.asarray(total),
        converged=jnp.asarray(converged), samples=jnp.asarray(samples),
        log_joint=jnp.asarray(log_joint), best_features=jnp.asarray(pivot),
        r_hat=np.asarray(r_hat), ess=np.asarray(ess), num_divergent=num_divergent,
        num_relabelled=num_relabelled,
        mean_num_steps=float(np.mean(np.asarray(num_steps[:, num_warmup:]))),
        num_gradients=int(np.sum(np.asarray(num_steps, np.int64))), mcmc=record,
    )


def _trace_of_chains(fields: dict) -> dict:
    """An old file's ``error_trace`` array as the :class:`GVQTrace` of every chain."""
    trace = fields.get("trace")
    if trace is not None and not isinstance(trace, GVQTrace):
        fields = dict(fields, trace=GVQTrace(objective=trace))
    return fields


register_renamed_fields(GVQMCMCResult, {"error_trace": "trace"}, convert=_trace_of_chains)
