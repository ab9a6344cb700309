"""Pages of the ppl-zoo documentation that are generated at build time.

A small Sphinx extension (``extensions = [..., "zoo_docs"]`` in ``docs/conf.py``) that,
when the builder starts, writes reStructuredText pages into git-ignored folders:

* ``models/generated/<name>.rst``: one card per registered model
  (:data:`ppl_models.REGISTRY` and its family's :class:`ppl_models.registry.Family`):
  generative story, papers, custom inference and NumPyro baselines with links to the
  API pages, the paper's experiments, the known deviations from the paper (the
  program's own and the recorded reproduction's "differs" / "partly" findings) and
  the figure of the main experiment;
* ``generated/reproduction.rst``: the recorded ``ppl-zoo reproduce --full`` run, from
  ``_data/reproduction/findings.json``;
* ``generated/benchmarks.rst``: the recorded benchmark run, from
  ``_data/benchmarks/all.json`` and the per-script JSON files beside it;
* ``generated/selection_study.rst``: the recorded model-selection study, from
  ``_data/selection_study/selection_study.json`` (written there by ``python
  examples/selection_study.py --saved-only --output-dir docs/_data/selection_study``
  from the seed rows saved beside it) and its real-data rows, from
  ``_data/selection_study/selection_study_real_data.json`` (``python
  examples/selection_study.py --study examples/studies/real_data.toml --serial
  --output-dir docs/_data/selection_study``, reusing the rows under
  ``study-real_data/rows/`` there);
* ``generated/references.rst``: :data:`ppl_models.references.REFERENCES` and their
  BibTeX.

It also stages the gallery: ``examples/*.py`` are copied to ``_gallery_src/`` with a
gallery header (sphinx-gallery wants one in the examples folder), each example's
recorded figure is put where sphinx-gallery looks for its first figure (so it becomes
the thumbnail; nothing is run) and is shown on the example's page.

The page writers are plain functions without Sphinx (``tests/test_docs.py`` calls
them). Refresh the recorded data with ``python docs/_ext/zoo_docs.py reproduction
OUT_DIR`` or ``python docs/_ext/zoo_docs.py benchmarks ALL_JSON RESULTS_DIR --commit
C --date D --description TEXT``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import inspect
import json
import re
import shutil
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
DATA = DOCS / "_data"
#: The main figure of each experiment's recorded run, ``<experiment>.png`` (800 px wide) ...
FIGURES = DATA / "reproduction" / "figures"
#: ... and the same at 400 px, the gallery's thumbnails.
THUMBNAILS = DOCS / "_static" / "thumbnails"
GALLERY_SRC = DOCS / "_gallery_src"
GALLERY_OUT = DOCS / "auto_examples"
#: Labels that point at notes users do not have (as tests/test_citations.py).
FORBIDDEN = re.compile(r"seeds? 00\d|shared[/]|MODELS\.md|DESIGN\.md|BENCHMARKING\.md|"
                       r"design[ ]notes|\b[Ii]ssues? \d+")
VERDICT_TEXT = {"holds": "holds", "partly": "**partly**", "differs": "**differs**",
                "not checked": "not checked", "failed": "**failed**"}

GALLERY_HEADER = """\
.. _gallery:

Examples
========

One script per experiment of the papers, plus one for your own program. Each runs
on its own (``python examples/NAME.py``, ``--quick`` for small sizes) and prints its
numbers beside the paper's; ``ppl-zoo reproduce`` runs them all and judges the
claims (:doc:`/generated/reproduction`).

The examples are not run when the documentation is built: the thumbnails and the
figures on the pages come from the recorded ``ppl-zoo reproduce --full`` run.
"""


# -- text helpers ------------------------------------------------------------------------

def escape(text) -> str:
    """``text`` as literal reStructuredText inline text (one line)."""
    text = " ".join(str(text).split())
    text = re.sub(r"([\\`*_|])", r"\\\1", text)
    if re.match(r"[-+#]\s|(\d+|[A-Za-z]|[ivxlcdmIVXLCDM]+)[.)]\s|\(", text):
        text = "\\" + text  # not a list item
    return text


def underline(title: str, char: str = "=") -> str:
    return f"{title}\n{char * len(title)}"


def summary(obj) -> str:
    """The first paragraph of ``obj``'s docstring, on one line (reStructuredText)."""
    doc = inspect.getdoc(obj) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())


def list_table(header, rows, widths=None) -> list[str]:
    """A ``list-table`` directive; cells are reStructuredText (escape them first)."""
    lines = [".. list-table::", "   :header-rows: 1"]
    if widths:
        lines.append("   :widths: " + " ".join(str(w) for w in widths))
    lines.append("")
    for row in [header, *rows]:
        for i, cell in enumerate(row):
            lines.append(("   * - " if i == 0 else "     - ") + (str(cell) or "\\-"))
    return lines + [""]


