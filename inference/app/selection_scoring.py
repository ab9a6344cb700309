"""The scoring loop of :func:`inference.model_selection`: every criterion of every candidate.

A scorer (a family's :class:`inference.engine.selection.Scorer`, or
:class:`inference.app.program_selection.ProgramScorer` for the user's programs) says how
one candidate is fitted and scored; :func:`score_candidates` runs the criteria over the
candidates, applies the choice rules (:mod:`inference.app.selection_rules`) without the
values that :mod:`inference.app.selection_checks` finds degenerate or unreliable, and
records the values, standard errors, choices, exclusions and times in a
:class:`Scores`.

References
----------
A. Vehtari, A. Gelman and J. Gabry, "Practical Bayesian model evaluation using
leave-one-out cross-validation and WAIC", Statistics and Computing 27, 2017 (PSIS-LOO
and WAIC from arviz); P. Del Moral, A. Doucet and A. Jasra, "Sequential Monte Carlo
samplers", Journal of the Royal Statistical Society B 68(3), 2006 (the evidence).
"""

from __future__ import annotations

import math
import time
import warnings

import jax
import numpy as np

from inference.app.selection_checks import chains_reason, evidence_gap_reason, pareto_reason
from inference.app.selection_result import LOWER_IS_BETTER, YINGYANG, candidate_name
from inference.app.selection_rules import argmax, folds, one_se_choice

__all__ = ["CRITERIA", "YINGYANG", "YINGYANG_FITS", "LOWER_IS_BETTER", "LOO_MAX_SIZE",
           "EVIDENCE_MAX_SIZE", "EVIDENCE_OPTIONS", "KEYED", "Progress", "Scores", "choose",
           "direction", "note_excluded_above", "score_candidates", "loo_and_waic",
           "evidence_criterion", "yingyang_criteria"]

#: The fit behind each YING-YANG criterion (the criteria of one fit share its runs).
YINGYANG_FITS = {"J": "k-means", "L_map": "hard-cut EM", "L_stocha": "EM", "yy_bic": "EM",
                 "yy_aic": "EM", "yy_loo": "NUTS"}
#: Every criterion, in table order (each family supports a subset).
CRITERIA = ("vb", "cv", "train", "bic", "aic", "loo", "waic", "evidence", "laplace",
            "pca_mle", *YINGYANG)
#: Default largest N D J^K (MCVQ) or N k d (mixture) for "loo" / "waic": one log-density
#: evaluation of NUTS then holds at most this many numbers (2 MiB in float32),
#: which keeps a chain of ~1000 iterations within minutes on 2 CPU cores.
LOO_MAX_SIZE = 1 << 19
#: Default largest problem for the reference evidence (each family says what it
#: measures: e.g. N k d for the mixture, N d 2^n for GVQ).
EVIDENCE_MAX_SIZE = 1 << 18
#: Default settings of the reference evidence (``log_evidence``).
EVIDENCE_OPTIONS = {"num_particles": 1000, "num_repeats": 4}
#: The criteria (and the over-complete run) that draw keys split from rng_key, in order.
KEYED = ("vb", "cv", "train", "bic", "loo", "over")



def direction(criterion: str) -> str:
    """``"min"`` where a criterion's least value is best (:data:`LOWER_IS_BETTER`), else
    ``"max"`` (the vocabulary of ``inference.engine.protocol``)."""
    return "min" if criterion in LOWER_IS_BETTER else "max"


class Progress:
    """A tqdm bar over the (criterion, candidate, fold) units of work, or nothing."""

    def __init__(self, show, total):
        self.bar = None
        if show and total:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc="model selection", unit="fit")

    def step(self, what):
        if self.bar is not None:
            self.bar.set_postfix_str(what, refresh=False)
            self.bar.update(1)

    def close(self):
        if self.bar is not None:
            self.bar.close()


class Scores:
    """What :func:`score_candidates` fills in."""

    def __init__(self, candidates):
        self.values, self.choice, self.errors, self.skipped = {}, {}, {}, {}
        self.seconds, self.notes = {}, []
        self.excluded, self.no_choice = {}, {}
        self.vb_sizes = (None,) * len(candidates)
        self.arviz_compare = None
        self.details = {}


