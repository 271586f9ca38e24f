"""The room's move key (issue 21 item 2), driven through Pilot: M on a job asks which host
(when there is more than one other), then confirms naming both hosts, then asks the fleet to
move it; a refusal says host, job, cause and fix."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from gpuroom.tui.fleet.api import FleetError, StaticFleet
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.tui.room.move_key import PickHostScreen
from gpuroom.tui.room.screens import KEYS, ConfirmScreen
from gpuroom.widgets.queue import QueueTable

os.environ["TZ"] = "UTC"
time.tzset()

from paths import DATA  # noqa: E402  (after TZ is pinned, like the app's imports)


class MoveFleet(StaticFleet):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, str, str]] = []
        self.fail_with: str | None = None

    async def job_move(self, host: str, job_id: str, to: str) -> str:
        self.calls.append((host, job_id, to))
        if self.fail_with:
            raise FleetError(self.fail_with)
        return f"{host}/{job_id} -> {to}/j1 (from ckpt step 40)"


def make_app() -> tuple[GpuroomApp, MoveFleet]:
    data = json.loads((DATA / "scenario-healthy.json").read_text())
    fleet = MoveFleet(StaticFleet.from_scenario(data).hosts())
    now = float(data["now"])
    return GpuroomApp(fleet, clock=lambda: now), fleet


async def press_m_on(app: GpuroomApp, pilot: Any, job_id: str) -> None:
    await pilot.pause()
    queue = app.query_one(QueueTable)
    queue.move_cursor(row=[j.id for j in queue.jobs].index(job_id))
    await pilot.press("M")
    await pilot.pause()


async def settle(app: GpuroomApp) -> None:
    steer = [w for w in app.workers if w.group == "steer"]
    if steer:
        await app.workers.wait_for_complete(steer)


async def test_m_picks_the_host_confirms_naming_both_then_moves() -> None:
    app, fleet = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await press_m_on(app, pilot, "j3")
        assert isinstance(app.screen, PickHostScreen)
        assert app.screen.hosts == ["rtx-b", "local"]  # every other host, never h100-a
        await pilot.press("escape")
        await pilot.pause()
        assert fleet.calls == [] and not isinstance(app.screen, PickHostScreen)

        await press_m_on(app, pilot, "j3")
        await pilot.press("enter")  # the first option: rtx-b
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        question = app.screen.question
        assert "Move job j3" in question and "from h100-a to rtx-b" in question
        await pilot.press("n")
        await pilot.pause()
        assert fleet.calls == []

        await press_m_on(app, pilot, "j3")
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("y")
        await settle(app)
        assert fleet.calls == [("h100-a", "j3", "rtx-b")]
        assert any("h100-a/j3 -> rtx-b/j1" in n.message for n in app._notifications)


async def test_a_refused_move_says_host_job_cause_and_fix() -> None:
    app, fleet = make_app()
    fleet.fail_with = "rtx-b: queue add refused: disk full"
    async with app.run_test(size=(120, 40)) as pilot:
        await press_m_on(app, pilot, "j3")
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("y")
        await settle(app)
        await pilot.pause()
        errors = [n for n in app._notifications if n.severity == "error"]
        assert len(errors) == 1
        for part in ("j3", "h100-a", "disk full", "Fix:"):
            assert part in errors[0].message


def test_the_move_key_is_in_help_and_the_palette() -> None:
    [key] = [k for k in KEYS if k.action == "move_job"]
    assert key.key == "M" and key.palette and "another host" in key.description
