"""Translation-invariant bumps on a ring: Lee and Sompolinsky (1999), Fig. 3.
==========================================================================

**Set-up (the paper's).** N = 256 spins on a ring with periodic boundaries; in
each pattern one contiguous bump of N/2 = 128 spins is +1 and the rest -1, the
bump's position uniform over the ring. The paper computes C_ss = <s_a s_b>,
maps it to C_xx = sin(pi C_ss / 2) (eq. 7) and diagonalises both: C_ss has N/2
positive eigenvalues spread over a wide range, C_xx has two positive ones
(eigenvectors a cosine and a sine) and the rest exactly zero, so P = 2 hidden
units generate the distribution: y picks the phase of a sinusoid, clipping it
gives the bump.

**What this script does.**

* *Exact distribution:* the N shifted patterns, each with weight 1/N (the
  distribution itself, not a sample). Closed forms to check against: C_ss_ab =
  1 - 4 d / N with d the ring distance of a and b (a triangle wave), so C_xx_ab =
  sin(pi/2 - 2 pi d / N) = cos(2 pi d / N), exactly rank 2; C_ss is circulant, its
  eigenvalues are the Fourier coefficients of the triangle wave, 4 / (N sin^2(pi k / N))
  for odd k and 0 for even k: N/2 positive ones.
* *Fit:* :func:`inference.clipped.fit.fit_clipped_gaussian` with ``bias=False``
  and P = 2. *(choice)* No biases: every unit is +1 in exactly half of the
  patterns (<s_a> = 0), so eq. 9 gives xi = 0 anyway, and the zero-bias model is
  the one the paper fits here (eq. 7; fitting biases to a sample would only add
  sampling noise to xi).
* *Checks:* the number of eigenvalues of C_xx above 1e-6 of the largest (the
  paper: 2), the number of positive eigenvalues of C_ss (the paper: N/2), how well
  each leading eigenvector of C_xx is fitted by cos and sin of 2 pi a / N (R^2),
  the moments of the fitted model (eq. 7 applied to W W^T) against the data's,
  and patterns drawn from the fitted model
  (``ppl_models.clipped_gaussian.generate(..., weights=fit.weights, bias=0.0)``,
  the deterministic clip): per pattern the number of contiguous runs of +1 (one
  bump: 1), its width (N/2) and its start, whose histogram is tested (chi-square)
  against the position distribution the model should reproduce.
* *Sampling:* the same for a sample of :data:`NUM_SAMPLED` random bumps
  (``ring_bumps``) and, smaller, 20 and 200. *(finding)* Sampling does not break
  the rank 2: for bumps of width exactly N/2 *any* distribution of positions
  gives C_xx_ab = cos(pi (G(b) - G(a))), with G(a) = F(a) + F(a - N/2) built from
  the cumulative distribution F of the bump starts, a rank-2 matrix. What
  sampling changes: the two eigenvalues become unequal, the eigenvectors are cos
  and sin of a warped phase pi G(a) instead of 2 pi a / N, and the fitted model
  generates bumps of width N/2 whose starts follow the sample's histogram made
  symmetric under a shift by N/2 (a bump starting at k and at k + N/2 are s and
  -s, which no second moment tells apart).
* *Contrast (ours):* the exact distribution of bumps of width N/4. C_xx is then
  not low-rank and has negative eigenvalues (no clipped Gaussian fits): the
  paper's rank 2 needs the width N/2.

**Measured** (seed 0, full run; eigenvalues in float64): exact distribution --
C_ss has 128 positive eigenvalues (paper: N/2 = 128), from 103.76 down to
0.0156, the other 128 zero to rounding (the spectrum matches the closed form to
1.4e-12); C_xx has exactly 2 eigenvalues above 1e-6 of the largest (paper: 2),
both 128 (= N/2), the other 254 below 4e-14 in magnitude, and C_xx equals
cos(2 pi d / N) to 3e-8 (the float32 matrix the fit returns). The two leading
eigenvectors are fitted by cos / sin(2 pi a / N) with R^2 = 1 to 1e-15, at phases
90 degrees apart. The P = 2 model's moments match the data's to 3e-8; all 20000
patterns drawn from it are one bump of width exactly 128, with uniform starts
(chi-square p = 0.29). Sample of 2000 bumps: C_ss again has 128 positive
eigenvalues and C_xx exactly 2 above 1e-6 of the largest, now 129.95 and 126.05
(the next 8e-7, from the float32 C_ss), eigenvectors fitted by cos / sin with
R^2 = 0.99969 and 0.99990; the model matches the sample's moments to 1e-7 and
generates single bumps of width 128 whose starts follow the sample's symmetrised
histogram (p = 0.40). With 20 and 200 bumps: 18 and 100 positive C_ss
eigenvalues, still 2 for C_xx (175.8 / 80.2 and 133.5 / 122.6; R^2 down to 0.95
and 0.997). Width N/4: 67 C_xx eigenvalues above 1e-6 of the largest, 63 of
them negative, the smallest -5.44 (the fit warns). The paper's Fig. 3 claims
are reproduced exactly; the paper gives no numbers beyond the counts.

Run: ``python examples/clipped_bumps.py [--quick] [--output-dir DIR] [--seed S]``
(about 15 s on 2 CPU cores; ``--quick`` skips the sweep over sample sizes and
the width-N/4 contrast and draws 5000 model patterns instead of 20000, about 8 s). Writes
``clipped_bumps_spectra.png`` (Fig. 3: spectra of C_ss and C_xx against rank,
log-log, exact and sampled), ``clipped_bumps_patterns.png`` (patterns of the data
and of the fitted model, and the two leading eigenvectors of C_xx against cos and
sin) and ``clipped_bumps.json`` into ``--output-dir`` (default ``zoo-results``).

References
----------
D. D. Lee and H. Sompolinsky, "Learning a continuous hidden variable model for binary
data", Advances in Neural Information Processing Systems 11 (NIPS 1998), 1999: eq. 7,
"Translationally Invariant Example", Fig. 3.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import jax
import numpy as np

from inference.clipped.fit import fit_clipped_gaussian
from inference.engine.figures import new_figure, save_figure
from inference.engine.reporting import jsonable
from ppl_models.clipped_gaussian import generate, ring_bumps
from ppl_models.diagnostics import ZooWarning

#: The paper's ring: N = 256 spins, a bump of N/2.
NUM_UNITS = 256
#: P = 2 hidden units (the paper: C_xx has two positive eigenvalues).
NUM_HIDDEN = 2
#: *(choice)* Size of the sampled data set (bumps at random positions).
NUM_SAMPLED = 2000
#: *(choice)* Smaller samples in the sweep over sample sizes.
SWEEP_SIZES = (20, 200)
#: *(choice)* Patterns drawn from each fitted model (full run / --quick).
NUM_MODEL_PATTERNS = 20000
NUM_MODEL_PATTERNS_QUICK = 5000
#: *(choice)* An eigenvalue counts as positive when it exceeds this fraction of the largest.
RELATIVE_CUTOFF = 1e-6
#: Eigenvalues below this fraction of the largest are rounding (float64 eigh of 256 x 256).
ROUNDING = 1e-12
#: The paper's numbers for N = 256.
PAPER = {"num_units": 256, "bump_width": 128, "css_positive": 128, "cxx_positive": 2}


# --------------------------------------------------------------------------- data
def exact_bumps(num_units=NUM_UNITS, width=None):
    """The exact distribution: all N bumps, row k starting at unit k (equal weights).

    Same convention as ``ring_bumps``: unit a is +1 when (a - k) mod N < width
    (default N/2). Returns a float32 array (N, N) of -1 / +1.
    """
    width = num_units // 2 if width is None else width
    units = np.arange(num_units)
    offset = (units[None, :] - units[:, None]) % num_units
    return np.where(offset < width, 1.0, -1.0).astype(np.float32)


def ring_distance(num_units=NUM_UNITS):
    """d_ab = min(|a - b|, N - |a - b|), (N, N) ints."""
    units = np.arange(num_units)
    diff = np.abs(units[:, None] - units[None, :])
    return np.minimum(diff, num_units - diff)


def closed_form_css_eigenvalues(num_units=NUM_UNITS):
    """Eigenvalues of the exact C_ss, descending: 4 / (N sin^2(pi k / N)) for odd k, else 0."""
    k = np.arange(num_units)
    values = np.zeros(num_units)
    odd = k % 2 == 1
    values[odd] = 4.0 / (num_units * np.sin(np.pi * k[odd] / num_units) ** 2)
    return np.sort(values)[::-1]


# ------------------------------------------------------------------- measures
def fit_recording(s, num_hidden=NUM_HIDDEN, **kwargs):
    """``fit_clipped_gaussian(s, num_hidden, bias=False, **kwargs)`` and its project warnings.

    Returns ``(fit, messages)``: the zoo's warnings (negative eigenvalues) are
    recorded and returned as text; any other warning is passed on.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ZooWarning)
        fit = fit_clipped_gaussian(s, num_hidden, bias=False, **kwargs)
    for item in caught:
        if not issubclass(item.category, ZooWarning):
            warnings.showwarning(item.message, item.category, item.filename, item.lineno)
    return fit, [str(item.message) for item in caught if issubclass(item.category, ZooWarning)]


