"""``ppl-zoo select FAMILY --data FILE``: choose a model on the user's own data.

Reads a data matrix (rows = examples, columns = dimensions) from a ``.csv`` or ``.npy``
file (:mod:`inference.app.data_files`); scores the family's candidate sizes -- or, with
``--program FILE.py:fn_a,fn_b``, the user's own NumPyro programs -- with
:func:`inference.model_selection`; prints its table and writes ``selection-<name>.csv``
(one row per candidate), ``.json`` (everything, with the data file, its shape, the
seed, every criterion's choice and what was excluded from it) and ``.png`` (one panel
per criterion: its value per example against the candidate, the choice marked,
excluded values crossed) into the output folder, ``<name>`` the family
(``selection-mixture.json``) or the programs joined by ``+``
(``selection-two+three.json``), so that runs of several families share a folder.
Earlier versions wrote ``selection.json``; :func:`read_selection` reads either.

The command is generic over the registry: every family that declares a
:class:`ppl_models.registry.Selection` can be selected, and a family whose
candidates are tuples (its label reads like ``"(K, J)"``) takes candidates written
``K,J`` or ``KxJ``.
"""

from __future__ import annotations

import csv
import json
import re
import warnings
from pathlib import Path

import jax

from inference.app.data_files import DATA_SUFFIXES, read_data
from inference.app.selection_figure import plot_selection
from ppl_models.diagnostics import ZooWarning

__all__ = ["DATA_SUFFIXES", "read_data", "parse_candidates", "save_selection",
           "plot_selection", "load_programs", "selection_stem", "read_selection",
           "add_select_parser", "main"]

def _arity(label: str) -> int:
    """How many integers make one candidate: 2 for a label such as ``"(K, J)"``."""
    label = label.strip()
    return label.count(",") + 1 if label.startswith("(") else 1


def parse_candidates(values, label: str, size: str = "size"):
    """The ``--candidates`` words as the family's candidates.

    Parameters
    ----------
    values : sequence of str or None
        The words; None keeps the family's default candidates.
    label : str
        The family's candidate label (``Selection.label``): ``"k"`` takes integers,
        a tuple label such as ``"(K, J)"`` takes pairs written ``K,J`` or ``KxJ``.
    size : str
        What a candidate is, in words (for messages).

    Returns
    -------
    tuple or None
        Integers, or tuples of integers; None when ``values`` is None.

    Raises
    ------
    ValueError
        A word that is not an integer (or not a pair of them), naming ``--candidates``.

    Examples
    --------
    >>> parse_candidates(["1", "2", "3"], "k")
    (1, 2, 3)
    >>> parse_candidates(["2,3", "3x3"], "(K, J)")
    ((2, 3), (3, 3))
    """
    if values is None:
        return None
    arity = _arity(label)
    out = []
    for word in values:
        parts = re.split(r"\s*[,xX]\s*", word.strip().strip("()[] ")) if arity > 1 else [word]
        if len(parts) == arity and all(re.fullmatch(r"\s*[+-]?\d+\s*", p) for p in parts):
            numbers = tuple(int(p) for p in parts)
            out.append(numbers if arity > 1 else numbers[0])
            continue
        if arity > 1:
            names = label.strip("() ").replace(" ", "").split(",")
            example = " ".join(",".join([str(n)] * arity) for n in (2, 3))
            raise ValueError(f"--candidates: {word!r} is not a {label} candidate ({size}); "
                             f"write {','.join(names)} or {'x'.join(names)} with integers, "
                             f"e.g. --candidates {example}")
        raise ValueError(f"--candidates: {word!r} is not an integer {label} ({size})")
    return tuple(out)


def _choices(result) -> dict:
    """criterion -> its chosen candidate as text (``"3"``, ``"(2, 4)"``), None if none."""
    from inference.app.selection_result import candidate_name

    return {c: None if chosen is None else candidate_name(chosen)
            for c, chosen in result.choice.items()}


def selection_stem(result) -> str:
    """``"selection-<name>"``: the file name (without suffix) of a result's files, after
    its family or its programs (joined by ``+``; characters outside letters, digits,
    ``_``, ``-``, ``+``, ``.`` and ``#`` become ``_``)."""
    if result.label == "program":
        name = "+".join(str(c) for c in result.candidates)
    else:
        name = str(result.model)
    name = re.sub(r"[^A-Za-z0-9_+.#-]", "_", name)[:120]
    return f"selection-{name}"


