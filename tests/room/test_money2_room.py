"""Issue 19 items 6, 5 and 9 in the room: a spot notice, checkpoints on a disk a stop wipes and
a script changed under its job reach the banner and the findings screen (d), from polls
replayed through the real fleet API (ReplayFleet).

The polls are the committed recordings of the real helper (tests/data/doctor/parts.py), with
the keys the helper writes since issue 19 set as tests/system/test_preempt_ssh.py,
test_survival_ssh.py and test_drift_ssh.py see the real helper write them.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from paths import DATA

sys.path.insert(0, str(DATA / "doctor"))
import parts as rec

from gpuroom.tui.fleet.replay import Record, ReplayFleet
from gpuroom.tui.model import LinkState
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.tui.room.findings_screen import FindingsScreen
from gpuroom.widgets.banner import DangerBanner

T = rec.T0
BOOT = "6c1f2a9e-0b1d-4c55-9d0e-3f2b8a7c1d44"


def _poll(t: float) -> dict[str, Any]:
    j = rec.job(start=T - 600)
    j["ckpt_dir"] = "/root/.gpuroom/ckpt/default/j1"  # the container disk: a stop wipes it
    j["code_changed"] = ["/root/train.py"]
    snap = rec.snapshot(t, gpus=[rec.h100(0)], jobs=[j], boot_id=BOOT)
    view = next(iter(snap["queue"]["queues"].values()))
    view["preempt"] = {"cloud": "aws", "action": "terminate", "at": T + 120, "t": T,
                       "boot_id": BOOT, "signalled": 1}
    return snap


async def test_a_notice_a_wiped_checkpoint_dir_and_drift_reach_the_banner_and_findings() -> None:
    fleet = ReplayFleet([Record(t=T, host="pod", profile="runpod", state=LinkState.UP,
                                error=None, snapshot=_poll(T), price_per_hour=2.0)], speed=0)
    app = GpuroomApp(fleet, clock=fleet.now)
    async with app.run_test(size=(160, 40)) as pilot:
        await asyncio.wait_for(fleet.finished.wait(), 20)
        await pilot.pause()
        lines = [d.text for d in app.query_one(DangerBanner).items]
        assert any("aws preemption notice: the box goes in" in x and "[U45]" in x
                   for x in lines), lines
        await pilot.press("d")
        assert isinstance(app.screen, FindingsScreen)
        ids = {f.id for f in app.screen.findings}
        assert {"U45", "U46", "U2"} <= ids, ids
