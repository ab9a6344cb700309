"""Command line: ``ppl-zoo compare MODEL``, ``list``, ``reproduce`` and ``select FAMILY``.

``compare`` runs the model's registered comparison (:mod:`inference.app.compare`),
prints the table and writes CSV, JSON and a PNG into ``--output-dir``
(default ``./zoo-results``). ``compare`` and ``reproduce`` run at their quick sizes
unless given ``--full`` (both still accept ``--quick``, the default). ``list`` prints
every model's algorithms and NumPyro baselines as the dotted names they are imported
from, and the names that ``compare``, ``reproduce --only`` and ``study run`` take.
Stated run times come from :mod:`inference.app.run_times`. ``reproduce`` runs the
papers' experiments of ``examples/`` and writes a report of paper vs ours
(:mod:`inference.app.reproduce`).
``select`` scores a family's candidate sizes on a user's data file by every
criterion asked for (:mod:`inference.app.select_command`). ``study`` runs a study file's
grid of model-selection rows on Dask, reports it and shows its progress
(:mod:`inference.app.study`).

Every command first turns on the persistent compilation cache
(:func:`inference.enable_compilation_cache`), so that a program compiled by one run is
loaded, not compiled again, by the next: in the user's cache folder by default,
``--compilation-cache DIR`` or ``PPL_ZOO_CACHE_DIR=DIR`` elsewhere, and
``--no-compilation-cache`` or ``PPL_ZOO_CACHE_DIR=off`` not at all.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap

import jax

from inference.app.families import load_families
from inference.app.run_times import stated
from inference.app.study.command import add_study_parser
from inference.engine.compilation_cache import ENV_VAR, default_cache_dir, enable_compilation_cache
from ppl_models import __version__
from ppl_models.registry import REGISTRY

__all__ = ["main", "build_parser", "model_table"]


_EPILOG_COMPARE = """\
examples:
  ppl-zoo compare gvq                    exact search and EM beside NumPyro's enumeration and SVI
  ppl-zoo compare mixture --full --seed 3
                                         EM / hard-cut EM / k-means beside NumPyro's SVI and
                                         NUTS, at the comparison's full size
  ppl-zoo compare ppca --seeds 0 1 2 3 --workers 2
                                         four seeds, one table with a seed column, on a
                                         LocalCluster of two worker processes
  ppl-zoo compare gvq --seeds 0 1 2 --scheduler tcp://10.0.0.5:8786
                                         the seeds on a running Dask scheduler
  ppl-zoo list                           every model, its paper and its comparisons
Like `reproduce`, `compare` runs at its quick size unless --full is given (--quick is
still accepted and changes nothing)."""

_EPILOG_REPRODUCE = f"""\
examples:
  ppl-zoo reproduce                      every experiment at quick sizes
                                         ({stated("reproduce_quick")})
  ppl-zoo reproduce --full --html        the examples' full sizes ({stated("reproduce_full")}),
                                         with report.html
  ppl-zoo reproduce --only gvq_planted mcvq_shapes
  ppl-zoo reproduce --list               the experiments and the claims they test
