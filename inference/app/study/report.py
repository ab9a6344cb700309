"""A study's report and status, over whatever rows its store holds.

:func:`study_report` prints, for each model entry, the selection study's tables
(:mod:`inference.app.study.tables`: per level, each criterion's hits of the planted
size, agreement with the decisive evidence, rank correlation and seconds per row), or,
where the entry names no planted size, each row's choices; then, for families on data
without a planted size (real data), one line per row: each criterion's choice, whether
they agree, a reference program's answer on the same data (scikit-learn's in
``examples/studies/real_data.toml``) and the row's seconds. :func:`study_status` sorts
the study's rows into done, failed, running (a worker has started it), queued
(submitted to a run that is still alive) and pending (nothing is computing it).
"""

from __future__ import annotations

import time
from pathlib import Path

from inference.app.study.plan import plan_rows
from inference.app.study.spec import Study
from inference.app.study.store import RowStore, process_alive
from inference.app.study.tables import (
    family_block,
    real_data_summary,
    real_data_table,
    summarise,
)

__all__ = ["study_report", "study_status", "status_lines"]


def _store(study: Study, output_dir) -> RowStore:
    return RowStore(output_dir or study.default_output_dir())


def _criteria(entry, rows) -> tuple:
    if entry.criteria is not None:
        return tuple(entry.criteria)
    if entry.family is not None:
        from inference.app.selection import selectable_families

        return tuple(selectable_families()[entry.family].default_criteria)
    return tuple(dict.fromkeys(c for r in rows for c in r["choice"]))


def _choices_block(name, by_level, criteria) -> list[str]:
    level_width = max([14, *(len(level) + 2 for level in by_level)])
    widths = {c: max(10, len(c) + 2) for c in criteria}
    lines = [f"\n{name}: no planted size; each row's choice per criterion",
             f"{'level':<{level_width}s}{'seed':>5s}"
             + "".join(f"{c:>{widths[c]}s}" for c in criteria)]
    for level, rows in by_level.items():
        for r in rows:
            cells = "".join(f"{str(r['choice'].get(c, '-')).replace(' ', ''):>{widths[c]}s}"
                            for c in criteria)
            lines.append(f"{level:<{level_width}s}{r['seed']:>5d}{cells}")
    return lines


def study_report(study: Study, output_dir=None) -> tuple[list[str], dict]:
    """(report lines, per model: criteria, rows per level, summary, best) over the rows
    the store holds now; rows not finished yet are counted, not guessed."""
    store = _store(study, output_dir)
    plan = plan_rows(study)
    records = store.finished(spec.key for spec in plan)
    done = sum(1 for s in plan if records.get(s.key, {}).get("status") == "ok")
    failed = [s for s in plan if records.get(s.key, {}).get("status") == "failed"]
    lines = [f"Study {study.name}: {done} of {len(plan)} rows finished"
             + (f", {len(failed)} failed" if failed else "")
             + (f", {len(plan) - done - len(failed)} not computed yet"
                if len(plan) - done - len(failed) else "")
             + f" (rows under {store.rows})"]
    out = {}
    for entry in study.models:
        specs = [s for s in plan if s.model == entry.label]
        by_level = {}
        for s in specs:
            record = records.get(s.key)
            if record is not None and record.get("status") == "ok":
                by_level.setdefault(s.level, []).append(record["row"])
        rows = [r for level_rows in by_level.values() for r in level_rows]
        if not rows:
            lines.append(f"\n{entry.label}: no finished row yet (of {len(specs)})")
            continue
        criteria = _criteria(entry, rows)
        counts = {level: len(r) for level, r in by_level.items()}
        missing = len(specs) - len(rows)
        note = f"  ({missing} of its {len(specs)} rows not finished)" if missing else ""
        if entry.planted is None:
            block, best, summary = _choices_block(entry.label, by_level, criteria), None, None
        else:
            summary = {level: summarise(r, entry.planted, criteria)
                       for level, r in by_level.items()}
            block, best = family_block(entry.label, entry.planted, summary, criteria, counts)
        if note:
            block[0] += note
        lines += block
        out[entry.label] = {"criteria": list(criteria), "rows": by_level, "seeds": counts,
                            "summary": summary, "best": best, "planted": entry.planted}
    real = real_data_rows(study, plan, records, out)
    if real:
        lines += real_data_table(real)
    if failed:
        lines.append(f"\nfailed rows ({len(failed)}; `ppl-zoo study status` shows them, "
                     "the next `ppl-zoo study run` computes them again):")
        lines += [f"  {s.label}: {records[s.key].get('error', '?')}" for s in failed]
    return lines, out


