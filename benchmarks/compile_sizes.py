"""Benchmark: how many programs the mixture fit compiles for data of several sizes.

XLA compilation dominates a first call. With :data:`inference.mixture.sweep.BUCKET_ROWS`
on, ``inference.fit_mixture`` pads the rows of x to a bucket of a geometric ladder
(:func:`inference.mixture.algorithm.bucket_rows`: sizes m 2^e, m in {4, 5, 6, 7}) and
passes the number of examples as a traced value, so one compiled program serves every
size in a bucket; this script counts what a new process compiles and how long it takes,
with the switch off (``exact``: programs compiled for each number of examples, the
default) and on (``bucketed``).

What is timed, each in its own new process (``--worker``) with no persistent
compilation cache (every program is compiled):

* ``sizes``: ``fit_mixture(x, 3, rng_key=key)`` on N = 150, then 151, then 120 rows
  (the first 150 / 151 / 120 rows of 151 points drawn by ``mixture.generate``, d 4) in
  one process: the wall time and the compilations of each call;
* ``select``: ``inference.model_selection(iris, range(1, 7), model="mixture",
  criteria=("cv", "bic"), rng_key=jax.random.key(0))``, its first call (scikit-learn's
  iris measurements, 150 x 4, standardised): cross-validation fits every fold
  (135 or 136 rows here), then the full data.

Compilations are counted through :mod:`jax.monitoring`:
``/jax/core/compile/backend_compile_duration`` fires whenever XLA builds an executable
(``compiled``), ``/jax/core/compile/jaxpr_trace_duration`` for every top-level trace
(``traced``), as ``tests/test_compile_once.py`` counts them.

Run::

    python benchmarks/compile_sizes.py            # 1 repeat (about 3-5 minutes)
    python benchmarks/compile_sizes.py --repeats 3

The table is printed and written as JSON to ``--output`` (default
``benchmarks/results/compile_sizes.json``). Measured with one repeat on two cores shared
with other work (jax 0.9.2, CPU); ``docs/measurements.md`` records them:

=======  ========  ==========  ======  ========  ======
case     setting   call        wall s  compiled  XLA s
=======  ========  ==========  ======  ========  ======
sizes    exact     N=150         4.71        23    3.70
sizes    exact     N=151         3.75         6    3.21
sizes    exact     N=120         3.43         6    2.93
sizes    bucketed  N=150         4.28        21    3.50
sizes    bucketed  N=151         0.02         0    0.00
sizes    bucketed  N=120         3.35         5    2.92
select   exact     first call   46.08       618   36.69
select   bucketed  first call   45.08       615   35.75
=======  ========  ==========  ======  ========  ======
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO_ROOT))

DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "compile_sizes.json"
SETTINGS = ("exact", "bucketed")

#: Case -> (what is called, the data's size).
CASES = {
    "sizes": ("fit_mixture(x, 3) on N = 150, 151, 120", "d=4, k=3"),
    "select": ("model_selection(iris, 1..6, 'mixture', cv+bic)", "iris 150 x 4"),
}
#: The sizes of the ``sizes`` case, in the order they are fitted.
SIZES = (150, 151, 120)
EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "traced",
          "/jax/core/compile/backend_compile_duration": "compiled"}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="new processes per case")
    parser.add_argument("--only", nargs="+", choices=sorted(CASES), metavar="CASE",
                        help=f"run only these cases ({', '.join(CASES)})")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON output path")
    parser.add_argument("--worker", choices=sorted(CASES), help=argparse.SUPPRESS)
    parser.add_argument("--setting", choices=SETTINGS, default="exact", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1; got {args.repeats}")
    return args


class _Counter:
    """Counts the :data:`EVENTS` and the seconds XLA spent building executables."""

    def __init__(self):
        self.counts = {"traced": 0, "compiled": 0}
        self.compile_s = 0.0

    def __call__(self, event, duration, **kwargs):
        if event in EVENTS:
            self.counts[EVENTS[event]] += 1
            if EVENTS[event] == "compiled":
                self.compile_s += duration

    def snapshot(self):
        return dict(self.counts, compile_s=self.compile_s)


def worker(case: str, setting: str) -> dict:
    """In a new process: the case's calls, each timed and its compilations counted."""
    import warnings

    import jax
    import numpy as np

    import inference
    from inference.mixture import sweep
    from ppl_models import mixture
    from ppl_models.diagnostics import ZooWarning

    sweep.BUCKET_ROWS = setting == "bucketed"
    warnings.simplefilter("ignore", ZooWarning)
    counter = _Counter()
    jax.monitoring.register_event_duration_secs_listener(counter)
    calls = []
    if case == "sizes":
        x = np.asarray(mixture.generate(jax.random.key(0), max(SIZES), 3, 4,
                                        separation=6.0).x)
        for num in SIZES:
            calls.append((f"N={num}", lambda num=num: inference.fit_mixture(
                x[:num], 3, rng_key=jax.random.key(1))))
    else:
        from sklearn.datasets import load_iris

        iris = load_iris().data
        iris = ((iris - iris.mean(0)) / iris.std(0)).astype(np.float32)
        calls.append(("first call", lambda: inference.model_selection(
            iris, range(1, 7), model="mixture", criteria=("cv", "bic"),
            rng_key=jax.random.key(0))))
    rows = []
    for label, call in calls:
        before = counter.snapshot()
        begin = time.perf_counter()
        result = call()
        jax.block_until_ready([leaf for leaf in jax.tree_util.tree_leaves(result)
                               if isinstance(leaf, jax.Array)])
        wall = time.perf_counter() - begin
        after = counter.snapshot()
        rows.append({"call": label, "wall_s": wall,
                     **{name: after[name] - before[name] for name in after}})
    return {"calls": rows}


