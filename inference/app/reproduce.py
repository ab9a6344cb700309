"""``ppl-zoo reproduce``: run every paper experiment of ``examples/`` and report paper vs ours.

Each experiment of :data:`inference.app.experiments.EXPERIMENTS` names an
example script, its quick and full arguments, and a function that reads the
example's JSON output and returns findings: the paper's number or claim, ours,
and a verdict (:data:`VERDICTS`) decided with a tolerance stated in the
finding. :func:`reproduce` runs the examples one after another, each as a
subprocess (``sys.executable examples/NAME.py ...``) whose output folder and
log lie under the report folder, and writes

* ``report.md`` (and ``report.html`` with ``html=True``): experiment by
  experiment, the claims with the paper's value next to ours and the verdict,
  the example's command line, wall time and figures;
* ``findings.json``: every finding with its experiment, claim, values,
  verdict, command line, wall time and the versions of the software, so that a
  later run can be compared with :func:`compare_findings` (``--compare``).

A failing example gets the verdict ``"failed"`` with the tail of its log, and
the run goes on. The examples live beside the packages in the repository, not
in the installed packages: :func:`find_examples_dir` looks for them next to
``inference/`` unless ``examples_dir`` is given.

The papers (all in :mod:`ppl_models.references`):

* GVQ: M. Westerdijk, D. Barber and W. Wiegerinck, "Deterministic generative models
  for fast feature discovery", Data Mining and Knowledge Discovery 5(4), 2001;
* clipped Gaussian: D. D. Lee and H. Sompolinsky, "Learning a continuous hidden
  variable model for binary data", Advances in Neural Information Processing
  Systems 11 (NIPS 1998), 1999;
* YING-YANG machine: L. Xu, "YING-YANG machine: a Bayesian-Kullback scheme for
  unified learnings and new results on vector quantization", ICONIP'95, 1995;
* MCVQ: D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances
  in Neural Information Processing Systems 15 (NIPS 2002), 2003, and their
  presentation slides of the same title, University of Toronto, 2002.
"""

from __future__ import annotations

import datetime
import html
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

from inference.app.experiments import EXPERIMENTS, VERDICTS, Experiment, finding

__all__ = ["find_examples_dir", "select_experiments", "run_experiment", "reproduce",
           "write_report", "markdown_to_html", "compare_findings", "versions", "VERDICTS"]

#: Lines of a failed example's log quoted in the report.
LOG_TAIL_LINES = 30


def find_examples_dir(examples_dir=None) -> Path:
    """The folder of the example scripts: ``examples_dir``, or ``examples/`` beside the packages.

    Raises ``FileNotFoundError`` naming ``--examples-dir`` when the folder does not exist
    (an installed, non-editable package has no examples beside it).
    """
    if examples_dir is None:
        path = Path(__file__).resolve().parents[2] / "examples"
        if not path.is_dir():
            raise FileNotFoundError(
                f"no examples folder found at {path} (the examples live in the repository, not "
                "in the installed package): pass --examples-dir pointing at the repository's "
                "examples/")
        return path
    path = Path(examples_dir).expanduser().resolve()
    if not path.is_dir():
        raise FileNotFoundError(f"--examples-dir: {examples_dir!r} is not a folder")
    return path


def select_experiments(only=None) -> list[Experiment]:
    """The experiments named in ``only`` (all of them when empty), in registry order."""
    if not only:
        return list(EXPERIMENTS.values())
    only = [name.replace("-", "_") for name in only]  # the names are spelled with "_"
    unknown = [name for name in only if name not in EXPERIMENTS]
    if unknown:
        raise ValueError(f"--only: unknown experiment(s) {unknown}; choose from "
                         f"{sorted(EXPERIMENTS)}")
    return [EXPERIMENTS[name] for name in EXPERIMENTS if name in set(only)]


