"""``ppl-zoo compare mixture``: EM and its limits against NumPyro's SVI and NUTS.

EM and its limits are those of L. Xu, "YING-YANG machine: a Bayesian-Kullback scheme
for unified learnings and new results on vector quantization", Proceedings of the
International Conference on Neural Information Processing (ICONIP'95), 1995.

Data: one planted mixture of :func:`ppl_models.mixture.generate` (by default k = 3
components in d = 2, separation 4, unequal weights and elongated covariances),
400 learning examples and 400 held-out examples drawn from the same planted
mixture (``quick``: 200 + 200). Every learner fits the same program
(:func:`ppl_models.mixture.model`, full covariances) with k components from the
same start, k-means++ seeded by one key (``fit_mixture`` and the NumPyro
baselines split a key alike), and is scored alike: the mean log-likelihood
(1/N) sum_i log p(x_i | theta) = -L_stocha (:func:`inference.mixture.criteria.criteria`),
on the learning data (``train_loglik``) and on the held-out data (the
``objective``, higher is better):

* ours (:func:`inference.mixture.em.fit_mixture`): EM (``mode="stochastic"``,
  eq. 17-18, the maximum-likelihood fit), hard-cut EM (``"map"``, eq. 19-20)
  and k-means (``"nearest"``, eq. 21-22, scored as the mixture it fits: equal
  weights and one shared sigma^2 I);
* NumPyro SVI (:func:`inference.mixture.baselines.fit_mixture_svi`): y summed
  out by ``TraceEnum_ELBO``, a point mass on the parameters, i.e. MAP;
* NumPyro NUTS (:func:`~inference.mixture.baselines.fit_mixture_mcmc`), y
  summed out: scored by its posterior-predictive density (1/N) sum_i log
  (1/S) sum_s p(x_i | theta_s) on both data sets; ``heldout_loglik_mean_params``
  scores the aligned posterior-mean parameters as a point estimate;
* the planted mixture itself, for reference (``gap_to_planted`` is the planted
  mixture's held-out log-likelihood minus a learner's; it is positive for
  most fits, and can be slightly negative by chance).

Times follow :func:`inference.app.compare.timed` (``first_call_s`` includes
compilation, ``time_s`` is a warm second call).
"""

from __future__ import annotations

import jax
import numpy as np
from tqdm.auto import tqdm

from inference.engine.figures import new_figure, save_figure
from inference.engine.reporting import ComparisonResult, ComparisonRow, timed
from inference.mixture.baselines import (
    fit_mixture_mcmc,
    fit_mixture_svi,
    posterior_predictive_log_likelihood,
)
from inference.mixture.criteria import criteria
from inference.mixture.em import fit_mixture
from ppl_models import mixture

__all__ = ["compare_mixture", "plot_mixture"]

OBJECTIVE = "held-out mean log-likelihood (higher is better)"

_TITLES = {"em": "EM (ours)", "map": "hard-cut EM (ours)", "nearest": "k-means (ours)",
           "svi": "SVI, MAP (NumPyro)", "nuts": "NUTS, posterior mean (NumPyro)",
           "planted": "planted mixture"}


def _log_likelihood(x, weights, means, covariances, covariance):
    return -criteria(x, weights, means, covariances, covariance)["L_stocha"]


