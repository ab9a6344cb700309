"""Running a study: every row not yet finished, on Dask or one after another in-process.

:func:`run_study` plans the study's rows (:func:`~inference.app.study.plan.plan_rows`),
reuses every row its store already holds, and computes the others, one Dask task per
row (``client.submit``, results taken as they complete with ``as_completed``) on a
``distributed.LocalCluster`` of worker processes by default, on the scheduler at
``scheduler`` when given (a cluster started by hand or by ``dask-jobqueue``), or in
this process with ``serial=True``. Each row is written into the store as soon as it
finishes (by the worker, or here when the worker cannot reach the folder), atomically,
so a run that is stopped -- or a scheduler that is restarted -- loses no finished row
and the next run computes only what is missing. A row that raises is recorded as
failed with its traceback and the study goes on; the next run computes failed rows
again unless ``keep_failed``. A worker process that dies during a row (killed, out of
memory) has its row run again on another worker by the scheduler (up to Dask's
``distributed.scheduler.allowed-failures`` times, then the row is recorded as failed).

The pieces that are not about rows -- :func:`dask_client` (the cluster or scheduler a
run's tasks go to) and :func:`as_finished` (one task per item, results as they come,
the scheduler's losses and dead workers told apart) -- also run a comparison's seeds
(``ppl-zoo compare --seeds ... --dask``, :func:`inference.app.compare.run_comparisons`).

Dask (``distributed``) is an optional dependency: ``pip install "ppl-zoo[study]"``.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import traceback
from concurrent.futures import CancelledError
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from inference.app.study.plan import RowSpec, plan_rows
from inference.app.study.rows import execute_row, record_of, start_cache, worker_environment
from inference.app.study.spec import Study, StudyError
from inference.app.study.store import RowStore

__all__ = ["StudyRun", "as_finished", "dask_client", "default_workers", "local_cluster",
           "progress_bar", "require_distributed", "run_study"]

EXTRA_HINT = 'pip install "ppl-zoo[study]"'


def require_distributed():
    """The ``distributed`` module, or an ImportError that names the extra to install."""
    try:
        import distributed
    except ImportError as error:
        raise ImportError("running a study on Dask needs Dask's distributed scheduler, the "
                          f"optional extra 'study': {EXTRA_HINT} (or pass serial=True / "
                          "--serial to compute the rows one after another here)") from error
    return distributed


def default_workers() -> int:
    """One worker process per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def local_cluster(workers: int | None = None, threads_per_worker: int | None = None,
                  setup: dict | None = None):
    """A ``distributed.LocalCluster`` of worker processes set up for a study's rows.

    ``workers`` processes (default one per core) of ``threads_per_worker`` threads
    (default 1), with the environment of ``setup`` (XLA's flags for one thread per
    computation, ``JAX_PLATFORMS``; :func:`~inference.app.study.rows.worker_environment`)
    and without the ``MALLOC_TRIM_THRESHOLD_=65536`` that Dask's nanny sets by default:
    it makes glibc return memory to the system on every large free, and NumPy and
    XLA rows that allocate arrays of a few hundred kilobytes in a loop ran up to twice
    as slowly with it on this project's machine. No dashboard is started unless
    ``bokeh`` is installed (then on a free port: ``client.dashboard_link``).
    """
    distributed = require_distributed()
    import dask

    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
        return distributed.LocalCluster(
            n_workers=workers or default_workers(), threads_per_worker=threads_per_worker or 1,
            processes=True, env=worker_environment(setup), dashboard_address=":0",
            silence_logs=logging.ERROR)


@dataclass
class StudyRun:
    """What :func:`run_study` did: the store's folder, the finished rows of the study
    (key -> record) and how many rows were reused, computed and failed."""

    study: Study
    output_dir: Path
    plan: list
    rows: dict
    reused: int = 0
    computed: int = 0
    failed: int = 0
    seconds: float = 0.0
    startup_seconds: float = 0.0
    failures: list = field(default_factory=list)


def _setup(study: Study, cache_dir) -> dict:
    cluster = study.cluster
    return {"cache_dir": None if cache_dir is None else str(Path(cache_dir).resolve()),
            "single_thread": bool(cluster.get("single_thread", True)),
            "jax_platforms": cluster.get("jax_platforms", "cpu")}


