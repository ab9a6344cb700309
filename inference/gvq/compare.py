"""``ppl-zoo compare gvq``: GVQ's custom inference against NumPyro on one program.

Data: the planted-feature generator of sec. 4.3 of M. Westerdijk, D. Barber and
W. Wiegerinck, "Deterministic generative models for fast feature discovery", Data
Mining and Knowledge Discovery 5(4), 2001 (:func:`ppl_models.gvq.generate_planted`),
by default 500 examples, 6 features, dim 16, noise 0.1. Two tasks:

* association with the planted F: exhaustive search through the program's
  quadratic energy (ours) against ``infer_discrete(temperature=0)`` (NumPyro);
  reported: mean energy, agreement of the states, time;
* learning F from a random start: EM in the sigma -> 0 limit with exact
  association (ours) against SVI with ``TraceEnum_ELBO`` and a point-mass
  guide on F at the data's noise (NumPyro), both with the same restarts and
  initialisations; reported: mean ||x - s F||^2 under exact association, the
  largest feature error after matching to the planted F, time, convergence.
"""

from __future__ import annotations

import jax
import numpy as np
from tqdm.auto import tqdm

from inference.association.core import associate
from inference.engine.figures import new_figure, save_figure
from inference.engine.reporting import ComparisonResult, ComparisonRow, timed
from inference.gvq.baselines import fit_gvq_svi, map_associate
from inference.gvq.em import fit_gvq, initial_features, match_features
from ppl_models import gvq

__all__ = ["compare_gvq", "plot_gvq"]


def compare_gvq(rng_key, *, quick: bool = False, progress_bar: bool = True,
                num_examples: int | None = None, num_features: int = 6, dim: int = 16,
                noise: float = 0.1, num_restarts: int | None = None,
                svi_steps: int | None = None) -> ComparisonResult:
    """Run the GVQ comparison; see the module docstring. ``quick`` shrinks every size."""
    num_examples = num_examples or (200 if quick else 500)
    num_restarts = num_restarts or (2 if quick else 4)
    svi_steps = svi_steps or (400 if quick else 1500)
    key_data, key_fit = jax.random.split(rng_key)
    data = gvq.generate_planted(key_data, num_examples, num_features, dim, noise_scale=noise)
    x, planted = data.x, data.features
    settings = dict(num_examples=num_examples, num_features=num_features, dim=dim, noise=noise,
                    num_restarts=num_restarts, svi_steps=svi_steps, quick=quick)
    rows, arrays = [], {"planted": np.asarray(planted)}
    energy_name = "mean ||x - sF||^2"
    noise_floor = dim * noise**2

    steps = tqdm(total=4, desc="compare gvq", disable=not progress_bar, leave=False)
    steps.set_postfix_str("exact association")
    exact, t, t0, notes = timed(associate, planted, x, method="exact", check=False)
    rows.append(ComparisonRow(
        "association", "exhaustive search (quadratic form)", "ours", energy_name,
        float(exact.energy.mean()), t, t0, bool(exact.converged.all()),
        {"agreement_with_exact": 1.0, "noise_floor": noise_floor}, notes))
    steps.update()

    steps.set_postfix_str("infer_discrete MAP")
    peer, t, t0, notes = timed(map_associate, planted, x, noise=noise)
    agreement = float(np.mean(np.all(np.asarray(peer.states) == np.asarray(exact.states), 1)))
    rows.append(ComparisonRow(
        "association", "infer_discrete(temperature=0)", "numpyro", energy_name,
        float(peer.energy.mean()), t, t0, bool(peer.converged.all()),
        {"agreement_with_exact": agreement, "noise_floor": noise_floor}, notes))
    steps.update()

    key_init = jax.random.fold_in(key_fit, 1)
    starts = jax.vmap(lambda k: initial_features(k, x, num_features))(
        jax.random.split(key_init, num_restarts))
    steps.set_postfix_str("GVQ-EM")
    em, t, t0, notes = timed(fit_gvq, x, num_features, method="exact", rng_key=key_fit,
                      num_restarts=num_restarts, init_features=starts)
    perm, feature_error = match_features(em.features, planted)
    arrays["em"] = np.asarray(em.features)[perm]
    rows.append(ComparisonRow(
        "learning", "EM, exact association, sigma -> 0", "ours", energy_name, float(em.error),
        t, t0, bool(em.converged),
        {"feature_error": feature_error, "iterations": int(em.num_iterations),
         "noise_floor": noise_floor}, notes))
    steps.update()

    steps.set_postfix_str("SVI TraceEnum_ELBO")
    svi, t, t0, notes = timed(fit_gvq_svi, x, num_features, rng_key=key_fit, noise=noise,
                       num_steps=svi_steps, num_restarts=num_restarts, init_features=starts)
    perm, feature_error = match_features(svi.features, planted)
    arrays["svi"] = np.asarray(svi.features)[perm]
    rows.append(ComparisonRow(
        "learning", f"SVI TraceEnum_ELBO, MAP F, sigma={noise:g}", "numpyro", energy_name,
        float(svi.error), t, t0, bool(svi.converged),
        {"feature_error": feature_error, "iterations": int(svi.num_iterations),
         "noise_floor": noise_floor}, notes))
    steps.update()
    steps.close()
    return ComparisonResult("gvq", rows, settings, arrays, plot_gvq)


def plot_gvq(result: ComparisonResult, path) -> None:
    """Planted features and those learned by EM and SVI (matched), as heat maps."""
    from matplotlib.ticker import MaxNLocator

    panels = [("planted", "planted F")]
    panels += [(k, label) for k, label in (("em", "EM (ours)"), ("svi", "SVI (NumPyro)"))
               if k in result.arrays]
    vmax = max(float(np.abs(result.arrays[k]).max()) for k, _ in panels)
    fig, axes = new_figure(1, len(panels), figsize=(3.6 * len(panels) + 0.8, 3.2), squeeze=False,
                           sharey=True)
    for ax, (key, label) in zip(axes[0], panels, strict=True):
        image = ax.imshow(result.arrays[key], cmap="RdBu_r", vmin=-vmax, vmax=vmax,
                          aspect="auto", interpolation="nearest")
        ax.set_title(label)
        ax.set_xlabel("dimension d")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0, 0].set_ylabel("feature k (matched to planted)")
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.9, label="feature value F_kd")
    fig.suptitle("GVQ: planted and learned features")
    save_figure(fig, path)
