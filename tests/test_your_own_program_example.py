"""examples/your_own_program.py at its quick size: the table, the learning and the figure."""

import pytest


@pytest.mark.slow
def test_quick_run(load_example, tmp_path, capsys):
    example = load_example("your_own_program")
    result = example.main(["--quick", "--output-dir", str(tmp_path), "--json"])
    out = capsys.readouterr().out
    assert "MAP states with the planted parameters" in out and "fit_map_em" in out
    assert (tmp_path / "your_own_program.png").exists()
    assert (tmp_path / "your_own_program.json").exists()
    findings = result["findings"]
    assert findings["numpyro_enumeration_equals_exact"]
    assert findings["no_method_below_exact"]
    assert findings["offset_ising_learned_within_5_percent"]
    assert findings["fit_gvq_learns_offset_variant_within_5_percent"]
    rows = {(r["variant"], r["method"]): r for r in result["association"]}
    # The non-quadratic program: exact and gibbs run, the quadratic methods say why not.
    assert "error" not in rows["sigmoid_layer", "gibbs"]
    assert "quadratic" in rows["sigmoid_layer", "bp"]["error"]
    # The coupled prior: no directed graph for dbr.
    assert "couples no two units" in rows["offset_ising", "dbr"]["error"]