def _environment() -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PPL_ZOO_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR")}
    env["JAX_PLATFORMS"] = "cpu"
    env["JAX_ENABLE_COMPILATION_CACHE"] = "false"  # every program compiled
    return env


def run_once(case: str, setting: str) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", case,
               "--setting", setting]
    start = time.perf_counter()
    done = subprocess.run(command, env=_environment(), capture_output=True, text=True,
                          check=False, cwd=REPO_ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{case} ({setting}) failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - start
    return result


def format_table(rows) -> str:
    lines = [f"{'case':7s} {'setting':9s} {'call':12s} {'wall s':>7s} {'compiled':>8s} "
             f"{'traced':>7s} {'XLA s':>6s}"]
    lines.append("-" * len(lines[0]))
    for row in rows:
        for call in row["calls"]:
            lines.append(f"{row['case']:7s} {row['setting']:9s} {call['call']:12s} "
                         f"{call['wall_s']:7.2f} {call['compiled']:8.0f} {call['traced']:7.0f} "
                         f"{call['compile_s']:6.2f}")
    return "\n".join(lines)


def _median_calls(runs):
    """Per call: the median over the repeats of every number."""
    calls = []
    for index, first in enumerate(runs[0]["calls"]):
        values = [run["calls"][index] for run in runs]
        calls.append({"call": first["call"],
                      **{key: statistics.median(v[key] for v in values)
                         for key in ("wall_s", "compiled", "traced", "compile_s")},
                      "runs": values})
    return calls


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.setting)))
        return {}
    import jax

    start = time.perf_counter()
    rows = []
    for case in args.only or list(CASES):
        for setting in SETTINGS:
            runs = [run_once(case, setting) for _ in range(args.repeats)]
            what, size = CASES[case]
            rows.append({"case": case, "setting": setting, "what": what, "size": size,
                         "calls": _median_calls(runs),
                         "process_s": [run["process_s"] for run in runs]})
            print(f"  {case} ({setting}): {time.perf_counter() - start:.0f} s", flush=True)
    print()
    print(f"Each case in a new process, no persistent compilation cache; median of "
          f"{args.repeats} repeat(s); jax {jax.__version__}, {os.cpu_count()} CPU core(s); "
          "exact = BUCKET_ROWS off (the default), bucketed = on")
    print(format_table(rows))
    elapsed = time.perf_counter() - start
    output = {"benchmark": "compile_sizes", "repeats": args.repeats, "rows": rows,
              "jax": jax.__version__, "cpu_count": os.cpu_count(),
              "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
              "elapsed_s": elapsed}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(output, indent=2) + "\n")
    print(f"wrote {args.output}")
    return output


if __name__ == "__main__":
    main()
