"""Issue 19 in the room: a stalled job, training on the CPU, a dead GPU, a reboot or a dead
runner, a late checkpoint and what a log says reach the banner, the hosts row and the findings
screen (d), from polls replayed through the real fleet API (ReplayFleet).

The polls are the committed recordings of the real helper (tests/data/doctor/parts.py), varied
where the situation needs it; keys the helper writes since issue 19 are set as in
tests/unit/tui/test_money_rules.py.
"""

from __future__ import annotations

import asyncio
import base64
import sys
from collections.abc import Callable
from typing import Any

import pytest
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


def _record(t: float, snap: dict[str, Any], price: float | None = None,
            profile: str = "generic-ssh") -> Record:
    return Record(t=t, host="h100-a", profile=profile, state=LinkState.UP, error=None,
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


def _no_gpu(t: float) -> dict[str, Any]:
    """Item 2: a RunPod box whose probe finds no GPU (the driver does not answer)."""
    snap = rec.snapshot(t)
    snap["gpu_error"] = "NVML: Driver Not Loaded"
    return snap


def _other_boot(t: float) -> dict[str, Any]:
    """Item 4: the queue says j1 runs since a boot that is not the box's (a room opened after
    a reboot)."""
    return rec.snapshot(t, gpus=[rec.h100(0)], jobs=[rec.job()], boot_id="b" * 36)


def _dead_runner(t: float) -> dict[str, Any]:
    """Item 4: a job waits and no runner holds the queue's lock."""
    snap = rec.snapshot(t, gpus=[rec.h100(0)], jobs=[rec.job(state="queued")])
    for q in snap["queue"]["queues"].values():
        q["runner"].update(alive=False, reboot_hook=True)
    return snap


def _no_checkpoint(t: float) -> dict[str, Any]:
    """Item 7: j1 has run 2 h on a spot-capable box with nothing in its checkpoint dir."""
    j = rec.job(start=t - 7200)
    j["checkpoint"] = None
    return rec.snapshot(t, gpus=[rec.h100(0)], jobs=[j])


def _oom_log(t: float) -> dict[str, Any]:
    """Item 8: the new log bytes of j1 hold a CUDA OOM."""
    j = rec.job()
    j["log_chunk"]["data_b64"] = base64.b64encode(
        b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n").decode()
    return rec.snapshot(t, gpus=[rec.h100(0)], jobs=[j])


SITUATIONS: list[tuple[str, Callable[[float], dict[str, Any]], str, str, str]] = [
    # (profile, poll, finding id, the banner's line, the hosts row's mark)
    ("runpod", _no_gpu, "U31", "CRITICAL h100-a: no GPU on a box rented for GPUs [U31]", "!!"),
    ("generic-ssh", _other_boot, "GEN6",
     "CRITICAL h100-a: job j1 (train) is not running: the box rebooted [GEN6]", "!!"),
    ("generic-ssh", _dead_runner, "GEN6", "WARN h100-a: queue default: its runner is dead [GEN6]",
     "!"),
    ("vastai", _no_checkpoint, "principle 8",
     "CRITICAL h100-a: job j1 (train): no checkpoint after 2.0 h [principle 8]", "!!"),
    ("generic-ssh", _oom_log, "U10", "CRITICAL h100-a: job j1 (train): CUDA out of memory [U10]",
     "!!"),
]


@pytest.mark.parametrize(("profile", "poll", "fid", "line", "mark"), SITUATIONS,
                         ids=["cpu-training", "other-boot", "dead-runner", "no-checkpoint",
                              "cuda-oom"])
async def test_each_money_finding_reaches_the_banner_the_row_and_the_findings_screen(
        profile: str, poll: Callable[[float], dict[str, Any]], fid: str, line: str,
        mark: str) -> None:
    app, fleet = await _room([_record(T, poll(T), profile=profile)])
    async with app.run_test(size=(160, 40)) as pilot:
        await asyncio.wait_for(fleet.finished.wait(), 20)
        await pilot.pause()
        lines = [d.text for d in app.query_one(DangerBanner).items]
        assert any(x.startswith(line) for x in lines), lines
        (row,) = app.query_one(HostsTable).hosts
        assert row.findings.endswith(mark), row.findings
        await pilot.press("d")
        assert isinstance(app.screen, FindingsScreen)
        assert [f for f in app.screen.findings if f.id == fid]


async def test_a_healthy_running_job_brings_none_of_them() -> None:
    app, fleet = await _room([_record(T, rec.snapshot(T, gpus=[rec.h100(0)], jobs=[rec.job()]),
                                      profile="vastai")])
    async with app.run_test(size=(160, 40)) as pilot:
        await asyncio.wait_for(fleet.finished.wait(), 20)
        await pilot.pause()
        await pilot.press("d")
        assert isinstance(app.screen, FindingsScreen)
        ids = {f.id for f in app.screen.findings}
        assert not ids & {"U16", "U31", "U22", "GEN6", "principle 8", "U10", "U28", "U35",
                          "U26"}, ids
