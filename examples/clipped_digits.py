"""Handwritten twos under the clipped-Gaussian model: Lee and Sompolinsky (1999), Fig. 4.
======================================================================================

**Data.** The paper models a large set of 16 x 16 black-and-white USPS twos.
USPS is not bundled with any installed package and the zoo has no network at run
time, so this script uses the twos of scikit-learn's bundled digits
(``sklearn.datasets.load_digits``, UCI optical digits): 177 images of 8 x 8 with
grey levels 0..16 (``--digit`` picks another class). *(choice)* A pixel is +1
when its grey level is >= 8 (:data:`THRESHOLD`, half the range, as in
``examples/gvq_digits.py``); 0.326 of the pixels are on. 18 of the 64 pixels
(mostly in the outer columns) are off in every two: their mean <s_a> = -1 needs an
infinite bias, so the fit runs with ``constant_columns="independent"``, which
keeps them as units that are off with probability 1 - 1/(2 x 177) and leaves
them out of C_xx (zero rows and columns, zero rows of W). What is learned is a
model of the 46 varying pixels.

**Model** (eq. 8-10). :func:`inference.clipped.fit.fit_clipped_gaussian`
with biases: xi_a from the means, the pairwise solve of eq. 10 for C_xx, W from
its P leading eigenvectors. P = 16 as in the paper *(choice: kept although 46
varying pixels are far fewer than the paper's 256; the held-out error below is
flat from P = 8 to 16, so the extra units cost nothing, and 16 gives Fig. 4's
4 x 4 inset)*. The program's noise sigma is ``DEFAULT_NOISE`` = 0.1 for
``program_parameters``, ``infer_hidden`` and ``morph``.

**Reported, and measured** (full run, seeds 0, 1 and 2; the fit, spectra,
eigenvectors and the morph shown do not depend on the seed).

1. *Spectra of C_ss and C_xx (Fig. 4).* C_ss is the paper's <s_a s_b>
   (eq. 5, not centred); the centred correlations are shown as well. Steepness is
   measured on the 46 varying pixels, because the constant pixels enter the two
   matrices differently (all of them in C_ss's mean mode, none of them in
   C_xx): the 16 largest eigenvalues hold 0.965 of C_xx's positive spectrum
   against 0.909 of C_ss's (0.754 of the centred correlations), and C_xx has 25
   positive eigenvalues of 46 against 45 for C_ss. C_xx falls off more steeply,
   as the paper found. The paper also found "some small negative eigenvalues";
   here there are 20, summing to -37.7, the smallest -12.7 against a largest
   of 17.5: not small. 338 of the 1035 pairs of varying pixels lie at rho = -1
   or +1 (145 pairs are never on together). A sampling check explains this:
   177 patterns drawn from the fitted model itself (whose C_xx is positive
   semidefinite, of rank 16) and refitted give 19 negative eigenvalues, the
   smallest -9.7, -12.6 and -11.9 (seeds 0, 1, 2), with 183-283 boundary pairs.
   Negative eigenvalues of this size come from having only 177 images, not from
   a failure of the model. The fit's own estimate of the eigenvalues' sampling
   noise, 14.3, agrees: it flags them (``has_negative_eigenvalues``) but does
   not warn. ``project=True`` (the nearest correlation matrix) leaves rank 12
   on the varying pixels (so W gets only 12 non-zero columns, with a warning)
   and does not improve the held-out score: on the first split of each seed
   it is 0.002-0.004 worse (0.116 against 0.114 for seed 0).
2. *Eigenvectors.* The 16 leading eigenvectors of C_xx next to scikit-learn
   PCA's 16 components of the same binary images: subspace overlap
   ||U_xx^T U_pca||_F^2 / 16 = 0.582, against 16 / 46 = 0.348 for unrelated
   subspaces of the varying pixels. The leading vectors match: ``|cosine|`` with
   PCA's vector of the same rank is 0.43-0.72 for ranks 1-6, then mostly below
   0.25 (0.42 at rank 9). The later C_xx vectors are noisier than PCA's. So
   "qualitatively similar to those found by the standard PCA algorithm" holds
   for the leading few.
3. *Morph.* *(choice)* The pair shown is the two most different twos among the
   more typical half of the class (smallest mean Hamming distance to the others):
   images 9 and 15, 16 pixels apart (``--pair`` picks others). :func:`morph` gives
   nine binary frames. The end frames reproduce the two images exactly, each
   pixel flips once, and the interior frames lie 1.14 pixels (0-2) from the
   nearest real two. For comparison, a real two lies a median 3 (at most 8) pixels
   from its nearest other two. Against PCA: linear interpolation of the pixels
   (the paper's "conventional PCA" morph) gives grey frames with 16 pixels
   neither on nor off, and interpolating the 16 PCA coefficients gives frames
   with 35 grey pixels. Over 200 random pairs (about 12 pixels apart), the mean
   distance of interior frames to the nearest real two is 1.60-1.69 for the
   clipped model and 1.15-1.20 for pixel interpolation. Every pixel-interpolated
   frame is grey, though (12 grey pixels per frame, squared distance 1.2 from
   the nearest binary pattern). The paper's point against linear interpolation
   holds. A stronger baseline, which the paper does not consider, is the PCA-16
   coefficient morph thresholded at 0. Its frames are binary as well and lie
   1.33-1.43 pixels from a real two, slightly closer than the clipped model's.
   As reconstructions, sign(W y_MAP + xi) reproduces all 177 twos exactly,
   while PCA-16 thresholded misses 0.60 pixels per image (105 of 177 exact).
4. *Held-out score (not in the paper).* The model is fitted on a random half
   (88 images), and :func:`moment_error` of its predicted moments is measured on
   the other 89 (RMS error of <s_a s_b> over pairs; 5 splits, mean +- sd). For
   seeds 0, 1 and 2: P = 16 scores 0.116 +- 0.009, 0.111 +- 0.013 and 0.107 +- 0.009;
   P = 1 scores 0.18-0.19 and P = 8 0.109-0.118; independent pixels score 0.135, 0.131
   and 0.129; the training half's own moments score 0.114, 0.109 and 0.107; the
   noise floor of the held-out half is 0.082. With the training half's sampling
   error added, the expected floor is sqrt(2) x 0.082 = 0.115. So the 16-unit model
   predicts held-out pair statistics as well as the raw training moments do, at
   the level that sampling noise allows, and clearly better than independent pixels.

Numerical notes: the fit takes 6-10 s (more on a loaded machine), almost all
of it JIT compilation of the pairwise solve. Each ``morph`` call takes about
4 s, because ``infer_hidden`` compiles its jitted L-BFGS anew on every call.
The full run therefore infers the hidden causes of all twos once, and scores
the 200 random morphs with the same interpolation and clip as ``morph``; for
the pair shown, the frames agree with ``morph``'s in every pixel.

Figures: ``clipped_digits_spectra.png`` (Fig. 4, left: eigenvalues against rank,
log scale, ``|negative|`` ones of C_xx as open circles), ``clipped_digits_eigenvectors.png``
(Fig. 4 inset, beside PCA), ``clipped_digits_morph.png`` (Fig. 4, right: the
clipped morph above the pixel, PCA-coefficient and thresholded PCA morphs); the
numbers go to ``clipped_digits.json``.

Run: ``python examples/clipped_digits.py [--quick] [--output-dir DIR] [--seed S]
[--digit D] [--threshold T] [--hidden P] [--pair I J]`` (full: 45-65 s on 2 CPU
cores, depending on load; ``--quick``: spectra, eigenvectors and the one morph,
about 15 s).

References
----------
D. D. Lee and H. Sompolinsky, "Learning a continuous hidden variable model for binary
data", Advances in Neural Information Processing Systems 11 (NIPS 1998), 1999,
"Handwritten Digits Example", eq. 8-10 and Fig. 4.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers

from inference.clipped.fit import (
    NEGATIVE_TOLERANCE,
    fit_clipped_gaussian,
    infer_hidden,
    model_moments,
    moment_error,
    morph,
    program_parameters,
)
from inference.engine.figures import empty_figure, new_figure, save_figure
from inference.engine.reporting import jsonable
from inference.program.handlers import noiseless
from ppl_models import clipped_gaussian
from ppl_models.diagnostics import ZooWarning

#: Fig. 4: P = 16 hidden units (the inset shows the 16 leading eigenvectors of C_xx).
NUM_HIDDEN = 16
#: *(choice)* A pixel of the 0..16 grey images is on (+1) when its grey level is >= 8.
THRESHOLD = 8
#: Fig. 4 (right) shows a morph of about nine frames, the two twos included.
MORPH_STEPS = 9
#: The paper's digits are 16 x 16 USPS images; the bundled ones are 8 x 8.
PAPER_SIDE = 16
SIDE = 8
#: *(choice)* The morphed pair: the two most different twos within the more typical half.
TYPICAL = 0.5
#: *(choice)* Random pairs whose morphs are scored in the full run.
NUM_PAIRS = 200
#: Hidden sizes scored on held-out twos (the leading columns of one fit).
HELDOUT_SIZES = (1, 2, 4, 8, 16)
#: *(choice)* Random half splits for the held-out score in the full run.
NUM_SPLITS = 5
#: Noise sigma of the probit layer for the program (scores, MAP hidden causes, morph).
NOISE = clipped_gaussian.DEFAULT_NOISE


def load_patterns(digit, *, threshold=THRESHOLD):
    """One class of ``sklearn.datasets.load_digits`` as -1 / +1 patterns.

    Returns
    -------
    s : float32 array (num_images, 64)
        +1 where the grey level is >= ``threshold``, else -1.
    grey : array (num_images, 64)
        The grey levels 0..16.
    """
    from sklearn.datasets import load_digits

    if not 0 <= int(digit) <= 9:
        raise ValueError(f"digit must be in 0..9; got {digit}")
    if not 1 <= threshold <= 16:
        raise ValueError(f"threshold must be in 1..16 (grey levels are 0..16); got {threshold}")
    digits = load_digits()
    grey = digits.images[digits.target == int(digit)].reshape(-1, SIDE * SIDE)
    return np.where(grey >= threshold, 1.0, -1.0).astype(np.float32), grey


def fit_with_notes(s, num_hidden, **kwargs):
    """:func:`fit_clipped_gaussian` with its warnings collected (they are reported, not raised)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ZooWarning)
        fit = fit_clipped_gaussian(s, num_hidden, constant_columns="independent", **kwargs)
    for w in caught:
        if not issubclass(w.category, ZooWarning):
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return fit, [str(w.message) for w in caught if issubclass(w.category, ZooWarning)]


