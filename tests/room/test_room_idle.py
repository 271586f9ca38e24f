"""The room opened on a box idle for hours: the banner says the hours and the money at its
first poll, from the box's own answer (the probe's idle section, remote/idle.py)."""

from __future__ import annotations

import sys

from paths import DATA

from gpuroom.remote import idle as box_idle
from gpuroom.remote.probe import ProbeSession
from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.model import HostState
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.widgets.banner import DangerBanner

sys.path.insert(0, str(DATA / "doctor"))
import parts as rec

T = rec.T0
HOUR = 3600.0


async def test_the_first_poll_of_a_box_idle_ten_hours_shows_them_and_the_money() -> None:
    done = rec.ended(rec.job(), "succeeded", T - 10 * HOUR, exit_code=0)
    snap = rec.snapshot(T, gpus=[rec.idle_gpu()], jobs=[done], uptime_s=48 * HOUR)
    snap.update(box_idle.derive(ProbeSession(), snap, now=T))
    fleet = StaticFleet([HostState(name="box", profile="generic-ssh", price_per_hour=2.5)])
    app = GpuroomApp(fleet, clock=lambda: T)
    async with app.run_test(size=(120, 36)) as pilot:
        fleet.feed("box", snap, T)
        await pilot.pause()
        lines = [d.text for d in app.query_one(DangerBanner).items]
    (line,) = [x for x in lines if "idle" in x]
    assert line.startswith("CRITICAL box: idle 10.0 h") and "$25.00 burnt" in line