def _connect(distributed, scheduler, timeout, where):
    try:
        return distributed.Client(scheduler, timeout=timeout)
    except (OSError, TimeoutError, ValueError) as error:
        raise StudyError(f"{where} = {scheduler!r}: no Dask scheduler answered within "
                         f"{timeout:g} s ({type(error).__name__}: {error})") from None


@contextmanager
def dask_client(*, client=None, scheduler: str | None = None, workers: int | None = None,
                threads_per_worker: int | None = None, setup: dict | None = None,
                connect_timeout: float = 10.0, where: str = "--scheduler"):
    """The Dask client that a run's tasks go to, closed again on leaving.

    ``client`` itself (left open); else a client of the scheduler at ``scheduler``
    (a :class:`~inference.app.study.spec.StudyError` naming ``where`` when none answers
    within ``connect_timeout`` seconds); else one of a new :func:`local_cluster` of
    ``workers`` processes set up for ``setup``. A study's rows and a comparison's seeds
    (``ppl-zoo compare --seeds``) both run through it.
    """
    distributed = require_distributed()
    own_client = own_cluster = None
    try:
        if client is None:
            if scheduler:
                client = own_client = _connect(distributed, scheduler, connect_timeout, where)
            else:
                own_cluster = local_cluster(workers, threads_per_worker, setup)
                client = own_client = distributed.Client(own_cluster)
        yield client
    finally:
        if own_client is not None:
            own_client.close()
        if own_cluster is not None:
            own_cluster.close()


def as_finished(client, fn, items, *, key, args=(), retries: int = 0):
    """Submit ``fn(item, *args)`` for every item, one Dask task each (keyed ``key(item)``),
    and yield ``(item, result, error)`` as each task finishes.

    ``error`` is None, or the exception the task ended with: a
    :class:`concurrent.futures.CancelledError` when the scheduler lost the task (it was
    shut down or restarted: not the task's fault), ``distributed.KilledWorker`` when
    the task killed its workers more often than Dask allows, or whatever the call raised
    after Dask's ``retries``. The tasks not finished yet are cancelled when the
    generator is closed (the caller stopped, or was interrupted).
    """
    distributed = require_distributed()
    futures = {}
    try:
        for item in items:
            future = client.submit(fn, item, *args, key=key(item), pure=False, retries=retries)
            futures[future] = item
        for future in distributed.as_completed(futures):
            item = futures.pop(future)
            try:
                result, error = future.result(), None
            except (CancelledError, Exception) as failed:  # noqa: BLE001 - handed to the caller
                result, error = None, failed
            yield item, result, error
    finally:
        for future in futures:
            future.cancel()


