"""How many patterns a clipped Gaussian generates: the entropy claim of Lee and Sompolinsky (1999).
================================================================================================

**The paper's claim.** Each unit's sign changes on the hyperplane x_a = W_a y = 0
in the P-dimensional space of hidden causes; the N hyperplanes cut that space
into cells, one pattern per cell, "approximately N^P" of them for N >> P (Cover
1965), so the patterns have entropy S = P log N to leading order.

**What is counted.** W has rows of unit norm in random directions
(``ppl_models.clipped_gaussian.generate``'s default; one W per P, and the
patterns for smaller N use its first N rows, so the arrangements are nested).
Two variants:

* *zero bias* (x = W y, the model of the paper's argument): the hyperplanes all
  pass through the origin. N such hyperplanes in general position in R^P cut it
  into C(N, P) = 2 sum_{i < P} binom(N - 1, i) cells (Cover's function counting
  theorem): 2, 2N and N^2 - N + 2 for P = 1, 2, 3, i.e. about 2 N^(P-1) / (P-1)!.
* *with biases* (x = W y + xi, xi ~ Normal(0, 1/2), ``generate``'s default; the
  model the paper fits to digits): affine hyperplanes in general position make
  sum_{i <= P} binom(N, i) cells (Buck 1943; = C(N + 1, P + 1) / 2), about N^P / P!.

Each count is obtained three ways: the formula; an exact enumeration of the
cells of the drawn W (every cell of an arrangement in general position is a
pointed cone or polyhedron and so has a vertex: a ray where P - 1 central
hyperplanes meet, or a point where P affine ones meet; the 2^(P-1) or 2^P sign
choices of the hyperplanes through each vertex give the patterns of the cells
around it, and the distinct ones are all cells; vertices within
:data:`DEGENERATE_TOL` of another hyperplane would break this and are counted);
and the number of distinct patterns among M samples of the program
(``generate``, the deterministic clip), which undercounts cells too small to be
hit. For zero bias and P = 2 the cells are arcs of the circle, so the expected
number of distinct patterns among M samples, sum_cells 1 - (1 - p)^M, and the
Shannon entropy -sum p log p are exact; they check the sampling. The plug-in
entropy of the samples is reported too (a lower estimate: unseen cells are
missing). Slopes are least-squares fits of log(count) against log N over the
three largest N, next to the asymptotic slope.

**Finding.** With zero bias the count grows like N^(P-1), not N^P: slopes -> 0,
1, 2 for P = 1, 2, 3, and S ~ (P - 1) log N. The paper's N^P (S = P log N) is
the count for hyperplanes in general position that do *not* pass through the
origin, i.e. the model with biases, where the slopes approach 1, 2, 3. Either
way each hidden unit adds one log N to the entropy, as the paper says; what the
biases change is the offset.

**Measured** (full run, seed 0, N = 8 ... 256, M = 2^20 samples per P and
variant): the exact enumeration equals the formula for every (N, P) where it
ran (all of them except P = 3 with biases at N = 256, 2.8 million cells), with
no degenerate vertex. Zero bias: P = 1 gives 2 patterns at every N; for P = 2
the samples hit all 2N arcs at every N (expected 511.9 +- 0.3 of 512 at
N = 256), and the plug-in entropy equals the exact -sum p log p to 1e-3 (5.864
nats at N = 256, against log 512 = 6.238 for uniform cells); for P = 3 the
samples find 58 of 58 cells at N = 8 but 50279 of 65282 at N = 256. Slopes over
N = 64..256 for P = 1, 2, 3: formula 0.00, 1.00, 2.01, sampled 0.00, 1.00, 1.87
(asymptote P - 1). With biases: formula 0.99, 1.99, 3.00, sampled 0.99, 1.89,
2.14 (asymptote P); the Gaussian rarely reaches the cells far from the origin
(P = 3, N = 256: 383722 of 2796417 found), so sampling hides more of the growth.
Plug-in entropy slopes: 0.00, 0.99, 2.03 (zero bias) and 0.84, 1.98, 2.80 (with
biases). So the paper's S = P log N holds for the model with biases; with zero
bias it is (P - 1) log N.

Run: ``python examples/clipped_entropy.py [--quick] [--output-dir DIR] [--seed S]``
(full: N = 8 ... 256, 2^20 samples, about 1 minute of CPU time, 2 minutes on a
busy 2-core machine; ``--quick``: N = 8 ... 64, 2^16 samples, about 7 s).
Writes ``clipped_entropy.png`` (log count against log N, formula, exact and
sampled, both variants) and ``clipped_entropy.json`` into ``--output-dir``
(default ``zoo-results``).

References
----------
D. D. Lee and H. Sompolinsky, "Learning a continuous hidden variable model for binary
data", Advances in Neural Information Processing Systems 11 (NIPS 1998), 1999,
section "Generative Model" (the entropy argument, Fig. 2).
T. M. Cover, "Geometrical and statistical properties of systems of linear inequalities
with applications in pattern recognition", IEEE Transactions on Electronic Computers
EC-14(3), 1965.
R. C. Buck, "Partition of space", The American Mathematical Monthly 50(9), 1943.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time
from pathlib import Path

import jax
import numpy as np

from inference.engine.figures import new_figure, save_figure
from inference.engine.reporting import jsonable
from ppl_models.clipped_gaussian import generate

#: Numbers of hidden causes P.
HIDDEN = (1, 2, 3)
#: N of the full run and of --quick.
SIZES = (8, 16, 32, 64, 128, 256)
SIZES_QUICK = (8, 16, 32, 64)
#: *(choice)* Samples per (P, variant): 2^20 (full) / 2^16 (--quick), drawn in batches.
NUM_SAMPLES = 2**20
NUM_SAMPLES_QUICK = 2**16
BATCH = 2**17
#: Exact enumeration is skipped when it would build more candidate patterns than this.
MAX_ENUMERATED = 2**22
#: A vertex closer than this to a further hyperplane (|x_c| with unit-norm rows) is degenerate.
DEGENERATE_TOL = 1e-9
#: Slopes are fitted over the largest this many N.
SLOPE_POINTS = 3
VARIANTS = ("zero bias", "with biases")


# ------------------------------------------------------------------- formulas
def cover_count(num_units, num_hidden):
    """Cells of N central hyperplanes in general position in R^P: 2 sum_{i<P} binom(N-1, i)."""
    return 2 * sum(math.comb(num_units - 1, i) for i in range(num_hidden))


def affine_count(num_units, num_hidden):
    """Cells of N affine hyperplanes in general position in R^P: sum_{i<=P} binom(N, i)."""
    return sum(math.comb(num_units, i) for i in range(num_hidden + 1))


def formula_count(num_units, num_hidden, variant):
    """:func:`cover_count` for ``"zero bias"``, :func:`affine_count` for ``"with biases"``."""
    return (cover_count if variant == VARIANTS[0] else affine_count)(num_units, num_hidden)


def asymptotic_slope(num_hidden, variant):
    """d log(count) / d log N for N -> infinity: P - 1 (zero bias) or P (with biases)."""
    return num_hidden - 1 if variant == VARIANTS[0] else num_hidden


def slope(sizes, counts, points=SLOPE_POINTS, *, logarithm=True):
    """Least-squares slope of log(count) against log(N) over the last ``points`` sizes.

    ``logarithm=False`` takes ``counts`` as logarithms already (entropies).
    """
    x = np.log(np.asarray(sizes[-points:], np.float64))
    y = np.asarray(counts[-points:], np.float64)
    fitted = float(np.polyfit(x, np.log(y) if logarithm else y, 1)[0])
    return fitted if abs(fitted) > 1e-9 else 0.0


# ----------------------------------------------------------------- patterns
def _as_keys(up):
    """Rows of a boolean (M, N) array as hashable fixed-width byte strings (numpy void)."""
    packed = np.ascontiguousarray(np.packbits(up, axis=1))
    return packed.view(np.dtype((np.void, packed.shape[1]))).ravel()


def _merge(keys, counts, new_keys, new_counts):
    """Union of two (distinct keys, counts) tables, counts added."""
    if keys is None:
        return new_keys, new_counts
    merged, inverse = np.unique(np.concatenate([keys, new_keys]), return_inverse=True)
    return merged, np.bincount(inverse, weights=np.concatenate([counts, new_counts]))


def enumerate_cells(weights, bias=None, *, max_candidates=MAX_ENUMERATED, chunk=4096):
    """Count the cells of the arrangement {y : W_a y + xi_a = 0} exactly, from its vertices.

    Parameters
    ----------
    weights : array (N, P)
    bias : array (N,), optional
        ``None`` (or all zero): central hyperplanes, vertices are the rays where
        P - 1 of them meet; otherwise vertices are the points where P meet.
    max_candidates : int
        Give up (return ``None``) when the vertices times their 2^k sign choices
        exceed this.

    Returns
    -------
    dict or None
        ``cells`` (distinct patterns of the cells around all vertices),
        ``vertices`` and ``degenerate`` (vertices within :data:`DEGENERATE_TOL` of a
        further hyperplane; 0 in general position).
    """
    w = np.asarray(weights, np.float64)
    num_units, num_hidden = w.shape
    central = bias is None or not np.any(np.asarray(bias))
    b = np.zeros(num_units) if central else np.asarray(bias, np.float64)
    k = num_hidden - 1 if central else num_hidden
    num_subsets = math.comb(num_units, k)
    num_vertices = num_subsets * (2 if central else 1)
    if num_vertices * 2**k > max_candidates:
        return None
    subsets = np.array(list(itertools.combinations(range(num_units), k)), int)
    subsets = subsets.reshape(num_subsets, k)
    choices = np.array(list(itertools.product((False, True), repeat=k)), bool).reshape(2**k, k)
    keys, counts, degenerate = None, None, 0
    for begin in range(0, num_subsets, chunk):
        part = subsets[begin:begin + chunk]
        if central:
            if k == 0:
                direction = np.ones((1, num_hidden))
            else:
                _, _, vt = np.linalg.svd(w[part], full_matrices=True)
                direction = vt[:, -1, :]
            points = np.concatenate([direction, -direction])
            on = np.concatenate([part, part])
            x = points @ w.T
        else:
            points = np.linalg.solve(w[part], -b[part][..., None])[..., 0]
            on = part
            x = points @ w.T + b
        rows = np.arange(x.shape[0])[:, None]
        off = np.abs(x)
        off[rows, on] = np.inf
        degenerate += int(np.sum(off.min(axis=1) < DEGENERATE_TOL))
        up = x > 0
        candidates = np.repeat(up[None], choices.shape[0], axis=0)
        for j, choice in enumerate(choices):
            candidates[j][rows, on] = choice
        new = np.unique(_as_keys(candidates.reshape(-1, num_units)))
        keys, counts = _merge(keys, counts, new, np.ones(new.size))
    return {"cells": int(keys.size), "vertices": int(num_vertices), "degenerate": degenerate}


def sample_counts(rng_key, weights, bias, sizes, num_samples, batch=BATCH):
    """Distinct patterns (and plug-in entropy) among samples of the program, per N prefix.

    Draws ``num_samples`` patterns from ``generate(..., weights=weights, bias=bias)``
    (the deterministic clip) in batches; the patterns of N units are the first N
    columns. Returns ``{N: {"distinct": int, "entropy": float (nats)}}``.
    """
    tables = {n: (None, None) for n in sizes}
    done = 0
    for key in jax.random.split(rng_key, -(-num_samples // batch)):
        size = min(batch, num_samples - done)
        s = np.asarray(generate(key, size, weights=weights, bias=bias).s)
        done += size
        for n in sizes:
            new, new_counts = np.unique(_as_keys(s[:, :n] > 0), return_counts=True)
            tables[n] = _merge(*tables[n], new, new_counts.astype(np.float64))
    out = {}
    for n, (keys, counts) in tables.items():
        p = counts / counts.sum()
        out[n] = {"distinct": int(keys.size), "entropy": float(-np.sum(p * np.log(p)))}
    return out


def arc_probabilities(weights):
    """Zero bias, P = 2: probabilities of the 2N cells (arcs of the circle cut by the lines)."""
    w = np.asarray(weights, np.float64)
    normal = np.arctan2(w[:, 1], w[:, 0])
    cuts = np.sort(np.concatenate([normal + np.pi / 2, normal - np.pi / 2]) % (2 * np.pi))
    arcs = np.diff(np.concatenate([cuts, cuts[:1] + 2 * np.pi]))
    return arcs / (2 * np.pi)


def expected_distinct(probabilities, num_samples):
    """Mean and (upper bound of the) standard deviation of the distinct cells hit by M samples.

    Cell i is hit with probability q_i = 1 - (1 - p_i)^M; the mean is sum q_i,
    and sum q_i (1 - q_i) bounds the variance (the hits are negatively correlated).
    """
    p = np.asarray(probabilities, np.float64)
    hit = -np.expm1(num_samples * np.log1p(-p))
    return float(hit.sum()), float(np.sqrt(np.sum(hit * (1.0 - hit))))


# ------------------------------------------------------------------------ main
def run(rng_key, sizes, num_samples):
    """All counts: ``{variant: {P: {"rows": [...], slopes...}}}``."""
    results = {variant: {} for variant in VARIANTS}
    for num_hidden, key in zip(HIDDEN, jax.random.split(rng_key, len(HIDDEN)), strict=True):
        key_w, key_zero, key_bias = jax.random.split(key, 3)
        base = generate(key_w, 1, max(sizes), num_hidden)
        weights, bias = np.asarray(base.weights), np.asarray(base.bias)
        for variant, key_sample, b in ((VARIANTS[0], key_zero, 0.0),
                                       (VARIANTS[1], key_bias, bias)):
            sampled = sample_counts(key_sample, weights, b, sizes, num_samples)
            rows = []
            for n in sizes:
                exact = enumerate_cells(weights[:n], None if variant == VARIANTS[0] else bias[:n])
                row = {"N": n, "formula": formula_count(n, num_hidden, variant),
                       "exact": None if exact is None else exact["cells"],
                       "degenerate": None if exact is None else exact["degenerate"],
                       "sampled": sampled[n]["distinct"], "entropy": sampled[n]["entropy"]}
                if variant == VARIANTS[0] and num_hidden == 2:
                    p = arc_probabilities(weights[:n])
                    row["expected"], row["expected_sd"] = expected_distinct(p, num_samples)
                    row["entropy_exact"] = float(-np.sum(p * np.log(p)))
                if variant == VARIANTS[0] and num_hidden == 1:
                    row["entropy_exact"] = math.log(2.0)
                rows.append(row)
            exact_known = all(r["exact"] is not None for r in rows[-SLOPE_POINTS:])
            results[variant][num_hidden] = {
                "rows": rows,
                "slope_formula": slope(sizes, [r["formula"] for r in rows]),
                "slope_exact": (slope(sizes, [r["exact"] for r in rows]) if exact_known
                                else None),
                "slope_sampled": slope(sizes, [r["sampled"] for r in rows]),
                "slope_entropy": slope(sizes, [r["entropy"] for r in rows], logarithm=False),
                "slope_asymptotic": asymptotic_slope(num_hidden, variant),
            }
    return results


def main(argv=None):
    """Count the patterns of random clipped Gaussians; print the table and slopes; save figure/JSON.

    Returns
    -------
    dict
        ``settings``; ``counts`` (:func:`run`: per variant and P the rows N,
        formula, exact, degenerate, sampled, entropy [, expected, expected_sd,
        entropy_exact] and the slopes); ``paper``; ``paths``; ``seconds``.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="N = 8 ... 64 and 2^16 samples (about 10 s)")
    parser.add_argument("--output-dir", default="zoo-results", help="folder for PNGs and JSON")
    parser.add_argument("--seed", type=int, default=0, help="random seed (JAX key)")
    args = parser.parse_args(argv)
    total_start = time.perf_counter()
    sizes = SIZES_QUICK if args.quick else SIZES
    num_samples = NUM_SAMPLES_QUICK if args.quick else NUM_SAMPLES
    print(f"Distinct patterns of s = sign(W y [+ xi]), W: unit-norm rows in random directions, "
          f"P = {list(HIDDEN)}, N = {list(sizes)}, {num_samples} samples each")
    counts = run(jax.random.key(args.seed), sizes, num_samples)

    for variant in VARIANTS:
        formula = ("Cover: 2 sum_{i<P} binom(N-1, i)" if variant == VARIANTS[0]
                   else "sum_{i<=P} binom(N, i)")
        print(f"\n{variant} ({'central' if variant == VARIANTS[0] else 'affine'} hyperplanes; "
              f"formula {formula}):")
        print("  P     N    formula      exact    sampled  sampled/formula  entropy (nats)")
        for num_hidden in HIDDEN:
            for r in counts[variant][num_hidden]["rows"]:
                exact = "skipped" if r["exact"] is None else str(r["exact"])
                extra = ""
                if "expected" in r:
                    extra = (f"   expected {r['expected']:.1f} +- {r['expected_sd']:.1f}, exact "
                             f"entropy {r['entropy_exact']:.3f}")
                print(f"  {num_hidden}  {r['N']:4d}  {r['formula']:9d}  {exact:>9}  "
                      f"{r['sampled']:9d}  {r['sampled'] / r['formula']:15.3f}  "
                      f"{r['entropy']:14.3f}{extra}")
        bad = [(p, r["N"]) for p in HIDDEN for r in counts[variant][p]["rows"]
               if r["exact"] is not None and (r["exact"] != r["formula"] or r["degenerate"])]
        verdict = "equals the formula wherever it ran" if not bad else f"DIFFERS at {bad}"
        print(f"  exact enumeration {verdict}")

    low, high = sizes[-SLOPE_POINTS], sizes[-1]
    print(f"\nSlopes d log(count) / d log N over N = {low}..{high} (the paper: P for N >> P):")
    print("  variant      P  asymptote  formula   exact  sampled  plug-in entropy")
    for variant in VARIANTS:
        for num_hidden in HIDDEN:
            c = counts[variant][num_hidden]
            exact = "   n/a" if c["slope_exact"] is None else f"{c['slope_exact']:6.2f}"
            print(f"  {variant:11s}  {num_hidden}  {c['slope_asymptotic']:9d}  "
                  f"{c['slope_formula']:7.2f}  {exact}  {c['slope_sampled']:7.2f}  "
                  f"{c['slope_entropy']:15.2f}")
    zero = [counts[VARIANTS[0]][p]["slope_formula"] for p in HIDDEN]
    biased = [counts[VARIANTS[1]][p]["slope_formula"] for p in HIDDEN]
    print(f"\nPaper vs ours: the paper counts about N^P patterns (S = P log N). With zero bias "
          f"(its x = W y) the cells are Cover's C(N, P) ~ 2 N^(P-1) / (P-1)!: slopes "
          f"{', '.join(f'{v:.2f}' for v in zero)} for P = {', '.join(map(str, HIDDEN))}, so "
          f"S ~ (P-1) log N; with biases (affine hyperplanes) the count is ~ N^P / P!: slopes "
          f"{', '.join(f'{v:.2f}' for v in biased)}, the paper's N^P. Sampling "
          f"{num_samples} patterns undercounts the small cells (column sampled/formula).")

    results = {"settings": {"quick": args.quick, "seed": args.seed, "sizes": list(sizes),
                            "hidden": list(HIDDEN), "num_samples": num_samples,
                            "slope_points": SLOPE_POINTS, "max_enumerated": MAX_ENUMERATED},
               "counts": counts, "paper": {"count": "N^P", "entropy": "P log N"}}
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "clipped_entropy.json"}
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print('matplotlib is not installed (pip install -e ".[examples]"): no figures')
    else:
        paths["figure"] = out / "clipped_entropy.png"
        _plot(paths["figure"], counts, sizes, num_samples)
    results["seconds"] = time.perf_counter() - total_start
    paths["json"].write_text(json.dumps(jsonable(results), indent=1))
    results["paths"] = paths
    for path in paths.values():
        print(f"wrote {path}")
    print(f"total {results['seconds']:.1f} s")
    return results


