"""Benchmark: one over-complete VB-MCVQ run against a cross-validated grid over K and J.

Both sides run at their best, in the same run, on the same machine. The MCVQ
slides of Ross and Zemel (2002) make the argument for variational Bayes: one run
started from a generous model (K_max VQs of J_max states) prunes itself to a
size, where cross-validation must fit every candidate (K, J) on every fold.
Goal: the VB run at least 10x cheaper than the grid, reaching the same choice.

* ours: :func:`inference.fit_vb_mcvq` from (K_max, J_max) (defaults, T = 1,
  pruning at 1e-3), timed as one run and as ``--restarts`` runs keeping the best
  bound (the restarts the grid's EM fits get; this is the ratio that counts);
* peer: ``model_selection(criteria=("cv",))`` over the grid K in ``--ks`` times
  J in ``--js``, ``--folds`` folds, ``fit_mcvq`` with ``--restarts`` starts per fit
  (all in one compiled call), held-out predictive log p(x | mu, sigma, a = g,
  b = pi) (exact where every candidate is enumerable, else its variational
  bound; the table says which), choice by the one-SE rule.

Data: a planted MCVQ (:func:`ppl_models.mcvq.generate`, K = 3 VQs of J = 4
states) and the shapes training images (:mod:`ppl_models.datasets.shapes`, 100
images of 11 x 11, three causes). Both sides are jitted public calls, timed warm:
every call is made once untimed first (compilation; reported in its own
column), then ``--repeats`` timed calls (median [min-max]); float32, the same
machine and load (``os.getloadavg()`` printed before and after). "agree K":
the VB survivors' number of VQs equals the CV choice's K; "agree J": also the
largest surviving state count equals its J.

Run::

    python benchmarks/model_selection.py            # K_max, J_max = 8, 10; grid 2..5 x {2,3,4,6}
    python benchmarks/model_selection.py --quick    # small grid, planted data only

The table is printed and written as JSON to ``--output`` (default
``benchmarks/results/model_selection.json``).

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization" (presentation slides),
University of Toronto, 2002: "Current directions" (VB MCVQ, model selection).
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import jax

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.association_exact import machine_info  # noqa: E402
from benchmarks.mcvq import _quiet, _spread  # noqa: E402
from inference.app.selection import model_selection  # noqa: E402
from inference.engine.reporting import jsonable  # noqa: E402
from inference.mcvq.vb import fit_vb_mcvq  # noqa: E402
from ppl_models import mcvq  # noqa: E402
from ppl_models.datasets import shapes  # noqa: E402

#: The goal: one VB run from a large model at least 10x cheaper than the CV grid.
GOAL = 10.0
DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "model_selection.json"


def parse_args(argv=None) -> argparse.Namespace:
    """Parse the command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="grid 2..4 x {2, 4}, 3 folds, VB from (6, 6), planted data only")
    parser.add_argument("--data", nargs="+", choices=["planted", "shapes"])
    parser.add_argument("--ks", type=int, nargs="+", help="grid K (default 2 3 4 5)")
    parser.add_argument("--js", type=int, nargs="+", help="grid J (default 2 3 4 6)")
    parser.add_argument("--folds", type=int, help="CV folds (default 5; quick 3)")
    parser.add_argument("--restarts", type=int, default=3,
                        help="EM starts per CV fit and VB runs (best bound) of ours")
    parser.add_argument("--max-vqs", type=int, help="K_max of VB (default 8; quick 6)")
    parser.add_argument("--max-states", type=int, help="J_max of VB (default 10; quick 6)")
    parser.add_argument("--repeats", type=int, help="timed warm calls (default 3; quick 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    args.data = args.data or (["planted"] if args.quick else ["planted", "shapes"])
    args.ks = args.ks or ([2, 3, 4] if args.quick else [2, 3, 4, 5])
    args.js = args.js or ([2, 4] if args.quick else [2, 3, 4, 6])
    args.folds = args.folds or (3 if args.quick else 5)
    args.max_vqs = args.max_vqs or (6 if args.quick else 8)
    args.max_states = args.max_states or (6 if args.quick else 10)
    args.repeats = args.repeats or (1 if args.quick else 3)
    return args


def _timed(fn, repeats, *args, **kwargs):
    """(result, first-call seconds, list of warm seconds)."""
    start = time.perf_counter()
    result = _quiet(fn, *args, **kwargs)
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = _quiet(fn, *args, **kwargs)
        times.append(time.perf_counter() - start)
    return result, first, times


def _vb_best(x, max_vqs, max_states, keys):
    """Best bound of one VB run per key."""
    fits = [fit_vb_mcvq(x, max_vqs, max_states, rng_key=k) for k in keys]
    return max(fits, key=lambda f: f.bound)


def _dataset(name, seed):
    if name == "planted":
        return mcvq.generate(jax.random.key(seed), 200, 16, 3, 4).x
    return shapes.generate(jax.random.key(seed)).x_train


def run_one(name, args) -> dict:
    x = _dataset(name, args.seed)
    grid = [(k, j) for k in args.ks for j in args.js]
    key_vb, key_cv = jax.random.split(jax.random.key(args.seed + 1))
    keys = jax.random.split(key_vb, args.restarts)
    one, one_first, one_times = _timed(fit_vb_mcvq, args.repeats, x, args.max_vqs,
                                       args.max_states, rng_key=keys[0])
    best, _, best_times = _timed(_vb_best, args.repeats, x, args.max_vqs, args.max_states, keys)
    cv, cv_first, cv_times = _timed(model_selection, args.repeats, x, grid, criteria=("cv",),
                                    rng_key=key_cv, num_folds=args.folds,
                                    num_restarts=args.restarts)
    choice = cv.choice["cv"]
    vb_size = (best.num_vqs, best.num_states)
    one_size = (one.num_vqs, one.num_states)
    vb_s, vb1_s, cv_s = _spread(best_times), _spread(one_times), _spread(cv_times)
    ratio = cv_s["median"] / vb_s["median"]
    return {
        "data": name, "shape": list(x.shape), "grid": grid, "folds": args.folds,
        "restarts": args.restarts, "start": [args.max_vqs, args.max_states],
        "vb_one_s": vb1_s, "vb_one_first_call_s": one_first, "vb_one_size": one_size,
        "vb_one_bound": one.bound / x.shape[0], "vb_best_s": vb_s, "vb_size": vb_size,
        "vb_bound": best.bound / x.shape[0], "cv_s": cv_s, "cv_first_call_s": cv_first,
        "cv_choice": choice, "cv_values": dict(zip(map(str, grid), cv.values["cv"],
                                                   strict=True)),
        "cv_note": [n for n in cv.notes if n.startswith("cv")],
        "cv_fits": len(grid) * args.folds,
        "agree_k": vb_size[0] == choice[0],
        "agree_j": vb_size[0] == choice[0] and max(vb_size[1]) == choice[1],
        "ratio": ratio, "ratio_one_run": cv_s["median"] / vb1_s["median"],
        "ratio_spread": [cv_s["min"] / vb_s["max"], cv_s["max"] / vb_s["min"]],
        "goal_met": ratio >= GOAL,
    }


def _fmt(spread):
    return f"{spread['median']:.3g} [{spread['min']:.3g}-{spread['max']:.3g}]"


def print_rows(rows, load_before, load_after) -> None:
    print(f"\nVB-MCVQ from (K_max, J_max) vs {rows[0]['folds']}-fold CV grid, "
          f"{rows[0]['restarts']} restarts each; warm seconds, median [min-max]; "
          f"load average before {load_before}, after {load_after}")
    header = (f"{'data':8s} {'N x D':>8s} {'start':>7s} {'VB x1 s':>20s} {'VB best s':>20s} "
              f"{'VB survivors':>24s} {'grid':>5s} {'CV s':>20s} {'CV choice':>9s} "
              f"{'agree K/J':>9s} {'ratio':>6s} {'ratio x1':>8s} goal")
    print(header)
    print("-" * len(header))
    for r in rows:
        size = f"{r['vb_size'][0]} {list(r['vb_size'][1])}"
        print(f"{r['data']:8s} {r['shape'][0]:>4d}x{r['shape'][1]:<3d} "
              f"{str(tuple(r['start'])):>7s} {_fmt(r['vb_one_s']):>20s} "
              f"{_fmt(r['vb_best_s']):>20s} {size:>24s} {len(r['grid']):5d} "
              f"{_fmt(r['cv_s']):>20s} {str(tuple(r['cv_choice'])):>9s} "
              f"{('yes' if r['agree_k'] else 'no') + '/' + ('yes' if r['agree_j'] else 'no'):>9s} "
              f"{r['ratio']:6.1f} {r['ratio_one_run']:8.1f} "
              f"{'GOAL MET' if r['goal_met'] else 'GOAL NOT MET'}")
    for r in rows:
        print(f"{r['data']}: first calls (compile) VB {r['vb_one_first_call_s']:.3g} s, CV grid "
              f"{r['cv_first_call_s']:.3g} s; VB x1 survivors {r['vb_one_size'][0]} "
              f"{list(r['vb_one_size'][1])} (bound {r['vb_one_bound']:.3f}), best of "
              f"{r['restarts']} bound {r['vb_bound']:.3f} nats/example; {r['cv_fits']} CV fits; "
              f"{'; '.join(r['cv_note'])}")


def main(argv=None) -> dict:
    args = parse_args(argv)
    report = {"machine": machine_info(), "quick": args.quick, "goal_ratio": GOAL}
    print(f"devices {report['machine']['devices']}, jax {jax.__version__}")
    load_before = tuple(round(v, 2) for v in os.getloadavg())
    rows = [run_one(name, args) for name in args.data]
    load_after = tuple(round(v, 2) for v in os.getloadavg())
    report.update(rows=rows, load_before=load_before, load_after=load_after)
    print_rows(rows, load_before, load_after)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with open(args.output, "w") as handle:
        json.dump(jsonable(report), handle, indent=2)
    print(f"\nwrote {args.output}")
    return report


if __name__ == "__main__":
    main()