Times are estimates from recorded runs on two CPU cores. At --full the model-selection
study runs a bounded part of its grid; the whole study ({stated("selection_study")} on two
cores) is `ppl-zoo study run examples/studies/selection.toml`."""

_EPILOG_MAIN = f"""\
compilation cache:
  Every command keeps the programs that XLA compiles in a folder on disk and loads
  them in later runs instead of compiling them again (JAX's persistent compilation
  cache; a first fit's seconds are mostly compilation). The folder: the user's
  cache folder ({default_cache_dir(environ={})} here), or
  JAX_COMPILATION_CACHE_DIR where set. {ENV_VAR}=DIR moves it and
  {ENV_VAR}=off turns the cache off, as do the two flags above,
  which win over the variable. While the cache is on, XLA's own log is quieted to
  fatal errors unless JAX_LOGGING_LEVEL (or TF_CPP_MIN_LOG_LEVEL) chooses a level
  (some jaxlib releases log a false CPU mismatch for each program loaded from it).
  With the cache warm, `compare`'s first-call times are loading times: pass
  --no-compilation-cache to measure compilation.

examples:
  ppl-zoo list
  ppl-zoo --compilation-cache /scratch/zoo-cache compare gvq
  ppl-zoo --no-compilation-cache compare mixture"""


def _wrap(text: str) -> str:
    return textwrap.fill(text, 79)


def _normalise(name: str) -> str:
    """Names are spelled with underscores; the hyphen spelling is accepted too."""
    return name.replace("-", "_")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``ppl-zoo``."""
    parser = argparse.ArgumentParser(
        prog="ppl-zoo",
        description="Classic latent-variable models as NumPyro programs: the papers' inference "
                    "side by side with NumPyro's generic inference.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_EPILOG_MAIN)
    parser.add_argument("--version", action="version", version=f"ppl-zoo {__version__}")
    cache = parser.add_mutually_exclusive_group()
    cache.add_argument("--compilation-cache", metavar="DIR",
                       help="keep compiled programs in DIR (default: $PPL_ZOO_CACHE_DIR, "
                            "else the user's cache folder; see below)")
    cache.add_argument("--no-compilation-cache", action="store_true",
                       help="compile every program afresh and keep none on disk")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    formatter = argparse.RawDescriptionHelpFormatter
    compare = commands.add_parser(
        "compare", help="run custom and generic inference on one model's program and data",
        formatter_class=formatter, epilog=_EPILOG_COMPARE,
        description=_wrap("Draw data from a model's generator, run the papers' algorithms and "
                    "NumPyro's generic inference (SVI, MCMC, enumeration) on the same "
                    "program and data, print one table row per algorithm (error, time, "
                    "convergence, agreement) and write it as CSV and JSON with a figure."))
    compare.add_argument("model", help="a comparison's name: a model's name, or one of the "
                                       "extra comparisons that `ppl-zoo list` shows")
    compare.add_argument("--output-dir", default="zoo-results",
                         help="folder for the CSV, JSON and PNG (default: ./zoo-results)")
    seeds = compare.add_mutually_exclusive_group()
    seeds.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    seeds.add_argument("--seeds", type=int, nargs="+", metavar="SEED",
                       help="run the comparison once per seed and write one table with a "
                            "seed column (default: the one --seed)")
    size = compare.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_true",
                      help="the comparison's full problem and steps (default: the quick size)")
    size.add_argument("--quick", action="store_true",
                      help="the quick size: a smaller problem and fewer steps (the default; "
                           "kept for earlier command lines)")
    compare.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    dask = compare.add_argument_group(
        "on Dask", _wrap("Run the seeds as Dask tasks, one per seed, as `ppl-zoo study run` "
                         "runs a study's rows (needs the extra 'study': pip install "
                         '"ppl-zoo[study]"). Default: one after another here; the numbers are '
                         "the same either way."))
    dask.add_argument("--dask", action="store_true",
                      help="run the seeds on a new LocalCluster on this machine")
    dask.add_argument("--scheduler", metavar="ADDRESS",
                      help="run the seeds on a running Dask scheduler (tcp://host:8786)")
    dask.add_argument("--workers", type=int, metavar="N",
                      help="the LocalCluster's worker processes (default: one per core; "
                           "implies --dask)")
    dask.add_argument("--threads-per-worker", type=int, metavar="N",
                      help="threads per worker process, one seed each (default: 1; "
                           "implies --dask)")
    dask.add_argument("--connect-timeout", type=float, default=10.0, metavar="SECONDS",
                      help="seconds to wait for the scheduler at --scheduler (default: 10)")
    commands.add_parser(
        "list", help="list the models, their papers, algorithms and generic baselines",
        description="List every registered model: its paper, the custom algorithms that fit "
                    "it, NumPyro's generic baselines for it, and the names that `ppl-zoo "
                    "compare` and `ppl-zoo reproduce --only` take.")
    reproduce = commands.add_parser(
        "reproduce", help="run the papers' experiments (examples/) and report paper vs ours",
        formatter_class=formatter, epilog=_EPILOG_REPRODUCE,
        description=_wrap("Run the examples that reproduce the papers' experiments, read each "
                    "one's findings (claim, the paper's value, ours, verdict within a stated "
                    "tolerance) and write report.md, findings.json, the figures and logs."))
    reproduce.add_argument("--output-dir", default="zoo-reproduce",
                           help="folder for report.md, findings.json, figures and logs "
                                "(default: ./zoo-reproduce)")
    size = reproduce.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_true",
                      help=f"the examples' full sizes ({stated('reproduce_full')}) instead of "
                           "the quick ones (default: the quick sizes)")
    size.add_argument("--quick", action="store_true",
                      help=f"the quick sizes ({stated('reproduce_quick')}; the default)")
    reproduce.add_argument("--only", nargs="+", metavar="NAME",
                           help="run only these experiments (default: all)")
    reproduce.add_argument("--list", action="store_true", help="list the experiments and exit")
    reproduce.add_argument("--html", action="store_true", help="also write report.html")
    reproduce.add_argument("--examples-dir", help="the examples folder (default: examples/ of "
                                                  "the repository the package is installed from)")
    reproduce.add_argument("--compare", metavar="PREVIOUS.json",
                           help="a previous findings.json: print which verdicts and values changed")
    reproduce.add_argument("--timeout", type=float, default=None,
                           help="seconds after which one example counts as failed (default: none)")
    reproduce.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    from inference.app.select_command import add_select_parser

    add_select_parser(commands, formatter)
    add_study_parser(commands)
    return parser