def choose(out, criterion, candidates, scores, reasons, order, *, pointwise=False,
           unreliable=False):
    """``criterion``'s choice from ``scores`` (values, or pointwise rows for the one-SE
    rule) without the candidates that ``reasons`` (index -> why) exclude; every
    exclusion recorded, and "no choice" where nothing trustworthy is left.

    ``unreliable``: the exclusions are of estimates that may be wrong either way (chains
    that did not mix, heavy-tailed importance weights, an SMC run short of temperature
    1), not of fits that are degenerate by nature (a collapsed component's likelihood
    is unbounded); then an excluded value above the best kept one leaves the ranking
    unknown, and no choice is made.
    """
    original = np.array(scores, dtype=float)
    scores = np.array(scores, dtype=float)
    if reasons:
        out.excluded[criterion] = {candidate_name(candidates[i]): why
                                   for i, why in sorted(reasons.items())}
        for i in reasons:
            scores[i] = np.nan
    finite = ~np.any(np.isnan(scores), axis=1) if pointwise else np.isfinite(scores)
    chosen = (one_se_choice(candidates, scores, order) if pointwise
              else argmax(candidates, scores, order))
    if reasons and not finite.any():
        out.no_choice[criterion] = ("every candidate's value is excluded (degenerate or "
                                    "unreliable; see excluded)")
        chosen = None
    elif unreliable and chosen is not None:
        values = np.array(original if not pointwise else np.nanmean(original, axis=1))
        best = values[list(candidates).index(chosen)]
        above = [candidate_name(candidates[i]) for i in reasons
                 if np.isfinite(values[i]) and values[i] > best]
        if above:
            out.no_choice[criterion] = (
                f"the excluded (unreliable) values of {above} lie above that of "
                f"{candidate_name(chosen)}, the best reliable one: the estimates cannot "
                "rank them")
            chosen = None
    out.choice[criterion] = chosen
    return chosen


def note_excluded_above(out, criterion, candidates, values):
    """A note where an excluded candidate scored above the choice."""
    chosen = out.choice.get(criterion)
    if chosen is None or criterion not in out.excluded:
        return
    best = values[list(candidates).index(chosen)]
    above = [candidate_name(c) for c, v in zip(candidates, values, strict=True)
             if candidate_name(c) in out.excluded[criterion] and np.isfinite(v) and v > best]
    if above:
        out.notes.append(f"{criterion}: excluded {above} scored above the choice "
                         f"{candidate_name(chosen)}")


