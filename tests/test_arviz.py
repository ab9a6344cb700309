"""arviz wherever NumPyro samples: every MCMC baseline converts by ``arviz.from_numpyro``.

Each MCMC baseline (GVQ, clipped Gaussian, mixture, PPCA; MCVQ's PSIS-LOO in the slow
run) runs on a tiny problem, with the data and settings of its docstring example so
that a full run compiles each chain once, and its ``to_inference_data()`` must hold
the groups posterior, sample_stats (with ``diverging`` and ``energy``), log_likelihood
and observed_data, every dimension named; ``arviz.summary``, ``arviz.loo`` (an
``ELPDData``) and ``arviz.plot_trace`` run on it. ``mixture_loo`` returns arviz's
``ELPDData``, and ``model_selection``'s comparison table is ``arviz.compare``'s. A
result saved and loaded converts alike; one saved before the draws were kept loads,
and converts by the old route (mixture) or says why it cannot.
"""

import json
import re
import warnings
import zipfile

import arviz as az
import jax
import matplotlib
import numpy as np
import pandas as pd
import pytest

import inference
from inference.clipped.baselines import fit_clipped_mcmc
from inference.engine import persistence
from inference.engine.inference_data import NUTSDraws, pointwise_log_likelihood
from inference.gvq.baselines import fit_gvq_mcmc
from inference.mixture.baselines import MixtureLOO, fit_mixture_mcmc, mixture_loo
from inference.ppca.baselines import fit_ppca_mcmc
from ppl_models import gvq, mixture, ppca
from ppl_models.clipped_gaussian import generate as generate_clipped
from ppl_models.diagnostics import ConvergenceWarning

matplotlib.use("Agg")

GROUPS = ["log_likelihood", "observed_data", "posterior", "sample_stats"]
MIXTURE = dict(covariance="diag", num_warmup=200, num_samples=500, num_chains=2)


@pytest.fixture(scope="module")
def gvq_fit():
    data = gvq.generate_planted(jax.random.key(0), 16, 2, 4, noise_scale=0.3)
    return fit_gvq_mcmc(data.x, 2, rng_key=jax.random.key(1), noise=0.3,
                        init_features=data.features, num_warmup=50, num_samples=50,
                        num_chains=2)


@pytest.fixture(scope="module")
def clipped_fit():
    data = generate_clipped(jax.random.key(0), num_examples=20, num_visible=4, num_hidden=1)
    with warnings.catch_warnings():  # 20 + 20 iterations: R-hat may exceed 1.1
        warnings.simplefilter("ignore", ConvergenceWarning)
        return fit_clipped_mcmc(data.s, 1, rng_key=jax.random.key(1), num_warmup=20,
                                num_samples=20, num_chains=2)


@pytest.fixture(scope="module")
def mixture_data():
    return mixture.generate(jax.random.key(2), 100, 2, 2, separation=6.0)


@pytest.fixture(scope="module")
def mixture_fit(mixture_data):
    return fit_mixture_mcmc(mixture_data.x, 2, rng_key=jax.random.key(1), **MIXTURE)


@pytest.fixture(scope="module")
def ppca_fit():
    data = ppca.generate(jax.random.key(0), 100, 4, 1, noise=0.3)
    return fit_ppca_mcmc(data.x, 1, rng_key=jax.random.key(1), num_warmup=100,
                         num_samples=100)


def check_inference_data(idata, posterior: dict, observed: str, observed_dims: tuple,
                         num_chains: int, num_draws: int, plot: list):
    """The groups, their shapes and dimension names; arviz's summary, loo and trace plot."""
    assert sorted(idata.groups()) == GROUPS
    for name, dims in posterior.items():
        assert idata.posterior[name].dims == ("chain", "draw", *dims), name
    stats = idata.sample_stats
    assert {"diverging", "energy", "lp", "n_steps", "acceptance_rate", "step_size"} <= set(
        stats.data_vars)
    assert stats["diverging"].dtype == bool and stats["energy"].shape == (num_chains, num_draws)
    assert np.all(np.isfinite(stats["energy"].values))
    # arviz's lp is minus NumPyro's potential energy; the Hamiltonian adds the kinetic energy.
    assert np.all(stats["energy"].values >= -stats["lp"].values - 1e-3)
    assert idata.observed_data[observed].dims == observed_dims
    assert idata.log_likelihood[observed].dims == ("chain", "draw", observed_dims[0])
    assert np.all(np.isfinite(idata.log_likelihood[observed].values))
    for group in GROUPS:
        for var in idata[group].data_vars.values():
            assert not any(re.search(r"_dim_\d+$", d) for d in var.dims), (group, var.dims)
    with warnings.catch_warnings():  # few draws: Pareto k and R-hat notes
        warnings.simplefilter("ignore")
        summary = az.summary(idata, var_names=plot)
        loo = az.loo(idata, pointwise=True)
    assert isinstance(summary, pd.DataFrame) and len(summary) > 0
    assert isinstance(loo, az.ELPDData) and loo.loo_i.shape == (idata.observed_data.sizes[
        observed_dims[0]],) and np.isfinite(float(loo.elpd_loo))
    import matplotlib.pyplot as plt
    try:
        with warnings.catch_warnings():  # arviz's use of a deprecated matplotlib call
            warnings.simplefilter("ignore", matplotlib.MatplotlibDeprecationWarning)
            axes = az.plot_trace(idata, var_names=plot, compact=True)
        assert axes.shape[0] == len(plot)
    finally:
        plt.close("all")


