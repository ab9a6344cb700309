"""Side-by-side runs of custom and generic inference on the same program and data.

A comparison is a function that a family's plug-in declares under a name
(:class:`ppl_models.registry.Family`, its ``comparisons``); it draws data from the
model's generator, runs
every algorithm on it, and returns a :class:`ComparisonResult`: a table with
one row per algorithm (task, algorithm, implementation, error, time,
converged, ...) plus arrays for figures. ``ppl-zoo compare NAME`` prints the
table and writes it as CSV and JSON, with a PNG, into an output folder
(:func:`save_comparison`).

Timing keeps compilation apart from run time, as far as a one-off comparison can:
every algorithm is jitted, its first call (compile included) is reported in
``first_call_s`` and ``time_s`` is a second, warm call on the same input.
"""

from __future__ import annotations

import csv
import json
import warnings
from pathlib import Path

import jax

from inference.app.families import load_families
from inference.engine.reporting import ComparisonResult, columns, json_default
from ppl_models.diagnostics import ZooWarning

__all__ = ["comparisons", "run_comparison", "save_comparison"]


def comparisons() -> dict:
    """Comparison name -> function, over every registered family (``ppl-zoo compare``)."""
    return {name: fn for family in load_families().values()
            for name, fn in family.comparisons.items()}


def run_comparison(name: str, *, rng_key=None, quick: bool = False, progress_bar: bool = True,
                   **settings) -> ComparisonResult:
    """Run the comparison ``name`` that a family's plug-in declares (:func:`comparisons`)."""
    available = comparisons()
    if name not in available:
        raise ValueError(f"model must be one of {sorted(available)}; got {name!r}")
    rng_key = jax.random.key(0) if rng_key is None else rng_key
    return available[name](rng_key, quick=quick, progress_bar=progress_bar, **settings)


def save_comparison(result: ComparisonResult, output_dir: str | Path) -> dict[str, Path]:
    """Write ``<model>_comparison.csv``, ``.json`` and the figure (PNG) into ``output_dir``.

    The PNG needs matplotlib (``pip install -e ".[examples]"``); without it a
    warning is issued and only the tables are written.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    flat = [row.flat() for row in result.rows]
    names = columns(flat)
    paths = {"csv": output_dir / f"{result.model}_comparison.csv",
             "json": output_dir / f"{result.model}_comparison.json"}
    with open(paths["csv"], "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=names)
        writer.writeheader()
        writer.writerows(flat)
    with open(paths["json"], "w") as handle:
        json.dump({"model": result.model, "settings": result.settings, "rows": flat,
                   "jax_version": jax.__version__,
                   "devices": [str(d) for d in jax.devices()]},
                  handle, indent=2, default=json_default)
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
