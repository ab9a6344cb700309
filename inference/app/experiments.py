"""Every paper experiment that ``ppl-zoo reproduce`` runs, from the families' plug-ins.

Each family declares its experiments (:class:`inference.engine.reporting.Experiment`:
the paper and section, the claim in one line, the paper's number, the example script
with its quick and full arguments, the JSON it writes, and ``extract(data) -> list of
findings``) in its plug-in; :data:`EXPERIMENTS` gathers them in the registry's order
(GVQ, the clipped-Gaussian model, mixtures, MCVQ).

Quick arguments keep the whole default run under 15 minutes on 2 CPU cores: the
example's ``--quick`` where that still tests the claim, its full size where that costs
about a minute or less. Quick verdicts rest on few seeds and trials: a smoke test of
the claim, not a replication. Full arguments are the examples' defaults (the papers'
sizes as far as the examples reach them).
"""

from __future__ import annotations

from inference.app.families import load_families
from inference.engine.reporting import VERDICTS, Experiment, finding

__all__ = ["EXPERIMENTS", "Experiment", "VERDICTS", "finding"]

#: Name -> experiment, in report order.
EXPERIMENTS: dict[str, Experiment] = {
    experiment.name: experiment
    for family in load_families().values() for experiment in family.experiments}
