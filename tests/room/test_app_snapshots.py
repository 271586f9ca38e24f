"""Screens of the control room as SVG baselines (pytest-textual-snapshot).

Data: tests/data/scenario-*.json (the real helper's snapshots, its GPUs replayed from the
shared fixture captures; see tests/data/README.md). The clock is injected, TZ pinned,
and no toast is on screen, so the same inputs always draw the same picture.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from textual.pilot import Pilot

from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.widgets.logtail import LogTail

os.environ["TZ"] = "UTC"
time.tzset()

from paths import DATA  # noqa: E402  (after TZ is pinned, like the app's imports)

SnapCompare = Callable[..., bool]


def scenario_app(name: str) -> tuple[GpuroomApp, Callable[[Pilot[Any]], Awaitable[None]]]:
    data = json.loads((DATA / f"scenario-{name}.json").read_text())
    fleet = StaticFleet.from_scenario(data)
    now = float(data["now"])
    app = GpuroomApp(fleet, clock=lambda: now)

    async def before(pilot: Pilot[Any]) -> None:
        # One poll handled at a time, so the sparklines hold the recorded series.
        for _ in fleet.play_backlog():
            await pilot.pause()
        await pilot.pause()

    return app, before


@pytest.mark.parametrize(
    ("name", "size"),
    [
        ("healthy", (80, 24)),
        ("healthy", (200, 60)),
        ("healthy", (120, 36)),
        ("stale", (120, 36)),
        ("throttle", (120, 36)),
        ("inode", (120, 36)),
        ("failed", (120, 36)),
    ],
    ids=["healthy-80x24", "healthy-200x60", "healthy-120x36", "stale", "throttle", "inode",
         "failed"],
)
def test_scenario(snap_compare: SnapCompare, name: str, size: tuple[int, int]) -> None:
    app, before = scenario_app(name)
    assert snap_compare(app, terminal_size=size, run_before=before)


def test_help_screen(snap_compare: SnapCompare) -> None:
    app, before = scenario_app("healthy")
    assert snap_compare(app, terminal_size=(120, 36), run_before=before,
                        press=["question_mark"])


def test_job_detail_screen(snap_compare: SnapCompare) -> None:
    """Enter on the running job: queue show's rows (a recording answers with its record)."""
    app, before = scenario_app("healthy")

    async def opened(pilot: Pilot[Any]) -> None:
        await before(pilot)
        await pilot.press("tab", "enter")
        loading = [w for w in app.workers if w.group == "jobdetail"]
        if loading:  # an empty list would mean "all", the fleet's endless worker included
            await app.workers.wait_for_complete(loading)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 36), run_before=opened)


def test_log_search(snap_compare: SnapCompare) -> None:
    """/ in the log pane, "loss", enter: every match highlighted, the newest current, the
    title saying which of how many."""
    app, before = scenario_app("healthy")

    async def searched(pilot: Pilot[Any]) -> None:
        await before(pilot)
        app.query_one(LogTail).focus()
        await pilot.press("slash", *"loss", "enter")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 36), run_before=searched)


def test_kill_confirm(snap_compare: SnapCompare) -> None:
    app, before = scenario_app("healthy")
    assert snap_compare(app, terminal_size=(120, 36), run_before=before, press=["K"])


def test_kill_confirm_80x24(snap_compare: SnapCompare) -> None:
    app, before = scenario_app("healthy")
    assert snap_compare(app, terminal_size=(80, 24), run_before=before, press=["K"])


def test_findings_screen(snap_compare: SnapCompare) -> None:
    app, before = scenario_app("inode")
    assert snap_compare(app, terminal_size=(120, 36), run_before=before, press=["d"])
