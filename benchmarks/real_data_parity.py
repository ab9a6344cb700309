"""Real-data parity: ``fit_mixture`` and PPCA against scikit-learn on its bundled data.

For iris (as is), wine and breast cancer (standardised) and k = 1 .. 6: the mean
log-likelihood per example of ``fit_mixture`` at its defaults (float32; evaluated in
float64 from the returned parameters) next to ``GaussianMixture(k).score`` with one
start (scikit-learn's default) and with five, the wall time of each, whether
scikit-learn's fit degenerates (a component on fewer than d + 1 points or with a
variance at its regulariser: its likelihood then depends on reg_covar and is no
yardstick), and the k that BIC chooses from either side's fits. Then PPCA: the
closed-form maximum-likelihood fit's noise variance and log-likelihood against
``PCA(q)`` (scaled by N / (N - 1), scikit-learn's divisor), and Minka's Laplace
choice of q against ``PCA(n_components="mle")``.

Prints a table and writes JSON (default ``real_data_parity.json``). Times are wall
clock on whatever machine runs it: ``ours s`` the first call (compilation included
where the shape is new), ``warm s`` a second call with another key.

    python benchmarks/real_data_parity.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import jax
import numpy as np
from sklearn.decomposition import PCA
from sklearn.mixture import GaussianMixture

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_real_data_fits import load, mean_log_likelihood, sklearn_degenerates  # noqa: E402

from inference.mixture.em import fit_mixture  # noqa: E402
from inference.ppca.selection import laplace_log_evidences, log_density, ml_fit  # noqa: E402
from ppl_models.diagnostics import ConvergenceWarning  # noqa: E402

SETS = (("iris", False), ("wine", True), ("breast_cancer", True))


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def bic(mean_log_likelihood, k, x):
    """BIC = -2 log-likelihood + p log N of a full-covariance mixture (scikit-learn's)."""
    num, dim = x.shape
    p = k - 1 + k * dim + k * dim * (dim + 1) // 2
    return -2.0 * num * mean_log_likelihood + p * np.log(num)


def mixture_rows():
    rows = []
    for name, standardise in SETS:
        x = load(name, standardise)
        for k in range(1, 7):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                ours, ours_s = timed(fit_mixture, np.float32(x), k, rng_key=jax.random.key(0))
                _, warm_s = timed(fit_mixture, np.float32(x), k, rng_key=jax.random.key(1))
            one, one_s = timed(GaussianMixture(k, random_state=0).fit, x)
            five, five_s = timed(GaussianMixture(k, n_init=5, random_state=0).fit, x)
            rows.append({
                "data": name + (" (std)" if standardise else ""), "k": k,
                "ours": mean_log_likelihood(x, ours.weights, ours.means, ours.covariances),
                "ours_components": ours.num_components, "ours_converged": ours.converged,
                "sklearn_1": one.score(x), "sklearn_5": five.score(x),
                "ours_bic": bic(mean_log_likelihood(x, ours.weights, ours.means,
                                                    ours.covariances), ours.num_components, x),
                "sklearn_1_bic": float(one.bic(x)),
                "sklearn_degenerate": sklearn_degenerates(one, x),
                "ours_s": ours_s, "ours_warm_s": warm_s, "sklearn_1_s": one_s,
                "sklearn_5_s": five_s})
    return rows


def ppca_rows():
    rows = []
    for name, standardise in SETS:
        x = load(name, standardise)
        num, dim = x.shape
        c = num / (num - 1)
        for q in (1, 2, 3):
            pca = PCA(q).fit(x)
            fit = ml_fit(x, q)
            ll = float(np.mean(log_density(x, fit.weights, fit.mean, fit.noise)))
            rows.append({"data": name, "q": q, "noise_variance": float(fit.noise) ** 2 * c,
                         "sklearn_noise_variance": float(pca.noise_variance_),
                         "log_likelihood_at_sklearn_scale":
                             ll - 0.5 * dim * (np.log(c) + 1.0 / c - 1.0),
                         "sklearn_score": float(pca.score(x))})
        minka = int(np.argmax(laplace_log_evidences(x, dim - 1))) + 1
        rows.append({"data": name, "minka_q": minka,
                     "sklearn_mle_q": int(PCA(n_components="mle").fit(x).n_components_)})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="real_data_parity.json")
    args = parser.parse_args(argv)
    mixture = mixture_rows()
    print(f"{'data':<20}{'k':>2} {'ours':>9} {'sk n=1':>9} {'sk n=5':>9} {'ours-sk1':>9} "
          f"{'ours s':>7} {'warm s':>6} {'sk1 s':>6} {'sk5 s':>6}  note")
    for r in mixture:
        note = "sklearn degenerate" if r["sklearn_degenerate"] else ""
        if r["ours_components"] < r["k"]:
            note += f" ours pruned to {r['ours_components']}"
        print(f"{r['data']:<20}{r['k']:>2} {r['ours']:>9.4f} {r['sklearn_1']:>9.4f} "
              f"{r['sklearn_5']:>9.4f} {r['ours'] - r['sklearn_1']:>9.4f} {r['ours_s']:>7.2f} "
              f"{r['ours_warm_s']:>6.2f} "
              f"{r['sklearn_1_s']:>6.2f} {r['sklearn_5_s']:>6.2f}  {note}")
    for data in dict.fromkeys(r["data"] for r in mixture):
        rows = [r for r in mixture if r["data"] == data]
        print(f"BIC choice on {data}: ours k = {min(rows, key=lambda r: r['ours_bic'])['k']}, "
              f"scikit-learn's k = {min(rows, key=lambda r: r['sklearn_1_bic'])['k']}")
    ppca = ppca_rows()
    for r in ppca:
        print(r)
    Path(args.out).write_text(json.dumps({"mixture": mixture, "ppca": ppca}, indent=1,
                                         default=str))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
