"""``ppl-zoo compare gvq_learning``: learning GVQ features, EM against NumPyro's SVI and MCMC.

M. Westerdijk, D. Barber and W. Wiegerinck, "Deterministic generative models for fast
feature discovery", Data Mining and Knowledge Discovery 5(4), 2001, learn the features
by EM in the sigma -> 0 limit with any association method in the E-step (sec. 3.1)
and run it on planted problems (sec. 4.3). This
comparison runs every learner on the same planted data (the generator of
:func:`ppl_models.gvq.generate_planted`: n = 6 features, dim 12, dense
F ~ N(2, 1), s* ~ Bernoulli(1/2), noise sqrt(0.1) as in sec. 4.3.1; 300
examples, 200 with ``quick``) from the same random initial features
(:func:`inference.gvq.em.initial_features`, one per restart or chain):

* ours: :func:`inference.fit_gvq` with association ``"exact"``, ``"br"``,
  ``"mf"`` and ``"br+mf"``, 4 restarts (2 with ``quick``);
* NumPyro: :func:`~inference.gvq.baselines.fit_gvq_svi` (SVI,
  ``TraceEnum_ELBO``, point mass on F, Adam 0.05, same restarts) and
  :func:`~inference.gvq.baselines.fit_gvq_mcmc` (NUTS on F with the units
  enumerated; one chain per restart from the restarts' initial features,
  300 warm-up + 200 kept iterations, 50 + 50 with ``quick``; summarised by
  the relabelled posterior mean of the chain holding the highest-log-joint
  sample, ``summary="chain"``, the analogue of keeping EM's best restart),
  both at sigma equal to the data's noise.

From random initial features many NUTS chains settle in poor optima, where
the features spread by several units (against about 0.04 in the planted
optimum) and the trajectories run to the tree-depth cap at almost every
iteration (1023 gradients with NumPyro's default ``max_tree_depth=10``, up
to minutes per chain). To keep the comparison within its
time budget NUTS runs here with ``max_tree_depth=6`` (at most 63 gradients
per iteration); good chains need 15-30, so only the stuck ones are cut short.
The row reports the gradients per kept iteration, all gradients, R-hat and
ESS (over all chains, relabelled: chains in different optima give a large
R-hat), divergences, and relabelled samples.

Every learner's features are re-associated exactly (``associate(F, x,
"exact")``), so the objective, the mean ||x - s F||^2 per example, is
comparable across learners; ``own_error`` is what the learner itself reports
(for EM, under its own association method). A reference row gives the
planted features' error on the same data (the noise floor; about dim x
noise^2 = 1.2, and learned features fit the noise slightly better, so
``gap_to_planted`` can be a little negative). ``feature_error`` is the
largest absolute difference to the planted features after matching rows
(:func:`inference.gvq.em.match_features`). Times follow
:func:`inference.app.compare.timed`: ``first_call_s`` includes compilation,
``time_s`` is a warm second call. ``iterations`` are EM iterations of the
best restart, Adam steps, or NUTS iterations per chain (warm-up included;
``mcmc_steps_per_iteration`` gives the gradients per NUTS iteration).
"""

from __future__ import annotations

import math

import jax
import numpy as np
from tqdm.auto import tqdm

from inference.association.core import associate
from inference.engine.figures import new_figure, save_figure
from inference.engine.reporting import ComparisonResult, ComparisonRow, timed
from inference.gvq.baselines import fit_gvq_mcmc, fit_gvq_svi
from inference.gvq.em import fit_gvq, initial_features, match_features
from ppl_models import gvq

__all__ = ["compare_gvq_learning", "plot_gvq_learning", "EM_METHODS"]

#: Association methods of the EM rows, with readable names (Westerdijk, Barber and
#: Wiegerinck (2001), sec. 4).
EM_METHODS = {
    "exact": "EM, exact association",
    "br": "EM, BR association",
    "mf": "EM, MF association",
    "br+mf": "EM, BR+MF association",
}
OBJECTIVE = "mean ||x - sF||^2, exact re-association"