def _import_path(name: str) -> str:
    """A registry algorithm's entry (``"fit_gvq"``, ``"clipped.fit.morph"``) as an import path."""
    return f"inference.{name}"


def _baseline_path(family: str, name: str, fn) -> str:
    """Where a family's NumPyro baseline is imported from: ``inference.<family>.baselines``."""
    import importlib

    module = f"inference.{family}.baselines"
    try:
        if getattr(importlib.import_module(module), name, None) is fn:
            return f"{module}.{name}"
    except ImportError:
        pass
    return f"{fn.__module__}.{name}"


def model_table() -> list[str]:
    """The lines of ``ppl-zoo list``: one block per registered model, then the run names.

    Every algorithm and baseline is printed as the dotted path it is imported from
    (``inference.fit_gvq``, ``inference.gvq.baselines.fit_gvq_svi``): the custom
    inference from :mod:`inference` (or a family's module), NumPyro's generic baselines
    from the family's ``inference.<family>.baselines``.
    """
    from inference.app.experiments import STUDIES

    families = load_families()
    indent = " " * 14
    lines = [f"{'MODEL':12s}  PAPER",
             f"{'':12s}  custom:    CUSTOM ALGORITHMS (the papers' inference)",
             f"{'':12s}  baselines: GENERIC BASELINES (NUMPYRO), each as the name to import", ""]
    for name, info in REGISTRY.items():
        family = families.get(info.family)
        lines.append(f"{name:12s}  {info.reference}")
        baselines = ([] if family is None else
                     [_baseline_path(info.family, b, fn) for b, fn in family.baselines.items()])
        for label, names in (("custom:   ", [_import_path(a) for a in info.algorithms]),
                             ("baselines:", baselines)):
            if names:
                lines += textwrap.wrap(", ".join(names), 100,
                                       initial_indent=f"{indent}{label} ",
                                       subsequent_indent=indent + " " * 11,
                                       break_long_words=False, break_on_hyphens=False)
    compare_names = sorted(name for family in families.values() for name in family.comparisons)
    experiment_names = [e.name for family in families.values() for e in family.experiments]
    experiment_names += [e.name for e in STUDIES]
    lines.append("")
    for label, names in (("ppl-zoo compare NAME", compare_names),
                         ("ppl-zoo reproduce --only NAME", experiment_names)):
        lines += textwrap.wrap(", ".join(names), 100, initial_indent=f"{label:31s}",
                               subsequent_indent=" " * 31, break_on_hyphens=False)
    study = (f"examples/studies/selection.toml: the model-selection study, every family's "
             f"criteria against the reference evidence (300 rows, {stated('selection_study')} "
             "on two cores); examples/studies/quick.toml: a small one")
    lines += textwrap.wrap(study, 100, initial_indent=f"{'ppl-zoo study run FILE':31s}",
                           subsequent_indent=" " * 31, break_on_hyphens=False)
    return lines


