"""``ppl-zoo study run | report | status STUDY.toml``: a study from the command line."""

from __future__ import annotations

import argparse
import sys
import textwrap

__all__ = ["add_study_parser", "main"]

_EPILOG = """\
examples:
  ppl-zoo study run examples/studies/quick.toml                 a LocalCluster, one worker per core
  ppl-zoo study run study.toml --workers 2 --output-dir runs/   two worker processes
  ppl-zoo study run study.toml --scheduler tcp://10.0.0.5:8786  a running Dask scheduler
  ppl-zoo study status study.toml                               done, running, failed, pending
  ppl-zoo study report study.toml                               the tables, over the rows so far
Every finished row is kept (one JSON file per row under OUTPUT/rows/); a later run
computes only the rows that are missing or failed. Running on Dask needs the extra
'study': pip install "ppl-zoo[study]"."""


def add_study_parser(commands) -> argparse.ArgumentParser:
    """Add ``study`` and its sub-commands to the ``ppl-zoo`` sub-parsers ``commands``."""
    study = commands.add_parser(
        "study", help="run a model-selection study (a grid of rows) on Dask; report it",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_EPILOG,
        description=textwrap.fill(
            "A study file (TOML) lists families or your own programs, data sources "
            "(generators with levels and seeds, or data files), candidates and criteria. "
            "`run` computes one row per model, level and seed on a Dask cluster and keeps "
            "each row on disk as soon as it finishes; `report` prints the selection "
            "tables over the rows finished so far; `status` lists done, running and "
            "failed rows.", 79))
    actions = study.add_subparsers(dest="study_command", required=True, metavar="ACTION")
    run = actions.add_parser("run", help="compute the rows not finished yet",
                             description="Compute every row of the study that its output "
                                         "folder does not hold yet, one Dask task per row.")
    report = actions.add_parser("report", help="print the tables over the finished rows",
                                description="Print the study's tables over the rows "
                                            "finished so far (computes nothing).")
    status = actions.add_parser("status", help="list done, running, failed and pending rows",
                                description="List the study's rows: done, failed, running, "
                                            "queued and pending (computes nothing).")
    for parser in (run, report, status):
        parser.add_argument("study", metavar="STUDY.toml", help="the study file")
        parser.add_argument("--output-dir", metavar="DIR",
                            help="the folder of the study's rows (default: the file's "
                                 "output_dir, else ./zoo-study-NAME)")
    run.add_argument("--scheduler", metavar="ADDRESS",
                     help="a running Dask scheduler (tcp://host:8786; default: a new "
                          "LocalCluster on this machine)")
    run.add_argument("--workers", type=int, metavar="N",
                     help="the LocalCluster's worker processes (default: one per core)")
    run.add_argument("--threads-per-worker", type=int, metavar="N",
                     help="threads per worker process, one row each (default: 1)")
    run.add_argument("--serial", action="store_true",
                     help="compute the rows one after another in this process, without Dask")
    run.add_argument("--keep-failed", action="store_true",
                     help="keep rows recorded as failed instead of computing them again")
    run.add_argument("--connect-timeout", type=float, default=10.0, metavar="SECONDS",
                     help="seconds to wait for the scheduler at --scheduler (default: 10)")
    run.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return study


def main(args, cache_dir=None) -> int:
    """Run ``ppl-zoo study ACTION``; ``cache_dir`` is the compilation cache the command
    turned on (the workers turn on the same one). Returns the exit status."""
    from inference.app.study.report import status_lines, study_report, study_status
    from inference.app.study.runner import run_study
    from inference.app.study.spec import StudyError, load_study

    name = f"ppl-zoo study {args.study_command}"
    try:
        study = load_study(args.study)
        if args.study_command == "report":
            lines, _ = study_report(study, args.output_dir)
            print("\n".join(lines))
            return 0
        if args.study_command == "status":
            print("\n".join(status_lines(study_status(study, args.output_dir), study)))
            return 0
        for value, flag in ((args.workers, "--workers"),
                            (args.threads_per_worker, "--threads-per-worker")):
            if value is not None and value < 1:
                raise StudyError(f"{flag} must be at least 1; got {value}")
        run = run_study(study, output_dir=args.output_dir, scheduler=args.scheduler,
                        workers=args.workers, threads_per_worker=args.threads_per_worker,
                        serial=args.serial, cache_dir=cache_dir, keep_failed=args.keep_failed,
                        progress=not args.no_progress, connect_timeout=args.connect_timeout)
    except (StudyError, ImportError, OSError) as error:
        print(f"{name}: {error}", file=sys.stderr)
        return 2
    print(f"study {study.name}: {len(run.plan)} rows, {run.reused} reused, {run.computed} "
          f"computed ({run.failed} failed) in {run.seconds:.1f} s; rows under "
          f"{run.output_dir / 'rows'}")
    for record in run.failures:
        print(f"  failed: {record['model']} {record['level']} seed {record['seed']}: "
              f"{record.get('error')}", file=sys.stderr)
    lines, _ = study_report(study, args.output_dir)
    print("\n".join(lines))
    return 1 if run.failed else 0
