"""The figure of a model selection: one panel per criterion (``ppl-zoo select``'s PNG)."""

from __future__ import annotations

import math

import numpy as np

from inference.app.selection_result import YINGYANG, candidate_name
from inference.engine.figures import new_figure, save_figure

__all__ = ["plot_selection"]


def plot_selection(result, path, *, title: str | None = None) -> None:
    """One panel per criterion: its value per example against the candidate size (the
    YING-YANG criteria on their own scales, lower is better, as the axis says).

    Parameters
    ----------
    result : ModelSelectionResult
    path : str or path-like
        The PNG file to write (matplotlib's Agg backend).
    title : str, optional
        The figure's title (default: the family's name).
    """
    candidates = list(result.candidates)
    numeric = all(isinstance(c, int | np.integer) for c in candidates)
    xs = np.asarray(candidates if numeric else range(len(candidates)), dtype=float)
    criteria = list(result.values)
    cols = min(3, max(1, len(criteria)))
    rows = max(1, math.ceil(len(criteria) / cols))
    fig, axes = new_figure(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax in axes.flat[len(criteria):]:
        ax.set_visible(False)
    for ax, criterion in zip(axes.flat, criteria, strict=False):
        values = np.asarray(result.values[criterion], dtype=float)
        errors = result.standard_errors.get(criterion)
        if errors is not None:
            ax.errorbar(xs, values, yerr=np.asarray(errors, dtype=float), marker="o",
                        capsize=3, label="value (SE)")
        else:
            ax.plot(xs, values, marker="o", label="value")
        excluded = result.excluded.get(criterion, {})
        crossed = [i for i, c in enumerate(candidates)
                   if candidate_name(c) in excluded and np.isfinite(values[i])]
        if crossed:
            ax.plot(xs[crossed], values[crossed], marker="x", markersize=12, color="tab:gray",
                    linestyle="none", label="excluded")
            for i in crossed:
                ax.annotate(_short(excluded[candidate_name(candidates[i])]),
                            (xs[i], values[i]), textcoords="offset points", xytext=(0, 8),
                            ha="center", fontsize="x-small", color="tab:gray")
        chosen = result.choice.get(criterion)
        if chosen in candidates:
            i = candidates.index(chosen)
            if np.isfinite(values[i]):
                ax.plot(xs[i], values[i], marker="*", markersize=16, color="tab:red",
                        linestyle="none", label=f"choice {candidate_name(chosen)}")
        if not np.any(np.isfinite(values)):
            ax.text(0.5, 0.5, "not computed", ha="center", va="center",
                    transform=ax.transAxes)
        ax.set_title(criterion + (" (no choice)" if criterion in result.no_choice else ""))
        ax.set_xlabel(result.label)
        if result.direction(criterion) == "min":  # a YING-YANG criterion, its own scale
            ax.set_ylabel(f"{YINGYANG.get(criterion, criterion)} (lower is better)",
                          fontsize="small")
        else:
            ax.set_ylabel("nats per example")
        if not numeric or len(candidates) <= 12:
            ax.set_xticks(xs)
            ax.set_xticklabels([candidate_name(c) for c in candidates],
                               rotation=0 if numeric else 45)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(title or result.model)
    save_figure(fig, path)


def _short(reason: str) -> str:
    """A reason as a tag for a figure (the full reason is in the table and the JSON)."""
    tags = (("chains not mixed", "not mixed"), ("Pareto k", "Pareto k"), ("collapsed",
            "collapsed"), ("standard error", "SE > gap"), ("tempered SMC", "SMC failed"))
    return next((tag for start, tag in tags if start in reason[:40]), reason[:12])
