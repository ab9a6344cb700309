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

A comparison draws its data and runs its algorithms from one key. To see how its
numbers vary with the draw, :func:`run_comparisons` runs it once per seed
(``ppl-zoo compare NAME --seeds 0 1 2``) and gathers the rows into one table with a
``seed`` column (:class:`SeedRuns`). The seeds are independent, so they can run as
Dask tasks, one per seed, on a ``LocalCluster`` or a running scheduler, through the
study runner's machinery (:func:`inference.app.study.runner.dask_client`,
:func:`~inference.app.study.runner.as_finished`): the same worker set-up (one XLA
thread per computation, the shared compilation cache) and the same handling of a
worker that dies. One after another in this process is the default; the numbers are
the same either way, only the times differ.
"""

from __future__ import annotations

import csv
import json
import traceback
import uuid
import warnings
from concurrent.futures import CancelledError
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import jax

from inference.app.families import load_families
from inference.engine.reporting import ComparisonResult, columns, json_default
from ppl_models.diagnostics import ZooWarning

__all__ = ["SeedRuns", "compare_seed", "comparisons", "run_comparison", "run_comparisons",
           "save_comparison", "save_comparisons"]


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
    if result.plot is not None and _matplotlib():
        paths["png"] = output_dir / f"{result.model}_comparison.png"
        result.plot(result, paths["png"])
    return paths


def _matplotlib() -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        warnings.warn("matplotlib is not installed: no figure written "
                      '(pip install -e ".[examples]")', ZooWarning, stacklevel=3)
        return False
    return True


@dataclass(frozen=True)
class _SeedRow:
    """A comparison row with the seed it came from, as the first column."""

    seed: int
    row: object

    def flat(self) -> dict:
        return {"seed": self.seed, **self.row.flat()}


@dataclass
class SeedRuns:
    """A comparison run once per seed (:func:`run_comparisons`).

    Attributes
    ----------
    model : str
        The comparison's name.
    seeds : list of int
        The seeds asked for, in order.
    results : dict
        Seed -> its :class:`~inference.engine.reporting.ComparisonResult`, for the seeds
        that finished.
    failures : dict
        Seed -> the error (with its traceback) of a seed whose comparison raised, whose
        workers died, or that the scheduler lost.
    where : str
        ``"serial"``, ``"LocalCluster"`` or the scheduler's address.
    """

    model: str
    seeds: list
    results: dict = field(default_factory=dict)
    failures: dict = field(default_factory=dict)
    where: str = "serial"

    def combined(self) -> ComparisonResult:
        """One table: every finished seed's rows, in the order of ``seeds``, with a
        ``seed`` column; ``settings`` are the first seed's, with ``seeds`` and
        ``failed_seeds``."""
        done = [seed for seed in self.seeds if seed in self.results]
        settings = dict(self.results[done[0]].settings) if done else {}
        settings.update(seeds=list(self.seeds), failed_seeds=sorted(self.failures))
        rows = [_SeedRow(seed, row) for seed in done for row in self.results[seed].rows]
        return ComparisonResult(self.model, rows, settings)


def compare_seed(seed: int, name: str, quick: bool, settings: dict, setup=None,
                 progress_bar: bool = False) -> dict:
    """The task of one seed: set the process up as a study's worker is
    (:func:`~inference.app.study.rows.prepare_process`), run the comparison ``name`` on
    ``jax.random.key(seed)`` and return ``{"seed", "result"}``, or ``{"seed", "error"}``
    with the traceback where the comparison raised (so that Dask does not retry it)."""
    from inference.app.study.rows import prepare_process

    prepare_process(setup)
    try:
        result = run_comparison(name, rng_key=jax.random.key(seed), quick=quick,
                                progress_bar=progress_bar, **settings)
    except Exception:  # a failed seed is reported; the other seeds go on
        return {"seed": seed, "error": traceback.format_exc()}
    return {"seed": seed, "result": result}


def run_comparisons(name: str, seeds, *, quick: bool = False, progress_bar: bool = True,
                    dask: bool = False, scheduler: str | None = None,
                    workers: int | None = None, threads_per_worker: int | None = None,
                    client=None, cache_dir=None, retries: int = 2,
                    connect_timeout: float = 10.0, **settings) -> SeedRuns:
    """Run the comparison ``name`` once per seed of ``seeds``, serially or on Dask.

    Parameters
    ----------
    name : str
        A comparison's name (:func:`comparisons`).
    seeds : sequence of int
        The seeds; each run draws its data and runs its algorithms from
        ``jax.random.key(seed)``, as ``run_comparison(name, rng_key=...)`` does. A seed
        given twice runs once.
    quick, progress_bar, **settings
        As for :func:`run_comparison` (on Dask, one bar over the seeds instead).
    dask : bool
        Run the seeds as Dask tasks, one per seed, on a new ``LocalCluster`` of
        ``workers`` processes (default: one per core) of ``threads_per_worker``
        threads (default 1). Implied by ``scheduler``, ``workers``,
        ``threads_per_worker`` or ``client``. Default: one after another here.
    scheduler : str, optional
        The address of a running Dask scheduler (``tcp://host:8786``).
    client : distributed.Client, optional
        Run on this client's cluster (left open).
    cache_dir : path, optional
        The persistent compilation cache every Dask worker turns on.
    retries : int
        Dask's retries of a seed whose task failed for another reason than its
        comparison (a comparison's own error is reported, not retried).
    connect_timeout : float
        Seconds to wait for the scheduler at ``scheduler``.

    Returns
    -------
    SeedRuns
        The results by seed and the seeds that failed; :meth:`SeedRuns.combined` is
        the one table.

    Raises
    ------
    ValueError
        ``name`` is not a comparison, ``seeds`` is empty, ``workers`` or
        ``threads_per_worker`` is below 1, or they are given with ``scheduler``.
    inference.app.study.StudyError
        The scheduler at ``scheduler`` does not answer.
    ImportError
        Dask's ``distributed`` is not installed (``pip install "ppl-zoo[study]"``).
    """
    if name not in comparisons():
        raise ValueError(f"model must be one of {sorted(comparisons())}; got {name!r}")
    seeds = list(dict.fromkeys(int(seed) for seed in seeds))
    if not seeds:
        raise ValueError("seeds must name at least one seed; got none")
    for value, label in ((workers, "workers"), (threads_per_worker, "threads_per_worker")):
        if value is not None and value < 1:
            raise ValueError(f"{label} must be at least 1; got {value}")
        if value is not None and scheduler:
            raise ValueError(f"{label} sets up a LocalCluster on this machine; it cannot be "
                             f"combined with scheduler={scheduler!r}")
    dask = dask or any(v is not None for v in (scheduler, workers, threads_per_worker, client))
    if not dask:
        runs = SeedRuns(name, seeds)
        for seed in seeds:
            _collect(runs, seed, compare_seed(seed, name, quick, settings, None, progress_bar),
                     None)
        return runs
    return _run_seeds_on_dask(name, seeds, quick, settings, progress_bar=progress_bar,
                              scheduler=scheduler, workers=workers,
                              threads_per_worker=threads_per_worker, client=client,
                              cache_dir=cache_dir, retries=retries,
                              connect_timeout=connect_timeout)


def _collect(runs: SeedRuns, seed: int, outcome, error) -> None:
    if error is not None:
        runs.failures[seed] = "".join(traceback.format_exception(error))
    elif "error" in outcome:
        runs.failures[seed] = outcome["error"]
    else:
        runs.results[seed] = outcome["result"]


def _run_seeds_on_dask(name, seeds, quick, settings, *, progress_bar, scheduler, workers,
                       threads_per_worker, client, cache_dir, retries, connect_timeout):
    from inference.app.study.runner import as_finished, dask_client
    from inference.app.study.runner import progress_bar as seeds_bar

    setup = {"cache_dir": None if cache_dir is None else str(Path(cache_dir).resolve()),
             "single_thread": True, "jax_platforms": "cpu"}
    runs = SeedRuns(name, seeds, where=scheduler or ("client" if client else "LocalCluster"))
    token = uuid.uuid4().hex[:8]  # two runs of one comparison on one scheduler stay apart
    with dask_client(client=client, scheduler=scheduler, workers=workers,
                     threads_per_worker=threads_per_worker, setup=setup,
                     connect_timeout=connect_timeout) as client:
        bar = seeds_bar(len(seeds), f"compare {name}", progress_bar, unit="seed")
        try:
            tasks = as_finished(client, compare_seed, seeds,
                                key=lambda seed: f"compare-{name}-{seed}-{token}",
                                args=(name, quick, settings, setup), retries=retries)
            with closing(tasks):  # seeds not finished are cancelled on leaving
                for seed, outcome, error in tasks:
                    if isinstance(error, CancelledError):
                        error = RuntimeError("the Dask scheduler lost this seed before it "
                                             "finished (it was shut down or restarted)")
                    _collect(runs, seed, outcome, error)
                    bar.update(1)
        finally:
            bar.close()
    return runs


def save_comparisons(runs: SeedRuns, output_dir: str | Path) -> dict[str, Path]:
    """Write the one table of ``runs`` (``<model>_comparison.csv`` and ``.json``, a
    ``seed`` column first) and each finished seed's figure,
    ``<model>_comparison_seed<SEED>.png``, into ``output_dir``."""
    output_dir = Path(output_dir)
    paths = save_comparison(runs.combined(), output_dir)
    figures = [seed for seed in runs.seeds
               if seed in runs.results and runs.results[seed].plot is not None]
    if figures and _matplotlib():
        for seed in figures:
            result = runs.results[seed]
            paths[f"png seed {seed}"] = output_dir / f"{runs.model}_comparison_seed{seed}.png"
            result.plot(result, paths[f"png seed {seed}"])
    return paths