def _write(path: Path, text: str) -> Path:
    """Write ``text`` unless the file already holds it (keeps Sphinx's cache valid)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


# -- algorithms ------------------------------------------------------------------------------

def resolve_algorithm(entry: str):
    """The object a ``ModelInfo.algorithms`` entry names: ``inference.<entry>``.

    A bare name is an attribute of :mod:`inference` (one of ``inference.__all__``); a
    dotted one ``"<module path under inference>.<name>"`` (``"clipped.fit.morph"``).
    Raises ``LookupError`` naming the entry when it does not resolve.
    """
    import inference

    if "." not in entry:
        if entry not in inference.__all__:
            raise LookupError(f"algorithm {entry!r} is not in inference.__all__")
        return getattr(inference, entry)
    module_path, _, name = entry.rpartition(".")
    try:
        module = importlib.import_module(f"inference.{module_path}")
    except ImportError as error:
        raise LookupError(f"algorithm {entry!r}: no module inference.{module_path}") from error
    if not hasattr(module, name):
        raise LookupError(f"algorithm {entry!r}: inference.{module_path} has no {name!r}")
    return getattr(module, name)


def algorithm_target(entry: str) -> str:
    """The documented (API page) name of an algorithm entry."""
    return f"inference.{entry}"


# -- model cards -----------------------------------------------------------------------------

def _papers(info, family) -> list[str]:
    """Full citations of the references that ``info.reference`` names, then the family's."""
    from ppl_models.references import REFERENCES

    out = [ref.citation() for ref in REFERENCES.values() if ref.short in info.reference]
    if family is not None and family.paper.rstrip(".") + "." not in out:
        out.append(family.paper.rstrip(".") + ".")
    return out


def _story(info) -> list[str]:
    if not info.story:
        module = inspect.getmodule(info.model)
        return [f"See the docstring of :mod:`{module.__name__}`.", ""]
    text = " ".join(line.strip() for line in info.story.splitlines())
    rows = [row.strip() for row in text.split(r"\\")]
    body = " \\\\\n      ".join(rows)
    return [".. math::", "", "   \\begin{aligned}", "      " + body, "   \\end{aligned}", ""]


def _findings_of(findings: dict | None, names) -> list[dict]:
    if not findings:
        return []
    return [f for f in findings.get("findings", []) if f["experiment"] in names]


def model_card(name: str, info, family, findings: dict | None = None,
               figures_dir: Path | None = FIGURES) -> str:
    """The reStructuredText card of registered model ``name``.

    Parameters
    ----------
    name : str
        The registry key.
    info : ModelInfo
        Its registry entry.
    family : Family or None
        The plug-in of its inference family.
    findings : dict, optional
        The content of a reproduction's ``findings.json``.
    figures_dir : Path, optional
        Where the experiments' recorded figures are (``<experiment>.png``).
    """
    module = inspect.getmodule(info.model)
    title = summary(module).split(":")[0].rstrip(".")
    experiments = tuple(family.experiments) if family is not None else ()
    lines = [f".. _model-{name}:", "", underline(f"{name}: {title}"), ""]
    if family is not None and family.description:
        lines += [escape(family.description[0].upper() + family.description[1:]) + ".", ""]
    lines += [f":Program: :py:func:`{module.__name__}.model` (module :py:mod:`{module.__name__}`)",
              f":Restates: {escape(info.reference) or 'not given'}",
              f":Family: ``{info.family or '-'}`` (plug-in ``inference/{info.family}/plugin.py``)",
              f":Observed site: ``{info.observed_site}``", ""]
    lines += [underline("Paper", "-"), ""]
    lines += [f"* {escape(text)}" for text in _papers(info, family)] + [""]
    lines += [underline("Generative story", "-"), ""] + _story(info)
    if info.latent_sites:
        lines += list_table(("latent site", "shape and meaning"),
                            [(f"``{site}``", escape(text))
                             for site, text in info.latent_sites.items()], widths=(20, 80))
    lines += [underline("Custom inference", "-"), ""]
    for entry in info.algorithms:
        lines.append(f"* :py:obj:`{algorithm_target(entry)}`: "
                     f"{summary(resolve_algorithm(entry))}")
    if not info.algorithms:
        lines.append("None registered.")
    lines += ["", underline("Generic NumPyro baselines", "-"), ""]
    baselines = dict(family.baselines) if family is not None else {}
    if baselines:
        lines += [f"The baselines of the ``{info.family}`` family "
                  f"(:py:mod:`inference.{info.family}.baselines`):", ""]
        lines += [f"* :py:obj:`inference.{info.family}.baselines.{key}`: {summary(fn)}"
                  for key, fn in baselines.items()]
    else:
        lines.append("None registered.")
    lines += ["", underline("Paper experiments", "-"), ""]
    if experiments:
        lines += ["Run by ``ppl-zoo reproduce`` (``--only NAME``); each is an example script "
                  "of the :ref:`gallery`.", ""]
        lines += list_table(
            ("experiment", "paper", "claim"),
            [(f":ref:`{e.name} <sphx_glr_auto_examples_{Path(e.script).stem}.py>`",
              escape(e.section), escape(e.claim)) for e in experiments], widths=(25, 25, 50))
    else:
        lines += ["None: the family has no paper experiment in ``ppl-zoo reproduce``.", ""]
    lines += [underline("Known deviations from the paper", "-"), ""]
    own = list(info.deviations)
    found = [f for f in _findings_of(findings, {e.name for e in experiments})
             if f["verdict"] in ("differs", "partly")]
    if own:
        lines += ["Of the program:", ""] + [f"* {escape(text)}" for text in own] + [""]
    if found:
        lines += ["Found by the recorded reproduction (:doc:`/generated/reproduction`; "
                  "verdict *differs* or *partly*):", ""]
        lines += list_table(
            ("experiment", "claim", "paper", "ours", "verdict"),
            [(f":ref:`repro-{f['experiment']}`", escape(f["claim"]), escape(f["paper"]),
              escape(f["ours"]), VERDICT_TEXT[f["verdict"]]) for f in found],
            widths=(14, 34, 14, 30, 8))
    if not own and not found:
        lines += ["None recorded.", ""]
    figure = info.figure or (experiments[0].name if experiments else "")
    if figure and figures_dir is not None and (Path(figures_dir) / f"{figure}.png").exists():
        lines += [underline("Main experiment", "-"), "",
                  f".. figure:: /_data/reproduction/figures/{figure}.png",
                  f"   :alt: {figure}", "   :width: 100%", "",
                  f"   ``{figure}`` in the recorded ``ppl-zoo reproduce --full`` run "
                  f"(:ref:`repro-{figure}`).", ""]
    return "\n".join(lines) + "\n"


