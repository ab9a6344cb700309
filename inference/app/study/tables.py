"""The selection study's tables: hits, agreement with the evidence, rank correlation, cost.

Each row of a model-selection study holds, for one data set, every criterion's values
over the candidates and its choice (see :func:`inference.app.study.rows.compute_row`).
These functions grade the criteria over a level's rows -- how often each chooses the
planted size (its *hits*), how often it chooses what the reference evidence chooses
where the evidence is decisive, Spearman's rank correlation with the evidence across
the candidates, its seconds per row -- and print the tables that
``examples/selection_study.py`` and ``ppl-zoo study report`` show.

The evidence is *decisive* for a row when its best candidate beats the runner-up by more
than twice the combined standard error of the two estimates; agreement is counted over
decisive rows only, since an undecided reference grades nothing.
"""

from __future__ import annotations

import numpy as np

__all__ = ["best_agreement", "decisive", "family_block", "overall", "overall_table",
           "seeds_text", "spearman", "standardise", "summarise", "table"]


def standardise(x):
    """Zero mean per column, unit overall variance, as float32."""
    x = np.asarray(x, np.float64)
    x = x - x.mean(axis=0)
    return (x / np.sqrt(np.mean(x ** 2))).astype(np.float32)



def spearman(a, b):
    """Spearman's rank correlation of two vectors (NaN with fewer than 3 finite pairs or
    a constant vector; ties share their mean rank, so equal values count as equal)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.shape != b.shape:  # a criterion or the evidence not computed
        return float("nan")
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3:
        return float("nan")
    from scipy.stats import rankdata

    ra, rb = rankdata(a[ok]), rankdata(b[ok])  # ties get their mean rank
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])



def decisive(result):
    """Whether the evidence's best candidate beats the runner-up by more than twice the
    combined SE of the two estimates (None without the evidence)."""
    if "evidence" not in result.values:
        return None
    values = np.asarray(result.values["evidence"], float)
    errors = np.asarray(result.standard_errors["evidence"], float)
    ok = np.isfinite(values) & np.isfinite(errors)
    if ok.sum() < 2:
        return False
    order = np.argsort(np.where(ok, values, -np.inf))[::-1]
    first, second = order[0], order[1]
    return bool(values[first] - values[second] > 2 * np.hypot(errors[first], errors[second]))


def _same(a, b):
    return a is not None and b is not None and list(np.atleast_1d(a)) == list(np.atleast_1d(b))


def summarise(rows, planted, criteria):
    """Per criterion: hits, agreement with the evidence, mean Spearman rho, mean seconds."""
    out = {}
    for c in criteria:
        chosen = [r["choice"].get(c) for r in rows]
        evidence = [r["choice"].get("evidence") if r.get("decisive") else None for r in rows]
        rhos = [spearman(r["values"].get(c, []), r["values"].get("evidence", []))
                for r in rows] if c != "evidence" and "evidence" in criteria else []
        rhos = [v for v in rhos if np.isfinite(v)]
        out[c] = {"hits": sum(_same(v, planted) for v in chosen),
                  "scored": sum(v is not None for v in chosen),
                  "agree": sum(_same(v, e) for v, e in zip(chosen, evidence, strict=True)),
                  "with_evidence": sum(e is not None and v is not None
                                       for v, e in zip(chosen, evidence, strict=True)),
                  "rho": float(np.mean(rhos)) if rhos else None,
                  "seconds": float(np.mean([r["seconds"].get(c, np.nan) for r in rows]))}
    if "evidence" in criteria:
        ses = [e for r in rows for e in r["errors"].get("evidence", [])
               if e is not None and np.isfinite(e)]
        out["evidence"]["mean_se"] = float(np.mean(ses)) if ses else None
        out["evidence"]["decisive"] = sum(bool(r.get("decisive")) for r in rows)
    return out


def overall(summary, criteria, seeds):
    """Per criterion over every level: hits, agreement with the decisive evidence, mean
    Spearman rho (of the levels' means) and mean seconds per seed (weighted by each
    level's number of rows, ``seeds``: level -> rows)."""
    out = {}
    rows = sum(seeds[lv] for lv in summary)
    for c in criteria:
        rhos = [summary[lv][c]["rho"] for lv in summary if summary[lv][c]["rho"] is not None]
        seconds = [(summary[lv][c]["seconds"], seeds[lv]) for lv in summary
                   if np.isfinite(summary[lv][c]["seconds"])]
        out[c] = {"hits": sum(summary[lv][c]["hits"] for lv in summary), "rows": rows,
                  "agree": sum(summary[lv][c]["agree"] for lv in summary),
                  "with_evidence": sum(summary[lv][c]["with_evidence"] for lv in summary),
                  "rho": float(np.mean(rhos)) if rhos else None,
                  "seconds": (float(sum(s * n for s, n in seconds) / sum(n for _, n in seconds))
                              if seconds else None)}
    return out


def best_agreement(summary, criteria, seeds=None):
    """The criterion (not the evidence itself) agreeing most often with the evidence over
    every level, ties broken by mean rank correlation: its name, agreement, rho and mean
    seconds per seed, beside the evidence's (``seeds``: level -> rows, default 1 each)."""
    totals = overall(summary, criteria, seeds or dict.fromkeys(summary, 1))
    best = None
    for c in criteria:
        if c == "evidence":
            continue
        t = totals[c]
        key = (t["agree"] / t["with_evidence"] if t["with_evidence"] else -1.0,
               -2.0 if t["rho"] is None else t["rho"])
        if best is None or key > best[0]:
            best = (key, c)
    if best is None:
        return None
    t = totals[best[1]]
    return {"criterion": best[1], "agree": t["agree"], "total": t["with_evidence"],
            "rho": t["rho"], "seconds": t["seconds"],
            "evidence_seconds": totals["evidence"]["seconds"] if "evidence" in totals else None}


def overall_table(summary, criteria, seeds):
    """Report lines: every criterion over all levels, best agreement with the evidence
    first (by agreement, then rho), or by hits when the family has no evidence."""
    totals = overall(summary, criteria, seeds)
    with_evidence = "evidence" in criteria

    def order(c):
        t = totals[c]
        if with_evidence:
            return (c != "evidence", -(t["agree"] / t["with_evidence"] if t["with_evidence"]
                                       else -1.0), -(t["rho"] if t["rho"] is not None else -2.0))
        return (-t["hits"], t["seconds"] if t["seconds"] is not None else np.inf)

    lines = ["all levels: hits / agreement with the decisive evidence / mean rho / mean "
             "seconds per seed" if with_evidence else
             "all levels: hits / mean seconds per seed (no reference evidence)"]
    for c in sorted(criteria, key=order):
        t = totals[c]
        seconds = "-" if t["seconds"] is None else f"{t['seconds']:.3g}s"
        if with_evidence:
            agree = "ref" if c == "evidence" else f"{t['agree']}/{t['with_evidence']}"
            rho = "-" if t["rho"] is None else f"{t['rho']:+.2f}"
            lines.append(f"  {c:<10s}{t['hits']:>5d}/{t['rows']:<4d}{agree:>8s}{rho:>7s}"
                         f"{seconds:>10s}")
        else:
            lines.append(f"  {c:<10s}{t['hits']:>5d}/{t['rows']:<4d}{seconds:>10s}")
    return lines


def seeds_text(seeds):
    """"20 seed(s) per level", or "seeds: separated 20, overlapping 7" when they differ
    (``seeds``: level -> number of rows)."""
    counts = set(seeds.values())
    if len(counts) == 1:
        return f"{counts.pop()} seed(s) per level"
    return "seeds: " + ", ".join(f"{lv} {n}" for lv, n in seeds.items())


def table(name, planted, summary, criteria, seeds):
    """The report lines of one family; ``seeds``: level -> number of rows."""
    with_evidence = "evidence" in criteria
    lines = [f"\n{name}: planted {planted}, {seeds_text(seeds)}; per level: hits / "
             + ("agreement with the evidence where it is decisive / Spearman rho with the "
                "evidence / seconds per seed" if with_evidence else
                "seconds per seed (no reference evidence)")]
    width = 32 if with_evidence else 17
    header = f"{'criterion':<10s}" + "".join(f"{lv:>{width}s}" for lv in summary)
    lines.append(header)
    for c in criteria:
        row = f"{c:<10s}"
        for lv in summary:
            s = summary[lv][c]
            row += f"{s['hits']:>8d}/{seeds[lv]:<3d}"
            if with_evidence:
                rho = "-" if s["rho"] is None else f"{s['rho']:+.2f}"
                agree = f"{s['agree']}/{s['with_evidence']}" if c != "evidence" else "ref"
                row += f"{agree:>8s}{rho:>7s}"
            row += f"{s['seconds']:>5.1f}s" if not with_evidence else f"{s['seconds']:>8.1f}s"
        lines.append(row)
    if "evidence" in criteria:
        ses = [summary[lv]["evidence"].get("mean_se") for lv in summary]
        lines.append("evidence decisive (best beats runner-up by > 2 SE) in: " + ", ".join(
            f"{lv} {summary[lv]['evidence']['decisive']}/{seeds[lv]}" for lv in summary))
        lines.append("evidence SE (nats per example, mean): " + ", ".join(
            f"{lv} {se:.4f}" if se is not None else f"{lv} -" for lv, se in zip(summary, ses,
                                                                                 strict=True)))
    return lines


def family_block(name, planted, summary, criteria, seeds):
    """(report lines, best agreement) of one family: :func:`table`, :func:`overall_table`
    and, with the evidence, the criterion agreeing best with it (:func:`best_agreement`)."""
    best = best_agreement(summary, criteria, seeds)
    block = table(name, planted, summary, criteria, seeds)
    block += overall_table(summary, criteria, seeds)
    if best is not None and "evidence" in criteria:
        rho = "-" if best["rho"] is None else f"{best['rho']:+.2f}"
        cost = ("" if best["seconds"] is None or best["evidence_seconds"] is None else
                f", {best['seconds']:.3g} s per seed against the evidence's "
                f"{best['evidence_seconds']:.3g} s")
        block.append(f"best agreement with the evidence: {best['criterion']} "
                     f"({best['agree']}/{best['total']} choices, mean rho {rho}{cost})")
    return block, best


# -- real data: no planted answer ----------------------------------------------------------

#: Criteria that are not selection rules: the training likelihood has no complexity
#: penalty (it climbs with the size), so it is shown but left out of the agreement.
UNPENALISED = ("train",)


def _text(candidate) -> str:
    if isinstance(candidate, list | tuple):
        return "(" + ", ".join(map(str, candidate)) + ")"
    return str(candidate)


def real_data_summary(row, criteria, *, family=None, data=None, level=None,
                      reference=None, wall_seconds=None):
    """One row of a family on real data (no planted size): each criterion's choice (None
    where it made none, with the reason), the candidates left out of each choice (with
    why), whether the criteria that chose agree (the training likelihood aside:
    :data:`UNPENALISED`), and the reference's answer where there is one.

    ``reference`` is ``(name, row)``: the row of a user program on the same data (e.g.
    scikit-learn's estimator) whose single criterion's choice is the reference answer;
    ``wall_seconds`` the row's own wall time (all its criteria, compilation included).
    """
    choice = {c: row["choice"].get(c) for c in criteria}
    chose = {c: v for c, v in choice.items() if v is not None and c not in UNPENALISED}
    groups = {}
    for c, v in chose.items():
        groups.setdefault(_text(v), []).append(c)
    out = {"family": family, "data": data, "level": level, "seed": row.get("seed"),
           "num_examples": row.get("num_examples"), "num_dimensions": row.get("num_dimensions"),
           "candidates": [_text(c) for c in row.get("candidates", [])],
           "criteria": list(criteria), "choice": {c: None if v is None else _text(v)
                                                  for c, v in choice.items()},
           "no_choice": {c: row.get("no_choice", {}).get(c, "no candidate was scored")
                         for c, v in choice.items() if v is None},
           "excluded": {c: v for c, v in row.get("excluded", {}).items() if c in criteria},
           "groups": groups, "agree": len(groups) == 1 and len(chose) > 1,
           "at_largest": _at_largest(row.get("candidates", []), choice),
           "seconds": wall_seconds,
           "criterion_seconds": {c: row.get("seconds", {}).get(c) for c in criteria},
           "reference": None}
    if reference is not None:
        name, ref = reference
        (criterion, value), = ((c, v) for c, v in ref["choice"].items())
        value = None if value is None else _text(value)
        out["reference"] = {"name": name, "criterion": criterion, "choice": value,
                            "agree": [c for c, v in out["choice"].items() if v == value
                                      and value is not None],
                            "seconds": max(ref.get("seconds", {}).values(), default=None),
                            "notes": list(ref.get("notes", []))}
    return out


def _at_largest(candidates, choice) -> list:
    """The criteria whose choice is the largest of integer candidates (they may prefer
    a size beyond those scored)."""
    sizes = [c for c in candidates if isinstance(c, int) and not isinstance(c, bool)]
    if not sizes or len(sizes) != len(candidates):
        return []
    return [c for c, v in choice.items() if v == max(sizes) and c not in UNPENALISED]


def agreement_text(summary) -> str:
    """"all 4 choose 2", "split: 2 (vb, cv, bic), 6 (aic)", or "no choice"."""
    groups = summary["groups"]
    if not groups:
        return "no criterion chose"
    if len(groups) == 1:
        (value, names), = groups.items()
        return f"all {len(names)} choose {value}" if len(names) > 1 else \
            f"only {names[0]} chose ({value})"
    ordered = sorted(groups.items(), key=lambda item: -len(item[1]))
    return "split: " + ", ".join(f"{v} ({', '.join(names)})" for v, names in ordered)


def reference_text(summary) -> str:
    """scikit-learn's (the reference program's) answer and the criteria that agree."""
    ref = summary["reference"]
    if ref is None:
        return "none"
    if ref["choice"] is None:
        return f"{ref['criterion']}: no choice"
    agree = ", ".join(ref["agree"]) if ref["agree"] else "no criterion"
    return f"{ref['choice']} ({ref['criterion']}; same as {agree})"


def real_data_table(summaries) -> list[str]:
    """Report lines: one line per family row on real data -- data set, N x D, each
    criterion's choice ('-': none), whether the criteria agree (the training likelihood
    aside), the reference's answer (scikit-learn's; "none" without one) and the row's
    wall seconds -- then, per family, how the criteria split, which agree with the
    reference, why any criterion made no choice and which candidates were left out."""
    lines = ["\nreal data (no planted answer): each criterion's choice ('-': no choice), "
             "whether the criteria agree (train, without a penalty, aside), scikit-learn's "
             "answer (none: it has no estimator for the question), the row's seconds"]
    header = ("family", "data", "N x D", "choices", "agree", "scikit-learn", "seconds")
    cells = []
    for s in summaries:
        ref = s["reference"]
        cells.append((
            str(s["family"]), str(s["data"]), f"{s['num_examples']} x {s['num_dimensions'] or '?'}",
            ", ".join(f"{c} {'-' if v is None else v}" for c, v in s["choice"].items()),
            "yes" if s["agree"] else ("-" if not s["groups"] else "no"),
            "none" if ref is None else ("-" if ref["choice"] is None else ref["choice"]),
            "-" if s["seconds"] is None else f"{s['seconds']:.1f}"))
    widths = [max(len(row[i]) for row in (header, *cells)) for i in range(len(header))]
    right = {2, 6}

    def line(row):
        return "  ".join(cell.rjust(w) if i in right else cell.ljust(w)
                         for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()

    lines += [line(header), *map(line, cells)]
    for s in summaries:
        details = [agreement_text(s)]
        if s["reference"] is not None:
            ref = s["reference"]
            took = "" if ref.get("seconds") is None else f", {ref['seconds']:.1f} s"
            details.append(f"scikit-learn ({ref['name']}{took}): {reference_text(s)}")
        if s.get("at_largest"):
            details.append(f"{', '.join(s['at_largest'])} chose the largest candidate "
                           f"({s['candidates'][-1] if s['candidates'] else '?'}): a larger "
                           "size may be preferred")
        lines.append(f"  {s['family']}: " + "; ".join(details))
        for c, why in s["no_choice"].items():
            lines.append(f"  {s['family']}: no choice by {c}: {why}")
        for c, left in s["excluded"].items():
            for candidate, why in left.items():
                lines.append(f"  {s['family']}: excluded from {c}: {candidate}: {why}")
    return lines
