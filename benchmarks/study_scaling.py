"""Benchmark: a study's rows on Dask -- two workers against one, and the cost of the Dask path.

``ppl-zoo study run`` computes a study's rows as one Dask task per row
(:func:`inference.app.study.run_study`). Two questions, each answered in one run on the
same machine:

* **Speed-up.** The quick study (``examples/studies/quick.toml``: mixture k and PPCA q,
  two levels, three seeds, 12 rows) on a ``LocalCluster`` of 2 worker processes
  against 1 (one thread each, ``XLA_FLAGS`` for one thread per computation, the
  persistent compilation cache shared). The cache is filled by a first, untimed run,
  so that the timed runs load compiled programs instead of compiling them; each timed
  run starts a new cluster and a new store (nothing is reused) and the runs alternate
  (1, 2, 1, 2, ...). Timed: the whole ``run_study`` call (cluster start included) and
  its rows alone (``seconds - startup_seconds``). Goal: at least 1.7x with 2 workers
  on 2 cores. The quick study's rows are short (most of a row is a worker tracing
  its first fits), so the same is measured on compute-bound rows too: ``--rows``
  synthetic rows (a user program doing ``--row-seconds`` of NumPy work each).
* **Overhead of the Dask path.** The synthetic rows (default 8 rows of about 1 s of
  CPU, the work calibrated in this process) computed serially in this process
  (``serial=True``: the same row function, the same store) against one Dask worker
  (a cluster started and warmed before the clock starts). Overhead per row =
  (Dask - serial) / rows, and in percent of the serial time; and the same in CPU
  seconds (the worker's and this process's, which holds the client and the scheduler,
  against this process's alone), which a machine shared with other work disturbs less
  than wall time. Goal: under 5% for rows of one second or more.

Beside each synthetic run the script prints the cores its rows obtained: the CPU
seconds of the computing processes (this one when serial, the workers otherwise) per
wall second. Two workers can only be faster than one where the machine has a second core
to give them: on a machine shared with other work, it does not.

Goals are printed as met or not met, never asserted: the machine is shared, and the
numbers are what was measured. Writes the table as JSON to ``--output`` (default
``benchmarks/results/study_scaling.json``).

Run::

    python benchmarks/study_scaling.py            # 2 alternating repeats (about 5 minutes)
    python benchmarks/study_scaling.py --quick    # 1 repeat, 6 synthetic rows

Measured (default run, jax 0.9.2, dask 2026.8.0) on two cores shared with other work at
a load average of 9 to 11, that is with no core to spare: medians of 2 repeats.

=====================================  ==========  ===========  =====================
case                                   ours (s)    peer (s)     ratio / overhead
=====================================  ==========  ===========  =====================
quick study, 2 workers vs 1 (rows)     14.4        8.2          0.57x (goal 1.7x: NOT)
quick study, with cluster start        21.2        11.3         0.53x
8 rows of 1 CPU s, 2 workers vs 1      13.8        14.8         1.08x (goal 1.7x: NOT)
8 rows of 1 CPU s, Dask 1 vs serial    14.8        13.1         +12.9%, +212 ms per row
  the same in CPU seconds              9.15        8.58         +6.7%, +72 ms per row
=====================================  ==========  ===========  =====================

Neither goal was met, and the table says why. The rows obtained 0.57-0.65 cores
whether one worker or two computed them: the other work on the machine left this run
no second core, so a second worker could not be faster. The quick study's rows are
short against each worker's first rows, which trace the families' programs (about 6
CPU s per worker with the compilation cache warm, 90 s for the first, cache-filling
run): two workers spent 11.9 CPU s where one spent 5.9 s. In the overhead, the worker's
CPU per row equals the serial run's within 1% (checked separately: 6.61 against 6.57 s
for 6 rows); the rest is the scheduler and client of the calling process, about 0.03
CPU s per second of the run. A run an hour earlier at load 7-9 measured the Dask path
15% faster than the serial one and two workers 1.07x one worker: on this machine the
wall-time overhead moves by +-15% with the load, more than the path costs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO_ROOT))

DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "study_scaling.json"
QUICK_STUDY = REPO_ROOT / "examples" / "studies" / "quick.toml"
SPEEDUP_GOAL = 1.7
OVERHEAD_GOAL = 0.05

#: The synthetic rows: a generator and a program of fixed NumPy work (one thread).
SYNTHETIC = '''
import numpy as np


def points(key, num_examples=20):
    return np.arange(2.0 * num_examples).reshape(num_examples, 2)


def busy(x, candidates, *, criteria, rng_key, iterations):
    a = np.linspace(0.0, 1.0, 20000)
    total = 0.0
    for _ in range(iterations):
        total += float(np.sin(a + total * 1e-12).sum())
    return {"values": {"work": [total / (1 + c) for c in candidates]}}
'''


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="one repeat and 6 synthetic rows instead of 2 and 8")
    parser.add_argument("--repeats", type=int, default=None,
                        help="alternating timed runs per setting (default 2, quick 1)")
    parser.add_argument("--rows", type=int, default=None,
                        help="synthetic rows (default 8, quick 6)")
    parser.add_argument("--row-seconds", type=float, default=1.0,
                        help="NumPy work per synthetic row, in seconds here (default 1)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON output path")
    args = parser.parse_args(argv)
    args.repeats = args.repeats or (1 if args.quick else 2)
    args.rows = args.rows or (6 if args.quick else 8)
    if args.repeats < 1 or args.rows < 2 or args.row_seconds <= 0:
        parser.error("--repeats must be at least 1, --rows at least 2, --row-seconds above 0")
    return args


def machine() -> dict:
    import jax

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count()
    return {"jax": jax.__version__, "python": sys.version.split()[0],
            "cpu_count": os.cpu_count(), "usable_cpus": usable,
            "load_average": list(os.getloadavg()), "dask": _dask_version()}


def _dask_version():
    try:
        import distributed
    except ImportError:
        return None
    return distributed.__version__


def _calibrate(folder: Path, seconds: float) -> int:
    """Iterations of the synthetic program that take about ``seconds`` of CPU here (CPU
    time, not wall time, which other work on the machine stretches)."""
    from inference.app.study.sources import load_function

    busy, _ = load_function(f"{folder / 'synthetic.py'}:busy", folder)
    start = time.process_time()
    busy(None, [1], criteria=None, rng_key=None, iterations=400)
    per = (time.process_time() - start) / 400
    return max(1, round(seconds / per))


def _synthetic_study(folder: Path, rows: int, iterations: int):
    from inference.app.study import load_study

    (folder / "synthetic.py").write_text(SYNTHETIC)
    path = folder / "synthetic.toml"
    path.write_text(f'''
name = "synthetic"
[data.points]
generator = "synthetic.py:points"
field = ""
seeds = {rows}
[data.points.levels]
only = {{ num_examples = 20 }}
[[models]]
program = "synthetic.py:busy"
data = "points"
candidates = [1, 2, 3]
options = {{ iterations = {iterations} }}
''')
    return load_study(path)


def _cluster(workers: int):
    import distributed

    from inference.app.study.runner import local_cluster

    cluster = local_cluster(workers, 1, {"single_thread": True})
    client = distributed.Client(cluster)
    client.run(__import__, "inference.app.study.rows")  # the imports, before the clock
    return cluster, client


def speedup(args, cache: str, folder: Path) -> dict:
    """The quick study on 1 and 2 workers (cache warm), alternating."""
    from inference.app.study import load_study, run_study

    study = load_study(QUICK_STUDY)
    print("filling the compilation cache (untimed run, 2 workers) ...", flush=True)
    warm = run_study(study, output_dir=folder / "warm", workers=2, cache_dir=cache,
                     progress=False)
    print(f"  {warm.seconds:.1f} s", flush=True)
    runs = {1: [], 2: []}
    for repeat in range(args.repeats):
        for workers in (1, 2):
            started = time.perf_counter()
            cluster, client = _cluster(workers)
            startup = time.perf_counter() - started
            try:
                cpu = _cpu_seconds(client)
                run = run_study(study, output_dir=folder / f"quick-{workers}-{repeat}",
                                client=client, cache_dir=cache, progress=False)
                cpu = _cpu_seconds(client) - cpu
            finally:
                client.close()
                cluster.close()
            assert run.computed == len(run.plan) and not run.failed, run.failures
            runs[workers].append({"total_s": startup + run.seconds, "rows_s": run.seconds,
                                  "startup_s": startup, "worker_cpu_s": cpu,
                                  "cores_obtained": cpu / run.seconds})
            print(f"  quick study, {workers} worker(s), repeat {repeat + 1}: rows "
                  f"{run.seconds:.1f} s ({startup:.1f} s starting the cluster and importing "
                  f"the package in its workers); workers' CPU {cpu:.1f} s, "
                  f"{cpu / run.seconds:.2f} cores obtained", flush=True)
    return {"rows": len(warm.plan), "runs": runs,
            "cold_two_workers_s": warm.seconds}


def synthetic(args, cache: str, folder: Path) -> dict:
    """Serial against 1 Dask worker, and 1 against 2 workers, on compute-bound rows."""
    from inference.app.study import run_study

    (folder / "synthetic.py").write_text(SYNTHETIC)
    iterations = _calibrate(folder, args.row_seconds)
    study = _synthetic_study(folder, args.rows, iterations)
    clusters = {w: _cluster(w) for w in (1, 2)}
    times = {"serial": [], "dask1": [], "dask2": []}
    cores = {"serial": [], "dask1": [], "dask2": []}
    spent = {"serial": [], "dask1": [], "dask2": []}
    try:
        # untimed: each process's first row compiles JAX's key functions
        warm = _synthetic_study(folder, 2, 1)
        run_study(warm, output_dir=folder / "warm-serial", serial=True, progress=False)
        for workers, (_, client) in clusters.items():
            run_study(warm, output_dir=folder / f"warm-{workers}", client=client,
                      progress=False)
        for repeat in range(args.repeats):
            for name in times:
                out = folder / f"synthetic-{name}-{repeat}"
                client = None if name == "serial" else clusters[int(name[-1])][1]
                cpu, here = _cpu_seconds(client), time.process_time()
                run = run_study(study, output_dir=out, serial=client is None, client=client,
                                progress=False)
                assert run.computed == args.rows and not run.failed, run.failures
                times[name].append(run.seconds)
                computing = _cpu_seconds(client) - cpu
                cores[name].append(computing / run.seconds)
                # all the CPU the path spent: the workers' and this process's (client,
                # scheduler); serial: this process's only
                spent[name].append(computing + (0.0 if client is None
                                                else time.process_time() - here))
                print(f"  synthetic rows ({args.rows} x ~{args.row_seconds:g} s), {name}, "
                      f"repeat {repeat + 1}: {run.seconds:.2f} s, {cores[name][-1]:.2f} "
                      "cores obtained", flush=True)
    finally:
        for cluster, client in reversed(clusters.values()):
            client.close()
            cluster.close()
    return {"iterations": iterations, "rows": args.rows, "times": times,
            "cores_obtained": cores, "cpu_seconds": spent}


def _cpu_seconds(client) -> float:
    """CPU seconds used so far by this process (client None) or by the client's workers."""
    if client is None:
        return time.process_time()
    return sum(client.run(time.process_time).values())