def write_model_cards(out_dir, findings: dict | None = None,
                      figures_dir: Path | None = FIGURES) -> list[Path]:
    """Write one card per registered model, and ``index.rst`` listing them, into ``out_dir``."""
    import inference  # noqa: F401  (imports every family's plug-in)
    from inference.app.families import load_families
    from ppl_models import REGISTRY

    families = load_families()
    out_dir = Path(out_dir)
    paths = []
    rows = []
    for name, info in REGISTRY.items():
        family = families.get(info.family)
        paths.append(_write(out_dir / f"{name}.rst",
                            model_card(name, info, family, findings, figures_dir)))
        title = summary(inspect.getmodule(info.model)).split(":")[0].rstrip(".")
        rows.append((f":ref:`{name} <model-{name}>`", escape(title), escape(info.reference),
                     str(len(family.experiments) if family is not None else 0)))
    table = list_table(("model", "program", "restates", "paper experiments"), rows,
                       widths=(15, 40, 35, 10))
    paths.append(_write(out_dir / "table.inc", "\n".join(table)))
    index = [underline("Model cards"), "",
             "One card per registered model, generated from the registry "
             "(:py:data:`ppl_models.REGISTRY`) and each family's plug-in when the "
             "documentation is built.", "", ".. include:: table.inc", ""]
    index += [".. toctree::", "   :hidden:", ""] + [f"   {name}" for name in REGISTRY] + [""]
    paths.append(_write(out_dir / "index.rst", "\n".join(index)))
    return paths


# -- reproduction report -------------------------------------------------------------------

