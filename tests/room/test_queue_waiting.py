"""Issue 17 item 9: a queued job says why it waits, in the room's queue pane."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from textual.widgets import DataTable

from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.present.jobs import job_rows
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.widgets.queue import QueueTable

os.environ["TZ"] = "UTC"
time.tzset()

from paths import DATA  # noqa: E402  (after TZ is pinned, like the app's imports)

WHY = "GPU 0 held by pid 4242 (GEN7); wants 1 GPU(s), 0 free"
EVIL = "\x1b]52;c;cm0gLXJmIH4=\x07[b]x[/b]"


def _scenario() -> dict[str, Any]:
    data = json.loads((DATA / "scenario-healthy.json").read_text())
    host = data["hosts"][0]
    for job in host["snapshot"]["queue"]["queues"]["default"]["jobs"]:
        if job["state"] == "queued":
            job["waiting"] = WHY + EVIL  # what the box's queue_view writes, and a forgery
    return data


def test_the_row_of_a_queued_job_says_why_it_waits() -> None:
    h = _scenario()["hosts"][0]
    state = HostState(name=h["name"], state=LinkState.UP, snapshot=h["snapshot"],
                      last_ok=h["last_ok"])
    rows = {r.id: r for r in job_rows(state, 0.0)}
    assert rows["j4"].state_text == f"queued: {WHY}[b]x[/b]"  # inert: no escape left
    assert rows["j3"].state_text == "running"


async def test_the_queue_pane_shows_the_reason_cut_with_a_mark() -> None:
    data = _scenario()
    fleet = StaticFleet.from_scenario(data)
    app = GpuroomApp(fleet, clock=lambda: float(data["now"]))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        table = app.query_one(QueueTable)
        cells = DataTable.get_row(table, "j4")
        state = cells[2].plain
        assert state.startswith("queued: GPU 0 held by pid 4242 (GEN7)")
        assert state.endswith("…") and len(state) == 40
        assert "\x1b" not in state
