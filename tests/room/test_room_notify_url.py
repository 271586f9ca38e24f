"""The room posts each new critical item to notify_url (a real HTTP server on 127.0.0.1),
deduplicated like the bell and notify_command: one decision for the three."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.room import finish
from harness.webhook import webhook
from paths import DATA
from test_room_ops import replayed

from gpuroom.tui.fleet.replay import ReplayFleet, load_recording
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.tui.rules.doctor import FIX


async def test_notify_url_gets_each_new_critical_once_with_the_command_and_bell(
        tmp_path: Path) -> None:
    out = tmp_path / "notes"
    script = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')"
    records = load_recording(DATA / "doctor" / "inode_full.jsonl")
    again = [type(records[-1])(**{**records[-1].__dict__, "t": records[-1].t + 5 * k})
             for k in (1, 2, 3)]
    fleet = ReplayFleet(records + again, speed=0)
    with webhook() as hook:
        app = GpuroomApp(fleet, clock=fleet.now, bell=True, notify_url=hook.url,
                         notify_command=[sys.executable, "-c", script, str(out)])
        rings: list[int] = []
        app.bell = lambda: rings.append(1)  # type: ignore[method-assign]
        async with app.run_test(size=(120, 36)) as pilot:
            await replayed(app, fleet, pilot)
            await finish(app, "notify")
    assert hook.bodies == [{"host": "h100-a", "id": "U7", "severity": "critical",
                            "text": "/data: inodes 100 % used",
                            "fix": FIX["U7"]}]
    assert out.read_text().splitlines() == ["CRITICAL h100-a: /data: inodes 100 % used [U7]"]
    assert rings == [1]


async def test_with_a_short_renotify_interval_the_item_is_sent_again(tmp_path: Path) -> None:
    records = load_recording(DATA / "doctor" / "inode_full.jsonl")
    again = [type(records[-1])(**{**records[-1].__dict__, "t": records[-1].t + 60 * k})
             for k in (1, 2)]
    fleet = ReplayFleet(records + again, speed=0)
    with webhook() as hook:
        app = GpuroomApp(fleet, clock=fleet.now, notify_url=hook.url, renotify_s=30)
        async with app.run_test(size=(120, 36)) as pilot:
            await replayed(app, fleet, pilot)
            await finish(app, "notify")
    assert [b["id"] for b in hook.bodies] == ["U7", "U7", "U7"]
