"""Files saved by version 0.1 (a flat ``inference`` package) load in this version.

``tests/data/saved_0_1`` holds results written by ``result.save`` at version 0.1.0,
before the package was split into subpackages and its vocabulary unified. Their
metadata names the old modules (``inference.gvq``, ``inference.mixture_online``,
...); :func:`inference.load` maps those to where the classes live now and rebuilds
the current class.
"""

from pathlib import Path

import numpy as np
import pytest

import inference
from inference import AssociationResult, GVQResult, MixtureResult, VBMixtureResult
from inference.mixture.online import OnlineResult

SAVED = Path(__file__).resolve().parent.parent / "data" / "saved_0_1"

CASES = {
    "association.npz": AssociationResult,
    "gvq.npz": GVQResult,
    "mixture.npz": MixtureResult,
    "online.npz": OnlineResult,
    "vb_mixture.npz": VBMixtureResult,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_file_saved_by_version_0_1_loads_as_the_current_class(name):
    result = inference.load(SAVED / name)
    assert type(result) is CASES[name]
    arrays = [v for v in result if isinstance(v, np.ndarray) or hasattr(v, "shape")]
    assert arrays and all(np.all(np.isfinite(np.asarray(a, float))) for a in arrays
                          if np.asarray(a).dtype.kind in "fiub")


def test_every_saved_file_is_covered():
    assert sorted(p.name for p in SAVED.glob("*.npz")) == sorted(CASES)
