"""Every run time the project states to its users agrees with the one table of them.

:data:`inference.app.run_times.RUN_TIMES` holds, for each named run, the words that
state how long it takes ("about 17 minutes"). This test reads what users read -- the
README, CONTRIBUTING, the documentation pages (``docs/*.md``), ``pyproject.toml`` and
the help of every ``ppl-zoo`` command -- finds each stated duration ("about 17
minutes", "a few minutes", "~17 min", "under 5 minutes"), decides from the words around
it which run it is about, and checks that it is the table's words. The default test
run's time is stated in one place only, CONTRIBUTING (where it is measured and kept);
a duration of the default test run anywhere else fails, as does a budget ("must finish
in under N minutes") outside CONTRIBUTING.
"""

import re
from pathlib import Path

import pytest

from inference.app.cli import build_parser, model_table
from inference.app.run_times import RUN_TIMES, stated

ROOT = Path(__file__).resolve().parent.parent

#: A stated duration.
DURATION = re.compile(
    r"(?:\b(?:about|under|around|roughly|nearly|over|within)\s+)?"
    r"\b(?:\d+(?:\.\d+)?|an?|a few|few|several|one|two|three|four|five|ten|fifteen)"
    r"\s+(?:minutes?|hours?|days?)\b|~\s*\d+\s*min\b|\bto be measured\b", re.I)

#: Which run a clause speaks of: the first rule that matches the clause wins.
RULES = (
    ("budget", re.compile(r"must finish|budget", re.I)),
    ("selection_study", re.compile(r"300 rows|whole study|complete .*study|study run", re.I)),
    ("slow_tests", re.compile(r"long tests|-m slow\b", re.I)),
    ("default_tests", re.compile(r"default (?:test )?run\b(?!.*reproduc)|test suite|"
                                 r"pytest -n auto", re.I)),
    ("reproduce_full", re.compile(r"--full|full sizes?", re.I)),
    ("reproduce_quick", re.compile(r"reproduc|whole_run|(?:quick|reduced|default) sizes?|"
                                   r"at the default", re.I)),
)

#: Clause boundaries: a sentence's end, a semicolon, a blank line, a list item or table
#: row, an example line of a command's help.
BOUNDARY = re.compile(r"(?<=[.;])\s|\n\s*\n|\n(?=\s*(?:[-*|#]|```|ppl-zoo\b))")


def _clauses(text):
    """The clauses of a text, each on one line (a wrapped line joined back)."""
    for clause in BOUNDARY.split(text):
        if clause and clause.strip():
            yield " ".join(clause.split())


def _help_texts(parser):
    yield parser.description or ""
    yield parser.epilog or ""
    for action in parser._actions:
        yield action.help or ""
        for sub in (getattr(action, "choices", None) or {}).values():
            if hasattr(sub, "format_help"):
                yield from _help_texts(sub)


def _sources():
    """(where, clauses): every user-facing text, cut into clauses."""
    for path in [ROOT / "README.md", ROOT / "CONTRIBUTING.md",
                 *sorted((ROOT / "docs").glob("*.md"))]:
        yield path.relative_to(ROOT).as_posix(), list(_clauses(path.read_text()))
    yield "pyproject.toml", [" ".join(line.split()) for line in
                             (ROOT / "pyproject.toml").read_text().splitlines()]
    texts = [*_help_texts(build_parser()), "\n".join(model_table())]
    yield "ppl-zoo help", [c for text in texts for c in _clauses(text)]


def _stated():
    """(where, run, duration, words around it) for every duration stated to users.

    A clause that states several durations is cut between them, so that each is judged
    by its own words ("the long tests take about 50 minutes, and the whole_run test
    about 17 minutes more"); every duration of a clause that speaks of a budget is one.
    """
    found = []
    for where, clauses in _sources():
        for clause in clauses:
            matches = list(DURATION.finditer(clause))
            if matches and RULES[0][1].search(clause):  # a budget, not a measurement
                found += [(where, "budget", match.group(0), clause) for match in matches]
                continue
            for i, match in enumerate(matches):
                start = matches[i - 1].end() if i else 0
                end = matches[i + 1].start() if i + 1 < len(matches) else len(clause)
                words = clause[start:end]
                run = next((name for name, rule in RULES if rule.search(words)), None)
                if run is not None:
                    found.append((where, run, match.group(0), words))
    return found


STATED = _stated()


def _normal(words):
    return " ".join(words.lower().split())


@pytest.mark.parametrize("run", sorted(RUN_TIMES))
def test_every_statement_of_a_run_quotes_the_table(run):
    statements = [s for s in STATED if s[1] == run]
    wrong = [(where, words, clause) for where, _, words, clause in statements
             if _normal(words) != _normal(stated(run))]
    assert not wrong, f"{run} is {stated(run)!r} in inference/app/run_times.py; stated " \
                      f"otherwise in: {wrong}"


@pytest.mark.parametrize("run, places", [
    ("reproduce_quick", {"README.md", "docs/user_guide.md", "CONTRIBUTING.md",
                         "pyproject.toml", "ppl-zoo help"}),
    ("reproduce_full", {"README.md", "docs/user_guide.md", "ppl-zoo help"}),
    ("selection_study", {"README.md", "docs/user_guide.md", "ppl-zoo help"}),
    ("slow_tests", {"CONTRIBUTING.md"}),
])
def test_the_runs_are_stated_where_users_look(run, places):
    """The check above is not vacuous: each run is found where users read about it."""
    assert places <= {where for where, name, _, _ in STATED if name == run}, run


def test_the_default_test_run_time_is_stated_in_contributing_only():
    places = {where for where, name, _, _ in STATED if name == "default_tests"}
    assert places == {"CONTRIBUTING.md"}, [s for s in STATED if s[1] == "default_tests"]
    budgets = {where for where, name, _, _ in STATED if name == "budget"}
    assert budgets <= {"CONTRIBUTING.md"}, [s for s in STATED if s[1] == "budget"]


def test_the_full_reproduction_estimate_is_about_20_minutes():
    """The table's "about 20 minutes" follows from the recorded times it lists."""
    from inference.app.experiments import EXPERIMENTS
    from inference.app.run_times import FULL_SECONDS, SELECTION_STUDY_FULL_SECONDS

    assert set(FULL_SECONDS) | {"selection_study"} == set(EXPERIMENTS)
    minutes = (sum(FULL_SECONDS.values()) + SELECTION_STUDY_FULL_SECONDS) / 60
    assert 15 <= minutes <= 25 and stated("reproduce_full") == "about 20 minutes"
