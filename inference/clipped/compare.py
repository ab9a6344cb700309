"""``ppl-zoo compare clipped``: moment matching against NumPyro's SVI and NUTS.

The moment-matching fit is that of D. D. Lee and H. Sompolinsky, "Learning a
continuous hidden variable model for binary data", Advances in Neural Information
Processing Systems 11 (NIPS 1998), 1999.

Data: patterns drawn from the clipped-Gaussian program
(:func:`ppl_models.clipped_gaussian.generate`: W with unit-norm rows in random
directions, xi ~ Normal(0, 1/2)) at the program's noise sigma = 0.1, N = 30
units, P = 3 hidden causes, 4,000 patterns (``quick``: N = 20, P = 2, 2,000),
half for learning and half held out. Every learner fits the same program at
the same sigma and is scored alike: the moments the program predicts with the
learned parameters (:func:`inference.clipped.fit.model_moments`) against
the held-out patterns (:func:`~inference.clipped.fit.moment_error`):

* ours: :func:`inference.fit_clipped_gaussian` (arcsine / eq. 10 moment
  matching), turned into the program at sigma by
  :func:`~inference.clipped.fit.program_parameters`;
* NumPyro SVI (:func:`inference.clipped.baselines.fit_clipped_svi`): W, xi
  point estimates and a mean-field Gaussian over every y;
* NumPyro NUTS (:func:`~inference.clipped.baselines.fit_clipped_mcmc`) over W,
  xi and all y, on a subset of the learning patterns (300; ``quick`` 150) since
  every pattern adds P dimensions; scored by its posterior-predictive
  moments. The arcsine fit on the same subset is given beside it;
* the planted program itself, for reference (its error is the held-out
  sampling noise; ``noise_floor`` is the error expected from sampling alone).

Columns: ``objective`` is the held-out RMS error of <s_a s_b> over pairs
(``corr_rmse``), ``mean_rmse`` that of <s_a>; ``angle_max_deg`` /
``angle_mean_deg`` are the principal angles between the learned and the planted
column spaces of W (rotation-invariant; for NUTS the leading P eigenvectors of
the posterior mean of W W^T). Times follow :func:`inference.app.compare.timed`
(``first_call_s`` includes compilation, ``time_s`` is a warm second call).
"""

from __future__ import annotations

import jax
import numpy as np
from tqdm.auto import tqdm

from inference.clipped.baselines import fit_clipped_mcmc, fit_clipped_svi
from inference.clipped.fit import (
    fit_clipped_gaussian,
    model_moments,
    moment_error,
    program_parameters,
)
from inference.engine.figures import new_figure, save_figure
from inference.engine.reporting import ComparisonResult, ComparisonRow, timed
from ppl_models import clipped_gaussian

__all__ = ["compare_clipped", "principal_angles", "plot_clipped"]

OBJECTIVE = "held-out RMSE of <s_a s_b>"


def principal_angles(a, b) -> np.ndarray:
    """Principal angles (degrees, ascending) between the column spaces of a and b (N, P).

    >>> principal_angles(np.eye(3)[:, :2], np.eye(3)[:, [1, 0]]).round(6).tolist()
    [0.0, 0.0]
    """
    qa, _ = np.linalg.qr(np.asarray(a, np.float64))
    qb, _ = np.linalg.qr(np.asarray(b, np.float64))
    cosines = np.clip(np.linalg.svd(qa.T @ qb, compute_uv=False), -1.0, 1.0)
    return np.sort(np.degrees(np.arccos(cosines)))


def _leading_space(gram, num_hidden):
    values, vectors = np.linalg.eigh(np.asarray(gram, np.float64))
    return vectors[:, ::-1][:, :num_hidden]


def _scores(predicted, s_heldout, weights, planted):
    error = moment_error(predicted, s_heldout)
    angles = principal_angles(weights, planted)
    return error["corr_rmse"], {
        "mean_rmse": error["mean_rmse"], "noise_floor": error["noise_floor_corr"],
        "angle_max_deg": float(angles.max()), "angle_mean_deg": float(angles.mean())}