def test_gvq_mcmc(gvq_fit):
    idata = gvq_fit.to_inference_data()
    check_inference_data(idata, {"F": ("feature", "dim")}, "x", ("example", "dim"), 2, 50,
                         ["F"])
    # The posterior is the relabelled samples of the result.
    np.testing.assert_array_equal(idata.posterior["F"].values, np.asarray(gvq_fit.samples))


@pytest.mark.slow  # a chain of its own; the others share theirs with further tests
def test_clipped_mcmc(clipped_fit):
    """The default run converts this baseline's result in the Examples of
    fit_clipped_mcmc (inference/clipped/baselines_mcmc.py: groups, dimension names,
    arviz.summary) and checks the full conversion of the other three baselines here."""
    idata = clipped_fit.to_inference_data()
    check_inference_data(idata, {"W": ("unit", "hidden"), "xi": ("unit",),
                                 "y": ("example", "hidden")}, "s", ("example", "unit"), 2, 20,
                         ["xi"])
    np.testing.assert_array_equal(idata.posterior["W"].values,
                                  np.asarray(clipped_fit.weight_samples))


@pytest.mark.slow  # the mixture's chain (~9 s); its conversion is in fit_mixture_mcmc's Examples
def test_mixture_mcmc(mixture_fit, mixture_data):
    idata = mixture_fit.to_inference_data()
    check_inference_data(idata, {"alpha": ("component",), "m": ("component", "dim"),
                                 "sd": ("component", "dim")}, "x", ("example", "dim"), 2, 500,
                         ["alpha", "m"])
    np.testing.assert_array_equal(idata.log_likelihood["x"].values,
                                  mixture_fit.pointwise_log_likelihood)
    # The engine's enumeration of y gives the mixture's own log p(x_i | theta).
    generic = pointwise_log_likelihood(mixture_fit.mcmc)["x"]
    np.testing.assert_allclose(generic, mixture_fit.pointwise_log_likelihood, rtol=1e-5,
                               atol=1e-5)
    # The old signature: x is the data the result was fitted to.
    again = mixture_fit.to_inference_data(mixture_data.x)
    np.testing.assert_array_equal(again.observed_data["x"].values, np.asarray(mixture_data.x))
    with pytest.raises(ValueError, match="not the data"):
        mixture_fit.to_inference_data(mixture_data.x + 1.0)


def test_ppca_mcmc(ppca_fit):
    idata = ppca_fit.to_inference_data()
    check_inference_data(idata, {"W": ("component", "dim"), "mu": ("dim",), "sigma": ()}, "x",
                         ("example", "dim"), 2, 100, ["sigma", "mu"])
    np.testing.assert_allclose(idata.posterior["sigma"].values, ppca_fit.noise_samples)


