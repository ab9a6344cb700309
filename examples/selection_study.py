"""Model-selection study: every family's criteria graded against the reference evidence.
=====================================================================================


For each family whose size is selectable -- Gaussian mixture k, MCVQ (K, J), GVQ
number of features n, clipped-Gaussian hidden units P, PPCA components q -- this
script plants a model, draws data at three difficulty levels (well separated,
overlapping, too few examples) over several seeds, and runs
:func:`inference.model_selection` over candidates around the planted size with every
criterion the family offers. The *reference* is the log marginal likelihood of each
candidate's Bayesian program (its priors, discrete sites summed out), estimated by
adaptive tempered SMC with its own standard error from repeated runs; it is what
Bayesian model selection is about, so every other criterion is judged by

* its **hit rate**: how often it chooses the planted size;
* its **agreement** with the evidence: how often it chooses what the evidence chooses;
* its **rank correlation** (Spearman) with the evidence across the candidates of a
  seed, averaged over seeds;
* its **cost**: wall seconds per seed (all candidates).

Prints one table per family and writes ``selection_study.json`` and one figure per
family (``selection_study_<family>.png``: hit rate and agreement per criterion and
level). ``--quick`` runs one seed of the well-separated level with the cheap criteria
(no NUTS, no SMC): a smoke test of the pipeline, not a study. ``--levels`` and
``--families`` choose parts of the full study. Every seed's row is saved as soon as it
is computed (under ``<output-dir>/runs/<family>/<level>/``, beside the settings that
made it) and a later run with the same settings reuses it: a study stopped part-way
resumes where it was, and parts run one after another or in separate processes add up
to the whole; ``--fresh`` recomputes. ``--saved-only`` computes nothing and reports the
rows saved so far, each level's table counting its own rows: the report of a study in
progress. The project's own rows are kept in the repository under
``docs/_data/selection_study/`` (pass it as ``--output-dir`` to add to them or report
them).

The same study is also a study file, ``examples/studies/selection.toml`` (without the
shapes question below): ``--study FILE.toml`` runs the rows that a study file describes
through ``ppl-zoo study``'s runner -- one Dask task per row on a local cluster of one
worker per core, on a running scheduler with ``--scheduler ADDRESS``, or one after
another here with ``--serial`` -- keeps them under ``<output-dir>/study-<name>/rows/`` and
prints and writes the same tables, figures and JSON (``examples/studies/quick.toml`` is a
small one; ``ppl-zoo study report FILE.toml`` prints the tables too).

Real data. Planted data say whether a criterion finds a size that is there; on real
data no size is true, and the question becomes what each criterion prefers, whether the
criteria agree, and what they cost. ``--study examples/studies/real_data.toml`` runs
one row per family on a real data set bundled with scikit-learn (iris for the
mixture's k, wine for PPCA's q, thresholded digits for the clipped-Gaussian model's P,
GVQ's n and MCVQ's (K, J); the files are under ``examples/studies/data/``) with the
criteria that need no sampling, and prints one line per family: the data set, N x D,
each criterion's choice (a criterion that made no choice, or a candidate left out of
a choice as degenerate or unreliable, is listed below with the reason), whether the
criteria agree (the training likelihood, which has no penalty, aside), scikit-learn's
answer where it has an estimator for the question (``GaussianMixture``'s BIC over the
same k, ``PCA(n_components="mle")``'s q) or "none", and the row's seconds. It writes
``selection_study_real_data.json``; the project's run is kept under
``docs/_data/selection_study/`` and discussed in the documentation's page "Model
selection on real data".

The evidence is judged decisive for a seed when its best candidate beats the runner-up
by more than twice the combined standard error of the two SMC estimates; agreement is
counted over decisive seeds only, since an undecided reference grades nothing.

Priors of the reference. The evidence depends on the program's priors. The data of
the mixture, MCVQ and PPCA are standardised (zero mean, unit overall variance) before
selection (GVQ's x = s F has no offset, so its data are left as drawn), and every program
keeps its documented priors except the mixture's scale, set to 2 (means and standard
deviations a priori within a few units of the standardised data). MCVQ's evidence is
that of the program with one dimension assignment shared by all examples, at the
assignment and state weights of its EM fit: log p(x | r, pi) - D log K, a lower bound
on that program's evidence (summing the assignment out takes K^D terms; see
``inference.mcvq.selection``). The
clipped-Gaussian program has one continuous latent vector per example and no
reference evidence here.

The MCVQ shapes question (``--shapes-seeds``, default 5; none with ``--quick``). On
noise-free images of 3 shapes at 9 offsets, VB-MCVQ started over-complete at (8 VQs,
10 states) keeps more VQs than the 3 shapes, with a higher bound than VB started at
(3, 9). Does the evidence side with the bound or with the planted structure? Per seed,
both structures' evidence (each at its own dimension assignment and state weights,
less D log K for choosing the assignment) is estimated VQ by VQ with the parameters
integrated (``inference.mcvq.collapsed``; ``--shapes-particles`` particles, and after
each image ``--shapes-sweeps`` collapsed Gibbs sweeps over the images placed so far, which
let the particles revise early states); tempered SMC on the program's parameters
spreads by ~10 nats on five noise-free pixels. Beside it stand the exact log joints of
one assignment each (the true offsets; VB's most probable states): lower bounds on
each evidence. An estimate below its own exact term (by more than 2 SE) missed
assignments of large weight (biased low); the evidence is counted only where neither
is.

References: Schwarz (1978), Akaike (1974), Watanabe (2010), Vehtari, Gelman and Gabry
(2017), Minka (NIPS 2000) for the criteria; Del Moral, Doucet and Jasra, "Sequential
Monte Carlo samplers", JRSS B 68 (2006) for the reference.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import time
import warnings
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np

from inference.app.reproduce import versions
from inference.app.selection import model_selection, selectable_families
from inference.app.study.tables import (  # noqa: F401 (the study's tables, used below and by tests)
    best_agreement,
    decisive,
    family_block,
    overall,
    overall_table,
    seeds_text,
    spearman,
    standardise,
    summarise,
    table,
)
from inference.engine.reporting import jsonable
from ppl_models import clipped_gaussian, gvq, mcvq, mixture, ppca
from ppl_models.diagnostics import ZooWarning

LEVELS = ("separated", "overlapping", "few")


class Study(NamedTuple):
    """One family's planted problem, its levels, candidates and criteria."""

    planted: object
    candidates: tuple
    levels: dict                     # level -> keyword arguments of ``draw``
    draw: object                     # (key, **level) -> data (N, D)
    criteria: tuple
    quick_criteria: tuple
    options: dict | None = None
    fit_options: dict | None = None
    standardise: bool = True