def score_candidates(out, scorer, spec, candidates, criteria, keys, bar, num, num_folds,
                     loo_max_size, nuts, evidence_options, evidence_max_size):
    """Every criterion of every candidate, into ``out`` (a :class:`Scores`); ``spec`` is
    the family's ``Selection`` (None for programs), ``keys`` criterion -> key, ``bar``
    a :class:`Progress`, ``nuts`` (num_warmup, num_samples, progress_bar)."""
    clock = time.perf_counter
    order = scorer.order(candidates)
    if "vb" in criteria:
        t0 = clock()
        fits = []
        for i, c in enumerate(candidates):
            fits.append(scorer.vb(c, jax.random.fold_in(keys["vb"], i)))
            bar.step(f"vb {candidate_name(c)}")
        out.values["vb"] = tuple(f[0] for f in fits)
        out.vb_sizes = tuple(f[1] for f in fits)
        best = int(np.argmax(out.values["vb"]))
        out.choice["vb"] = spec.contains(candidates, out.vb_sizes[best])
        out.seconds["vb"] = clock() - t0
    if "cv" in criteria:
        t0 = clock()
        splits = folds(keys["cv"], num, num_folds)
        pointwise = np.zeros((len(candidates), num))  # held-out log-likelihood per example
        for i, c in enumerate(candidates):
            for f, (tr, te) in enumerate(splits):
                key = jax.random.fold_in(jax.random.fold_in(keys["cv"], i), f)
                pointwise[i, te] = scorer.heldout(c, tr, te, key)
                bar.step(f"cv {candidate_name(c)} fold {f + 1}")
        fold_means = np.stack([pointwise[:, te].mean(axis=1) for _, te in splits], axis=1)
        out.values["cv"] = tuple(float(v) for v in pointwise.mean(axis=1))
        with np.errstate(invalid="ignore"):  # a collapsed fold's -inf: its SE is NaN
            spread = np.std(fold_means, axis=1, ddof=1)
        out.errors["cv"] = tuple(float(v) for v in spread / math.sqrt(num_folds))
        reasons = {i: why for i, c in enumerate(candidates)
                   if (why := scorer.degenerate(c, "cv")) is not None}
        choose(out, "cv", candidates, pointwise, reasons, order, pointwise=True)
        note_excluded_above(out, "cv", candidates, out.values["cv"])
        out.seconds["cv"] = clock() - t0
    if {"train", "bic", "aic", "loo", "waic"} & set(criteria):
        t0 = clock()
        train = []
        for i, c in enumerate(candidates):
            train.append(scorer.train(c, jax.random.fold_in(keys["train"], i)))
            bar.step(f"fit {candidate_name(c)}")
        seconds = clock() - t0
        reasons = {i: why for i, c in enumerate(candidates)
                   if (why := scorer.degenerate(c, "train")) is not None}
        penalties = {"bic": math.log(num) / (2 * num), "aic": 1.0 / num}
        for c in ("train", "bic", "aic"):
            if c not in criteria:
                continue
            if c == "train":
                out.values[c] = tuple(train)
            else:
                out.values[c] = tuple(t - scorer.num_parameters(cand) * penalties[c]
                                      for t, cand in zip(train, candidates, strict=True))
            choose(out, c, candidates, out.values[c], reasons, order)
            note_excluded_above(out, c, candidates, out.values[c])
            out.seconds[c] = seconds
    if {"loo", "waic"} & set(criteria):
        loo_and_waic(out, scorer, candidates, criteria, keys["loo"], bar, num, loo_max_size,
                      nuts, order)
    if "evidence" in criteria:
        evidence_criterion(out, scorer, candidates, keys["evidence"], bar, num, evidence_options,
                  evidence_max_size, order)
    if "laplace" in criteria:
        t0 = clock()
        out.values["laplace"] = tuple(float(scorer.laplace(c)) for c in candidates)
        for c in candidates:
            bar.step(f"laplace {candidate_name(c)}")
        out.choice["laplace"] = argmax(candidates, out.values["laplace"], order)
        out.seconds["laplace"] = clock() - t0
    if "pca_mle" in criteria:
        t0 = clock()
        values, chosen = scorer.pca_mle(candidates)
        out.values["pca_mle"] = tuple(float(v) for v in values)
        out.choice["pca_mle"] = chosen
        out.seconds["pca_mle"] = clock() - t0
    if LOWER_IS_BETTER & set(criteria):
        yingyang_criteria(out, scorer, candidates, [c for c in criteria if c in YINGYANG],
                          keys["yingyang"], bar, nuts)


def yingyang_criteria(out, scorer, candidates, criteria, key, bar, nuts):
    """The YING-YANG criteria from the family's own routine (:meth:`Scorer.yingyang`):
    its values (lower is better), its choice (the least value, degenerate candidates
    left out) and its result per criterion in ``out.details``."""
    t0 = time.perf_counter()
    results = scorer.yingyang(candidates, criteria, key, nuts, bar.step)
    seconds = time.perf_counter() - t0
    for c in criteria:
        result = results[c]
        out.values[c] = tuple(result.values)
        out.details[c] = result
        out.seconds[c] = seconds
        if result.degenerate:
            out.excluded[c] = {candidate_name(k): "collapsed: every restart collapsed a "
                               "component" for k in result.degenerate}
        if len(result.degenerate) == len(candidates):
            out.no_choice[c] = ("every candidate's value is excluded (degenerate or "
                                "unreliable; see excluded)")
            out.choice[c] = None
        else:
            out.choice[c] = result.choice