def centred_correlation(s):
    """Pearson correlations of -1 / +1 pixels (N, N); a constant pixel gets the identity's row."""
    s = np.asarray(s, np.float64)
    means = s.mean(axis=0)
    cov = s.T @ s / s.shape[0] - np.outer(means, means)
    sd = np.sqrt(np.maximum(np.diag(cov), 0.0))
    safe = np.where(sd > 0, sd, 1.0)
    corr = np.where(np.outer(sd > 0, sd > 0), cov / np.outer(safe, safe), 0.0)
    np.fill_diagonal(corr, 1.0)
    return corr


def spectrum_summary(eigenvalues, num_top, tolerance=NEGATIVE_TOLERANCE):
    """How steeply a spectrum falls: counts of positive / negative eigenvalues and top shares.

    ``top_fraction_trace`` is the sum of the ``num_top`` largest eigenvalues over the
    trace (above 1 when negative eigenvalues subtract from the trace);
    ``top_fraction_positive`` is the positive part of that sum over the sum of
    the positive eigenvalues (equal to the former for a positive semidefinite
    matrix). An
    eigenvalue counts as positive or negative beyond ``tolerance`` times the
    largest magnitude.
    """
    values = np.sort(np.asarray(eigenvalues, np.float64))[::-1]
    tol = tolerance * max(float(np.max(np.abs(values))), 1e-300)
    positive = values[values > tol]
    return {"eigenvalues": values.tolist(), "num": int(values.size),
            "trace": float(values.sum()), "num_positive": int(positive.size),
            "num_negative": int(np.sum(values < -tol)),
            "negative_sum": float(values[values < -tol].sum()),
            "largest": float(values[0]), "smallest": float(values[-1]),
            "top_fraction_trace": float(values[:num_top].sum() / values.sum()),
            "top_fraction_positive": float(np.maximum(values[:num_top], 0.0).sum()
                                           / positive.sum()),
            "ratio_top": float(values[min(num_top, values.size) - 1] / values[0])}