def _mixture(key, num, separation):
    return mixture.generate(key, num, 3, 2, separation=separation).x


def _ppca(key, num, noise):
    return ppca.generate(key, num, 6, 2, noise=noise).x


def _gvq(key, num, noise):
    return gvq.generate_planted(key, num, 3, 6, noise_scale=noise).x


def _clipped(key, num, noise):
    return clipped_gaussian.generate(key, num, 10, 2, noise=noise).s


def _mcvq(key, num, separation):
    return mcvq.generate(key, num, 8, 2, 3, separation=separation, noise_scale=0.5).x


STUDIES = {
    "mixture": Study(3, (1, 2, 3, 4, 5), {
        "separated": dict(num=300, separation=8.0), "overlapping": dict(num=300, separation=2.5),
        "few": dict(num=24, separation=5.0)}, _mixture,
        ("vb", "cv", "bic", "aic", "waic", "loo", "evidence"), ("cv", "bic", "aic"),
        options={"prior_scale": 2.0}),
    "mcvq": Study((2, 3), ((1, 3), (2, 2), (2, 3), (2, 4), (3, 3)), {
        "separated": dict(num=120, separation=3.0), "overlapping": dict(num=120, separation=1.0),
        "few": dict(num=16, separation=3.0)}, _mcvq,
        ("vb", "cv", "bic", "aic", "evidence"), ("cv", "bic", "aic")),
    "gvq": Study(3, (1, 2, 3, 4, 5), {
        "separated": dict(num=200, noise=0.2), "overlapping": dict(num=200, noise=1.0),
        "few": dict(num=12, noise=0.3)}, _gvq,
        ("cv", "bic", "aic", "evidence"), ("cv", "bic", "aic"), standardise=False),
    "clipped": Study(2, (1, 2, 3), {
        "separated": dict(num=400, noise=0.0), "overlapping": dict(num=400, noise=1.0),
        "few": dict(num=30, noise=0.0)}, _clipped,
        ("cv", "bic", "aic"), ("cv", "bic", "aic"), standardise=False),
    "ppca": Study(2, (1, 2, 3, 4, 5), {
        "separated": dict(num=200, noise=0.3), "overlapping": dict(num=200, noise=1.5),
        "few": dict(num=10, noise=0.3)}, _ppca,
        ("cv", "bic", "aic", "waic", "loo", "laplace", "pca_mle", "evidence"),
        ("cv", "bic", "aic", "laplace", "pca_mle")),
}


