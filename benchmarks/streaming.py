"""Benchmark: streaming EM over a memory-mapped file against the in-memory fit.

Full-covariance EM (Xu (1995), sec. 4, eq. 17-18; ``mode="stochastic",
covariance="full", prune=False``) with k components on N examples of d
float32 columns stored in a ``np.memmap`` file in a temporary directory
(default N = 2,000,000, d = 16, k = 16: 128 MB on disk), fitted two ways on
the same data, from the same start, with the same number of iterations:

* ours: :func:`inference.mixture.stream.fit_mixture_stream` reading the memmap in
  batches of ``--batch-size`` rows (default 200,000: 12.8 MB per batch, a tenth
  of the file);
* peer: :func:`inference.mixture.em.fit_mixture` with the whole array loaded
  (``np.load`` of the file into memory, then the public call), the in-memory
  fit that streaming replaces.

Each side runs in its own subprocess (``--child``), so that its peak resident
memory is its own (``VmHWM`` of /proc/self/status, which starts afresh at
``exec``; ``getrusage``'s ``ru_maxrss`` would carry over the forking parent's
peak): the table gives the peak after the imports and JAX's start (``base``),
the peak at the end, and the growth between them, against the batch's and the
file's sizes, plus the resident anonymous and file-mapped memory at the end
(file-mapped: shared libraries and the memmap's pages, which the kernel can
drop at any time). Compilation alone grows a process by about 200 MB.

Timing: in each child one cold call (compilation included), then ``--repeats``
warm calls of ``--iterations`` EM iterations and ``--repeats`` warm calls of
one iteration, median and [min-max]. A fit with I iterations makes I + 2 passes
over the data when streaming (statistics, I EM passes, criteria; the
cancellation fallback never fires on this data, checked from the pass count),
so the time of one EM pass is (T(I) - T(1)) / (I - 1) and T(1) is the fixed
cost (first pass, one EM pass, criteria). The same difference is reported for
the in-memory fit (one EM iteration over features kept in memory).

Throughput: an EM pass is two GEMMs of the
(N, p) quadratic features (p = d (d + 3) / 2 + 1 = 153) with k columns, the
E-step's log-joint and the M-step's statistics, 4 N p k FLOPs nominal
(feature construction, log-sum-exp and the M-step neglected), reported as
GFLOP/s against a plain jitted (B, p) @ (p, k) float32 product of one batch's
size in the same child; and the pass's reading rate of the file (GB/s)
against a plain pass summing the memmap's batches with numpy.

Quality, on one yardstick: the mean log-likelihood per example of each fit's
final parameters, evaluated over the file in float64 numpy by this script
(``loglik64``; the fits' own L_stocha, evaluated in float32 by the
quadratic-feature GEMM, are printed beside it and are off by up to 1e-3
relative on this data). The fits agree when within ``RTOL`` = 1e-3 relative:
float32 EM trajectories part at that level whatever the grouping of the sums.

Writes the table as JSON to ``--output`` (default
``benchmarks/results/streaming.json``); ``--quick`` runs N = 400,000 with
batches of 40,000 (about a minute).

References
----------
L. Xu, "YING-YANG machine: a Bayesian-Kullback scheme for unified learnings and new
results on vector quantization", Proceedings of the International Conference on Neural
Information Processing (ICONIP'95), 1995, sec. 4.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO_ROOT))

DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "streaming.json"
#: Agreement of the two fits' float64 log-likelihoods. Both fits evaluate the log-joint in
#: float32 by the quadratic-feature GEMM, which loses about 3 digits on this data (their
#: own L_stocha differ from the float64 value by 1e-4 to 1e-3 relative, measured), so
#: their EM trajectories part at that level.
RTOL = 1e-3


def parse_args(argv=None) -> argparse.Namespace:
    """Parse the command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="N = 400,000, batches of 40,000, 1 repeat")
    parser.add_argument("--num-examples", type=int, default=None,
                        help="N (default 2,000,000; 400,000 with --quick)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="rows per batch (default N / 10)")
    parser.add_argument("--dim", type=int, default=16, help="d (default 16)")
    parser.add_argument("--num-components", type=int, default=16, help="k (default 16)")
    parser.add_argument("--iterations", type=int, default=4,
                        help="EM iterations of the timed fits (default 4)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="warm calls per timing (default 3; 1 with --quick)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and the start")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="JSON output path")
    parser.add_argument("--child", choices=["stream", "memory"], help=argparse.SUPPRESS)
    parser.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.num_examples is None:
        args.num_examples = 400_000 if args.quick else 2_000_000
    if args.batch_size is None:
        args.batch_size = max(1, args.num_examples // 10)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    return args


def write_data(path: Path, num: int, dim: int, k: int, seed: int, chunk: int = 200_000):
    """A planted mixture of k full-covariance Gaussians, float32, written chunk by chunk.

    Centres N(0, 4^2 I), covariances A A^T / d + 0.1 I with A standard normal, equal
    weights; rows in random order (so that the first batch is representative).
    Returns the start: k distinct rows drawn by ``seed``.
    """
    rng = np.random.default_rng(seed)
    centres = 4.0 * rng.normal(size=(k, dim))
    a = rng.normal(size=(k, dim, dim))
    factors = np.linalg.cholesky(a @ a.transpose(0, 2, 1) / dim + 0.1 * np.eye(dim))
    stored = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(num, dim))
    for start in range(0, num, chunk):
        rows = min(chunk, num - start)
        labels = rng.integers(0, k, rows)
        noise = rng.normal(size=(rows, dim))
        stored[start:start + rows] = centres[labels] + np.einsum("nij,nj->ni", factors[labels],
                                                                 noise)
    stored.flush()
    del stored
    mapped = np.load(path, mmap_mode="r")
    return np.asarray(mapped[np.sort(rng.choice(num, k, replace=False))], np.float64)


def _status_mb(field: str) -> float | None:
    """A field of /proc/self/status in MB (Linux), or None."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def _peak_mb() -> float:
    """Peak resident memory of this process so far, MB.

    ``VmHWM`` of /proc/self/status where there is one: the high-water mark of this
    process's own address space, which starts afresh at ``exec``. (``ru_maxrss`` of
    ``getrusage`` keeps the value the forking parent had reached, so a child's
    baseline would be the parent's peak; it is the fallback elsewhere.)
    """
    peak = _status_mb("VmHWM")
    return peak if peak is not None else resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _timed(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return result, times


def _summary(times):
    return {"median_s": float(np.median(times)), "min_s": float(np.min(times)),
            "max_s": float(np.max(times)), "times_s": [float(t) for t in times]}


def child(args) -> dict:
    """One side of the comparison, in its own process: prints one JSON line."""
    import warnings

    import jax
    import jax.numpy as jnp

    from inference.engine import streaming as engine_streaming
    from inference.mixture import stream as streaming
    from inference.mixture.em import fit_mixture
    from ppl_models.diagnostics import ConvergenceWarning

    jnp.zeros(1).block_until_ready()  # JAX's start in the base
    base = _peak_mb()
    start = np.load(args.path.with_suffix(".start.npy"))
    kwargs = dict(mode="stochastic", covariance="full", prune=False, init_means=start, tol=0.0)
    out = {"side": args.child, "base_peak_mb": base}
    passes = []
    if args.child == "stream":
        mapped = np.load(args.path, mmap_mode="r")
        counter = engine_streaming.Pass.__iter__

        def counting(self):
            passes.append(1)
            return counter(self)

        engine_streaming.Pass.__iter__ = counting

        def fit(iterations):
            return streaming.fit_mixture_stream(mapped, args.num_components,
                                                batch_size=args.batch_size,
                                                max_iterations=iterations, **kwargs)
    else:
        loaded = np.load(args.path)  # the whole file in memory

        def fit(iterations):
            return fit_mixture(loaded, args.num_components, max_iterations=iterations,
                               **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # tol=0: never converged
        cold_start = time.perf_counter()
        result = fit(args.iterations)
        out["cold_s"] = time.perf_counter() - cold_start
        fit(1)  # compile nothing new, but warm the one-iteration path too
        passes.clear()
        result, long_times = _timed(lambda: fit(args.iterations), args.repeats)
        out["passes_per_fit"] = len(passes) / args.repeats + (args.child == "stream")
        _, short_times = _timed(lambda: fit(1), args.repeats)
    out["peak_mb"] = _peak_mb()
    # Now (not peak): anonymous memory, and file pages mapped and resident (the memmap's
    # page cache: counted in the peak, but reclaimable by the kernel at any time).
    out["rss_anon_mb"], out["rss_file_mb"] = _status_mb("RssAnon"), _status_mb("RssFile")
    out["fit"] = _summary(long_times)
    out["fit_one_iteration"] = _summary(short_times)
    out["em_pass_s"] = (float(np.median(long_times)) - float(np.median(short_times))) / max(
        args.iterations - 1, 1)
    out["L_stocha"] = result.L_stocha
    for name in ("weights", "means", "covariances"):
        out[name] = np.asarray(getattr(result, name), np.float64).tolist()
    out["num_iterations"] = result.num_iterations
    # References of this process: a plain product of one batch's features' size, and a
    # plain pass over the file summing its batches.
    width = args.dim * (args.dim + 3) // 2 + 1
    a = jnp.ones((args.batch_size, width), jnp.float32)
    b = jnp.ones((width, args.num_components), jnp.float32)
    matmul = jax.jit(lambda a, b: a @ b)
    matmul(a, b).block_until_ready()
    _, mm_times = _timed(lambda: matmul(a, b).block_until_ready(), 5)
    out["matmul_gflops"] = 2 * args.batch_size * width * args.num_components / np.median(
        mm_times) / 1e9
    mapped = np.load(args.path, mmap_mode="r")

    def read_pass():
        return sum(float(np.sum(mapped[i:i + args.batch_size], dtype=np.float64))
                   for i in range(0, mapped.shape[0], args.batch_size))

    _, read_times = _timed(read_pass, 3)
    out["read_pass_s"] = float(np.median(read_times))
    return out


def run_child(side: str, args, path: Path) -> dict:
    """``child`` in a fresh interpreter; returns its JSON line."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", side, "--path",
               str(path), "--num-examples", str(args.num_examples), "--batch-size",
               str(args.batch_size), "--dim", str(args.dim), "--num-components",
               str(args.num_components), "--iterations", str(args.iterations), "--repeats",
               str(args.repeats)]
    done = subprocess.run(command, capture_output=True, text=True, check=False,
                          env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    if done.returncode != 0:
        return {"side": side, "error": done.stderr[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def mean_log_likelihood(path: Path, weights, means, covariances, chunk: int = 100_000):
    """The mixture's mean log-likelihood per example over the file, in float64 numpy."""
    weights, means = np.asarray(weights), np.asarray(means)
    tril = np.linalg.cholesky(np.asarray(covariances))
    dim = means.shape[1]
    constant = (np.log(weights) - np.sum(np.log(np.diagonal(tril, axis1=1, axis2=2)), 1)
                - 0.5 * dim * np.log(2 * np.pi))
    mapped = np.load(path, mmap_mode="r")
    total = 0.0
    for start in range(0, mapped.shape[0], chunk):
        x = np.asarray(mapped[start:start + chunk], np.float64)
        white = [np.linalg.solve(t, (x - m).T) for t, m in zip(tril, means, strict=True)]
        log_joint = constant - 0.5 * np.stack([np.sum(w * w, 0) for w in white], 1)
        top = np.max(log_joint, 1, keepdims=True)
        total += float(np.sum(top[:, 0] + np.log(np.sum(np.exp(log_joint - top), 1))))
    return total / mapped.shape[0]


def format_table(rows, args) -> str:
    """The comparison as text."""
    file_mb = args.num_examples * args.dim * 4 / 1e6
    batch_mb = args.batch_size * args.dim * 4 / 1e6
    flops = 4 * args.num_examples * (args.dim * (args.dim + 3) // 2 + 1) * args.num_components
    header = (f"{'side':<8}{'cold s':>9}{'fit s (I=' + str(args.iterations) + ')':>22}"
              f"{'EM pass s':>11}{'GFLOP/s':>9}{'mm GF/s':>9}{'GB/s':>7}{'read GB/s':>10}"
              f"{'base MB':>9}{'peak MB':>9}{'growth':>8}{'anon':>7}{'file':>6}{'L_stocha':>11}"
              f"{'loglik64':>11}")
    lines = [header, "-" * len(header)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['side']:<8} failed: {r['error'].splitlines()[-1]}")
            continue
        fit = r["fit"]
        spread = f"{fit['median_s']:.2f} [{fit['min_s']:.2f}-{fit['max_s']:.2f}]"
        rate = flops / r["em_pass_s"] / 1e9 if r["em_pass_s"] > 0 else float("nan")
        gbs = file_mb / 1e3 / r["em_pass_s"] if r["em_pass_s"] > 0 else float("nan")
        lines.append(f"{r['side']:<8}{r['cold_s']:>9.2f}{spread:>22}{r['em_pass_s']:>11.3f}"
                     f"{rate:>9.1f}{r['matmul_gflops']:>9.1f}{gbs:>7.2f}"
                     f"{file_mb / 1e3 / r['read_pass_s']:>10.2f}{r['base_peak_mb']:>9.0f}"
                     f"{r['peak_mb']:>9.0f}{r['peak_mb'] - r['base_peak_mb']:>8.0f}"
                     f"{r['rss_anon_mb'] or float('nan'):>7.0f}"
                     f"{r['rss_file_mb'] or float('nan'):>6.0f}"
                     f"{r['L_stocha']:>11.5f}{r.get('log_likelihood', np.nan):>11.5f}")
    lines.append(f"file {file_mb:.0f} MB, batch {batch_mb:.1f} MB "
                 f"({args.batch_size} rows), features of all rows "
                 f"{file_mb * (args.dim * (args.dim + 3) // 2 + 1) / args.dim:.0f} MB")
    return "\n".join(lines)


def main(argv=None) -> dict:
    """Run the benchmark (module docstring); returns the results written as JSON."""
    args = parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return {}
    from benchmarks.association_exact import machine_info
    from inference.engine.reporting import jsonable

    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.npy"
        start = write_data(path, args.num_examples, args.dim, args.num_components, args.seed)
        np.save(path.with_suffix(".start.npy"), start)
        rows = [run_child("stream", args, path), run_child("memory", args, path)]
        ok = all("error" not in r for r in rows)
        agree = None
        if ok:  # quality on one yardstick: float64 log-likelihood of each fit's parameters
            for r in rows:
                params = [np.asarray(r.pop(name)) for name in ("weights", "means",
                                                               "covariances")]
                r["smallest_eigenvalue"] = float(np.min(np.linalg.eigvalsh(params[2])))
                r["log_likelihood"] = (mean_log_likelihood(path, *params)
                                       if r["smallest_eigenvalue"] > 0 else float("nan"))
            stream, memory = rows
            agree = {"log_likelihood_rel": abs(stream["log_likelihood"]
                                               - memory["log_likelihood"])
                     / abs(memory["log_likelihood"])}
            agree["agree"] = agree["log_likelihood_rel"] <= RTOL
    print(f"Streaming EM (full covariances), N {args.num_examples}, d {args.dim}, "
          f"k {args.num_components}, float32, {args.iterations} iterations, "
          f"{args.repeats} warm repeat(s)")
    print("stream = fit_mixture_stream over a np.memmap; memory = fit_mixture on the loaded "
          "array; each in its own process")
    print("EM pass s = (T(I) - T(1)) / (I - 1); GFLOP/s at 4 N p k per pass; mm = plain "
          "(batch, p) @ (p, k) product; GB/s = file size / EM pass; read = a numpy sum pass")
    print("memory: peak resident MB (VmHWM) after JAX's start (base) and at the end; anon / "
          "file = resident anonymous / file-mapped MB at the end (file: the memmap's pages)")
    print(format_table(rows, args))
    if agree is not None:
        print(f"quality (float64 mean log-likelihood of the final parameters): stream "
              f"{rows[0]['log_likelihood']:.6f}, memory {rows[1]['log_likelihood']:.6f}, "
              f"{agree['log_likelihood_rel']:.1e} relative "
              f"({'agree' if agree['agree'] else 'DISAGREE'} within {RTOL:g}); streaming made "
              f"{rows[0]['passes_per_fit']:.0f} passes per fit of {args.iterations} iterations")
    results = {"benchmark": "streaming",
               "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                        if k not in ("child", "path")},
               "machine": machine_info(), "rows": rows, "quality": agree,
               "elapsed_s": time.perf_counter() - began}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(jsonable(results), indent=2))
    print(f"({results['elapsed_s']:.0f} s) wrote {args.output}")
    return results


if __name__ == "__main__":
    main()
