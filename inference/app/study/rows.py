"""Computing one row of a study, in whatever process runs it.

:func:`compute_row` draws (or reads) the row's data and scores its candidates:
:func:`inference.model_selection` for a family, the user's function for a program.
:func:`execute_row` is the task a worker runs: it sets the process up once (JAX's
threads and platform, the shared compilation cache), marks the row as running, computes
it, catches any error into a *failed* row with its traceback, and writes the row into
the study's store before returning it.

A user program is a function::

    def score(x, candidates, *, criteria, rng_key, **options):
        ...
        return {"values": {"my_criterion": [one value per candidate]},  # higher is better
                "errors": {...}, "choice": {...}}                         # both optional

``x`` is the data matrix (N, D), ``candidates`` the entry's candidates (None when it
names none), ``criteria`` its criteria (None when it names none) and ``options`` its
``options`` table; it may also return a :class:`inference.ModelSelectionResult`. A
criterion's choice defaults to the candidate of highest value; the mapping may also
hold ``"excluded"`` (criterion -> {candidate name -> why its value is left out}),
``"no_choice"`` (criterion -> why it chose nothing), ``"seconds"``, ``"skipped"`` and
``"notes"``. A row keeps the result's exclusions and reasons for no choice (and VB's
surviving sizes), as ``inference.model_selection`` reports them.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback
import warnings
from types import SimpleNamespace

import numpy as np

__all__ = ["SINGLE_THREAD_FLAGS", "compute_row", "execute_row", "prepare_process",
           "row_from_result"]

#: XLA's flags for one thread per computation on CPU (a worker runs one row per thread).
SINGLE_THREAD_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
_PREPARED: dict = {}


def worker_environment(setup: dict | None, environ=None) -> dict:
    """The environment variables a worker process needs for ``setup``: XLA's flags
    (one thread, added to any flags already set) and JAX's platform."""
    environ = os.environ if environ is None else environ
    setup = setup or {}
    out = {}
    if setup.get("single_thread", True):
        flags = environ.get("XLA_FLAGS", "")
        missing = [f for f in SINGLE_THREAD_FLAGS.split() if f.split("=")[0] not in flags]
        if missing:
            out["XLA_FLAGS"] = " ".join(filter(None, [flags, *missing]))
    platforms = setup.get("jax_platforms", "cpu")
    if platforms and not environ.get("JAX_PLATFORMS"):
        out["JAX_PLATFORMS"] = platforms
    return out


def prepare_process(setup: dict | None) -> None:
    """Once per process: the worker environment (while JAX's backends are not started
    yet; a LocalCluster's workers get it when they start) and the persistent compilation
    cache in ``setup["cache_dir"]`` (:func:`inference.enable_compilation_cache`)."""
    if setup is None or _PREPARED.get("setup") == setup:
        return
    started = False
    if "jax" in sys.modules:
        try:
            from jax._src import xla_bridge

            started = xla_bridge.backends_are_initialized()
        except (ImportError, AttributeError):  # another JAX: assume started
            started = True
    if not started:
        os.environ.update(worker_environment(setup))
    if setup.get("cache_dir"):
        start_cache(setup["cache_dir"])
    _PREPARED["setup"] = setup