@pytest.mark.slow  # the mixture's chain (~9 s); its conversion is in fit_mixture_mcmc's Examples
def test_mixture_loo_returns_arviz_elpd_data(mixture_fit, mixture_data):
    loo = mixture_loo(mixture_data.x, 2, rng_key=jax.random.key(1), **MIXTURE)
    assert isinstance(loo, az.ELPDData) and loo.loo_i.shape == (100,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        direct = az.loo(mixture_fit.to_inference_data(), pointwise=True)
    assert float(loo.elpd_loo) == pytest.approx(float(direct.elpd_loo), rel=1e-6)
    np.testing.assert_allclose(loo.pareto_k, direct.pareto_k, rtol=1e-6)
    old = MixtureLOO.from_elpd(loo)
    assert old.elpd_loo == float(loo.elpd_loo) and old.pareto_k_max == float(loo.pareto_k.max())


def test_a_saved_result_loads_and_converts_alike(ppca_fit, tmp_path):
    again = inference.load(ppca_fit.save(tmp_path / "ppca.npz"))
    assert isinstance(again.mcmc, NUTSDraws) and again.mcmc.program == "ppl_models.ppca:model"
    fresh, loaded = ppca_fit.to_inference_data(), again.to_inference_data()
    for group in GROUPS:
        for name in fresh[group].data_vars:
            np.testing.assert_array_equal(loaded[group][name].values, fresh[group][name].values)


def _without_draws(path):
    """Rewrite a saved result as a file of the version before ``mcmc`` was kept."""
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    metadata = json.loads(members["metadata.json"])
    metadata.pop("metadata_sha256")
    fields = metadata["structure"]["fields"]
    metadata["structure"]["fields"] = [pair for pair in fields if pair[0] != "mcmc"]
    body = json.dumps(metadata, sort_keys=True, allow_nan=False)
    metadata["metadata_sha256"] = persistence._digest(body.encode())
    members["metadata.json"] = json.dumps(metadata).encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


@pytest.mark.slow  # the mixture's chain (~9 s); its conversion is in fit_mixture_mcmc's Examples
def test_a_result_saved_before_the_draws_were_kept(gvq_fit, mixture_fit, tmp_path):
    old = inference.load(_without_draws(gvq_fit.save(tmp_path / "gvq.npz")))
    assert old.mcmc is None
    np.testing.assert_array_equal(np.asarray(old.samples), np.asarray(gvq_fit.samples))
    with pytest.raises(ValueError, match="no draws record"):
        old.to_inference_data()
    # The mixture's old route still converts: posterior and log_likelihood, no sample_stats.
    old = inference.load(_without_draws(mixture_fit.save(tmp_path / "mixture.npz")))
    assert old.mcmc is None
    assert sorted(old.to_inference_data().groups()) == ["log_likelihood", "posterior"]


def _program_of_my_own(x=None, **kwargs):
    return gvq.model(x, **kwargs)


@pytest.mark.slow  # a chain of its own program: one more compilation
def test_a_program_without_a_name_is_passed_to_the_conversion():
    data = gvq.generate_planted(jax.random.key(0), 16, 2, 4, noise_scale=0.3)
    local = jax.tree_util.Partial(_program_of_my_own)  # no importable name
    result = fit_gvq_mcmc(data.x, 2, rng_key=jax.random.key(1), noise=0.3, model=local,
                          init_features=data.features, num_warmup=50, num_samples=50,
                          num_chains=2)
    assert result.mcmc.program == ""
    with pytest.raises(ValueError, match="pass model="):
        result.to_inference_data()
    assert sorted(result.to_inference_data(model=local).groups()) == GROUPS


@pytest.mark.slow  # two chains of their own (k = 1 and k = 2)
def test_model_selection_table_is_arviz_compare(monkeypatch):
    from inference.mixture.scorer import MixtureScorer

    data = mixture.generate(jax.random.key(3), 60, 2, 2, separation=6.0)
    converted = {}
    loo = MixtureScorer.loo

    def keep(self, k, *args):
        idata, extra = loo(self, k, *args)
        converted[str(k)] = idata
        return idata, extra

    monkeypatch.setattr(MixtureScorer, "loo", keep)
    result = model_selection_loo(data.x)
    assert sorted(converted) == ["1", "2"]
    assert all(sorted(idata.groups()) == GROUPS for idata in converted.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = az.compare(converted, ic="loo")
    pd.testing.assert_frame_equal(result.compare_table, expected)
    assert result.compare_table is result.arviz_compare
    assert list(expected.columns[:7]) == ["rank", "elpd_loo", "p_loo", "elpd_diff", "weight",
                                          "se", "dse"]
    np.testing.assert_allclose(expected.loc["2", "elpd_loo"] / 60, result.values["loo"][1],
                               rtol=1e-6)


def model_selection_loo(x):
    return inference.model_selection(x, [1, 2], model="mixture", covariance="diag",
                                     criteria=("loo",), rng_key=jax.random.key(4),
                                     num_warmup=100, num_samples=100)


@pytest.mark.slow  # MCVQ's NUTS chain with every s_k enumerated
def test_mcvq_loo_inference_data():
    from inference.mcvq.selection import fit_em, loo_inference_data
    from ppl_models import mcvq

    data = mcvq.generate(jax.random.key(4), num_examples=30, dim=6, num_vqs=2, num_states=2)
    x, mask = np.asarray(data.x), np.ones(data.x.shape, bool)
    fit = fit_em(x, mask, 2, 2, jax.random.key(1), 1, {})
    idata, _ = loo_inference_data(fit, x, mask, jax.random.key(2), num_warmup=50,
                                  num_samples=50, progress_bar=False)
    check_inference_data(idata, {"mu": ("dim", "vq", "state"), "tau": ("dim", "vq", "state")},
                         "x", ("example", "dim"), 1, 50, ["tau"])
    assert idata.observed_data["r"].dims == ("example", "dim")
