"""Benchmark: exact association, ours against NumPyro's ``infer_discrete``.

Compares, in one run, on the same planted GVQ data, dtype and machine:

* ours: ``inference.associate(features, x, method="exact", check=False)``, the
  exhaustive search over the 2^n states through the quadratic form of the
  energy (Westerdijk, Barber and Wiegerinck (2001), sec. 3.1, eq. 2;
  :mod:`inference.association.core`);
* peer: ``inference.gvq.baselines.map_associate(features, x, noise=...)``,
  NumPyro's generic ``infer_discrete(temperature=0)`` (max-product over the
  enumerated units) on the same GVQ program, as shipped;
* the jitted cores of both, without the wrappers' input validation:
  ``inference.association.core._associate_jit`` and
  ``inference.gvq.baselines._map_states`` (the ``infer_discrete`` decode
  plus the energy of the decoded states), i.e. each method at its best.
  The goal is judged on the ratio of the cores.

For each number of features n (``--sizes``) it reports the first-call
(compile) time, the median and min-max of the time per example over
``--repeats`` warm calls (the methods interleaved, so that machine noise hits
them alike), the ratio peer / ours, and the quality: the fraction of examples
on which both methods return the same state and the mean energy
||x - s @ F||^2 of each (speed at unequal quality is not a result). At the
largest size it adds a throughput reference:
GFLOP/s of our search against a plain jitted matmul of the same shape, and
GB/s of ``jnp.min`` / ``jnp.argmin`` over the (num_examples, 2^n) energy
block against which the search's reduction can be judged.

Goal: at n = 10 ours is at least 5x faster than NumPyro's
``infer_discrete``. The footer says whether the measured ratio meets it; it
is not asserted (benchmarks are not tests).

The number of examples per size keeps the peer's enumerated tensor of
2^n x num_examples x dim floats below ``--max-elements`` (default 2e8), with
at most 1000 and at least 8 examples (``--num-examples`` overrides).

Run::

    python benchmarks/association_exact.py            # n = 4..16, ~1-2 min on 2 cores
    python benchmarks/association_exact.py --quick    # n = 4..10, 3 repeats

The table is printed and written as JSON to ``--output``
(default ``benchmarks/results/association_exact.json``).

References
----------
M. Westerdijk, D. Barber and W. Wiegerinck, "Deterministic generative models for fast
feature discovery", Data Mining and Knowledge Discovery 5(4), 2001, sec. 3.1.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO_ROOT))

from inference import associate  # noqa: E402
from inference.association.core import _associate_jit  # noqa: E402
from inference.gvq.baselines import map_associate  # noqa: E402
from inference.gvq.baselines_association import _map_states  # noqa: E402
from ppl_models import gvq  # noqa: E402

#: Goal: at n = GOAL_SIZE ours is at least GOAL_RATIO x faster.
GOAL_SIZE = 10
GOAL_RATIO = 5.0
DEFAULT_SIZES = (4, 6, 8, 10, 12, 14, 16)
QUICK_SIZES = (4, 6, 8, 10)
DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "association_exact.json"


def parse_args(argv=None) -> argparse.Namespace:
    """Parse the command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=None,
                        help=f"numbers of features n (default {' '.join(map(str, DEFAULT_SIZES))})")
    parser.add_argument("--repeats", type=int, default=None,
                        help="warm timed calls per method and size (default 5; 3 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help=f"sizes {' '.join(map(str, QUICK_SIZES))} and 3 repeats")
    parser.add_argument("--dim", type=int, default=16, help="data dimension (default 16)")
    parser.add_argument("--num-examples", type=int, default=None,
                        help="examples per size (default: from --max-elements, 8..1000)")
    parser.add_argument("--max-elements", type=float, default=2e8,
                        help="bound on 2^n * num_examples * dim, the peer's enumerated tensor")
    parser.add_argument("--sigma", type=float, default=0.1,
                        help="observation noise of the program while the peer decodes")
    parser.add_argument("--noise-scale", type=float, default=0.1,
                        help="noise of the planted data (default 0.1)")
    parser.add_argument("--seed", type=int, default=0, help="data seed")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON output path")
    args = parser.parse_args(argv)
    if args.sizes is None:
        args.sizes = list(QUICK_SIZES if args.quick else DEFAULT_SIZES)
    if args.repeats is None:
        args.repeats = 3 if args.quick else 5
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1; got {args.repeats}")
    if min(args.sizes) < 1:
        parser.error(f"--sizes must be positive; got {args.sizes}")
    return args


def default_num_examples(num_features: int, dim: int, max_elements: float,
                         maximum: int = 1000, minimum: int = 8) -> int:
    """Examples per size so that 2^n * num_examples * dim <= ``max_elements``.

    Parameters
    ----------
    num_features, dim : int
        n and the data dimension.
    max_elements : float
        Bound on the peer's enumerated tensor (floats).
    maximum, minimum : int
        Clip range of the result.

    Returns
    -------
    int
    """
    fit = int(max_elements // ((1 << num_features) * dim))
    return int(min(maximum, max(minimum, fit)))


def machine_info() -> dict:
    """Versions, devices and CPU count of this run."""
    import funsor
    import numpyro

    try:
        usable_cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable_cpus = os.cpu_count()
    return {
        "jax": jax.__version__,
        "numpyro": numpyro.__version__,
        "funsor": funsor.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor(),
        "devices": [str(d) for d in jax.devices()],
        "backend": jax.default_backend(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable_cpus,
        "x64": bool(jax.config.jax_enable_x64),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


def _timed(fn):
    """Seconds taken by ``fn()``, blocking on all of its result.

    Blocking on ``states`` alone would let the peer's energy evaluation, which
    is dispatched after its states, run on into the next timed call.
    """
    start = time.perf_counter()
    out = fn()
    jax.block_until_ready(out)
    return time.perf_counter() - start, out


def _summary(seconds, num_examples: int) -> dict:
    """Median, min and max time per example in microseconds."""
    per_example = np.asarray(seconds) / num_examples * 1e6
    return {"median_us": float(np.median(per_example)), "min_us": float(per_example.min()),
            "max_us": float(per_example.max()), "seconds": [float(s) for s in seconds]}


def bench_size(num_features: int, args: argparse.Namespace) -> dict:
    """Time and compare the methods at one number of features.

    Returns
    -------
    dict
        One row of the table (timings in microseconds per example).
    """
    num_examples = args.num_examples or default_num_examples(
        num_features, args.dim, args.max_elements)
    data = gvq.generate_planted(jax.random.key(args.seed), num_examples, num_features, args.dim,
                                noise_scale=args.noise_scale)
    features, x = data.features, data.x
    sigma = jnp.asarray(args.sigma, x.dtype)
    methods = {
        "ours": lambda: associate(features, x, method="exact", check=False),
        "peer": lambda: map_associate(features, x, noise=args.sigma),
        # The jitted cores that the two wrappers call, alone.
        "ours_core": lambda: _associate_jit(features, x, None, {}, None, method="exact",
                                            model=gvq.model, latent="s", static_kwargs=(),
                                            options=()),
        "peer_core": lambda: _map_states(features, x, sigma, {}, model=gvq.model,
                                         static_kwargs=()),
    }
    compile_s, results = {}, {}
    for name, fn in methods.items():  # the cores are compiled by the wrappers' first calls
        compile_s[name], results[name] = _timed(fn)
    times = {name: [] for name in methods}
    for _ in range(args.repeats):  # interleaved, so that noise hits all methods alike
        for name, fn in methods.items():
            times[name].append(_timed(fn)[0])

    ours, peer = results["ours"], results["peer"]
    same = np.all(np.asarray(ours.states) == np.asarray(peer.states), axis=1)
    gap = np.asarray(peer.energy) - np.asarray(ours.energy)
    row = {
        "num_features": num_features,
        "num_examples": num_examples,
        "dim": args.dim,
        "compile_s": {k: float(v) for k, v in compile_s.items()},
        "timing": {name: _summary(t, num_examples) for name, t in times.items()},
        "agreement": float(same.mean()),
        "core_agreement": float(np.mean(np.all(
            np.asarray(results["peer_core"][0]) == np.asarray(results["ours_core"].states),
            axis=1))),
        "mean_energy_ours": float(np.mean(ours.energy)),
        "mean_energy_peer": float(np.mean(peer.energy)),
        "max_energy_gap_peer_minus_ours": float(gap.max()),
        "min_energy_gap_peer_minus_ours": float(gap.min()),
        "planted_agreement_ours": float(np.mean(np.all(
            np.asarray(ours.states) == np.asarray(data.states), axis=1))),
    }
    timing = row["timing"]
    row["ratio_peer_over_ours"] = timing["peer"]["median_us"] / timing["ours"]["median_us"]
    row["ratio_core"] = timing["peer_core"]["median_us"] / timing["ours_core"]["median_us"]
    return row


def _median_seconds(fn, repeats: int) -> float:
    jax.block_until_ready(fn())  # compile
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        seconds.append(time.perf_counter() - start)
    return float(np.median(seconds))


def throughput_reference(row: dict, repeats: int) -> dict:
    """Achieved GFLOP/s of our search against plain jitted references of the same shape.

    Our search costs about num_examples * 2^n * (n + 2) multiply-adds (h @ S^T,
    the quadratic term and the comparison) plus 2^n * n^2 for the
    example-independent S W S^T of the chunks. The arithmetic reference is the
    matmul (num_examples, n + 2) @ (n + 2, 2^n); the memory references are
    ``jnp.min`` and ``jnp.argmin`` over a (num_examples, 2^n) block, the
    reduction every exhaustive search ends with.
    """
    n, num_examples = row["num_features"], row["num_examples"]
    num_states = 1 << n
    ours_s = row["timing"]["ours"]["median_us"] * num_examples * 1e-6
    ours_flops = 2.0 * (num_examples * num_states * (n + 2) + num_states * n * n)
    key_a, key_b, key_e = jax.random.split(jax.random.key(1), 3)
    a = jax.random.normal(key_a, (num_examples, n + 2), jnp.float32)
    b = jax.random.normal(key_b, (n + 2, num_states), jnp.float32)
    block = jax.random.normal(key_e, (num_examples, num_states), jnp.float32)
    matmul = jax.jit(jnp.matmul)
    reduce_min = jax.jit(lambda e: jnp.min(e, axis=1))
    reduce_argmin = jax.jit(lambda e: jnp.argmin(e, axis=1))
    matmul_s = _median_seconds(lambda: matmul(a, b), repeats)
    min_s = _median_seconds(lambda: reduce_min(block), repeats)
    argmin_s = _median_seconds(lambda: reduce_argmin(block), repeats)
    matmul_flops = 2.0 * num_examples * (n + 2) * num_states
    block_bytes = float(block.size * block.dtype.itemsize)
    return {
        "num_features": n,
        "num_examples": num_examples,
        "ours_seconds": ours_s,
        "ours_gflops": ours_flops / ours_s / 1e9,
        "matmul_shape": [num_examples, n + 2, num_states],
        "matmul_seconds": matmul_s,
        "matmul_gflops": matmul_flops / matmul_s / 1e9,
        "ours_fraction_of_matmul": (ours_flops / ours_s) / (matmul_flops / matmul_s),
        "min_seconds": min_s,
        "min_gbps": block_bytes / min_s / 1e9,
        "argmin_seconds": argmin_s,
        "argmin_gbps": block_bytes / argmin_s / 1e9,
    }


def _spread(timing: dict) -> str:
    return (f"{timing['median_us']:9.2f} [{timing['min_us']:.2f}-{timing['max_us']:.2f}]")


def format_table(rows: list[dict]) -> str:
    """The printed table: one line per size."""
    header = (f"{'n':>3} {'N':>5} | {'ours c.s':>8} {'ours us/ex med [min-max]':>28} "
              f"{'ours core':>28} | {'peer c.s':>8} {'peer us/ex med [min-max]':>28} "
              f"{'peer core':>28} | {'ratio':>6} {'core':>6} | "
              f"{'agree':>6} {'E ours':>9} {'E peer':>9}")
    lines = [header, "-" * len(header)]
    for r in rows:
        t, c = r["timing"], r["compile_s"]
        lines.append(
            f"{r['num_features']:>3} {r['num_examples']:>5} | {c['ours']:>8.2f} "
            f"{_spread(t['ours']):>28} {_spread(t['ours_core']):>28} | {c['peer']:>8.2f} "
            f"{_spread(t['peer']):>28} {_spread(t['peer_core']):>28} | "
            f"{r['ratio_peer_over_ours']:>6.2f} {r['ratio_core']:>6.2f} | {r['agreement']:>6.3f} "
            f"{r['mean_energy_ours']:>9.4f} {r['mean_energy_peer']:>9.4f}")
    return "\n".join(lines)


def goal_verdict(rows: list[dict]) -> dict:
    """Whether the goal (ours >= 5x faster at n = 10) is met, from the measured ratios."""
    row = next((r for r in rows if r["num_features"] == GOAL_SIZE), None)
    if row is None:
        return {"measured": False, "text": f"Goal: n = {GOAL_SIZE} not in --sizes; not measured."}
    peer, core = row["ratio_peer_over_ours"], row["ratio_core"]
    verdict = {"measured": True, "size": GOAL_SIZE, "required_ratio": GOAL_RATIO,
               "ratio_peer_over_ours": peer, "ratio_core": core,
               "met": core >= GOAL_RATIO}
    verdict["text"] = (
        f"Goal: at n = {GOAL_SIZE} ours >= {GOAL_RATIO:g}x faster than infer_discrete. "
        f"Jitted cores: {core:.2f}x ({'MET' if core >= GOAL_RATIO else 'NOT met'}); "
        f"wrappers with validation (associate vs map_associate): {peer:.2f}x.")
    return verdict


def main(argv=None) -> dict:
    """Run the benchmark, print the table and write the JSON; return the results."""
    args = parse_args(argv)
    info = machine_info()
    print(f"jax {info['jax']} numpyro {info['numpyro']} on {info['backend']} "
          f"{info['devices']}, {info['usable_cpus']}/{info['cpu_count']} CPUs; "
          f"dim {args.dim}, sigma {args.sigma}, repeats {args.repeats}", flush=True)
    rows = []
    for num_features in args.sizes:
        rows.append(bench_size(num_features, args))
        r = rows[-1]
        print(f"  n = {num_features}: ours {r['timing']['ours']['median_us']:.2f} us/ex, "
              f"peer {r['timing']['peer']['median_us']:.2f} us/ex", flush=True)
    largest = max(rows, key=lambda r: r["num_features"])
    reference = throughput_reference(largest, args.repeats)
    verdict = goal_verdict(rows)

    print()
    print("Exact association, time per example (us); c.s = first call incl. compile (s);")
    print("ours = associate(method='exact'), peer = map_associate (infer_discrete,")
    print("temperature=0), both with input validation; core = the jitted function each calls;")
    print("ratio = peer/ours (wrappers), core = peer core/ours core; agree = fraction of")
    print("examples with identical states; E = mean ||x - s F||^2.")
    print(format_table(rows))
    print()
    print(f"Throughput at n = {reference['num_features']}, N = {reference['num_examples']}: "
          f"ours {reference['ours_gflops']:.2f} GFLOP/s vs plain matmul "
          f"{tuple(reference['matmul_shape'])} {reference['matmul_gflops']:.2f} GFLOP/s "
          f"({100 * reference['ours_fraction_of_matmul']:.1f}%); reduction over the "
          f"(N, 2^n) block: jnp.min {reference['min_gbps']:.2f} GB/s, "
          f"jnp.argmin {reference['argmin_gbps']:.2f} GB/s.")
    print(verdict["text"])

    results = {
        "benchmark": "association_exact",
        "goal": f"at n = {GOAL_SIZE} ours is at least {GOAL_RATIO:g}x faster than "
                "NumPyro's infer_discrete (map_associate)",
        "machine": info,
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "rows": rows,
        "throughput": reference,
        "goal_result": verdict,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.output}")
    return results


if __name__ == "__main__":
    main()
