"""Benchmark: which association method where -- BR+MF against tabu search over dim / n.

``associate(..., method=...)`` offers the papers' belief revision polished by annealed
mean field (``"br+mf"``, Westerdijk, Barber and Wiegerinck (2001), sec. 4) and
multi-walk tabu search (``"tabu"``), the method for overcomplete codebooks. A
``method="auto"`` that chose between them by dim / n would only be worth having if the
choice mattered; this script measures whether it does. On the same planted GVQ data
(:func:`ppl_models.gvq.generate_planted`, noise ``--noise-scale``) it runs both at their
default settings, and exhaustive search as the reference up to n = ``--exact-max``
(beyond it, the lower of the planted state's energy and the best any method found),
over

* dim / n from 1/2 (overcomplete) through 1 to 2 (under-complete), and
* two feature distributions: dense F ~ N(0, 1) (``--feature-means 0``, the overcomplete
  benchmark's) and the papers' generator of sec. 4.3, F ~ N(2, 1) (``2``), whose
  features share a large common part and are much more alike.

Per method and configuration: the median time per example over ``--repeats`` warm calls
(methods interleaved, so that machine noise hits them alike), the mean gap to the
reference in percent of its mean energy, the share of examples above the reference
(relative tolerance 1e-5), and the share the method reports ``converged``. There is no
goal: the table is the measurement behind the user guide's advice on choosing a
method. Not asserted (benchmarks are not tests).

Run::

    python benchmarks/association_choice.py           # ~5-10 min on 2 cores
    python benchmarks/association_choice.py --quick   # n = 12, 16; 500 examples

The table is printed and written as JSON to ``--output``
(default ``benchmarks/results/association_choice.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.association_exact import machine_info  # noqa: E402
from inference import associate  # noqa: E402
from ppl_models import gvq  # noqa: E402

METHODS = ("br+mf", "tabu")
RATIOS = (0.5, 1.0, 1.5, 2.0)
DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "association_choice.json"
#: Relative tolerance of "above the reference".
RTOL = 1e-5


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="n = 12, 16; 500 examples")
    parser.add_argument("--sizes", type=int, nargs="+", default=None,
                        help="numbers of features n (default 12 16 20 32 64)")
    parser.add_argument("--ratios", type=float, nargs="+", default=list(RATIOS),
                        help="dim / n (default 0.5 1 1.5 2)")
    parser.add_argument("--feature-means", type=float, nargs="+", default=[0.0, 2.0],
                        help="means of the planted features' entries (default 0 2)")
    parser.add_argument("--num-examples", type=int, default=None,
                        help="examples per configuration (default 2000; --quick 500)")
    parser.add_argument("--exact-max", type=int, default=20,
                        help="exhaustive search is the reference up to this n (default 20)")
    parser.add_argument("--noise-scale", type=float, default=0.3,
                        help="noise of the planted data (default 0.3)")
    parser.add_argument("--repeats", type=int, default=3, help="warm timed calls (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="data seed")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON output path")
    args = parser.parse_args(argv)
    if args.sizes is None:
        args.sizes = [12, 16] if args.quick else [12, 16, 20, 32, 64]
    if args.num_examples is None:
        args.num_examples = 500 if args.quick else 2000
    for name in ("num_examples", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if min(args.sizes) < 1 or min(args.ratios) <= 0:
        parser.error("--sizes must be positive integers and --ratios positive")
    return args


def _call(method, features, x, key):
    result = associate(features, x, method=method, rng_key=key, check=False)
    result.energy.block_until_ready()
    return result


def run_config(n, dim, mean, args) -> dict:
    """Both methods (and the reference) on one planted data set."""
    key = jax.random.fold_in(jax.random.key(args.seed), n * 1000 + dim + int(100 * mean))
    data = gvq.generate_planted(key, args.num_examples, n, dim, noise_scale=args.noise_scale,
                                feature_mean=mean)
    planted = jnp.sum(jnp.square(data.x - data.states.astype(data.x.dtype) @ data.features),
                      axis=-1)
    run_key = jax.random.key(args.seed + 1)
    results = {m: _call(m, data.features, data.x, run_key) for m in METHODS}  # compiles
    times = {m: [] for m in METHODS}
    for _ in range(args.repeats):
        for m in METHODS:
            start = time.perf_counter()
            _call(m, data.features, data.x, run_key)
            times[m].append(time.perf_counter() - start)
    if n <= args.exact_max:
        reference, kind = associate(data.features, data.x, method="exact").energy, "exact"
    else:
        reference = jnp.minimum(planted, jnp.min(jnp.stack(
            [r.energy for r in results.values()]), axis=0))
        kind = "best of planted and methods"
    reference = np.asarray(reference, np.float64)
    row = {"num_features": n, "dim": dim, "feature_mean": mean, "reference": kind,
           "methods": {}}
    for m, r in results.items():
        energy = np.asarray(r.energy, np.float64)
        row["methods"][m] = {
            "us_per_example": 1e6 * float(np.median(times[m])) / args.num_examples,
            "gap_percent": 100 * float(np.mean(energy - reference) / np.mean(reference)),
            "above_percent": 100 * float(np.mean(energy > reference * (1 + RTOL) + 1e-6)),
            "converged_percent": 100 * float(np.mean(np.asarray(r.converged)))}
    return row


def format_row(row) -> str:
    cells = [f"{row['num_features']:>3d} {row['dim']:>4d} {row['feature_mean']:>4g}"]
    for m in METHODS:
        s = row["methods"][m]
        cells.append(f"{s['us_per_example']:>8.1f} {s['gap_percent']:>8.3f}% "
                     f"{s['above_percent']:>6.2f}% {s['converged_percent']:>5.0f}%")
    return " | ".join(cells)


def main(argv=None) -> dict:
    args = parse_args(argv)
    info = {**machine_info(), "load_average": list(os.getloadavg())}
    print(f"association: br+mf against tabu (default settings), {args.num_examples} planted "
          f"examples per row, noise {args.noise_scale}; reference: exact search up to "
          f"n = {args.exact_max}, else the best of the planted state and the methods")
    print(f"machine: {info.get('cpu_count')} cores, load {info.get('load_average')}")
    head = "  n  dim mean | " + " | ".join(
        f"{m:>5s}: us/ex      gap  above  conv" for m in METHODS)
    print(head)
    rows = []
    for mean in args.feature_means:
        for n in args.sizes:
            for ratio in args.ratios:
                dim = max(1, int(round(ratio * n)))
                rows.append(run_config(n, dim, mean, args))
                print(format_row(rows[-1]), flush=True)
    info["load_average_after"] = list(os.getloadavg())
    report = {"machine": info, "settings": {k: (str(v) if isinstance(v, Path) else v)
                                            for k, v in vars(args).items()}, "rows": rows}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1))
    print(f"wrote {args.output}")
    return report


if __name__ == "__main__":
    main()
