"""The overcomplete-GVQ example (``examples/overcomplete_gvq.py``): EM with tabu search
against BR+MF on image patches, and against exact search where n allows.

The example runs once with ``--quick`` (about 45 s on 2 busy CPU cores) into a
temporary folder; two fast tests check the patches and the command line's help.
"""

import json

import numpy as np
import pytest

pytest.importorskip("sklearn")


@pytest.fixture(scope="module")
def example(load_example):
    return load_example("overcomplete_gvq")


@pytest.fixture(scope="module")
def quick_run(example, run_example, tmp_path_factory):
    out = tmp_path_factory.mktemp("overcomplete_gvq")
    return out, run_example(example, ["--quick", "--output-dir", str(out), "--seed", "0"])


def test_patches_are_centred_and_scaled(example):
    x, scale = example.load_patches(np.random.default_rng(0), 101, 2, 4)
    assert x.shape == (101, 8) and x.dtype == np.float32 and scale > 0
    np.testing.assert_allclose(x.mean(axis=1), 0.0, atol=1e-5)
    assert np.mean(np.square(x)) == pytest.approx(1.0, rel=1e-5)  # mean ||x||^2 = dim


def test_help_prints_the_docstring(example, capsys):
    with pytest.raises(SystemExit) as done:
        example.main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "Tabu search -- Part I" in out and "--quick" in out and "--output-dir" in out


@pytest.mark.slow
def test_files_written(quick_run):
    out, results = quick_run
    for name in ("overcomplete_gvq_features.png", "overcomplete_gvq.json"):
        path = out / name
        assert path.exists() and path.stat().st_size > 1000, name
    record = json.loads((out / "overcomplete_gvq.json").read_text())
    assert np.asarray(record["main"]["features"]["tabu"]).shape == (32, 16)
    assert record["main"]["table"]["tabu"]["tabu"] == pytest.approx(
        results["main"]["table"]["tabu"]["tabu"])
    assert record["conclusions"] == results["conclusions"]
    assert "exact search: not feasible at n = 32" in results["printed"]


@pytest.mark.slow
def test_tabu_beats_brmf_from_the_same_start(quick_run):
    _, results = quick_run
    main = results["main"]
    fits, table = main["fits"], main["table"]
    assert main["start"].shape == (32, 16)
    # Each run's final features associated with its own method, and the fits' own errors.
    assert table["tabu"]["tabu"] <= table["br+mf"]["br+mf"]
    assert fits["tabu"]["fit_error"] <= fits["br+mf"]["fit_error"]
    # The split of br+mf's gap adds up.
    split = main["split"]
    assert split["association"] + split["features"] == pytest.approx(split["gap"])


@pytest.mark.slow
def test_tabu_matches_exact_where_exact_is_feasible(quick_run):
    _, results = quick_run
    small = results["small"]
    errors, fits = small["errors"], small["fits"]
    assert errors["tabu"] == pytest.approx(errors["exact"], rel=1e-4)
    assert fits["tabu"]["fit_error"] == pytest.approx(fits["exact"]["fit_error"], rel=1e-4)
    assert small["check"]["tabu"]["tabu_optimal"] == 1.0
    assert errors["br+mf"] >= errors["exact"] * (1 - 1e-4)