def versions() -> dict:
    """Versions of Python, the platform and the packages the examples use."""
    out = {"python": platform.python_version(), "platform": platform.platform(),
           "cpu_count": os.cpu_count()}
    for package in ("ppl-zoo", "jax", "jaxlib", "numpyro", "numpy", "scikit-learn"):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = None
    return out


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def run_experiment(experiment: Experiment, examples_dir: Path, output_dir: Path, *,
                   full: bool = False, timeout: float | None = None) -> dict:
    """Run one example as a subprocess and extract its findings.

    The example writes into ``output_dir / experiment.name``; its stdout and
    stderr go to ``output_dir / "logs" / (experiment.name + ".log")``.

    Returns
    -------
    dict
        ``name``, ``paper``, ``section``, ``command`` (as run, with the script
        path relative to the examples folder), ``returncode``, ``seconds`` (wall
        time), ``log``, ``output_dir``, ``figures`` (PNG paths relative to
        ``output_dir``), ``findings`` (list of dicts, see
        :func:`inference.app.experiments.finding`), ``error`` (None, or why it
        failed).
    """
    output_dir = Path(output_dir).resolve()  # the example runs in its own folder
    script = Path(examples_dir).resolve() / experiment.script
    run_dir = output_dir / experiment.name
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in (run_dir / experiment.json_name, *run_dir.glob("*.png")):  # an earlier run's
        stale.unlink(missing_ok=True)
    log_dir = output_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{experiment.name}.log"
    args = list(experiment.full_args if full else experiment.quick_args)
    args += [*experiment.extra_args, "--output-dir", str(run_dir)]
    shown = ["python", f"examples/{experiment.script}", *args[:-1], f"{experiment.name}/"]
    record = {"name": experiment.name, "paper": experiment.paper, "section": experiment.section,
              "command": " ".join(shown), "returncode": None, "seconds": None,
              "log": str(log_path.relative_to(output_dir)), "output_dir": experiment.name,
              "figures": [], "findings": [], "error": None}
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    if not script.is_file():
        record["error"] = f"script not found: {script}"
        log_path.write_text(record["error"] + "\n")
    else:
        with open(log_path, "w") as log:
            try:
                completed = subprocess.run([sys.executable, str(script), *args], cwd=run_dir,
                                           stdout=log, stderr=subprocess.STDOUT, env=env,
                                           timeout=timeout, check=False)
                record["returncode"] = completed.returncode
                if completed.returncode != 0:
                    record["error"] = f"exit status {completed.returncode}"
            except subprocess.TimeoutExpired:
                record["error"] = f"timed out after {timeout:g} s"
    record["seconds"] = time.perf_counter() - start
    record["figures"] = sorted(str(p.relative_to(output_dir)) for p in run_dir.glob("*.png"))
    if record["error"] is None:
        json_path = run_dir / experiment.json_name
        try:
            data = json.loads(json_path.read_text())
            record["findings"] = [dict(f) for f in experiment.extract(data)]
        except FileNotFoundError:
            record["error"] = f"the example wrote no {experiment.json_name}"
        except Exception as error:  # an extractor that breaks must not stop the run
            record["error"] = f"could not read the findings: {type(error).__name__}: {error}"
    if record["error"] is not None:
        record["findings"] = [finding(experiment.claim, experiment.paper_value, None, "failed",
                                      record["error"] + "\n" + _tail(log_path))]
    for item in record["findings"]:
        if item["verdict"] not in VERDICTS:
            raise ValueError(f"experiment {experiment.name!r}: verdict {item['verdict']!r} "
                             f"not in {VERDICTS}")
    return record


def reproduce(output_dir, *, full: bool = False, only=None, examples_dir=None,
              html_report: bool = False, progress: bool = True,
              timeout: float | None = None) -> dict:
    """Run the selected experiments and write ``report.md`` and ``findings.json``.

    Parameters
    ----------
    output_dir : str or Path
        Report folder (created); each example writes into a subfolder named after it.
    full : bool
        The examples' full sizes (the papers' sizes as far as the examples reach them)
        instead of the quick ones; the model-selection study runs a bounded part of its
        grid (:data:`~inference.app.experiments.SELECTION_STUDY_FULL_ARGS`): the whole
        study is ``ppl-zoo study run examples/studies/selection.toml``.
    only : sequence of str, optional
        Experiment names (see :data:`~inference.app.experiments.EXPERIMENTS`).
    examples_dir : str or Path, optional
        The examples folder (default: ``examples/`` beside the packages).
    html_report : bool
        Also write ``report.html``.
    progress : bool
        Show a tqdm bar over the experiments (on stderr).
    timeout : float, optional
        Seconds after which one example is stopped and counted as failed.

    Returns
    -------
    dict
        The content of ``findings.json``, plus ``paths`` (kind -> Path).
    """
    from tqdm.auto import tqdm

    experiments = select_experiments(only)
    examples = find_examples_dir(examples_dir)
    if timeout is not None and not timeout > 0:
        raise ValueError(f"--timeout must be positive; got {timeout}")
    out = Path(output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.UTC)
    records = []
    bar = tqdm(experiments, desc="reproduce", unit="experiment", disable=not progress,
               file=sys.stderr)
    for experiment in bar:
        bar.set_postfix_str(experiment.name)
        record = run_experiment(experiment, examples, out, full=full, timeout=timeout)
        records.append(record)
        bar.write(f"{experiment.name:24s} {record['seconds']:7.1f} s  "
                  + ", ".join(f["verdict"] for f in record["findings"]), file=sys.stderr)
    bar.close()
    summary = {"created": started.isoformat(timespec="seconds"), "full": full,
               "examples_dir": str(examples), "versions": versions(),
               "total_seconds": sum(r["seconds"] for r in records),
               "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
               "experiments": records,
               "findings": [{"experiment": r["name"], **f, "command": r["command"],
                             "seconds": r["seconds"]} for r in records for f in r["findings"]]}
    summary["paths"] = write_report(summary, out, html_report=html_report)
    return summary