#: The MCVQ shapes question: images of 3 shapes at 9 offsets (11 x 11 pixels), VB-MCVQ
#: started over-complete at (8 VQs, 10 states) against the planted structure.
SHAPES = {"num_causes": 3, "num_positions": 9, "over_complete": (8, 10)}


def shapes_seed(seed, num_examples, options):
    """One seed of the shapes question: the reference evidence of the planted structure
    (each pixel with the shape that can cover it, never-lit pixels with the first; 9
    equally likely offsets) and of VB's pruned structure (argmax g, its state weights),
    beside VB's bound for a run started over-complete and one started at (3, 9)."""
    from inference.mcvq.selection import factorised_log_evidence
    from inference.mcvq.vb import fit_vb_mcvq
    from ppl_models.datasets import causes

    k, j = SHAPES["num_causes"], SHAPES["num_positions"]
    key = jax.random.fold_in(jax.random.key(seed), 7919)
    key_data, key_vb, key_vb3, key_a, key_b = jax.random.split(key, 5)
    data = causes.generate(key_data, num_examples, num_causes=k, num_positions=j)
    x = data.x_train
    mask = np.ones(x.shape, bool)
    dim = x.shape[1]
    prior = mcvq.prior_from_data(x, mask)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ZooWarning)
        fit = fit_vb_mcvq(x, *SHAPES["over_complete"], rng_key=key_vb)
        fit3 = fit_vb_mcvq(x, k, j, rng_key=key_vb3)
        planted = factorised_log_evidence(
            x, mask, np.where(data.owner < 0, 0, data.owner), np.full((k, j), 1.0 / j), prior,
            rng_key=key_a, method="collapsed", **options)
        pruned = factorised_log_evidence(
            x, mask, np.argmax(np.asarray(fit.g), axis=1),
            np.asarray(fit.pi) * np.asarray(fit.state_active), prior, rng_key=key_b,
            method="collapsed", **options)
    # Exact one-assignment lower bounds: the true offsets for the planted structure, the
    # most probable state of every example under VB's Q(s) for the pruned one.
    from inference.mcvq.collapsed import assignment_log_joint
    from inference.mcvq.selection import vq_blocks

    def bound_of(r_dims, pi, states):
        total = 0.0
        for kk, dims, active in vq_blocks(r_dims, pi):
            total += assignment_log_joint(
                x[:, dims], np.searchsorted(active, states[:, kk]),
                pi[kk, active] / pi[kk, active].sum(),
                prior._replace(mean=np.asarray(prior.mean)[dims]))
        return total

    pi_vb = np.asarray(fit.pi) * np.asarray(fit.state_active)
    lower = {"planted": bound_of(np.where(data.owner < 0, 0, data.owner),
                                 np.full((k, j), 1.0 / j), np.asarray(data.offsets_train)),
             "vb": bound_of(np.argmax(np.asarray(fit.g), axis=1), pi_vb,
                            np.argmax(np.asarray(fit.m) + np.where(pi_vb > 0, 0.0, -np.inf)[None],
                                      axis=-1))}
    # one assignment shared by all examples, uniform over the K VQs: log p(r) = -D log K
    value = {"planted": (planted.log_evidence - dim * np.log(k)) / num_examples,
             "vb": (pruned.log_evidence - dim * np.log(int(fit.num_vqs))) / num_examples}
    return {"seed": seed, "num_examples": num_examples,
            "vb_num_vqs": int(fit.num_vqs), "vb_causes": int(fit.num_causes),
            "vb_num_states": [int(n) for n in fit.num_states],
            "bound": {"vb": float(fit.bound) / num_examples,
                      "planted_start": float(fit3.bound) / num_examples},
            "evidence": value,
            "evidence_se": {"planted": planted.standard_error / num_examples,
                            "vb": pruned.standard_error / num_examples},
            "one_assignment": {name: (lower[name] - dim * np.log(kk)) / num_examples
                               for name, kk in (("planted", k), ("vb", int(fit.num_vqs)))},
            "converged": bool(planted.converged and pruned.converged),
            "seconds": planted.seconds + pruned.seconds}


