"""The compiler options of a test run (tests/conftest.py): LLVM level 0 unless the run's
``-m`` expression can select a test marked ``xla_defaults``, and every such test slow."""

import ast
import os
from pathlib import Path

import pytest
from conftest import (
    FAST_COMPILE_FLAGS,
    XLA_DEFAULTS_FILES,
    XLA_DEFAULTS_TESTS,
    _selects_xla_defaults,
)

TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize("markexpr, selects", [
    ("not slow", False),                                       # the README's run
    ("slow and not whole_run and not xla_defaults", False),    # CI's first long step
    ("slow and not whole_run and xla_defaults", True),         # CI's second long step
    ("slow", True),
    ("slow or not slow", True),
    ("whole_run", True),
    ("xla_defaults", True),
    ("", True),                                                # no -m at all
])
def test_which_runs_keep_xla_defaults(markexpr, selects):
    assert _selects_xla_defaults(markexpr) is selects


def test_this_run_compiles_as_its_marks_say(pytestconfig):
    flags = os.environ.get("XLA_FLAGS", "")
    if _selects_xla_defaults(pytestconfig.option.markexpr):
        pytest.skip("this run keeps XLA's defaults unless XLA_FLAGS says otherwise")
    # conftest.py adds FAST_COMPILE_FLAGS[0], or XLA_FLAGS named a level already.
    assert "xla_backend_optimization_level" in flags, (FAST_COMPILE_FLAGS, flags)


def _marked_xla_defaults_without_slow(tree: ast.Module) -> list[str]:
    """Functions decorated ``xla_defaults`` without ``slow`` in one test module (a module
    ``pytestmark`` counts for all of them)."""
    def marks(node) -> set[str]:
        return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
                and n.attr in ("slow", "xla_defaults")}

    module = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            module |= marks(node.value)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            own = module | set().union(*(marks(d) for d in node.decorator_list))
            if "xla_defaults" in own and "slow" not in own:
                found.append(node.name)
    return found


def test_every_test_marked_xla_defaults_is_slow():
    # The collection hook refuses such a test at run time; this finds one in the files
    # without running them (a decorator on the function or a module's pytestmark).
    bad = {path.name: names for path in sorted(TESTS.rglob("test_*.py"))
           if (names := _marked_xla_defaults_without_slow(ast.parse(path.read_text())))}
    assert not bad, bad


def test_the_lists_of_xla_defaults_name_existing_tests():
    root = TESTS.parent
    missing = sorted(f for f in XLA_DEFAULTS_FILES if not (root / f).is_file())
    for entry in XLA_DEFAULTS_TESTS:
        path, name = entry.split("::")
        source = (root / path).read_text() if (root / path).is_file() else ""
        if f"def {name}(" not in source:
            missing.append(entry)
    assert not missing, missing
