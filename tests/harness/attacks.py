"""The hostile-input and fault suite's tally (issue 18): a pytest plugin and docs/RELIABILITY.md.

Every test that replays an attack carries ``@pytest.mark.attack(category, attempt)``. This
plugin refuses a marker outside the categories, records each marked test's outcome, and
with ``--reliability-doc PATH`` (``make reliability``) writes the document: per category the
attempts tried and held and what "held" means there, then every attempt with its test id.

An attempt is one test function: its parametrized cases are one attempt, held only when every
case held. ``attack_tests`` finds the same functions by reading tests/ as text (AST), so a unit
test can tell when the document no longer lists exactly the attacks that exist.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

MARKER = "attack"

# What "held" means, per category: the sentence the document gives each section.
CATEGORIES: dict[str, str] = {
    "hostile text": (
        "Text a box wrote (log bytes, job names, hostnames, mount and file names, stderr, "
        "error fields) carrying ANSI/OSC/DCS/C1 sequences, bidi overrides, invalid UTF-8, NUL "
        "or lines of megabytes reached the user's terminal only as inert, bounded text: no "
        "escape byte from the box in what a verb printed or the room drew, no Rich or Textual "
        "markup read as markup, no traceback."),
    "injection": (
        "A job argv, a hosts.toml value or a file name holding `;`, `$(...)`, backticks, a "
        "leading `-`, quotes, globs or newlines reached the box as the literal argument it was "
        "(argv quoted once), or was refused with a clear error; nothing was ever run by a "
        "shell that the user did not write, and no ssh option was smuggled in."),
    "bad configuration": (
        "A malformed, mistyped, missing or unsafe hosts.toml, ssh config or command line gave "
        "one clear error naming the file, host or field and the fix (exit 2 for configuration), "
        "and a bad host failed alone while the others kept working."),
    "bad answers": (
        "A helper answer that was malformed, truncated, of another schema or shape, oversized, "
        "deeply nested, slow or hanging was a host error (STALE or DOWN) with what was wrong "
        "and the fix, within the poll's bound: never UP with a made-up reading, never a crash "
        "or a traceback, and the next good answer was read again."),
    "faults": (
        "A killed sshd, a killed runner, kill -9 during a checkpoint save or a pull, torn or "
        "garbage event lines, a full disk and flipped bytes lost nothing that had been "
        "recorded, ran nothing twice, and were reported as what they were; a failed poll never "
        "declared a job dead (GEN8)."),
    "host keys": (
        "An unknown or changed host key stopped the connection before anything ran or was "
        "uploaded on the box, on every path that reaches a box (the link and the spawned ssh "
        "of pulls), with the fingerprint and the command that would trust it."),
    "secrets": (
        "No private key, passphrase or token appeared on any process's command line "
        "(/proc/*/cmdline) on the jump host or the box while gpuroom polled, pulled or ran "
        "a job, nor in what it printed."),
    "trust": (
        "A box whose helper lied in any way, or a web page the user visited, could not write a "
        "file outside the user's chosen directories, start a process on the jump host, move a "
        "job the user did not launch with --failover or move, read or drive the web room, or "
        "crash or restyle the room: each attempt stopped at the guard docs/SECURITY.md names "
        "for its flow, and what the guard refused was said with the host named."),
}

HELD, FAILED, SKIPPED, KNOWN = "held", "FAILED", "skipped", "known failure"


class AttackMarkerError(ValueError):
    """An attack marker that does not say what the document needs."""


def check_marker(args: tuple[Any, ...], where: str) -> tuple[str, str]:
    """(category, attempt) of one marker, or AttackMarkerError naming the test and the fix."""
    if len(args) != 2 or not all(isinstance(a, str) and a.strip() for a in args):
        raise AttackMarkerError(f"{where}: @pytest.mark.attack takes two strings, "
                                f"(category, attempt in words); got {args!r}")
    category, attempt = args
    if category not in CATEGORIES:
        raise AttackMarkerError(f"{where}: unknown attack category {category!r}; use one of "
                                + ", ".join(repr(c) for c in CATEGORIES))
    return category, attempt


# ------------------------------------------------------------------ what exists (AST)

def _is_attack_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Attribute) and func.attr == MARKER
            and isinstance(func.value, ast.Attribute) and func.value.attr == "mark")


def _marker_args(nodes: list[ast.expr], where: str) -> tuple[str, str] | None:
    for node in nodes:
        for sub in ast.walk(node):
            if _is_attack_call(sub):
                assert isinstance(sub, ast.Call)
                try:
                    args = tuple(ast.literal_eval(a) for a in sub.args)
                except ValueError as exc:
                    raise AttackMarkerError(f"{where}: the attack marker's arguments must be "
                                            "string literals") from exc
                return check_marker(args, where)
    return None


def _pytestmark(body: list[ast.stmt], where: str) -> tuple[str, str] | None:
    for stmt in body:
        if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets):
            return _marker_args([stmt.value], where)
    return None


def attack_tests(tests_root: Path, rel_to: Path) -> dict[str, tuple[str, str]]:
    """Every attack-marked test function under ``tests_root``, as read from the source: its
    id (``path::[Class::]name``, path relative to ``rel_to``) -> (category, attempt)."""
    found: dict[str, tuple[str, str]] = {}
    for path in sorted(tests_root.rglob("test_*.py")):
        rel = path.relative_to(rel_to).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        module_mark = _pytestmark(tree.body, rel)
        scopes: list[tuple[str, list[ast.stmt], tuple[str, str] | None]] = [
            ("", tree.body, module_mark)]
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                class_mark = _marker_args(node.decorator_list, f"{rel}::{node.name}")
                inner = _pytestmark(node.body, f"{rel}::{node.name}")
                scopes.append((f"{node.name}::", node.body, class_mark or inner or module_mark))
        for prefix, body, inherited in scopes:
            for node in body:
                if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and node.name.startswith("test")):
                    test_id = f"{rel}::{prefix}{node.name}"
                    mark = _marker_args(node.decorator_list, test_id) or inherited
                    if mark is not None:
                        found[test_id] = mark
    return found


# ------------------------------------------------------------------ what ran (the plugin)

def base_id(nodeid: str) -> str:
    """A test's id without its parametrize case: ``a.py::test_x[case]`` -> ``a.py::test_x``."""
    return re.sub(r"\[.*\]$", "", nodeid)


