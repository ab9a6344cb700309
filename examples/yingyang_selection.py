"""How often does each rule find the true number of clusters? Xu (1995), sec. 5-6.
===============================================================================

A study over data seeds: every seed draws a planted Gaussian mixture from the
program (``ppl_models.mixture.generate``) with a known k between 2 and 8, a
separation between overlapping and well apart (3.5, 5 or 8 standard
deviations between the nearest means), uneven sizes (the smallest cluster at
least 1/(4k) of the data) and elongated, rotated shapes (axis ratio up to 4),
all in d = 2 with the same number of examples. Each rule then estimates k:

* **J(k)** (eq. 24) of k-means, **L_map** (eq. 20) of hard-cut EM,
  **L_stocha** (eq. 14-16) of EM, and BIC and AIC on the EM fits, over the
  candidates 1..10 with 3 k-means++ restarts each
  (``inference.mixture.selection.compare_criteria``);
* **automatic selection, literal** (sec. 5.2): start with 12 components at
  random examples plus small noise, equal weights and sigma^2 = data
  variance / 12, run hard-cut EM (the paper's MAP-VQ) or EM, discard a
  component when its covariance collapses or its weight falls to zero
  (``fit_mixture(..., prune=True, init="random")``), count the survivors;
* **automatic selection, MML weights** (a named variant, not the paper's: the
  weight update max(n_y - p/2, 0) of Figueiredo and Jain (2002), p the
  parameters of one component, ``weight_rule="mml"``), which lets a component
  that does not pay for its parameters starve to zero weight, where the
  literal rule then discards it;
* **RPCL** (sec. 6.2): 12 units, winner and rival by the full posterior
  (eq. 28), the rival de-learning; the units that still win data at the end
  are counted (``inference.mixture.online.fit_online(method="rpcl")``);
* scikit-learn's **BayesianGaussianMixture** (Dirichlet process prior, 12
  components, full covariances) as an outside reference: components with
  weight above 1% are counted;
* **VB, pruning** (Corduneanu and Bishop 2001):
  variational Bayes on the program with Wishart and Normal priors
  (``ppl_models.vb_mixture``), the weights by type-II maximum likelihood,
  started from the same 12 components as the pruning rules above (from a
  k-means++ start, the one ``fit_vb_mixture`` has), a component removed when
  its weight falls below 1e-5 (``inference.mixture.vb.fit_vb_mixture``, up to
  1000 iterations like the other pruning runs); the survivors are counted;
* **VB bound over k**: the same VB fit started at every candidate k (best of
  the restarts by the bound), with a threshold of 1e-9 that only removes
  components left without data. With type-II ML weights the best bound
  cannot fall as k grows (a component of weight 0 with Q at the prior adds
  nothing to L), so the largest bound can favour a smaller k only through
  local optima; the rule takes the fit with the highest bound, counts the
  fits within 1 nat of it as ties (a Bayes factor below e, "not worth more
  than a bare mention", Kass and Raftery 1995) and reports the fewest
  surviving components among them. Each candidate k compiles its own VB run,
  so ``--quick`` leaves this rule out unless ``--vb-bound`` is given.

The PSIS-LOO criterion (``criterion="loo"``, NUTS on the program) is left out
of the study: a NUTS run per candidate and seed takes minutes here.

**The paper's claims.** The criteria J(k), L_map and L_stocha (with their
-sum alpha log alpha terms) "provide a systematical solution for selecting k"
(sec. 5.1), and starting large with the removal rule of sec. 5.2 selects k
automatically; RPCL's rival penalty drives extra units away (sec. 6.2). The
paper reports no experiment for any of these; the output states, rule by
rule, how often it finds the truth here.

Run: ``python examples/yingyang_selection.py [--quick] [--seeds N] [--output-dir DIR]
[--[no-]vb-bound]``.

References
----------
L. Xu, "YING-YANG machine: a Bayesian-Kullback scheme for unified learnings and new
results on vector quantization", Proceedings of the International Conference on Neural
Information Processing (ICONIP'95), 1995, sec. 5-6.
A. Corduneanu and C. M. Bishop, "Variational Bayesian model selection for mixture
distributions", Proceedings of the Eighth International Conference on Artificial
Intelligence and Statistics (AISTATS), 2001.
M. A. T. Figueiredo and A. K. Jain, "Unsupervised learning of finite mixture models",
IEEE Transactions on Pattern Analysis and Machine Intelligence 24(3), 2002.
R. E. Kass and A. E. Raftery, "Bayes factors", Journal of the American Statistical
Association 90(430), 1995.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import jax
import numpy as np

from inference.engine.figures import new_figure, save_figure
from inference.engine.reporting import jsonable
from inference.mixture.em import fit_mixture
from inference.mixture.online import fit_online
from inference.mixture.selection import compare_criteria
from inference.mixture.vb import fit_vb_mixture
from ppl_models import mixture
from ppl_models.diagnostics import ZooWarning

#: Separations (standard deviations between the nearest means) cycled over seeds.
SEPARATIONS = (3.5, 5.0, 8.0)
#: Criteria scored over the candidate k.
CRITERIA = ("J", "L_map", "L_stocha", "bic", "aic")
#: VB pruning threshold of the run from many components (``fit_vb_mixture``'s default),
#: and the one of the fits over the candidate k: low enough to remove only empty components.
VB_PRUNE_THRESHOLD, VB_BOUND_THRESHOLD = 1e-5, 1e-9
#: Bounds within this many nats of the best count as ties (Kass and Raftery 1995: a Bayes
#: factor below e is "not worth more than a bare mention").
VB_BOUND_TIE = 1.0
#: Iteration cap of every pruning run (the hard-cut EM, EM and VB ones alike).
MAX_ITERATIONS = 1000


def planted(seed, num_examples, true_ks):
    """The seed's planted mixture: k cycles over ``true_ks``, separation over SEPARATIONS."""
    k = true_ks[seed % len(true_ks)]
    separation = SEPARATIONS[seed % len(SEPARATIONS)]
    data = mixture.generate(jax.random.key(10_000 + seed), num_examples, k, 2,
                            separation=separation)
    return k, separation, data