def _row(label, implementation, result, x, planted, planted_error, t, t0, notes, iterations,
         **extra):
    """A learning row: exact re-association error, gap to planted, feature error."""
    error = float(np.mean(associate(result.features, x, check=False).energy))
    return ComparisonRow(
        "learning", label, implementation, OBJECTIVE, error, t, t0, bool(result.converged),
        {"own_error": float(result.error),
         "gap_to_planted": (error - planted_error) / planted_error,
         "feature_error": match_features(result.features, planted)[1],
         "iterations": iterations, **extra}, notes)


def compare_gvq_learning(rng_key, *, quick: bool = False, progress_bar: bool = True,
                         num_examples: int | None = None, num_features: int = 6, dim: int = 12,
                         noise: float = gvq.PAPER_NOISE_SCALE, num_restarts: int | None = None,
                         svi_steps: int | None = None, svi_learning_rate: float = 0.05,
                         mcmc_warmup: int | None = None, mcmc_samples: int | None = None,
                         mcmc_chains: int | None = None,
                         mcmc_max_tree_depth: int = 6) -> ComparisonResult:
    """Run the learning comparison; see the module docstring.

    Parameters
    ----------
    rng_key : jax.random key
    quick : bool
        200 examples, 2 restarts, 400 SVI steps, NUTS 50 + 50 iterations
        (about 40 s on 2 CPU cores).
    progress_bar : bool
        Show a tqdm bar over the learners.
    num_examples, num_features, dim, noise
        The planted problem (default 300 / quick 200, 6, 12, sqrt(0.1)).
    num_restarts : int, optional
        EM and SVI restarts (default 4, quick 2).
    svi_steps, svi_learning_rate
        Adam steps (default 1500, quick 400) and step size of SVI.
    mcmc_warmup, mcmc_samples, mcmc_chains : int, optional
        NUTS warm-up and kept iterations per chain and number of chains
        (default 300, 200, ``num_restarts``; quick 50, 50, ``num_restarts``).
    mcmc_max_tree_depth : int
        NUTS's tree-depth cap (default 6; see the module docstring).

    Returns
    -------
    ComparisonResult
        A reference row (the planted features) and one row per learner;
        ``arrays`` holds the planted and the learned features (rows matched).
    """
    num_examples = num_examples or (200 if quick else 300)
    num_restarts = num_restarts or (2 if quick else 4)
    svi_steps = svi_steps or (400 if quick else 1500)
    mcmc_warmup = mcmc_warmup or (50 if quick else 300)
    mcmc_samples = mcmc_samples or (50 if quick else 200)
    mcmc_chains = mcmc_chains or num_restarts
    key_data, key_fit = jax.random.split(rng_key)
    data = gvq.generate_planted(key_data, num_examples, num_features, dim, noise_scale=noise)
    x, planted = data.x, data.features
    settings = dict(num_examples=num_examples, num_features=num_features, dim=dim,
                    noise=noise, num_restarts=num_restarts, svi_steps=svi_steps,
                    svi_learning_rate=svi_learning_rate, mcmc_warmup=mcmc_warmup,
                    mcmc_samples=mcmc_samples, mcmc_chains=mcmc_chains,
                    mcmc_max_tree_depth=mcmc_max_tree_depth, quick=quick)
    starts = jax.vmap(lambda k: initial_features(k, x, num_features))(
        jax.random.split(jax.random.fold_in(key_fit, 1), max(num_restarts, mcmc_chains)))
    arrays = {"planted": np.asarray(planted)}
    steps = tqdm(total=len(EM_METHODS) + 3, desc="compare gvq_learning",
                 disable=not progress_bar, leave=False)

    steps.set_postfix_str("planted features")
    reference, t, t0, notes = timed(associate, planted, x, method="exact", check=False)
    planted_error = float(np.mean(reference.energy))
    rows = [ComparisonRow(
        "learning", "planted features (noise floor, reference)", "reference", OBJECTIVE,
        planted_error, math.nan, math.nan, True,
        {"own_error": planted_error, "gap_to_planted": 0.0, "feature_error": 0.0,
         "iterations": None}, notes)]
    steps.update()

    for number, (method, label) in enumerate(EM_METHODS.items()):
        steps.set_postfix_str(f"EM {method}")
        em, t, t0, notes = timed(fit_gvq, x, num_features, method=method,
                                 rng_key=jax.random.fold_in(key_fit, 10 + number),
                                 num_restarts=num_restarts, init_features=starts[:num_restarts])
        arrays[f"em_{method}"] = np.asarray(em.features)[match_features(em.features, planted)[0]]
        rows.append(_row(label, "ours", em, x, planted, planted_error, t, t0, notes,
                         int(em.num_iterations)))
        steps.update()

    steps.set_postfix_str("SVI")
    svi, t, t0, notes = timed(fit_gvq_svi, x, num_features, rng_key=jax.random.fold_in(key_fit, 2),
                              noise=noise, num_steps=svi_steps, num_restarts=num_restarts,
                              learning_rate=svi_learning_rate, init_features=starts[:num_restarts])
    arrays["svi"] = np.asarray(svi.features)[match_features(svi.features, planted)[0]]
    rows.append(_row(f"SVI TraceEnum_ELBO, MAP F, sigma={noise:.3g}", "numpyro", svi, x, planted,
                     planted_error, t, t0, notes, int(svi.num_iterations)))
    steps.update()

    steps.set_postfix_str("NUTS")
    mcmc, t, t0, notes = timed(fit_gvq_mcmc, x, num_features,
                               rng_key=jax.random.fold_in(key_fit, 3), noise=noise,
                               num_warmup=mcmc_warmup, num_samples=mcmc_samples,
                               num_chains=mcmc_chains, init_features=starts[:mcmc_chains],
                               summary="chain", max_tree_depth=mcmc_max_tree_depth)
    arrays["mcmc"] = np.asarray(mcmc.features)[match_features(mcmc.features, planted)[0]]
    rows.append(_row(
        f"NUTS, units enumerated, best chain's posterior mean, sigma={noise:.3g}", "numpyro",
        mcmc, x, planted, planted_error, t, t0, notes, int(mcmc.num_iterations),
        mcmc_chains=mcmc_chains, mcmc_max_r_hat=float(np.max(mcmc.r_hat)),
        mcmc_min_ess=float(np.min(mcmc.ess)), mcmc_divergent=mcmc.num_divergent,
        mcmc_relabelled=mcmc.num_relabelled, mcmc_steps_per_iteration=mcmc.mean_num_steps,
        mcmc_gradients=mcmc.num_gradients))
    steps.update()
    steps.close()
    return ComparisonResult("gvq_learning", rows, settings, arrays, plot_gvq_learning)


