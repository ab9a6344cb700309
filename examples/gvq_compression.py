"""Image compression, GVQ against VQ: Westerdijk, Barber and Wiegerinck (2001), sec. 6.2, 6.2.1.
=============================================================================================

The image is scikit-learn's bundled ``china.jpg`` (``sklearn.datasets.load_sample_image``,
no network), converted to grey levels 0..255 with the ITU-R BT.601 luma weights
(0.299 R + 0.587 G + 0.114 B, rounded; PIL's ``convert("L")`` up to rounding). It is
427 x 640 pixels; the bottom 11 rows are cropped so that it cuts into whole 16 x 16
segments: 26 x 40 = P = 1040 segments of n_p = 256 pixels (the paper: a 768 x 704
Vermeer, P = 2112).

**Why 16 x 16.** It is the paper's segment size, and the size fixes the trade-off
that the paper's bit accounting is about: every codebook vector (VQ) or feature
(GVQ) costs I_g n_p bits, every segment log2 N bits. With 8 x 8 segments the vectors
would cost 4 times less and the indices 4 times more (P = 4160), which moves the
balance towards VQ's larger codebooks; keeping 16 x 16 keeps the paper's balance
as nearly as this smaller image allows (ours: P / (I_g n_p) = 1040 / 2048 ~ 0.5;
the paper's: 2112 / 2048 ~ 1, so here the vectors weigh about twice as much
against the indices as in the paper, which favours the method with fewer vectors).

**Models.**

* VQ: scikit-learn ``KMeans`` (k-means++ initialisation, ``n_init=10``): VQ at its best.
* GVQ: one set of n switchable features plus an origin that is always on
  (``fit_gvq(x, n + 1, num_sets=1, method="exact", ...)``, sec. 5.1), 2^n codebook
  vectors. Exact association up to n = 12 (``--max-features`` beyond that uses
  ``"br+mf"``). The restarts start as the library draws them
  (:func:`inference.gvq.em.initial_set_features`): the origin is a random segment o
  and each feature starts half-way towards another random segment, so that
  every start's codebook vectors lie among the data.

**Bit accounting** (sec. 6.2.1), I_g = 8 bits per grey level, 1 kbit = 1000 bits:

* the paper's formulas: I_VQ = I_g n_p N_vq + P log2 N_vq and
  I_GVQ = I_g n_p n + P log2 N_used, with N_used the number of distinct feature
  combinations that the segments use;
* ours (what a decoder needs): the origin is a vector to transmit too, so GVQ pays
  for n + 1 vectors; codebook and feature entries are real numbers, so each matrix
  is quantised to 8 bits on a uniform grid over its range (the range sent as two
  32-bit floats, 64 bits per matrix) *before* encoding, every segment is then
  re-associated with the quantised vectors (nearest codebook vector; exact search
  over the 2^n combinations for GVQ), and the PSNRs are those of this decoded
  image; a GVQ index costs log2 N_used bits only if the decoder also receives the
  table of the N_used combinations (N_used n bits), so GVQ's index cost is
  min(P n, P log2 N_used + N_used n). Indices cost log2 N bits (not rounded up to
  whole bits, as in the paper: an arithmetic coder of uniform symbols gets within
  a few bits of it for the whole image).

PSNR = 10 log10(255^2 / MSE) of the decoded 8-bit image (reconstruction clipped to
0..255 and rounded) against the cropped original.

**Experiments.** (1) The paper's comparison: VQ with 16 codebook vectors against GVQ
with 8 features plus the origin; images side by side, PSNR and bits of each, and
the paper's numbers next to ours. (2) A rate-distortion sweep: VQ with K = 2..16,
20, 24, 32, 48, ..., 256 codebook vectors and GVQ with n = 1..12 features, PSNR
against total bits (ours), each curve interpolated linearly in bits over the range
of bits both cover, reporting where GVQ is above VQ and where it is not.

Measured (seed 0, full run): GVQ is above VQ at equal bits over the whole common
range except its lowest point, where n = 1 and K = 2 are the same model (2-means)
and tie; the common range ends at GVQ's n = 12 (39 kbit). Beyond it,
``--max-features 16`` switches to ``"br+mf"`` association, and EM with it ends far
below exact search (n = 14: 19.00 dB at 45 kbit, n = 16: 19.13 dB at 52 kbit,
against 19.87 dB for n = 12 with exact search; n = 16 takes 3.5 minutes), so
those points measure the association method rather than the model.

Run: ``python examples/gvq_compression.py [--quick] [--output-dir DIR] [--seed S]``
(about 2 minutes on 2 CPU cores; ``--quick``, about 25 s: VQ with K = 2..32, GVQ
with n = 1, 2, 4, 8 and fewer restarts). Writes ``gvq_compression_images.png``,
``gvq_compression_features.png``, ``gvq_compression_rate_distortion.png`` and
``gvq_compression.json`` into ``--output-dir`` (default ``zoo-results``).

References
----------
M. Westerdijk, D. Barber and W. Wiegerinck, "Deterministic generative models for fast
feature discovery", Data Mining and Knowledge Discovery 5(4), 2001, sec. 5.1, 6.2,
6.2.1, Fig. 10 and 11.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from pathlib import Path

import jax
import numpy as np

from inference.engine.figures import new_figure, save_figure
from inference.engine.reporting import jsonable
from inference.gvq.constraints import associate_sets
from inference.gvq.em import fit_gvq
from ppl_models.diagnostics import ZooWarning

#: Sec. 6.2: segments of 16 x 16 pixels.
SEGMENT = 16
#: Sec. 6.2.1: I_g, bits per grey level (256 grey levels).
GREY_BITS = 8
#: Bits of each quantised codebook / feature entry (our choice, as the grey levels).
ENTRY_BITS = 8
#: A matrix's range (min, max) is sent as two 32-bit floats.
RANGE_BITS = 2 * 32
#: Largest n searched exhaustively; above it the association uses "br+mf".
MAX_EXACT = 12
#: Two PSNRs closer than this (dB) count as a tie in the rate-distortion comparison.
TIE_DB = 0.05
#: The paper's set-up and numbers (sec. 6.2, Fig. 10).
PAPER = {"height": 768, "width": 704, "segments": 2112, "segment_pixels": 256,
         "vq_codebook": 16, "gvq_features": 8, "original_kbit": 865, "vq_kbit": 74,
         "gvq_kbit": 56}


# --------------------------------------------------------------------------- data
def load_image():
    """The bundled ``china.jpg`` as grey levels, cropped to whole segments.

    Returns
    -------
    image : uint8 array (416, 640)
        BT.601 luma, rounded; the bottom rows that do not fill a segment row are cut.
    original_shape : tuple
        The shape before cropping, (427, 640).
    """
    from sklearn.datasets import load_sample_image

    rgb = load_sample_image("china.jpg").astype(np.float64)
    grey = np.clip(np.round(rgb @ np.array([0.299, 0.587, 0.114])), 0, 255).astype(np.uint8)
    height, width = (s // SEGMENT * SEGMENT for s in grey.shape)
    return grey[:height, :width], grey.shape


def to_segments(image, segment=SEGMENT):
    """(H, W) image -> (P, segment^2) float32 rows, segments in row-major order."""
    rows, cols = image.shape[0] // segment, image.shape[1] // segment
    blocks = image[: rows * segment, : cols * segment].reshape(rows, segment, cols, segment)
    return blocks.transpose(0, 2, 1, 3).reshape(rows * cols, segment * segment).astype(np.float32)


def from_segments(segments, shape, segment=SEGMENT):
    """Inverse of :func:`to_segments`: (P, segment^2) -> image of ``shape``."""
    rows, cols = shape[0] // segment, shape[1] // segment
    blocks = np.asarray(segments).reshape(rows, cols, segment, segment)
    return blocks.transpose(0, 2, 1, 3).reshape(rows * segment, cols * segment)


def decode(reconstruction):
    """The displayed 8-bit image: clip to 0..255 and round."""
    return np.clip(np.round(np.asarray(reconstruction, np.float64)), 0, 255).astype(np.uint8)


def psnr(original, decoded):
    """Peak signal-to-noise ratio in dB, 10 log10(255^2 / MSE), of two 8-bit arrays."""
    mse = np.mean(np.square(np.asarray(original, np.float64) - np.asarray(decoded, np.float64)))
    return math.inf if mse == 0 else 10.0 * math.log10(255.0**2 / mse)


def quantise(matrix, bits=ENTRY_BITS):
    """Round every entry to a uniform grid of 2^bits levels over the matrix's [min, max].

    Returns the dequantised matrix (what the decoder reconstructs); a constant
    matrix comes back unchanged.
    """
    matrix = np.asarray(matrix, np.float64)
    low, high = float(matrix.min()), float(matrix.max())
    if high == low:
        return matrix.copy()
    step = (high - low) / (2**bits - 1)
    return low + np.round((matrix - low) / step) * step


# --------------------------------------------------------------- bit accounting
def paper_vq_bits(num_codebook, segment_pixels, num_segments, grey_bits=GREY_BITS):
    """The paper's I_VQ = I_g n_p N_vq + P log2 N_vq (sec. 6.2.1), in bits."""
    return grey_bits * segment_pixels * num_codebook + num_segments * math.log2(num_codebook)


