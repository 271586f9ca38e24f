"""Issue 20 items 3 and 4 in the room: the GPU pane's process rows, marked job / foreign /
zombie, and the box line (the job cgroup's CPU against its quota, memory against its limit,
load per vCPU) with its history; the hosts table's compact "cpu mem" column.

Data: tests/data/scenario-healthy.json (the real helper's snapshots of the 8xH100 replay),
with what an older recording lacks filled in the way today's helper writes it: each process's
user and process group (ranks 0-6 in the running job's group, rank 7 someone else's), a
/dev/nvidia* holder the list does not show, and the cgroup's CPU time at two polls.
"""

from __future__ import annotations

import copy
import json
import os
import time
from typing import Any

from textual.pilot import Pilot

from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.widgets.gpu import GpuPanel
from gpuroom.widgets.hosts import HostsTable

os.environ["TZ"] = "UTC"
time.tzset()

from paths import DATA  # noqa: E402

GIB = 1024 ** 3


def scenario() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / "scenario-healthy.json").read_text())
    h100 = data["hosts"][0]
    snap = h100["snapshot"]
    running = next(j for q in snap["queue"]["queues"].values() for j in q["jobs"]
                   if j["state"] == "running")
    group = running["attempts"][-1]["pid"]
    for g in snap["gpus"]:
        for p in g["processes"]:
            p["name"] = "/usr/bin/python"
            p["user"], p["pgid"] = ("alice", group) if g["index"] < 7 else ("bob", p["pid"])
    snap["vram_holders"] = [{"pid": 4242, "comm": "python3", "state": "S", "user": "carol",
                             "cmdline": "python3 dead_rank.py", "devices": ["/dev/nvidia3"]}]
    snap["cgroup"].update(cpu_quota_vcpus=2.0, memory_max=8 * GIB, memory_current=7 * GIB,
                          cpu_usage_usec=50_000_000)
    earlier = copy.deepcopy(snap)
    earlier["host"]["time"] -= 2.0
    earlier["cgroup"]["cpu_usage_usec"] = 47_000_000
    earlier["cgroup"]["memory_current"] = 6 * GIB
    h100["history"] = [{"at": earlier["host"]["time"], "snapshot": earlier}]
    return data


def room() -> tuple[GpuroomApp, StaticFleet, float]:
    data = scenario()
    fleet = StaticFleet.from_scenario(data)
    now = float(data["now"])
    return GpuroomApp(fleet, clock=lambda: now), fleet, now


async def settle(fleet: StaticFleet, pilot: Pilot[Any]) -> None:
    for _ in fleet.play_backlog():
        await pilot.pause()
    await pilot.pause()


async def test_the_gpu_pane_marks_the_jobs_ranks_a_foreign_rank_and_a_zombie() -> None:
    app, fleet, _ = room()
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(fleet, pilot)
        view = app.query_one(GpuPanel).view
        assert view is not None and view.host == "h100-a"
        marks = [(p.gpu, p.mark_text, p.user) for p in view.processes]
        assert marks == [*((str(i), "job j3", "alice") for i in range(7)),
                         ("7", "foreign", "bob"), ("?", "zombie U11", "carol")]
        # The box: 1.5 of 2 quota vCPUs over the two polls, 7 of 8 GiB, both polls kept
        # (StaticFleet shows the final state once before it plays the backlog).
        box = view.box
        assert box is not None
        assert box.parts()[:2] == ("cpu 1.5/2 vCPU", "mem 7.0GiB/8.0GiB")
        assert box.mem_history[-2:] == (75.0, 87.5) and box.cpu_history[-1] == 75.0
        hosts = {r.name: r for r in app.query_one(HostsTable).hosts}
        assert (hosts["h100-a"].box, hosts["h100-a"].box_level) == ("75% 88%", "warn")


async def test_p_shows_every_process_in_the_whole_pane_and_back() -> None:
    app, fleet, _ = room()
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(fleet, pilot)
        gpu = app.query_one(GpuPanel)
        assert not gpu.show_processes and str(gpu.border_title) == "gpu h100-a (p: 9 processes)"
        await pilot.press("p")
        assert gpu.show_processes
        assert str(gpu.border_title) == "gpu processes h100-a (p: GPU rows)"
        # All nine rows fit once the GPU rows give way (each rendered line is one row).
        lines = [str(line.text) for line in gpu.render_lines(gpu.region.reset_offset)]
        assert sum("job j3" in line for line in lines) == 7
        assert any("zombie U11" in line for line in lines)
        await pilot.press("p")
        assert not gpu.show_processes


def test_gpu_processes_and_box_line_120x36(snap_compare: Any) -> None:
    app, fleet, _ = room()

    async def before(pilot: Pilot[Any]) -> None:
        await settle(fleet, pilot)

    assert snap_compare(app, terminal_size=(120, 36), run_before=before)


def test_gpu_processes_toggled_120x36(snap_compare: Any) -> None:
    app, fleet, _ = room()

    async def before(pilot: Pilot[Any]) -> None:
        await settle(fleet, pilot)

    assert snap_compare(app, terminal_size=(120, 36), run_before=before, press=["p"])
