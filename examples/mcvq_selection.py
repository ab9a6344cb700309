"""How often does each criterion find the true number and size of MCVQ's VQs?
==========================================================================

The "Current directions" of the MCVQ slides (Ross and Zemel (2002): VB MCVQ, model
selection) and the paper's closing call for a Bayesian choice of the number of VQs
K and of their states J (Ross and Zemel (2003), sec. 6), measured on data with a
known answer; the criteria are those of ``inference.app.selection``.

**Data** (``ppl_models.datasets.causes``): images of K shapes side by side,
each at one of J independent uniform vertical offsets, pixels -1 / +1 (no
noise, no overlap): K causes of J states each. Settings (K, J): (3, 9), the
paper's 11 x 11 shapes layout (Ross and Zemel (2003), sec. 5.1), and variants
with (2, 6), (4, 5) and (5, 4) (J chosen so that the images stay small: 8 x 8,
7 x 12 and 6 x 15 pixels). ``--examples`` training images per seed (default
96, so that 3 folds are equal and each fold size compiles once), new data for
every seed.

**Criteria** (``inference.app.selection.model_selection``, every value per
example, higher is better): ``vb`` (VB lower bound of ``fit_vb_mcvq`` started
at the candidate size; choice: the smallest candidate containing what
survives in the best run), ``cv`` (``--folds``-fold cross-validated held-out
log-likelihood of ``fit_mcvq``), ``train`` (training log-likelihood: no
penalty for complexity), ``bic``; candidates are a cross around the truth,
(K-1, J), (K, J), (K+1, J), (K, J-1), (K, J+1) for (3, 9), and (K-1, J),
(K, J), (K+1, J) for the variants (every candidate shape compiles its own fits,
which dominates the run time on 2 CPU cores), so a hit on K and a hit on
(K, J) are counted separately. EM fits: the paper's annealing, ``--restarts``
starts in one call (the lowest final free energy kept), ``--iterations``
iterations, the variance floor of ``examples/mcvq_shapes.py`` (0.3 times the
mean pixel variance). ``vb (pruned)``: one over-complete ``fit_vb_mcvq``
started at K = 8, J = 10 (the start of the claim below; best bound of the restarts),
whose surviving VQs are counted two ways: every surviving VQ (``raw``), and
*causes*, the VQs with more than one active state (a one-state VQ is a
constant term, typically the never-lit pixels, not a cause). A (K, J) hit of
the pruned model means K causes with J states each.

**PSIS-LOO is left out**: ``model_selection`` runs it only where N D J^K <=
``LOO_MAX_SIZE`` (2^19); the paper's layout has N D J^K = 100 x 121 x 9^3 =
8.8e6, and where it would run (K = 2) it is one NUTS chain per candidate
and seed, minutes each on 2 CPU cores.

**VB pruning trace**: for seed 0 of the (3, 9) setting, the over-complete
run's number of active VQs, of causes and its bound L(Q) per iteration
(recorded in the JSON, plotted).

**The claim tested** (ours, after the slides' proposal to choose the model size by
VB): "VB-MCVQ started at K = 8, J = 10 on shapes with 3 causes ends with 3 active
VQs in most of 20 seeds". The printout states the count (raw VQs and causes) and
whether "most" (more than half) holds.

Run: ``python examples/mcvq_selection.py [--quick] [--seeds N]
[--variant-seeds N] [--output-dir DIR]`` (full: 20 seeds of (3, 9), 3 of
each variant -- fewer for the variants to keep the run near 10 minutes on 2
busy CPU cores; 2 starts x 100 EM iterations, 3 folds; ``--quick``: 1 seed
of (3, 9) only, candidates K in {2, 3, 4} at J = 9). Writes ``mcvq_selection.json`` and
``mcvq_selection.png`` (hit rates, the pruning trace, g of the over-complete
fit) into ``--output-dir`` (default ``zoo-results``).

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization" (presentation slides),
University of Toronto, 2002: "Current directions" (VB MCVQ, model selection).
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003, sec. 3, 5.1, 6.
A. Corduneanu and C. M. Bishop, "Variational Bayesian model selection for mixture
distributions", Proceedings of the Eighth International Conference on Artificial
Intelligence and Statistics (AISTATS), 2001 (VB with type-II ML weights and pruning).
G. Schwarz, "Estimating the dimension of a model", The Annals of Statistics 6(2), 1978
(BIC).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import jax
import numpy as np

from inference.app.selection import model_selection
from inference.engine.figures import empty_figure, save_figure
from inference.engine.reporting import jsonable
from ppl_models.datasets import causes
from ppl_models.diagnostics import ZooWarning

#: The settings (K causes, J positions); the first is the paper's shapes layout.
SETTINGS = ((3, 9), (2, 6), (4, 5), (5, 4))
#: Candidate-scored criteria (table order); "loo" is left out (module docstring).
CRITERIA = ("vb", "cv", "train", "bic")
#: Over-complete VB start of the claim tested: K = 8, J = 10.
OVER_COMPLETE = (8, 10)
#: EM options of every fit_mcvq (variance floor as in examples/mcvq_shapes.py).
VARIANCE_FLOOR = 0.3


def setting_name(num_causes, num_positions):
    return f"K={num_causes}, J={num_positions}"


def candidates_for(num_causes, num_positions, *, vary_j=True):
    """The cross around the truth: (K-1, J), (K, J), (K+1, J) and, with ``vary_j``,
    (K, J-1), (K, J+1)."""
    k, j = num_causes, num_positions
    cands = [(k - 1, j), (k, j), (k + 1, j)]
    if vary_j:
        cands += [(k, j - 1), (k, j + 1)]
    return [c for c in cands if c[0] >= 1 and c[1] >= 1]


def count_causes(num_states):
    """VQs with more than one active state (a one-state VQ is a constant term)."""
    return int(sum(n > 1 for n in num_states))


def pruned_hits(num_states, num_causes, num_positions):
    """(raw K hit, cause K hit, cause (K, J) hit) of an over-complete VB fit."""
    active = [int(n) for n in num_states if n > 1]
    raw = len(num_states) == num_causes
    cause = len(active) == num_causes
    return raw, cause, cause and all(n == num_positions for n in active)


def run_seed(num_causes, num_positions, seed, *, num_examples, cands, num_folds, restarts,
             iterations):
    """Data of one seed, model_selection over ``cands`` plus the over-complete VB run."""
    key_data, key_select = jax.random.split(jax.random.fold_in(
        jax.random.key(seed), 100 * num_causes + num_positions), 2)
    data = causes.generate(key_data, num_examples, num_causes=num_causes,
                           num_positions=num_positions)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ZooWarning)  # counted in the notes
        result = model_selection(data.x_train, cands, model="mcvq", criteria=CRITERIA,
                                 over_complete=OVER_COMPLETE, rng_key=key_select,
                                 num_folds=num_folds, num_restarts=restarts,
                                 max_iterations=iterations, variance_floor=VARIANCE_FLOOR)
    seconds = time.perf_counter() - start
    fit = result.over_complete.fit
    num_states = [int(n) for n in fit.num_states]
    raw, cause, cause_kj = pruned_hits(num_states, num_causes, num_positions)
    truth = (num_causes, num_positions)
    choice = {c: list(result.choice[c]) if result.choice.get(c) is not None else None
              for c in CRITERIA}
    row = {
        "seed": seed, "choice": choice,
        "hit_k": {c: v is not None and v[0] == num_causes for c, v in choice.items()},
        "hit_kj": {c: v is not None and tuple(v) == truth for c, v in choice.items()},
        "values": {c: list(v) for c, v in result.values.items()},
        "vb_sizes": [None if s is None else [s[0], list(s[1])] for s in result.vb_sizes],
        "pruned": {"num_vqs": int(fit.num_vqs), "num_states": num_states,
                   "causes": count_causes(num_states), "bound": float(result.over_complete.bound),
                   "iterations": int(fit.num_iterations), "converged": bool(fit.converged),
                   "purity": causes.purity(fit.g, data.owner, num_causes=num_causes)["purity"],
                   "hit_k_raw": raw, "hit_k": cause, "hit_kj": cause_kj},
        "notes": list(result.notes), "skipped": dict(result.skipped), "seconds": seconds,
    }
    return data, result, row


def trace_of(fit):
    """The pruning trace of a VB fit: active VQs, causes and bound per iteration."""
    states = np.asarray(fit.trace.num_states)
    return {"num_vqs": np.asarray(fit.trace.num_vqs).tolist(),
            "causes": np.sum(states > 1, axis=1).tolist(),
            "bound": np.asarray(fit.trace.objective, np.float64).tolist()}


def summarise(rows):
    """Hit counts per criterion (K, and K and J), mean surviving VQs and causes."""
    n = len(rows)
    summary = {"seeds": n, "hits_k": {c: sum(r["hit_k"][c] for r in rows) for c in CRITERIA},
               "hits_kj": {c: sum(r["hit_kj"][c] for r in rows) for c in CRITERIA}}
    summary["hits_k"]["vb (pruned, raw VQs)"] = sum(r["pruned"]["hit_k_raw"] for r in rows)
    summary["hits_kj"]["vb (pruned, raw VQs)"] = None
    summary["hits_k"]["vb (pruned, causes)"] = sum(r["pruned"]["hit_k"] for r in rows)
    summary["hits_kj"]["vb (pruned, causes)"] = sum(r["pruned"]["hit_kj"] for r in rows)
    summary["mean_vqs"] = float(np.mean([r["pruned"]["num_vqs"] for r in rows]))
    summary["mean_causes"] = float(np.mean([r["pruned"]["causes"] for r in rows]))
    summary["vqs_counts"] = _counts(r["pruned"]["num_vqs"] for r in rows)
    summary["causes_counts"] = _counts(r["pruned"]["causes"] for r in rows)
    summary["mean_purity"] = float(np.mean([r["pruned"]["purity"] for r in rows]))
    summary["seconds"] = float(sum(r["seconds"] for r in rows))
    return summary


def _counts(values):
    values = list(values)
    return {str(v): values.count(v) for v in sorted(set(values))}


def claim(summary, num_causes=3):
    """The claim tested: from K = 8, J = 10, 3 active VQs "in most of 20 seeds" (over half)."""
    n = summary["seeds"]
    raw = summary["hits_k"]["vb (pruned, raw VQs)"]
    cause = summary["hits_k"]["vb (pruned, causes)"]
    level = "holds" if raw > n / 2 else "holds for the causes only" if cause > n / 2 \
        else "differs"
    text = (f"Compared with the claim tested (VB-MCVQ from K = {OVER_COMPLETE[0]}, J = "
            f"{OVER_COMPLETE[1]} ends with {num_causes} active VQs in most of 20 seeds): "
            f"{level}. {raw} of {n} seeds end with {num_causes} active VQs (surviving counts "
            f"{summary['vqs_counts']}, mean {summary['mean_vqs']:.2f}); {cause} of {n} with "
            f"{num_causes} causes (VQs with > 1 state; counts {summary['causes_counts']}, mean "
            f"{summary['mean_causes']:.2f}).")
    return {"level": level, "raw_hits": raw, "cause_hits": cause, "seeds": n, "text": text}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="1 seed of K=3, J=9 only, candidates K in {2, 3, 4} (tests)")
    parser.add_argument("--seeds", type=int, default=None,
                        help="seeds of the K=3, J=9 setting (default 20, quick 1)")
    parser.add_argument("--variant-seeds", type=int, default=None,
                        help="seeds of each other setting (default 3; none with --quick)")
    parser.add_argument("--output-dir", "--out", default="zoo-results",
                        help="folder for PNG and JSON")
    parser.add_argument("--examples", type=int, default=96,
                        help="training images per seed (default 96: 3 equal folds)")
    parser.add_argument("--folds", type=int, default=None, help="CV folds (default 3)")
    parser.add_argument("--restarts", type=int, default=None,
                        help="starts per EM fit and VB runs per candidate (default 2)")
    parser.add_argument("--iterations", type=int, default=None,
                        help="EM iterations per start (default 100)")
    args = parser.parse_args(argv)
    num_seeds = (1 if args.quick else 20) if args.seeds is None else args.seeds
    variant_seeds = (0 if args.quick else 3) if args.variant_seeds is None \
        else args.variant_seeds
    folds = 3 if args.folds is None else args.folds
    restarts = 2 if args.restarts is None else args.restarts
    iterations = 100 if args.iterations is None else args.iterations
    if min(num_seeds, restarts, iterations, args.examples) < 1 or variant_seeds < 0:
        parser.error("--seeds, --restarts, --iterations and --examples must be at least 1, "
                     "--variant-seeds at least 0")
    if not 2 <= folds <= args.examples:
        parser.error("--folds must lie in 2 .. --examples")
    settings = [(SETTINGS[0], num_seeds)] + [(s, variant_seeds) for s in SETTINGS[1:]
                                             if variant_seeds]
    start = time.perf_counter()
    runs, summaries, cands, trace, shown = {}, {}, {}, None, None
    for (k, j), seeds in settings:
        name = setting_name(k, j)
        cands[name] = candidates_for(k, j, vary_j=(k, j) == SETTINGS[0] and not args.quick)
        runs[name] = []
        for seed in range(seeds):
            data, result, row = run_seed(k, j, seed, num_examples=args.examples,
                                         cands=cands[name], num_folds=folds, restarts=restarts,
                                         iterations=iterations)
            runs[name].append(row)
            print(f"  [{time.perf_counter() - start:6.0f} s] {name} seed {seed}: "
                  + " ".join(f"{c}={tuple(v) if v else None}" for c, v in row["choice"].items())
                  + f"; pruned {row['pruned']['num_states']}", flush=True)
            if (k, j) == SETTINGS[0] and seed == 0:
                trace = trace_of(result.over_complete.fit)
                shown = (data, np.asarray(result.over_complete.fit.g),
                         row["pruned"]["num_states"], result.table())
        summaries[name] = summarise(runs[name])
    judged = claim(summaries[setting_name(*SETTINGS[0])])
    _report(args, settings, folds, restarts, iterations, cands, runs, summaries, trace, shown,
            judged)
    results = {
        "settings": {"quick": args.quick, "seeds": num_seeds, "variant_seeds": variant_seeds,
                     "examples": args.examples, "folds": folds, "restarts": restarts,
                     "iterations": iterations, "variance_floor": VARIANCE_FLOOR,
                     "criteria": list(CRITERIA), "over_complete": list(OVER_COMPLETE),
                     "settings": [{"name": setting_name(k, j), "num_causes": k,
                                   "num_positions": j, "seeds": s} for (k, j), s in settings],
                     "candidates": cands},
        "runs": runs, "summary": summaries, "trace": trace,
        "vb_pruning": {"claim": "VB-MCVQ started at K = 8, J = 10 on shapes with 3 causes ends "
                           "with 3 active VQs in most of 20 seeds", **judged},
    }
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "mcvq_selection.json"}
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print('matplotlib is not installed (pip install -e ".[examples]"): no figures')
    else:
        paths["figure"] = out / "mcvq_selection.png"
        _plot(paths["figure"], summaries, trace, shown)
    results["seconds"] = time.perf_counter() - start
    paths["json"].write_text(json.dumps(jsonable(results), indent=1))
    results["paths"] = paths
    for path in paths.values():
        print(f"wrote {path}")
    print(f"total {results['seconds']:.1f} s")
    return results


def _report(args, settings, folds, restarts, iterations, cands, runs, summaries, trace, shown,
            judged):
    print(f"MCVQ model selection: shapes with K causes at J positions, "
          f"{args.examples} training images per seed; criteria {', '.join(CRITERIA)} over a "
          f"cross of candidates around the truth ({folds}-fold CV, EM {restarts} starts x "
          f"{iterations} iterations, VB best of {restarts} runs), plus one VB run from K = "
          f"{OVER_COMPLETE[0]}, J = {OVER_COMPLETE[1]} ('vb (pruned)')")
    print("  loo left out: N D J^K above model_selection's LOO_MAX_SIZE for K=3, J=9, and one "
          "NUTS chain per candidate and seed elsewhere (minutes each)")
    for (k, j), seeds in settings:
        name = setting_name(k, j)
        print(f"  {name}: {seeds} seed(s), candidates {cands[name]}, "
              f"{summaries[name]['seconds']:.0f} s")
    print("\nSeed 0 of K=3, J=9 (model_selection's table):")
    print("  " + shown[3].replace("\n", "\n  "))
    names = list(summaries)
    rows = list(CRITERIA) + ["vb (pruned, raw VQs)", "vb (pruned, causes)"]
    width = max(len(r) for r in rows) + 2
    print("\nHits: 'hits K / seeds (hits K and J)'")
    print(f"  {'criterion':<{width}s}" + "".join(f"{n:>16s}" for n in names))
    for r in rows:
        cells = []
        for n in names:
            s = summaries[n]
            kj = s["hits_kj"][r]
            cells.append(f"{s['hits_k'][r]}/{s['seeds']}" + (f" ({kj})" if kj is not None
                                                              else " (-)"))
        print(f"  {r:<{width}s}" + "".join(f"{c:>16s}" for c in cells))
    print(f"  {'mean surviving VQs':<{width}s}"
          + "".join(f"{summaries[n]['mean_vqs']:>16.2f}" for n in names))
    print(f"  {'mean causes':<{width}s}"
          + "".join(f"{summaries[n]['mean_causes']:>16.2f}" for n in names))
    print(f"  {'mean purity (VB)':<{width}s}"
          + "".join(f"{summaries[n]['mean_purity']:>16.3f}" for n in names))
    print("  (vb (pruned): raw = every surviving VQ; causes = VQs with > 1 state, (K, J) hit = "
          "K causes of J states each)")
    print("\nPer seed: choices of vb, cv, train, bic; the over-complete run's states per VQ")
    for n in names:
        for row in runs[n]:
            chosen = " ".join(f"{c}={tuple(v) if v else None}" for c, v in row["choice"].items())
            print(f"  {n} seed {row['seed']:2d}: {chosen}; pruned {row['pruned']['num_vqs']} "
                  f"VQs {row['pruned']['num_states']} ({row['pruned']['causes']} causes, "
                  f"purity {row['pruned']['purity']:.2f})")
    print(f"\nPruning trace (K=3, J=9, seed 0): {len(trace['num_vqs'])} iterations, active VQs "
          f"{trace['num_vqs'][0]} -> {trace['num_vqs'][-1]}, causes {trace['causes'][0]} -> "
          f"{trace['causes'][-1]}, bound {trace['bound'][0]:.1f} -> {trace['bound'][-1]:.1f}")
    print(f"\n{judged['text']}")


def _plot(path, summaries, trace, shown):
    import matplotlib

    matplotlib.use("Agg")

    data, g, num_states, _ = shown
    rows = list(CRITERIA) + ["vb (pruned, raw VQs)", "vb (pruned, causes)"]
    names = list(summaries)
    fig = empty_figure(figsize=(13, 7.5))
    outer = fig.add_gridspec(2, 1, height_ratios=(1.4, 1))
    upper = outer[0].subgridspec(1, 3)
    lower = outer[1].subgridspec(1, g.shape[1])
    axis = fig.add_subplot(upper[0])
    width = 0.8 / len(names)
    for i, n in enumerate(names):
        s = summaries[n]
        axis.bar(np.arange(len(rows)) + i * width, [s["hits_k"][r] / s["seeds"] for r in rows],
                 width, label=f"{n} ({s['seeds']} seeds)")
    axis.set_xticks(np.arange(len(rows)) + 0.4 - width / 2)
    axis.set_xticklabels([r.replace("vb (pruned, ", "pruned\n(") for r in rows], fontsize=7,
                         rotation=45, ha="right", rotation_mode="anchor")
    axis.set_xlabel("criterion")
    axis.set_ylabel("fraction of seeds choosing the true K")
    axis.set_ylim(0, 1.05)
    axis.set_title("how often each criterion finds the true K", fontsize=8)
    axis.legend(fontsize=7)
    axis = fig.add_subplot(upper[1])
    its = np.arange(1, len(trace["num_vqs"]) + 1)
    axis.step(its, trace["num_vqs"], where="post", label="active VQs")
    axis.step(its, trace["causes"], where="post", label="causes (VQs with > 1 state)")
    axis.axhline(3, color="gray", ls=":", label="true K = 3")
    axis.set_xlabel("iteration")
    axis.set_ylabel("number of VQs")
    axis.set_ylim(0, OVER_COMPLETE[0] + 0.5)
    axis.legend(fontsize=7)
    axis.set_title(f"VB from K = {OVER_COMPLETE[0]}, J = {OVER_COMPLETE[1]} (K=3, J=9, seed 0)",
                   fontsize=8)
    axis = fig.add_subplot(upper[2])
    axis.plot(its, trace["bound"])
    axis.set_xlabel("iteration")
    axis.set_ylabel("bound L(Q) (nats)")
    axis.set_title("VB bound", fontsize=8)
    for k in range(g.shape[1]):
        axis = fig.add_subplot(lower[k])
        axis.imshow(g[:, k].reshape(data.height, data.width), cmap="gray", vmin=0, vmax=1)
        axis.set_xticks([])
        axis.set_yticks([])
        axis.set_title(f"g, VQ {k + 1} ({num_states[k]} states)", fontsize=7)
    fig.suptitle("MCVQ model selection on shapes with known K causes and J positions",
                 fontsize=10)
    save_figure(fig, path)


if __name__ == "__main__":
    main()
