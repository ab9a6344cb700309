"""How long the zoo's long runs take: the one table that every stated run time quotes.

The README, the documentation, ``CONTRIBUTING.md``, ``pyproject.toml`` and the help of
``ppl-zoo`` state how long a run takes by quoting :data:`RUN_TIMES` word for word, and
``tests/test_stated_times.py`` checks that they do. A time here is an **estimate** from
recorded runs on two shared CPU cores (the machines the project is developed on), not
a promise: a quiet machine is faster, a busy one slower, and the first run on a machine
also pays for compiling what later runs load from the compilation cache.

Where each number comes from:

* ``reproduce_quick``: the whole default ``ppl-zoo reproduce`` run (every experiment at
  its quick size), timed as the ``whole_run`` test (``tests/test_reproduce.py``).
* ``reproduce_full``: :data:`FULL_SECONDS`, the wall times of ``ppl-zoo reproduce
  --full`` on a fresh clone with an empty compilation cache (29 November 2026, two quiet
  cores, load average under 2), plus :data:`SELECTION_STUDY_FULL_SECONDS` for the
  bounded full size of the model-selection study that it runs (see
  :data:`inference.app.experiments.STUDIES`): 1,205 s in all. The run recorded in
  ``docs/_data/reproduction/findings.json``, on cores shared with other work (load
  average about 7), took 3,628 s.
* ``selection_study``: the complete model-selection study (300 rows) is not part of
  ``reproduce``; it is the study runner's work (``ppl-zoo study run
  examples/studies/selection.toml``). Its rows' recorded compute time is
  :data:`SELECTION_STUDY_ROWS_SECONDS`.
* ``slow_tests``: the long tests (``pytest -m slow``), without the ``whole_run`` test.
The default test run's time is stated in one place only, ``CONTRIBUTING.md`` (section
"Tests"), where it is measured and kept; every other page points there.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["RunTime", "RUN_TIMES", "FULL_SECONDS", "SELECTION_STUDY_FULL_SECONDS",
           "SELECTION_STUDY_ROWS_SECONDS", "stated"]


class RunTime(NamedTuple):
    """One named run and the words that state its duration."""

    #: The duration as every user-facing page writes it, e.g. ``"about 17 minutes"``.
    text: str
    #: What is timed, in a few words.
    what: str


#: Wall seconds of each experiment of the fresh-clone full run of 29 November 2026
#: (``ppl-zoo reproduce --full``, two quiet cores, empty compilation cache), the
#: model-selection study left out.
FULL_SECONDS = {
    "gvq_planted": 105, "gvq_association": 135, "gvq_digits": 27, "gvq_compression": 105,
    "clipped_bumps": 7, "clipped_counterexample": 39, "clipped_entropy": 41,
    "clipped_digits": 28, "yingyang_selection": 101, "mcvq_shapes": 19, "mcvq_faces": 18,
    "mcvq_ratings": 11, "mcvq_text": 5, "overlapping_causes": 45, "mcvq_selection": 359,
}

#: The bounded full size of the selection study in ``reproduce --full``
#: (:data:`inference.app.experiments.SELECTION_STUDY_FULL_ARGS`: 3 seeds of the
#: well-separated level for PPCA and the clipped Gaussian) in the same run, its rows
#: computed afresh (the rows saved in ``docs/_data/selection_study/runs/`` had taken
#: 889 s and 47 s on busier cores).
SELECTION_STUDY_FULL_SECONDS = 159

#: Compute time of the complete study's 300 saved rows, summed over criteria (about a
#: day on two cores): the study runner's work, not ``reproduce``'s.
SELECTION_STUDY_ROWS_SECONDS = 83_167

RUN_TIMES: dict[str, RunTime] = {
    "reproduce_quick": RunTime("about 17 minutes",
                               "the default `ppl-zoo reproduce`, every experiment at its "
                               "quick size"),
    # sum(FULL_SECONDS) + SELECTION_STUDY_FULL_SECONDS = 1045 + 159 s: 20 minutes (on
    # busier cores, load average about 7, the recorded run took 60 minutes)
    "reproduce_full": RunTime("about 20 minutes",
                              "`ppl-zoo reproduce --full`, the examples' full sizes"),
    "selection_study": RunTime("about a day",
                               "the complete model-selection study (300 rows) on two cores"),
    # 825 + 774 s in the two long-test steps of the fresh-clone .ci/run of 29 November
    # 2026 (before the steps were split: 2186 s that morning, 2409 s the day before)
    "slow_tests": RunTime("about 27 minutes", "the long tests, `pytest -m slow`"),
}


def stated(name: str) -> str:
    """The words that state run ``name``'s duration (a key of :data:`RUN_TIMES`)."""
    return RUN_TIMES[name].text
