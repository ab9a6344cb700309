"""examples/em_your_program.py at its quick size: fit_em's E-steps against NumPyro's SVI
and NUTS on a mixture of regressions and on a program with a categorical and binary causes."""

import json

import pytest


@pytest.mark.slow  # about a minute and a half: every E-step, SVI and NUTS on two programs
def test_quick_run(load_example, tmp_path, capsys):
    example = load_example("em_your_program")
    result = example.main(["--quick", "--output-dir", str(tmp_path), "--json"])
    out = capsys.readouterr().out
    assert "fit_em against NumPyro's SVI and NUTS" in out and "Findings:" in out
    assert (tmp_path / "em_your_program.png").stat().st_size > 5000
    record = json.loads((tmp_path / "em_your_program.json").read_text())
    assert record["findings"] == result["findings"]
    assert all(result["findings"].values()), result["findings"]
    rows = {(r["program"], r["method"]): r for r in result["rows"]}
    methods = ["planted parameters", *(label for label, _ in example.EM_ROWS),
               "SVI, TraceEnum_ELBO", "NUTS", "NUTS from soft EM"]
    for program in ("regressions", "causes"):
        assert [r["method"] for r in result["rows"] if r["program"] == program] == methods
        soft = rows[program, "soft EM"]
        assert (soft["objective_name"], soft["direction"]) == ("log_likelihood", "max")
        mean_field = rows[program, "mean-field EM"]
        assert (mean_field["objective_name"], mean_field["direction"]) == ("free_energy", "min")
        assert rows[program, "hard EM"]["objective_name"] == "mean_energy"
        # Maximum likelihood is above the planted value by about half the number of
        # parameters (the gap is a chi-squared with that many degrees of freedom, halved).
        gap = soft["log_likelihood"] - rows[program, "planted parameters"]["log_likelihood"]
        assert 0.0 < gap < 2 * example.NUM_PARAMETERS[program]
