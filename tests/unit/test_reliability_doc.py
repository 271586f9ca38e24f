"""docs/RELIABILITY.md lists exactly the attack-marked tests that exist (issue 18): a new or
renamed attempt without `make reliability` fails here, so the figures never go stale."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from harness.attacks import (
    CATEGORIES,
    HELD,
    KNOWN,
    SKIPPED,
    AttackMarkerError,
    Attempt,
    attack_tests,
    documented,
    render,
)

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "RELIABILITY.md"


def test_the_document_lists_exactly_the_attack_tests_that_exist() -> None:
    assert DOC.is_file(), "docs/RELIABILITY.md is missing: run `make reliability`"
    in_doc = {k: v[:2] for k, v in documented(DOC.read_text(encoding="utf-8")).items()}
    in_tests = attack_tests(ROOT / "tests", ROOT)
    missing = sorted(set(in_tests) - set(in_doc))
    gone = sorted(set(in_doc) - set(in_tests))
    changed = sorted(k for k in set(in_doc) & set(in_tests) if in_doc[k] != in_tests[k])
    assert not (missing or gone or changed), (
        f"docs/RELIABILITY.md is stale (run `make reliability`): not listed {missing}, "
        f"no longer a test {gone}, category or attempt changed {changed}")


def test_the_document_explains_every_category() -> None:
    text = DOC.read_text(encoding="utf-8")
    for category, meaning in CATEGORIES.items():
        assert f"### {category} (" in text and meaning in text, category


def test_the_ast_reader_sees_decorators_classes_and_pytestmark(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_a.py").write_text(textwrap.dedent('''
        import pytest

        @pytest.mark.attack("injection", "semicolon in argv")
        @pytest.mark.parametrize("x", [1, 2])
        def test_one(x): ...

        def test_plain(): ...

        class TestGroup:
            pytestmark = pytest.mark.attack("faults", "sshd killed")

            async def test_two(self): ...
        '''))
    (tests / "test_b.py").write_text(textwrap.dedent('''
        import pytest
        pytestmark = [pytest.mark.sshd, pytest.mark.attack("secrets", "no key on argv")]

        def test_three(): ...
        '''))
    assert attack_tests(tests, tmp_path) == {
        "tests/test_a.py::test_one": ("injection", "semicolon in argv"),
        "tests/test_a.py::TestGroup::test_two": ("faults", "sshd killed"),
        "tests/test_b.py::test_three": ("secrets", "no key on argv"),
    }


def test_an_unknown_category_is_refused_naming_the_test(tmp_path: Path) -> None:
    (tmp_path / "test_c.py").write_text(
        "import pytest\n@pytest.mark.attack('hostile-text', 'x')\ndef test_x(): ...\n")
    with pytest.raises(AttackMarkerError, match=r"test_c.py::test_x: unknown attack category"):
        attack_tests(tmp_path, tmp_path)


def test_rendered_rows_read_back_with_their_outcomes() -> None:
    held = Attempt("tests/x.py::test_a", "hostile text", "OSC 52 | in a log",
                   {"tests/x.py::test_a[1]": HELD, "tests/x.py::test_a[2]": HELD})
    known = Attempt("tests/x.py::test_b", "faults", "full disk",
                    {"tests/x.py::test_b": KNOWN}, ["issue 18 item 3"])
    skipped = Attempt("tests/x.py::test_c", "secrets", "cmdline", {"tests/x.py::test_c": SKIPPED},
                      ["needs root"])
    text = render([known, skipped, held])
    assert documented(text) == {
        "tests/x.py::test_a": ("hostile text", "OSC 52 | in a log", "held (2 cases)"),
        "tests/x.py::test_b": ("faults", "full disk", "known failure (issue 18 item 3)"),
        "tests/x.py::test_c": ("secrets", "cmdline", "skipped (needs root)"),
    }
    assert "**1 of 3 attempts held.**" in text
    assert "| hostile text | 1 | 1 | 0 | 0 | 0 |" in text
    assert "| faults | 1 | 0 | 0 | 1 | 0 |" in text


INNER = '''
import pytest

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown")

@pytest.mark.attack("faults", "passes")
def test_held(): ...

@pytest.mark.attack("faults", "one case fails")
@pytest.mark.parametrize("n", [1, 2])
def test_half(n):
    assert n == 1

@pytest.mark.attack("secrets", "skipped here")
def test_skipped():
    pytest.skip("needs root")

@pytest.mark.attack("injection", "a known failure")
@pytest.mark.xfail(strict=True, reason="item 99")
def test_known():
    assert False

@pytest.mark.attack("host keys", "passes, then its teardown fails")
def test_teardown(broken_teardown): ...

def test_not_an_attack(): ...
'''


def inner_pytest(tmp_path: Path, source: str) -> tuple[int, str]:
    """pytest run on ``source`` in a fresh process, with this plugin: its status and output."""
    (tmp_path / "test_inner.py").write_text(source)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "harness.attacks", "-p", "no:cacheprovider",
         "-W", "ignore::pytest.PytestUnknownMarkWarning", "--rootdir", str(tmp_path),
         "--reliability-doc=" + str(tmp_path / "R.md"), str(tmp_path / "test_inner.py")],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120, check=False)
    return done.returncode, done.stdout + done.stderr


def test_the_plugin_records_each_outcome_of_a_real_run(tmp_path: Path) -> None:
    rc, said = inner_pytest(tmp_path, INNER)
    assert rc == 1, said  # a failed case fails the run; the document is written anyway
    rows = documented((tmp_path / "R.md").read_text())
    assert {k.split("::")[1]: v[2] for k, v in rows.items()} == {
        "test_held": "held",
        "test_half": "FAILED (2 cases)",
        "test_skipped": "skipped (needs root)",
        "test_known": "known failure (item 99)",
        "test_teardown": "FAILED",
    }
    assert "attacks: 1 of 5 held" in said


def test_a_marker_of_an_unknown_category_stops_the_run(tmp_path: Path) -> None:
    rc, said = inner_pytest(
        tmp_path, "import pytest\n@pytest.mark.attack('hostile-text', 'x')\ndef test_x(): ...\n")
    assert rc == 4 and "unknown attack category 'hostile-text'" in said, said
    assert not (tmp_path / "R.md").exists()
