"""NUTS on the clipped-Gaussian program, as a baseline (see :mod:`inference.clipped.baselines`):
:func:`fit_clipped_mcmc`.

NUTS samples W, xi and every pattern's y of :func:`ppl_models.clipped_gaussian.model`
(small problems only) through the engine's NUTS runner
(:func:`inference.engine.mcmc.run_nuts`), and the draws
are summarised by what is invariant under the rotation W -> W Q, y -> Q^T y: the
posterior-predictive moments and the posterior mean of W W^T.

References
----------
Hoffman, Gelman, "The No-U-Turn Sampler", JMLR 15 (2014).
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.diagnostics import split_gelman_rubin

from inference.clipped.baselines_common import check_arguments, initial_weights, program_kwargs
from inference.clipped.fit import model_moments
from inference.engine.inference_data import NUTSDraws, nuts_draws, to_inference_data
from inference.engine.mcmc import run_nuts
from inference.engine.protocol import sampler_protocol
from ppl_models import clipped_gaussian
from ppl_models.clipped_gaussian import DEFAULT_NOISE
from ppl_models.diagnostics import ConvergenceWarning, NumericalWarning
from ppl_models.validation import check_positive_int

__all__ = ["fit_clipped_mcmc", "ClippedMCMCResult", "MAX_MCMC_DIMENSION", "R_HAT_THRESHOLD"]

#: NUTS state size N P + N + num_examples P above which fit_clipped_mcmc refuses:
#: every gradient touches all patterns and a trajectory takes up to 2^max_tree_depth
#: of them, so beyond a few thousand dimensions a run takes many minutes.
MAX_MCMC_DIMENSION = 5000
#: Largest split R-hat (over the rotation-invariant W W^T and xi) of a converged run
#: (Gelman et al., Bayesian Data Analysis, 3rd ed., sec. 11.4).
R_HAT_THRESHOLD = 1.1


@sampler_protocol
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
    mcmc : NUTSDraws or None
        The draws of W, xi and y, NumPyro's extra fields per draw, the patterns and the
        program's arguments: what :meth:`to_inference_data` converts (None in results
        saved before it was kept).
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
    mcmc: NUTSDraws | None = None


    def to_inference_data(self):
        """An ``arviz.InferenceData`` built by ``arviz.from_numpyro``
        (:func:`inference.engine.inference_data.to_inference_data`).

        Groups: ``posterior`` ("W" over "unit" and "hidden", "xi" over "unit" unless
        ``bias=False``, "y" over "example" and "hidden"; W and y each in their own
        rotation), ``sample_stats`` (``diverging``, ``energy``, ``lp``, ...),
        ``log_likelihood`` ("s": log p(s_mu | W, xi, y_mu) per "example") and
        ``observed_data`` ("s").

        Returns
        -------
        arviz.InferenceData
        """
        return to_inference_data(self.mcmc, result=self)


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
        ``to_inference_data()`` converts it for arviz.

    Warns
    -----
    ConvergenceWarning
        Split R-hat above ``R_HAT_THRESHOLD`` or divergent transitions.

    Examples
    --------
    >>> import warnings
    >>> import arviz as az
    >>> import jax
    >>> from ppl_models.clipped_gaussian import generate
    >>> from ppl_models.diagnostics import ConvergenceWarning
    >>> data = generate(jax.random.key(0), num_examples=20, num_visible=4, num_hidden=1)
    >>> with warnings.catch_warnings():  # so short a run may end with R-hat above 1.1
    ...     warnings.simplefilter("ignore", ConvergenceWarning)
    ...     result = fit_clipped_mcmc(data.s, 1, rng_key=jax.random.key(1), num_warmup=20,
    ...                               num_samples=20, num_chains=2)
    >>> result.weight_samples.shape
    (2, 20, 4, 1)
    >>> idata = result.to_inference_data()
    >>> sorted(idata.groups())
    ['log_likelihood', 'observed_data', 'posterior', 'sample_stats']
    >>> idata.posterior["y"].dims, idata.log_likelihood["s"].shape
    (('chain', 'draw', 'example', 'hidden'), (2, 20, 20))
    >>> az.summary(idata, var_names=["xi"]).shape  # 4 entries of xi, 9 statistics
    (4, 9)
    """
    spins, num_hidden, noise, bias = check_arguments(s, num_hidden, rng_key, noise, bias,
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
    starts = [initial_weights(k, init_weights, num_units, num_hidden) for k in keys[num_chains:]]
    dtype = spins.dtype
    chains = run_nuts(
        clipped_gaussian.model, keys[:num_chains], (spins,), {"noise": jnp.asarray(noise, dtype)},
        {"W": jnp.stack([w.astype(dtype) for w in starts])},
        static_kwargs=(("num_hidden", num_hidden), *program_kwargs(bias).items()),
        zero_sites=(("xi", (num_units,), dtype), ("y", (num_examples, num_hidden), dtype)),
        num_warmup=num_warmup, num_samples=num_samples, target_accept_prob=target_accept_prob,
        max_tree_depth=max_tree_depth, constrained=False,
        sites=("W", "xi", "y") if bias else ("W", "y"), progress_bar=progress_bar,
        desc="clipped NUTS")
    potential, diverging, steps = chains.potential_energy, chains.diverging, chains.num_steps
    weights = chains.z["W"]
    xi = chains.z["xi"] if bias else jnp.zeros((*weights.shape[:2], num_units), dtype)
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
    record = nuts_draws(
        chains, num_warmup, clipped_gaussian.model, (spins,),
        {"noise": jnp.asarray(noise, dtype), "num_hidden": num_hidden, **program_kwargs(bias)},
        dims={"W": ["unit", "hidden"], "xi": ["unit"], "y": ["example", "hidden"],
              "s": ["example", "unit"]})
    return ClippedMCMCResult(
        means=jnp.asarray(np.mean([m[0] for m in moments], axis=0), dtype),
        second_moments=jnp.asarray(np.mean([m[1] for m in moments], axis=0), dtype),
        weights_gram=jnp.asarray(gram.mean(axis=(0, 1)), dtype),
        weight_samples=jnp.asarray(weights), bias_samples=jnp.asarray(xi),
        potential_energy=jnp.asarray(potential), r_hat=r_hat, num_divergent=num_divergent,
        mean_num_steps=float(np.mean(np.asarray(steps[:, num_warmup:]))),
        num_gradients=int(np.sum(np.asarray(steps, np.int64))), converged=converged,
        num_predictive_draws=int(len(picks)), noise=noise, mcmc=record)
