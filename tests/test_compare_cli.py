"""``ppl-zoo compare gvq`` writes its table, JSON and figure; ``ppl-zoo list`` lists it."""

import argparse
import csv
import json
import re

import pytest

from inference.app.cli import build_parser, main
from inference.app.compare import run_comparison
from inference.app.families import load_families
from inference.app.reproduce import select_experiments
from ppl_models import REGISTRY


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("zoo")
    status = main(["compare", "gvq", "--quick", "--no-progress", "--output-dir", str(out)])
    return status, out


@pytest.mark.slow
def test_compare_gvq_writes_csv_json_and_png(quick_run, capsys):
    status, out = quick_run
    assert status == 0
    rows = list(csv.DictReader(open(out / "gvq_comparison.csv")))
    assert [r["implementation"] for r in rows] == ["ours", "numpyro", "ours", "numpyro"]
    report = json.load(open(out / "gvq_comparison.json"))
    assert report["settings"]["quick"] is True and len(report["rows"]) == 4
    assert (out / "gvq_comparison.png").stat().st_size > 1000
    # Exact search and infer_discrete agree on every example of the shared data.
    association = [r for r in report["rows"] if r["task"] == "association"]
    assert association[1]["agreement_with_exact"] == 1.0
    assert association[0]["objective"] == pytest.approx(association[1]["objective"], rel=1e-5)


def test_list_and_unknown_model(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["MODEL", "PAPER"] and "GENERIC BASELINES" in out
    # Every registered model starts a block, with its family's baselines as import paths
    # (tests/test_baselines_importable.py imports every printed name).
    families = load_families()
    starts = [line.split()[0] for line in lines[1:] if line and not line.startswith(" ")]
    for name, info in REGISTRY.items():
        assert name in starts, name
        for baseline in families[info.family].baselines:
            assert f"inference.{info.family}.baselines.{baseline}" in out, (name, baseline)
    # The model-selection study and its study file are listed too.
    assert "selection_study" in out and "examples/studies/selection.toml" in out
    # The names that compare and reproduce take, spelled one way (with "_").
    for family in families.values():
        for name in [*family.comparisons, *(e.name for e in family.experiments)]:
            assert name in out and "-" not in name, name
    assert main(["compare", "no-such-model", "--no-progress"]) == 2
    with pytest.raises(ValueError, match="model must be one of"):
        run_comparison("no-such-model")


def test_every_sub_command_has_a_description_and_names_take_hyphens(capsys):
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    assert set(commands.choices) == {"compare", "list", "reproduce", "select", "study"}
    for name, sub in commands.choices.items():
        assert sub.description and len(sub.description) > 40, name
    # The hyphen spelling of a name is the same name.
    assert [e.name for e in select_experiments(["gvq-planted"])] == ["gvq_planted"]
    assert main(["compare", "vb-mixture", "--no-progress"]) == 2
    assert "without a comparison of its own" in capsys.readouterr().err


@pytest.mark.parametrize("flags, quick", [([], True), (["--quick"], True), (["--full"], False)])
def test_compare_is_quick_unless_full(monkeypatch, flags, quick):
    """Like reproduce, compare runs at its quick size by default; --quick still parses."""
    from inference.app import compare

    seen = {}

    def fake_run(name, *, rng_key, quick, progress_bar):
        seen["quick"] = quick
        raise ValueError("stub")

    monkeypatch.setattr(compare, "run_comparison", fake_run)
    with pytest.raises(ValueError, match="stub"):
        main(["--no-compilation-cache", "compare", "gvq", "--no-progress", *flags])
    assert seen["quick"] is quick
    for command in (["reproduce"], ["reproduce", "--quick"], ["reproduce", "--full"]):
        assert build_parser().parse_args(command).full is ("--full" in command)


def _parsers(name, parser):
    """``parser`` and every sub-command's parser under it, with their command lines."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(f"{name} {sub_name}", sub)


def test_help_spells_defaults_one_way():
    """Every help text says "(default: X)", never "(default X)": every command and the
    sub-commands under it (``study run | report | status``)."""
    parsers = dict(_parsers("ppl-zoo", build_parser()))
    assert {"ppl-zoo compare", "ppl-zoo study run", "ppl-zoo study report",
            "ppl-zoo study status"} <= set(parsers)
    for name, parser in parsers.items():
        text = parser.format_help()
        assert not re.search(r"\(default [^:]", text), (name, text)
    assert "(default: 1)" in parsers["ppl-zoo study run"].format_help()
    assert "(default: 10)" in parsers["ppl-zoo compare"].format_help()