def _reliable(row):
    """The SIS estimates are not below their own exact one-assignment terms (by more
    than 2 SE): else they missed assignments of large weight and are biased low."""
    terms = row.get("one_assignment")
    return terms is None or all(
        row["evidence"][s] >= terms[s] - 2 * row["evidence_se"][s] for s in ("vb", "planted"))


def shapes_verdict(rows):
    """Counts of seeds where the bound, the exact one-assignment terms and the evidence
    prefer VB's pruned structure (the evidence: by more than 2 combined SE, and only
    where its estimates are reliable, :func:`_reliable`), and the report lines."""
    n = len(rows)
    bound_vb = sum(r["bound"]["vb"] > r["bound"]["planted_start"] for r in rows)
    terms_vb = sum(r["one_assignment"]["vb"] > r["one_assignment"]["planted"]
                   for r in rows if "one_assignment" in r)
    reliable = [r for r in rows if _reliable(r)]
    diffs = [(r["evidence"]["vb"] - r["evidence"]["planted"],
              float(np.hypot(r["evidence_se"]["vb"], r["evidence_se"]["planted"])))
             for r in reliable]
    for_vb = sum(d > 2 * e for d, e in diffs)
    for_planted = sum(d < -2 * e for d, e in diffs)
    lines = [f"\nmcvq on shapes (3 shapes x 9 offsets, 11 x 11 pixels, "
             f"{rows[0]['num_examples']} images; VB started at {SHAPES['over_complete']}), "
             f"{n} seed(s); nats per image:",
             "seed  VB VQs (causes)  bound VB / VB from (3,9)   evidence VB / planted (SE)"
             "   one-assignment terms VB / planted"]
    for r in rows:
        lines.append(f"{r['seed']:>4d}  {r['vb_num_vqs']:>6d} ({r['vb_causes']})"
                     f"{r['bound']['vb']:>14.2f} /{r['bound']['planted_start']:>8.2f}"
                     f"{r['evidence']['vb']:>13.2f} /{r['evidence']['planted']:>8.2f} "
                     f"(+-{max(r['evidence_se'].values()):.2f})"
                     + ("" if "one_assignment" not in r else
                        f"{r['one_assignment']['vb']:>12.2f} /"
                        f"{r['one_assignment']['planted']:>8.2f}")
                     + ("" if _reliable(r) else "  SIS below its exact term: biased low"))
    lines.append(f"the bound prefers VB's pruned model in {bound_vb}/{n} seeds; the exact "
                 f"one-assignment terms (true offsets; VB's most probable states) in "
                 f"{terms_vb}/{n}; the evidence, where its estimates are reliable "
                 f"({len(reliable)}/{n} seeds), prefers it in {for_vb} and the planted 3 "
                 f"shapes in {for_planted} (by more than 2 SE)")
    return {"bound_prefers_vb": bound_vb, "terms_prefer_vb": terms_vb,
            "reliable": len(reliable), "evidence_prefers_vb": for_vb,
            "evidence_prefers_planted": for_planted, "seeds": n}, lines


def run_seed(name, study, level, seed, criteria, settings):
    """One seed of one level: data, model_selection, the row kept for the summary."""
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), LEVELS.index(level)),
                             sum(map(ord, name)))
    key_data, key_select = jax.random.split(key)
    x = np.asarray(study.draw(key_data, **study.levels[level]))
    if study.standardise:
        x = standardise(x)
    num = x.shape[0]
    cands = tuple(c for c in study.candidates if not isinstance(c, int) or c < num)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ZooWarning)
        result = model_selection(
            x, cands, model=name, criteria=criteria, rng_key=key_select,
            num_folds=min(settings["folds"], num), num_restarts=settings["restarts"],
            num_warmup=settings["nuts"], num_samples=settings["nuts"],
            evidence_options=settings["evidence"], evidence_max_size=1 << 24,
            loo_max_size=1 << 20, options=study.options, **(study.fit_options or {}))
    return {"seed": seed, "num_examples": num, "decisive": decisive(result),
            "candidates": [list(c) if isinstance(c, tuple) else c for c in cands],
            "values": {c: list(v) for c, v in result.values.items()},
            "errors": {c: list(v) for c, v in result.standard_errors.items()},
            "choice": {c: (list(v) if isinstance(v, tuple) else v)
                       for c, v in result.choice.items()},
            "seconds": dict(result.seconds), "skipped": dict(result.skipped),
            "notes": list(result.notes)}


