"""A host whose helper failed a probe section is marked in the hosts row and reaches the
banner, so the room never says "fleet OK" over a blind spot (issue 18 item 2, U44).

The healthy recording, with one host's errors[] replaced by what the real ProbeSession wrote
when its kernel collector raised (tests/harness/boxenv.py).
"""

from __future__ import annotations

import json
import os
import time

import pytest
from harness.boxenv import probe_with_a_broken_section

from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.widgets.banner import DangerBanner
from gpuroom.widgets.hosts import HostsTable

os.environ["TZ"] = "UTC"
time.tzset()

from paths import DATA  # noqa: E402  (after TZ is pinned, like the app's imports)


async def test_a_failed_section_marks_the_row_and_the_banner(
        monkeypatch: pytest.MonkeyPatch) -> None:
    errors = probe_with_a_broken_section(monkeypatch)["errors"]
    data = json.loads((DATA / "scenario-healthy.json").read_text())
    host = next(h for h in data["hosts"] if h["name"] == "rtx-b")
    for snap in [host["snapshot"], *(p["snapshot"] for p in host.get("history") or ())]:
        snap["errors"] = errors
    app = GpuroomApp(StaticFleet.from_scenario(data), clock=lambda: float(data["now"]))
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        rows = {r.name: r for r in app.query_one(HostsTable).hosts}
        assert (rows["rtx-b"].state, rows["rtx-b"].level) == ("UP, kernel failed", "warn")
        assert rows["h100-a"].state == "UP"
        items = app.query_one(DangerBanner).items
        assert any("rtx-b" in d.text and "'kernel'" in d.text and "[U44]" in d.text
                   for d in items), items