def estimates(data, key, candidates, num_start, num_restarts, seed, vb_bound=True):
    """Every rule's estimate of k on one data set.

    Returns ``({rule: k}, {rule: seconds}, pruning traces)``; the five criteria share
    one set of fits, so each carries its total time. ``vb_bound=False`` leaves out the
    VB bound over the candidate k.
    """
    keys = jax.random.split(key, 6)
    found, seconds, traces = {}, {}, {}
    start = time.perf_counter()
    table = compare_criteria(data.x, candidates, criteria=CRITERIA, rng_key=keys[0],
                             num_restarts=num_restarts)
    shared = time.perf_counter() - start
    for name, result in table.items():
        found[name], seconds[name] = result.choice, shared
    for name, mode, rule, k in (("prune, hard-cut EM (literal)", "map", "ml", keys[1]),
                                ("prune, EM (literal)", "stochastic", "ml", keys[2]),
                                ("prune, EM + MML weights", "stochastic", "mml", keys[3])):
        start = time.perf_counter()
        fit = fit_mixture(data.x, num_start, mode=mode, init="random", prune=True,
                          weight_rule=rule, rng_key=k, max_iterations=MAX_ITERATIONS)
        found[name], seconds[name] = fit.num_components, time.perf_counter() - start
        traces[name] = np.asarray(fit.trace.num_components)
    start = time.perf_counter()
    rpcl = fit_online(data.x, num_start, method="rpcl", rng_key=keys[4], max_iterations=20)
    found["RPCL"], seconds["RPCL"] = rpcl.num_components, time.perf_counter() - start
    start = time.perf_counter()
    found["sklearn BayesianGMM"] = _bayesian_gmm(data.x, num_start, seed=seed)
    seconds["sklearn BayesianGMM"] = time.perf_counter() - start
    vb_keys = jax.random.split(keys[5])
    start = time.perf_counter()
    vb = fit_vb_mixture(data.x, num_start, rng_key=vb_keys[0],
                        prune_threshold=VB_PRUNE_THRESHOLD, max_iterations=MAX_ITERATIONS)
    found["VB, pruning"], seconds["VB, pruning"] = vb.num_components, time.perf_counter() - start
    traces["VB, pruning"] = np.asarray(vb.trace.num_components)
    if vb_bound:
        start = time.perf_counter()
        found["VB bound over k"] = _vb_bound_choice(data.x, candidates, vb_keys[1],
                                                    num_restarts)
        seconds["VB bound over k"] = time.perf_counter() - start
    return found, seconds, traces


def _vb_bound_choice(x, candidates, key, num_restarts):
    """The VB bound over the candidate k (module docstring): the fewest surviving
    components among the fits within VB_BOUND_TIE nats of the highest bound."""
    bounds, survivors = [], []
    for k in candidates:
        fits = [fit_vb_mixture(x, k, rng_key=jax.random.fold_in(key, num_restarts * k + r),
                               prune_threshold=VB_BOUND_THRESHOLD,
                               max_iterations=MAX_ITERATIONS) for r in range(num_restarts)]
        best = max(fits, key=lambda fit: fit.bound)
        bounds.append(best.bound)
        survivors.append(best.num_components)
    top = max(bounds)
    return min(s for s, b in zip(survivors, bounds, strict=True) if b >= top - VB_BOUND_TIE)