def compare_clipped(rng_key, *, quick: bool = False, progress_bar: bool = True,
                    num_visible: int | None = None, num_hidden: int | None = None,
                    num_examples: int | None = None, noise: float = clipped_gaussian.DEFAULT_NOISE,
                    svi_steps: int | None = None, mcmc_examples: int | None = None,
                    mcmc_iterations: int | None = None) -> ComparisonResult:
    """Run the clipped-Gaussian comparison; see the module docstring. ``quick`` shrinks sizes."""
    num_visible = num_visible or (20 if quick else 30)
    num_hidden = num_hidden or (2 if quick else 3)
    num_examples = num_examples or (2000 if quick else 4000)
    svi_steps = svi_steps or (1500 if quick else 3000)
    mcmc_examples = mcmc_examples or (150 if quick else 300)
    mcmc_iterations = mcmc_iterations or (150 if quick else 300)
    key_data, key_svi, key_mcmc = jax.random.split(rng_key, 3)
    data = clipped_gaussian.generate(key_data, num_examples, num_visible, num_hidden,
                                     noise=noise)
    half = num_examples // 2
    s_train, s_heldout = data.s[:half], data.s[half:]
    s_subset = s_train[:mcmc_examples]
    planted = np.asarray(data.weights)
    settings = dict(num_visible=num_visible, num_hidden=num_hidden, num_examples=num_examples,
                    num_train=half, num_heldout=num_examples - half, noise=noise,
                    svi_steps=svi_steps, mcmc_examples=mcmc_examples,
                    mcmc_warmup=mcmc_iterations, mcmc_samples=mcmc_iterations, quick=quick)
    rows = []
    iu = np.triu_indices(num_visible, k=1)
    arrays = {"heldout": np.asarray(s_heldout.T @ s_heldout / s_heldout.shape[0])[iu]}

    def add(key, label, implementation, predicted, weights, t, t0, converged, extra, notes=""):
        objective, scores = _scores(predicted, s_heldout, weights, planted)
        arrays[key] = np.asarray(predicted[1])[iu]
        rows.append(ComparisonRow("learning", label, implementation, OBJECTIVE, objective, t, t0,
                                  converged, {**scores, **extra}, notes))

    steps = tqdm(total=4, desc="compare clipped", disable=not progress_bar, leave=False)
    steps.set_postfix_str("arcsine fit")
    for key, patterns in (("arcsine", s_train), ("arcsine_subset", s_subset)):
        fit, t, t0, notes = timed(fit_clipped_gaussian, patterns, num_hidden)
        params = program_parameters(fit, noise)
        label = "arcsine moment matching (eq. 7-10)" + (", NUTS's subset" if key != "arcsine"
                                                         else "")
        add(key, label, "ours", model_moments(params["weights"], params["bias"], noise),
            fit.weights, t, t0, True,  # closed form; trouble is reported in notes
            {"train_patterns": int(patterns.shape[0]),
             "boundary_pairs": int(fit.num_boundary_pairs)}, notes)
    steps.update()

    steps.set_postfix_str("SVI")
    svi, t, t0, notes = timed(fit_clipped_svi, s_train, num_hidden, rng_key=key_svi, noise=noise,
                              num_steps=svi_steps)
    add("svi", "SVI: AutoDelta W, xi + AutoNormal y, Adam", "numpyro",
        model_moments(svi.weights, svi.bias, noise), svi.weights, t, t0, svi.converged,
        {"train_patterns": half, "iterations": svi_steps}, notes)
    steps.update()

    steps.set_postfix_str("NUTS")
    mcmc, t, t0, notes = timed(fit_clipped_mcmc, s_subset, num_hidden, rng_key=key_mcmc,
                               noise=noise, num_warmup=mcmc_iterations,
                               num_samples=mcmc_iterations)
    add("nuts", "NUTS over W, xi, y; posterior predictive", "numpyro",
        (mcmc.means, mcmc.second_moments), _leading_space(mcmc.weights_gram, num_hidden), t, t0,
        mcmc.converged,
        {"train_patterns": int(s_subset.shape[0]), "iterations": 2 * mcmc_iterations,
         "r_hat": mcmc.r_hat, "divergent": mcmc.num_divergent,
         "gradients": mcmc.num_gradients}, notes)
    steps.update()

    add("planted", "planted program (reference)", "truth",
        model_moments(data.weights, data.bias, noise), planted, 0.0, 0.0, True, {})
    steps.update()
    steps.close()
    return ComparisonResult("clipped", rows, settings, arrays, plot_clipped)


def plot_clipped(result: ComparisonResult, path) -> None:
    """Predicted against held-out <s_a s_b>, one panel per learner."""
    keys = [k for k in ("arcsine", "svi", "nuts", "planted") if k in result.arrays]
    titles = {"arcsine": "arcsine (ours)", "svi": "SVI (NumPyro)",
              "nuts": "NUTS (NumPyro, subset)", "planted": "planted program"}
    heldout = result.arrays["heldout"]
    fig, axes = new_figure(1, len(keys), figsize=(2.9 * len(keys) + 1.6, 3.3), squeeze=False,
                           sharex=True, sharey=True)
    for ax, key in zip(axes[0], keys, strict=True):
        ax.plot([-1, 1], [-1, 1], color="0.6", lw=1, label="predicted = held-out")
        ax.scatter(heldout, result.arrays[key], s=6, label="one pair (a, b)")
        ax.set_title(titles[key])
        ax.set_xlabel("held-out <s_a s_b>")
        ax.set_aspect("equal")
    axes[0, 0].set_ylabel("predicted <s_a s_b>")
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside right upper", fontsize=8)
    fig.suptitle("Pair moments of held-out binary patterns: predicted against observed")
    save_figure(fig, path)