def spectra(s, fit, fit_projected, num_hidden):
    """Spectra of C_ss and C_xx over all pixels and over the varying ones (Fig. 4)."""
    varying = np.setdiff1d(np.arange(s.shape[1]), np.asarray(fit.constant_columns))
    sub = np.ix_(varying, varying)
    gaussian = np.asarray(fit.gaussian_corr, np.float64)
    binary = np.asarray(fit.binary_corr, np.float64)
    out = {
        "all": {"C_xx": spectrum_summary(fit.eigenvalues, num_hidden),
                "C_ss": spectrum_summary(np.linalg.eigvalsh(binary), num_hidden)},
        "varying": {"C_xx": spectrum_summary(np.linalg.eigvalsh(gaussian[sub]), num_hidden),
                    "C_ss": spectrum_summary(np.linalg.eigvalsh(binary[sub]), num_hidden),
                    "C_ss_centred": spectrum_summary(
                        np.linalg.eigvalsh(centred_correlation(s)[sub]), num_hidden)},
        "num_varying": int(varying.size),
    }
    if fit_projected is not None:
        projected = np.asarray(fit_projected.gaussian_corr, np.float64)[sub]
        # float32 storage leaves about 1e-7 of the largest eigenvalue on the zero ones
        out["varying"]["C_xx_projected"] = spectrum_summary(np.linalg.eigvalsh(projected),
                                                            num_hidden, tolerance=1e-6)
    return out


def boundary_split(s, fit):
    """Pairs of varying pixels at rho = -1 and at +1, and pairs never on together (counts)."""
    spins = np.asarray(s) > 0
    varying = np.setdiff1d(np.arange(s.shape[1]), np.asarray(fit.constant_columns))
    rows, cols = np.triu_indices(varying.size, k=1)
    a, b = varying[rows], varying[cols]
    corr = np.asarray(fit.gaussian_corr, np.float64)[a, b]
    both_on = np.sum(spins[:, a] & spins[:, b], axis=0)
    return {"num_pairs": int(a.size), "minus_one": int(np.sum(corr <= -1 + 1e-12)),
            "plus_one": int(np.sum(corr >= 1 - 1e-12)),
            "never_on_together": int(np.sum(both_on == 0))}


def fit_pca(s, num_components, seed=0):
    """scikit-learn ``PCA`` fitted to the -1 / +1 images (``components_``: (P, N))."""
    from sklearn.decomposition import PCA

    return PCA(n_components=num_components, random_state=seed).fit(np.asarray(s, np.float64))


def compare_eigenvectors(weights, components):
    """Unit eigenvectors of C_xx vs PCA components: best |cosine| per C_xx vector, subspace overlap.

    The overlap is ||U_xx^T U_pca||_F^2 / P: 1 for the same subspace, about P / N
    for unrelated random ones (N: the pixels that the C_xx vectors cover).
    """
    w = np.asarray(weights, np.float64)
    u = w / np.maximum(np.linalg.norm(w, axis=0, keepdims=True), 1e-300)
    cos = u.T @ np.asarray(components, np.float64).T  # (P, P)
    best = np.argmax(np.abs(cos), axis=1)
    return {"best_cosine": np.abs(cos)[np.arange(cos.shape[0]), best].tolist(),
            "best_match": best.tolist(), "same_rank_cosine": np.abs(np.diag(cos)).tolist(),
            "subspace_overlap": float(np.sum(cos ** 2) / cos.shape[0]),
            "chance_overlap": cos.shape[0] / int(np.sum(
                np.linalg.norm(w, axis=1) > 1e-6 * np.max(np.abs(w))))}