def read_selection(output_dir, name: str) -> dict:
    """The JSON report of ``ppl-zoo select`` for a family or programs ``name`` in a folder:
    ``selection-<name>.json``, else the ``selection.json`` of earlier versions (when it is
    that family's)."""
    output_dir = Path(output_dir)
    path = output_dir / f"selection-{name}.json"
    if path.exists():
        return json.loads(path.read_text())
    old = output_dir / "selection.json"
    if old.exists():
        report = json.loads(old.read_text())
        if report.get("family") == name:
            return report
    raise FileNotFoundError(f"no selection-{name}.json (nor an older selection.json of "
                            f"{name!r}) in {str(output_dir)!r}")


def save_selection(result, output_dir, *, data, shape, seed, settings=None) -> dict[str, Path]:
    """Write ``selection-<name>.csv``, ``.json`` and ``.png`` into a folder
    (:func:`selection_stem`).

    Parameters
    ----------
    result : ModelSelectionResult
        What :func:`inference.model_selection` returned.
    output_dir : str or path-like
        The folder (created if missing; files of an earlier run are replaced).
    data : str
        The data file, recorded in the JSON file and the figure's title.
    shape : (int, int)
        The data's number of examples and dimensions.
    seed : int
        The random seed of the run.
    settings : dict, optional
        Further settings to record in the JSON file (folds, restarts, ...).

    Returns
    -------
    dict
        ``"csv"``, ``"json"`` and (with matplotlib installed) ``"png"`` -> the path written.
        The JSON file's ``"excluded"`` (criterion -> candidate -> reason) and
        ``"no_choice"`` (criterion -> reason) say which values no choice was made from.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    stem = selection_stem(result)
    paths = {"csv": output_dir / f"{stem}.csv", "json": output_dir / f"{stem}.json"}
    rows = result.rows()
    names = list(dict.fromkeys(k for row in rows for k in row))
    with open(paths["csv"], "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=names)
        writer.writeheader()
        writer.writerows(rows)
    report = {**result.to_dict(), "data": str(data), "num_examples": int(shape[0]),
              "dim": int(shape[1]), "seed": int(seed), **dict(settings or {}),
              "choices": _choices(result),
              "excluded": {c: dict(v) for c, v in result.excluded.items() if v},
              "no_choice": dict(result.no_choice)}
    with open(paths["json"], "w") as handle:
        json.dump(report, handle, indent=2)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        warnings.warn("matplotlib is not installed: no figure written "
                      '(pip install -e ".[examples]")', ZooWarning, stacklevel=2)
    else:
        paths["png"] = output_dir / f"{stem}.png"
        plot_selection(result, paths["png"],
                       title=f"ppl-zoo select {result.model}: {Path(str(data)).name}")
    return paths


def _family(name: str, specs: dict) -> str:
    """The selectable family called ``name`` (hyphens accepted), or a ValueError."""
    family = name.replace("-", "_")
    if family in specs:
        return family
    from ppl_models.registry import REGISTRY

    hint = ""
    if family in REGISTRY and REGISTRY[family].family in specs:
        hint = (f" ({family!r} is a model of the family {REGISTRY[family].family!r}: "
                f"select its size with `ppl-zoo select {REGISTRY[family].family}`)")
    raise ValueError(f"unknown family {name!r}{hint}; the selectable families are "
                     f"{sorted(specs)}")


def load_programs(spec: str) -> list:
    """The programs ``--program FILE.py:fn_a,fn_b`` names: the file imported, the
    functions looked up.

    Raises
    ------
    FileNotFoundError
        No file at the path.
    ValueError
        No ``:`` with function names, a file that is not ``.py`` or fails to import
        (its error quoted), a name the file does not define or that is not callable
        (the callables it does define are listed).
    """
    import importlib.util
    import sys

    path, sep, names = str(spec).rpartition(":")
    if not sep or not path or not names.strip():
        raise ValueError(f"--program must be FILE.py:FUNCTION[,FUNCTION...]; got {spec!r}")
    file = Path(path)
    if file.suffix != ".py":
        raise ValueError(f"--program: {path!r} is not a .py file")
    if not file.is_file():
        raise FileNotFoundError(f"--program: no such file: {path!r}")
    module_name = "ppl_zoo_user_" + re.sub(r"\W", "_", file.stem)
    loader = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(loader)
    sys.modules[module_name] = module
    try:
        loader.loader.exec_module(module)
    except Exception as error:  # noqa: BLE001 - the user's file: reported, not raised as is
        sys.modules.pop(module_name, None)
        raise ValueError(f"--program: importing {path!r} failed: {type(error).__name__}: "
                         f"{error}") from error
    programs = []
    for name in (n.strip() for n in names.split(",")):
        value = getattr(module, name, None) if name else None
        if value is None or not callable(value):
            defined = sorted(n for n, v in vars(module).items() if callable(v)
                             and getattr(v, "__module__", None) == module_name)
            raise ValueError(f"--program: {path!r} defines no function {name!r}; its "
                             f"functions are {defined}")
        programs.append(value)
    return programs


#: The measured cost shown in ``ppl-zoo select --help``: cold / warm, import 3.4 / 1.5 s, vb
#: 24 / 2.7 s, cv 44 / 6.2 s, train and bic 17 / 2.3 s, loo 146 / 32 s (--fast: without loo).
COST_NOTE = ("Cost, measured: `ppl-zoo select mixture` on iris (150 x 4) with the "
             "default candidates (k = 1..6) and criteria took 235 s with an empty "
             "compilation cache and 46 s with it warm (the second run), of which PSIS-LOO's "
             "NUTS chains were 146 s and 32 s; with --fast about 90 s and 13 s. Measured on "
             "two CPU cores shared with other jobs (load average about 6), so a machine of "
             "your own is likely faster. Programs cost a compilation of EM per program and "
             "data shape, and of NUTS and tempered SMC per program with priors.")


def _families_help() -> str:
    from inference.app.program_selection import ML_CRITERIA
    from inference.app.selection import (
        PROGRAM_BAYES_CRITERIA,
        PROGRAM_DEFAULT_CRITERIA,
        selectable_families,
    )

    lines = ["families (FAMILY: candidate label; default criteria):"]
    for name, spec in sorted(selectable_families().items()):
        lines.append(f"  {name:9s} {spec.label}; {', '.join(spec.default_criteria)}")
    lines.append(f"  --program {', '.join(PROGRAM_DEFAULT_CRITERIA)}, and "
                 f"{', '.join(PROGRAM_BAYES_CRITERIA)} where every program has priors "
                 f"(sample sites); supported: {', '.join(ML_CRITERIA + PROGRAM_BAYES_CRITERIA)}")
    return "\n".join(lines)


_EXAMPLES = """\
examples:
  ppl-zoo select mixture --data points.csv --candidates 1 2 3 4 5
                                         number of clusters k by the family's criteria
  ppl-zoo select mixture --data points.npy --criteria bic cv --folds 10
  ppl-zoo select mcvq --data ratings.csv --candidates 2,3 3,3 4x3
                                         (K, J) pairs: K VQs of J states each
  ppl-zoo select --program my_models.py:two_clusters,three_clusters --data points.csv
                                         between your own NumPyro programs
  ppl-zoo select mixture --data points.csv --fast
                                         without the NUTS-based criteria (loo, waic)