_VERDICT_MARK = {"holds": "holds", "partly": "partly", "differs": "**differs**",
                 "not checked": "not checked", "failed": "**FAILED**"}


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        value = f"{value:.4g}"
    return str(value).replace("|", "/").replace("\n", " ")


def _markdown(summary: dict) -> str:
    records = summary["experiments"]
    counts = {}
    for item in summary["findings"]:
        counts[item["verdict"]] = counts.get(item["verdict"], 0) + 1
    size = "the papers' sizes (--full)" if summary["full"] else "quick sizes"
    lines = ["# Reproducing the papers", "",
             f"Run {summary['created']} at {size}: {len(records)} experiments, "
             f"{len(summary['findings'])} findings ("
             + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + "), "
             f"{summary['total_seconds'] / 60:.1f} minutes of wall time.", "",
             "Verdicts: *holds* (within the stated tolerance), *partly*, *differs* (by how much "
             "is in the row), *not checked* (the run was too small to test it), *failed* (the "
             "example did not finish). Quick sizes test fewer seeds and smaller problems than "
             "the papers: a quick verdict is a smoke test of the claim, not a replication. "
             "The model-selection study runs a bounded part of its grid even at --full; "
             "`ppl-zoo study run examples/studies/selection.toml` runs all of it.", "",
             "| experiment | paper | time s | verdicts |", "|---|---|---:|---|"]
    for r in records:
        verdicts = ", ".join(_VERDICT_MARK[f["verdict"]] for f in r["findings"])
        lines.append(f"| [{r['name']}](#{r['name'].replace('_', '-')}) | {_cell(r['paper'])} | "
                     f"{r['seconds']:.1f} | {verdicts} |")
    for r in records:
        lines += ["", f"## {r['name']}", "",
                  f"{r['paper']}, {r['section']}. `{r['command']}` "
                  f"({r['seconds']:.1f} s; log: [{r['log']}]({r['log']}))", "",
                  "| claim | paper | ours | verdict | tolerance / detail |",
                  "|---|---|---|---|---|"]
        for f in r["findings"]:
            detail = f["detail"] if f["verdict"] != "failed" else "see below"
            lines.append(f"| {_cell(f['claim'])} | {_cell(f['paper'])} | {_cell(f['ours'])} | "
                         f"{_VERDICT_MARK[f['verdict']]} | {_cell(detail)} |")
        if r["error"] is not None:
            lines += ["", "```", r["findings"][0]["detail"], "```"]
        for figure in r["figures"]:
            lines += ["", f"![{Path(figure).stem}]({figure})"]
    v = summary["versions"]
    lines += ["", "## Software", "",
              ", ".join(f"{k} {val}" for k, val in v.items() if val is not None) + "."]
    if summary.get("load_average"):
        load = ", ".join(f"{x:.2f}" for x in summary["load_average"])
        lines.append(f"Load average (1, 5, 15 min) at the end: {load}.")
    return "\n".join(lines) + "\n"


def write_report(summary: dict, output_dir, *, html_report: bool = False) -> dict:
    """Write ``findings.json``, ``report.md`` (and ``report.html``); return their paths."""
    out = Path(output_dir)
    paths = {"json": out / "findings.json", "markdown": out / "report.md"}
    record = {k: v for k, v in summary.items() if k != "paths"}
    paths["json"].write_text(json.dumps(record, indent=1, default=str))
    text = _markdown(summary)
    paths["markdown"].write_text(text)
    if html_report:
        paths["html"] = out / "report.html"
        paths["html"].write_text(markdown_to_html(text, title="Reproducing the papers"))
    return paths


def _inline(text: str) -> str:
    text = html.escape(text, quote=False)
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", text)
    text = re.sub(r"\*([^*]+)\*", r"<em>\1</em>", text)
    text = re.sub(r"!\[([^\]]*)\]\(([^)]+)\)", r'<img alt="\1" src="\2">', text)
    return re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r'<a href="\2">\1</a>', text)


