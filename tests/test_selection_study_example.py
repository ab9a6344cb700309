"""The model-selection study (``examples/selection_study.py``).

The fast tests check the study's bookkeeping on hand-made rows (hits, agreement with a
decisive evidence only, Spearman's rho, the best-agreeing criterion) and the findings
that ``ppl-zoo reproduce`` reads from its JSON. The slow test runs ``--quick`` (one seed
of the well-separated level of every family, cheap criteria) and checks that every
criterion finds the planted size there.
"""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from inference.app.experiments import EXPERIMENTS


@pytest.fixture(scope="module")
def example(load_example):
    return load_example("selection_study")


def test_spearman(example):
    assert example.spearman([1, 2, 3, 4], [10, 20, 30, 45]) == pytest.approx(1.0)
    assert example.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(example.spearman([1, 2], [1, 2]))  # too few pairs
    assert math.isnan(example.spearman([1, 2, np.nan, 4], [1, 2, 3, np.nan]))
    assert math.isnan(example.spearman([1, 1, 1], [1, 2, 3]))  # constant


def _result(values, errors):
    return SimpleNamespace(values={"evidence": values}, standard_errors={"evidence": errors})


def test_decisive_needs_two_standard_errors(example):
    assert example.decisive(_result((-10.0, -5.0, -9.0), (1.0, 1.0, 1.0))) is True
    assert example.decisive(_result((-10.0, -5.0, -6.0), (1.0, 1.0, 1.0))) is False
    assert example.decisive(_result((-5.0, np.nan), (1.0, np.nan))) is False
    assert example.decisive(SimpleNamespace(values={}, standard_errors={})) is None


def _row(choice, decisive=True, values=None):
    return {"choice": choice, "decisive": decisive, "values": values or {}, "errors": {},
            "seconds": {c: 1.0 for c in choice}}


def test_summary_counts_agreement_only_where_the_evidence_is_decisive(example):
    rows = [_row({"bic": 3, "cv": 2, "evidence": 3},
                 values={"bic": [1, 3, 2], "cv": [1, 2, 3], "evidence": [1, 3, 2]}),
            _row({"bic": 3, "cv": 3, "evidence": 4}, decisive=False),
            _row({"bic": 2, "cv": 3, "evidence": 3})]
    summary = example.summarise(rows, 3, ("bic", "cv", "evidence"))
    assert summary["bic"]["hits"] == 2 and summary["cv"]["hits"] == 2
    assert summary["bic"]["with_evidence"] == 2 and summary["bic"]["agree"] == 1
    assert summary["cv"]["agree"] == 1
    assert summary["evidence"]["decisive"] == 2 and summary["evidence"]["hits"] == 2
    assert summary["bic"]["rho"] == pytest.approx(1.0)
    assert summary["cv"]["rho"] == pytest.approx(0.5)
    best = example.best_agreement({"separated": summary}, ("bic", "cv", "evidence"))
    assert best["criterion"] == "bic" and (best["agree"], best["total"]) == (1, 2)
    assert best["seconds"] == 1.0 and best["evidence_seconds"] == 1.0


def test_overall_adds_levels_and_weights_seconds_by_rows(example):
    """Over all levels: counts add up, rho is the mean of the levels' means, seconds are
    weighted by each level's rows; the best criterion carries its cost and the evidence's."""
    def level(bic, cv, evidence_seconds, bic_seconds):
        return {"bic": {"hits": bic[0], "agree": bic[1], "with_evidence": bic[2],
                        "rho": bic[3], "seconds": bic_seconds},
                "cv": {"hits": cv[0], "agree": cv[1], "with_evidence": cv[2], "rho": cv[3],
                       "seconds": 2.0},
                "evidence": {"hits": 3, "agree": 0, "with_evidence": 0, "rho": None,
                             "seconds": evidence_seconds}}

    summary = {"separated": level((3, 2, 2, 1.0), (2, 2, 2, 0.5), 100.0, 1.0),
               "few": level((1, 0, 1, 0.0), (1, 1, 1, None), 10.0, 4.0)}
    seeds = {"separated": 3, "few": 1}
    totals = example.overall(summary, ("bic", "cv", "evidence"), seeds)
    assert totals["bic"]["hits"] == 4 and totals["bic"]["rows"] == 4
    assert (totals["bic"]["agree"], totals["bic"]["with_evidence"]) == (2, 3)
    assert totals["bic"]["rho"] == pytest.approx(0.5)
    assert totals["cv"]["rho"] == pytest.approx(0.5)               # the level without rho drops
    assert totals["bic"]["seconds"] == pytest.approx((3 * 1.0 + 4.0) / 4)
    best = example.best_agreement(summary, ("bic", "cv", "evidence"), seeds)
    assert best["criterion"] == "cv" and (best["agree"], best["total"]) == (3, 3)
    assert best["seconds"] == pytest.approx(2.0)
    assert best["evidence_seconds"] == pytest.approx((3 * 100.0 + 10.0) / 4)
    lines = example.overall_table(summary, ("bic", "cv", "evidence"), seeds)
    assert [line.split()[0] for line in lines[1:]] == ["evidence", "cv", "bic"]
    # without the evidence the order is by hits
    lines = example.overall_table(summary, ("cv", "bic"), seeds)
    assert [line.split()[0] for line in lines[1:]] == ["bic", "cv"]


