"""Side-by-side runs of custom and generic inference on the same program and data.

A comparison is a function registered under a model name with
:func:`register_comparison`; it draws data from the model's generator, runs
every algorithm on it, and returns a :class:`ComparisonResult`: a table with
one row per algorithm (task, algorithm, implementation, error, time,
converged, ...) plus arrays for figures. ``ppl-zoo compare NAME`` prints the
table and writes it as CSV and JSON, with a PNG, into an output folder
(:func:`save_comparison`).

Timing follows ``shared/BENCHMARKING.md`` as far as a one-off comparison can:
every algorithm is jitted, its first call (compile included) is reported in
``first_call_s`` and ``time_s`` is a second, warm call on the same input.
"""

from __future__ import annotations

import csv
import json
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import jax
import numpy as np

from ppl_models.diagnostics import ZooWarning

__all__ = [
    "jsonable",
    "ComparisonRow",
    "ComparisonResult",
    "COMPARISONS",
    "register_comparison",
    "run_comparison",
    "save_comparison",
    "timed",
]


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
        columns = _columns(flat)
        cells = [[_format(row.get(col)) for col in columns] for row in flat]
        widths = [max(len(col), *(len(c[i]) for c in cells)) for i, col in enumerate(columns)]
        lines = ["  ".join(col.ljust(w) for col, w in zip(columns, widths, strict=True))]
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True))
                  for cell in cells]
        return "\n".join(lines)


def _columns(flat: list[dict]) -> list[str]:
    """Union of the rows' keys in first-seen order, with ``notes`` last."""
    columns = [c for c in dict.fromkeys(key for row in flat for key in row) if c != "notes"]
    return columns + ["notes"]


def _format(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, float | np.floating):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


COMPARISONS: dict[str, Callable[..., ComparisonResult]] = {}


def register_comparison(name: str):
    """Decorator: register ``fn(rng_key, *, quick, progress_bar) -> ComparisonResult``."""

    def decorate(fn):
        COMPARISONS[name] = fn
        return fn

    return decorate


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


def run_comparison(name: str, *, rng_key=None, quick: bool = False, progress_bar: bool = True,
                   **settings) -> ComparisonResult:
    """Run the comparison registered as ``name`` (see :data:`COMPARISONS`)."""
    _load_comparisons()
    if name not in COMPARISONS:
        raise ValueError(f"model must be one of {sorted(COMPARISONS)}; got {name!r}")
    rng_key = jax.random.key(0) if rng_key is None else rng_key
    return COMPARISONS[name](rng_key, quick=quick, progress_bar=progress_bar, **settings)


def save_comparison(result: ComparisonResult, output_dir: str | Path) -> dict[str, Path]:
    """Write ``<model>_comparison.csv``, ``.json`` and the figure (PNG) into ``output_dir``.

    The PNG needs matplotlib (``pip install -e ".[examples]"``); without it a
    warning is issued and only the tables are written.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    flat = [row.flat() for row in result.rows]
    columns = _columns(flat)
    paths = {"csv": output_dir / f"{result.model}_comparison.csv",
             "json": output_dir / f"{result.model}_comparison.json"}
    with open(paths["csv"], "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(flat)
    with open(paths["json"], "w") as handle:
        json.dump({"model": result.model, "settings": result.settings, "rows": flat,
                   "jax_version": jax.__version__,
                   "devices": [str(d) for d in jax.devices()]},
                  handle, indent=2, default=_json_default)
    if result.plot is not None:
        try:
            import matplotlib

            matplotlib.use("Agg")
        except ImportError:
            warnings.warn("matplotlib is not installed: no figure written "
                          '(pip install -e ".[examples]")', ZooWarning, stacklevel=2)
        else:
            paths["png"] = output_dir / f"{result.model}_comparison.png"
            result.plot(result, paths["png"])
    return paths


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


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray | jax.Array):
        return np.asarray(value).tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _load_comparisons():
    """Import the modules that register comparisons (each model family adds one)."""
    from inference.mixture import compare as compare_mixture  # noqa: F401
