"""Studies: grids of independent model-selection rows, run on Dask and resumed from disk.

A study (:class:`Study`, read from a TOML file by :func:`load_study`) lists model
entries (registry families or user programs), data sources (generators with levels and
seeds, or data files), candidates, criteria and settings. Its rows -- one per model,
level and seed, each keyed by the SHA-256 of everything that determines it -- are
computed by :func:`run_study` (one Dask task per row; ``serial=True`` without Dask) into
a store of one JSON file per row, which a later run reuses; :func:`study_report` and
:func:`study_status` read that store. The command line is ``ppl-zoo study run``,
``ppl-zoo study report`` and ``ppl-zoo study status``.
"""

from inference.app.study.plan import RowSpec, plan_rows
from inference.app.study.report import study_report, study_status
from inference.app.study.runner import StudyRun, require_distributed, run_study
from inference.app.study.spec import (
    FilesSource,
    GeneratorSource,
    ModelEntry,
    Study,
    StudyError,
    load_study,
    study_from_dict,
)

__all__ = ["FilesSource", "GeneratorSource", "ModelEntry", "RowSpec", "Study", "StudyError",
           "StudyRun", "load_study", "plan_rows", "require_distributed", "run_study",
           "study_from_dict", "study_report", "study_status"]
