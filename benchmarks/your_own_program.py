"""Benchmark: the generic entry points on GVQ against the GVQ-specific ones and NumPyro.

In one run, on the same planted GVQ data (``gvq.generate_planted``), dtype and machine:

* association: ``inference.map_states(gvq.model, x, features=F, method=m)`` (the
  program traced, sites found, energy read, then the method) against
  ``inference.associate(F, x, method=m)`` for every method, 200 examples, dim 16,
  noise 0.1, n = 8 and 12;
* learning: ``inference.fit_map_em`` on GVQ written with ``numpyro.param`` features
  (closed-form M-step, found by tracing) against ``inference.fit_gvq`` (its
  least-squares M-step): one restart from the same initial features, exhaustive
  E-step, both stopping when no state changes, so that both take the same path (the
  table shows both iteration counts and final errors); whole calls timed;
* NumPyro's peer: ``infer_discrete(temperature=0)`` (``inference.numpyro_map_states``
  on the program with one site per unit) against ``map_states`` with ``"exact"``
  (n = 12, the 200 examples above), and against ``map_states`` with ``"mf"`` and
  ``"br+mf"`` at the configurations of the association benchmark's goals (noise
  0.3, F ~ N(0, 1); n = 12, dim 24 and n = 16, dim 32), per example: enumeration on a
  batch that fits in memory, ``map_states`` on ``--peer-examples`` examples; the gap is
  the mean relative excess of the energy over the exhaustive search's.

Each call is timed warm (after a compiling first call), ``--repeats`` times,
interleaved; the table gives the median and the ratios. Goals: ``map_states`` costs at
most 1.5x ``associate`` for every method; ``fit_map_em`` at most 2x ``fit_gvq``;
NumPyro's enumeration at n = 12 at least 10x slower than ``map_states(method="exact")``;
and, as ``associate`` meets them, ``"mf"`` and ``"br+mf"`` through ``map_states`` at
least 10x (n = 12, dim 24) and 100x (n = 16, dim 32) faster per example than
``infer_discrete``, with a mean gap under 1%. The footer says which are met (not
asserted: benchmarks are not tests).

Run::

    python benchmarks/your_own_program.py            # everything, 5 repeats
    python benchmarks/your_own_program.py --quick    # n = 8 only, no peer goals, 3 repeats

The table is printed and written as JSON to ``--output``
(default ``benchmarks/results/your_own_program.json``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO_ROOT))

from inference import associate, fit_gvq, fit_map_em, map_states, numpyro_map_states  # noqa: E402
from inference.association.base import METHODS  # noqa: E402
from inference.gvq.algorithm import initial_features  # noqa: E402
from ppl_models import gvq  # noqa: E402

DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "your_own_program.json"
MAP_STATES_GOAL, FIT_GOAL, NUMPYRO_GOAL = 1.5, 2.0, 10.0
#: The association benchmark's goals for MF and BR+MF against infer_discrete:
#: (n, dim, examples enumerated per call, ratio at least), a mean gap under GAP_GOAL.
PEER_CONFIGS = ((12, 24, 200, 10.0), (16, 32, 16, 100.0))
GAP_GOAL = 0.01


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 8 only, 3 repeats")
    parser.add_argument("--sizes", type=int, nargs="+", default=None)
    parser.add_argument("--num-examples", type=int, default=200)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--peer-examples", type=int, default=2000,
                        help="examples of map_states at the peer goals' configurations")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    return parser.parse_args(argv)


def gvq_with_params(x, num_features):
    """GVQ with its features as a numpyro.param (for fit_map_em)."""
    features = numpyro.param(
        "features", lambda key: x[jax.random.choice(key, x.shape[0], (num_features,),
                                                    replace=False)])
    with numpyro.plate("data", x.shape[0]):
        s = numpyro.sample("s", dist.Bernoulli(0.5).expand([num_features]).to_event(1))
        numpyro.sample("x", dist.Normal(s @ features, 0.1).to_event(1), obs=x)


def _block(result):
    jax.block_until_ready(jax.tree.leaves(result))
    return result


def timed(calls, repeats):
    """Median warm seconds of each named call, the calls interleaved."""
    for call in calls.values():
        _block(call())
    times = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            _block(call())
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t)) for name, t in times.items()}


def _association_calls(x, features, key, method):
    calls = {
        "associate": lambda: associate(features, x, method=method, rng_key=key),
        "map_states": lambda: map_states(gvq.model, x, features=features, method=method,
                                         rng_key=key),
    }
    if method == "exact":
        calls["numpyro infer_discrete"] = lambda: numpyro_map_states(
            gvq.model, x, features=features, split_states=True)
    return calls


def _learning_calls(x, n, key):
    """Both learners from the same initial features, one restart, exhaustive E-step,
    stopping at the fixed point (no state changes)."""
    start = initial_features(key, x, n)
    return {
        "fit_gvq": lambda: fit_gvq(x, n, rng_key=key, num_restarts=1, max_iterations=50,
                                   init_features=start),
        "fit_map_em": lambda: fit_map_em(gvq_with_params, x, n, rng_key=key, max_iterations=50,
                                         init_params={"features": start}, tol=0.0),
    }


def _peer_rows(args, repeats):
    """MF and BR+MF through map_states against infer_discrete, per example, at the
    association benchmark's goal configurations."""
    rows, goals = [], []
    for config in PEER_CONFIGS:
        more_rows, more_goals = _peer_config(*config, args.peer_examples, repeats)
        rows += more_rows
        goals += more_goals
    return rows, goals


