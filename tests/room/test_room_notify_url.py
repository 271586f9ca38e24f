"""The room posts each new critical item to notify_url (a real HTTP server on 127.0.0.1),
deduplicated like the bell and notify_command (tests/room/test_room_ops.py): one decision
(tui/rules/alerts.py) for the three."""

from __future__ import annotations

from pathlib import Path

from harness.room import finish
from harness.webhook import webhook
from paths import DATA
from test_room_ops import replayed

from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.fleet.replay import ReplayFleet, load_recording
from gpuroom.tui.model import HostState
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.tui.rules.doctor import FIX


def _fleet(every_s: float) -> ReplayFleet:
    """The inode-full recording, its last poll repeated three times ``every_s`` apart."""
    records = load_recording(DATA / "doctor" / "inode_full.jsonl")
    last = records[-1]
    return ReplayFleet(records + [type(last)(**{**last.__dict__, "t": last.t + every_s * k})
                                  for k in (1, 2, 3)], speed=0)


async def test_notify_url_gets_each_new_critical_once_and_the_bell_rings_once(
        tmp_path: Path) -> None:
    fleet = _fleet(5)
    rings: list[int] = []
    with webhook() as hook:
        app = GpuroomApp(fleet, clock=fleet.now, bell=True, notify_url=hook.url)
        app.bell = lambda: rings.append(1)  # type: ignore[method-assign]
        async with app.run_test(size=(120, 36)) as pilot:
            await replayed(app, fleet, pilot)
            await finish(app, "notify")
    assert hook.bodies == [{"host": "h100-a", "id": "U7", "severity": "critical",
                            "text": "/data: inodes 100 % used", "fix": FIX["U7"]}]
    assert rings == [1]


async def test_with_a_short_renotify_interval_the_item_is_sent_again(tmp_path: Path) -> None:
    last = load_recording(DATA / "doctor" / "inode_full.jsonl")[-1]
    assert last.snapshot is not None
    fleet = StaticFleet([HostState(name=last.host, profile=last.profile)])
    now = [last.t]
    with webhook() as hook:
        app = GpuroomApp(fleet, clock=lambda: now[0], notify_url=hook.url, renotify_s=30)
        async with app.run_test(size=(120, 36)) as pilot:
            # One poll at a time, each handled before the next: +0 s, +20 s (within the
            # interval: not again), +60 s and +120 s (again each time).
            for dt in (0, 20, 60, 120):
                now[0] = last.t + dt
                fleet.feed(last.host, last.snapshot, now[0])
                await pilot.pause()
                await finish(app, "notify")
    assert [b["id"] for b in hook.bodies] == ["U7"] * 3