def paper_gvq_bits(num_features, num_used, segment_pixels, num_segments, grey_bits=GREY_BITS):
    """The paper's I_GVQ = I_g n_p n + P log2 N_used (n features, the origin not counted)."""
    return grey_bits * segment_pixels * num_features + num_segments * math.log2(num_used)


def vq_bits(num_codebook, segment_pixels, num_segments, entry_bits=ENTRY_BITS):
    """Ours: K quantised codebook vectors, their range, and P indices of log2 K bits."""
    return (entry_bits * segment_pixels * num_codebook + RANGE_BITS
            + num_segments * math.log2(num_codebook))


def gvq_index_bits(num_features, num_used, num_segments):
    """Bits of the P feature combinations: min(P n, P log2 N_used + N_used n).

    Either every segment sends its n on/off bits, or the decoder receives the
    table of the N_used combinations in use (N_used n bits) and every segment an
    index into it.
    """
    direct = num_segments * num_features
    table = num_segments * math.log2(num_used) + num_used * num_features
    return min(direct, table)


def gvq_bits(num_features, num_used, segment_pixels, num_segments, entry_bits=ENTRY_BITS):
    """Ours: n + 1 quantised vectors (the origin included), their range, and the indices."""
    return (entry_bits * segment_pixels * (num_features + 1) + RANGE_BITS
            + gvq_index_bits(num_features, num_used, num_segments))