def markdown_to_html(text: str, *, title: str = "report") -> str:
    """A small Markdown to HTML conversion for the report's own Markdown.

    Handles what :func:`write_report` writes: ``#``/``##`` headings (with anchors),
    pipe tables, fenced code blocks, images, links, inline code, bold, italics and
    paragraphs; anything else is kept as escaped text.
    """
    body, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            body.append("<pre>" + html.escape("\n".join(lines[i + 1:j])) + "</pre>")
            i = j + 1
            continue
        heading = re.match(r"(#{1,6}) (.*)", line)
        if heading:
            level, content = len(heading.group(1)), heading.group(2)
            anchor = re.sub(r"[^a-z0-9-]", "", content.lower().replace("_", "-").replace(" ", "-"))
            body.append(f'<h{level} id="{anchor}">{_inline(content)}</h{level}>')
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            header, rest = rows[0], [r for r in rows[1:] if not set("".join(r)) <= set("-: ")]
            body.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in header)
                        + "</tr>" + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r)
                                            + "</tr>" for r in rest) + "</table>")
            continue
        elif line.strip():
            paragraph = [line]
            while i + 1 < len(lines) and lines[i + 1].strip() and \
                    not re.match(r"(#|\||```)", lines[i + 1]):
                i += 1
                paragraph.append(lines[i])
            body.append("<p>" + _inline(" ".join(paragraph)) + "</p>")
        i += 1
    style = ("body{font-family:sans-serif;max-width:70em;margin:auto}table{border-collapse:"
             "collapse}td,th{border:1px solid #ccc;padding:2px 6px;vertical-align:top}"
             "img{max-width:100%}pre{background:#f4f4f4;padding:6px;overflow:auto}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
            f"</title><style>{style}</style></head><body>\n" + "\n".join(body)
            + "\n</body></html>\n")


def compare_findings(previous: dict, current: dict) -> list[str]:
    """Lines saying which verdicts and values changed from ``previous`` to ``current``.

    Findings are matched by (experiment, claim); both arguments are the content of
    ``findings.json``. Experiments that ``current`` did not run (``--only``) are
    named once, not finding by finding.
    """
    def index(summary):
        return {(f["experiment"], f["claim"]): f for f in summary.get("findings", [])}

    before, after = index(previous), index(current)
    lines = []
    for key, now in after.items():
        old = before.get(key)
        if old is None:
            lines.append(f"new       {key[0]}: {key[1]} -> {now['verdict']} ({_cell(now['ours'])})")
            continue
        changes = []
        if old["verdict"] != now["verdict"]:
            changes.append(f"verdict {old['verdict']} -> {now['verdict']}")
        if old.get("ours") != now.get("ours"):
            changes.append(f"ours {_cell(old.get('ours'))} -> {_cell(now.get('ours'))}")
        if changes:
            lines.append(f"changed   {key[0]}: {key[1]}: " + "; ".join(changes))
    ran = {key[0] for key in after}
    lines += [f"missing   {key[0]}: {key[1]} (was {old['verdict']})"
              for key, old in before.items() if key not in after and key[0] in ran]
    not_run = sorted({key[0] for key in before} - ran)
    if not_run:
        lines.append(f"not run   {len(not_run)} experiment(s) of the previous run: "
                     + ", ".join(not_run))
    return lines


def main(args) -> int:
    """Run ``ppl-zoo reproduce`` with parsed arguments; returns the exit status."""
    if args.list:
        for experiment in select_experiments(args.only):
            print(f"{experiment.name:24s} {experiment.paper}, {experiment.section}: "
                  f"{experiment.claim}")
        return 0
    previous = None
    if args.compare is not None:
        try:
            previous = json.loads(Path(args.compare).read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"--compare: cannot read {args.compare!r}: {error}") from error
    summary = reproduce(args.output_dir, full=args.full, only=args.only,
                        examples_dir=args.examples_dir, html_report=args.html,
                        progress=not args.no_progress, timeout=args.timeout)
    width = max(len(r["name"]) for r in summary["experiments"])
    for r in summary["experiments"]:
        verdicts = ", ".join(f["verdict"] for f in r["findings"])
        print(f"{r['name']:{width}s} {r['seconds']:7.1f} s  {verdicts}")
    print(f"total {summary['total_seconds']:.1f} s")
    for kind, path in summary["paths"].items():
        print(f"wrote {kind:8s} {path}")
    if previous is not None:
        changes = compare_findings(previous, summary)
        print(f"compared with {args.compare}: " + (f"{len(changes)} change(s)" if changes
                                                    else "no change"))
        for line in changes:
            print("  " + line)
    return 1 if any(r["error"] for r in summary["experiments"]) else 0
