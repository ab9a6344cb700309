"""``ppl-zoo compare ppca``: EM (limit and ML) against NumPyro's SVI and NUTS and scikit-learn.

Data: draws of the PPCA program (:func:`ppl_models.ppca.generate`: W with orthogonal
rows of norms 3 ... 1.5 in random directions, mu ~ Normal(0, 1)) with d = 20,
q = 3, sigma = 0.5 and 1,000 examples (``quick``: d = 8, q = 2, 300 examples). Every
learner fits the same data:

* ours: :func:`inference.fit_ppca` with ``noise=None`` (Roweis's EM for PCA, the
  sigma -> 0 limit) and ``noise="ml"`` (Tipping & Bishop's EM);
* NumPyro SVI (:func:`inference.ppca.baselines.fit_ppca_svi`): AutoDelta on W, mu,
  sigma of the collapsed program;
* NumPyro NUTS (:func:`inference.ppca.baselines.fit_ppca_mcmc`) on the collapsed
  program, on the first 300 examples (``quick``: 100): the leading q eigenvectors of
  the posterior mean of W^T W, and the posterior mean of sigma;
* scikit-learn's ``PCA`` (if importable): its components and ``noise_variance_``.

Columns: ``objective`` is the negative mean log-likelihood per example of the
collapsed program (``numpyro.infer.util.log_density``) at the learner's W^T W, mu and
sigma, on all the data (for the limit, whose sigma is 0, it is left out: ``nan``);
``angle_max_deg`` the largest principal angle between the learner's subspace and the
planted one; ``sigma2`` the fitted sigma^2 (planted: sigma^2 = 0.25); ``sigma2_ml``
the closed form (mean of the discarded eigenvalues of the sample covariance). Times
follow :func:`inference.engine.reporting.timed`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer.util import log_density
from scipy.linalg import subspace_angles
from tqdm.auto import tqdm

from inference.engine.figures import new_figure, save_figure
from inference.engine.reporting import ComparisonResult, ComparisonRow, timed
from inference.ppca.baselines import fit_ppca_mcmc, fit_ppca_svi
from inference.ppca.em import fit_ppca
from ppl_models import ppca

__all__ = ["compare_ppca", "plot_ppca", "largest_angle", "negative_log_likelihood"]

OBJECTIVE = "-mean log p(x | W, mu, sigma)"


def largest_angle(a, b) -> float:
    """Largest principal angle (radians) between the row spaces of a and b (q, d)."""
    return float(np.max(subspace_angles(np.asarray(a, np.float64).T,
                                        np.asarray(b, np.float64).T)))


def negative_log_likelihood(x, weights, mean, sigma) -> float:
    """-log p(x | W, mu, sigma) / num_examples of the collapsed program (its log-density)."""
    logp, _ = log_density(ppca.model, (jnp.asarray(x),),
                          {"weights": jnp.asarray(weights), "mean": jnp.asarray(mean),
                           "sigma": sigma, "collapsed": True}, {})
    return -float(logp) / np.shape(x)[0]


def compare_ppca(rng_key, *, quick: bool = False, progress_bar: bool = True,
                 dim: int | None = None, num_components: int | None = None,
                 num_examples: int | None = None, noise: float = 0.5,
                 svi_steps: int | None = None, mcmc_examples: int | None = None,
                 mcmc_iterations: int | None = None) -> ComparisonResult:
    """Run the PPCA comparison; see the module docstring. ``quick`` shrinks the sizes."""
    dim = dim or (8 if quick else 20)
    num_components = num_components or (2 if quick else 3)
    num_examples = num_examples or (300 if quick else 1000)
    svi_steps = svi_steps or (1000 if quick else 2000)
    mcmc_examples = mcmc_examples or (100 if quick else 300)
    mcmc_iterations = mcmc_iterations or (100 if quick else 300)
    key_data, key_em, key_svi, key_mcmc = jax.random.split(rng_key, 4)
    data = ppca.generate(key_data, num_examples, dim, num_components, noise=noise)
    x = np.asarray(data.x)
    planted = np.asarray(data.weights)
    eigenvalues = np.sort(np.linalg.eigvalsh(np.cov(x.T, bias=True)))[::-1]
    sigma2_ml = float(eigenvalues[num_components:].mean())
    settings = dict(dim=dim, num_components=num_components, num_examples=num_examples,
                    noise=noise, svi_steps=svi_steps, mcmc_examples=mcmc_examples,
                    mcmc_warmup=mcmc_iterations, mcmc_samples=mcmc_iterations, quick=quick)
    rows, angles = [], {}

    def add(key, label, implementation, subspace, sigma, gram, mean, t, t0, converged,
            extra=None, notes=""):
        angle = largest_angle(subspace, planted)
        angles[key] = np.degrees(angle)
        if sigma > 0 and gram is not None:  # W with W^T W = gram (any rotation)
            values, vectors = np.linalg.eigh(np.asarray(gram, np.float64))
            top = vectors[:, ::-1][:, :num_components] * np.sqrt(
                np.maximum(values[::-1][:num_components], 0.0))
            objective = negative_log_likelihood(x, top.T.astype(x.dtype), mean, sigma)
        else:
            objective = float("nan")
        rows.append(ComparisonRow(
            "learning", label, implementation, OBJECTIVE, objective, t, t0, converged,
            {"angle_max_deg": float(np.degrees(angle)), "sigma2": float(sigma) ** 2,
             "sigma2_ml": sigma2_ml, **(extra or {})}, notes))

    steps = tqdm(total=5, desc="compare ppca", disable=not progress_bar, leave=False)
    for mode, label in ((None, "EM for PCA, sigma -> 0 (Roweis)"),
                        ("ml", "EM for ML W, sigma (Tipping & Bishop)")):
        steps.set_postfix_str(f"fit_ppca noise={mode}")
        fit, t, t0, notes = timed(fit_ppca, x, num_components, noise=mode, rng_key=key_em,
                                  max_iterations=2000)
        w = np.asarray(fit.weights, np.float64)
        add(f"em_{mode or 'limit'}", label, "ours", w, fit.noise, w.T @ w, fit.mean, t, t0,
            fit.converged, {"iterations": fit.num_iterations}, notes)
        steps.update()
    steps.set_postfix_str("SVI")
    svi, t, t0, notes = timed(fit_ppca_svi, x, num_components, rng_key=key_svi,
                              num_steps=svi_steps)
    w = np.asarray(svi.weights, np.float64)
    add("svi", "SVI: AutoDelta W, mu, sigma (z collapsed), Adam", "numpyro", w, svi.noise,
        w.T @ w, svi.mean, t, t0, svi.converged, {"iterations": svi_steps}, notes)
    steps.update()
    steps.set_postfix_str("NUTS")
    mcmc, t, t0, notes = timed(fit_ppca_mcmc, x[:mcmc_examples], num_components,
                               rng_key=key_mcmc, num_warmup=mcmc_iterations,
                               num_samples=mcmc_iterations, num_chains=1)
    add("nuts", "NUTS over W, mu, sigma (z collapsed), subset", "numpyro", mcmc.subspace,
        mcmc.noise, mcmc.weights_gram, mcmc.mean, t, t0, mcmc.converged,
        {"train_examples": int(min(mcmc_examples, num_examples)), "r_hat": mcmc.r_hat,
         "divergent": mcmc.num_divergent}, notes)
    steps.update()
    try:
        from sklearn.decomposition import PCA
    except ImportError:  # pragma: no cover - scikit-learn is a test dependency
        PCA = None
    if PCA is not None:
        steps.set_postfix_str("scikit-learn PCA")
        pca, t, t0, notes = timed(lambda: PCA(num_components).fit(x))
        gram = (pca.components_.T * (pca.explained_variance_ * (num_examples - 1) / num_examples
                                     - pca.noise_variance_ * (num_examples - 1) / num_examples)
                ) @ pca.components_
        add("sklearn", "scikit-learn PCA (SVD)", "scikit-learn", pca.components_,
            float(np.sqrt(pca.noise_variance_ * (num_examples - 1) / num_examples)), gram,
            pca.mean_, t, t0, True, {}, notes)
    steps.update()
    steps.close()
    arrays = {"eigenvalues": eigenvalues, "angles_deg": angles,
              "sigma2": {row.algorithm: row.extra["sigma2"] for row in rows}}
    return ComparisonResult("ppca", rows, settings, arrays, plot_ppca)


def plot_ppca(result: ComparisonResult, path) -> None:
    """Left: the sample covariance's eigenvalues with each learner's sigma^2; right: the
    largest angle of each learner's subspace to the planted one (NUTS: on its subset)."""
    from matplotlib.ticker import MaxNLocator

    fig, (left, right) = new_figure(1, 2, figsize=(11, 4.8), width_ratios=[1.0, 1.1])
    eigenvalues = result.arrays["eigenvalues"]
    left.semilogy(np.arange(1, len(eigenvalues) + 1), eigenvalues, "o-", color="0.3",
                  label="eigenvalues of the sample covariance")
    sigma2 = result.arrays["sigma2"]
    angles = result.arrays["angles_deg"]
    # Both dicts hold one entry per learner in the table's order: one colour per learner.
    names = list(sigma2) if len(sigma2) == len(angles) else list(angles)
    colours = [f"C{i % 10}" for i in range(len(names))]
    styles = ("--", "-.", ":", (0, (5, 2, 1, 2)))
    for i, (name, value) in enumerate(sigma2.items()):
        if value > 0:
            left.axhline(value, lw=1.2, ls=styles[i % len(styles)], color=colours[i],
                         label=f"sigma^2: {name}")
    left.set_xlabel("index of the eigenvalue (largest first)")
    left.set_ylabel("variance (data units squared)")
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.set_title("spectrum and each learner's noise variance", fontsize=10)
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    where = np.arange(len(names))
    right.barh(where, [angles[key] for key in angles], color=colours)
    right.set_yticks(where, names, fontsize=8)
    right.invert_yaxis()
    right.set_xlabel("largest angle to the planted subspace (degrees)")
    right.set_title("subspace recovered (NUTS: on its subset)", fontsize=10)
    save_figure(fig, path)