def _minutes(seconds) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def reproduction_page(summary_data: dict, figures_dir: Path | None = FIGURES) -> str:
    """The reproduction report as reStructuredText, from a ``findings.json``."""
    records = summary_data["experiments"]
    counts: dict[str, int] = {}
    for item in summary_data["findings"]:
        counts[item["verdict"]] = counts.get(item["verdict"], 0) + 1
    versions = summary_data.get("versions", {})
    created = summary_data.get("created", "")
    size = "the papers' sizes (``--full``)" if summary_data.get("full") else "quick sizes"
    commit = summary_data.get("commit")
    full_flag = " --full" if summary_data.get("full") else ""
    lines = [".. _reproduction:", "", underline("Reproducing the papers"), "",
             f"The recorded run of ``ppl-zoo reproduce{full_flag}``: started {escape(created)}"
             + (f" at commit ``{commit}``" if commit else "")
             + f", on a machine with {versions.get('cpu_count', '?')} CPU cores, at {size}: "
             f"{len(records)} experiments, {len(summary_data['findings'])} findings ("
             + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + "), "
             f"{summary_data['total_seconds'] / 60:.1f} minutes of wall time.", ""]
    for item in summary_data.get("amended", []):
        command = item.get("command", f"ppl-zoo reproduce --full --only {item['experiment']}")
        lines += [f"``{item['experiment']}`` was rerun on its own (``{command}``), started "
                  f"{escape(item['created'])} at commit ``{item['commit']}``: "
                  f"{escape(item['why'])}.", ""]
    lines += [
             "Verdicts: *holds* (within the tolerance the finding states), *partly*, "
             "*differs* (by how much is in the row), *not checked* (the run was too small "
             "to test it), *failed* (the example did not finish). Each experiment is an "
             "example script of the :ref:`gallery`; run them all with ``ppl-zoo reproduce "
             "--full`` (about 20 minutes on two cores) and compare with this run by "
             "``--compare findings.json``.", ""]
    lines += list_table(("experiment", "paper", "time", "verdicts"), [
        (f":ref:`repro-{r['name']}`", escape(r["section"]), _minutes(r["seconds"]),
         ", ".join(VERDICT_TEXT[f["verdict"]] for f in r["findings"])) for r in records],
        widths=(20, 40, 10, 30))
    for r in records:
        lines += [f".. _repro-{r['name']}:", "", underline(r["name"], "-"), "",
                  f"{escape(r['paper'])}, {escape(r['section'])}.", "",
                  f"``{r['command']}`` ({_minutes(r['seconds'])}); the script: "
                  f":ref:`sphx_glr_auto_examples_{r['name']}.py`.", ""]
        lines += list_table(("claim", "paper", "ours", "verdict", "tolerance / detail"), [
            (escape(f["claim"]), escape(f["paper"]), escape(f["ours"]),
             VERDICT_TEXT[f["verdict"]], escape(f["detail"])) for f in r["findings"]],
            widths=(28, 14, 28, 8, 22))
        if figures_dir is not None and (Path(figures_dir) / f"{r['name']}.png").exists():
            lines += [f".. figure:: /_data/reproduction/figures/{r['name']}.png",
                      f"   :alt: {r['name']}", "   :width: 100%", ""]
    software = ", ".join(f"{k} {v}" for k, v in versions.items() if v is not None)
    lines += [underline("Software", "-"), "", escape(software) + "."]
    if summary_data.get("load_average"):
        load = ", ".join(f"{x:.2f}" for x in summary_data["load_average"])
        lines += ["", f"Load average (1, 5, 15 min) at the end: {load} (the machine was "
                      "busy: wall times are not benchmarks)."]
    return "\n".join(lines) + "\n"


# -- model-selection study ----------------------------------------------------------------------

SELECTION_STUDY = DATA / "selection_study"


def _literal(report) -> list[str]:
    """A literal block of report lines (entries may hold several lines)."""
    text = [line for entry in report for line in entry.split("\n") if line.strip()]
    return ["::", ""] + [f"   {line}" for line in text] + [""]


def real_data_section(real: dict) -> list[str]:
    """The study's real-data rows (``selection_study_real_data.json`` of
    ``examples/selection_study.py --study examples/studies/real_data.toml``): one table
    row per family -- data set, N x D, each criterion's choice, whether they agree,
    scikit-learn's answer, seconds -- and the reasons for any missing choice."""
    lines = [underline("Real data: no planted answer", "-"), "",
             "Planted data grade a criterion against a size that is there; on real data "
             "no size is true. The study's real-data rows "
             f"(``{real.get('source', 'examples/studies/real_data.toml')}``) score "
             "every family once on a data set bundled with scikit-learn and report what "
             "each criterion chooses, whether the criteria agree (the training "
             "likelihood, which has no penalty, aside), scikit-learn's answer where it "
             "has an estimator for the question, and the row's wall seconds (its "
             "compilations included). :doc:`/model_selection_real_data` discusses them.",
             ""]
    rows = []
    for r in real.get("rows", []):
        choices = ", ".join(f"{c} {'no choice' if v is None else v}"
                            for c, v in r["choice"].items())
        groups = r.get("groups", {})
        if not groups:
            agree = "no criterion chose"
        elif len(groups) == 1:
            agree = "yes"
        else:
            agree = "no: " + "; ".join(f"{v} ({', '.join(n)})" for v, n in groups.items())
        ref = r.get("reference")
        sklearn = "none" if ref is None else (
            f"{ref['choice']} ({ref['criterion']})" if ref["choice"] is not None else
            "no choice")
        seconds = "-" if r.get("seconds") is None else f"{r['seconds']:.3g}"
        rows.append(tuple(escape(v) for v in (
            r["family"], r["data"], f"{r['num_examples']} x {r.get('num_dimensions', '?')}",
            choices, agree, sklearn, seconds)))
    lines += list_table(("family", "data", "N x D", "choices", "criteria agree",
                         "scikit-learn", "seconds"), rows, widths=(9, 17, 8, 30, 20, 10, 6))
    reasons = [f"{r['family']}, {c}: no choice: {why}" for r in real.get("rows", [])
               for c, why in r.get("no_choice", {}).items()]
    reasons += [f"{r['family']}, {c}: {cand} left out: {why}" for r in real.get("rows", [])
                for c, left in r.get("excluded", {}).items() for cand, why in left.items()]
    if reasons:
        lines += [f"* {escape(text)}" for text in reasons] + [""]
    return lines