def test_pair_candidates_count_as_hits(example):
    rows = [_row({"cv": [2, 3]}), _row({"cv": [3, 3]})]
    assert example.summarise(rows, (2, 3), ("cv",))["cv"]["hits"] == 1


def test_findings_from_a_recorded_shape():
    data = {"settings": {"seeds": 4}, "families": {"mixture": {
        "planted": 3, "criteria": ["bic", "evidence"],
        "summary": {"separated": {"bic": {"hits": 4}, "evidence": {"hits": 3}}},
        "best": {"criterion": "bic", "agree": 3, "total": 4, "rho": 0.9}}}}
    found = EXPERIMENTS["selection_study"].extract(data)
    verdicts = {f["claim"]: f["verdict"] for f in found}
    assert verdicts["mixture: bic chooses the planted size 3 on well-separated data"] == "holds"
    assert any("agrees best" in c and "bic" in f["ours"] for c, f in
               zip(verdicts, found, strict=True))
    data["families"]["mixture"]["best"].update(seconds=0.5, evidence_seconds=80.0)
    best = next(f for f in EXPERIMENTS["selection_study"].extract(data)
                if "agrees best" in f["claim"])
    assert best["ours"].endswith("0.5 s per seed (the evidence 80 s)")


def test_seed_rows_are_saved_and_reused_only_for_the_same_settings(example, tmp_path,
                                                                  monkeypatch):
    calls = []

    def fake_run_seed(name, study, level, seed, criteria, settings):
        calls.append((name, level, seed, settings["folds"]))
        return {"seed": seed, "choice": {"bic": 3}, "values": {"bic": [1.0, np.nan]},
                "errors": {}, "seconds": {"bic": 0.5}, "decisive": None}

    monkeypatch.setattr(example, "run_seed", fake_run_seed)
    study = example.STUDIES["mixture"]
    settings = {"folds": 5, "restarts": 3, "nuts": 400,
                "evidence": {"num_particles": 10, "num_repeats": 2}}
    args = (tmp_path, "mixture", study, "few")
    row, reused = example.seed_row(*args, 0, ("bic",), settings)
    assert not reused and row["values"]["bic"] == [1.0, None]  # as JSON keeps it
    assert example.seed_row(*args, 0, ("bic",), settings) == (row, True)
    assert len(calls) == 1
    example.seed_row(*args, 1, ("bic",), settings)  # another seed
    example.seed_row(*args, 0, ("bic",), {**settings, "folds": 3})  # other settings
    example.seed_row(*args, 0, ("bic", "cv"), settings)  # other criteria
    example.seed_row(*args, 0, ("bic",), settings, fresh=True)
    assert len(calls) == 5
    # the rows of other settings did not replace the first one
    assert example.seed_row(*args, 0, ("bic",), settings)[1]
    assert len(calls) == 5 and not list(tmp_path.rglob("*.part"))


