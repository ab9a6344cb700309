"""Command line: ``ppl-zoo compare MODEL``, ``ppl-zoo list`` and ``ppl-zoo reproduce``.

``compare`` runs the model's registered comparison (:mod:`inference.app.compare`),
prints the table and writes CSV, JSON and a PNG into ``--output-dir``
(default ``./zoo-results``). ``reproduce`` runs the papers' experiments of
``examples/`` and writes a report of paper vs ours (:mod:`inference.app.reproduce`).
"""

from __future__ import annotations

import argparse
import sys

import jax

from inference.app.families import load_families
from ppl_models import __version__

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``ppl-zoo``."""
    parser = argparse.ArgumentParser(
        prog="ppl-zoo",
        description="Classic latent-variable models as NumPyro programs: the papers' inference "
                    "side by side with NumPyro's generic inference.")
    parser.add_argument("--version", action="version", version=f"ppl-zoo {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    compare = commands.add_parser(
        "compare", help="run custom and generic inference on one model's program and data")
    compare.add_argument("model", help="model name (see `ppl-zoo list`)")
    compare.add_argument("--output-dir", default="zoo-results",
                         help="folder for the CSV, JSON and PNG (default: ./zoo-results)")
    compare.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    compare.add_argument("--quick", action="store_true",
                         help="smaller problem and fewer steps, for a smoke test")
    compare.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    commands.add_parser("list", help="list the models that have a comparison")
    reproduce = commands.add_parser(
        "reproduce", help="run the papers' experiments (examples/) and report paper vs ours")
    reproduce.add_argument("--output-dir", default="zoo-reproduce",
                           help="folder for report.md, findings.json, figures and logs "
                                "(default: ./zoo-reproduce)")
    reproduce.add_argument("--full", action="store_true",
                           help="the examples' full sizes (about an hour) instead of quick ones")
    reproduce.add_argument("--only", nargs="+", metavar="NAME", help="run only these experiments")
    reproduce.add_argument("--list", action="store_true", help="list the experiments and exit")
    reproduce.add_argument("--html", action="store_true", help="also write report.html")
    reproduce.add_argument("--examples-dir", help="the examples folder (default: examples/ of "
                                                  "the repository the package is installed from)")
    reproduce.add_argument("--compare", metavar="PREVIOUS.json",
                           help="a previous findings.json: print which verdicts and values changed")
    reproduce.add_argument("--timeout", type=float, default=None,
                           help="seconds after which one example counts as failed (default: none)")
    reproduce.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ppl-zoo`` script; returns the exit status."""
    from inference.app.compare import comparisons, run_comparison, save_comparison

    args = build_parser().parse_args(argv)
    if args.command == "reproduce":
        from inference.app import reproduce

        try:
            return reproduce.main(args)
        except (ValueError, FileNotFoundError) as error:
            print(f"ppl-zoo reproduce: {error}", file=sys.stderr)
            return 2
    available = comparisons()
    if args.command == "list":
        for name in sorted(available):
            family = next(f for f in load_families().values() if name in f.comparisons)
            print(f"{name:16s} {family.paper}")
        return 0
    if args.model not in available:
        print(f"ppl-zoo: unknown model {args.model!r}; choose from {sorted(available)}",
              file=sys.stderr)
        return 2
    result = run_comparison(args.model, rng_key=jax.random.key(args.seed), quick=args.quick,
                            progress_bar=not args.no_progress)
    print(f"# {args.model}: " + ", ".join(f"{k}={v}" for k, v in result.settings.items()))
    print(result.table())
    paths = save_comparison(result, args.output_dir)
    for kind, path in paths.items():
        print(f"wrote {kind.upper():4s} {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
