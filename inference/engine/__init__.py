"""The engine: one driver for every iterative algorithm of the zoo.

A family writes one iteration of its algorithm as a pure function (an
:class:`Algorithm` step, or :class:`StatisticsAlgorithm` sufficient statistics and
an update) and the engine supplies, once for all of them: restarts, the
convergence test and trace, the non-convergence warning, a progress bar,
checkpoint / resume (:mod:`inference.engine.checkpoint`), sharding over devices
(:mod:`inference.engine.sharding`), streaming over batches
(:mod:`inference.engine.streaming`) and saving results
(:mod:`inference.engine.persistence`).
"""

from inference.engine.loop import (
    Algorithm,
    Run,
    Shard,
    StatisticsAlgorithm,
    cut,
    relative_change_converged,
    run,
    select,
    warn_not_converged,
)
from inference.engine.mcmc import Chains, run_nuts
from inference.engine.svi import SVIFit, SVIInfo, SVIProblem

__all__ = ["Algorithm", "Chains", "Run", "Shard", "StatisticsAlgorithm", "cut",
           "relative_change_converged", "run", "run_nuts", "select", "warn_not_converged",
           "SVIFit", "SVIInfo", "SVIProblem"]