def count_above(eigenvalues, fraction):
    """How many eigenvalues exceed ``fraction`` times the largest |eigenvalue|."""
    values = np.asarray(eigenvalues, np.float64)
    return int(np.sum(values > fraction * np.max(np.abs(values))))


def fourier_fit(vector):
    """Least-squares fit of a (N,) vector by c cos(2 pi a / N) + d sin(2 pi a / N).

    Returns ``(r_squared, phase_degrees)``: the fraction of the vector's squared
    norm the fit explains, and atan2(d, c) (the vector is ~ cos(2 pi a / N - phase)).
    """
    vector = np.asarray(vector, np.float64)
    angle = 2.0 * np.pi * np.arange(vector.size) / vector.size
    basis = np.stack([np.cos(angle), np.sin(angle)], axis=1)
    coef, *_ = np.linalg.lstsq(basis, vector, rcond=None)
    residual = vector - basis @ coef
    return 1.0 - float(residual @ residual / (vector @ vector)), float(
        np.degrees(np.arctan2(coef[1], coef[0])))


def arcsine_moments(weights):
    """<s_a s_b> of the zero-bias model s = sign(W y): (2/pi) arcsin of the correlations of W W^T.

    Eq. 7 of the paper, in float64 (what ``model_moments`` gives for zero biases,
    without its compilation for a new N, which costs seconds).
    """
    cov = np.asarray(weights, np.float64) @ np.asarray(weights, np.float64).T
    sd = np.sqrt(np.diag(cov))
    return 2.0 / np.pi * np.arcsin(np.clip(cov / np.outer(sd, sd), -1.0, 1.0))