def compare_mixture(rng_key, *, quick: bool = False, progress_bar: bool = True,
                    num_examples: int | None = None, num_components: int = 3, dim: int = 2,
                    separation: float = 4.0, svi_steps: int | None = None,
                    mcmc_iterations: int | None = None) -> ComparisonResult:
    """Run the mixture comparison; see the module docstring. ``quick`` shrinks sizes.

    ``num_examples`` learning examples and as many held-out ones; ``svi_steps``
    Adam steps; ``mcmc_iterations`` NUTS warm-up iterations and as many kept draws.
    """
    num_examples = num_examples or (200 if quick else 400)
    svi_steps = svi_steps or (300 if quick else 1000)
    mcmc_iterations = mcmc_iterations or (300 if quick else 500)
    key_data, key_fit = jax.random.split(rng_key)
    data = mixture.generate(key_data, 2 * num_examples, num_components, dim,
                            separation=separation)
    x_train, x_heldout = data.x[:num_examples], data.x[num_examples:]
    settings = dict(num_examples=num_examples, num_heldout=num_examples,
                    num_components=num_components, dim=dim, separation=separation,
                    covariance="full", svi_steps=svi_steps, mcmc_warmup=mcmc_iterations,
                    mcmc_samples=mcmc_iterations, quick=quick)
    planted_heldout = _log_likelihood(x_heldout, data.weights, data.means, data.covariances,
                                      "full")
    rows = []
    arrays = {"x": np.asarray(x_train)}

    def add(key, label, implementation, train, heldout, fit, t, t0, converged, extra, notes=""):
        arrays[key] = (np.asarray(fit[0]), np.asarray(fit[1]), np.asarray(fit[2]))
        rows.append(ComparisonRow(
            "learning", label, implementation, OBJECTIVE, float(heldout), t, t0, bool(converged),
            {"train_loglik": float(train), "gap_to_planted": float(planted_heldout - heldout),
             "components": int(np.asarray(fit[0]).shape[0]), **extra}, notes))

    steps = tqdm(total=6, desc="compare mixture", disable=not progress_bar, leave=False)
    labels = {"stochastic": ("em", "EM (eq. 17-18)"), "map": ("map", "hard-cut EM (eq. 19-20)"),
              "nearest": ("nearest", "k-means (eq. 21-22)")}
    for mode, (key, label) in labels.items():
        steps.set_postfix_str(label)
        fit, t, t0, notes = timed(fit_mixture, x_train, num_components, mode=mode,
                                  rng_key=key_fit)
        params = (fit.weights, fit.means, fit.covariances)
        add(key, label, "ours", -fit.L_stocha,
            _log_likelihood(x_heldout, *params, fit.covariance), params, t, t0, fit.converged,
            {"iterations": fit.num_iterations}, notes)
        steps.update()

    steps.set_postfix_str("SVI")
    svi, t, t0, notes = timed(fit_mixture_svi, x_train, num_components, rng_key=key_fit,
                              num_steps=svi_steps)
    params = (svi.weights, svi.means, svi.covariances)
    add("svi", "SVI: TraceEnum_ELBO, AutoDelta (MAP), Adam", "numpyro", svi.log_likelihood,
        _log_likelihood(x_heldout, *params, "full"), params, t, t0, svi.converged,
        {"iterations": svi_steps}, notes)
    steps.update()

    steps.set_postfix_str("NUTS")
    nuts, t, t0, notes = timed(fit_mixture_mcmc, x_train, num_components, rng_key=key_fit,
                               num_warmup=mcmc_iterations, num_samples=mcmc_iterations)
    params = (nuts.weights, nuts.means, nuts.covariances)
    add("nuts", "NUTS, y summed out; posterior predictive", "numpyro",
        nuts.predictive_log_likelihood, posterior_predictive_log_likelihood(nuts, x_heldout),
        params, t, t0, nuts.converged,
        {"iterations": 2 * mcmc_iterations, "r_hat": nuts.r_hat, "divergent": nuts.num_divergent,
         "gradients": nuts.num_gradients,
         "heldout_loglik_mean_params": _log_likelihood(x_heldout, *params, "full")}, notes)
    steps.update()

    params = (data.weights, data.means, data.covariances)
    add("planted", "planted mixture (reference)", "truth",
        _log_likelihood(x_train, *params, "full"), planted_heldout, params, 0.0, 0.0, True, {})
    steps.update()
    steps.close()
    return ComparisonResult("mixture", rows, settings, arrays, plot_mixture)


def _ellipse(mean, cov, radius=2.0, num=100):
    """Points on the ``radius``-standard-deviation ellipse of a 2-D Gaussian."""
    angles = np.linspace(0.0, 2 * np.pi, num)
    circle = np.stack([np.cos(angles), np.sin(angles)])
    return mean[:, None] + radius * np.linalg.cholesky(cov) @ circle


def plot_mixture(result: ComparisonResult, path) -> None:
    """The learning data with every learner's components (2-sd ellipses; first two coordinates)."""
    from matplotlib.lines import Line2D

    keys = [k for k in _TITLES if k in result.arrays]
    x = result.arrays["x"]
    columns = min(len(keys), 3)
    rows = -(-len(keys) // columns)
    fig, axes = new_figure(rows, columns, figsize=(3.3 * columns + 0.4, 3.0 * rows + 0.9),
                           squeeze=False, sharex=True, sharey=True)
    for ax, key in zip(axes.flat, keys, strict=False):
        weights, means, covariances = result.arrays[key]
        ax.scatter(x[:, 0], x[:, 1], s=3, color="0.6")
        for weight, mean, cov in zip(weights, means, covariances, strict=True):
            points = _ellipse(mean[:2], cov[:2, :2])
            ax.plot(points[0], points[1], lw=1.0 + 4.0 * float(weight))
            ax.plot(mean[0], mean[1], "k+", ms=6)
        ax.set_title(_TITLES[key], fontsize=9)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("x_2")
    for ax in axes[-1]:
        ax.set_xlabel("x_1")
    handles = [Line2D([], [], ls="", marker=".", color="0.6", label="learning data"),
               Line2D([], [], color="C0", lw=2.0, label="2-sd ellipse of a component\n"
                      "(line width ~ its weight)"),
               Line2D([], [], ls="", marker="+", color="k", label="component mean")]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=8)
    fig.suptitle("Fitted mixture components (first two coordinates)")
    save_figure(fig, path)
