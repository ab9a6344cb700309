"""Tables and verdicts: what a comparison and a paper experiment report.

A comparison (``ppl-zoo compare NAME``) runs the papers' inference and NumPyro's
generic inference on the same program and data and returns a
:class:`ComparisonResult`: one :class:`ComparisonRow` per algorithm (task,
algorithm, implementation, objective, time, converged, ...) and arrays for its
figure. :func:`timed` times a call the way the comparisons do (first call with
compilation, then a warm call; the zoo's warnings become the row's notes).

A paper experiment (``ppl-zoo reproduce``) is an example script plus an
:class:`Experiment` that reads the JSON the script writes and turns it into
findings (:func:`finding`: claim, the paper's value, ours, a verdict of
:data:`VERDICTS`); :func:`level`, :func:`near`, :func:`rate` and
:func:`example_verdicts` are the shared ways of judging. Each family declares its
comparisons and experiments in its plug-in (:class:`ppl_models.registry.Family`).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import jax
import numpy as np

from ppl_models.diagnostics import ZooWarning

__all__ = ["ComparisonResult", "ComparisonRow", "EXAMPLE_VERDICT", "Experiment", "MIN_SEEDS",
           "VERDICTS", "columns", "example_verdicts", "finding", "format_cell", "json_default",
           "jsonable", "level", "near", "rate", "timed"]

#: Verdicts a finding may have.
VERDICTS = ("holds", "partly", "differs", "not checked", "failed")


@dataclass
class ComparisonRow:
    """One algorithm's outcome on the shared data.

    Attributes
    ----------
    task : str
        What was solved ("association", "learning", ...).
    algorithm : str
        Human-readable algorithm name.
    implementation : str
        "ours" (custom inference) or "numpyro" (generic inference).
    objective_name : str
        What ``objective`` measures (e.g. "mean ||x - sF||^2").
    objective : float
        The value reached (lower is better unless the name says otherwise).
    time_s : float
        Wall time of a warm call, seconds.
    first_call_s : float
        Wall time of the first call, compilation included.
    converged : bool
        The algorithm's own convergence flag.
    extra : dict
        Further model-specific figures (e.g. feature recovery error, agreement).
    notes : str
        Warnings the algorithm issued (non-convergence and the like), or "".
    """

    task: str
    algorithm: str
    implementation: str
    objective_name: str
    objective: float
    time_s: float
    first_call_s: float
    converged: bool
    extra: dict = field(default_factory=dict)
    notes: str = ""

    def flat(self) -> dict:
        """The row as one flat dict (``extra`` merged in)."""
        row = asdict(self)
        notes = row.pop("notes")
        row.update(row.pop("extra"))
        row["notes"] = notes
        return row


@dataclass
class ComparisonResult:
    """Rows of a comparison, its settings, and arrays for the figure."""

    model: str
    rows: list[ComparisonRow]
    settings: dict
    arrays: dict = field(default_factory=dict)
    plot: Callable | None = None

    def table(self) -> str:
        """The rows as an aligned text table."""
        flat = [row.flat() for row in self.rows]
        names = columns(flat)
        cells = [[format_cell(row.get(col)) for col in names] for row in flat]
        widths = [max(len(col), *(len(c[i]) for c in cells)) for i, col in enumerate(names)]
        lines = ["  ".join(col.ljust(w) for col, w in zip(names, widths, strict=True))]
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True))
                  for cell in cells]
        return "\n".join(lines)


def columns(flat: list[dict]) -> list[str]:
    """Union of the rows' keys in first-seen order, with ``notes`` last."""
    columns = [c for c in dict.fromkeys(key for row in flat for key in row) if c != "notes"]
    return columns + ["notes"]


def format_cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, float | np.floating):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)



