"""The result of :func:`inference.model_selection`: values, choices, table, CSV/JSON rows."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

__all__ = ["PrunedModel", "ModelSelectionResult", "candidate_name"]


class PrunedModel(NamedTuple):
    """The over-complete VB route: one VB model started large, pruned by its bound.

    Attributes
    ----------
    start : tuple or int
        (K_max, J_max) for MCVQ, k_max for the mixture.
    size : tuple or int
        What survived: (K, (J_1, ..., J_K)) for MCVQ, k for the mixture.
    bound : float
        L(Q) / N of the best of the runs (nats per example).
    fit : VBMCVQResult or VBMixtureResult
    """

    start: object
    size: object
    bound: float
    fit: object


def candidate_name(candidate) -> str:
    """``"3"`` or ``"(2, 4)"``: a candidate as tables, CSV files and arviz name it."""
    if isinstance(candidate, tuple):
        return f"({candidate[0]}, {candidate[1]})"
    return str(candidate)


def _size_text(size):
    if size is None:
        return "-"
    if isinstance(size, tuple):
        return f"{size[0]} VQs, states {list(size[1])}"
    return str(size)


def _plain(value):
    """JSON-friendly: tuples -> lists, numpy scalars -> Python, NaN -> None."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return None if not math.isfinite(float(value)) else float(value)
    return value


#: The YING-YANG criteria (Xu 1995; the mixture's ``compare_criteria``), each on its own
#: scale, lower is better: criterion -> what its value is (a figure's axis label).
YINGYANG = {"J": "J(k) = log k + (d/2) log E_MSE", "L_map": "hard-cut free energy per example",
            "L_stocha": "minus mean log-likelihood", "yy_bic": "-2 log L + p log N",
            "yy_aic": "-2 log L + 2 p", "yy_loo": "minus PSIS-LOO elpd (nats)"}
#: The criteria whose least value is best (every other one: the largest).
LOWER_IS_BETTER = frozenset(YINGYANG)