def recipe_path(out, parts, recipe, seed):
    """``out/runs/<parts...>/<sha1 of recipe>/seed<NNN>.json``."""
    digest = hashlib.sha1(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    return out.joinpath("runs", *parts, digest, f"seed{seed:03d}.json")


def computed_on():
    """Where a row is computed: the versions that set its numbers and the cores that set its
    seconds (saved beside the row; a study may gather rows from several machines)."""
    return {**versions(), "backend": jax.default_backend(),
            "single_thread": "intra_op_parallelism_threads=1" in os.environ.get("XLA_FLAGS", "")}


def cached_row(path, recipe, compute, fresh=False):
    """(row, reused): the row saved at ``path`` by a run with the same ``recipe`` (unless
    ``fresh``), else ``compute()``, saved at once (never half-written); (None, False)
    when nothing is saved and ``compute`` is None."""
    if not fresh and path.exists():
        saved = json.loads(path.read_text())
        if saved.get("recipe") == recipe:
            return saved["row"], True
    if compute is None:
        return None, False
    row = jsonable(compute())
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".part")
    partial.write_text(json.dumps({"recipe": recipe, "row": row,
                                   "computed_on": computed_on()}))
    partial.replace(path)
    return row, False


def seed_row(out, name, study, level, seed, criteria, settings, fresh=False,
             saved_only=False):
    """(row, reused): one seed's row, read from
    ``out/runs/<family>/<level>/<recipe>/seed<NNN>.json`` when a run with the same
    criteria, candidates, level and settings (hashed into ``<recipe>``) saved it there
    (unless ``fresh``), else computed by :func:`run_seed` and saved at once. So a study
    that is stopped resumes where it was, parts run in separate processes (``--families``,
    ``--levels``) add up to the whole, and runs with other settings (``--quick``) keep
    their own rows. With ``saved_only``, a row not saved is (None, False)."""
    recipe = jsonable({"criteria": criteria, "candidates": study.candidates,
                       "level": study.levels[level], "options": study.options,
                       "fit_options": study.fit_options,
                       "settings": {k: settings[k] for k in ("folds", "restarts", "nuts",
                                                             "evidence")}})
    return cached_row(recipe_path(out, (name, level), recipe, seed), recipe,
                      None if saved_only else
                      lambda: run_seed(name, study, level, seed, criteria, settings), fresh)


def plot(path, name, planted, summary, criteria, seeds):
    """Per criterion and level: the fraction of seeds choosing the planted size, and
    (with the evidence) the fraction of decisive seeds choosing what the evidence chose."""
    from inference.engine.figures import new_figure, save_figure

    with_evidence = "evidence" in criteria
    fig, axes = new_figure(1, 2 if with_evidence else 1,
                           figsize=(10, 3.6) if with_evidence else (5.5, 3.6))
    axes = np.atleast_1d(axes)
    width = 0.8 / len(summary)
    xs = np.arange(len(criteria))
    for i, lv in enumerate(summary):
        hits = [summary[lv][c]["hits"] / seeds[lv] for c in criteria]
        axes[0].bar(xs + i * width, hits, width, label=lv)
        if with_evidence:
            agree = [summary[lv][c]["agree"] / max(summary[lv][c]["with_evidence"], 1)
                     if c != "evidence" else np.nan for c in criteria]
            axes[1].bar(xs + i * width, agree, width, label=lv)
    titles = ("chooses the planted size", "chooses what the evidence chooses")
    for ax, title in zip(axes, titles[:len(axes)], strict=True):
        ax.set_xticks(xs + width * (len(summary) - 1) / 2, criteria, rotation=30)
        ax.set_ylim(0, 1.3)  # room for the legend above the bars
        ax.set_yticks(np.linspace(0, 1, 6))
        ax.set_title(title)
    axes[0].set_ylabel("fraction of seeds")
    if with_evidence:
        axes[1].set_ylabel("fraction of decisive seeds")
    axes[0].legend(fontsize=8, ncol=len(summary), loc="upper center")
    fig.suptitle(f"{name}: planted {planted}, {seeds_text(seeds)}")
    save_figure(fig, path)