def start_compilation_cache(args: argparse.Namespace):
    """Turn on the persistent compilation cache as ``args`` and the environment say.

    ``--no-compilation-cache`` leaves it off; ``--compilation-cache DIR`` puts it in DIR;
    neither: :func:`~inference.engine.compilation_cache.enable_compilation_cache`'s
    default (``PPL_ZOO_CACHE_DIR``, where ``off`` leaves it off, else the user's cache
    folder). Where the cache is on, XLA's log is quieted to fatal errors unless the user
    chose a level (``JAX_LOGGING_LEVEL``, or ``TF_CPP_MIN_LOG_LEVEL`` at another value
    than the 1 that importing JAX sets): jaxlib 0.9 logs a false CPU-feature mismatch,
    three lines of several thousand characters, for every program it loads from the
    cache on some Intel processors. Returns the folder, or None where the cache is off.
    """
    if args.no_compilation_cache:
        return None
    folder = enable_compilation_cache(args.compilation_cache)
    chosen = (jax.config.jax_logging_level not in (None, "NOTSET")
              or os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1") != "1")
    if folder is not None and not chosen:
        jax.config.update("jax_logging_level", "CRITICAL")
    return folder


def _compare_seeds(name: str, args: argparse.Namespace, cache_folder) -> int:
    """``ppl-zoo compare NAME --seeds ...`` (or on Dask): one run per seed, one table."""
    from inference.app.compare import run_comparisons, save_comparisons
    from inference.app.study.spec import StudyError

    try:
        for value, flag in ((args.workers, "--workers"),
                            (args.threads_per_worker, "--threads-per-worker")):
            if value is not None and value < 1:
                raise ValueError(f"{flag} must be at least 1; got {value}")
            if value is not None and args.scheduler:
                raise ValueError(f"{flag} sets up a LocalCluster on this machine; it cannot "
                                 f"be combined with --scheduler")
        runs = run_comparisons(
            name, args.seeds or [args.seed], quick=not args.full,
            progress_bar=not args.no_progress, dask=args.dask, scheduler=args.scheduler,
            workers=args.workers, threads_per_worker=args.threads_per_worker,
            cache_dir=cache_folder, connect_timeout=args.connect_timeout)
    except (ValueError, StudyError, ImportError) as error:
        print(f"ppl-zoo compare: {error}", file=sys.stderr)
        return 2
    result = runs.combined()
    print(f"# {name} on {runs.where}: " + ", ".join(f"{k}={v}"
                                                   for k, v in result.settings.items()))
    if result.rows:
        print(result.table())
    for seed, error in runs.failures.items():
        print(f"ppl-zoo compare: seed {seed} failed:\n{error}", file=sys.stderr)
    paths = save_comparisons(runs, args.output_dir)
    for kind, path in paths.items():  # "csv", "json", "png seed 3", ...
        print(f"wrote {kind.split()[0].upper():4s} {path}")
    return 1 if runs.failures else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ppl-zoo`` script; returns the exit status."""
    from inference.app.compare import comparisons, run_comparison, save_comparison

    args = build_parser().parse_args(argv)
    cache_folder = start_compilation_cache(args)
    if args.command == "study":
        from inference.app.study import command as study_command

        return study_command.main(args, cache_folder)
    if args.command == "reproduce":
        from inference.app import reproduce

        try:
            return reproduce.main(args)
        except (ValueError, FileNotFoundError) as error:
            print(f"ppl-zoo reproduce: {error}", file=sys.stderr)
            return 2
    if args.command == "select":
        from inference.app import select_command

        try:
            return select_command.main(args)
        except (ValueError, TypeError, OSError) as error:
            print(f"ppl-zoo select: {error}", file=sys.stderr)
            return 2
    if args.command == "list":
        print("\n".join(model_table()))
        return 0
    available = comparisons()
    name = _normalise(args.model)
    if name not in available:
        hint = ""
        if name in REGISTRY:
            family = REGISTRY[name].family
            hint = (f" ({name!r} is a model of the family {family!r} without a comparison of "
                    f"its own; its family's: {sorted(load_families()[family].comparisons)})")
        print(f"ppl-zoo compare: unknown model {args.model!r}{hint}; choose from "
              f"{sorted(available)}", file=sys.stderr)
        return 2
    on_dask = (args.dask or args.scheduler is not None or args.workers is not None
               or args.threads_per_worker is not None)
    if args.seeds or on_dask:
        return _compare_seeds(name, args, cache_folder)
    result = run_comparison(name, rng_key=jax.random.key(args.seed), quick=not args.full,
                            progress_bar=not args.no_progress)
    print(f"# {name}: " + ", ".join(f"{k}={v}" for k, v in result.settings.items()))
    print(result.table())
    paths = save_comparison(result, args.output_dir)
    for kind, path in paths.items():
        print(f"wrote {kind.upper():4s} {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
