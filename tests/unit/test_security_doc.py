"""docs/SECURITY.md stays true: every guard it names is a function or class that exists, and
every test it names is a test function that exists, so the table a newcomer reads to pick a
guard cannot drift from the code."""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache

from paths import ROOT

DOC = ROOT / "docs" / "SECURITY.md"
# `gpuroom.tui.sanitize.sanitize_line` or `gpuroom.tui.sanitize.Class.method`
GUARD_RE = re.compile(r"`(gpuroom\.[\w.]+)`")
TEST_RE = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def _flow_rows(text: str) -> list[str]:
    """The rows of the flow tables (under "## Flows", up to the next "## "), headers aside."""
    flows = text.split("\n## Flows", 1)[1].split("\n## ", 1)[0]
    return [line for line in flows.splitlines()
            if line.startswith("|") and not line.startswith(("| flow", "|---"))]


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 1, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return callable(obj)
    return False


@cache
def _test_names(rel: str) -> frozenset[str]:
    path = ROOT / rel
    if not path.is_file():
        return frozenset()
    tree = ast.parse(path.read_text())
    return frozenset(n.name for n in ast.walk(tree)
                     if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                     and n.name.startswith("test_"))


def test_every_flow_names_a_guard_and_a_test() -> None:
    rows = _flow_rows(DOC.read_text())
    assert len(rows) >= 15, "SECURITY.md lists every flow from an untrusted source to a sink"
    bare = [r for r in rows if not GUARD_RE.search(r) or not TEST_RE.search(r)]
    assert bare == [], "each flow names the one guard and the test that attacks it"


def test_every_guard_named_exists() -> None:
    named = set(GUARD_RE.findall(DOC.read_text()))
    assert named
    missing = sorted(g for g in named if not _resolves(g))
    assert missing == [], f"docs/SECURITY.md names guards that do not exist: {missing}"


def test_every_test_named_exists() -> None:
    named = set(TEST_RE.findall(DOC.read_text()))
    assert named
    missing = sorted(f"{f}::{t}" for f, t in named if t not in _test_names(f))
    assert missing == [], f"docs/SECURITY.md names tests that do not exist: {missing}"


def test_the_checks_see_a_missing_guard_and_test() -> None:
    assert not _resolves("gpuroom.tui.sanitize.no_such_guard")
    assert _resolves("gpuroom.tui.sanitize.sanitize_line")
    assert "test_nothing_here" not in _test_names("tests/unit/test_security_doc.py")
    assert "test_every_guard_named_exists" in _test_names("tests/unit/test_security_doc.py")