def _bayesian_gmm(x, num_components, seed):
    """scikit-learn's Dirichlet-process mixture: components with weight above 1%."""
    from sklearn.mixture import BayesianGaussianMixture

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its own not-converged note
        model = BayesianGaussianMixture(
            n_components=num_components, weight_concentration_prior_type="dirichlet_process",
            covariance_type="full", max_iter=500, random_state=seed).fit(
                np.asarray(x, np.float64))
    return int(np.sum(model.weights_ > 0.01))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="2 seeds, k in 2..3, 300 examples, candidates 1..4, 6 to start")
    parser.add_argument("--seeds", type=int, default=20, help="number of data seeds")
    parser.add_argument("--output-dir", default="zoo-results", help="folder for PNG and JSON")
    parser.add_argument("--vb-bound", action=argparse.BooleanOptionalAction, default=None,
                        help="score the VB bound over the candidate k (default: yes, but not "
                             "with --quick: one compilation per candidate)")
    args = parser.parse_args(argv)
    vb_bound = not args.quick if args.vb_bound is None else args.vb_bound
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    if args.quick:
        num_seeds, true_ks, num_examples, candidates, num_start, restarts = (
            2, (2, 3), 300, range(1, 5), 6, 1)
    else:
        num_seeds, true_ks, num_examples, candidates, num_start, restarts = (
            args.seeds, tuple(range(2, 9)), 1200, range(1, 11), 12, 3)

    rows, traces = [], {}
    start = time.perf_counter()
    for seed in range(num_seeds):
        k, separation, data = planted(seed, num_examples, true_ks)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ZooWarning)
            found, seconds, seed_traces = estimates(data, jax.random.key(seed), candidates,
                                                    num_start, restarts, seed, vb_bound)
        rows.append({"seed": seed, "true_k": k, "separation": separation, "found": found,
                     "seconds": seconds})
        if seed == 0:
            traces = seed_traces
    elapsed = time.perf_counter() - start
    rules = list(rows[0]["found"])
    summary = _summarise(rows, rules)

    print(f"Choosing k: {num_seeds} seeds, true k in {list(true_ks)}, d = 2, "
          f"{num_examples} examples, separations {list(SEPARATIONS)}, "
          f"candidates {list(candidates)[0]}..{list(candidates)[-1]}, "
          f"{num_start} components to start ({elapsed:.0f} s)")
    header = "".join(f"{'sep ' + format(s, 'g'):>9s}" for s in SEPARATIONS)
    print(f"{'rule':30s} {'hits':>7s}{header} {'too few':>8s} {'too many':>9s} "
          f"{'mean |err|':>11s} {'mean k':>7s} {'s/seed':>7s}")
    for rule in rules:
        s = summary[rule]
        by_sep = "".join(f"{s['by_separation'][str(sep)]:>9s}" for sep in SEPARATIONS)
        shared = "*" if rule in CRITERIA else " "
        print(f"{rule:30s} {s['hits']:>3d}/{num_seeds:<3d}{by_sep} {s['under']:>8d} "
              f"{s['over']:>9d} {s['mean_abs_error']:>11.2f} {s['mean_found']:>7.2f} "
              f"{s['median_seconds']:>6.2f}{shared}")
    print(f"(mean k: mean estimate, true k {np.mean([r['true_k'] for r in rows]):.2f} on "
          "average; s/seed: median wall seconds per seed, the first seed also compiles; *: one "
          "set of fits shared by the five criteria)")
    for line in _findings(summary, num_seeds):
        print(line)

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "yingyang_selection.json").write_text(json.dumps(jsonable(
        {"rows": rows, "summary": summary, "settings": {
            "seeds": num_seeds, "true_ks": list(true_ks), "num_examples": num_examples,
            "candidates": list(candidates), "num_start": num_start,
            "restarts": restarts, "vb_bound": vb_bound,
            "vb_prune_threshold": VB_PRUNE_THRESHOLD,
            "vb_bound_threshold": VB_BOUND_THRESHOLD, "vb_bound_tie": VB_BOUND_TIE,
            "max_iterations": MAX_ITERATIONS}}), indent=1))
    _plot(rows, rules, traces, out)
    return {"rows": rows, "summary": summary, "printed_rules": rules}


def _summarise(rows, rules):
    summary = {}
    for rule in rules:
        errors = np.array([r["found"][rule] - r["true_k"] for r in rows])
        by_separation = {}
        for sep in SEPARATIONS:
            mine = [r["found"][rule] == r["true_k"] for r in rows if r["separation"] == sep]
            by_separation[str(sep)] = f"{sum(mine)}/{len(mine)}" if mine else "-"
        summary[rule] = {"hits": int(np.sum(errors == 0)), "under": int(np.sum(errors < 0)),
                         "over": int(np.sum(errors > 0)),
                         "mean_abs_error": float(np.mean(np.abs(errors))),
                         "mean_found": float(np.mean([r["found"][rule] for r in rows])),
                         "median_seconds": float(np.median([r["seconds"][rule] for r in rows])),
                         "by_separation": by_separation}
    return summary


