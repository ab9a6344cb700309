"""``ppl-zoo select FAMILY --data FILE``: model selection on the user's own data files."""

import csv
import json

import jax
import numpy as np
import pytest

from inference.app.cli import build_parser, main
from inference.app.select_command import parse_candidates, plot_selection, read_data
from inference.app.selection_result import ModelSelectionResult
from ppl_models import mixture

#: Cheap settings: two folds, one start per fit (every run shares the compiled fits).
FAST = ["--criteria", "bic", "cv", "--folds", "2", "--restarts", "1", "--no-progress"]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Three well-separated planted clusters in 2-D, as CSV (with and without a header)
    and as .npy."""
    folder = tmp_path_factory.mktemp("select-data")
    data = mixture.generate(jax.random.key(0), 300, 3, 2, separation=8.0)
    x = np.asarray(data.x, dtype=np.float64)
    paths = {"header": folder / "clusters.csv", "plain": folder / "plain.csv",
             "npy": folder / "clusters.npy"}
    np.savetxt(paths["header"], x, delimiter=",", header="height,width", comments="")
    np.savetxt(paths["plain"], x, delimiter=",")
    np.save(paths["npy"], x)
    return x, paths


def _select(path, out, *extra):
    return main(["select", "mixture", "--data", str(path), "--candidates", "2", "3", "4",
                 *FAST, "--output-dir", str(out), *extra])


@pytest.fixture(scope="module")
def header_run(planted, tmp_path_factory):
    out = tmp_path_factory.mktemp("select-out")
    return _select(planted[1]["header"], out), out


def test_csv_with_header_picks_the_planted_k_and_writes_files(header_run, planted, capsys):
    status, out = header_run
    assert status == 0
    report = json.loads((out / "selection-mixture.json").read_text())
    assert report["choices"]["bic"] == "3"
    assert report["family"] == "mixture" and report["label"] == "k"
    assert report["candidates"] == [2, 3, 4]
    assert (report["num_examples"], report["dim"], report["seed"]) == (300, 2, 0)
    assert report["data"] == str(planted[1]["header"])
    assert report["columns"] == ["height", "width"]
    assert set(report["choices"]) == {"bic", "cv"}
    rows = list(csv.DictReader(open(out / "selection-mixture.csv")))
    assert [r["candidate"] for r in rows] == ["2", "3", "4"]
    assert set(rows[0]) == {"candidate", "cv", "cv_se", "bic"}
    assert float(rows[1]["bic"]) == pytest.approx(report["criteria"]["bic"]["values"][1])
    png = (out / "selection-mixture.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000


def test_csv_without_header_and_npy_give_the_same_choice(planted, tmp_path, capsys):
    for kind in ("plain", "npy"):
        out = tmp_path / kind
        assert _select(planted[1][kind], out) == 0, kind
        text = capsys.readouterr().out
        assert "wrote CSV" in text and "wrote JSON" in text and "wrote PNG" in text
        report = json.loads((out / "selection-mixture.json").read_text())
        assert report["choices"]["bic"] == "3", kind
        assert report["columns"] is None and report["num_examples"] == 300


def test_read_data_matches_the_written_array(planted):
    x, paths = planted
    for kind, path in paths.items():
        values, header = read_data(path)
        assert values.shape == (300, 2), kind
        np.testing.assert_allclose(values, x, rtol=1e-12)
        assert header == (["height", "width"] if kind == "header" else None)


def _error(capsys, argv):
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 2
    assert captured.err.startswith("ppl-zoo select: "), captured.err
    assert "Traceback" not in captured.err
    return captured.err


def test_a_non_numeric_cell_names_its_column_and_line(tmp_path, capsys):
    path = tmp_path / "bad.csv"
    path.write_text("height,width\n1.0,2.0\n3.0,abc\n5.0,6.0\n")
    err = _error(capsys, ["select", "mixture", "--data", str(path), "--no-progress",
                          "--output-dir", str(tmp_path / "out")])
    assert "'width'" in err and "line 3" in err and "'abc'" in err
    assert not (tmp_path / "out").exists()
    # Without a header the column is named by its 1-based number.
    path.write_text("1.0,2.0,3.0\n4.0,5.0,x7\n")
    err = _error(capsys, ["select", "mixture", "--data", str(path)])
    assert "column 3" in err and "line 2" in err and "'x7'" in err


@pytest.mark.parametrize("text, expected", [
    ("", "empty"),
    ("\n\n", "empty"),
    ("a,b\n", "no rows of numbers"),
    ("1,2\n3\n", "line 2 has 1 columns"),
    ("a,b\n1,2\n3,4,5\n", "line 3 has 3 columns"),
    ("1,2\nnan,3\n", "not a finite number"),
])
def test_malformed_csv_files(tmp_path, capsys, text, expected):
    path = tmp_path / "data.csv"
    path.write_text(text)
    assert expected in _error(capsys, ["select", "mixture", "--data", str(path)])


def test_missing_files_other_extensions_and_bad_arrays(tmp_path, capsys):
    missing = tmp_path / "nowhere.csv"
    err = _error(capsys, ["select", "mixture", "--data", str(missing)])
    assert str(missing) in err and "no such file" in err
    err = _error(capsys, ["select", "mixture", "--data", str(tmp_path / "data.xlsx")])
    assert ".csv" in err and ".npy" in err and "data.xlsx" in err
    flat = tmp_path / "flat.npy"
    np.save(flat, np.arange(10.0))
    err = _error(capsys, ["select", "mixture", "--data", str(flat)])
    assert "2-D" in err and "(10,)" in err and "reshape" in err
    words = tmp_path / "words.npy"
    np.save(words, np.array([["a", "b"]]))
    assert "numeric" in _error(capsys, ["select", "mixture", "--data", str(words)])


def test_candidates_the_data_do_not_allow(planted, tmp_path, capsys):
    err = _error(capsys, ["select", "mixture", "--data", str(planted[1]["npy"]),
                          "--candidates", "2", "500", "--no-progress",
                          "--output-dir", str(tmp_path / "out")])
    assert "candidates" in err and "500" in err and "300" in err
    assert not (tmp_path / "out").exists()
    err = _error(capsys, ["select", "mixture", "--data", str(planted[1]["npy"]),
                          "--candidates", "2", "two"])
    assert "--candidates" in err and "'two'" in err


def test_unknown_family_criterion_and_malformed_pairs(planted, capsys):
    data = str(planted[1]["npy"])
    err = _error(capsys, ["select", "no-such-family", "--data", data])
    assert "'no-such-family'" in err and "'mixture'" in err and "'mcvq'" in err
    err = _error(capsys, ["select", "mixture", "--data", data, "--criteria", "nope"])
    assert "criteria" in err and "nope" in err
    for word in ("2;3", "3", "2,3,4", "a,b"):
        err = _error(capsys, ["select", "mcvq", "--data", data, "--candidates", "2,2", word])
        assert "--candidates" in err and repr(word) in err and "K,J" in err, word
    # An integer family does not take pairs.
    err = _error(capsys, ["select", "mixture", "--data", data, "--candidates", "2,3"])
    assert "--candidates" in err and "'2,3'" in err


def test_parse_candidates_forms():
    assert parse_candidates(None, "k") is None
    assert parse_candidates(["1", "2", "10"], "k") == (1, 2, 10)
    assert parse_candidates(["2,3", "3x3", "(4, 2)", "5X1"], "(K, J)") == (
        (2, 3), (3, 3), (4, 2), (5, 1))
    with pytest.raises(ValueError, match="--candidates"):
        parse_candidates(["2.5"], "k")


def test_figure_of_pair_candidates_with_missing_values(tmp_path):
    # A hand-made result: pairs on the x axis, a criterion with standard errors and one
    # that was not computed for a candidate.
    cands = ((1, 2), (2, 2), (2, 3))
    result = ModelSelectionResult(
        "mcvq", cands, {"cv": (-3.0, -2.5, -2.6), "loo": (-3.1, float("nan"), -2.7)},
        {"cv": (2, 2), "loo": (2, 3)}, {"cv": (0.1, 0.1, 0.2), "loo": (0.1, float("nan"), 0.1)},
        (None,) * 3, None, None, {}, (), {}, "(K, J)")
    path = tmp_path / "pairs.png"
    plot_selection(result, path, title="pairs")
    assert path.read_bytes().startswith(b"\x89PNG")


def test_parser_lists_the_command():
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    assert "select" in commands.choices
    help_text = commands.choices["select"].format_help()
    for option in ("--data", "--candidates", "--criteria", "--output-dir", "--seed",
                   "--folds", "--restarts", "--no-progress", "examples:"):
        assert option in help_text, option
    with pytest.raises(SystemExit) as exit_info:  # --data is required
        build_parser().parse_args(["select", "mixture"])
    assert exit_info.value.code == 2