# ------------------------------------------------------------------------ models
def nearest(x, codebook):
    """Index of the nearest codebook row (squared Euclidean) for every row of x."""
    x, codebook = np.asarray(x, np.float64), np.asarray(codebook, np.float64)
    distances = (np.sum(codebook**2, axis=1)[None, :] - 2.0 * x @ codebook.T)
    return np.argmin(distances, axis=1)


def run_vq(x, num_codebook, *, seed, n_init=10):
    """k-means (k-means++, ``n_init`` starts) with ``num_codebook`` vectors.

    Returns a dict with the float and 8-bit-quantised reconstructions (the latter
    re-associated with the quantised codebook) and the bit counts.
    """
    from sklearn.cluster import KMeans

    start = time.perf_counter()
    kmeans = KMeans(num_codebook, init="k-means++", n_init=n_init, random_state=seed).fit(x)
    codebook = kmeans.cluster_centers_
    quantised = quantise(codebook)
    labels = nearest(x, quantised)
    num_segments, segment_pixels = x.shape
    return {
        "K": num_codebook,
        "recon_float": codebook[kmeans.labels_],
        "recon": quantised[labels],
        "num_used": int(np.unique(labels).size),
        "bits": vq_bits(num_codebook, segment_pixels, num_segments),
        "paper_bits": paper_vq_bits(num_codebook, segment_pixels, num_segments),
        "seconds": time.perf_counter() - start,
    }


