"""Benchmark: the first call in a new process, without and with the persistent compilation cache.

Most of a first fit's time is XLA compiling its programs, and a new process compiles
them all again. :func:`inference.enable_compilation_cache` keeps them on disk; this
script measures what that buys a user who starts a new Python process (or runs the
``ppl-zoo`` command) on a machine that has run the same thing before.

What is timed, each in its own new process (``--worker``, or the ``ppl-zoo`` command):

* each family's main fit on a small data set: ``inference.fit_gvq`` (planted GVQ, 200
  examples, dim 8, 4 features), ``inference.fit_mixture`` (200 points, k 3, d 2),
  ``inference.fit_mcvq`` (60 examples, D 9, K 3, J 4), ``inference.fit_ppca`` (the
  PPCA EM fit: 300 examples, d 5, q 2, sigma by maximum likelihood) and
  ``inference.fit_clipped_gaussian`` (2,000 binary patterns, N 8, P 2). The data are
  drawn (with the model's own generator) and moved to the host before the clock
  starts; the time is the fit's first call up to its results being ready;
* ``ppl-zoo select mixture --data iris.csv`` (scikit-learn's iris measurements,
  150 x 4, written to a CSV with a header row; the family's default candidates and
  criteria): the command's whole wall time, start-up and imports included.

Three settings, each in a new process: ``off`` (no persistent cache: every program is
compiled), ``cold`` (the cache on in an empty folder: every program is compiled and
written) and ``warm`` (a second process on the folder the cold one filled: programs
are loaded). Each repeat uses a fresh folder; the table gives the median of the
repeats, the speed-up cold / warm, and what the folder holds (entries, size). The
import time of the package (about a second) is inside the command's times and outside
the fits'.

Run::

    python benchmarks/compilation_cache.py            # 3 repeats
    python benchmarks/compilation_cache.py --quick    # 1 repeat (about 2 minutes)

The table is printed and written as JSON to ``--output`` (default
``benchmarks/results/compilation_cache.json``).

Measured with ``--quick`` (one repeat) on two cores shared with other work (load
average about 3; jax 0.9.2, CPU): the first call with no cache (off), with an empty
folder (cold) and with the folder the cold process filled (warm):

=======  ========================  =======  ========  ========  =========  =======
case     size                      off (s)  cold (s)  warm (s)  cold/warm  entries
=======  ========================  =======  ========  ========  =========  =======
gvq      N 200, dim 8, n 4            4.10      4.41      1.35        3.3       56
mixture  N 200, d 2, k 3              3.40      3.47      0.90        3.8      127
mcvq     N 60, D 9, K 3, J 4          2.55      2.46      0.64        3.9       22
ppca     N 300, d 5, q 2              1.49      1.60      0.31        5.2       40
clipped  2,000 patterns, N 8, P 2     4.27      4.30      0.73        5.9       93
select   iris 150 x 4               120.84    128.29     49.72        2.6      825
=======  ========================  =======  ========  ========  =========  =======

Writing the entries costs the cold process next to nothing (within the noise of one
repeat); the folder held 0.3-0.6 MB per fit and 6.4 MB after ``select``. The cache skips
XLA's compilation only: by ``jax.monitoring``'s events, the cold ``select`` run spent
89 s compiling 825 programs, the warm one loaded all 863 requests from the folder in
3 s and still spent about 20 s tracing and lowering them (JAX does that in every
process) before the computation itself.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO_ROOT))

DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "compilation_cache.json"
SETTINGS = ("off", "cold", "warm")

#: Case -> (what is called, the data's size).
CASES = {
    "gvq": ("inference.fit_gvq(x, 4)", "N=200, dim=8, n=4"),
    "mixture": ("inference.fit_mixture(x, 3)", "N=200, d=2, k=3"),
    "mcvq": ("inference.fit_mcvq(x, 3, 4, max_iterations=150)", "N=60, D=9, K=3, J=4"),
    "ppca": ("inference.fit_ppca(x, 2, noise='ml')", "N=300, d=5, q=2"),
    "clipped": ("inference.fit_clipped_gaussian(s, 2)", "N=2000 patterns, 8 units, P=2"),
    "select": ("ppl-zoo select mixture --data iris.csv", "iris 150 x 4"),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat instead of three")
    parser.add_argument("--repeats", type=int, default=None,
                        help="fresh folders per case (default 3, quick 1)")
    parser.add_argument("--only", nargs="+", choices=sorted(CASES), metavar="CASE",
                        help=f"run only these cases ({', '.join(CASES)})")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON output path")
    parser.add_argument("--worker", choices=sorted(set(CASES) - {"select"}),
                        help=argparse.SUPPRESS)
    parser.add_argument("--cache", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.repeats = args.repeats or (1 if args.quick else 3)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1; got {args.repeats}")
    return args


def worker(case: str, cache: str | None) -> dict:
    """In a new process: the cache on in ``cache`` (None: off), then one fit, timed."""
    start = time.perf_counter()
    import jax
    import numpy as np

    import inference
    from ppl_models import clipped_gaussian, gvq, mcvq, mixture, ppca

    imported = time.perf_counter()
    if cache is not None and inference.enable_compilation_cache(cache) is None:
        raise RuntimeError(f"the cache could not be turned on in {cache}")
    key = jax.random.key
    if case == "gvq":
        x = np.asarray(gvq.generate_planted(key(0), 200, 4, 8, noise_scale=0.1).x)
        call = lambda: inference.fit_gvq(x, 4, rng_key=key(1))  # noqa: E731
    elif case == "mixture":
        x = np.asarray(mixture.generate(key(0), 200, 3, 2, separation=8.0).x)
        call = lambda: inference.fit_mixture(x, 3, rng_key=key(1))  # noqa: E731
    elif case == "mcvq":
        x = np.asarray(mcvq.generate(key(2), num_examples=60, dim=9, num_vqs=3,
                                     num_states=3).x)
        call = lambda: inference.fit_mcvq(x, 3, 4, rng_key=key(10),  # noqa: E731
                                          max_iterations=150)
    elif case == "ppca":
        x = np.asarray(ppca.generate(key(0), 300, 5, 2, noise=0.1).x)
        call = lambda: inference.fit_ppca(x, 2, noise="ml", rng_key=key(1))  # noqa: E731
    else:
        s = np.asarray(clipped_gaussian.generate(key(0), 2000, 8, 2).s)
        call = lambda: inference.fit_clipped_gaussian(s, 2)  # noqa: E731
    begin = time.perf_counter()
    jax.block_until_ready(jax.tree_util.tree_leaves(call()))
    return {"first_call_s": time.perf_counter() - begin, "import_s": imported - start}


def _environment() -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PPL_ZOO_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR")}
    env["JAX_PLATFORMS"] = "cpu"
    return env


def _iris_csv(folder: Path) -> Path:
    from sklearn.datasets import load_iris

    iris = load_iris()
    path = folder / "iris.csv"
    lines = [",".join(name.replace(" (cm)", "").replace(" ", "_")
                      for name in iris.feature_names)]
    lines += [",".join(f"{v:g}" for v in row) for row in iris.data]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_once(case: str, setting: str, folder: Path, scratch: Path) -> dict:
    """One new process of ``case`` with the cache ``off``, or on in ``folder``."""
    env = _environment()
    if case == "select":
        flags = ["--no-compilation-cache"] if setting == "off" else \
            ["--compilation-cache", str(folder)]
        command = [sys.executable, "-m", "inference.app.cli", *flags, "select", "mixture",
                   "--data", str(scratch / "iris.csv"), "--no-progress",
                   "--output-dir", str(scratch / f"select-{setting}")]
    else:
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", case,
                   *([] if setting == "off" else ["--cache", str(folder)])]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False,
                          cwd=REPO_ROOT)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{case} ({setting}) failed:\n{done.stderr[-3000:]}")
    result = {"process_s": wall, "stderr_lines": len(done.stderr.splitlines())}
    if case == "select":
        result["first_call_s"] = wall  # the command's whole run
    else:
        result.update(json.loads(done.stdout.strip().splitlines()[-1]))
    return result


def _folder_contents(folder: Path) -> dict:
    entries = list(folder.glob("*-cache")) if folder.is_dir() else []
    return {"entries": len(entries), "bytes": sum(p.stat().st_size for p in entries)}


def _summary(runs: list[dict], key: str) -> dict:
    values = [r[key] for r in runs]
    return {"median_s": statistics.median(values), "min_s": min(values), "max_s": max(values),
            "runs_s": values}


def format_table(rows) -> str:
    lines = [f"{'case':9s} {'what':50s} {'off s':>7s} {'cold s':>7s} {'warm s':>7s} "
             f"{'cold/warm':>9s} {'entries':>7s} {'MB':>6s}"]
    lines.append("-" * len(lines[0]))
    for r in rows:
        lines.append(f"{r['case']:9s} {r['what'][:50]:50s} {r['off']['median_s']:7.2f} "
                     f"{r['cold']['median_s']:7.2f} {r['warm']['median_s']:7.2f} "
                     f"{r['speedup']:9.1f} {r['entries']:7d} {r['bytes'] / 1e6:6.2f}")
    return "\n".join(lines)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.cache)))
        return {}
    import jax

    cases = args.only or list(CASES)
    start = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ppl-zoo-cache-bench-") as tmp:
        scratch = Path(tmp)
        if "select" in cases:
            _iris_csv(scratch)
        for case in cases:
            runs = {setting: [] for setting in SETTINGS}
            contents = []
            for repeat in range(args.repeats):
                folder = scratch / f"{case}-{repeat}"
                # Interleaved: each repeat runs off, cold and warm back to back.
                for setting in SETTINGS:
                    runs[setting].append(run_once(case, setting, folder, scratch))
                contents.append(_folder_contents(folder))
            what, size = CASES[case]
            row = {"case": case, "what": what, "size": size,
                   **{s: _summary(runs[s], "first_call_s") for s in SETTINGS},
                   "process": {s: _summary(runs[s], "process_s") for s in SETTINGS},
                   "stderr_lines": {s: [r["stderr_lines"] for r in runs[s]] for s in SETTINGS},
                   **contents[-1]}
            row["speedup"] = row["cold"]["median_s"] / row["warm"]["median_s"]
            row["write_overhead"] = row["cold"]["median_s"] / row["off"]["median_s"]
            rows.append(row)
            print(f"  {case}: off {row['off']['median_s']:.2f} s, cold "
                  f"{row['cold']['median_s']:.2f} s, warm {row['warm']['median_s']:.2f} s "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
    print()
    print(f"First call in a new process, median of {args.repeats} repeat(s): off = no "
          f"persistent cache, cold = an empty cache folder, warm = the folder the cold "
          f"process filled; jax {jax.__version__}, {os.cpu_count()} CPU core(s)")
    print("fits: the fit's first call (data drawn before); select: the command's whole run")
    print(format_table(rows))
    elapsed = time.perf_counter() - start
    print(f"({elapsed:.0f} s)")
    output = {"benchmark": "compilation_cache", "quick": args.quick, "repeats": args.repeats,
              "rows": rows, "jax": jax.__version__, "cpu_count": os.cpu_count(),
              "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
              "elapsed_s": elapsed}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(output, indent=2) + "\n")
    print(f"wrote {args.output}")
    return output


if __name__ == "__main__":
    main()
