"""A running Slurm job's nodes, as its in-allocation probe saw them (issue 23), in the room's
GPU pane and under the doctor's GPU, disk and memory rules. On tests/data/slurm/allocation.jsonl
(recorded from the real test cluster with the nvidia-smi replay); no Slurm is started here."""

from __future__ import annotations

import copy
import json
from typing import Any

from paths import DATA

from gpuroom.tui.model import LinkState
from gpuroom.tui.present.gpus import gpu_absence, gpu_rows
from gpuroom.tui.rules.doctor import diagnose
from gpuroom.tui.snapshot import read_snapshot

LINES = [json.loads(raw) for raw in (DATA / "slurm" / "allocation.jsonl").read_text()
         .splitlines()]
LAST = LINES[-1]["snapshot"]


def sleeper(snap: dict[str, Any]) -> dict[str, Any]:
    return next(j for j in snap["queue"]["queues"]["default"]["jobs"]
                if j["name"] == "sleeper")


def node(snap: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = sleeper(snap)["telemetry"]["nodes"][0]
    return node


def findings(prev: dict[str, Any] | None, snap: dict[str, Any]) -> list[Any]:
    t = snap["host"]["time"]
    return diagnose(read_snapshot(prev) if prev is not None else None, read_snapshot(snap),
                    LinkState.UP, None, t, host="login")


def test_the_jobs_gpus_follow_the_login_nodes_named_with_node_and_job() -> None:
    snap = read_snapshot(LAST)
    job = sleeper(LAST)
    names = [r.name for r in gpu_rows(snap)]
    own = [g["name"] for g in LAST["gpus"]]  # the replay answers the recorder too
    assert names == [*own, *[f"vm {job['id']}: {g['name']}" for g in node(LAST)["gpus"]]]


def test_a_login_node_without_gpus_shows_the_jobs() -> None:
    snap = copy.deepcopy(LAST)
    snap["gpus"], snap["gpu_error"] = [], "no nvidia-smi on PATH"
    rows = gpu_rows(read_snapshot(snap))
    assert len(rows) == 2 and all(r.name.startswith("vm j") for r in rows)
    assert gpu_absence(read_snapshot(snap)) is None


def test_the_gpu_rules_apply_to_the_jobs_node() -> None:
    snap = copy.deepcopy(LAST)
    gpu = node(snap)["gpus"][0]
    gpu.update(clock_event_reasons=["sw_thermal_slowdown"], temp_c=88)
    found = [f for f in findings(None, snap) if f.id == "U23"]
    assert [f.host for f in found] == ["login/vm"]
    assert "sw_thermal_slowdown" in found[0].seen


def test_the_disk_rules_apply_to_the_jobs_node() -> None:
    snap = copy.deepcopy(LAST)
    disk = next(d for d in node(snap)["disks"] if not d.get("error"))
    disk["ffree_inodes"] = disk["free_inodes"] = disk["total_inodes"] * 0.001
    assert "login/vm" in {f.host for f in findings(None, snap) if f.id == "U7"}


def test_an_oom_kill_in_the_jobs_cgroup_is_slurm4() -> None:
    before, after = copy.deepcopy(LAST), copy.deepcopy(LAST)
    node(after)["cgroup"]["oom_kill"] = node(before)["cgroup"]["oom_kill"] + 1
    (f,) = [f for f in findings(before, after) if f.id == "SLURM4"]
    assert f.host == "login/vm" and "oom_kill 0 -> 1" in f.seen
    assert not [f for f in findings(before, before) if f.id == "SLURM4"]


def test_a_slurm_job_idling_its_own_gpus_is_u38() -> None:
    before, after = copy.deepcopy(LAST), copy.deepcopy(LAST)
    for snap, size in ((before, 100), (after, 900)):  # the log grew between the polls
        sleeper(snap)["log_chunk"] = {"offset": 0, "next_offset": size, "size": size,
                                      "inode": 1, "data_b64": "", "reset": False}
        for gpu in node(snap)["gpus"]:
            gpu["util_gpu_pct"] = 0
    (f,) = [f for f in findings(before, after) if f.id == "U38"]
    assert f"({sleeper(LAST)['name']}) runs with the GPU at ~0 % util" in f.title
    # Without an in-allocation probe there is nothing to judge: the login node's GPUs are
    # not the job's.
    for snap in (before, after):
        del sleeper(snap)["telemetry"]
    assert not [f for f in findings(before, after) if f.id == "U38"]
