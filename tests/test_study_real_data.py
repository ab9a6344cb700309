"""The model-selection study's real-data rows (``examples/studies/real_data.toml``).

The default run checks the study file without fitting anything: it names every
selectable family once, on data files in the repository (small, and equal to what
``examples/studies/real_data.py`` writes from scikit-learn's bundled sets), with
scikit-learn's programs on the mixture's and PPCA's data; the rows recorded under
``docs/_data/selection_study/study-real_data/`` are this file's rows (same keys) and
their report has one line per family with the scikit-learn column; no criterion chose
a candidate it had left out as degenerate; the documentation's section renders them. A
program's exclusions and reasons for no choice are kept in its row. The tiny row (iris,
k = 1..3, BIC and CV) and the whole study's rows run in the slow run.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from inference.app.selection import selectable_families
from inference.app.study import FilesSource, load_study, plan_rows, run_study, study_report
from inference.app.study.rows import row_from_result
from inference.app.study.tables import real_data_summary, real_data_table

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "examples" / "studies" / "real_data.toml"
RECORDED = ROOT / "docs" / "_data" / "selection_study"
STORE = RECORDED / "study-real_data"


def _real_data_module():
    spec = importlib.util.spec_from_file_location(
        "real_data_sources", ROOT / "examples" / "studies" / "real_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _zoo_docs():
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        return importlib.import_module("zoo_docs")
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))


@pytest.fixture(scope="module")
def study():
    return load_study(STUDY)


def test_the_study_names_every_selectable_family_on_real_files(study):
    families = [m.family for m in study.models if m.family is not None]
    assert sorted(families) == sorted(selectable_families())
    assert all(m.planted is None for m in study.models)  # real data: no planted answer
    for entry in study.models:
        source = study.data[entry.data]
        assert isinstance(source, FilesSource) and len(source.files) == 1
        path = Path(study.base_dir) / source.files[0]
        assert path.is_file() and path.stat().st_size < 100_000, path
    programs = {m.label: m for m in study.models if m.program is not None}
    assert {programs[p].data for p in programs} == {"iris", "wine"}
    by_data = {m.data: m.family for m in study.models if m.family is not None}
    assert by_data["iris"] == "mixture" and by_data["wine"] == "ppca"
    rows = plan_rows(study)
    assert len(rows) == len(study.models) and len({r.key for r in rows}) == len(rows)


def test_the_data_files_are_scikit_learns_bundled_sets(study):
    module = _real_data_module()
    sets = module.data_sets()
    files = {Path(s.files[0]).name for s in study.data.values()}
    assert files == set(sets)
    for name, (x, header, _) in sets.items():
        text = (module.DATA / name).read_text().splitlines()
        assert text[0] == header
        saved = np.loadtxt(module.DATA / name, delimiter=",", skiprows=1)
        np.testing.assert_allclose(saved, x, atol=5e-5)


def _recorded_report(study):
    lines, tables = study_report(study, STORE)
    return lines, tables


def test_the_recorded_rows_report_a_row_per_family_with_scikit_learns_answer(study):
    lines, tables = _recorded_report(study)
    n = len(study.models)
    assert f"{n} of {n} rows finished" in lines[0], lines[0]
    text = "\n".join(lines)
    assert "scikit-learn" in text
    real = [s for m in study.models for s in tables.get(m.label, {}).get("real", ())]
    assert sorted(s["family"] for s in real) == sorted(selectable_families())
    table = real_data_table(real)
    assert table[1].split()[-2:] == ["scikit-learn", "seconds"]
    for s in real:
        (line,) = [ln for ln in table[2:2 + len(real)] if ln.split()[0] == s["family"]]
        assert f"{s['num_examples']} x {s['num_dimensions']}" in line
        # no criterion chose a candidate it had left out (degenerate or unreliable)
        for c, value in s["choice"].items():
            assert value is None or value not in s["excluded"].get(c, {}), (s["family"], c)
        assert s["seconds"] is not None and s["seconds"] > 0
    refs = {s["family"]: s["reference"] for s in real}
    assert refs["mixture"]["criterion"] == "sklearn_bic" and refs["mixture"]["choice"]
    assert refs["ppca"]["criterion"] == "sklearn_mle" and refs["ppca"]["choice"]
    # Minka's Laplace evidence is PCA(n_components="mle")'s criterion: same q
    assert "laplace" in refs["ppca"]["agree"] and "pca_mle" in refs["ppca"]["agree"]
    assert all(refs[f] is None for f in ("clipped", "gvq", "mcvq"))
    assert sum(ln.split()[-2] == "none" for ln in table[2:2 + len(real)]) == 3


def test_the_recorded_json_and_its_documentation_section(study):
    recorded = json.loads((RECORDED / "selection_study_real_data.json").read_text())
    _, tables = _recorded_report(study)
    real = [s for m in study.models for s in tables.get(m.label, {}).get("real", ())]
    assert [r["family"] for r in recorded["rows"]] == [s["family"] for s in real]
    for saved, now in zip(recorded["rows"], real, strict=True):
        assert saved["choice"] == now["choice"] and saved["reference"] == now["reference"]
    zoo_docs = _zoo_docs()
    section = "\n".join(zoo_docs.real_data_section(recorded))
    assert "Real data: no planted answer" in section
    for r in recorded["rows"]:
        assert f"   * - {r['family']}\n" in section
    page = zoo_docs.selection_study_page(
        json.loads((RECORDED / "selection_study.json").read_text()), figures_dir=None,
        real_data=recorded)
    assert "model_selection_real_data" in page and "Real data: no planted answer" in page
    assert "Real data: no planted answer" not in zoo_docs.selection_study_page(
        json.loads((RECORDED / "selection_study.json").read_text()), figures_dir=None)


def test_a_programs_exclusions_and_missing_choices_are_kept():
    row = row_from_result({"values": {"a": [1.0, 3.0, 2.0], "b": [0.0, 1.0, 2.0]},
                           "excluded": {"a": {"2": "collapsed"}},
                           "no_choice": {"b": "every value unreliable"}}, (1, 2, 3))
    assert row["choice"] == {"a": 2, "b": None}
    assert row["excluded"] == {"a": {"2": "collapsed"}}
    assert row["no_choice"] == {"b": "every value unreliable"}
    summary = real_data_summary({**row, "seed": 0, "num_examples": 9, "num_dimensions": 2},
                                ("a", "b"), family="f", data="d",
                                reference=("ref", {"choice": {"r": 2}, "seconds": {"r": 0.1}}))
    assert summary["no_choice"] == {"b": "every value unreliable"}
    assert summary["reference"]["agree"] == ["a"] and not summary["agree"]
    text = "\n".join(real_data_table([summary]))
    assert "only a chose (2)" in text and "2 (r; same as a)" in text
    assert "no choice by b: every value unreliable" in text
    assert "excluded from a: 2: collapsed" in text


TINY = """
name = "tiny_real"
[data.iris]
files = {{ iris_standardised = "{path}" }}

