"""Benchmark: MCVQ variational EM against NumPyro SVI, and the scaling of one EM iteration.

The model and its variational EM are those of Ross and Zemel (2003)
(``ppl_models/mcvq.py``); every peer runs at its best, in the same run, on the same
machine.

(a) Race to equal quality, same program, data, start, dtype (float32) and
machine. Data: a planted MCVQ (:func:`ppl_models.mcvq.generate`, N examples,
D dimensions, K VQs of J states, means ~ Normal(0, 3), noise 0.3). Every
learner fits ``ppl_models.mcvq.model`` (r and s per example, uniform
selection priors) with K VQs of J states, the same variance floor and the
same start (:func:`inference.mcvq.em.init` with one key):

* ours: :func:`inference.fit_mcvq` (one start), the paper's schedule (T
  annealed linearly from N - 1 to 1 over half the iterations, then held) and
  the constant T = N (the program's own free energy F_N); up to
  ``--em-iterations``, stopping at its default ``tol``; and the paper's
  schedule with ``--restarts`` starts run side by side (``num_restarts``, the
  lowest final F_1 kept; the peers keep the single start from the key);
* peers (:mod:`inference.mcvq.baselines`): SVI with ``TraceEnum_ELBO``, r and s
  enumerated (loss = -log p(X | mu, sigma), exactly), and SVI with the
  paper's mean-field guide enumerated (loss = F_N, exactly); Adam, cosine
  decay over ``--svi-steps`` steps, all steps in one jitted ``lax.scan``.

Quality is measured on the same scale for both sides of a pair, and exactly
(no sampling): the *log-likelihood* scale is the mean training log-likelihood
(1/N) log p(X | mu, sigma) with r and s summed out
(:func:`inference.mcvq.baselines.exact_log_likelihood`; for the enumerated
SVI it is minus its loss); the *ELBO* scale is -F_N / N
(:func:`inference.mcvq.em.free_energy`, T = N) at the learner's own (g, m) (the
mean-field SVI's loss). The target of a pair is the quality EM ends with;
the peer's steps to target are the first step after which its (exact) loss
trace reaches it. Time to target = the peer's warm wall time for the whole
``--svi-steps`` run times (steps to target / ``--svi-steps``): every step of
the scan costs the same, and the fixed costs (start, checks) are scaled down
with it, in the peer's favour. Each peer is tuned: every step size of
``--learning-rates`` is run and the one reaching the target in the fewest steps
is timed. Ours is timed as the public ``fit_mcvq`` call (checks, start,
jitted EM loop). First calls (compilation) are in their own column; then
``--repeats`` warm calls of ours and of the tuned peer, interleaved; median
and [min-max]. ratio = peer time to target / our time; the goal is
ratio >= 50 (printed MET / NOT met, never asserted). A peer that does not
reach the target within its budget gets the lower bound ratio > (its full
run) / ours, and the goal counts as met only if that bound is >= 50.

(b) Scaling of one EM iteration, :func:`inference.mcvq.em.step` (g-step and
M-step from the statistics of m, the Gaussian parameters read from the
program, the E-step energies and the new statistics, free energy), jitted
and warm, at T = N, with N, D, K, J each varied while the others stay at the
base size. ``ns/unit`` is the time per N D K J element (flat when the time is
linear in the varied size); ``slope`` is d log(time) / d log(size) between
neighbours (1 = linear). Throughput: the step's work is two matrix products
of the (N, 3D) moments with (3D, K J) weights, 12 N D K J flops; ``GFLOP/s``
is that count over the time, against a plain jitted (N, 3D) x (3D, K J)
float32 matmul timed in the same run (``matmul GFLOP/s``, counted as
6 N D K J flops). Small K J make thin matrix products that no CPU runs near
its peak; the reference has the same shape, so the ratio is what counts.

Run::

    python benchmarks/mcvq.py            # (a) N = 500, D = 16, K = 3, J = 4; (b) N to 100,000
    python benchmarks/mcvq.py --quick    # about a minute or two on 2 shared cores
    python benchmarks/mcvq.py --parts scaling

The tables are printed and written as JSON to ``--output`` (default
``benchmarks/results/mcvq.json``).

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003, sec. 3.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.association_exact import machine_info  # noqa: E402
from inference.engine.reporting import jsonable  # noqa: E402
from inference.mcvq import em as mcvq_fit  # noqa: E402
from inference.mcvq.baselines import (  # noqa: E402
    exact_log_likelihood,
    fit_mcvq_meanfield_svi,
    fit_mcvq_svi,
)
from inference.mcvq.em import fit_mcvq  # noqa: E402
from ppl_models import mcvq  # noqa: E402
from ppl_models.diagnostics import ZooWarning  # noqa: E402

#: The goal: variational EM at least 50x faster than SVI to equal quality.
GOAL = 50.0
DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "mcvq.json"


def parse_args(argv=None) -> argparse.Namespace:
    """Parse the command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, 2 repeats")
    parser.add_argument("--parts", nargs="+", default=["race", "scaling"],
                        choices=["race", "scaling"])
    parser.add_argument("--num-examples", type=int, help="N of the race (default 500; 200)")
    parser.add_argument("--dim", type=int, help="D of the race (default 16; 12)")
    parser.add_argument("--num-vqs", type=int, default=3, help="K of the race")
    parser.add_argument("--num-states", type=int, default=4, help="J of the race")
    parser.add_argument("--em-iterations", type=int, default=200)
    parser.add_argument("--restarts", type=int, default=5,
                        help="starts of the third EM row (best final free energy kept)")
    parser.add_argument("--svi-steps", type=int, help="default 1000 (quick: 300)")
    parser.add_argument("--learning-rates", type=float, nargs="+",
                        help="Adam learning rates tried (default 0.01 0.03 0.1 0.3 1; "
                        "quick 0.1 0.3)")
    parser.add_argument("--repeats", type=int, help="warm timed calls (default 3; quick 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    args.num_examples = args.num_examples or (200 if args.quick else 500)
    args.dim = args.dim or (12 if args.quick else 16)
    args.svi_steps = args.svi_steps or (300 if args.quick else 1000)
    args.learning_rates = args.learning_rates or ([0.1, 0.3] if args.quick
                                                  else [0.01, 0.03, 0.1, 0.3, 1.0])
    args.repeats = args.repeats or (2 if args.quick else 3)
    return args


def _quiet(fn, *args, **kwargs):
    """Call ``fn`` with the zoo's warnings (non-convergence of a fixed budget) silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ZooWarning)
        return jax.block_until_ready(fn(*args, **kwargs))


def _wall(fn, *args, **kwargs):
    start = time.perf_counter()
    result = _quiet(fn, *args, **kwargs)
    return result, time.perf_counter() - start


def _spread(values) -> dict:
    values = np.asarray(values, float)
    return {"median": float(np.median(values)), "min": float(values.min()),
            "max": float(values.max()), "n": int(values.size)}


def _fmt_time(spread) -> str:
    if spread is None:
        return "-"
    return f"{spread['median']:.4g} [{spread['min']:.3g}-{spread['max']:.3g}]"


# --- (a) the race ----------------------------------------------------------------------

def _em_quality(x, fit):
    num = x.shape[0]
    loglik = float(jnp.mean(exact_log_likelihood(x, fit.mu, fit.sigma)))
    elbo = -float(mcvq_fit.free_energy(x, fit.g, fit.m, fit.mu, fit.sigma,
                                       temperature=num)) / num
    return {"loglik": loglik, "elbo": elbo}


def _steps_to(trace_quality, final_quality, target):
    """First number of steps after which the quality reaches ``target`` (None if never).

    ``trace_quality[i]`` is the quality before step i (after i steps); the final
    value is after all steps.
    """
    hits = np.flatnonzero(np.asarray(trace_quality) >= target)
    hits = hits[hits > 0]
    if hits.size:
        return int(hits[0])
    return len(trace_quality) if final_quality >= target else None


def race(args) -> dict:
    """Part (a); returns the rows and the fits' qualities."""
    key_data, key_fit = jax.random.split(jax.random.key(args.seed))
    k, j = args.num_vqs, args.num_states
    data = mcvq.generate(key_data, args.num_examples, args.dim, k, j)
    x = data.x
    num = x.shape[0]
    ours = {"annealed": dict(temperature_schedule=None),
            "T=N": dict(temperature_schedule=float(num)),
            f"annealed x{args.restarts}": dict(temperature_schedule=None,
                                                num_restarts=args.restarts)}
    em_fit, em_first, em_quality = {}, {}, {}
    for name, kw in ours.items():
        fit, em_first[name] = _wall(fit_mcvq, x, k, j, rng_key=key_fit,
                                    max_iterations=args.em_iterations, **kw)
        em_fit[name] = fit
        em_quality[name] = _em_quality(x, fit)
    peers = {"svi_enum": (fit_mcvq_svi, "loglik"),
             "svi_meanfield": (fit_mcvq_meanfield_svi, "elbo")}
    peer_runs = {}
    for peer, (fn, _scale) in peers.items():
        runs = {}
        for i, learning_rate in enumerate(args.learning_rates):
            fit, wall = _wall(fn, x, k, j, rng_key=key_fit, num_steps=args.svi_steps,
                              learning_rate=learning_rate)
            runs[learning_rate] = {"trace": -np.asarray(fit.trace.objective),
                                   "final": -fit.loss,
                                   "first_call_s" if i == 0 else "call_s": wall}
        peer_runs[peer] = runs
    # Tune per pair, then time ours and the tuned peers, interleaved.
    pairs = []
    for name in ours:
        for peer, (_fn, scale) in peers.items():
            target = em_quality[name][scale]
            steps = {lr: _steps_to(run["trace"], run["final"], target)
                     for lr, run in peer_runs[peer].items()}
            reached = {lr: n for lr, n in steps.items() if n is not None}
            best_lr = (min(reached, key=reached.get) if reached else
                       max(peer_runs[peer], key=lambda lr: peer_runs[peer][lr]["final"]))
            pairs.append({"ours": name, "peer": peer, "scale": scale, "target": target,
                          "steps_by_learning_rate": steps, "best_learning_rate": best_lr,
                          "steps_to_target": reached.get(best_lr),
                          "peer_final": peer_runs[peer][best_lr]["final"],
                          "peer_best_final": max(r["final"] for r in peer_runs[peer].values())})
    to_time = sorted({(p["peer"], p["best_learning_rate"]) for p in pairs})
    em_times = {name: [] for name in ours}
    peer_times = {key: [] for key in to_time}
    for _ in range(args.repeats):
        for name, kw in ours.items():
            em_times[name].append(_wall(fit_mcvq, x, k, j, rng_key=key_fit,
                                        max_iterations=args.em_iterations, **kw)[1])
        for peer, lr in to_time:
            peer_times[(peer, lr)].append(_wall(peers[peer][0], x, k, j, rng_key=key_fit,
                                                num_steps=args.svi_steps, learning_rate=lr)[1])
    for pair in pairs:
        ours_spread = _spread(em_times[pair["ours"]])
        run = np.asarray(peer_times[(pair["peer"], pair["best_learning_rate"])])
        pair["ours_s"] = ours_spread
        pair["ours_first_call_s"] = em_first[pair["ours"]]
        pair["ours_iterations"] = em_fit[pair["ours"]].num_iterations
        pair["peer_full_run_s"] = _spread(run)
        pair["peer_first_call_s"] = peer_runs[pair["peer"]][args.learning_rates[0]]["first_call_s"]
        pair["ours_s_per_iteration"] = ours_spread["median"] / pair["ours_iterations"]
        pair["peer_s_per_step"] = float(np.median(run)) / args.svi_steps
        n = pair["steps_to_target"]
        if n is None:  # not reached in the budget: its time to target exceeds the full run
            pair["peer_s"] = None
            pair["ratio"] = None
            pair["ratio_lower_bound"] = float(np.median(run)) / ours_spread["median"]
            pair["goal_met"] = pair["ratio_lower_bound"] >= GOAL
            continue
        pair["peer_s"] = _spread(run * n / args.svi_steps)
        pair["ratio"] = pair["peer_s"]["median"] / ours_spread["median"]
        pair["ratio_spread"] = [float(pair["peer_s"]["min"] / ours_spread["max"]),
                                float(pair["peer_s"]["max"] / ours_spread["min"])]
        pair["goal_met"] = pair["ratio"] >= GOAL
    return {"size": {"num_examples": num, "dim": args.dim, "num_vqs": k, "num_states": j},
            "svi_steps": args.svi_steps, "learning_rates": args.learning_rates,
            "repeats": args.repeats, "em_quality": em_quality,
            "em_iterations": {n: f.num_iterations for n, f in em_fit.items()},
            "peer_final_by_learning_rate": {p: {str(lr): r["final"] for lr, r in runs.items()}
                                            for p, runs in peer_runs.items()},
            "pairs": pairs}


def print_race(result) -> None:
    size = result["size"]
    print(f"\n(a) variational EM vs NumPyro SVI to equal quality: N = {size['num_examples']}, "
          f"D = {size['dim']}, K = {size['num_vqs']}, J = {size['num_states']}, float32; "
          f"SVI budget {result['svi_steps']} steps, learning rates {result['learning_rates']}, "
          f"{result['repeats']} warm repeats (median [min-max] seconds)")
    print("scale loglik: (1/N) log p(X | mu, sigma), r and s summed out exactly; "
          "scale elbo: -F_N / N at the learner's own (g, m)")
    header = (f"{'ours':12s} {'peer':14s} {'scale':6s} {'target':>9s} {'ours s':>24s} "
              f"{'it':>4s} {'lr':>5s} {'steps':>6s} {'peer s to target':>26s} "
              f"{'peer 1st s':>10s} {'peer best':>9s} {'ratio':>7s} goal")
    print(header)
    print("-" * len(header))
    for p in result["pairs"]:
        ratio = (f">{p['ratio_lower_bound']:.3g}" if p["ratio"] is None
                 else f"{p['ratio']:.3g}")
        steps = "never" if p["steps_to_target"] is None else str(p["steps_to_target"])
        goal = "MET" if p["goal_met"] else "NOT met"
        if p["steps_to_target"] is None:
            goal += " (peer never reached ours)"
        print(f"{p['ours']:12s} {p['peer']:14s} {p['scale']:6s} {p['target']:9.4f} "
              f"{_fmt_time(p['ours_s']):>24s} {p['ours_iterations']:4d} "
              f"{p['best_learning_rate']:5g} {steps:>6s} {_fmt_time(p['peer_s']):>26s} "
              f"{p['peer_first_call_s']:10.3g} {p['peer_best_final']:9.4f} {ratio:>7s} {goal}")
    print("cost of one iteration (warm median): " + "; ".join(
        f"EM {p['ours']} {1e3 * p['ours_s_per_iteration']:.3g} ms vs {p['peer']} step "
        f"{1e3 * p['peer_s_per_step']:.3g} ms" for p in result["pairs"][:2]))


# --- (b) scaling of one EM iteration ---------------------------------------------------

@jax.jit
@jax.jit
def _reference_matmul(left, right):
    return left @ right


def _time_warm(fn, *args, repeats):
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return float(np.median(times)), float(min(times)), float(max(times))


_step = jax.jit(mcvq_fit.step)
_init = jax.jit(mcvq_fit.init, static_argnums=(3, 4))


def scaling(args) -> dict:
    """Part (b): time one jitted EM step at sizes varied one at a time."""
    if args.quick:
        base = {"N": 2000, "D": 16, "K": 4, "J": 8}
        grid = {"N": [1000, 10000, 100000], "D": [4, 64], "K": [2, 16], "J": [2, 32]}
        repeats = 3
    else:
        base = {"N": 10000, "D": 16, "K": 4, "J": 8}
        grid = {"N": [1000, 10000, 100000], "D": [4, 16, 64, 128], "K": [2, 4, 8, 16],
                "J": [2, 8, 32, 64]}
        repeats = 5
    rows = []
    key = jax.random.key(args.seed)
    for varied, values in grid.items():
        previous = None
        for value in values:
            size = dict(base, **{varied: value})
            n, d, k, j = size["N"], size["D"], size["K"], size["J"]
            x = jax.random.normal(jax.random.fold_in(key, n * d), (n, d))
            mask = jnp.ones((n, d), bool)
            a = jnp.full((d, k), 1.0 / k)
            b = jnp.full((k, j), 1.0 / j)
            floor = jnp.asarray(1e-3, x.dtype)
            temperature = jnp.asarray(float(n), x.dtype)
            state = _init(jax.random.key(1), x, mask, k, j, a, b, floor)
            start = time.perf_counter()
            jax.block_until_ready(_step(state, x, mask, a, b, temperature, floor))
            first = time.perf_counter() - start
            median, low, high = _time_warm(_step, state, x, mask, a, b, temperature, floor,
                                           repeats=repeats)
            units = n * d * k * j
            ref = _time_warm(_reference_matmul, jnp.ones((n, 3 * d), jnp.float32),
                             jnp.ones((3 * d, k * j), jnp.float32), repeats=repeats)[0]
            slope = (None if previous is None else
                     math.log(median / previous[1]) / math.log(value / previous[0]))
            previous = (value, median)
            rows.append({"varied": varied, **size, "units": units, "first_call_s": first,
                         "step_s": median, "step_min_s": low, "step_max_s": high,
                         "ns_per_unit": 1e9 * median / units, "slope": slope,
                         "gflop_per_s": 12 * units / median / 1e9,
                         "matmul_gflop_per_s": 6 * units / ref / 1e9})
            del state, x
    return {"base": base, "repeats": repeats, "rows": rows}


def print_scaling(result) -> None:
    print(f"\n(b) one EM iteration (inference.mcvq.em.step, jitted, warm, median of "
          f"{result['repeats']}); base {result['base']}; ns/unit = time / (N D K J); "
          "slope = dlog t / dlog size (1 = linear); GFLOP/s counts 12 N D K J flops, "
          "against one (N, 3D) x (3D, K J) matmul")
    header = (f"{'varied':6s} {'N':>7s} {'D':>4s} {'K':>3s} {'J':>3s} {'N*D*K*J':>11s} "
              f"{'1st s':>7s} {'step s':>9s} {'ns/unit':>8s} {'slope':>6s} {'GFLOP/s':>7s} "
              f"{'matmul GFLOP/s':>14s}")
    print(header)
    print("-" * len(header))
    for r in result["rows"]:
        slope = "-" if r["slope"] is None else f"{r['slope']:.2f}"
        print(f"{r['varied']:6s} {r['N']:7d} {r['D']:4d} {r['K']:3d} {r['J']:3d} "
              f"{r['units']:11d} {r['first_call_s']:7.3f} {r['step_s']:9.4g} "
              f"{r['ns_per_unit']:8.3f} {slope:>6s} {r['gflop_per_s']:7.2f} "
              f"{r['matmul_gflop_per_s']:14.2f}")


def main(argv=None) -> dict:
    args = parse_args(argv)
    report = {"machine": machine_info(), "quick": args.quick, "goal_ratio": GOAL}
    print(f"devices {report['machine']['devices']}, jax {jax.__version__}")
    if "race" in args.parts:
        report["race"] = race(args)
        print_race(report["race"])
    if "scaling" in args.parts:
        report["scaling"] = scaling(args)
        print_scaling(report["scaling"])
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with open(args.output, "w") as handle:
        json.dump(jsonable(report), handle, indent=2)
    print(f"\nwrote {args.output}")
    return report


if __name__ == "__main__":
    main()