def bump_structure(s):
    """Per pattern: number of contiguous runs of +1 on the ring, +1 count, start of the run.

    The start is the unit a with s_a = +1 and s_{a-1} = -1 (periodic), -1 unless
    the pattern has exactly one run.
    """
    up = np.asarray(s) > 0
    rises = up & ~np.roll(up, 1, axis=1)
    runs = rises.sum(axis=1)
    start = np.where(runs == 1, np.argmax(rises, axis=1), -1)
    return runs, up.sum(axis=1), start


def symmetrised_start_distribution(s):
    """The start distribution a P = 2 model of these bumps reproduces: (f(k) + f(k + N/2)) / 2.

    f is the empirical distribution of the starts of the (single-run) patterns ``s``.
    """
    _, _, start = bump_structure(s)
    num_units = np.asarray(s).shape[1]
    f = np.bincount(start[start >= 0], minlength=num_units) / np.sum(start >= 0)
    return 0.5 * (f + np.roll(f, -(num_units // 2)))


def start_test(starts, expected):
    """Chi-square test of the observed starts against the distribution ``expected`` (N,).

    Returns a dict: ``p_value`` (over positions with expected > 0),
    ``outside`` (starts where ``expected`` is 0) and ``num_positions`` used.
    """
    from scipy import stats

    counts = np.bincount(starts[starts >= 0], minlength=expected.size).astype(np.float64)
    support = expected > 0
    total = counts[support].sum()
    p_value = float(stats.chisquare(counts[support],
                                    expected[support] / expected[support].sum() * total).pvalue)
    return {"p_value": p_value, "outside": int(counts[~support].sum()),
            "num_positions": int(support.sum())}


def analyse(rng_key, s, num_model_patterns, expected_starts):
    """Fit P = 2 without biases, and measure spectra, eigenvectors, moments and model samples.

    Returns a dict of numbers (arrays: ``css_eigenvalues``, ``cxx_eigenvalues``,
    ``weights``, ``binary_corr``, ``gaussian_corr``, ``model_patterns``).
    """
    fit, messages = fit_recording(s)
    cxx = np.asarray(fit.eigenvalues, np.float64)
    css = np.sort(np.linalg.eigvalsh(np.asarray(fit.binary_corr, np.float64)))[::-1]
    weights = np.asarray(fit.weights, np.float64)
    moment_gap = float(np.max(np.abs(arcsine_moments(weights)
                                      - np.asarray(fit.binary_corr, np.float64))))
    fourier = [fourier_fit(weights[:, j]) for j in range(NUM_HIDDEN)]
    drawn = np.asarray(generate(rng_key, num_model_patterns, weights=fit.weights, bias=0.0).s)
    runs, widths, starts = bump_structure(drawn)
    return {
        "num_patterns": int(np.asarray(s).shape[0]),
        "warnings": messages,
        "has_negative_eigenvalues": fit.has_negative_eigenvalues,
        "min_eigenvalue": fit.min_eigenvalue,
        "css_eigenvalues": css,
        "cxx_eigenvalues": cxx,
        "css_positive": count_above(css, ROUNDING),
        "css_largest": float(css[0]),
        "css_smallest_positive": float(css[count_above(css, ROUNDING) - 1]),
        "cxx_above_cutoff": count_above(cxx, RELATIVE_CUTOFF),
        "cxx_leading": cxx[:3].tolist(),
        "cxx_rest_max_abs": float(np.max(np.abs(cxx[NUM_HIDDEN:]))),
        "fourier_r2": [r for r, _ in fourier],
        "fourier_phase": [p for _, p in fourier],
        "moment_gap": moment_gap,
        "weights": weights,
        "binary_corr": np.asarray(fit.binary_corr, np.float64),
        "gaussian_corr": np.asarray(fit.gaussian_corr, np.float64),
        "model_patterns": drawn[:12],
        "model_runs": np.bincount(runs).tolist(),
        "model_single_bump_fraction": float(np.mean(runs == 1)),
        "model_widths": (int(widths.min()), int(widths.max())),
        "model_starts": start_test(starts, expected_starts),
    }


# ------------------------------------------------------------------------ main
def _print_analysis(name, r):
    n = NUM_UNITS
    print(f"  C_ss: {r['css_positive']} positive eigenvalues (paper: N/2 = {n // 2}), from "
          f"{r['css_largest']:.2f} down to {r['css_smallest_positive']:.4g}")
    print(f"  C_xx = sin(pi C_ss / 2): {r['cxx_above_cutoff']} eigenvalues above "
          f"{RELATIVE_CUTOFF:g} of the largest (paper: 2): "
          f"{', '.join(f'{v:.6g}' for v in r['cxx_leading'])} ...; all but the leading "
          f"{NUM_HIDDEN} below {r['cxx_rest_max_abs']:.2g} in magnitude")
    r2, phase = r["fourier_r2"], r["fourier_phase"]
    apart = (phase[1] - phase[0]) % 360.0
    print(f"  leading eigenvectors of C_xx vs cos/sin(2 pi a / N): R^2 = {r2[0]:.6f}, "
          f"{r2[1]:.6f} (1 = a pure sinusoid); phases {phase[0]:.1f} and {phase[1]:.1f} deg, "
          f"{min(apart, 360.0 - apart):.1f} deg apart (90: a cosine and a sine)")
    print(f"  fitted P = 2 model: moments <s_a s_b> (eq. 7 from W W^T) within "
          f"{r['moment_gap']:.2g} of the {name}'s")
    starts = r["model_starts"]
    low, high = r["model_widths"]
    print(f"  model patterns: {100 * r['model_single_bump_fraction']:.2f}% are one contiguous "
          f"bump, of width {low}" + (f"..{high}" if high != low else "")
          + f" (N/2 = {n // 2}); starts against the {name}'s position distribution: "
          f"chi-square p = {starts['p_value']:.3f} over {starts['num_positions']} positions, "
          f"{starts['outside']} outside them")
    for message in r["warnings"]:
        print(f"  note: {message}")


def main(argv=None):
    """Fit the bumps (exact and sampled), print the checks against the paper, save figures/JSON.

    Returns
    -------
    dict
        ``settings``; ``closed_form`` (deviations of C_ss, C_xx and the C_ss
        spectrum from their closed forms); ``exact`` and ``sampled`` (:func:`analyse`);
        ``sweep`` (sample size -> analyse, full run only); ``width_quarter`` (the
        width-N/4 contrast, full run only); ``paper``; ``paths``; ``seconds``.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="no sample-size sweep or width contrast, fewer model patterns")
    parser.add_argument("--output-dir", default="zoo-results", help="folder for PNGs and JSON")
    parser.add_argument("--seed", type=int, default=0, help="random seed (JAX key)")
    args = parser.parse_args(argv)
    total_start = time.perf_counter()
    n = NUM_UNITS
    num_model = NUM_MODEL_PATTERNS_QUICK if args.quick else NUM_MODEL_PATTERNS
    key_sample, key_exact, key_model, key_sweep = jax.random.split(jax.random.key(args.seed), 4)
    print(f"Translation-invariant bumps (paper, Fig. 3): N = {n} spins on a ring, one bump of "
          f"N/2 = {n // 2} +1 spins; zero-bias fit (<s_a> = 0), P = {NUM_HIDDEN}")

    exact = exact_bumps(n)
    print(f"\nExact distribution (all {n} positions, weight 1/{n} each):")
    result_exact = analyse(key_exact, exact, num_model, np.full(n, 1.0 / n))
    d = ring_distance(n)
    closed = {
        "css_max_dev": float(np.max(np.abs(result_exact["binary_corr"] - (1.0 - 4.0 * d / n)))),
        "cxx_max_dev": float(np.max(np.abs(result_exact["gaussian_corr"]
                                           - np.cos(2.0 * np.pi * d / n)))),
        "css_spectrum_max_dev": float(np.max(np.abs(result_exact["css_eigenvalues"]
                                                    - closed_form_css_eigenvalues(n)))),
    }
    print(f"  closed forms: C_ss = 1 - 4d/N to {closed['css_max_dev']:.2g}, C_xx = cos(2 pi d/N) "
          f"to {closed['cxx_max_dev']:.2g}, C_ss spectrum = 4/(N sin^2(pi k/N)) (odd k), 0 (even "
          f"k) to {closed['css_spectrum_max_dev']:.2g}")
    _print_analysis("exact distribution", result_exact)

    sample = np.asarray(ring_bumps(key_sample, NUM_SAMPLED, n))
    print(f"\nSampled data set ({NUM_SAMPLED} bumps at uniformly random positions):")
    result_sampled = analyse(key_model, sample, num_model, symmetrised_start_distribution(sample))
    _print_analysis("sample", result_sampled)
    lead = result_sampled["cxx_leading"]
    print(f"  -> sampling keeps C_xx of rank 2 (a bump of width N/2 at any mix of positions is "
          f"a clipped phase-shifted sinusoid) but splits its two eigenvalues ({lead[0]:.2f} vs "
          f"{lead[1]:.2f}; exact {n // 2}, {n // 2}) and warps the sinusoids; the model "
          "copies the sample's position histogram, symmetrised under a shift by N/2")

    sweep, quarter = {}, None
    if not args.quick:
        print("\nSmaller samples (same checks):")
        for size, key in zip(SWEEP_SIZES, jax.random.split(key_sweep, len(SWEEP_SIZES)),
                             strict=True):
            key_data, key_draw = jax.random.split(key)
            data = np.asarray(ring_bumps(key_data, size, n))
            r = analyse(key_draw, data, num_model, symmetrised_start_distribution(data))
            sweep[size] = r
            print(f"  {size:5d} bumps: C_ss {r['css_positive']} positive eigenvalues, C_xx "
                  f"{r['cxx_above_cutoff']} above {RELATIVE_CUTOFF:g} ({r['cxx_leading'][0]:.2f},"
                  f" {r['cxx_leading'][1]:.2f}), R^2 of cos/sin {r['fourier_r2'][0]:.4f}, "
                  f"{r['fourier_r2'][1]:.4f}; model: {100 * r['model_single_bump_fraction']:.1f}%"
                  f" single bumps of width {r['model_widths'][0]}..{r['model_widths'][1]}, "
                  f"starts p = {r['model_starts']['p_value']:.2f}")
        fit_quarter, messages = fit_recording(exact_bumps(n, n // 4))
        values = np.asarray(fit_quarter.eigenvalues, np.float64)
        quarter = {"width": n // 4, "cxx_above_cutoff": count_above(values, RELATIVE_CUTOFF),
                   "num_negative": int(np.sum(values < -RELATIVE_CUTOFF * values[0])),
                   "min_eigenvalue": fit_quarter.min_eigenvalue, "warnings": messages,
                   "cxx_eigenvalues": values}
        print(f"\nContrast (ours): exact distribution of bumps of width N/4 = {n // 4}: C_xx has "
              f"{quarter['cxx_above_cutoff']} eigenvalues above {RELATIVE_CUTOFF:g} of the "
              f"largest, {quarter['num_negative']} negative (smallest "
              f"{quarter['min_eigenvalue']:.3g}): not rank 2 and not a clipped Gaussian at all"
              f"{' (the fit warned)' if messages else ''}")

    ok = (result_exact["cxx_above_cutoff"] == PAPER["cxx_positive"]
          and result_exact["css_positive"] == PAPER["css_positive"])
    print(f"\nPaper vs ours (exact distribution): C_xx eigenvalues above {RELATIVE_CUTOFF:g} of "
          f"the largest {result_exact['cxx_above_cutoff']} (paper 2), positive C_ss eigenvalues "
          f"{result_exact['css_positive']} (paper N/2 = {n // 2}), eigenvectors cos/sin "
          f"(R^2 {min(result_exact['fourier_r2']):.6f}), model patterns single bumps of width "
          f"{result_exact['model_widths'][0]}: {'reproduced' if ok else 'NOT reproduced'}")

    results = {
        "settings": {"quick": args.quick, "seed": args.seed, "num_units": n,
                     "num_hidden": NUM_HIDDEN, "num_sampled": NUM_SAMPLED,
                     "num_model_patterns": num_model, "relative_cutoff": RELATIVE_CUTOFF,
                     "rounding": ROUNDING},
        "closed_form": closed, "exact": result_exact, "sampled": result_sampled,
        "sweep": sweep, "width_quarter": quarter, "paper": PAPER, "reproduced": ok,
    }
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "clipped_bumps.json"}
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print('matplotlib is not installed (pip install -e ".[examples]"): no figures')
    else:
        paths.update(spectra=out / "clipped_bumps_spectra.png",
                     patterns=out / "clipped_bumps_patterns.png")
        _plot(paths, exact, sample, result_exact, result_sampled)
    results["seconds"] = time.perf_counter() - total_start
    record = jsonable(results)
    for name in ("exact", "sampled"):
        record[name]["cxx_eigenvalues_top10"] = results[name]["cxx_eigenvalues"][:10].tolist()
    paths["json"].write_text(json.dumps(record, indent=1))
    results["paths"] = paths
    for path in paths.values():
        print(f"wrote {path}")
    print(f"total {results['seconds']:.1f} s")
    return results


def _plot(paths, exact, sample, result_exact, result_sampled):
    import matplotlib

    matplotlib.use("Agg")

    n = NUM_UNITS
    fig, ax = new_figure(figsize=(6.0, 4.5))
    rank = np.arange(1, n + 1)
    for r, style, label in ((result_exact, "-", "exact"), (result_sampled, ":", "sampled")):
        for key, color, name in (("css_eigenvalues", "tab:blue", "C_ss"),
                                 ("cxx_eigenvalues", "tab:red", "C_xx")):
            values = r[key]
            floor = ROUNDING * np.max(np.abs(values))
            ax.loglog(rank, np.maximum(values, floor), style, color=color, marker=".",
                      markersize=3, label=f"{name}, {label} ({r['num_patterns']} patterns)")
    ax.set_xlabel("eigenvalue rank")
    ax.set_ylabel("eigenvalue")
    ax.text(0.02, 0.03, "values below 1e-12 of the largest are drawn at that floor",
            transform=ax.transAxes, fontsize=7)
    ax.set_title(f"Bumps on a ring, N = {n} (cf. paper Fig. 3)", fontsize=10)
    ax.legend(fontsize=7)
    save_figure(fig, paths["spectra"])

    fig, axes = new_figure(1, 3, figsize=(13.0, 3.8), width_ratios=[1.0, 1.1, 1.1])
    shown = [("exact distribution", exact[:: n // 12][:12]), ("sampled bumps", sample[:12]),
             ("drawn from the fitted P = 2 model", result_exact["model_patterns"])]
    stacked = np.concatenate([np.vstack([block, np.zeros((1, n))]) for _, block in shown])
    axes[0].imshow(stacked, cmap="gray", aspect="auto", interpolation="nearest", vmin=-1, vmax=1)
    axes[0].set_yticks([6, 19, 32], [name for name, _ in shown], fontsize=7)
    axes[0].set_xlabel("unit a")
    axes[0].set_title("patterns (white +1, black -1)", fontsize=9)
    angle = 2.0 * np.pi * np.arange(n) / n
    for ax, r, name in ((axes[1], result_exact, "exact"), (axes[2], result_sampled, "sampled")):
        w = r["weights"]
        for j, color in zip(range(NUM_HIDDEN), ("tab:red", "tab:blue"), strict=True):
            u = w[:, j] / np.linalg.norm(w[:, j])
            phase = np.radians(r["fourier_phase"][j])
            ax.plot(u, color=color, label=f"eigenvector {j + 1} (R^2 {r['fourier_r2'][j]:.5f})")
            ax.plot(np.sqrt(2.0 / n) * np.cos(angle - phase), "k:", linewidth=0.8,
                    label="cosine fit" if j == 0 else None)
        ax.set_title(f"leading eigenvectors of C_xx, {name}", fontsize=9)
        ax.set_xlabel("unit a")
        ax.set_ylabel("component (unit norm)")
        ax.legend(fontsize=7)
    save_figure(fig, paths["patterns"])


if __name__ == "__main__":
    main()