[[models]]
family = "mixture"
data = "iris"
candidates = [1, 2, 3]
criteria = ["cv", "bic"]

[[models]]
name = "sklearn_mixture"
program = "{programs}:sklearn_mixture_bic"
data = "iris"
candidates = [1, 2, 3]
"""


@pytest.mark.slow  # the mixture's fits compile: about a minute on two busy cores
def test_a_tiny_real_data_row_chooses_no_degenerate_fit(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY.format(
        path=ROOT / "examples" / "studies" / "data" / "iris_standardised.csv",
        programs=ROOT / "examples" / "studies" / "real_data.py"))
    study = load_study(path)
    run = run_study(study, output_dir=tmp_path / "out", serial=True, progress=False)
    assert run.failed == 0 and run.computed == 2
    _, tables = study_report(study, tmp_path / "out")
    (summary,) = tables["mixture"]["real"]
    assert summary["num_examples"] == 150 and summary["num_dimensions"] == 4
    for c in ("cv", "bic"):
        assert summary["choice"][c] is not None
        assert summary["choice"][c] not in summary["excluded"].get(c, {})
    assert summary["reference"]["choice"] in ("1", "2", "3")


#: The families whose real-data rows CI computes again (about two minutes on two cores);
#: GVQ's and MCVQ's rows (about five minutes more) are computed again with the runs
#: too long for CI, before a release (``-m whole_run``).
QUICK_FAMILIES = ("mixture", "ppca", "clipped")


@pytest.mark.slow
@pytest.mark.parametrize("families", [
    pytest.param(QUICK_FAMILIES, id="mixture-ppca-clipped"),
    pytest.param(("gvq", "mcvq"), id="gvq-mcvq", marks=pytest.mark.whole_run)])
def test_the_real_data_study_reproduces_the_recorded_choices(study, tmp_path, families):
    """The rows of ``families`` (and the scikit-learn rows on their data) computed again
    give the recorded choices."""
    data = {m.data for m in study.models if m.family in families}
    part = study.replace(models=tuple(
        m for m in study.models if m.family in families or (m.family is None
                                                            and m.data in data)))
    run = run_study(part, output_dir=tmp_path / "out", serial=True, progress=False)
    assert run.failed == 0
    _, fresh = study_report(part, tmp_path / "out")
    _, recorded = _recorded_report(study)
    for entry in part.models:
        if entry.family is None:
            continue
        (new,), (old,) = fresh[entry.label]["real"], recorded[entry.label]["real"]
        # penalised criteria of deterministic fits: same choice from the same key
        for c in ("bic", "laplace", "pca_mle"):
            if c in new["choice"]:
                assert new["choice"][c] == old["choice"][c], (entry.label, c)