def selection_study_page(data: dict, figures_dir: Path | None = SELECTION_STUDY,
                         real_data: dict | None = None) -> str:
    """The recorded model-selection study as reStructuredText, from the
    ``selection_study.json`` of ``examples/selection_study.py`` (a complete run or a
    ``--saved-only`` report of a study in progress) and, where given, its real-data rows
    (``selection_study_real_data.json``, :func:`real_data_section`)."""
    settings = data["settings"]
    planned = settings["seeds"]
    levels = settings.get("levels", ["separated", "overlapping", "few"])
    evidence = settings.get("evidence", {})
    families = data["families"]
    planned_families = settings.get("families", list(families))
    done = sum(n for f in families.values() for n in f.get("seeds", {}).values())
    total = planned * len(levels) * len(planned_families)
    complete = done == total
    lines = [".. _selection-study:", "", underline("Model-selection study"), "",
             "Every family's model-selection criteria graded against the reference log "
             "evidence: each criterion's hit rate (it chooses the planted size), its "
             "agreement with the evidence where the evidence is decisive (its best "
             "candidate ahead of the runner-up by more than 2 standard errors), its mean "
             "Spearman correlation with the evidence across the candidates, and its cost "
             "in seconds per seed. The reference is the log marginal likelihood of each "
             "candidate's Bayesian program by adaptive tempered SMC "
             f"({evidence.get('num_particles', '?')} particles, "
             f"{evidence.get('num_repeats', '?')} repeats for its standard error). "
             "The script, its planted problems and priors: "
             ":ref:`sphx_glr_auto_examples_selection_study.py`.", "",
             "These tables grade the criteria on planted data. On real data, where no "
             "size is true, the study's real-data rows report instead each criterion's "
             "choice, whether the criteria agree, scikit-learn's answer where it has one "
             "and the cost: "
             + ("the last section below and " if real_data else "")
             + ":doc:`/model_selection_real_data`.", ""]
    if complete:
        lines += [f"The study is complete: {planned} seeds per level and family.", ""]
    else:
        lines += [f"**A study in progress**: {done} of the {total} planned seed rows "
                  f"({planned} seeds x {len(levels)} levels x {len(planned_families)} families) "
                  "are recorded; each table counts its own rows, and a family or level "
                  "without rows is not shown. Hit rates and agreements on few seeds are "
                  "not yet the study's answer.", ""]
    lines += list_table(("family", *levels), [
        (name, *(f"{families.get(name, {}).get('seeds', {}).get(lv, 0)} / {planned}"
                 for lv in levels))
        for name in planned_families], widths=(25, *(75 // len(levels),) * len(levels)))
    answers = [(name, family["best"]) for name, family in families.items()
               if family.get("best") is not None and "evidence" in family.get("criteria", ())]
    if answers:
        lines += ["Which criterion agrees best with the evidence (over every recorded level; "
                  "ties broken by the mean rank correlation), and at what cost:", ""]
        lines += list_table(
            ("family", "criterion", "same choice as a decisive evidence", "mean rho",
             "seconds per seed", "the evidence's seconds per seed"),
            [(name, best["criterion"], f"{best['agree']} / {best['total']}",
              "-" if best.get("rho") is None else f"{best['rho']:+.2f}",
              _number(best.get("seconds")), _number(best.get("evidence_seconds")))
             for name, best in answers], widths=(14, 14, 24, 12, 16, 20))
    for name, family in families.items():
        lines += [underline(name, "-"), ""] + _literal(family.get("report", []))
        figure = f"selection_study_{name}.png"
        if figures_dir is not None and (Path(figures_dir) / figure).exists():
            lines += [f".. figure:: /_data/selection_study/{figure}", f"   :alt: {name}",
                      "   :width: 100%", ""]
    shapes = data.get("shapes")
    if shapes and shapes.get("report"):
        lines += [underline("MCVQ on shapes: the evidence against the VB bound", "-"), ""]
        lines += _literal(shapes["report"])
    if real_data:
        lines += real_data_section(real_data)
    return "\n".join(lines) + "\n"


# -- benchmarks ---------------------------------------------------------------------------------

def _number(value, unit=None) -> str:
    if value is None:
        return "\\-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        text = f"{value:.3g}"
    else:
        text = escape(value)
    return f"{text} {escape(unit)}" if unit else text


#: The goal of the scripts whose JSON states it only as a number (from their docstrings).
GOALS = {
    "mcvq": "EM >= 50x faster than NumPyro's SVI to equal ELBO; one EM iteration linear "
            "in N, D, K and J",
    "model_selection": "one variational Bayes run from an over-complete model >= 10x "
                       "cheaper than the cross-validated grid reaching the same choice",
    "sharding": "on a mesh of one device the sharded path costs under 10% more than the "
                "plain one (sharded / plain < 1.10)",
}


def _goal(name: str, data: dict) -> str:
    """A script's goal: its JSON's ``goal`` or ``goals``, else :data:`GOALS`."""
    if isinstance(data.get("goal"), str):
        return data["goal"]
    for key in ("goals", "goal_result", "goal_results"):
        if isinstance(data.get(key), list):
            texts = [g.get("goal") if isinstance(g, dict) else g for g in data[key]]
            texts = [str(t).removeprefix("Goal: ") for t in texts if t]
            if texts:
                return "; ".join(dict.fromkeys(texts))
    return GOALS.get(name, "")


def benchmarks_page(table: dict, scripts: dict, run: dict) -> str:
    """The benchmark results as reStructuredText.

    Parameters
    ----------
    table : dict
        ``all.json`` of ``benchmarks/run_all.py`` (``machine``, ``runs``, ``rows``).
    scripts : dict
        Benchmark name -> the content of that script's own JSON (for its goal).
    run : dict
        How the run was made: ``date``, ``commit``, ``description``.
    """
    machine = table.get("machine", {})
    mode = "``--quick``" if table.get("quick") else "full-size"
    lines = [".. _benchmarks:", "", underline("Benchmark results"), "",
             f"A recorded {mode} run of ``python benchmarks/run_all.py``"
             + (f" on {escape(run['date'])}" if run.get("date") else "")
             + (f" at commit ``{run['commit']}``" if run.get("commit") else "") + ". "
             + (escape(run["description"]) + " " if run.get("description") else ""),
             "",
             ".. important::", "",
             "   Timings compare within this one run on this one machine only: compare the "
             "ratios, not the seconds, with other runs or machines. The machine was shared "
             "with other work, so single timings are noisy. A ratio is the peer's time over "
             "ours unless the goal says otherwise (above 1: ours is faster; ``>`` marks a "
             "lower bound).", ""]
    if table.get("quick"):
        lines += [".. note::", "",
                  "   ``--quick`` runs every script at smaller sizes and with fewer repeats "
                  "than its goal states, where compilation and fixed costs weigh more: a goal "
                  "marked as not met here is not a verdict on the goal, which a full-size run "
                  "on quiet cores decides (``python benchmarks/run_all.py``, about an hour "
                  "on two cores).", ""]
    lines += [underline("Machine", "-"), ""]
    for key, value in machine.items():
        if value in (None, "", []):
            continue
        if isinstance(value, list):
            value = ", ".join(f"{x:.2f}" if isinstance(x, float) else str(x) for x in value)
        lines.append(f":{escape(key)}: {escape(value)}")
    lines.append("")
    runs = {r["benchmark"]: r for r in table.get("runs", [])}
    if runs:
        lines += list_table(("benchmark", "wall time", "exit status"), [
            (f":ref:`bench-{name}`", _minutes(r.get("seconds") or 0), str(r.get("returncode")))
            for name, r in runs.items()], widths=(40, 30, 30))
    rows_by: dict[str, list] = {}
    for row in table.get("rows", []):
        rows_by.setdefault(row["benchmark"], []).append(row)
    for name in dict.fromkeys([*runs, *rows_by]):
        rows = rows_by.get(name, [])
        lines += [f".. _bench-{name}:", "", underline(name, "-"), "",
                  f"``benchmarks/{name}.py``."]
        goal = _goal(name, scripts.get(name, {}))
        if goal:
            lines += ["", f"**Goal:** {escape(goal)}."]
        lines.append("")
        if not rows:
            lines += ["No rows (the script failed or wrote nothing this run).", ""]
            continue
        columns = ["method", "peer", "size", "time", "ratio", "memory peak", "goal met", "note"]
        cells = [[escape(r.get("method") or "-"), escape(r.get("peer") or "-"),
                  escape(r.get("size") or "-"), _number(r.get("time"), r.get("unit")),
                  _number(r.get("ratio")), _number(r.get("memory_peak")),
                  {True: "**met**", False: "not met", None: "\\-"}[r.get("goal_met")],
                  escape(r.get("note") or "")] for r in rows]
        widths = [16, 12, 18, 10, 8, 10, 8, 18]
        keep = [i for i, column in enumerate(columns)  # drop columns empty in every row
                if column in ("method", "time") or any(c[i] not in ("\\-", "", "-")
                                                       for c in cells)]
        lines += list_table([columns[i] for i in keep], [[c[i] for i in keep] for c in cells],
                            widths=[widths[i] for i in keep])
    return "\n".join(lines) + "\n"


def load_benchmarks(data_dir: Path) -> tuple[dict, dict, dict]:
    """``all.json``, the per-script JSON files and ``run.json`` of a benchmarks folder."""
    data_dir = Path(data_dir)
    table = json.loads((data_dir / "all.json").read_text())
    scripts = {}
    for path in sorted(data_dir.glob("*.json")):
        if path.name in ("all.json", "run.json"):
            continue
        try:
            scripts[path.stem] = json.loads(path.read_text())
        except json.JSONDecodeError:
            continue
    run_path = data_dir / "run.json"
    run = json.loads(run_path.read_text()) if run_path.exists() else {}
    return table, scripts, run


# -- references -----------------------------------------------------------------------------

def references_page() -> str:
    """Every reference of :data:`ppl_models.references.REFERENCES`, and their BibTeX."""
    from ppl_models.references import REFERENCES, bibtex

    lines = [".. _references:", "", underline("References"), "",
             "The papers the zoo's models and algorithms come from "
             "(:py:data:`ppl_models.references.REFERENCES`; "
             ":py:func:`ppl_models.references.cite` gives the one-line citation used in "
             "docstrings and reports).", ""]
    for key, ref in REFERENCES.items():
        lines += [f"* {escape(ref.citation())} (key ``{key}``)"]
    lines += ["",
              underline("BibTeX", "-"), "",
              "From :py:func:`ppl_models.references.bibtex`:", "", ".. code-block:: bibtex", ""]
    lines += ["   " + line if line else "" for line in bibtex().splitlines()]
    return "\n".join(lines) + "\n"


# -- gallery ----------------------------------------------------------------------------------

def _experiment_scripts() -> dict[str, str]:
    """Example stem -> experiment name, for the examples that are paper experiments."""
    from inference.app.experiments import EXPERIMENTS

    return {Path(e.script).stem: name for name, e in EXPERIMENTS.items()}


def stage_gallery() -> None:
    """Copy the examples and a gallery header to ``_gallery_src``; seed the thumbnails."""
    GALLERY_SRC.mkdir(exist_ok=True)
    _write(GALLERY_SRC / "GALLERY_HEADER.rst", GALLERY_HEADER)
    current = set()
    for path in sorted((ROOT / "examples").glob("*.py")):
        current.add(path.name)
        _write(GALLERY_SRC / path.name, path.read_text())
    for stale in GALLERY_SRC.glob("*.py"):
        if stale.name not in current:
            stale.unlink()
    images = GALLERY_OUT / "images"
    images.mkdir(parents=True, exist_ok=True)
    for stem, name in _experiment_scripts().items():
        source = THUMBNAILS / f"{name}.png"
        target = images / f"sphx_glr_{stem}_001.png"
        if source.exists() and (not target.exists() or target.read_bytes() != source.read_bytes()):
            shutil.copyfile(source, target)
            thumb = images / "thumb" / f"sphx_glr_{stem}_thumb.png"
            thumb.unlink(missing_ok=True)  # sphinx-gallery remakes it from the new figure


def _add_example_figure(app, docname, source) -> None:
    """On an example's page, show the figure of its recorded run after the docstring."""
    if not docname.startswith("auto_examples/"):
        return
    stem = docname.split("/", 1)[1]
    name = _experiment_scripts().get(stem)
    if name is None or not (FIGURES / f"{name}.png").exists():
        return
    figure = "\n".join([
        "", underline("The recorded figure", "-"), "",
        f".. figure:: /_data/reproduction/figures/{name}.png", f"   :alt: {name}",
        "   :width: 100%", "",
        f"   The main figure of ``{name}`` in the recorded ``ppl-zoo reproduce --full`` run "
        f"(:ref:`repro-{name}`); the documentation's build does not run the example.", "", ""])
    text = source[0]
    marker = "\n.. code-block:: Python"
    at = text.find(marker)
    if at < 0:
        at = text.find("\n.. GENERATED FROM PYTHON SOURCE LINES")
    source[0] = text[:at] + "\n" + figure + text[at:] if at >= 0 else text + figure


# -- Sphinx -----------------------------------------------------------------------------------

def generate(app=None) -> None:
    """Write every generated page (models, reproduction, benchmarks, selection study,
    references)."""
    findings_path = DATA / "reproduction" / "findings.json"
    findings = json.loads(findings_path.read_text()) if findings_path.exists() else None
    write_model_cards(DOCS / "models" / "generated", findings)
    generated = DOCS / "generated"
    if findings is not None:
        _write(generated / "reproduction.rst", reproduction_page(findings))
    bench = DATA / "benchmarks"
    if (bench / "all.json").exists():
        _write(generated / "benchmarks.rst", benchmarks_page(*load_benchmarks(bench)))
    study = SELECTION_STUDY / "selection_study.json"
    real = SELECTION_STUDY / "selection_study_real_data.json"
    if study.exists():
        _write(generated / "selection_study.rst",
               selection_study_page(json.loads(study.read_text()), real_data=json.loads(
                   real.read_text()) if real.exists() else None))
    _write(generated / "references.rst", references_page())


def _config_inited(app, config) -> None:
    # Autosummary never removes a stub it no longer generates; a stale one would be an
    # orphan page (and a duplicate target), so the API stubs are regenerated every build.
    shutil.rmtree(DOCS / "api" / "generated", ignore_errors=True)
    stage_gallery()


def setup(app):
    app.connect("config-inited", _config_inited, priority=100)
    app.connect("builder-inited", generate, priority=100)
    app.connect("source-read", _add_example_figure)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}


# -- refreshing the recorded data -------------------------------------------------------------

#: Experiment -> the file name ending of its main figure, where it has several.
MAIN_FIGURE = {"gvq_compression": "rate_distortion", "clipped_bumps": "spectra",
               "clipped_digits": "morph"}


def _clean(text: str) -> str:
    """Internal labels of older runs' claims reworded as the examples word them now."""
    text = re.sub(r"\(issues? \d+, ", "(", text)
    text = text.replace('"Issue: ', '"Ours: ').replace("the issue's bound", "the zoo's bound")
    return text


def import_reproduction(out_dir, *, commit: str) -> None:
    """Copy a ``ppl-zoo reproduce`` folder's findings.json (cleaned) and main figures here."""
    from PIL import Image

    out_dir = Path(out_dir)
    data = json.loads(_clean(out_dir.joinpath("findings.json").read_text()))
    data["examples_dir"], data["commit"] = "examples", commit
    text = json.dumps(data, indent=1)
    if FORBIDDEN.search(text):
        raise ValueError(f"internal label left in the findings: {FORBIDDEN.search(text)[0]}")
    _write(DATA / "reproduction" / "findings.json", text + "\n")
    for record in data["experiments"]:
        if not record["figures"]:
            continue
        ending = MAIN_FIGURE.get(record["name"], "")
        main_figure = next((f for f in record["figures"] if f.endswith(f"{ending}.png")),
                           record["figures"][0])
        source = out_dir / main_figure
        for width, folder in ((800, FIGURES), (400, THUMBNAILS)):
            _save_png(Image.open(source), width, folder / f"{record['name']}.png")


def _save_png(image, width: int, path: Path) -> None:
    from PIL import Image

    image = image.convert("RGBA")
    image = Image.alpha_composite(Image.new("RGBA", image.size, "white"), image).convert("RGB")
    if image.width > width:
        image = image.resize((width, round(image.height * width / image.width)), Image.LANCZOS)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.quantize(colors=128, dither=Image.Dither.NONE).save(path, optimize=True)


def import_benchmarks(all_json, results_dir, *, commit: str, date: str,
                      description: str = "") -> None:
    """Copy ``all.json`` and the per-script JSON of a benchmark run here, without paths."""
    target = DATA / "benchmarks"
    target.mkdir(parents=True, exist_ok=True)
    for stale in target.glob("*.json"):
        stale.unlink()
    table = json.loads(Path(all_json).read_text())
    for run in table.get("runs", []):
        run["command"] = re.sub(r"\S*/(benchmarks/\w+\.py)", r"\1", run.get("command", ""))
        run["command"] = re.sub(r"--output \S+", "", run["command"]).strip()
        run.pop("log", None)
    _write(target / "all.json", json.dumps(table, indent=1) + "\n")
    names = {row["benchmark"] for row in table.get("rows", [])}
    def without_paths(value):  # the run's output and log paths mean nothing here
        if isinstance(value, dict):
            return {k: without_paths(v) for k, v in value.items() if k not in ("output", "log")}
        return [without_paths(v) for v in value] if isinstance(value, list) else value

    for path in sorted(Path(results_dir).glob("*.json")):
        if path.stem in names and path.name != "all.json":
            data = without_paths(json.loads(path.read_text()))
            _write(target / path.name, json.dumps(data, indent=1) + "\n")
    _write(target / "run.json", json.dumps({"date": date, "commit": commit,
                                            "description": description}, indent=1) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Refresh the recorded data of the docs.")
    sub = parser.add_subparsers(dest="what", required=True)
    repro = sub.add_parser("reproduction", help="import a ppl-zoo reproduce --full folder")
    repro.add_argument("out_dir")
    repro.add_argument("--commit", required=True)
    bench = sub.add_parser("benchmarks", help="import a benchmarks/run_all.py run")
    bench.add_argument("all_json")
    bench.add_argument("results_dir")
    bench.add_argument("--commit", required=True)
    bench.add_argument("--date", default=datetime.date.today().isoformat())
    bench.add_argument("--description", default="")
    args = parser.parse_args(argv)
    if args.what == "reproduction":
        import_reproduction(args.out_dir, commit=args.commit)
    else:
        import_benchmarks(args.all_json, args.results_dir, commit=args.commit, date=args.date,
                          description=args.description)
    return 0


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