def test_saved_only_reports_the_saved_rows_and_computes_nothing(example, tmp_path,
                                                                 monkeypatch):
    calls = []

    def fake_run_seed(name, study, level, seed, criteria, settings):
        calls.append((name, level, seed))
        choice = {c: 2 if seed else 1 for c in criteria}
        return {"seed": seed, "choice": choice, "values": {c: [0.0, 1.0, 0.5] for c in criteria},
                "errors": {}, "seconds": {c: 0.5 for c in criteria}, "decisive": None}

    monkeypatch.setattr(example, "run_seed", fake_run_seed)
    common = ["--families", "clipped", "--output-dir", str(tmp_path)]
    example.main(common + ["--seeds", "2", "--levels", "separated"])
    assert len(calls) == 2
    # a study in progress: 2 of 5 separated seeds, no overlapping one
    data = example.main(common + ["--saved-only", "--seeds", "5", "--levels", "separated",
                                  "overlapping"])
    assert len(calls) == 2                      # nothing computed
    family = data["families"]["clipped"]
    assert family["seeds"] == {"separated": 2} and list(family["summary"]) == ["separated"]
    assert family["summary"]["separated"]["cv"]["hits"] == 1
    assert any("2 seed(s) per level" in line for line in data["report"])
    found = EXPERIMENTS["selection_study"].extract(data)
    assert found[0]["ours"] == "1/2 seeds"
    # no saved row at all: the family is left out, not reported as zeros
    empty = example.main(["--families", "clipped", "--saved-only", "--output-dir",
                          str(tmp_path / "empty")])
    assert empty["families"] == {} and len(calls) == 2
    with pytest.raises(SystemExit):
        example.main(common + ["--saved-only", "--fresh"])
    # a study split over processes: each computes its own seeds, reports all saved ones
    data = example.main(common + ["--seeds", "5", "--levels", "separated", "--only-seeds",
                                  "3", "4", "--fresh"])
    assert sorted(c[2] for c in calls[2:]) == [3, 4]  # seeds 0-1 saved, not recomputed
    assert data["families"]["clipped"]["seeds"] == {"separated": 4}
    for bad in (["--only-seeds", "5"], ["--only-seeds", "-1"]):
        with pytest.raises(SystemExit):
            example.main(common + ["--seeds", "5", *bad])


def test_seeds_text_names_each_level_when_counts_differ(example):
    assert example.seeds_text({"separated": 20, "few": 20}) == "20 seed(s) per level"
    assert example.seeds_text({"separated": 20, "few": 3}) == "seeds: separated 20, few 3"


@pytest.mark.slow  # every family's fits compile: about 3 minutes on 2 cores
def test_quick_run_finds_every_planted_size(example, run_example, tmp_path):
    run_example(example, ["--quick", "--output-dir", str(tmp_path)])
    data = json.loads((tmp_path / "selection_study.json").read_text())
    assert set(data["families"]) == {"mixture", "mcvq", "gvq", "clipped", "ppca"}
    for name, family in data["families"].items():
        separated = family["summary"]["separated"]
        for criterion in family["criteria"]:
            assert separated[criterion]["hits"] == 1, (name, criterion)
        assert (tmp_path / f"selection_study_{name}.png").exists()
    found = EXPERIMENTS["selection_study"].extract(data)
    assert found and all(f["verdict"] == "not checked" for f in found)  # one seed


def _shapes_row(seed, vb, planted, se=0.1, bound_vb=-1.0, bound_3=-2.0, terms=None):
    row = {"seed": seed, "num_examples": 24, "vb_num_vqs": 7, "vb_causes": 5,
           "vb_num_states": [9, 7, 6, 2, 1, 1, 1], "bound": {"vb": bound_vb,
                                                             "planted_start": bound_3},
           "evidence": {"vb": vb, "planted": planted},
           "evidence_se": {"vb": se, "planted": se}, "converged": True, "seconds": 1.0}
    if terms is not None:
        row["one_assignment"] = {"vb": terms[0], "planted": terms[1]}
    return row


def _shapes_finding(verdict):
    found = EXPERIMENTS["selection_study"].extract({
        "settings": {"seeds": 1}, "families": {}, "shapes": {"verdict": verdict}})
    return [f["verdict"] for f in found]


def test_shapes_verdict_counts_decisive_and_reliable_seeds_only(example):
    rows = [_shapes_row(0, -10.0, -12.0, terms=(-10.5, -12.5)),
            _shapes_row(1, -10.0, -10.2),
            _shapes_row(2, -12.0, -10.0, bound_vb=-3.0, terms=(-12.0, -10.1)),
            _shapes_row(3, -12.0, -10.0, terms=(-5.0, -10.0))]  # SIS far below its term
    verdict, lines = example.shapes_verdict(rows)
    assert verdict == {"bound_prefers_vb": 3, "terms_prefer_vb": 2, "reliable": 3,
                       "evidence_prefers_vb": 1, "evidence_prefers_planted": 1, "seeds": 4}
    assert "biased low" in lines[-2] and "biased low" not in lines[-3]
    assert _shapes_finding(verdict) == ["partly"]
    assert _shapes_finding({**verdict, "evidence_prefers_planted": 3}) == ["differs"]
    assert _shapes_finding({**verdict, "evidence_prefers_vb": 3}) == ["holds"]
    assert _shapes_finding({**verdict, "reliable": 2}) == ["not checked"]
