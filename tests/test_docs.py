"""The documentation covers the public API and every registered model.

Fast checks that need no Sphinx: every name of ``inference.__all__`` and
``ppl_models.__all__`` is listed in the API reference's sources (``docs/api/*.rst``);
every entry of ``ModelInfo.algorithms`` resolves to a function and is documented; the
model-card writer of ``docs/_ext/zoo_docs.py`` gives every registered model a card
with its papers, algorithms, baselines and experiments; the reproduction, benchmark
and reference pages render from the recorded data; and nothing under ``docs/`` names
internal notes. A slow test builds the whole site with warnings as errors.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SLOW_DOCTESTS

import inference
import ppl_models
from inference.app.families import load_families
from ppl_models import REGISTRY
from ppl_models.references import REFERENCES

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))
zoo_docs = importlib.import_module("zoo_docs")

#: As tests/test_citations.py: labels that point at notes users do not have.
FORBIDDEN = re.compile(r"seeds? 00\d|shared/|MODELS\.md|DESIGN\.md|BENCHMARKING\.md|"
                       r"design notes|\b[Ii]ssues? \d+")


def _documented_names() -> set[str]:
    """Full names listed in docs/api/*.rst: autosummary entries and data directives."""
    names = set()
    for path in sorted((DOCS / "api").glob("*.rst")):
        module = ""
        in_autosummary = False
        for line in path.read_text().splitlines():
            directive = re.match(r"\.\. (?:py:)?(\w+):: *(\S*)", line)
            if directive:
                kind, argument = directive.groups()
                in_autosummary = kind == "autosummary"
                if kind in ("currentmodule", "module", "automodule"):
                    module = argument
                elif kind in ("data", "autodata", "function", "autofunction", "class",
                              "autoclass"):
                    names.add(f"{module}.{argument}" if module else argument)
                continue
            if in_autosummary:
                if line.strip() and not line.startswith(" "):
                    in_autosummary = False
                elif line.strip() and not line.strip().startswith(":"):
                    entry = line.strip()
                    if entry.startswith("~"):
                        names.add(entry[1:])
                    else:
                        names.add(f"{module}.{entry}" if module else entry)
    return names


def _expected_name(package, name: str) -> str:
    value = getattr(package, name)
    if inspect.ismodule(value):
        return value.__name__
    return f"{package.__name__}.{name}"


@pytest.mark.parametrize("package", [inference, ppl_models], ids=lambda p: p.__name__)
def test_every_public_name_is_in_the_api_reference(package):
    documented = _documented_names()
    missing = [name for name in package.__all__
               if _expected_name(package, name) not in documented]
    assert not missing, f"not in docs/api/*.rst: {missing}"


def test_every_family_baselines_module_is_in_the_api_reference():
    documented = _documented_names()
    for name in load_families():
        assert f"inference.{name}.baselines" in documented, name
    assert "ppl_models.references" in documented


@pytest.mark.parametrize("name", list(REGISTRY))
def test_algorithm_entries_resolve_and_are_documented(name):
    documented = _documented_names()
    info = REGISTRY[name]
    assert info.algorithms, name
    for entry in info.algorithms:
        obj = zoo_docs.resolve_algorithm(entry)
        assert callable(obj), entry
        if "." in entry:
            module = "inference." + entry.rpartition(".")[0]
            assert module in documented, (entry, module)
        else:
            assert entry in inference.__all__ and f"inference.{entry}" in documented, entry


def test_bad_algorithm_entries_are_refused():
    for entry in ("no_such_fit", "gvq.baselines.no_such_fit", "no_module.fit"):
        with pytest.raises(LookupError, match="algorithm"):
            zoo_docs.resolve_algorithm(entry)


def test_every_registered_model_gets_a_card(tmp_path):
    findings = json.loads((DOCS / "_data" / "reproduction" / "findings.json").read_text())
    paths = zoo_docs.write_model_cards(tmp_path, findings)
    assert {p.name for p in paths} >= {f"{name}.rst" for name in REGISTRY} | {"index.rst"}
    families = load_families()
    index = (tmp_path / "index.rst").read_text() + (tmp_path / "table.inc").read_text()
    for name, info in REGISTRY.items():
        card = (tmp_path / f"{name}.rst").read_text()
        family = families[info.family]
        assert f".. _model-{name}:" in card and f"<model-{name}>" in index
        # The papers: the family's full citation, and every reference the entry names.
        assert zoo_docs.escape(family.paper.rstrip(".")) in card
        for ref in REFERENCES.values():
            if ref.short in info.reference:
                assert zoo_docs.escape(ref.citation()) in card, (name, ref.key)
        for entry in info.algorithms:
            assert f":py:obj:`inference.{entry}`" in card, (name, entry)
        for baseline in family.baselines:
            assert f"inference.{info.family}.baselines.{baseline}" in card, (name, baseline)
        for experiment in family.experiments:
            assert experiment.name in card and zoo_docs.escape(experiment.claim) in card
        assert "Known deviations from the paper" in card
        for deviation in info.deviations:
            assert zoo_docs.escape(deviation) in card
        if info.story:
            assert ".. math::" in card and "\\begin{aligned}" in card
        if info.figure:
            assert f"/_data/reproduction/figures/{info.figure}.png" in card
            assert (DOCS / "_data" / "reproduction" / "figures" / f"{info.figure}.png").exists()
        assert not FORBIDDEN.search(card), name


def test_cards_list_the_reproductions_differences(tmp_path):
    findings = {"findings": [
        {"experiment": "gvq_planted", "claim": "planted claim", "paper": "p", "ours": "o",
         "verdict": "differs", "detail": ""},
        {"experiment": "gvq_planted", "claim": "holding claim", "paper": "p", "ours": "o",
         "verdict": "holds", "detail": ""}]}
    zoo_docs.write_model_cards(tmp_path, findings)
    card = (tmp_path / "gvq.rst").read_text()
    assert "planted claim" in card and "holding claim" not in card
    assert "planted claim" not in (tmp_path / "clipped.rst").read_text()


def test_reproduction_benchmark_and_reference_pages_render():
    findings = json.loads((DOCS / "_data" / "reproduction" / "findings.json").read_text())
    page = zoo_docs.reproduction_page(findings)
    for record in findings["experiments"]:
        assert f".. _repro-{record['name']}:" in page
    assert "a5f3e3c" in page and "--full" in page and "2 CPU cores" in page
    table, scripts, run = zoo_docs.load_benchmarks(DOCS / "_data" / "benchmarks")
    page = zoo_docs.benchmarks_page(table, scripts, run)
    for row in table["rows"]:
        assert f".. _bench-{row['benchmark']}:" in page
    assert "compare within this one run" in page
    page = zoo_docs.references_page()
    for ref in REFERENCES.values():
        assert f"@{ref.kind}{{{ref.key}," in page
        assert zoo_docs.escape(ref.citation()) in page


def test_selection_study_page_renders_the_recorded_study_and_its_progress():
    recorded = json.loads((DOCS / "_data" / "selection_study" / "selection_study.json")
                          .read_text())
    page = zoo_docs.selection_study_page(recorded)
    assert ".. _selection-study:" in page
    for name, family in recorded["families"].items():
        assert f"\n{name}\n" in page and family["report"][1].split("\n")[-1] in page
    # a study in progress says how far it is; a complete one says so
    data = {"settings": {"seeds": 2, "levels": ["separated", "few"],
                         "families": ["mixture", "ppca"],
                         "evidence": {"num_particles": 500, "num_repeats": 4}},
            "families": {"mixture": {"seeds": {"separated": 2, "few": 1},
                                     "report": ["\nmixture: planted 3\nheader", "bic 2/2"]}}}
    page = zoo_docs.selection_study_page(data, figures_dir=None)
    assert "3 of the 8 planned seed rows" in page and "   mixture: planted 3" in page
    assert "agrees best with the evidence" not in page          # no evidence, no answer
    data["families"]["mixture"].update(
        criteria=["bic", "evidence"],
        best={"criterion": "bic", "agree": 7, "total": 9, "rho": 0.5, "seconds": 0.25,
              "evidence_seconds": 120.0})
    page = zoo_docs.selection_study_page(data, figures_dir=None)
    assert "agrees best with the evidence" in page
    for cell in ("bic", "7 / 9", "+0.50", "0.25", "120"):
        assert f"     - {cell}\n" in page
    assert "     - 0 / 2" in page                       # ppca: nothing yet
    data["settings"]["families"] = ["mixture"]
    data["families"]["mixture"]["seeds"]["few"] = 2
    page = zoo_docs.selection_study_page(data, figures_dir=None)
    assert "The study is complete" in page and "in progress" not in page


def test_escape_keeps_text_literal():
    assert zoo_docs.escape("a_b |x| *y* `z`") == r"a\_b \|x\| \*y\* \`z\`"
    assert zoo_docs.escape("- 3 and\nmore") == r"\- 3 and more"
    assert zoo_docs.escape("M. Westerdijk") == r"\M. Westerdijk"  # no enumerated list


def test_docs_name_no_internal_notes():
    found = []
    for path in sorted(DOCS.rglob("*")):
        if any(part.startswith("_build") or part in ("generated", "auto_examples",
                                                     "_gallery_src") for part in path.parts):
            continue
        if path.suffix in (".md", ".rst", ".py", ".json", ".txt", ".css", ".inc"):
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if FORBIDDEN.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:90]}")
    assert not found, "internal labels:\n" + "\n".join(found)


def test_every_example_has_a_gallery_title():
    for path in sorted((ROOT / "examples").glob("*.py")):
        lines = path.read_text().splitlines()
        title = lines[0].removeprefix('"""')
        assert lines[0].startswith('"""') and lines[1] == "=" * len(title), path.name


@pytest.mark.slow
def test_sphinx_build_has_no_warnings(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("pydata_sphinx_theme")
    pytest.importorskip("sphinx_gallery")
    pytest.importorskip("numpydoc")
    pytest.importorskip("myst_parser")
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", "-d",
         str(tmp_path / "doctrees"), str(DOCS), str(tmp_path / "html")],
        capture_output=True, text=True, cwd=ROOT, check=False)
    assert result.returncode == 0, result.stderr[-5000:]
    pages = list((tmp_path / "html").rglob("*.html"))
    assert len(pages) > 100
    for name in REGISTRY:
        assert (tmp_path / "html" / "models" / "generated" / f"{name}.html").exists()


@pytest.mark.parametrize("name", sorted(SLOW_DOCTESTS))
def test_examples_moved_to_the_slow_run_exist(name):
    """Every doctest that tests/conftest.py moves to the slow run is a real Examples
    section (a renamed function would otherwise drop out of both runs unnoticed)."""
    module_name, _ = name.rsplit(".", 1)
    module = importlib.import_module(module_name)
    found = {test.name: test for test in doctest.DocTestFinder().find(module)}
    assert name in found and found[name].examples, name