def run_gvq(rng_key, x, num_features, *, num_restarts, num_iterations):
    """GVQ with ``num_features`` switchable features plus an origin (one feature set).

    Returns a dict with the fitted features (origin last), the float
    reconstruction, the reconstruction after quantising the features to 8 bits and
    re-associating every segment, N_used (of the quantised encoding), the bit
    counts and EM's convergence flag.
    """
    method = "exact" if num_features <= MAX_EXACT else "br+mf"
    key_fit, key_assoc = jax.random.split(rng_key)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ZooWarning)
        result = fit_gvq(x, num_features + 1, num_sets=1, method=method, rng_key=key_fit,
                         num_restarts=num_restarts, max_iterations=num_iterations)
        features = np.asarray(result.features, np.float64)
        quantised = quantise(features)
        states_q, _, _ = associate_sets(quantised.astype(np.float32), x, 1, method=method,
                                        rng_key=key_assoc)
    for caught_warning in caught:  # pass on everything but the project's own notes
        if not issubclass(caught_warning.category, ZooWarning):
            warnings.showwarning(caught_warning.message, caught_warning.category,
                                 caught_warning.filename, caught_warning.lineno)
    states = np.asarray(result.states)
    states_q = np.asarray(states_q)
    num_segments, segment_pixels = x.shape
    num_used = int(np.unique(states_q, axis=0).shape[0])
    return {
        "n": num_features,
        "method": method,
        "features": features,
        "recon_float": states @ features,
        "recon": states_q @ quantised,
        "num_used": num_used,
        "num_used_float": int(np.unique(states, axis=0).shape[0]),
        "bits": gvq_bits(num_features, num_used, segment_pixels, num_segments),
        "paper_bits": paper_gvq_bits(num_features, num_used, segment_pixels, num_segments),
        "error": float(result.error),
        "converged": bool(result.converged),
        "iterations": int(result.num_iterations),
        "warnings": sorted({str(w.message) for w in caught if issubclass(w.category, ZooWarning)}),
        "seconds": time.perf_counter() - start,
    }


# ------------------------------------------------------------ rate-distortion
def compare_curves(vq_points, gvq_points, *, num_grid=2001, tie=TIE_DB):
    """Compare two rate-distortion curves at equal bits.

    Each curve is a list of (bits, psnr), interpolated linearly in bits. On a grid
    over the bits that both curves cover, the difference GVQ - VQ is classified as
    a GVQ win (> ``tie`` dB), a tie, or a VQ win (< -``tie`` dB).

    Returns
    -------
    dict
        ``range`` (low, high) bits; ``fraction_gvq``, ``fraction_tie``,
        ``fraction_vq`` of the range; ``vq_intervals`` and ``tie_intervals``,
        lists of (low, high) bits; ``min_diff``, ``max_diff`` (dB).
    """
    vq = np.asarray(sorted(vq_points), np.float64)
    gv = np.asarray(sorted(gvq_points), np.float64)
    low, high = max(vq[0, 0], gv[0, 0]), min(vq[-1, 0], gv[-1, 0])
    if not high > low:
        return {"range": (low, high), "fraction_gvq": math.nan, "fraction_tie": math.nan,
                "fraction_vq": math.nan, "vq_intervals": [], "tie_intervals": [],
                "min_diff": math.nan, "max_diff": math.nan}
    grid = np.linspace(low, high, num_grid)
    diff = np.interp(grid, gv[:, 0], gv[:, 1]) - np.interp(grid, vq[:, 0], vq[:, 1])
    label = np.where(diff > tie, 1, np.where(diff < -tie, -1, 0))

    def intervals(value):
        found, begin = [], None
        for i, lab in enumerate(label):
            if lab == value and begin is None:
                begin = i
            if lab != value and begin is not None:
                found.append((float(grid[begin]), float(grid[i - 1])))
                begin = None
        if begin is not None:
            found.append((float(grid[begin]), float(grid[-1])))
        return found

    return {"range": (float(low), float(high)),
            "fraction_gvq": float(np.mean(label == 1)), "fraction_tie": float(np.mean(label == 0)),
            "fraction_vq": float(np.mean(label == -1)), "vq_intervals": intervals(-1),
            "tie_intervals": intervals(0), "min_diff": float(diff.min()),
            "max_diff": float(diff.max())}