def _findings(summary, num_seeds):
    """The paper's claims next to the measured hit rates."""
    def rate(rule):
        return f"{summary[rule]['hits']}/{num_seeds}"

    best = max(summary, key=lambda r: summary[r]["hits"])
    lines = ["", "Findings (the paper gives claims, no numbers):"]
    lines.append(f"* J(k) (eq. 24) finds the true k in {rate('J')}, L_map in {rate('L_map')}: "
                 "the paper's claim that these criteria select k "
                 + ("holds on most seeds." if min(summary['J']['hits'], summary['L_map']['hits'])
                    > num_seeds / 2 else "holds only on some seeds here."))
    lines.append(f"* L_stocha alone finds it in {rate('L_stocha')}, too many in "
                 f"{summary['L_stocha']['over']}: once the weights are fitted it carries no "
                 "penalty on k, so it keeps falling with k (BIC "
                 f"{rate('bic')}, AIC {rate('aic')} add one).")
    literal = summary["prune, hard-cut EM (literal)"]
    lines.append(f"* Automatic selection as sec. 5.2 states it (hard-cut EM from many "
                 f"components) ends at the truth in {literal['hits']}/{num_seeds} and keeps "
                 f"too many in {literal['over']}: components rarely collapse or lose all "
                 "their points, so redundant ones survive "
                 f"(with EM: {rate('prune, EM (literal)')}).")
    lines.append(f"* The MML weight update (a variant, not the paper's) ends at the truth in "
                 f"{rate('prune, EM + MML weights')}.")
    lines.append(f"* RPCL (winner and rival by the full posterior) in {rate('RPCL')}; "
                 f"scikit-learn's BayesianGaussianMixture in {rate('sklearn BayesianGMM')}.")
    vb = summary["VB, pruning"]
    lines.append(f"* Variational Bayes (Corduneanu and Bishop), pruning from the same "
                 f"large start, ends at the truth in {vb['hits']}/{num_seeds} (too few "
                 f"{vb['under']}, too many {vb['over']}, mean {vb['mean_found']:.2f} "
                 "components)"
                 + (f"; its bound over the candidate k in {rate('VB bound over k')}."
                    if "VB bound over k" in summary else "."))
    lines.append(f"* Most hits: {best} ({rate(best)}).")
    return lines


def _plot(rows, rules, traces, out):
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        print('matplotlib is not installed (pip install -e ".[examples]"): no figure')
        return
    fig, axes = new_figure(1, 3, figsize=(16, 5.2))
    true_k = np.array([r["true_k"] for r in rows])
    jitter = np.linspace(-0.3, 0.3, len(rules))
    for i, (offset, rule) in enumerate(zip(jitter, rules, strict=True)):
        found = np.array([r["found"][rule] for r in rows])
        # Ten colours, then the same ones with another marker (12 rules).
        axes[0].scatter(true_k + offset, found, s=14, label=rule, color=f"C{i % 10}",
                        marker="o^s"[i // 10 % 3])
    span = [true_k.min() - 0.5, true_k.max() + 0.5]
    axes[0].plot(span, span, "k--", lw=1)
    axes[0].set_xlabel("true k (jittered by rule)")
    axes[0].set_ylabel("estimated k")
    axes[0].set_title("estimates per seed (dashed: correct)")
    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].legend(fontsize=7, ncols=3, loc="upper center", bbox_to_anchor=(0.5, -0.15))
    hits = [np.mean([r["found"][rule] == r["true_k"] for r in rows]) for rule in rules]
    axes[1].barh(range(len(rules)), hits)
    axes[1].set_yticks(range(len(rules)), rules, fontsize=8)
    axes[1].set_xlim(0, 1)
    axes[1].set_xlabel("hit rate (fraction of seeds)")
    axes[1].set_title("how often the true k is found")
    for name, trace in traces.items():
        axes[2].step(np.arange(1, len(trace) + 1), trace, where="post", label=name)
    axes[2].axhline(rows[0]["true_k"], color="k", ls="--", lw=1, label="true k")
    axes[2].set_xscale("log")
    axes[2].set_xlabel("iteration")
    axes[2].set_ylabel("surviving components")
    axes[2].set_title("pruning trace, seed 0")
    axes[2].yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[2].legend(fontsize=7)
    path = save_figure(fig, out / "yingyang_selection.png")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