def timed(fn: Callable, *args, **kwargs):
    """Call ``fn`` twice; return (second result, warm seconds, first-call seconds, notes).

    The zoo's warnings (:class:`~ppl_models.diagnostics.ZooWarning`) raised by
    the warm call are caught and returned as ``notes`` (a string), so that a
    comparison reports a non-converged algorithm in its table instead of
    stopping.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ZooWarning)
        start = time.perf_counter()
        jax.block_until_ready(fn(*args, **kwargs))
        first = time.perf_counter() - start
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ZooWarning)
        start = time.perf_counter()
        result = jax.block_until_ready(fn(*args, **kwargs))
        elapsed = time.perf_counter() - start
    notes = "; ".join(str(w.message) for w in caught if issubclass(w.category, ZooWarning))
    for w in caught:
        if not issubclass(w.category, ZooWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return result, elapsed, first, notes


def jsonable(value, *, keep_arrays: bool = False):
    """``value`` made ready for ``json.dumps`` (examples and benchmarks write their results).

    Dicts (keys made strings), lists and tuples are converted item by item; numpy
    scalars become Python numbers; non-finite floats become ``None`` (JSON has no
    NaN). Arrays (numpy or JAX) become nested lists with ``keep_arrays=True`` and
    are otherwise left out of dicts (images, reconstructions: the figures show them).
    """
    if isinstance(value, dict):
        return {str(k): jsonable(v, keep_arrays=keep_arrays) for k, v in value.items()
                if keep_arrays or not isinstance(v, np.ndarray | jax.Array)}
    if isinstance(value, list | tuple):
        return [jsonable(v, keep_arrays=keep_arrays) for v in value]
    if isinstance(value, np.ndarray | jax.Array):
        return jsonable(np.asarray(value).tolist()) if keep_arrays else None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray | jax.Array):
        return np.asarray(value).tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


@dataclass(frozen=True)
class Experiment:
    """One paper experiment: an example script and how to judge its output."""

    name: str
    paper: str
    section: str
    claim: str
    paper_value: str
    script: str
    json_name: str
    extract: Callable[[dict], list]
    quick_args: tuple = ("--quick",)
    full_args: tuple = ()
    #: Arguments passed in both modes (e.g. ``--json`` for examples that need it).
    extra_args: tuple = ()


def finding(claim, paper, ours, verdict, detail="") -> dict:
    """One row of the report: the claim, the paper's value, ours, the verdict, how judged."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {VERDICTS}; got {verdict!r}")
    return {"claim": claim, "paper": paper, "ours": ours, "verdict": verdict, "detail": detail}


def level(ok_all, ok_some) -> str:
    return "holds" if ok_all else "partly" if ok_some else "differs"


def near(ours, paper, tolerance) -> tuple[str, str]:
    """holds if ``|ours - paper| <= tolerance`` (absolute), else differs by how much."""
    diff = ours - paper
    if abs(diff) <= tolerance:
        return "holds", f"within {tolerance:g} of the paper ({diff:+.3g})"
    relative = f", {100 * diff / paper:+.0f}%" if paper else ""
    return "differs", f"differs by {diff:+.3g}{relative} (tolerance {tolerance:g})"


#: A hit rate over fewer seeds than this is reported but not judged.
MIN_SEEDS = 3


def rate(hits, seeds) -> tuple[str, str]:
    """A claim that a rule finds the truth: holds on most seeds, partly on a quarter."""
    if seeds < MIN_SEEDS:
        return "not checked", (f"{hits}/{seeds} seeds: too few to judge a rate (at least "
                               f"{MIN_SEEDS}; run with --full)")
    verdict = level(hits > seeds / 2, hits >= seeds / 4 and hits > 0)
    return verdict, f"{hits}/{seeds} seeds; holds: more than half, partly: at least a quarter"


EXAMPLE_VERDICT = {"holds": "holds", "partly": "partly", "does not hold": "differs",
                    "differs": "differs", "not checked": "not checked",
                    "holds mostly": "partly", "holds for the causes only": "partly"}


def example_verdicts(rows, *, paper="see claim") -> list:
    """Findings an example judged itself (list of {finding, verdict, numbers/detail})."""
    out = []
    for row in rows:
        if row["verdict"] == "information":
            continue
        ours = row.get("numbers", row.get("detail"))
        out.append(finding(row["finding"], paper, ours, EXAMPLE_VERDICT[row["verdict"]],
                           "the example's own criterion, stated in the claim"))
    return out
