"""Custom inference for the model zoo: handlers, association, EM, and comparisons.

The algorithms read the NumPyro programs of :mod:`ppl_models` through effect
handlers (:mod:`inference.program.handlers`) and traces
(:mod:`inference.program.energy`), and run through one engine
(:mod:`inference.engine`). Each model family is a subpackage with a plug-in
(``inference/<family>/plugin.py``) that declares its fits, results, NumPyro baselines,
comparisons and experiments; the fits and result classes of every registered family
are importable from here.
"""

from inference.app.families import load_families
from inference.app.selection import ModelSelectionResult, model_selection
from inference.association.generic import numpyro_map_states
from inference.association.map_em import MapEMResult
from inference.association.map_states import MapStatesResult, map_states
from inference.em import EMResult, fit_em
from inference.em.map_em import fit_map_em
from inference.engine import persistence
from inference.engine.compilation_cache import enable_compilation_cache
from inference.engine.persistence import PersistenceError, load
from inference.engine.streaming import BatchSource
from inference.program.energy import QuadraticEnergy, check_quadratic, quadratic_energy
from inference.program.handlers import noiseless, observation_noise
from ppl_models import __version__ as __version__

__all__ = [
    "BatchSource",
    "EMResult",
    "MapEMResult",
    "MapStatesResult",
    "ModelSelectionResult",
    "PersistenceError",
    "QuadraticEnergy",
    "check_quadratic",
    "enable_compilation_cache",
    "fit_em",
    "fit_map_em",
    "load",
    "map_states",
    "model_selection",
    "noiseless",
    "numpyro_map_states",
    "observation_noise",
    "persistence",
    "quadratic_energy",
]

# Every family's fits and result classes, from its plug-in.
for _family in load_families().values():
    for _name, _value in {**_family.fits, **{cls.__name__: cls for cls in _family.results}
                          }.items():
        globals()[_name] = _value
        __all__.append(_name)
    persistence.attach_save_methods(_family.results)
persistence.attach_save_methods((ModelSelectionResult, EMResult, MapEMResult,
                                  MapStatesResult))
__all__ = sorted(set(__all__))
del _family, _name, _value
