"""The room's queue-steering keys (issue 20 item 2), driven through Pilot: x removes a queued
job (asks first), + and - move it in line, z pauses the host's queue (asks first), g resumes.
Each key is also in the help screen and the palette, generated from screens.KEYS."""

from __future__ import annotations

import copy
import html
import json
import os
import re
import time
from typing import Any

from gpuroom.tui.fleet.api import FleetError, StaticFleet
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.tui.room.screens import KEYS, ConfirmScreen, HelpScreen
from gpuroom.widgets.queue import QueueTable

os.environ["TZ"] = "UTC"
time.tzset()

from paths import DATA  # noqa: E402  (after TZ is pinned, like the app's imports)


class SteerFleet(StaticFleet):
    """The healthy scenario with a second queued job; the steering calls are recorded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[Any, ...]] = []
        self.fail_with: str | None = None

    def _record(self, *call: Any) -> None:
        self.calls.append(call)
        if self.fail_with:
            raise FleetError(self.fail_with)

    async def queue_remove(self, host: str, job_id: str) -> None:
        self._record("remove", host, job_id)

    async def queue_move(self, host: str, job_id: str, position: int) -> None:
        self._record("move", host, job_id, position)

    async def queue_pause(self, host: str, paused: bool) -> None:
        self._record("pause" if paused else "resume", host)


def make_app() -> tuple[GpuroomApp, SteerFleet]:
    data = json.loads((DATA / "scenario-healthy.json").read_text())
    static = StaticFleet.from_scenario(data)
    fleet = SteerFleet(static.hosts())
    host = fleet.host("h100-a")
    snap = copy.deepcopy(host.snapshot)
    assert snap is not None
    jobs = snap["queue"]["queues"]["default"]["jobs"]
    later = copy.deepcopy(next(j for j in jobs if j["id"] == "j4"))
    later.update(id="j5", name="later", position=1, added_seq=later["added_seq"] + 1)
    jobs.append(later)
    host.snapshot = snap
    now = float(data["now"])
    return GpuroomApp(fleet, clock=lambda: now), fleet


async def settle(app: GpuroomApp) -> None:
    steer = [w for w in app.workers if w.group == "steer"]
    if steer:
        await app.workers.wait_for_complete(steer)


async def press_on(app: GpuroomApp, pilot: Any, job_id: str, *keys: str) -> None:
    """Select ``job_id`` in the queue pane, press ``keys``, and let the steering finish."""
    await pilot.pause()
    queue = app.query_one(QueueTable)
    queue.move_cursor(row=[j.id for j in queue.jobs].index(job_id))
    await pilot.press(*keys)
    await settle(app)


async def test_x_asks_then_removes_the_selected_queued_job() -> None:
    app, fleet = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await press_on(app, pilot, "j4", "x")
        assert isinstance(app.screen, ConfirmScreen)
        assert "j4" in app.screen.question and "h100-a" in app.screen.question
        await pilot.press("n")
        assert fleet.calls == []
        await pilot.press("x", "y")
        await settle(app)
        assert fleet.calls == [("remove", "h100-a", "j4")]


async def test_x_on_a_running_job_says_kill_it_first_and_sends_nothing() -> None:
    app, fleet = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await press_on(app, pilot, "j3", "x")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen) and fleet.calls == []
        (note,) = list(app._notifications)
        assert "j3" in note.message and "kill it first" in note.message


async def test_plus_and_minus_move_the_selected_job_in_line() -> None:
    app, fleet = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await press_on(app, pilot, "j5", "plus")
        await press_on(app, pilot, "j4", "minus")
        assert fleet.calls == [("move", "h100-a", "j5", 0), ("move", "h100-a", "j4", 1)]


async def test_z_asks_then_pauses_and_g_resumes_the_hosts_queue() -> None:
    app, fleet = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("z")
        assert isinstance(app.screen, ConfirmScreen) and "h100-a" in app.screen.question
        await pilot.press("y")
        await settle(app)
        await pilot.press("g")
        await settle(app)
        assert fleet.calls == [("pause", "h100-a"), ("resume", "h100-a")]


async def test_a_refused_move_says_host_job_cause_and_fix() -> None:
    app, fleet = make_app()
    fleet.fail_with = "job is running"
    async with app.run_test(size=(120, 40)) as pilot:
        await press_on(app, pilot, "j5", "plus")
        await pilot.pause()
        (note,) = list(app._notifications)
        assert note.severity == "error"
        for part in ("j5", "h100-a", "job is running", "Fix:"):
            assert part in note.message


async def test_the_steering_keys_are_in_help_and_the_palette() -> None:
    actions = {k.action for k in KEYS if k.palette}
    assert {"remove", "move_up", "move_down", "pause_queue", "resume_queue"} <= actions
    app, fleet = make_app()
    async with app.run_test(size=(120, 50)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.pause()
        # What the terminal shows: the screenshot's text, its tags and entities undone.
        svg = app.export_screenshot()
        shown = html.unescape(re.sub(r"<[^>]+>", "", svg)).replace("\xa0", " ")
        for words in ("remove the queued job (asks first)", "one place earlier",
                      "one place later", "pause the host's queue", "resume the host's queue"):
            assert words in shown, shown
        await pilot.press("escape", "ctrl+p")
        await pilot.pause()
        await pilot.press(*"resume the host")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause()
        await settle(app)
    assert fleet.calls == [("resume", "h100-a")]