def real_data_rows(study: Study, plan, records, tables) -> list[dict]:
    """The summaries (:func:`~inference.app.study.tables.real_data_summary`) of every
    finished row of a family entry without a planted size, in the study's order; a user
    program scored on the same data source (and level) is its reference (scikit-learn's
    answer in ``examples/studies/real_data.toml``). Each is also kept in ``tables``
    under its entry's ``"real"``."""
    out = []
    programs = [e for e in study.models if e.program is not None]
    for entry in study.models:
        if entry.family is None or entry.planted is not None or entry.label not in tables:
            continue
        criteria = tables[entry.label]["criteria"]
        tables[entry.label]["real"] = []
        for spec in plan:
            record = records.get(spec.key)
            if spec.model != entry.label or record is None or record.get("status") != "ok":
                continue
            reference = None
            for program in programs:
                if program.data != entry.data:
                    continue
                refs = [records.get(s.key) for s in plan
                        if s.model == program.label and s.level == spec.level]
                refs = [r for r in refs if r is not None and r.get("status") == "ok"]
                if refs:
                    reference = (program.label, refs[0]["row"])
                    break
            summary = real_data_summary(
                record["row"], criteria, family=entry.label, data=spec.level,
                level=spec.level, reference=reference,
                wall_seconds=record.get("wall_seconds"))
            summary["source"] = entry.data
            tables[entry.label]["real"].append(summary)
            out.append(summary)
    return out


def study_status(study: Study, output_dir=None) -> dict:
    """The study's rows sorted into ``done``, ``failed``, ``running``, ``queued`` and
    ``pending`` (lists of (RowSpec, record or marker or None)), with the last run's
    manifest (``run``) and whether its process is alive (``alive``, None: unknown)."""
    store = _store(study, output_dir)
    plan = plan_rows(study)
    records = store.finished(spec.key for spec in plan)
    markers = store.running()
    manifest = store.manifest()
    alive = False
    if manifest is not None and manifest.get("state") == "running":
        alive = process_alive(manifest.get("pid", -1), manifest.get("host", ""))
    submitted = set(manifest.get("submitted", ())) if alive is not False else set()
    if alive is False:
        markers = {}  # left by a run that has ended: nothing computes those rows now
    out = {"done": [], "failed": [], "running": [], "queued": [], "pending": [],
           "run": manifest, "alive": alive, "rows_dir": store.rows}
    for spec in plan:
        record = records.get(spec.key)
        if record is not None:
            out["done" if record.get("status") == "ok" else "failed"].append((spec, record))
        elif spec.key in markers:
            out["running"].append((spec, markers[spec.key]))
        elif spec.key in submitted:
            out["queued"].append((spec, None))
        else:
            out["pending"].append((spec, None))
    return out


def status_lines(status: dict, study: Study) -> list[str]:
    """The lines that ``ppl-zoo study status`` prints."""
    counts = {k: len(status[k]) for k in ("done", "failed", "running", "queued", "pending")}
    total = sum(counts.values())
    lines = [f"study {study.name}" + (f" ({study.source})" if study.source else "")
             + f": {total} rows; " + ", ".join(f"{n} {k}" for k, n in counts.items())
             + f"  [rows under {Path(status['rows_dir'])}]"]
    run = status["run"]
    if run is not None:
        state = {True: "alive", False: "not running", None: "on another host"}[status["alive"]]
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.get("started", 0)))
        lines.append(f"last run: started {when} by pid {run.get('pid')} on {run.get('host')} "
                     f"({run.get('scheduler')}), {run.get('state')}; {state}")
    now = time.time()
    for kind in ("running", "queued", "failed", "pending"):
        if not status[kind]:
            continue
        lines.append(f"{kind}:")
        for spec, info in status[kind]:
            text = f"  {spec.label:<36s} {spec.key[:12]}"
            if kind == "running":
                text += (f"  on {info.get('host')} pid {info.get('pid')}, "
                         f"{now - info.get('since', now):.0f} s")
            elif kind == "failed":
                text += f"  {info.get('error', '?')}"
            lines.append(text)
    return lines