def family_result(out, name, planted, candidates, criteria, rows, summary, levels):
    """(report lines, JSON entry) of one family: its tables (printed) and its figure
    (``rows`` and ``summary``: level -> the level's rows and their summary)."""
    counts = {lv: len(r) for lv, r in rows.items()}
    block, best = family_block(name, planted, summary, criteria, counts)
    print("\n".join(block), flush=True)
    figure = out / f"selection_study_{name}.png"
    try:
        plot(figure, name, planted, summary, criteria, counts)
    except ImportError:
        figure = None
    return block, {
        "planted": list(planted) if isinstance(planted, tuple) else planted,
        "criteria": list(criteria), "levels": {lv: levels[lv] for lv in summary},
        "seeds": counts, "candidates": [list(c) if isinstance(c, tuple) else c
                                        for c in candidates],
        "summary": summary, "overall": overall(summary, criteria, counts), "best": best,
        "report": block, "runs": rows, "figure": None if figure is None else figure.name}


def run_study_file(args, parser):
    """``--study FILE``: the rows of a study file (``examples/studies/selection.toml`` is
    this study) computed by ppl-zoo's study runner -- on a Dask cluster, or one after
    another here with ``--serial`` -- and kept under ``<output-dir>/study-<name>/rows/``
    (a later run reuses them), then the same tables, figures and JSON as above."""
    from inference.app.study import StudyError, load_study, run_study, study_report
    from inference.engine.compilation_cache import default_cache_dir

    given = [flag for flag, value in (
        ("--quick", args.quick), ("--seeds", args.seeds), ("--families", args.families),
        ("--levels", args.levels), ("--only-seeds", args.only_seeds), ("--fresh", args.fresh),
        ("--shapes-seeds", args.shapes_seeds)) if value]
    if given:
        parser.error(f"--study takes the families, levels, seeds and settings from the file; "
                     f"drop {given}")
    try:
        study = load_study(args.study)
    except StudyError as error:
        parser.error(str(error))
    start = time.perf_counter()
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    store = out / f"study-{study.name}"
    if not args.saved_only:
        run = run_study(study, output_dir=store, scheduler=args.scheduler,
                        workers=args.workers, serial=args.serial, cache_dir=default_cache_dir())
        print(f"{run.reused} rows reused, {run.computed} computed ({run.failed} failed) in "
              f"{run.seconds:.0f} s", flush=True)
    report, tables = study_report(study, store)
    print(report[0])
    seeds = max(len(s.seeds) for s in study.data.values())
    results = {"settings": {"study": str(args.study), "seeds": seeds,
                            "families": [m.label for m in study.models],
                            "settings": study.settings}, "families": {}}
    lines = ["Model-selection study: each criterion against the reference log evidence "
             f"(adaptive tempered SMC), from {args.study}"]
    for entry in study.models:
        table_of = tables.get(entry.label)
        if table_of is None or table_of["summary"] is None:
            continue
        source = study.data[entry.data]
        levels = getattr(source, "levels", None) or {}
        block, results["families"][entry.label] = family_result(
            out, entry.label, entry.planted, entry.candidates or (), table_of["criteria"],
            table_of["rows"], table_of["summary"], {lv: levels.get(lv) for lv in
                                                    table_of["summary"]})
        lines += block
    real = real_data_result(study, args.study, report, tables, store)
    if real is not None:
        print("\n".join(real["report"][1:]), flush=True)
        path = out / "selection_study_real_data.json"
        path.write_text(json.dumps(jsonable(real), indent=1))
        print(f"wrote {path}")
        results["real_data"] = real
    results["seconds"] = time.perf_counter() - start
    results["report"] = lines
    if results["families"] or real is None:
        path = out / "selection_study.json"
        path.write_text(json.dumps(jsonable(results), indent=1))
        print(f"wrote {path}")
    return results