data: a .csv file (a first row that is not all numbers is a header) or a .npy file
holding one 2-D array; one example per row. A program is called program(x) with x the
data array (N, D); its parameters are numpyro.param sites, or sample sites with priors
for loo, waic and evidence (see inference.app.program_selection).
output: selection-FAMILY.csv/.json/.png, or selection-PROG1+PROG2.* for programs.
"""


def add_select_parser(commands, formatter):
    """Add ``select`` to the sub-command parsers ``commands`` of ``ppl-zoo``."""
    import textwrap

    description = textwrap.fill(
        "Read a data matrix from a CSV or .npy file, score candidate sizes of a family "
        "(mixture k, MCVQ (K, J), ...) or your own NumPyro programs (--program) by "
        "model-selection criteria (VB bound, cross-validation, training likelihood, BIC, "
        "AIC, PSIS-LOO, WAIC, evidence: values in nats per example, higher is better; the "
        "mixture's YING-YANG criteria J, L_map, L_stocha, yy_bic, yy_aic, yy_loo, lower is "
        "better, as the table says), "
        "print the table with each criterion's choice -- a degenerate or unreliable value "
        "(collapsed fit, unmixed chains, Pareto k > 0.7, an evidence within its error) is "
        "excluded and marked, and a criterion left without a trustworthy value says 'no "
        "choice' -- and write it as CSV and JSON with a figure. " + COST_NOTE, 88)
    select = commands.add_parser(
        "select", help="choose a model (a family's size, or between your own programs) on "
                       "your own data",
        formatter_class=formatter, epilog=_families_help() + "\n\n" + _EXAMPLES,
        description=description)
    select.add_argument("family", metavar="FAMILY", nargs="?",
                        help="the family whose size is chosen (listed below); leave it out "
                             "with --program")
    select.add_argument("--program", metavar="FILE.py:FN[,FN...]",
                        help="choose between the NumPyro programs FN (called FN(x)) defined "
                             "in FILE.py instead of a family's sizes")
    select.add_argument("--data", required=True, metavar="FILE",
                        help="the data: a .csv file (with or without a header row) or a .npy "
                             "file holding a 2-D array, one example per row")
    select.add_argument("--candidates", nargs="+", metavar="C",
                        help="the candidate sizes: integers, or K,J (also KxJ) pairs for "
                             "families sized by a pair (default: the family's own list)")
    select.add_argument("--criteria", nargs="+", metavar="NAME",
                        help="criteria among the family's (vb, cv, train, bic, aic, loo, "
                             "waic, evidence, ...; default: the family's defaults, below)")
    select.add_argument("--fast", action="store_true",
                        help="leave out the NUTS-based criteria (loo, waic) of the defaults")
    select.add_argument("--output-dir", default="zoo-select",
                        help="folder for selection-NAME.csv, .json and .png (default: "
                             "./zoo-select)")
    select.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    select.add_argument("--folds", type=int, default=5,
                        help="folds of the cross-validation criterion cv (default: 5)")
    select.add_argument("--restarts", type=int, default=3,
                        help="random starts per fit, the best kept (default: 3)")
    select.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return select


#: The criteria ``--fast`` leaves out.
NUTS_CRITERIA = ("loo", "waic")


def main(args) -> int:
    """Run ``ppl-zoo select`` on parsed arguments; return the exit status.

    Parameters
    ----------
    args : argparse.Namespace
        ``family``, ``program``, ``data``, ``candidates``, ``criteria``, ``fast``,
        ``output_dir``, ``seed``, ``folds``, ``restarts``, ``no_progress`` (see
        ``ppl-zoo select --help``).

    Returns
    -------
    int
        0 on success.

    Raises
    ------
    ValueError, TypeError, FileNotFoundError
        Bad input: an unknown family or criterion, malformed candidates, unreadable
        data, a program file or function that is missing or fails, or candidates the
        data do not allow (the command line prints them).
    """
    from inference.app.selection import (
        PROGRAM_BAYES_CRITERIA,
        PROGRAM_DEFAULT_CRITERIA,
        model_selection,
        selectable_families,
    )

    program = getattr(args, "program", None)
    fast = bool(getattr(args, "fast", False))
    if program is not None and args.family is not None:
        raise ValueError(f"give a FAMILY or --program, not both; got {args.family!r} and "
                         f"--program {program!r}")
    if program is None and args.family is None:
        raise ValueError("give a FAMILY (e.g. mixture) or --program FILE.py:FN,FN")
    for flag, value, least in (("--folds", args.folds, 2), ("--restarts", args.restarts, 1)):
        if value < least:
            raise ValueError(f"{flag} must be at least {least}; got {value}")
    criteria = None if args.criteria is None else [c.replace("-", "_") for c in args.criteria]
    if fast and criteria is not None and set(NUTS_CRITERIA) & set(criteria):
        raise ValueError(f"--fast leaves out {list(NUTS_CRITERIA)}; drop them from --criteria "
                         "or drop --fast")
    if program is not None:
        if args.candidates is not None:
            raise ValueError("--candidates: with --program the candidates are the programs")
        programs = load_programs(program)
        x, header = read_data(args.data)
        if fast and criteria is None:
            criteria = list(PROGRAM_DEFAULT_CRITERIA)
            from inference.app.program_selection import ProgramScorer

            probe = ProgramScorer(x, dict(enumerate(programs)), rng_key=jax.random.key(0))
            if all(c.bayesian for c in probe.candidates.values()):
                criteria += [c for c in PROGRAM_BAYES_CRITERIA if c not in NUTS_CRITERIA]
        result = model_selection(x, programs, criteria=criteria,
                                 rng_key=jax.random.key(args.seed), num_folds=args.folds,
                                 num_restarts=args.restarts, progress_bar=not args.no_progress)
        what = "programs " + ", ".join(result.candidates)
    else:
        specs = selectable_families()
        family = _family(args.family, specs)
        spec = specs[family]
        candidates = parse_candidates(args.candidates, spec.label, spec.size)
        if fast and criteria is None:
            criteria = [c for c in spec.default_criteria if c not in NUTS_CRITERIA]
        x, header = read_data(args.data)
        result = model_selection(x, candidates, model=family, criteria=criteria,
                                 rng_key=jax.random.key(args.seed), num_folds=args.folds,
                                 num_restarts=args.restarts, progress_bar=not args.no_progress)
        what = family
    print(f"# {what} on {args.data}: {x.shape[0]} examples x {x.shape[1]} dimensions, "
          f"seed={args.seed}, folds={args.folds}, restarts={args.restarts}"
          + (", --fast" if fast else ""))
    print(result.table())
    settings = {"num_folds": args.folds, "num_restarts": args.restarts,
                "columns": header, "fast": fast}
    if program is not None:
        settings["program"] = program
    paths = save_selection(result, args.output_dir, data=args.data, shape=x.shape,
                           seed=args.seed, settings=settings)
    for kind, path in paths.items():
        print(f"wrote {kind.upper():4s} {path}")
    return 0
