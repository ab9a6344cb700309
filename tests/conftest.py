"""Shared fixtures: fixed keys and small planted GVQ data sets (module-scoped)."""

import jax
import pytest

from ppl_models import gvq


@pytest.fixture(scope="session")
def planted_small():
    """40 examples, 5 features, dim 8, noise 0.1 (sec. 4.3 generator, dense F ~ N(2, 1))."""
    return gvq.generate_planted(jax.random.key(11), 40, 5, 8, noise_scale=0.1)
