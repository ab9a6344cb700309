"""Contract over the model registry: every program runs, samples, and has a noiseless limit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro import handlers
from numpyro.infer.util import log_density

from inference.program.handlers import noiseless, observation_noise
from ppl_models import REGISTRY

# Per model (from its ModelInfo.contract): generator arguments, the observed data in what
# the generator returns, and the program's keyword arguments for fixed parameters and for
# sampling unobserved.
SETTINGS = {name: info.contract for name, info in REGISTRY.items()}


def test_every_registered_model_has_contract_settings():
    missing = sorted(name for name, settings in SETTINGS.items() if not settings)
    assert not missing, f"give ModelInfo(contract=...) to the models {missing}"


@pytest.mark.parametrize("name", sorted(REGISTRY))
@pytest.mark.slow
def test_program_contract(name):
    info = REGISTRY[name]
    settings = SETTINGS[name]
    data = info.generate(jax.random.key(0), **settings["generate"])
    x = settings["data"](data)
    assert np.all(np.isfinite(np.asarray(x)))
    kwargs = settings["fixed"](data)
    tr = handlers.trace(handlers.seed(info.model, 1)).get_trace(x, **kwargs)
    assert tr[info.observed_site]["is_observed"]
    for site in info.latent_sites:
        if site in kwargs or site.upper() in kwargs:
            continue
        if site in tr:
            assert tr[site]["type"] == "sample"
    latent = {k: v["value"] for k, v in tr.items()
              if v["type"] == "sample" and not v["is_observed"]}
    logp, _ = log_density(info.model, (x,), kwargs, latent)
    assert np.isfinite(float(logp))
    # Lower noise concentrates the likelihood; the noiseless limit is finite and <= 0.
    logp_small, _ = log_density(observation_noise(info.model, sigma=1e-3), (x,), kwargs, latent)
    energy, _ = log_density(noiseless(info.model), (x,), kwargs, latent)
    assert np.isfinite(float(logp_small)) and float(energy) <= 0.0
    # Sampling the deterministic model under noiseless returns the Gaussian mean.
    deterministic = handlers.seed(noiseless(info.model, sites=info.observed_site), 2)
    det_tr = handlers.trace(deterministic).get_trace(None, **kwargs,
                                                     **settings["unobserved"](data))
    site = det_tr[info.observed_site]
    np.testing.assert_allclose(site["value"], jnp.broadcast_to(site["fn"].mean,
                                                               site["value"].shape))