def _plot(path, counts, sizes, num_samples):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullFormatter

    fig, axes = new_figure(1, 2, figsize=(11.0, 4.5), sharey=True)
    grid = np.unique(np.geomspace(sizes[0], sizes[-1], 60).astype(int))
    colors = {1: "tab:blue", 2: "tab:orange", 3: "tab:green"}
    for ax, variant in zip(axes, VARIANTS, strict=True):
        for p in HIDDEN:
            c = counts[variant][p]
            rows = c["rows"]
            ax.loglog(grid, [formula_count(int(n), p, variant) for n in grid], "-",
                      color=colors[p], linewidth=0.8,
                      label=f"P = {p}: formula (slope {c['slope_formula']:.2f})")
            exact = [(r["N"], r["exact"]) for r in rows if r["exact"] is not None]
            if exact:
                ax.loglog(*zip(*exact, strict=True), "o", color=colors[p], fillstyle="none",
                          markersize=8)
            ax.loglog([r["N"] for r in rows], [r["sampled"] for r in rows], "x",
                      color=colors[p], label=f"P = {p}: sampled (slope {c['slope_sampled']:.2f})")
        ax.set_xlabel("N (units)")
        ax.set_xticks(list(sizes), [str(int(n)) for n in sizes])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(f"{variant}: asymptotic slope {'P - 1' if variant == VARIANTS[0] else 'P'}",
                     fontsize=9)
        handles, _ = ax.get_legend_handles_labels()
        handles.append(Line2D([], [], ls="", marker="o", fillstyle="none", color="0.3",
                              label="exact count of the cells"))
        ax.legend(handles=handles, fontsize=7)
    axes[0].set_ylabel(f"distinct patterns (sampled: of {num_samples})")
    save_figure(fig, path)


if __name__ == "__main__":
    main()