def loo_and_waic(out, scorer, candidates, criteria, key, bar, num, loo_max_size, nuts,
                  order=None):
    """PSIS-LOO and WAIC from one NUTS run per candidate (arviz)."""
    import arviz as az

    num_warmup, num_samples, progress_bar = nuts
    t0 = time.perf_counter()
    elpd = {c: np.full(len(candidates), np.nan) for c in ("loo", "waic")}
    se = {c: np.full(len(candidates), np.nan) for c in ("loo", "waic")}
    pointwise = {c: np.full((len(candidates), num), np.nan) for c in ("loo", "waic")}
    data, reasons = {}, []
    excluded = {"loo": {}, "waic": {}}
    for i, c in enumerate(candidates):
        reason = scorer.loo_reason(c, loo_max_size)
        bar.step(f"nuts {candidate_name(c)}")
        if reason is not None:
            reasons.append(f"{candidate_name(c)}: {reason}")
            continue
        idata, extra = scorer.loo(c, jax.random.fold_in(key, i), num_warmup, num_samples,
                                  progress_bar)
        with warnings.catch_warnings():  # Pareto k and WAIC's variance warning: in the notes
            warnings.simplefilter("ignore")
            loo = az.loo(idata, pointwise=True)
            waic = az.waic(idata, pointwise=True)
        for name, res, field, pw in (("loo", loo, "elpd_loo", "loo_i"),
                                     ("waic", waic, "elpd_waic", "waic_i")):
            elpd[name][i] = float(res[field]) / num
            se[name][i] = float(res.se) / num
            pointwise[name][i] = np.asarray(res[pw])
        data[candidate_name(c)] = loo
        mixing = chains_reason(idata)
        tail = pareto_reason(loo)
        if mixing is not None:
            excluded["loo"][i] = excluded["waic"][i] = mixing
        if tail is not None:
            excluded["loo"][i] = tail if mixing is None else f"{mixing}; {tail}"
        pareto = float(np.max(np.asarray(loo.pareto_k)))
        out.notes.append(f"loo {candidate_name(c)}: largest Pareto k {pareto:.2f}"
                         f"{', WAIC variance warning' if waic.warning else ''}{extra}")
    seconds = time.perf_counter() - t0
    for name in ("loo", "waic"):
        if name in criteria:
            out.values[name] = tuple(float(v) for v in elpd[name])
            out.errors[name] = tuple(float(v) for v in se[name])
            choose(out, name, candidates, pointwise[name], excluded[name], order,
                   pointwise=True, unreliable=True)
            note_excluded_above(out, name, candidates, out.values[name])
            out.seconds[name] = seconds
            if reasons:
                out.skipped[name] = "model too large for MCMC: " + "; ".join(reasons)
    if "loo" in criteria and len(data) >= 2:
        with warnings.catch_warnings():  # arviz's Pareto-k and pandas deprecation notes
            warnings.simplefilter("ignore")
            out.arviz_compare = az.compare(data, ic="loo")  # over the ELPDData above


def evidence_criterion(out, scorer, candidates, key, bar, num, options, limit, order=None):
    """The reference log evidence of every candidate's program, per example."""
    t0 = time.perf_counter()
    values = np.full(len(candidates), np.nan)
    errors = np.full(len(candidates), np.nan)
    reasons, steps, excluded = [], [], {}
    for i, c in enumerate(candidates):
        reason = scorer.evidence_reason(c, limit)
        bar.step(f"evidence {candidate_name(c)}")
        if reason is not None:
            reasons.append(f"{candidate_name(c)}: {reason}")
            continue
        result = scorer.evidence(c, jax.random.fold_in(key, i), options)
        values[i] = result.log_evidence / num
        errors[i] = result.standard_error / num
        if not (result.converged and np.isfinite(values[i]) and np.isfinite(errors[i])):
            excluded[i] = ("tempered SMC did not converge (a run short of temperature 1, or "
                           "a non-finite estimate or standard error)")
        steps.append(f"{candidate_name(c)} {result.num_steps.min()}-{result.num_steps.max()}"
                     + ("" if result.converged else " (not converged)"))
    out.values["evidence"] = tuple(float(v) for v in values)
    out.errors["evidence"] = tuple(float(v) for v in errors)
    kept = values.copy()
    kept[list(excluded)] = np.nan
    gap, pair = evidence_gap_reason(kept, errors, [candidate_name(c) for c in candidates],
                                    num)
    for i in pair:
        excluded[i] = "standard error exceeds the gap it decides: " + gap
    choose(out, "evidence", candidates, values, excluded, order, unreliable=True)
    if gap is not None:
        out.choice["evidence"] = None
        out.no_choice["evidence"] = gap
    note_excluded_above(out, "evidence", candidates, out.values["evidence"])
    out.seconds["evidence"] = time.perf_counter() - t0
    if reasons:
        out.skipped["evidence"] = "too large for the reference evidence: " + "; ".join(reasons)
    if steps:
        out.notes.append(f"evidence: adaptive tempered SMC ({options.get('move', 'hmc')} "
                         f"moves), {options['num_particles']} particles x "
                         f"{options['num_repeats']} repeats; tempering steps "
                         + ", ".join(steps))
