"""What users read cites papers by authors, title, venue and year, never internal notes.

A grep over the packages, the examples, the benchmarks, the README, the project
files, the documentation's sources and recorded data, and the command line's help
and listing, for labels that point at notes users do not have: "seed 000" style
paper labels, "shared/", "MODELS.md", "DESIGN.md", "BENCHMARKING.md", "design notes"
and "issue <number>". The references
module gives every citation, and the version is reported.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import inference
import ppl_models
from inference.app.cli import build_parser, main
from ppl_models.references import REFERENCES, bibtex, cite

ROOT = Path(__file__).resolve().parents[1]
#: Internal labels that must not reach users.
FORBIDDEN = re.compile(r"seeds? 00\d|shared/|MODELS\.md|DESIGN\.md|BENCHMARKING\.md|"
                       r"design notes|\b[Ii]ssues? \d+")
SOURCES = ("ppl_models", "inference", "examples", "benchmarks")
PROJECT_FILES = ("README.md", "CONTRIBUTING.md", "CHANGELOG.md", "CITATION.cff",
                 "pyproject.toml", "benchmarks/README.md")


def _files():
    for folder in SOURCES:
        yield from sorted((ROOT / folder).rglob("*.py"))
    for name in PROJECT_FILES:
        if (ROOT / name).exists():
            yield ROOT / name
    # The documentation's sources, its extension and the recorded data it shows.
    docs = ROOT / "docs"
    for pattern in ("*.md", "*.rst", "*.py", "_ext/*.py", "api/*.rst", "_data/**/*.json"):
        yield from sorted(docs.glob(pattern))


def test_no_internal_labels_in_what_users_read():
    found = []
    for path in _files():
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if FORBIDDEN.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:90]}")
    assert not found, "internal labels:\n" + "\n".join(found)


def _help_texts(parser):
    yield parser.format_help()
    for action in parser._actions:
        for sub in getattr(action, "choices", None) and action.choices.values() or ():
            if hasattr(sub, "format_help"):
                yield from _help_texts(sub)


def test_command_line_help_and_listing(capsys):
    texts = list(_help_texts(build_parser()))
    assert len(texts) >= 3  # the root and its sub-commands
    assert main(["list"]) == 0
    texts.append(capsys.readouterr().out)
    for text in texts:
        assert not FORBIDDEN.search(text), text
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"ppl-zoo {inference.__version__}"


def test_references_are_complete():
    assert inference.__version__ == ppl_models.__version__
    for key, ref in REFERENCES.items():
        assert ref.authors and ref.title and ref.venue and 1900 < ref.year < 2100, key
        text = cite(key, "sec. 2")
        assert ref.title in text and str(ref.year) in text and text.endswith("sec. 2.")
    entries = bibtex()
    assert entries.count("@") == len(REFERENCES)
    assert all(f"{{{key}," in entries for key in REFERENCES)
    with pytest.raises(KeyError, match="known"):
        cite("nope")