def hamming_matrix(a, b):
    """Pixels that differ between every pattern of ``a`` and of ``b`` (-1 / +1)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a.shape[1] - a @ b.T) / 2.0


def choose_pair(s, typical=TYPICAL):
    """The two most different images among the more typical ones (a fraction of the class).

    Typical: smallest mean Hamming distance to the other images of the class.
    """
    distances = hamming_matrix(s, s)
    count = max(2, int(round(typical * s.shape[0])))
    candidates = np.argsort(distances.mean(axis=1), kind="stable")[:count]
    block = distances[np.ix_(candidates, candidates)]
    i, j = np.unravel_index(np.argmax(block), block.shape)
    return sorted((int(candidates[i]), int(candidates[j])))


def nearest_distance(frames, s):
    """Squared distance / 4 from each frame to its nearest pattern of ``s`` (Hamming if binary)."""
    frames, s = np.asarray(frames, np.float64), np.asarray(s, np.float64)
    squared = (np.sum(frames ** 2, 1)[:, None] + np.sum(s ** 2, 1)[None, :]
               - 2.0 * frames @ s.T) / 4.0
    return np.maximum(squared.min(axis=1), 0.0)


def binary_gap(frames):
    """Squared distance / 4 from each frame to the nearest -1 / +1 pattern, and its grey pixels."""
    frames = np.asarray(frames, np.float64)
    nearest = np.where(frames >= 0, 1.0, -1.0)
    return (np.sum((frames - nearest) ** 2, 1) / 4.0,
            np.sum(np.abs(frames) < 1.0 - 1e-6, axis=1))


def clip(hidden, params):
    """s = sign(W y + xi) for hidden causes (K, P): the program under ``noiseless``, as in morph."""
    hidden = jnp.asarray(hidden, params["weights"].dtype)
    program = handlers.condition(noiseless(clipped_gaussian.model, sites="s"), {"y": hidden})
    trace = handlers.trace(handlers.seed(program, 0)).get_trace(
        None, num_examples=hidden.shape[0], **params)
    return np.asarray(trace["s"]["value"])


def pca_morphs(pca, a, b, steps):
    """PCA morphs: linear interpolation of the pixels, and of the P coefficients (reconstructed)."""
    t = np.linspace(0.0, 1.0, steps)[:, None]
    pixels = (1.0 - t) * a[None] + t * b[None]
    coeffs = pca.transform(np.stack([a, b]).astype(np.float64))
    coefficients = pca.inverse_transform((1.0 - t) * coeffs[0] + t * coeffs[1])
    return pixels, coefficients


def morph_metrics(frames, s):
    """Per frame: distance to the nearest training image, distance to the binary patterns."""
    gap, grey = binary_gap(frames)
    return {"nearest": nearest_distance(frames, s).tolist(), "binary_gap": gap.tolist(),
            "grey_pixels": grey.tolist()}


def run_morph(s, params, pca, pair, steps):
    """The clipped-model morph (:func:`morph`) and the PCA morphs between two images, with metrics.

    Returns
    -------
    dict
        ``pair``, ``distance`` (Hamming), ``frames`` and ``metrics`` (:func:`morph_metrics`)
        for ``clipped``, ``pca_pixels``, ``pca_coefficients``, ``pca_thresholded``;
        ``hidden`` (steps, P) and ``end_errors`` (pixels by which the first and last
        binary frames miss the two images).
    """
    i, j = pair
    frames, hidden = morph(s[i], s[j], steps, **params)
    frames = np.asarray(frames)
    pixels, coefficients = pca_morphs(pca, s[i], s[j], steps)
    thresholded = np.where(coefficients >= 0, 1.0, -1.0)
    kinds = {"clipped": frames, "pca_pixels": pixels, "pca_coefficients": coefficients,
             "pca_thresholded": thresholded}
    return {"pair": [int(i), int(j)],
            "distance": int(hamming_matrix(s[i:i + 1], s[j:j + 1])[0, 0]),
            "frames": kinds, "hidden": np.asarray(hidden),
            "end_errors": {name: [int(np.sum(kinds[name][0] != s[i])),
                                  int(np.sum(kinds[name][-1] != s[j]))]
                           for name in ("clipped", "pca_thresholded")},
            "metrics": {name: morph_metrics(f, s) for name, f in kinds.items()}}


def random_pair_statistics(rng_key, s, hidden, params, pca, num_pairs, steps):
    """Morph metrics over random pairs, from the MAP hidden causes of all images.

    The clipped frames are those of :func:`morph` (interpolate the two hidden
    causes, clip through the program) with the hidden causes of one
    :func:`infer_hidden` call on every image, instead of one call per pair.

    Returns
    -------
    dict
        Per kind, the mean over pairs of the interior frames' ``nearest`` (distance
        to the nearest image), ``binary_gap`` and ``grey_pixels``; ``pair_distance``
        (mean Hamming distance of the pairs) and ``num_pairs``.
    """
    pairs = np.asarray(jax.vmap(lambda k: jax.random.choice(k, s.shape[0], (2,), replace=False))(
        jax.random.split(rng_key, num_pairs)))
    t = np.linspace(0.0, 1.0, steps)[None, :, None]
    path = (1.0 - t) * hidden[pairs[:, 0]][:, None] + t * hidden[pairs[:, 1]][:, None]
    clipped = clip(path.reshape(-1, hidden.shape[1]), params).reshape(num_pairs, steps, -1)
    sums = {}
    for n, (i, j) in enumerate(pairs):
        pixels, coefficients = pca_morphs(pca, s[i], s[j], steps)
        kinds = {"clipped": clipped[n], "pca_pixels": pixels, "pca_coefficients": coefficients,
                 "pca_thresholded": np.where(coefficients >= 0, 1.0, -1.0)}
        for name, frames in kinds.items():
            for key, values in morph_metrics(frames[1:-1], s).items():
                sums.setdefault(name, {}).setdefault(key, []).append(np.mean(values))
    out = {name: {key: float(np.mean(v)) for key, v in d.items()} for name, d in sums.items()}
    out["pair_distance"] = float(np.mean(hamming_matrix(s[pairs[:, 0]], s[pairs[:, 1]])
                                         .diagonal()))
    out["num_pairs"] = int(num_pairs)
    return out


def leave_one_out_nearest(s):
    """Hamming distance of every image to its nearest other image of the class."""
    distances = hamming_matrix(s, s)
    np.fill_diagonal(distances, np.inf)
    return distances.min(axis=1)


def heldout_scores(rng_key, s, num_hidden, *, sizes=HELDOUT_SIZES, noise=NOISE, projected=False):
    """Fit on a random half, score moments on the other half (:func:`moment_error`).

    Returns
    -------
    dict
        ``train`` / ``test`` sizes; ``clipped`` (corr_rmse per hidden size, the
        leading columns of one fit), ``projected`` (optional, ``project=True``),
        ``independent`` (pixels independent with the training means),
        ``training_moments`` (the training half's own moments), ``noise_floor``
        and ``mean_rmse``; ``notes`` are the fit's warnings.
    """
    order = np.asarray(jax.random.permutation(rng_key, s.shape[0]))
    half = s.shape[0] // 2
    train, test = s[order[:half]], s[order[half:]]
    fit, notes = fit_with_notes(train, num_hidden)
    scores = {}
    for size in sizes:
        trimmed = fit._replace(weights=fit.weights[:, :size])
        scores[size] = moment_error(model_moments(**program_parameters(trimmed, noise)), test)
    means = np.asarray(fit.means, np.float64)
    independent = np.outer(means, means)
    np.fill_diagonal(independent, 1.0)
    own = np.asarray(train, np.float64)
    out = {"train": int(train.shape[0]), "test": int(test.shape[0]),
           "clipped": {str(k): v["corr_rmse"] for k, v in scores.items()},
           "mean_rmse": scores[sizes[-1]]["mean_rmse"],
           "independent": moment_error((means, independent), test)["corr_rmse"],
           "training_moments": moment_error((own.mean(0), own.T @ own / own.shape[0]),
                                            test)["corr_rmse"],
           "noise_floor": scores[sizes[-1]]["noise_floor_corr"],
           "num_negative": int(np.sum(np.asarray(fit.eigenvalues)
                                      < -NEGATIVE_TOLERANCE * float(fit.eigenvalues[0]))),
           "num_boundary_pairs": fit.num_boundary_pairs, "notes": notes}
    if projected:
        fit_p, _ = fit_with_notes(train, num_hidden, project=True)
        out["projected"] = moment_error(model_moments(**program_parameters(fit_p, noise)),
                                        test)["corr_rmse"]
    return out


def sampling_check(rng_key, fit, num_examples, num_hidden):
    """Refit on patterns drawn from the fitted model itself (a true clipped Gaussian).

    The model's C_xx (normalised W W^T) is positive semidefinite by construction,
    so the negative eigenvalues and boundary pairs of the refit come from sampling
    alone. Only the pixels that vary in the data are kept (the model turns a
    constant pixel on with probability 1 / (2 num_examples), and pixels on in a
    single pattern would add boundary pairs that the data does not have).
    """
    params = program_parameters(fit, 0.0)
    sample = clipped_gaussian.generate(rng_key, num_examples, weights=params["weights"],
                                       bias=params["bias"], noise=0.0).s
    varying = np.setdiff1d(np.arange(sample.shape[1]), np.asarray(fit.constant_columns))
    refit, notes = fit_with_notes(np.asarray(sample)[:, varying], num_hidden)
    summary = spectrum_summary(refit.eigenvalues, num_hidden)
    return {"num_examples": int(num_examples), "num_pixels": int(varying.size),
            "num_negative": summary["num_negative"], "smallest": summary["smallest"],
            "largest": summary["largest"], "num_boundary_pairs": refit.num_boundary_pairs,
            "eigenvalue_noise": refit.eigenvalue_noise, "notes": notes}


def summarise_heldout(heldout, sizes):
    """Mean and standard deviation over splits of every score of :func:`heldout_scores`."""
    def mean_sd(values):
        return [float(np.mean(values)), float(np.std(values))]

    out = {"clipped": {str(k): mean_sd([h["clipped"][str(k)] for h in heldout]) for k in sizes}}
    for key in ("independent", "training_moments", "noise_floor",
                "mean_rmse"):
        out[key] = mean_sd([h[key] for h in heldout])
    if "projected" in heldout[0]:
        out["projected_first_split"] = heldout[0]["projected"]
    out["num_splits"] = len(heldout)
    return out


def _print_heldout(summary, first, num_hidden):
    print(f"\nHeld-out moments ({summary['num_splits']} random splits into {first['train']} "
          f"training and {first['test']} held-out images; RMS error of <s_a s_b> over pairs, "
          "mean +- sd over splits):")
    for k, (m, sd) in summary["clipped"].items():
        print(f"  clipped Gaussian, P = {k:2s}         {m:.4f} +- {sd:.4f}")
    if "projected_first_split" in summary:
        print(f"  P = {num_hidden}, project=True, split 1    "
              f"{summary['projected_first_split']:.4f} (without: "
              f"{first['clipped'][str(num_hidden)]:.4f})")
    for key, label in (("independent", "independent pixels"),
                       ("training_moments", "training half's own moments"),
                       ("noise_floor", "noise floor (held-out sampling)")):
        m, sd = summary[key]
        print(f"  {label:33s}{m:.4f} +- {sd:.4f}")
    floor = summary["noise_floor"][0]
    print(f"  (the true distribution's moments would score the floor; moments estimated from "
          f"{first['train']} images add their own sampling error, about sqrt(2) x floor = "
          f"{np.sqrt(2) * floor:.4f}; RMS error of <s_a> {summary['mean_rmse'][0]:.4f}; the paper "
          "reports no held-out score)")


def _plot(paths, s, spec, weights, eigenvalues, pca, comparison, shown, num_hidden):
    import matplotlib

    matplotlib.use("Agg")

    fig, axes = new_figure(1, 2, figsize=(10, 4.3))
    for ax, key, title in ((axes[0], "all", f"all {s.shape[1]} pixels (fit as returned)"),
                           (axes[1], "varying", f"the {spec['num_varying']} varying pixels")):
        curves = spec[key]
        for name, style, colour in (("C_ss", "-", "C0"), ("C_ss_centred", "--", "C1"),
                                    ("C_xx_projected", ":", "C2"), ("C_xx", "-", "C3")):
            if name not in curves:
                continue
            values = np.asarray(curves[name]["eigenvalues"])
            rank = np.arange(1, values.size + 1)
            positive = values > 0
            line, = ax.semilogy(rank[positive], values[positive], style, marker=".",
                                color=colour, label=name.replace("_", " "))
            if name == "C_xx" and np.any(~positive):
                ax.semilogy(rank[~positive], -values[~positive], "o", mfc="none",
                            color=line.get_color(), label="|negative| of C xx")
        ax.axvline(num_hidden, color="grey", lw=0.8, label=f"P = {num_hidden} hidden units")
        ax.set_ylim(1e-3, 100)
        ax.set_xlabel("eigenvalue rank")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("eigenvalue")
    fig.suptitle("Spectra of the binary C_ss and the Gaussian C_xx (cf. Fig. 4)", fontsize=10)
    save_figure(fig, paths["spectra"])

    columns = 4
    rows = int(np.ceil(num_hidden / columns))
    fig = empty_figure(figsize=(2 * columns + 1.0, rows * 1.2 + 0.9))
    halves = fig.subfigures(1, 2, wspace=0.04)
    halves[0].suptitle(f"The {num_hidden} leading eigenvectors of C_xx\n(title: eigenvalue; cf. "
                       "Fig. 4 inset)", fontsize=8)
    halves[1].suptitle("PCA of the binary images (title: variance,\n|cosine| with the same "
                       "rank on the left)", fontsize=8)
    grids = [half.subplots(rows, columns, squeeze=False) for half in halves]
    w = np.asarray(weights, np.float64)
    units = w / np.maximum(np.linalg.norm(w, axis=0, keepdims=True), 1e-300)
    components = np.asarray(pca.components_)
    for k in range(rows * columns):
        r, c = divmod(k, columns)
        left, right = grids[0][r, c], grids[1][r, c]
        for ax in (left, right):
            ax.set_xticks([])
            ax.set_yticks([])
        if k >= num_hidden:
            left.axis("off")
            right.axis("off")
            continue
        sign = np.sign(components[k] @ units[:, k]) or 1.0
        limit = np.max(np.abs(units[:, k]))
        left.imshow(units[:, k].reshape(SIDE, SIDE), cmap="RdBu_r", vmin=-limit, vmax=limit)
        left.set_title(f"{eigenvalues[k]:.2f}", fontsize=6)
        limit = np.max(np.abs(components[k]))
        right.imshow(sign * components[k].reshape(SIDE, SIDE), cmap="RdBu_r", vmin=-limit,
                     vmax=limit)
        right.set_title(f"{pca.explained_variance_[k]:.2f} |cos| "
                        f"{comparison['same_rank_cosine'][k]:.2f}", fontsize=6)
    save_figure(fig, paths["eigenvectors"])

    frames = shown["frames"]
    labels = (("clipped", "clipped model\n(morph)"), ("pca_pixels", "pixels\ninterpolated"),
              ("pca_coefficients", f"PCA-{num_hidden}\ncoefficients"),
              ("pca_thresholded", f"PCA-{num_hidden}\nthresholded"))
    steps = frames["clipped"].shape[0]
    fig, axes = new_figure(len(labels), steps, figsize=(0.95 * steps + 1.0, 1.15 * len(labels)
                                                        + 0.8), squeeze=False)
    for r, (name, label) in enumerate(labels):
        nearest = shown["metrics"][name]["nearest"]
        for j in range(steps):
            ax = axes[r, j]
            ax.imshow(np.asarray(frames[name][j]).reshape(SIDE, SIDE), cmap="gray_r", vmin=-1,
                      vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"{nearest[j]:.1f}", fontsize=6)
        axes[r, 0].set_ylabel(label, fontsize=7)
    i, j = shown["pair"]
    fig.suptitle(f"Morph between twos {i} and {j} ({shown['distance']} pixels apart)\ntitle: "
                 "distance to the nearest training two (Hamming; squared / 4 for grey)",
                 fontsize=9)
    save_figure(fig, paths["morph"])


def _print_spectra(spec, num_hidden):
    print(f"\nSpectra (Fig. 4). Share of the {num_hidden} largest eigenvalues (of the trace / "
          "of the positive eigenvalues), positive and negative counts:")
    for key, label in (("all", "all pixels"), ("varying", "varying pixels")):
        for name, item in spec[key].items():
            print(f"  {label:14s} {name:15s} top/trace {item['top_fraction_trace']:6.3f}  "
                  f"top/positive {item['top_fraction_positive']:6.3f}  positive "
                  f"{item['num_positive']:2d}  negative {item['num_negative']:2d}  largest "
                  f"{item['largest']:6.2f}  smallest {item['smallest']:7.3f}  "
                  f"lambda_P/lambda_1 {item['ratio_top']:.3f}")


def main(argv=None):
    """Fit the twos, compare spectra, eigenvectors and morphs with PCA, score on held-out twos.

    Returns
    -------
    dict
        ``settings``, ``data``, ``fit`` (summary of the fit on all images),
        ``spectra`` (:func:`spectra`), ``eigenvectors`` (:func:`compare_eigenvectors`),
        ``morph`` (:func:`run_morph`, the pair shown), ``real_nearest`` (median and
        max distance of a two to its nearest other two), and, without ``--quick``,
        ``random_pairs`` (:func:`random_pair_statistics`), ``reconstruction``,
        ``heldout`` (list of :func:`heldout_scores`), ``heldout_summary``
        (:func:`summarise_heldout`) and ``sampling_check``; ``notes``, ``paths``, ``seconds``.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="spectra, eigenvectors and one morph only (a smoke test)")
    parser.add_argument("--output-dir", default="zoo-results", help="folder for PNGs and JSON")
    parser.add_argument("--seed", type=int, default=0, help="random seed (splits, pairs)")
    parser.add_argument("--digit", type=int, default=2, choices=range(10),
                        help="the class to model (default 2, the paper's twos)")
    parser.add_argument("--threshold", type=int, default=THRESHOLD,
                        help=f"grey level (1..16) from which a pixel is on (default {THRESHOLD})")
    parser.add_argument("--hidden", type=int, default=NUM_HIDDEN,
                        help=f"P, the number of hidden units (default {NUM_HIDDEN})")
    parser.add_argument("--pair", type=int, nargs=2, default=None, metavar=("I", "J"),
                        help="indices (within the class) of the two images to morph")
    args = parser.parse_args(argv)
    if not 1 <= args.threshold <= 16:
        parser.error(f"--threshold must be in 1..16; got {args.threshold}")
    num_hidden = args.hidden
    if not 1 <= num_hidden <= SIDE * SIDE:
        parser.error(f"--hidden must be in 1..{SIDE * SIDE}; got {num_hidden}")
    total_start = time.perf_counter()
    key_split, key_pairs, key_sample = jax.random.split(jax.random.key(args.seed), 3)

    s, _ = load_patterns(args.digit, threshold=args.threshold)
    if args.pair is not None and not all(0 <= v < s.shape[0] for v in args.pair):
        parser.error(f"--pair indices must be in 0..{s.shape[0] - 1}; got {args.pair}")
    if args.pair is not None and args.pair[0] == args.pair[1]:
        parser.error(f"--pair needs two different images; got {args.pair}")
    constant = np.flatnonzero(np.all(s == s[:1], axis=0))
    print(f"Digits: scikit-learn load_digits, class {args.digit} (the paper: USPS twos of "
          f"{PAPER_SIDE}x{PAPER_SIDE}, not available offline): {s.shape[0]} images of "
          f"{SIDE}x{SIDE}, pixel on when grey >= {args.threshold}, {np.mean(s > 0):.3f} of "
          f"pixels on; {constant.size} of {s.shape[1]} pixels never change (kept as independent "
          "units: constant_columns='independent')")

    start = time.perf_counter()
    fit, notes = fit_with_notes(s, num_hidden)
    fit_seconds = time.perf_counter() - start
    top_values = np.asarray(fit.eigenvalues)[:num_hidden]
    params = program_parameters(fit, NOISE)
    boundary = boundary_split(s, fit)
    print(f"fit (P = {num_hidden}, with biases; the constant pixels take no part in C_xx): "
          f"{fit_seconds:.1f} s (JIT compilation included); {fit.num_boundary_pairs} of "
          f"{boundary['num_pairs']} pairs of varying pixels at rho = -1 / +1 "
          f"({boundary['minus_one']} / {boundary['plus_one']}; "
          f"{boundary['never_on_together']} pairs are never on together)")
    for message in notes:
        print(f"note: {message}")

    fit_projected = None
    if not args.quick:
        fit_projected, projected_notes = fit_with_notes(s, num_hidden, project=True)
        notes += [f"project=True: {m}" for m in projected_notes]
        for message in projected_notes:
            print(f"note (project=True): {message}")
    spec = spectra(s, fit, fit_projected, num_hidden)
    _print_spectra(spec, num_hidden)
    xx, ss = spec["varying"]["C_xx"], spec["varying"]["C_ss"]
    centred = spec["varying"]["C_ss_centred"]
    print(f"  paper: C_xx falls off more steeply than C_ss. Here (varying pixels): the top "
          f"{num_hidden} eigenvalues hold {xx['top_fraction_positive']:.3f} of C_xx's positive "
          f"spectrum against {ss['top_fraction_trace']:.3f} of C_ss (<s_a s_b>, the paper's) and "
          f"{centred['top_fraction_trace']:.3f} of the centred correlations; C_xx has "
          f"{xx['num_positive']} positive eigenvalues of {spec['num_varying']}, C_ss "
          f"{ss['num_positive']}: "
          + ("steeper, as in the paper" if xx["top_fraction_positive"] > ss["top_fraction_trace"]
             else "NOT steeper, unlike the paper"))
    print(f"  paper: 'some small negative eigenvalues'. Here: {xx['num_negative']} negative, "
          f"summing to {xx['negative_sum']:.1f}, smallest {xx['smallest']:.2f} against the "
          f"largest {xx['largest']:.2f}: not small, but within the fit's estimate of the "
          f"eigenvalues' sampling noise for {s.shape[0]} images, {fit.eigenvalue_noise:.1f} "
          f"(has_negative_eigenvalues={fit.has_negative_eigenvalues}, and no warning); "
          "see also the sampling check")

    pca = fit_pca(s, num_hidden, seed=args.seed)
    comparison = compare_eigenvectors(fit.weights, pca.components_)
    print(f"\nEigenvectors: {num_hidden} leading of C_xx vs PCA's on the same binary images: "
          f"subspace overlap {comparison['subspace_overlap']:.3f} (1 = same subspace, chance "
          f"{comparison['chance_overlap']:.3f}); |cosine| at the same rank "
          f"{np.round(comparison['same_rank_cosine'][:6], 2).tolist()} ... (first six); paper: "
          "'qualitatively similar to those found by the standard PCA algorithm'")

    pair = list(args.pair) if args.pair is not None else choose_pair(s)
    start = time.perf_counter()
    shown = run_morph(s, params, pca, pair, MORPH_STEPS)
    morph_seconds = time.perf_counter() - start
    nn = leave_one_out_nearest(s)
    real = {"median": float(np.median(nn)), "max": float(np.max(nn))}
    print(f"\nMorph ({MORPH_STEPS} frames, {morph_seconds:.1f} s, JIT compilation included) "
          f"between twos {shown['pair']} ({shown['distance']} pixels apart): the first and last "
          f"clipped frames miss the two images by {shown['end_errors']['clipped']} pixels, "
          f"PCA-{num_hidden} thresholded by {shown['end_errors']['pca_thresholded']}. Interior "
          "frames (mean): distance to the nearest training two (Hamming; squared / 4 for grey "
          "frames), to the nearest binary pattern, grey pixels:")

    def print_rows(table, indent="  "):
        for kind, label in (("clipped", "clipped model (morph)"),
                            ("pca_pixels", "pixels interpolated"),
                            ("pca_coefficients", f"PCA-{num_hidden} coefficients"),
                            ("pca_thresholded", f"PCA-{num_hidden} thresholded")):
            item = table[kind]
            print(f"{indent}{label:24s} nearest two {np.mean(item['nearest']):6.2f}  binary gap "
                  f"{np.mean(item['binary_gap']):6.2f}  grey pixels "
                  f"{np.mean(item['grey_pixels']):5.1f}")

    print_rows({kind: {key: v[1:-1] for key, v in m.items()}
                for kind, m in shown["metrics"].items()})

    reconstruction = pair_stats = None
    if not args.quick:
        start = time.perf_counter()
        hidden = np.asarray(infer_hidden(s, params["weights"], params["bias"], noise=NOISE))
        clipped_errors = np.sum(clip(hidden, params) != s, axis=1)
        pca_recon = np.where(pca.inverse_transform(pca.transform(s.astype(np.float64))) >= 0,
                             1.0, -1.0)
        pca_errors = np.sum(pca_recon != s, axis=1)
        t = np.linspace(0.0, 1.0, MORPH_STEPS)[:, None]
        again = clip((1.0 - t) * hidden[pair[0]] + t * hidden[pair[1]], params)
        reconstruction = {"clipped_mean": float(clipped_errors.mean()),
                          "clipped_exact": int(np.sum(clipped_errors == 0)),
                          "pca_mean": float(pca_errors.mean()),
                          "pca_exact": int(np.sum(pca_errors == 0)),
                          "morph_agreement": int(np.sum(again != shown["frames"]["clipped"]))}
        pair_stats = random_pair_statistics(key_pairs, s, hidden, params, pca, NUM_PAIRS,
                                            MORPH_STEPS)
        print(f"  {NUM_PAIRS} random pairs ({pair_stats['pair_distance']:.1f} pixels apart on "
              f"average; hidden causes of all images from one infer_hidden call, "
              f"{time.perf_counter() - start:.1f} s; for the pair above these give frames "
              f"that differ from morph's in {reconstruction['morph_agreement']} pixels):")
        print_rows(pair_stats, "    ")
        print(f"  every two from its {num_hidden} hidden causes: sign(W y_MAP + xi) misses "
              f"{reconstruction['clipped_mean']:.2f} pixels per image "
              f"({reconstruction['clipped_exact']} of {s.shape[0]} exact); PCA-{num_hidden} "
              f"thresholded misses {reconstruction['pca_mean']:.2f} "
              f"({reconstruction['pca_exact']} exact)")
    print(f"  reference: a real two lies {real['median']:.0f} pixels (median; max "
          f"{real['max']:.0f}) from its nearest other two. Paper: the clipped frames are binary "
          "and flip pixels in an order set by the model, while PCA's linear interpolation "
          "'would not look anything like the original binary distribution'")

    heldout = heldout_summary = None
    sizes = tuple(k for k in HELDOUT_SIZES if k < num_hidden) + (num_hidden,)
    if args.quick:
        print("\nHeld-out moments: skipped with --quick (a second fit and the compilation of "
              "model_moments, about 10 s)")
    else:
        heldout = [heldout_scores(k, s, num_hidden, sizes=sizes, projected=n == 0)
                   for n, k in enumerate(jax.random.split(key_split, NUM_SPLITS))]
        heldout_summary = summarise_heldout(heldout, sizes)
        _print_heldout(heldout_summary, heldout[0], num_hidden)

    check = None
    if not args.quick:
        check = sampling_check(key_sample, fit, s.shape[0], num_hidden)
        print(f"\nSampling check: {check['num_examples']} patterns drawn from the fitted model "
              f"(its C_xx has no negative eigenvalue), refitted on the {check['num_pixels']} "
              f"varying pixels: {check['num_negative']} negative eigenvalues, smallest "
              f"{check['smallest']:.2f} (largest {check['largest']:.2f}), "
              f"{check['num_boundary_pairs']} boundary pairs; the data: "
              f"{spec['all']['C_xx']['num_negative']}, {spec['all']['C_xx']['smallest']:.2f} "
              f"({spec['all']['C_xx']['largest']:.2f}), {fit.num_boundary_pairs}: negative "
              f"eigenvalues of about this number and size come from {check['num_examples']} "
              "images alone, even when the model is true")

    results = {
        "settings": {"quick": args.quick, "seed": args.seed, "digit": args.digit,
                     "threshold": args.threshold, "num_hidden": num_hidden, "noise": NOISE,
                     "morph_steps": MORPH_STEPS},
        "data": {"source": f"sklearn.datasets.load_digits, class {args.digit}",
                 "num_images": int(s.shape[0]), "num_pixels": int(s.shape[1]),
                 "constant_pixels": constant.tolist(), "fraction_on": float(np.mean(s > 0))},
        "fit": {"seconds": fit_seconds, "num_boundary_pairs": fit.num_boundary_pairs,
                "boundary": boundary, "has_negative_eigenvalues": fit.has_negative_eigenvalues,
                "min_eigenvalue": fit.min_eigenvalue,
                "constant_columns": np.asarray(fit.constant_columns).tolist(),
                "eigenvalue_noise": fit.eigenvalue_noise,
                "leading_eigenvalues": top_values.tolist()},
        "spectra": spec, "eigenvectors": comparison, "morph": shown, "real_nearest": real,
        "random_pairs": pair_stats, "reconstruction": reconstruction, "heldout": heldout,
        "heldout_summary": heldout_summary, "sampling_check": check, "notes": notes,
    }
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "clipped_digits.json"}
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print('matplotlib is not installed (pip install -e ".[examples]"): no figures')
    else:
        paths.update(spectra=out / "clipped_digits_spectra.png",
                     eigenvectors=out / "clipped_digits_eigenvectors.png",
                     morph=out / "clipped_digits_morph.png")
        _plot(paths, s, spec, fit.weights, top_values, pca, comparison, shown, num_hidden)
    results["seconds"] = time.perf_counter() - total_start
    record = jsonable(results)
    record["morph"] = jsonable(shown, keep_arrays=True)
    paths["json"].write_text(json.dumps(record, indent=1))
    results["paths"] = paths
    for path in paths.values():
        print(f"wrote {path}")
    print(f"total {results['seconds']:.1f} s")
    return results


if __name__ == "__main__":
    main()
