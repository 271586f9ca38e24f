"""Pending actions: the fleet is their one writer, and a snapshot is what retires them."""

from __future__ import annotations

import ast
import json
from typing import Any

from paths import DATA, ROOT

from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.model import PendingAction


def _fleet() -> tuple[StaticFleet, float]:
    data = json.loads((DATA / "scenario-healthy.json").read_text())
    return StaticFleet.from_scenario(data), float(data["now"])


def test_the_fleet_marks_drops_and_retires_on_a_confirming_snapshot() -> None:
    fleet, now = _fleet()
    host = fleet.host("h100-a")
    kill = PendingAction("kill", "j3", now)
    refused = PendingAction("relaunch", "j1", now, attempt=1)
    fleet.mark_pending("h100-a", kill)
    fleet.mark_pending("h100-a", refused)
    fleet.drop_pending("h100-a", refused)
    assert host.pending == [kill]
    # The same snapshot again confirms nothing.
    assert host.snapshot is not None
    fleet.feed("h100-a", host.snapshot, now + 5)
    assert host.pending == [kill]
    later: dict[str, Any] = json.loads(json.dumps(host.snapshot))
    for job in later["queue"]["queues"]["default"]["jobs"]:
        if job["id"] == "j3":
            job["state"] = "killed"
    fleet.feed("h100-a", later, now + 10)
    assert host.pending == []


def test_a_failed_poll_retires_nothing() -> None:
    fleet, now = _fleet()
    kill = PendingAction("kill", "j3", now)
    fleet.mark_pending("h100-a", kill)
    fleet.fail("h100-a", "ssh: connection lost", now + 5)
    assert fleet.host("h100-a").pending == [kill]


def _writes_pending(tree: ast.AST) -> list[int]:
    """Lines that assign to ``<x>.pending`` or call a mutating method on it."""
    lines = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            base = target.value if isinstance(target, ast.Subscript) else target
            if isinstance(base, ast.Attribute) and base.attr == "pending":
                lines.append(node.lineno)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"append", "remove", "clear", "extend", "pop", "insert"}
                and isinstance(node.func.value, ast.Attribute)
                and node.func.value.attr == "pending"):
            lines.append(node.lineno)
    return lines


def test_only_the_fleet_writes_host_state_pending() -> None:
    writers = {}
    for folder in ("tui", "widgets"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            lines = _writes_pending(ast.parse(path.read_text()))
            if lines:
                writers[str(path.relative_to(ROOT))] = lines
    assert writers and all(p.startswith("tui/fleet/") for p in writers), writers


def test_the_writer_check_sees_an_app_style_write() -> None:
    # The check above must be able to fail: the old app wrote h.pending directly.
    old = "h.pending.append(entry)\nh.pending[:] = [p for p in h.pending if keep(p)]\n"
    assert sorted(_writes_pending(ast.parse(old))) == [1, 2]
