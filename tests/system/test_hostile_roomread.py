"""Issue 18, the room's reading side (issue 17 items 8, 10, 11, 14): what a box, a link or a
recording says reaches the panes and the detail screen as inert text, whole where it should
be whole and cut with a mark where it must be cut; a recording can never act.

No daemon is needed: the room runs under Pilot against a StaticFleet fed the hostile text.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import nullcontext
from pathlib import Path

import pytest
from harness.room import screen_text

from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.fleet.replay import ReplayFleet, load_recording
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.tui.room.detail_screen import DetailScreen
from gpuroom.widgets.disk import DiskPanel
from gpuroom.widgets.gpu import GpuPanel

os.environ["TZ"] = "UTC"
time.tzset()

NOW = 1_790_000_000.0
# An OSC 52 clipboard write, a screen clear, a bidi override, a bell and a newline: each acts
# on the terminal (or reorders what the user reads) if printed as given.
EVIL = "\x1b]52;c;ZXZpbA==\x07\x1b[2J\u202eevil\x07\nline"
DRIVING = ("\x1b", "\x07", "\u202e")


def assert_inert(text: str) -> None:
    assert not any(c in text for c in DRIVING), repr(text)


@pytest.mark.attack("hostile text", "a link error quoting the box's stderr with escapes, "
                                    "a bidi override and a newline, shown in the panes and `i`")
async def test_hostile_link_error_is_inert_in_panes_and_detail() -> None:
    host = HostState(name="evil", state=LinkState.DOWN, error=f"evil: {EVIL}. Fix: {EVIL}",
                     last_try=NOW, next_try=NOW + 5)
    app = GpuroomApp(StaticFleet([host]), clock=lambda: NOW)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        view = app.query_one(GpuPanel).view
        assert view is not None and view.problem
        for line in (*view.problem, *app.query_one(DiskPanel).problem):
            assert_inert(line)
        assert_inert(screen_text(app))
        await pilot.press("i")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        for _, text in app.screen.rows:
            assert_inert(text)
        assert "evil" in dict(app.screen.rows)["error"]
        assert_inert(screen_text(app))


@pytest.mark.attack("bad answers", "a watched mount whose error is 5,000 characters of one "
                                   "line, which wrapped in a table cell broke the disk pane")
async def test_a_huge_disk_error_is_one_cut_line(tmp_path: Path) -> None:
    snapshot = {"disks": [{"path": "/workspace", "error": "OSError: " + "x" * 5000}]}
    host = HostState(name="box", state=LinkState.UP, snapshot=snapshot, last_ok=NOW,
                     last_try=NOW)
    app = GpuroomApp(StaticFleet([host]), clock=lambda: NOW)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        lines = [ln for ln in screen_text(app).splitlines() if "/workspace" in ln]
        assert len(lines) == 1 and lines[0].rstrip().endswith("…"), lines


@pytest.mark.attack("injection", "a recording that names a host and a job, replayed, then "
                                 "every key that would reach a box pressed")
async def test_a_recording_cannot_reach_a_box(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    line = {"t": NOW, "host": "box; rm -rf ~", "profile": "generic-ssh", "state": "up",
            "error": None, "snapshot": {"queue": {"queues": {}}}}
    path = tmp_path / "evil.jsonl"
    path.write_text(json.dumps(line) + "\n")
    fleet = ReplayFleet(load_recording(path), speed=0)
    spawned: list[list[str]] = []

    def spawn(argv: list[str]) -> int:
        spawned.append(argv)
        return 0

    app = GpuroomApp(fleet, clock=fleet.now, spawn=spawn, replay=str(path))
    monkeypatch.setattr(app, "suspend", nullcontext)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        for key in ("s", "K", "R", "a", "P", "T", "r"):
            await pilot.press(key)
            await pilot.pause()
            assert len(app.screen_stack) == 1, key
        assert spawned == []
        assert not [w for w in app.workers if w.group != "fleet"]
