"""The user guide's sections on the VB mixture, PPCA and MCMC with ArviZ run as written."""

import re
from pathlib import Path

import pytest

GUIDE = (Path(__file__).resolve().parent.parent / "docs" / "user_guide.md").read_text()


def _run_section(heading):
    """Run the Python block of the section ``heading``; its namespace."""
    section = GUIDE.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace = {}
    exec(compile(block, f"docs/user_guide.md ({heading})", "exec"), namespace)
    return namespace


@pytest.mark.slow  # about 15 s of compilations
def test_vb_mixture_section_runs():
    vb = _run_section("The variational Bayes mixture")["vb"]
    assert vb.num_components == 3 and vb.converged and vb.monotone


@pytest.mark.slow  # two EM fits and 2000 SVI steps: about 20 s of compilations
def test_ppca_section_runs():
    namespace = _run_section("Probabilistic PCA")
    ml, pca, svi = namespace["ml"], namespace["pca"], namespace["svi"]
    assert ml.converged and ml.noise == pytest.approx(0.1, rel=0.1)
    assert pca.noise == 0.0 and svi.noise == pytest.approx(ml.noise, rel=0.05)


@pytest.mark.slow  # two NUTS chains
def test_mcmc_with_arviz_section_runs():
    namespace = _run_section("MCMC with ArviZ")
    idata = namespace["idata"]
    assert {"posterior", "sample_stats", "log_likelihood", "observed_data"} <= set(
        idata.groups())
    assert namespace["mcmc"].converged