def _describe(intervals):
    if not intervals:
        return "nowhere"
    return ", ".join(f"{a / 1e3:.1f}" if a == b else f"{a / 1e3:.1f}-{b / 1e3:.1f}"
                     for a, b in intervals) + " kbit"


# ----------------------------------------------------------------------- output
def _plot(path_images, path_features, path_rd, image, main_vq, main_gvq, vq_runs, gvq_runs):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.ticker

    fig, axes = new_figure(1, 3, figsize=(15, 4.2))
    panels = [(image, f"original, {image.shape[0]}x{image.shape[1]}, "
                      f"{image.size * GREY_BITS / 1e3:.0f} kbit"),
              (main_vq["image"], f"VQ, K = {main_vq['K']}: {main_vq['psnr']:.2f} dB, "
                                 f"{main_vq['bits'] / 1e3:.1f} kbit"),
              (main_gvq["image"], f"GVQ, n = {main_gvq['n']} + origin: "
                                  f"{main_gvq['psnr']:.2f} dB, {main_gvq['bits'] / 1e3:.1f} kbit")]
    for ax, (picture, title) in zip(axes, panels, strict=True):
        ax.imshow(picture, cmap="gray", vmin=0, vmax=255, interpolation="nearest")
        ax.set_title(title, fontsize=9)
        ax.axis("off")
    save_figure(fig, path_images)

    features = main_gvq["features"]
    fig, axes = new_figure(1, len(features), figsize=(max(1.4 * len(features), 4.5), 2.1),
                           squeeze=False)
    for i, (ax, row) in enumerate(zip(axes[0], features, strict=True)):
        ax.imshow(row.reshape(SEGMENT, SEGMENT), cmap="gray", interpolation="nearest")
        ax.set_title("origin" if i == len(features) - 1 else f"f{i + 1}", fontsize=8)
        ax.axis("off")
    fig.suptitle("GVQ features (cf. paper Fig. 11)\neach tile scaled to its own range",
                 fontsize=9)
    save_figure(fig, path_features)

    fig, ax = new_figure(figsize=(7, 4.5))
    for runs, name, label_of, style in (
            (vq_runs, "VQ", lambda r: f"K={r['K']}", dict(marker="o", color="C0")),
            (gvq_runs, "GVQ", lambda r: f"n={r['n']}", dict(marker="s", color="C3"))):
        bits = np.array([r["bits"] for r in runs]) / 1e3
        ax.plot(bits, [r["psnr"] for r in runs], label=f"{name}, 8-bit entries, our bits",
                **style)
        ax.plot(np.array([r["paper_bits"] for r in runs]) / 1e3,
                [r["psnr_float"] for r in runs], ls="--", alpha=0.5, color=style["color"],
                label=f"{name}, float entries, paper's formula")
        for r, b in zip(runs, bits, strict=True):
            if r.get("n", r.get("K")) in (1, 2, 4, 8, 12, 16, 32, 64, 256):
                ax.annotate(label_of(r), (b, r["psnr"]), fontsize=6,
                            xytext=(3, -8 if name == "VQ" else 4), textcoords="offset points")
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("total bits (kbit, log scale)")
    ax.set_ylabel("PSNR (dB)")
    ax.set_title("china.jpg, 16x16 segments: PSNR against bits", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, path_rd)