@dataclass
class Attempt:
    """One attack-marked test function and the outcomes of its cases."""

    test_id: str
    category: str
    attempt: str
    outcomes: dict[str, str] = field(default_factory=dict)  # case nodeid -> outcome
    reasons: list[str] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        seen = set(self.outcomes.values())
        # A failed case fails the attempt; cases skipped beside held ones (another platform)
        # leave it held, with the reason in the note.
        for worst in (FAILED, KNOWN, HELD):
            if worst in seen:
                return worst
        return SKIPPED

    def row_note(self) -> str:
        cases = len(self.outcomes)
        note = f"{cases} cases" if cases > 1 else ""
        reason = self.reasons[0] if self.reasons else ""
        return "; ".join(p for p in (note, reason) if p)


class AttackTally:
    """Collects each attack-marked test's outcome over a session."""

    def __init__(self, doc: Path | None) -> None:
        self.doc = doc
        self.attempts: dict[str, Attempt] = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            marker = item.get_closest_marker(MARKER)
            if marker is None:
                continue
            try:
                category, attempt = check_marker(tuple(marker.args), item.nodeid)
            except AttackMarkerError as exc:
                raise pytest.UsageError(str(exc)) from None
            key = base_id(item.nodeid)
            self.attempts.setdefault(key, Attempt(key, category, attempt))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Iterator[None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        attempt = self.attempts.get(base_id(item.nodeid))
        if attempt is None:
            return
        result = _outcome(report)
        if result is None:
            return
        previous = attempt.outcomes.get(item.nodeid)
        # A later phase only makes a case worse (a teardown error after a pass is a failure).
        if previous is None or _rank(result) > _rank(previous):
            attempt.outcomes[item.nodeid] = result
        if result in (SKIPPED, KNOWN):
            reason = _reason(report)
            if reason and reason not in attempt.reasons:
                attempt.reasons.append(reason)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # --collect-only ran nothing: it would write every attempt as skipped.
        if self.doc is None or not self.attempts or session.config.option.collectonly:
            return
        self.doc.write_text(render(self.attempts.values()), encoding="utf-8")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        ran = not terminalreporter.config.option.collectonly
        if self.doc is not None and self.attempts and ran:
            held = sum(a.outcome == HELD for a in self.attempts.values())
            terminalreporter.write_line(
                f"attacks: {held} of {len(self.attempts)} held; written to {self.doc}")


def _outcome(report: pytest.TestReport) -> str | None:
    if hasattr(report, "wasxfail"):
        return KNOWN if report.skipped else FAILED  # an xpass under strict xfail is failed
    if report.failed:
        return FAILED
    if report.skipped:
        return SKIPPED
    if report.when == "call":
        return HELD
    return None


def _rank(outcome: str) -> int:
    return (HELD, SKIPPED, KNOWN, FAILED).index(outcome)


def _reason(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return str(report.wasxfail)
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return ""


# ------------------------------------------------------------------ the document

DOC_HEAD = """\
# Reliability: the hostile-input and fault suite

Written by `make reliability` from the outcomes of every test marked
`@pytest.mark.attack(category, attempt)` (issue 18); do not edit by hand. A box is untrusted:
anything running there runs as the same user as gpuroom's helper and can write into the
queue's files, the helper's answer and its stderr. Each attempt below is one test that replays
an attack against the real components (sshd, tmux, the helper, the room); "held" means the
test passed. `tests/unit/test_reliability_doc.py` fails when this file does not list exactly
the attack-marked tests that exist, so a new attempt needs `make reliability` again.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(attempts: Any) -> str:
    """The whole docs/RELIABILITY.md for these attempts."""
    rows = sorted(attempts, key=lambda a: (list(CATEGORIES).index(a.category), a.test_id))
    lines = [DOC_HEAD]
    total = len(rows)
    held = sum(a.outcome == HELD for a in rows)
    lines.append(f"**{held} of {total} attempts held.**\n")
    lines.append("| category | tried | held | failed | known failures | skipped |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    for category in CATEGORIES:
        mine = [a for a in rows if a.category == category]
        count = {o: sum(a.outcome == o for a in mine) for o in (HELD, FAILED, KNOWN, SKIPPED)}
        lines.append(f"| {category} | {len(mine)} | {count[HELD]} | {count[FAILED]} | "
                     f"{count[KNOWN]} | {count[SKIPPED]} |")
    lines.append("")
    lines.append("## What held means\n")
    for category, meaning in CATEGORIES.items():
        mine = [a for a in rows if a.category == category]
        ok = sum(a.outcome == HELD for a in mine)
        lines.append(f"### {category} ({ok} of {len(mine)} held)\n")
        lines.append(meaning + "\n")
    lines.append("## Every attempt\n")
    lines.append("| category | attempt | outcome | test |")
    lines.append("|---|---|---|---|")
    for a in rows:
        note = a.row_note()
        outcome = f"{a.outcome} ({note})" if note else a.outcome
        lines.append(f"| {a.category} | {_cell(a.attempt)} | {_cell(outcome)} | "
                     f"`{a.test_id}` |")
    return "\n".join(lines) + "\n"


ROW = re.compile(r"^\| (?P<category>[^|]+) \| (?P<attempt>(?:[^|\\]|\\.)+) \| "
                 r"(?P<outcome>(?:[^|\\]|\\.)+) \| `(?P<test_id>[^`]+)` \|$")


def documented(text: str) -> dict[str, tuple[str, str, str]]:
    """The attempt rows of a written document: test id -> (category, attempt, outcome)."""
    found: dict[str, tuple[str, str, str]] = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            attempt = m["attempt"].replace("\\|", "|")
            found[m["test_id"]] = (m["category"], attempt, m["outcome"])
    return found


# ------------------------------------------------------------------ pytest entry points

def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--reliability-doc", metavar="PATH", default=None,
                     help="write the attack-marked tests' outcomes to PATH "
                          "(docs/RELIABILITY.md; `make reliability`)")


def pytest_configure(config: pytest.Config) -> None:
    doc = config.getoption("--reliability-doc")
    config.pluginmanager.register(AttackTally(Path(doc) if doc else None), "attack-tally")