class ModelSelectionResult(NamedTuple):
    """Result of :func:`inference.model_selection`.

    Every value is a log-scale quantity per example (nats), *higher is better*, but for
    the mixture's YING-YANG criteria (``"J"``, ``"L_map"``, ``"L_stocha"``, ``"yy_bic"``,
    ``"yy_aic"``, ``"yy_loo"``), which keep their own scales and are *lower is better*
    (:meth:`direction`).

    Attributes
    ----------
    model : str
        The family (``"mixture"``, ``"mcvq"``, ``"gvq"``, ``"clipped"``, ``"ppca"``).
    candidates : tuple
        The candidate sizes: (K, J) pairs (MCVQ) or integers.
    values : dict
        criterion -> tuple of float, one per candidate (nan where not computed).
    choice : dict
        criterion -> the chosen candidate (None when no candidate was scored);
        ``"vb (pruned)"`` -> the surviving size of the over-complete model.
    standard_errors : dict
        ``"cv"``: SE of the fold means; ``"loo"``, ``"waic"``: arviz's se / N;
        ``"evidence"``: the SE of the SMC estimate over its repeats, / N.
    vb_sizes : tuple
        Surviving size of the best VB run of every candidate ((K, (J_1..J_K)) or
        k; None without ``"vb"``).
    over_complete : PrunedModel or None
    arviz_compare : pandas.DataFrame or None
        The PSIS-LOO comparison table: ``arviz.compare`` over the ``arviz.loo``
        ``ELPDData`` of the candidates where ``"loo"`` ran (two or more), indexed by
        candidate name (``"3"``, ``"(2, 2)"``), best first; columns rank, elpd_loo,
        p_loo, elpd_diff, weight, se, dse, warning, scale (totals over the examples,
        where ``values["loo"]`` is per example). Also :attr:`compare_table`.
    skipped : dict
        criterion -> why it was not computed (for all or some candidates).
    notes : tuple of str
        How the values were obtained (CV predictive exact or bound,
        non-converged fits, Pareto k, divergences, the SMC's steps).
    seconds : dict
        criterion -> wall time spent on it (all candidates), in seconds.
    label : str
        The candidates' column header (``"k"``, ``"(K, J)"``, ``"q"``, ...;
        ``"program"`` for the user's programs).
    excluded : dict
        criterion -> {candidate name -> why its value was left out of that criterion's
        choice}: a collapsed or otherwise degenerate fit, chains that did not mix, a
        PSIS-LOO with Pareto k above 0.7, an evidence run that did not converge or
        whose standard error exceeds the gap it decides
        (:mod:`inference.app.selection_checks`). The value stays in ``values``.
    no_choice : dict
        criterion -> why it made no choice (``choice[criterion]`` is None): every
        candidate excluded, or its decision within its own standard error.
    details : dict
        criterion -> the family's own result of a criterion it scores with its own
        routine: for the mixture's YING-YANG criteria, the
        :class:`inference.mixture.selection.SelectionResult` that
        :func:`inference.mixture.selection.compare_criteria` returns (the best fit of
        every candidate, the degenerate candidates, for ``"yy_loo"`` arviz.compare's
        columns). Empty for the other criteria.
    """

    model: str
    candidates: tuple
    values: dict
    choice: dict
    standard_errors: dict
    vb_sizes: tuple
    over_complete: PrunedModel | None
    arviz_compare: object
    skipped: dict
    notes: tuple
    seconds: dict = {}
    label: str = "size"
    excluded: dict = {}
    no_choice: dict = {}
    details: dict = {}

    @staticmethod
    def direction(criterion: str) -> str:
        """``"max"`` where the criterion's largest value is best, ``"min"`` where its least
        is (the YING-YANG criteria)."""
        return "min" if criterion in LOWER_IS_BETTER else "max"

    @property
    def compare_table(self):
        """``arviz.compare``'s table of the candidates' PSIS-LOO (``arviz_compare``), or
        None when fewer than two candidates ran ``"loo"``."""
        return self.arviz_compare

    def table(self) -> str:
        """Candidates as rows, criteria as columns (nats per example, higher is better;
        the YING-YANG criteria on their own scales, lower is better, as a line below the
        table says); ``*`` marks each column's choice, ``x`` a value excluded from the
        choice (the reasons are listed below the table), (SE) follows CV, LOO, WAIC and
        evidence."""
        criteria = list(self.values)
        width = max([len(self.label)] + [len(candidate_name(c)) for c in self.candidates]) + 2
        cells = {c: 20 if c in self.standard_errors else 12 for c in criteria}
        header = f"{self.label:<{width}s}" + "".join(f"{c:>{cells[c]}s}" for c in criteria)
        show_sizes = any(s is not None for s in self.vb_sizes)
        if show_sizes:
            header += "  vb survivors"
        lines = [header]
        for i, cand in enumerate(self.candidates):
            row = f"{candidate_name(cand):<{width}s}"
            for c in criteria:
                value = self.values[c][i]
                text = "-" if not np.isfinite(value) else f"{value:.4f}"
                if c in self.standard_errors and np.isfinite(value):
                    text += f" ({self.standard_errors[c][i]:.3f})"
                name = candidate_name(cand)
                text += ("*" if self.choice.get(c) == cand else
                         "x" if name in self.excluded.get(c, {}) else " ")
                row += f"{text:>{cells[c]}s}"
            if show_sizes:
                row += f"  {_size_text(self.vb_sizes[i])}"
            lines.append(row.rstrip())
        lower = [c for c in criteria if self.direction(c) == "min"]
        lines.append(("values" if not lower else f"values but {', '.join(lower)}")
                     + ": nats per example, higher is better; * = choice (cv, loo, waic: "
                     "smallest within one paired SE of the best)"
                     + ("; x = excluded from the choice" if any(self.excluded.values())
                        else ""))
        if lower:
            lines.append(f"lower is better: {', '.join(lower)} (the YING-YANG criteria, on "
                         "their own scales; * = the least value)")
        for c in criteria:
            if c in self.no_choice:
                lines.append(f"no choice by {c}: {self.no_choice[c]}")
            for name, why in self.excluded.get(c, {}).items():
                lines.append(f"excluded from {c}: {name}: {why}")
        if "pca_mle" in self.choice:
            lines.append("pca_mle: scikit-learn's PCA(n_components='mle') chooses "
                         f"{candidate_name(self.choice['pca_mle'])}")
        if self.over_complete is not None:
            oc = self.over_complete
            lines.append(f"vb (pruned) from {candidate_name(oc.start)}: {_size_text(oc.size)}, "
                         f"bound {oc.bound:.4f}")
        lines += [f"skipped {c}: {why}" for c, why in self.skipped.items()]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def rows(self) -> list[dict]:
        """One dict per candidate: ``candidate``, then every criterion's value and (where
        it has one) ``<criterion>_se``, and ``<criterion>_excluded`` (the reason, or "")
        for every criterion that excluded a candidate -- the rows of ``ppl-zoo select``'s
        CSV file."""
        out = []
        for i, cand in enumerate(self.candidates):
            row = {"candidate": candidate_name(cand)}
            for c, values in self.values.items():
                row[c] = float(values[i])
                if c in self.standard_errors:
                    row[f"{c}_se"] = float(self.standard_errors[c][i])
                if self.excluded.get(c):
                    row[f"{c}_excluded"] = self.excluded[c].get(candidate_name(cand), "")
            out.append(row)
        return out

    def to_dict(self) -> dict:
        """Everything but the fits, JSON-ready (NaN -> None): family, label, candidates,
        per criterion its values, standard errors, choice, seconds, ``excluded``
        (candidate name -> reason) and ``no_choice`` (the reason, or None), and for a
        criterion whose least value is best ``"direction": "min"`` (the YING-YANG
        criteria; every other one is "higher is better"); the over-complete run, skipped
        criteria and notes."""
        criteria = {}
        for c in dict.fromkeys(list(self.values) + [k for k in self.choice
                                                    if k != "vb (pruned)"]):
            criteria[c] = {"values": _plain(self.values.get(c)),
                           "standard_errors": _plain(self.standard_errors.get(c)),
                           "choice": _plain(self.choice.get(c)),
                           "seconds": _plain(self.seconds.get(c)),
                           "excluded": dict(self.excluded.get(c, {})),
                           "no_choice": self.no_choice.get(c)}
            if self.direction(c) == "min":
                criteria[c]["direction"] = "min"
        out = {"family": self.model, "label": self.label,
               "candidates": _plain(self.candidates), "criteria": criteria,
               "skipped": dict(self.skipped), "notes": list(self.notes)}
        if any(s is not None for s in self.vb_sizes):
            out["vb_sizes"] = _plain(self.vb_sizes)
        if self.over_complete is not None:
            oc = self.over_complete
            out["vb (pruned)"] = {"start": _plain(oc.start), "size": _plain(oc.size),
                                  "bound": _plain(oc.bound)}
        return out