def plot_gvq_learning(result: ComparisonResult, path) -> None:
    """Bar charts: each learner's relative error gap to the planted features, and warm time."""
    import textwrap

    from matplotlib.patches import Patch

    rows = [row for row in result.rows if row.implementation != "reference"]
    labels = [textwrap.fill(f"{row.algorithm} ({row.implementation})", 36) for row in rows]
    colours = ["tab:blue" if row.implementation == "ours" else "tab:orange" for row in rows]
    where = np.arange(len(rows))
    fig, (ax_gap, ax_time) = new_figure(1, 2, figsize=(11, 0.55 * len(rows) + 2.2),
                                        sharey=True)
    gaps = [100 * row.extra["gap_to_planted"] for row in rows]
    ax_gap.barh(where, gaps, color=colours)
    for i, gap in enumerate(gaps):
        ax_gap.text(max(gap, 0.0), i, f" {gap:.3g}", va="center", fontsize=7)
    ax_gap.set_xlim(min(0.0, *gaps), 1.15 * max(0.0, *gaps) + 1e-9)
    ax_gap.axvline(0.0, color="k", lw=0.8)
    ax_gap.set_yticks(where, labels, fontsize=8)
    ax_gap.invert_yaxis()
    ax_gap.set_xlabel("excess error over the planted features (%)")
    ax_gap.set_title("mean ||x - sF||^2 (exact re-association) relative to planted F",
                     fontsize=9)
    ax_time.barh(where, [row.time_s for row in rows], color=colours)
    ax_time.set_xscale("log")
    ax_time.tick_params(axis="y", labelleft=False)
    ax_time.set_xlabel("warm time (s, log scale)")
    ax_time.set_title("time of a warm call", fontsize=9)
    fig.legend(handles=[Patch(color="tab:blue", label="ours (EM)"),
                        Patch(color="tab:orange", label="NumPyro (SVI, NUTS)")],
               loc="outside lower center", ncols=2, fontsize=8)
    fig.suptitle("GVQ learning on planted data")
    save_figure(fig, path)