def real_data_result(study, source, report, tables, store):
    """The real-data part of a study file (family entries without a planted size, e.g.
    ``examples/studies/real_data.toml``): per family row the data set, N x D, each
    criterion's choice, whether they agree, scikit-learn's answer (a program entry on
    the same data; "none" without one) and the seconds, as
    :func:`inference.app.study.tables.real_data_table` prints them; None without such
    entries. Written to ``selection_study_real_data.json`` beside the rows' folder."""
    from inference.app.study.tables import real_data_table

    rows = [s for entry in study.models for s in tables.get(entry.label, {}).get("real", ())]
    if not rows:
        return None
    computed_on = {}
    for path in sorted(Path(store, "rows").glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("status") == "ok" and record.get("computed_on"):
            computed_on = {k: v for k, v in record["computed_on"].items()
                           if k not in ("host", "pid")}
            break
    entries = {e.label: e for e in study.models}
    for row in rows:
        entry = entries[row["family"]]
        row["options"] = dict(entry.options)
        row["standardise"] = getattr(study.data[entry.data], "standardise", False)
    return {"study": study.name, "source": str(source), "settings": study.settings,
            "rows_dir": f"study-{study.name}/rows", "computed_on": computed_on,
            "rows": rows, "report": [report[0], *real_data_table(rows)]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="2 seeds, cheap criteria, few SMC particles (a smoke test)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per level (default 20)")
    parser.add_argument("--families", nargs="+", default=None,
                        help=f"families to study (default all of {list(STUDIES)})")
    parser.add_argument("--levels", nargs="+", default=None, choices=LEVELS,
                        help="difficulty levels (default all; quick: separated)")
    parser.add_argument("--particles", type=int, default=1000,
                        help="SMC particles of the reference evidence (default 1000)")
    parser.add_argument("--move", choices=("hmc", "rwm"), default="hmc",
                        help="MCMC move of the SMC (default hmc)")
    parser.add_argument("--mcmc-steps", type=int, default=None,
                        help="MCMC moves per tempering step of the SMC (default 3 HMC or 10 "
                             "random-walk moves)")
    parser.add_argument("--shapes-seeds", type=int, default=None,
                        help="seeds of the MCVQ shapes question (default 5; quick: 0)")
    parser.add_argument("--shapes-examples", type=int, default=24,
                        help="images per seed of the shapes question (default 24)")
    parser.add_argument("--shapes-particles", type=int, default=100,
                        help="particles of the shapes question's sampler (default 100)")
    parser.add_argument("--shapes-sweeps", type=int, default=1,
                        help="Gibbs sweeps over the placed images after each image in the "
                             "shapes question's sampler (default 1; 0: none)")
    parser.add_argument("--output-dir", "--out", default="zoo-results",
                        help="folder for JSON and PNG; each seed's row is saved under "
                             "runs/ there and reused by a later run with the same settings")
    parser.add_argument("--fresh", action="store_true",
                        help="recompute every seed, ignoring rows saved by earlier runs")
    parser.add_argument("--only-seeds", type=int, nargs="+", default=None, metavar="SEED",
                        help="compute only these seeds (0-based, below --seeds); the others "
                             "are reported if saved: splits a study over processes or "
                             "machines that share --output-dir")
    parser.add_argument("--saved-only", action="store_true",
                        help="compute nothing: report the rows saved under --output-dir "
                             "(a study in progress; each level's table counts its own rows)")
    parser.add_argument("--study", metavar="FILE.toml", default=None,
                        help="run the study that a study file describes (e.g. "
                             "examples/studies/selection.toml, this study without the shapes "
                             "question) through ppl-zoo's study runner, then report it as here")
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None,
                        help="with --study: the Dask scheduler to run on (default: a "
                             "LocalCluster of one worker per core)")
    parser.add_argument("--workers", type=int, default=None,
                        help="with --study: the LocalCluster's worker processes")
    parser.add_argument("--serial", action="store_true",
                        help="with --study: compute the rows one after another here, no Dask")
    args = parser.parse_args(argv)
    if args.study is not None:
        return run_study_file(args, parser)
    seeds = (1 if args.quick else 20) if args.seeds is None else args.seeds
    levels = (("separated",) if args.quick else LEVELS) if args.levels is None \
        else tuple(args.levels)
    families = list(STUDIES) if args.families is None else args.families
    available = selectable_families()
    unknown = [f for f in families if f not in STUDIES]
    if unknown:
        parser.error(f"--families: unknown {unknown}; choose from {list(STUDIES)}")
    if seeds < 1:
        parser.error("--seeds must be at least 1")
    if args.only_seeds is not None and not all(0 <= s < seeds for s in args.only_seeds):
        parser.error(f"--only-seeds must lie in 0..{seeds - 1} (--seeds {seeds})")
    if args.shapes_seeds is not None and args.shapes_seeds < 0:
        parser.error("--shapes-seeds must be at least 0")
    if args.shapes_examples < 2:
        parser.error("--shapes-examples must be at least 2")
    if args.shapes_particles < 2 or args.shapes_sweeps < 0:
        parser.error("--shapes-particles must be at least 2 and --shapes-sweeps at least 0")
    if args.saved_only and args.fresh:
        parser.error("--saved-only reports saved rows: it cannot be combined with --fresh")
    if args.particles < 2 or (args.mcmc_steps is not None and args.mcmc_steps < 1):
        parser.error("--particles must be at least 2 and --mcmc-steps at least 1")
    settings = {"folds": 3 if args.quick else 5, "restarts": 2 if args.quick else 3,
                "nuts": 400, "levels": list(levels),
                "evidence": {"num_particles": args.particles, "num_repeats": 4,
                             "num_mcmc_steps": args.mcmc_steps, "move": args.move}}
    start = time.perf_counter()
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = {"settings": {"quick": args.quick, "seeds": seeds, "families": families,
                            **settings}, "families": {}}
    lines = ["Model-selection study: each criterion against the reference log evidence "
             "(adaptive tempered SMC)"]
    for name in families:
        if name not in available:
            print(f"{name}: not selectable in this installation; skipped")
            continue
        study = STUDIES[name]
        criteria = tuple(c for c in (study.quick_criteria if args.quick else study.criteria)
                         if c in available[name].criteria)
        rows, summary = {}, {}
        for level in levels:
            rows[level] = []
            for seed in range(seeds):
                skip = args.only_seeds is not None and seed not in args.only_seeds
                row, reused = seed_row(out, name, study, level, seed, criteria, settings,
                                       fresh=args.fresh and not skip,
                                       saved_only=args.saved_only or skip)
                if row is None:  # --saved-only, not computed yet
                    continue
                rows[level].append(row)
                print(f"  [{time.perf_counter() - start:6.0f} s] {name} {level} seed {seed}"
                      f"{' (saved)' if reused else ''}: "
                      + ", ".join(f"{c}={row['choice'].get(c)}" for c in criteria), flush=True)
            if rows[level]:
                summary[level] = summarise(rows[level], study.planted, criteria)
            else:
                del rows[level]
        if not summary:
            print(f"{name}: no saved rows under {out / 'runs' / name}")
            continue
        block, results["families"][name] = family_result(
            out, name, study.planted, study.candidates, criteria, rows, summary, study.levels)
        lines += block
    shapes_seeds = (0 if args.quick else 5) if args.shapes_seeds is None else args.shapes_seeds
    if shapes_seeds > 0 and "mcvq" in families:
        shapes_rows = []
        for seed in range(shapes_seeds):
            options = {"num_particles": args.shapes_particles, "num_repeats": 4,
                       "num_sweeps": args.shapes_sweeps}
            recipe = jsonable({"shapes": SHAPES, "num_examples": args.shapes_examples, **options})
            compute = (None if args.saved_only else
                       functools.partial(shapes_seed, seed, args.shapes_examples, options))
            r, reused = cached_row(recipe_path(out, ("mcvq_shapes",), recipe, seed), recipe,
                                   compute, args.fresh)
            if r is None:  # --saved-only, not computed yet
                continue
            shapes_rows.append(r)
            print(f"  [{time.perf_counter() - start:6.0f} s] mcvq shapes seed {seed}"
                  f"{' (saved)' if reused else ''}: VB keeps "
                  f"{r['vb_num_vqs']} VQs; evidence VB {r['evidence']['vb']:.2f}, planted "
                  f"{r['evidence']['planted']:.2f}", flush=True)
    if shapes_seeds > 0 and "mcvq" in families and shapes_rows:
        verdict, block = shapes_verdict(shapes_rows)
        print("\n".join(block), flush=True)
        lines += block
        results["shapes"] = {"settings": {**SHAPES, "num_examples": args.shapes_examples,
                                          "num_particles": args.shapes_particles,
                                          "num_sweeps": args.shapes_sweeps},
                             "verdict": verdict, "report": block, "runs": shapes_rows}
    results["seconds"] = time.perf_counter() - start
    results["report"] = lines
    path = out / "selection_study.json"
    path.write_text(json.dumps(jsonable(results), indent=1))
    print(f"wrote {path}")
    print(f"total {results['seconds']:.1f} s")
    return results


if __name__ == "__main__":
    main()
