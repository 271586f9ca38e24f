"""Issue 19 in the room: a stalled job and a dead GPU reach the banner, the hosts row and the
findings screen (d), from polls replayed through the real fleet API (ReplayFleet).

The polls are the committed recordings of the real helper (tests/data/doctor/parts.py), varied
where the situation needs it; keys the helper writes since issue 19 are set as in
tests/unit/tui/test_money_rules.py.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from fakes import capture
from paths import DATA

sys.path.insert(0, str(DATA / "doctor"))
import parts as rec

from gpuroom.remote.kernel import parse_kernel_log
from gpuroom.tui.fleet.replay import Record, ReplayFleet
from gpuroom.tui.model import LinkState
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.tui.room.findings_screen import FindingsScreen
from gpuroom.widgets.banner import DangerBanner
from gpuroom.widgets.hosts import HostsTable

T = rec.T0


def _stalled(t: float) -> dict[str, Any]:
    """j1 running 2 h, its log and checkpoint last written 70 min before T, GPU at 60 W."""
    j = rec.job(start=T - 7200, ckpt={"path": "/w/ckpt/latest.pt", "size": 2.0,
                                      "mtime": T - 4200})
    j["log_chunk"]["mtime"] = T - 4200
    j["cpu_s"] = 12.0
    return rec.snapshot(t, gpus=[rec.h100(0, power=60.0, util=0.0)], jobs=[j])


async def _room(records: list[Record]) -> tuple[GpuroomApp, ReplayFleet]:
    fleet = ReplayFleet(records, speed=0)
    return GpuroomApp(fleet, clock=fleet.now), fleet


def _record(t: float, snap: dict[str, Any], price: float | None = None) -> Record:
    return Record(t=t, host="h100-a", profile="generic-ssh", state=LinkState.UP, error=None,
                  snapshot=snap, price_per_hour=price)


async def test_a_stalled_job_reaches_the_banner_the_row_and_the_findings_screen() -> None:
    app, fleet = await _room([_record(T, _stalled(T), 2.49), _record(T + 5, _stalled(T + 5),
                                                                      2.49)])
    async with app.run_test(size=(140, 40)) as pilot:
        await asyncio.wait_for(fleet.finished.wait(), 20)
        await pilot.pause()
        lines = [d.text for d in app.query_one(DangerBanner).items]
        assert "CRITICAL h100-a: job j1 (train) stalled while billing [U16]" in lines
        (row,) = app.query_one(HostsTable).hosts
        assert row.findings.endswith("!!")
        await pilot.press("d")
        assert isinstance(app.screen, FindingsScreen)
        (stall,) = [f for f in app.screen.findings if f.id == "U16"]
        assert "$2.91 burnt since it stalled" in stall.seen


async def test_a_dead_gpu_with_no_job_reaches_the_banner() -> None:
    events = parse_kernel_log(capture("dmesg_xid/gpud1174-1160-kmsg-xid144-145-149-94.txt"))
    app, fleet = await _room([_record(T, rec.snapshot(T, gpus=[rec.h100(0)], events=events))])
    async with app.run_test(size=(140, 40)) as pilot:
        await asyncio.wait_for(fleet.finished.wait(), 20)
        await pilot.pause()
        lines = [d.text for d in app.query_one(DangerBanner).items]
        assert any("Xid 94: this GPU is dead or dying [U22]" in x for x in lines), lines