def _median(values):
    return statistics.median(values) if values else None


def main(argv=None) -> dict:
    args = parse_args(argv)
    from inference.app.study.runner import require_distributed

    require_distributed()
    info = machine()
    print(f"machine: {info['usable_cpus']} usable cores, load {info['load_average']}, "
          f"dask {info['dask']}", flush=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ppl-zoo-study-bench-") as tmp:
        folder = Path(tmp)
        cache = str(folder / "jax-cache")
        quick = speedup(args, cache, folder)
        synth = synthetic(args, cache, folder)
    one = _median([r["rows_s"] for r in quick["runs"][1]])
    two = _median([r["rows_s"] for r in quick["runs"][2]])
    one_total = _median([r["total_s"] for r in quick["runs"][1]])
    two_total = _median([r["total_s"] for r in quick["runs"][2]])
    serial, d1, d2 = (_median(synth["times"][k]) for k in ("serial", "dask1", "dask2"))
    overhead = (d1 - serial) / serial
    cpu_serial, cpu_d1 = (_median(synth["cpu_seconds"][k]) for k in ("serial", "dask1"))
    cpu_overhead = (cpu_d1 - cpu_serial) / cpu_serial
    quick_cores = {w: _median([r["cores_obtained"] for r in quick["runs"][w]]) for w in (1, 2)}
    quick_cpu = {w: _median([r["worker_cpu_s"] for r in quick["runs"][w]]) for w in (1, 2)}
    rows = [
        {"method": "quick study, 2 workers", "peer": "1 worker",
         "size": f"{quick['rows']} rows (rows only)", "seconds": two, "peer_seconds": one,
         "ratio": one / two, "goal": f">= {SPEEDUP_GOAL}x", "goal_met": one / two >= SPEEDUP_GOAL,
         "cores_obtained": quick_cores[2], "peer_cores_obtained": quick_cores[1],
         "worker_cpu_s": quick_cpu[2], "peer_worker_cpu_s": quick_cpu[1]},
        {"method": "quick study, 2 workers", "peer": "1 worker",
         "size": f"{quick['rows']} rows (with cluster start)", "seconds": two_total,
         "peer_seconds": one_total, "ratio": one_total / two_total, "goal": None,
         "goal_met": None},
        {"method": "synthetic rows, 2 workers", "peer": "1 worker",
         "size": f"{synth['rows']} rows of ~{args.row_seconds:g} s", "seconds": d2,
         "peer_seconds": d1, "ratio": d1 / d2, "goal": f">= {SPEEDUP_GOAL}x",
         "goal_met": d1 / d2 >= SPEEDUP_GOAL,
         "cores_obtained": _median(synth["cores_obtained"]["dask2"]),
         "peer_cores_obtained": _median(synth["cores_obtained"]["dask1"])},
        {"method": "Dask, 1 worker", "peer": "serial, in-process",
         "size": f"{synth['rows']} rows of ~{args.row_seconds:g} s", "seconds": d1,
         "peer_seconds": serial, "ratio": serial / d1,
         "overhead_per_row_s": (d1 - serial) / synth["rows"], "overhead_percent": 100 * overhead,
         "goal": f"overhead < {100 * OVERHEAD_GOAL:g}%", "goal_met": overhead < OVERHEAD_GOAL},
        {"method": "Dask, 1 worker (CPU s)", "peer": "serial, in-process",
         "size": f"{synth['rows']} rows of ~{args.row_seconds:g} s", "seconds": cpu_d1,
         "peer_seconds": cpu_serial, "ratio": cpu_serial / cpu_d1,
         "overhead_per_row_s": (cpu_d1 - cpu_serial) / synth["rows"],
         "overhead_percent": 100 * cpu_overhead,
         "goal": f"overhead < {100 * OVERHEAD_GOAL:g}%", "goal_met": cpu_overhead < OVERHEAD_GOAL},
    ]
    print()
    print(f"{'case':<28s}{'size':<32s}{'ours (s)':>10s}{'peer (s)':>10s}  ratio / overhead  goal")
    for r in rows:
        extra = (f"{r['overhead_percent']:+.1f}% ({r['overhead_per_row_s'] * 1e3:+.0f} ms/row)"
                 if "overhead_percent" in r else f"{r['ratio']:.2f}x")
        goal = "" if r["goal"] is None else \
            f"{r['goal']}: {'met' if r['goal_met'] else 'NOT met'}"
        print(f"{r['method'] + ' / ' + r['peer']:<28.28s}{r['size']:<32s}{r['seconds']:>10.2f}"
              f"{r['peer_seconds']:>10.2f}  {extra:<17s} {goal}")
    obtained = {k: _median(v) for k, v in synth["cores_obtained"].items()}
    print(f"quick study: the workers used {quick_cpu[1]:.1f} CPU s with 1 worker and "
          f"{quick_cpu[2]:.1f} with 2 (each worker traces the families' programs on its "
          f"first rows), and obtained {quick_cores[1]:.2f} and {quick_cores[2]:.2f} cores")
    print("cores obtained by the synthetic rows (CPU seconds of the computing processes per "
          "wall second): " + ", ".join(f"{k} {v:.2f}" for k, v in obtained.items())
          + f"; load average {os.getloadavg()[0]:.1f} on {info['usable_cpus']} cores")
    elapsed = time.perf_counter() - start
    print(f"({elapsed:.0f} s; the quick study's first, cache-filling run with 2 workers took "
          f"{quick['cold_two_workers_s']:.1f} s)")
    output = {"benchmark": "study_scaling", "quick": args.quick, "repeats": args.repeats,
              "machine": {**info, "load_average_end": list(os.getloadavg())},
              "rows": rows, "quick_study": quick, "synthetic": synth, "seconds": elapsed}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(output, indent=2) + "\n")
    print(f"wrote {args.output}")
    return output


if __name__ == "__main__":
    main()