def start_cache(folder):
    """Turn on the persistent compilation cache in ``folder`` and, as the ``ppl-zoo``
    command does, quiet XLA's log unless the user chose a level (jaxlib logs a false
    CPU mismatch for every program it loads from the cache on some processors)."""
    import jax

    from inference.engine.compilation_cache import enable_compilation_cache

    folder = enable_compilation_cache(folder)
    chosen = (jax.config.jax_logging_level not in (None, "NOTSET")
              or os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1") != "1")
    if folder is not None and not chosen:
        jax.config.update("jax_logging_level", "CRITICAL")
    return folder


def _draw(spec, key):
    data = spec.data
    from inference.app.study.sources import load_function, read_matrix

    if data["kind"] == "file":
        return read_matrix(data["path"], data["where"])
    generator, _ = load_function(data["generator"], spec.base_dir, data["where"])
    drawn = generator(key, **data["args"], **data["level_args"])
    if data["field"] is not None:
        if not hasattr(drawn, data["field"]):
            raise ValueError(f"{data['where']}: the generator's result has no field "
                             f"{data['field']!r}")
        drawn = getattr(drawn, data["field"])
    x = np.asarray(drawn)
    if x.ndim != 2:
        raise ValueError(f"{data['where']}: the data must be a matrix (examples x "
                         f"dimensions); the generator gave shape {x.shape}")
    return x


def _as_list(value):
    return list(value) if isinstance(value, tuple) else value


def row_from_result(result, candidates) -> dict:
    """The row of a :class:`inference.ModelSelectionResult` (or of a user program's
    mapping): values, errors, choices, seconds, skipped criteria and notes."""
    from inference.app.selection_rules import argmax
    from inference.app.study.tables import decisive

    if isinstance(result, dict):
        values = {c: tuple(float(v) for v in vs) for c, vs in result.get("values", {}).items()}
        if not values:
            raise ValueError("a program must return {'values': {criterion: [one value per "
                             "candidate]}} (or a ModelSelectionResult)")
        candidates = tuple(result.get("candidates", candidates) or ())
        for c, vs in values.items():
            if len(vs) != len(candidates):
                raise ValueError(f"the program's values of {c!r} have {len(vs)} entries for "
                                 f"{len(candidates)} candidates")
        choice = {c: argmax(candidates, vs) for c, vs in values.items()}
        choice.update(result.get("choice", {}))
        choice.update(dict.fromkeys(result.get("no_choice", {})))
        result = SimpleNamespace(
            candidates=candidates, values=values, choice=choice,
            standard_errors={c: tuple(v) for c, v in result.get("errors", {}).items()},
            seconds=dict(result.get("seconds", {})), skipped=dict(result.get("skipped", {})),
            notes=tuple(result.get("notes", ())),
            excluded={c: dict(v) for c, v in result.get("excluded", {}).items()},
            no_choice=dict(result.get("no_choice", {})))
    vb_sizes = getattr(result, "vb_sizes", None)
    return {"decisive": decisive(result),
            "candidates": [_as_list(c) for c in result.candidates],
            "values": {c: list(v) for c, v in result.values.items()},
            "errors": {c: list(v) for c, v in result.standard_errors.items()},
            "choice": {c: _as_list(v) for c, v in result.choice.items()},
            "seconds": dict(result.seconds), "skipped": dict(result.skipped),
            "notes": list(result.notes),
            "excluded": {c: {str(k): str(why) for k, why in v.items()}
                         for c, v in getattr(result, "excluded", {}).items() if v},
            "no_choice": {c: str(why) for c, why in getattr(result, "no_choice", {}).items()},
            **({"vb_sizes": [_as_list(s) for s in vb_sizes]}
               if vb_sizes is not None and any(s is not None for s in vb_sizes) else {})}


def compute_row(spec) -> dict:
    """One row (a :class:`~inference.app.study.plan.RowSpec`): its data, then
    ``model_selection`` or the user's program on them, as the selection study's row."""
    import jax

    from inference.app.study.tables import standardise

    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(spec.seed), spec.level_index),
                             sum(map(ord, spec.salt)))
    key_data, key_select = jax.random.split(key)
    x = _draw(spec, key_data)
    if spec.data["standardise"]:
        x = standardise(x)
    num = x.shape[0]
    cands = None if spec.candidates is None else tuple(
        c for c in spec.candidates if not isinstance(c, int) or c < num)
    start = time.perf_counter()
    if spec.family is not None:
        from inference.app.selection import model_selection
        from ppl_models.diagnostics import ZooWarning

        s = spec.settings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ZooWarning)
            result = model_selection(
                x, cands, model=spec.family, criteria=spec.criteria, rng_key=key_select,
                num_folds=min(s.get("folds", 5), num), num_restarts=s["restarts"],
                num_warmup=s.get("num_warmup", 500), num_samples=s.get("num_samples", 500),
                evidence_options=s.get("evidence"),
                evidence_max_size=s.get("evidence_max_size", 1 << 18),
                loo_max_size=s.get("loo_max_size", 1 << 19), options=spec.options or None,
                **spec.fit_options)
    else:
        from inference.app.study.sources import load_function

        program, _ = load_function(spec.program, spec.base_dir, f"program {spec.program!r}")
        result = program(x, cands, criteria=spec.criteria, rng_key=key_select,
                         **spec.options)
        if not isinstance(result, dict) and not hasattr(result, "values"):
            raise TypeError(f"program {spec.program!r} returned {type(result).__name__}; "
                            "it must return a dict with 'values' or a ModelSelectionResult")
    row = row_from_result(result, cands)
    if not row["seconds"]:
        row["seconds"] = dict.fromkeys(row["values"], time.perf_counter() - start)
    return {"seed": spec.seed, "num_examples": num, "num_dimensions": int(x.shape[1]), **row}


def _where_computed() -> dict:
    import jax

    from inference.app.reproduce import versions

    return {**versions(), "backend": jax.default_backend(), "host": socket.gethostname(),
            "pid": os.getpid(),
            "single_thread": "intra_op_parallelism_threads=1" in os.environ.get("XLA_FLAGS", "")}


def record_of(spec, status: str, **fields) -> dict:
    """A finished row's record: key, where it sits in the study, its recipe and status."""
    return {"key": spec.key, "status": status, "model": spec.model, "source": spec.source,
            "level": spec.level, "seed": spec.seed, "recipe": spec.recipe, **fields}


def execute_row(spec, store_dir=None, setup=None) -> dict:
    """The task of one row: compute it, record a failure with its traceback instead of
    raising, write the record into the store at ``store_dir`` (when this process can)
    and return it (``written`` says whether it was written here)."""
    from inference.app.study.store import RowStore

    prepare_process(setup)
    store = RowStore(store_dir) if store_dir is not None else None
    if store is not None:
        try:
            store.mark_running(spec.key, row=spec.label)
        except OSError:
            store = None  # no shared folder here: the client writes the row
    start = time.perf_counter()
    try:
        row = compute_row(spec)
        record = record_of(spec, "ok", row=row)
    except Exception as error:  # a failed row is recorded; the study goes on
        record = record_of(spec, "failed", error=f"{type(error).__name__}: {error}",
                           traceback=traceback.format_exc())
    record["wall_seconds"] = time.perf_counter() - start
    record["finished"] = time.time()
    try:
        record["computed_on"] = _where_computed()
    except Exception:  # pragma: no cover - the versions are a courtesy
        record["computed_on"] = {"host": socket.gethostname(), "pid": os.getpid()}
    written = False
    if store is not None:
        try:
            store.write(record)
            written = True
        except OSError:
            pass
        store.clear_running(spec.key)
    return {**record, "written": written}