def _peer_config(n, dim, batch, goal, num_examples, repeats):
    data = gvq.generate_planted(jax.random.fold_in(jax.random.key(7), n), num_examples, n, dim,
                                noise_scale=0.3, feature_mean=0.0)
    x, F = data.x, data.features
    key = jax.random.key(0)
    reference = map_states(gvq.model, x, features=F).energy
    calls = {"numpyro infer_discrete": lambda: numpyro_map_states(
        gvq.model, x[:batch], features=F, split_states=True)}
    for method in ("mf", "br+mf"):
        calls[method] = (lambda m=method: map_states(gvq.model, x, features=F, method=m,
                                                     rng_key=key))
    seconds = timed(calls, repeats)
    peer = seconds["numpyro infer_discrete"] / batch
    rows, goals = [], []
    for method in ("mf", "br+mf"):
        energy = calls[method]().energy
        gap = float(jnp.mean((energy - reference) / reference))
        ours = seconds[method] / num_examples
        ratio = peer / ours
        rows.append(dict(n=n, method=f"{method} vs infer_discrete, dim {dim}",
                         **{"map_states (us/example)": 1e6 * ours,
                            "infer_discrete (us/example)": 1e6 * peer},
                         ratio=ratio, gap=gap))
        goals.append((f"n={n}, dim {dim}: infer_discrete / map_states({method!r}) per "
                      f"example >= {goal:g}, gap < {100 * GAP_GOAL:g}%",
                      ratio >= goal and gap < GAP_GOAL))
    return rows, goals


def main(argv=None):
    args = parse_args(argv)
    sizes = args.sizes or ((8,) if args.quick else (8, 12))
    repeats = args.repeats or (3 if args.quick else 5)
    rows, goals = [], []
    for n in sizes:
        data = gvq.generate_planted(jax.random.key(n), args.num_examples, n, args.dim,
                                    noise_scale=0.1)
        x, F = data.x, data.features
        key = jax.random.key(0)
        for method in ["exact", *sorted(m for m in METHODS if m != "exact")]:
            seconds = timed(_association_calls(x, F, key, method), repeats)
            ratio = seconds["map_states"] / seconds["associate"]
            row = dict(n=n, method=method, **{f"{k} (s)": v for k, v in seconds.items()},
                       ratio=ratio)
            goals.append((f"n={n} {method}: map_states / associate <= {MAP_STATES_GOAL}",
                          ratio <= MAP_STATES_GOAL))
            if method == "exact":
                peer = seconds["numpyro infer_discrete"] / seconds["map_states"]
                row["numpyro / map_states"] = peer
                if n >= 12:
                    goals.append((f"n={n}: infer_discrete / map_states >= {NUMPYRO_GOAL}",
                                  peer >= NUMPYRO_GOAL))
            rows.append(row)
        fits = _learning_calls(x, n, key)
        seconds = timed(fits, repeats)
        results = {name: call() for name, call in fits.items()}
        ratio = seconds["fit_map_em"] / seconds["fit_gvq"]
        rows.append(dict(n=n, method="learning (whole fit)",
                         **{f"{k} (s)": v for k, v in seconds.items()},
                         iterations={k: int(r.num_iterations) for k, r in results.items()},
                         error={"fit_gvq": float(results["fit_gvq"].error),
                                "fit_map_em": float(results["fit_map_em"].objective)},
                         ratio=ratio))
        goals.append((f"n={n}: fit_map_em / fit_gvq <= {FIT_GOAL}", ratio <= FIT_GOAL))
    if not args.quick:
        peer_rows, peer_goals = _peer_rows(args, repeats)
        rows += peer_rows
        goals += peer_goals
    print(f"machine: {platform.machine()}, {jax.devices()[0].platform}; "
          f"{args.num_examples} examples, dim {args.dim}, median of {repeats} warm calls")
    for row in rows:
        cells = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                          for k, v in row.items() if k not in ("n", "method"))
        print(f"n={row['n']:<3} {row['method']:<34} {cells}")
    print("\nGoals:")
    for text, met in goals:
        print(f"  [{'met' if met else 'NOT met'}] {text}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(dict(rows=rows, goals=[dict(goal=t, met=m)
                                                             for t, m in goals],
                                           repeats=repeats), indent=2))
    return rows, goals


if __name__ == "__main__":
    main()
