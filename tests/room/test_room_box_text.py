"""Box text in the room: whatever a box sends as text or as a job id, the room stays up and
shows it as text."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest
from paths import DATA

from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.widgets.queue import QueueTable

os.environ["TZ"] = "UTC"
time.tzset()


@pytest.mark.attack("trust", "a box whose queue answer names one job id twice (two queues, or "
                    "a forged line) while the room shows its queue pane")
async def test_a_job_id_sent_twice_does_not_close_the_room() -> None:
    data: dict[str, Any] = json.loads((DATA / "scenario-healthy.json").read_text())
    queues = data["hosts"][0]["snapshot"]["queue"]["queues"]
    queues["other"] = json.loads(json.dumps(queues["default"]))  # the same ids again
    fleet = StaticFleet.from_scenario(data)
    now = float(data["now"])
    app = GpuroomApp(fleet, clock=lambda: now)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("enter")
        await pilot.pause()
        assert app.is_running
        ids = [j.id for j in app.query_one(QueueTable).jobs]
        assert len(ids) == 2 * len(set(ids))  # the pane's rows say the box sent each twice
        assert app.query_one(QueueTable).row_count == len(set(ids))
    assert app.return_code in (None, 0)
