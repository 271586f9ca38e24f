"""Issue 17 item 11: a replay never looks live. The screen names the recording and its clock;
every key that needs a box says at once that a recording cannot act, before any dialog; `s`
runs no ssh."""

from __future__ import annotations

import asyncio
import os
import time
from contextlib import nullcontext

import pytest
from harness.room import screen_text
from paths import DATA

from gpuroom.tui.fleet.replay import ReplayFleet, load_recording
from gpuroom.tui.present.format import fmt_clock
from gpuroom.tui.room.app import GpuroomApp

os.environ["TZ"] = "UTC"
time.tzset()

RECORDING = DATA / "doctor" / "cgroup_oom.jsonl"


def replay_app(spawned: list[list[str]]) -> tuple[GpuroomApp, ReplayFleet]:
    fleet = ReplayFleet(load_recording(RECORDING), speed=0)

    def spawn(argv: list[str]) -> int:
        spawned.append(argv)
        return 0

    return GpuroomApp(fleet, clock=fleet.now, spawn=spawn, replay="cgroup_oom.jsonl at 0x"), fleet


async def test_replay_is_marked_with_the_recording_and_its_clock() -> None:
    app, fleet = replay_app([])
    async with app.run_test(size=(80, 24)) as pilot:
        await asyncio.wait_for(fleet.finished.wait(), 20)
        await pilot.pause(1.5)  # the bar's clock follows the recording's, once a second
        top = screen_text(app).splitlines()[0]
        assert "REPLAY of cgroup_oom.jsonl" in top
        assert fmt_clock(fleet.now()) in top, top


@pytest.mark.parametrize(("key", "verb"), [
    ("K", "kill a job"), ("R", "relaunch a job"), ("a", "add a job"), ("P", "pull outputs"),
    ("T", "check the teardown gate"), ("s", "ssh to a host"), ("r", "poll a host"),
])
async def test_keys_that_need_a_box_refuse_at_once(monkeypatch: pytest.MonkeyPatch, key: str,
                                                   verb: str) -> None:
    spawned: list[list[str]] = []
    app, fleet = replay_app(spawned)
    monkeypatch.setattr(app, "suspend", nullcontext)
    async with app.run_test(size=(120, 36)) as pilot:
        await asyncio.wait_for(fleet.finished.wait(), 20)
        await pilot.pause()
        await pilot.press("tab")  # the queue pane: a job is selected for K and R
        await pilot.press(key)
        await pilot.pause()
        assert len(app.screen_stack) == 1, f"{key} opened {app.screen}"  # no dialog at all
        said = [n.message for n in app._notifications]
        assert any(m.startswith(f"cannot {verb}: this is a recording") for m in said), said
        assert spawned == []
        assert not [w for w in app.workers if w.group != "fleet"]