def main(argv=None):
    """Run the comparison and the rate-distortion sweep; print, plot, write JSON.

    Returns
    -------
    dict
        ``settings``, ``image`` (shapes, P, n_p), ``vq`` and ``gvq`` (one dict per
        run, with ``psnr`` after quantisation, ``psnr_float`` before, ``bits``,
        ``paper_bits``, ``num_used``), ``main`` (the K = 16 and n = 8 runs, with
        the decoded images), ``paper`` (quoted and recomputed numbers),
        ``finding`` (:func:`compare_curves`) and ``paths`` of the files written.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="VQ K = 2..32, GVQ n = 1, 2, 4, 8, fewer restarts (a smoke test)")
    parser.add_argument("--output-dir", default="zoo-results", help="folder for PNGs and JSON")
    parser.add_argument("--seed", type=int, default=0, help="random seed (JAX key, KMeans)")
    parser.add_argument("--max-features", type=int, default=MAX_EXACT,
                        help=f"largest GVQ n of the sweep (exact up to {MAX_EXACT}, br+mf above)")
    parser.add_argument("--restarts", type=int, default=10,
                        help="GVQ EM restarts (as KMeans' n_init=10)")
    args = parser.parse_args(argv)
    if args.max_features < 1:
        parser.error(f"--max-features must be >= 1; got {args.max_features}")
    if args.restarts < 1:
        parser.error(f"--restarts must be >= 1; got {args.restarts}")
    total_start = time.perf_counter()
    main_k, main_n = PAPER["vq_codebook"], PAPER["gvq_features"]
    if args.quick:
        ks, ns, restarts, iterations = [2, 3, 4, 6, 8, 12, 16, 24, 32], [1, 2, 4, 8], 3, 50
    else:
        ks = [*range(2, 17), 20, 24, 32, 48, 64, 96, 128, 192, 256]
        ns = list(range(1, args.max_features + 1))
        restarts, iterations = args.restarts, 200
    ns = sorted({*ns, main_n})

    image, original_shape = load_image()
    x = to_segments(image)
    num_segments, segment_pixels = x.shape
    dropped = original_shape[0] - image.shape[0]
    print(f"china.jpg (scikit-learn), grey levels 0..255: {original_shape[0]}x{original_shape[1]}"
          f" cropped to {image.shape[0]}x{image.shape[1]} (bottom {dropped} rows dropped) = "
          f"P = {num_segments} segments of {SEGMENT}x{SEGMENT} "
          f"(n_p = {segment_pixels}); original {image.size * GREY_BITS / 1e3:.0f} kbit")

    def finish(run):
        run["image"] = from_segments(decode(run["recon"]), image.shape)
        run["psnr"] = psnr(image, run["image"])
        run["psnr_float"] = psnr(image, from_segments(decode(run["recon_float"]), image.shape))
        return run

    vq_runs = [finish(run_vq(x, k, seed=args.seed)) for k in ks]
    key = jax.random.key(args.seed)
    gvq_runs = []
    for n in ns:
        run = finish(run_gvq(jax.random.fold_in(key, n), x, n, num_restarts=restarts,
                             num_iterations=iterations))
        gvq_runs.append(run)
        for message in run["warnings"]:
            print(f"note: GVQ n = {n}: {message}")

    print(f"\nVQ: KMeans, k-means++, n_init=10. GVQ: fit_gvq(num_sets=1), {restarts} restarts, "
          f"<= {iterations} EM iterations, starts drawn from the data. Bits: 'ours' = 8-bit "
          "entries + range + indices (GVQ: n + 1 vectors); 'paper' = sec. 6.2.1's formula. "
          "PSNR after quantising to 8 bits (float entries in brackets).")
    print(f"{'model':>14s} {'N_used':>7s} {'paper kbit':>11s} {'ours kbit':>10s} "
          f"{'PSNR dB':>16s} {'seconds':>8s}")
    for run in vq_runs:
        print(f"{'VQ K=' + str(run['K']):>14s} {run['num_used']:7d} "
              f"{run['paper_bits'] / 1e3:11.2f} {run['bits'] / 1e3:10.2f} {run['psnr']:7.2f} "
              f"({run['psnr_float']:6.2f}) {run['seconds']:8.1f}")
    for run in gvq_runs:
        flag = "" if run["converged"] else " (EM not converged)"
        print(f"{'GVQ n=' + str(run['n']) + '+o':>14s} {run['num_used']:7d} "
              f"{run['paper_bits'] / 1e3:11.2f} {run['bits'] / 1e3:10.2f} {run['psnr']:7.2f} "
              f"({run['psnr_float']:6.2f}) {run['seconds']:8.1f}{flag}")

    # (1) The paper's comparison.
    main_vq = next(r for r in vq_runs if r["K"] == main_k)
    main_gvq = next(r for r in gvq_runs if r["n"] == main_n)
    paper_vq_formula = paper_vq_bits(main_k, PAPER["segment_pixels"], PAPER["segments"])
    paper_gvq_formula_max = paper_gvq_bits(main_n, 2**main_n, PAPER["segment_pixels"],
                                           PAPER["segments"])
    paper = {**PAPER,
             "original_kbit_from_size": PAPER["height"] * PAPER["width"] * GREY_BITS / 1e3,
             "vq_kbit_from_formula": paper_vq_formula / 1e3,
             "gvq_kbit_from_formula_max": paper_gvq_formula_max / 1e3}
    print(f"\nSec. 6.2, VQ with {main_k} codebook vectors vs GVQ with {main_n} features + origin "
          f"(2^{main_n} = {2**main_n} codebook vectors, {main_gvq['num_used']} used):")
    print(f"  {'':26s} {'VQ':>10s} {'GVQ':>10s} {'GVQ/VQ':>7s}")
    rows = [("paper, quoted (kbit)", PAPER["vq_kbit"], PAPER["gvq_kbit"]),
            ("paper's formula, its image*", paper_vq_formula / 1e3, paper_gvq_formula_max / 1e3),
            ("ours, paper's formula", main_vq["paper_bits"] / 1e3, main_gvq["paper_bits"] / 1e3),
            ("ours, n+1 vectors, 8-bit", main_vq["bits"] / 1e3, main_gvq["bits"] / 1e3)]
    for name, vq_value, gvq_value in rows:
        print(f"  {name:26s} {vq_value:10.2f} {gvq_value:10.2f} {gvq_value / vq_value:7.2f}")
    print(f"  * P = {PAPER['segments']}, n_p = {PAPER['segment_pixels']}, I_g = {GREY_BITS}; "
          f"GVQ with N_used = 2^{main_n} (its largest value; the paper does not give N_used)")
    n_plus_origin = paper_gvq_bits(main_n + 1, main_gvq["num_used"], segment_pixels,
                                   num_segments)
    print(f"  (ours, paper's formula counting the origin, n + 1 = {main_n + 1} vectors: "
          f"{n_plus_origin / 1e3:.2f} kbit)")
    print(f"  PSNR, 8-bit entries: VQ {main_vq['psnr']:.2f} dB, GVQ {main_gvq['psnr']:.2f} dB "
          f"(float entries: {main_vq['psnr_float']:.2f}, {main_gvq['psnr_float']:.2f}); the "
          "paper gives no PSNR, only 'GVQ visibly better'.")
    print(f"  Paper vs ours: the paper quotes {PAPER['vq_kbit']} vs {PAPER['gvq_kbit']} kbit "
          f"(GVQ {PAPER['gvq_kbit'] / PAPER['vq_kbit']:.2f} of VQ) and GVQ visibly better; here "
          f"GVQ needs {main_gvq['bits'] / main_vq['bits']:.2f} of VQ's bits (ours; "
          f"{main_gvq['paper_bits'] / main_vq['paper_bits']:.2f} by the paper's formula) at "
          f"{main_gvq['psnr'] - main_vq['psnr']:+.2f} dB PSNR. The paper's own totals do not "
          f"follow from its formula: with I_g = 8 its image gives {paper_vq_formula / 1e3:.1f} "
          f"kbit for VQ (quoted {PAPER['vq_kbit']}) and at most "
          f"{paper_gvq_formula_max / 1e3:.1f} kbit for GVQ, with all 2^{main_n} combinations "
          f"used (quoted {PAPER['gvq_kbit']}), and {PAPER['height']}x{PAPER['width']}"
          f" pixels at 8 bits are {paper['original_kbit_from_size']:.0f} kbit (quoted "
          f"{PAPER['original_kbit']}); so compare ratios, not totals. Our image has P = "
          f"{num_segments} segments against the paper's {PAPER['segments']}, so the vectors "
          "weigh relatively more here.")

    # (3) Rate-distortion.
    finding = compare_curves([(r["bits"], r["psnr"]) for r in vq_runs],
                             [(r["bits"], r["psnr"]) for r in gvq_runs])
    finding_paper = compare_curves([(r["paper_bits"], r["psnr_float"]) for r in vq_runs],
                                   [(r["paper_bits"], r["psnr_float"]) for r in gvq_runs])
    low, high = finding["range"]
    print(f"\nRate-distortion at equal bits (ours; each curve interpolated linearly in bits; "
          f"ties within {TIE_DB} dB):")
    vq_curve = sorted((r["bits"], r["psnr"]) for r in vq_runs)
    for run in gvq_runs:
        if vq_curve[0][0] <= run["bits"] <= vq_curve[-1][0]:
            other = float(np.interp(run["bits"], *zip(*vq_curve, strict=True)))
            print(f"  GVQ n={run['n']:2d}: {run['bits'] / 1e3:7.2f} kbit, {run['psnr']:6.2f} dB; "
                  f"VQ at these bits {other:6.2f} dB ({run['psnr'] - other:+.2f})")
    if math.isnan(finding["fraction_gvq"]):
        summary = "the two curves cover no common range of bits: no comparison"
    else:
        summary = (
            f"over the bits both curves cover, {low / 1e3:.1f}-{high / 1e3:.1f} kbit, GVQ is "
            f"above VQ on {100 * finding['fraction_gvq']:.0f}% of the range, tied on "
            f"{100 * finding['fraction_tie']:.0f}% ({_describe(finding['tie_intervals'])}) and "
            f"below on {100 * finding['fraction_vq']:.0f}% ({_describe(finding['vq_intervals'])});"
            f" GVQ - VQ from {finding['min_diff']:+.2f} to {finding['max_diff']:+.2f} dB. Above "
            f"{high / 1e3:.1f} kbit only VQ was measured (GVQ up to n = {max(ns)}, VQ up to "
            f"K = {max(ks)}: {vq_curve[-1][1]:.2f} dB at {vq_curve[-1][0] / 1e3:.0f} kbit)")
    print(f"  Finding: {summary}.")
    if not math.isnan(finding_paper["fraction_gvq"]):
        print(f"  With the paper's formula and float entries: GVQ above VQ on "
              f"{100 * finding_paper['fraction_gvq']:.0f}%, tied on "
              f"{100 * finding_paper['fraction_tie']:.0f}%, below on "
              f"{100 * finding_paper['fraction_vq']:.0f}% "
              f"({_describe(finding_paper['vq_intervals'])}) of "
              f"{finding_paper['range'][0] / 1e3:.1f}-{finding_paper['range'][1] / 1e3:.1f} kbit.")

    results = {
        "settings": {"quick": args.quick, "seed": args.seed, "restarts": restarts,
                     "iterations": iterations, "vq_n_init": 10,
                     "segment": SEGMENT, "grey_bits": GREY_BITS, "entry_bits": ENTRY_BITS,
                     "range_bits": RANGE_BITS, "tie_db": TIE_DB},
        "image": {"source": "sklearn.datasets.load_sample_image('china.jpg'), BT.601 luma",
                  "original_shape": list(original_shape), "cropped_shape": list(image.shape),
                  "segments": num_segments, "segment_pixels": segment_pixels},
        "vq": vq_runs, "gvq": gvq_runs, "main": {"vq": main_vq, "gvq": main_gvq},
        "paper": paper, "finding": finding, "finding_paper_formula": finding_paper,
        "finding_text": summary,
    }
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "gvq_compression.json"}
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print('matplotlib is not installed (pip install -e ".[examples]"): no figures')
    else:
        paths.update(images=out / "gvq_compression_images.png",
                     features=out / "gvq_compression_features.png",
                     rate_distortion=out / "gvq_compression_rate_distortion.png")
        _plot(paths["images"], paths["features"], paths["rate_distortion"], image, main_vq,
              main_gvq, vq_runs, gvq_runs)
    results["seconds"] = time.perf_counter() - total_start
    record = jsonable(results)
    record["gvq_features_main"] = np.round(main_gvq["features"], 4).tolist()
    paths["json"].write_text(json.dumps(record, indent=1))
    results["paths"] = paths
    for path in paths.values():
        print(f"wrote {path}")
    print(f"total {results['seconds']:.1f} s")
    return results


if __name__ == "__main__":
    main()
