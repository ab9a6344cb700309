"""The ArviZ range that pyproject.toml declares is the range the code is written for.

The MCMC baselines build ``arviz.InferenceData`` by ``arviz.from_numpyro`` (plus
``dict_to_dataset`` for the log-likelihood group) or ``arviz.from_dict`` (the mixture's
old route), and the docstrings and the user guide summarise it with ``arviz.summary``:
the 0.x interface, which ArviZ 1.0 changed. The installed ArviZ must lie in the
declared range, and the 0.x calls the code makes must behave as it expects: groups by
name, a round trip through ``from_dict`` and back, and ``summary`` as a pandas table
with ``r_hat``.
"""

import re
import tomllib
from pathlib import Path

import arviz as az
import numpy as np
from packaging.specifiers import SpecifierSet
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def _declared():
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    spec = next(d for d in dependencies if re.match(r"arviz\b", d))
    return SpecifierSet(spec[len("arviz"):])


def test_declared_range_is_bounded_and_holds_the_installed_version():
    declared = _declared()
    assert Version(az.__version__) in declared, (az.__version__, str(declared))
    assert Version("0.18.0") in declared and Version("1.0.0") not in declared


def test_the_calls_the_code_makes_behave_as_it_expects():
    rng = np.random.default_rng(0)
    posterior = {"mu": rng.normal(size=(2, 50, 3)), "sigma": np.exp(rng.normal(size=(2, 50)))}
    log_likelihood = {"x": rng.normal(size=(2, 50, 7))}
    idata = az.from_dict(posterior=posterior, log_likelihood=log_likelihood,
                         observed_data={"x": rng.normal(size=7)},
                         dims={"mu": ["dim"], "x": ["example"]})
    assert {"posterior", "log_likelihood", "observed_data"} <= set(idata.groups())
    # The round trip: the arrays come back as given, chains and draws first.
    np.testing.assert_array_equal(idata.posterior["mu"].values, posterior["mu"])
    np.testing.assert_array_equal(idata.log_likelihood["x"].values, log_likelihood["x"])
    assert idata.posterior["mu"].dims == ("chain", "draw", "dim")
    # dict_to_dataset adds a group, as to_inference_data does for the log-likelihood.
    idata.add_groups(extra=az.dict_to_dataset({"y": rng.normal(size=(2, 50))}))
    assert "extra" in idata.groups()
    table = az.summary(idata, var_names=["mu", "sigma"])
    assert table.shape[0] == 4 and "r_hat" in table.columns
    assert list(table.index) == ["mu[0]", "mu[1]", "mu[2]", "sigma"]