def progress_bar(total, desc, show, unit="row"):
    """A tqdm bar over a run's tasks (hidden when ``show`` is false or there are none)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not show or not total,
                smoothing=0.1)


class _Finisher:
    """Records each finished row (writing it where the worker could not), counts it and
    moves the progress bar."""

    def __init__(self, store, run, bar):
        self.store, self.run, self.bar = store, run, bar

    def __call__(self, record):
        written = record.pop("written", False)
        if not written or not self.store.path(record["key"]).exists():
            self.store.write(record)
        self.run.rows[record["key"]] = record
        self.run.computed += 1
        if record["status"] != "ok":
            self.run.failed += 1
            self.run.failures.append(record)
        self.bar.set_postfix_str(f"failed {self.run.failed}" if self.run.failed else "",
                                 refresh=False)
        self.bar.update(1)


def _failed_here(spec: RowSpec, error: BaseException) -> dict:
    """The record of a row whose task itself failed (its worker died too often, ...)."""
    record = record_of(spec, "failed", error=f"{type(error).__name__}: {error}",
                       traceback="".join(traceback.format_exception(error)))
    record.update(finished=time.time(), written=False)
    return record


def _run_dask(todo, store, setup, finish, *, client, scheduler, workers, threads, retries,
              timeout, where, run):
    started = time.perf_counter()
    lost = []
    with dask_client(client=client, scheduler=scheduler, workers=workers,
                     threads_per_worker=threads, setup=setup, connect_timeout=timeout,
                     where=where) as client:
        run.startup_seconds = time.perf_counter() - started
        folder = str(store.folder.resolve())
        tasks = as_finished(client, execute_row, todo, key=lambda spec: f"study-row-{spec.key}",
                            args=(folder, setup), retries=retries)
        with closing(tasks):  # rows not finished are cancelled on leaving
            for spec, record, error in tasks:
                if isinstance(error, CancelledError):  # the scheduler went away or restarted
                    lost.append(spec)
                    continue
                if error is not None:  # KilledWorker (the row killed its workers), ...
                    record = _failed_here(spec, error)
                finish(record)
    if lost:
        raise StudyError(f"the scheduler lost {len(lost)} row(s) before they finished (it "
                         "was shut down or restarted); the finished rows are kept: run the "
                         "study again to compute the others")


def run_study(study: Study, *, output_dir=None, scheduler: str | None = None,
              workers: int | None = None, threads_per_worker: int | None = None,
              client=None, serial: bool = False, cache_dir=None, retries: int | None = None,
              keep_failed: bool = False, progress: bool = True,
              connect_timeout: float = 10.0) -> StudyRun:
    """Compute every row of ``study`` that its store does not hold yet.

    Parameters
    ----------
    study : Study
        The study (:func:`inference.app.study.load_study` reads one from a file).
    output_dir : path, optional
        The store's folder (default: the study's ``output_dir``, else
        ``zoo-study-<name>``); rows are kept under ``rows/`` there.
    scheduler : str, optional
        The address of a running Dask scheduler (``tcp://host:8786``); default
        ``[cluster] scheduler``, else a new ``LocalCluster`` on this machine.
    workers, threads_per_worker : int, optional
        The LocalCluster's worker processes (default ``[cluster] workers``, else one
        per core) and threads per worker (default 1).
    client : distributed.Client, optional
        Run on this client's cluster (it is left open).
    serial : bool
        Compute the rows one after another in this process, without Dask.
    cache_dir : path, optional
        The persistent compilation cache that every worker turns on
        (:func:`inference.enable_compilation_cache`); None: workers keep none.
    retries : int, optional
        Dask's retries of a task whose call raised (default ``[cluster] retries``, else
        2); a row's own errors are recorded, not retried.
    keep_failed : bool
        Keep rows recorded as failed instead of computing them again.
    progress : bool
        A tqdm bar over the rows, with the estimated time left.
    connect_timeout : float
        Seconds to wait for the scheduler at ``scheduler``.

    Raises
    ------
    StudyError
        The scheduler does not answer.
    ImportError
        Dask's ``distributed`` is not installed (the extra ``study``) and not ``serial``.
    """
    start = time.perf_counter()
    cluster = study.cluster
    where = "--scheduler" if scheduler else "[cluster] scheduler"
    scheduler = scheduler or cluster.get("scheduler")
    store = RowStore(output_dir or study.default_output_dir())
    plan = plan_rows(study)
    unique = list({spec.key: spec for spec in plan}.values())
    held = store.finished(spec.key for spec in unique)
    reuse = {k: r for k, r in held.items() if r.get("status") == "ok" or keep_failed}
    todo = [spec for spec in unique if spec.key not in reuse]
    run = StudyRun(study, store.folder, plan, dict(reuse), reused=len(reuse))
    if not serial:
        require_distributed()
    store.folder.mkdir(parents=True, exist_ok=True)
    manifest = {"study": study.name, "source": study.source, "host": socket.gethostname(),
                "pid": os.getpid(), "started": time.time(),
                "scheduler": "serial" if serial else (scheduler or "LocalCluster"),
                "submitted": [spec.key for spec in todo], "state": "running"}
    store.write_manifest(manifest)
    bar = progress_bar(len(todo), f"study {study.name}", progress)
    finish = _Finisher(store, run, bar)
    setup = _setup(study, cache_dir)
    state = "interrupted"
    try:
        if serial:
            if cache_dir is not None:
                start_cache(cache_dir)
            for spec in todo:
                finish(execute_row(spec, str(store.folder), None))
        elif todo:
            _run_dask(todo, store, setup, finish, client=client, scheduler=scheduler,
                      workers=workers or cluster.get("workers"),
                      threads=threads_per_worker or cluster.get("threads_per_worker"),
                      retries=cluster.get("retries", 2) if retries is None else retries,
                      timeout=connect_timeout, where=where, run=run)
        state = "finished"
    finally:
        bar.close()
        store.write_manifest({**manifest, "state": state, "ended": time.time()})
    run.seconds = time.perf_counter() - start
    return run
