"""The gate's items for what a finished queue still leaves at risk (issue 19 item 11, P9, U20):
GPU work gpuroom did not start, declared outputs not copied, tracker run dirs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuroom.remote.gpu import parse_nvsmi_table
from gpuroom.tui.rules.gate import evaluate
from gpuroom.tui.rules.gate_items import gpu_work_item, outputs_item, rundirs_item
from gpuroom.tui.snapshot import Snapshot, read_rundirs, read_snapshot


def table(fixtures: Path, rel: str) -> list[dict[str, Any]]:
    """The capture's GPUs, each with its processes, as the helper's snapshot carries them."""
    doc = parse_nvsmi_table((fixtures / rel).read_text().split("---\n", 1)[1])
    for gpu in doc["gpus"]:
        gpu["processes"] = [p for p in doc["processes"] if p["gpu"] == gpu["index"]]
    return list(doc["gpus"])


def snap(gpus: list[dict[str, Any]], jobs: list[dict[str, Any]] | None = None,
         holders: list[dict[str, Any]] | None = None) -> Snapshot:
    return read_snapshot({"gpus": {"gpus": gpus}, "vram_holders": holders or [],
                          "queue": {"queues": {"default": {"jobs": jobs or []}}}})


def test_a_foreign_process_on_an_h100_closes_the_gate(fixtures: Path) -> None:
    gpus = table(fixtures, "nvsmi_table/driver535-8xH100-with-processes.txt")
    item = gpu_work_item(snap(gpus, [{"id": "j1", "state": "succeeded"}]))
    assert not item.ok
    assert "GPU 0: pid 3375095 /usr/bin/python, 18GiB at 259 W of 700 W" in item.detail
    assert "(+3)" in item.detail  # eight processes, five named


def test_a_desktop_s_display_processes_at_idle_power_leave_it_open(fixtures: Path) -> None:
    gpus = table(fixtures, "nvsmi_table/driver460-gtx1080-with-processes.txt")
    item = gpu_work_item(snap(gpus))  # Xorg and gnome-shell (type G) at 7 of 230 W
    assert item.ok, item.detail


def test_power_with_no_process_listed_and_a_device_holder_close_it(fixtures: Path) -> None:
    gpus = table(fixtures, "nvsmi_table/driver535-8xH100-with-processes.txt")
    for gpu in gpus:
        gpu["processes"] = []  # another container's processes are not listed in this one
    item = gpu_work_item(snap(gpus[:1]))
    assert not item.ok and "GPU 0: 259 W of 700 W with no process listed" in item.detail
    idle = table(fixtures, "nvsmi_table/driver460-gtx1080-with-processes.txt")
    held = gpu_work_item(snap(idle, holders=[{"pid": 42, "comm": "python3", "state": "S"}]))
    assert not held.ok and "pid 42 python3 holds /dev/nvidia*" in held.detail


def test_live_jobs_and_a_cpu_box_leave_the_gpu_item_to_others(fixtures: Path) -> None:
    gpus = table(fixtures, "nvsmi_table/driver535-8xH100-with-processes.txt")
    assert gpu_work_item(snap(gpus, [{"id": "j1", "state": "running"}])).ok
    assert gpu_work_item(snap([])).ok
    assert not gpu_work_item(None).ok


def job(state: str, sync: str | None, outputs: tuple[str, ...] = ("out/*.pt",)) -> dict[str, Any]:
    return {"id": "j1", "state": state, "outputs": list(outputs), "cwd": "/w",
            "sync": {"state": sync, "dest": "/vol"} if sync else None}


@pytest.mark.parametrize(("sync", "why"), [(None, "no durable dir was set"),
                                           ("pending", "copy still running"),
                                           ("failed", "the copy failed")])
def test_declared_outputs_not_synced_close_the_gate(sync: str | None, why: str) -> None:
    item = outputs_item(snap([], [job("succeeded", sync)]).jobs)
    assert not item.ok and "j1 --output out/*.pt" in item.detail and why in item.detail


def test_synced_outputs_and_jobs_without_outputs_leave_it_open() -> None:
    assert outputs_item(snap([], [job("succeeded", "synced")]).jobs).ok
    assert outputs_item(snap([], [job("succeeded", None, ())]).jobs).ok
    assert outputs_item(snap([], [job("failed", None)]).jobs).ok  # never copied: no output


def rundirs(*dirs: dict[str, Any], truncated: bool = False) -> Any:
    return read_rundirs({"ok": True, "cut": False, "scans": [
        {"cwd": "/w", "since": 1.0, "truncated": truncated, "dirs": list(dirs)}]})


def test_tensorboard_and_offline_wandb_dirs_close_the_gate() -> None:
    jobs = snap([], [job("succeeded", None, ())]).jobs
    item = rundirs_item(jobs, rundirs({"path": "runs/exp1", "kind": "tensorboard"},
                                      {"path": "wandb/offline-run-x", "kind": "wandb-offline"}))
    assert not item.ok
    assert "j1: /w/runs/exp1 (tensorboard)" in item.detail
    assert "/w/wandb/offline-run-x (wandb-offline)" in item.detail
    assert "rsync -a" in item.detail


def test_online_wandb_or_nothing_leaves_it_open_and_a_cut_walk_or_no_answer_closes_it() -> None:
    jobs = snap([], [job("succeeded", None, ())]).jobs
    online = rundirs_item(jobs, rundirs({"path": "wandb/run-x", "kind": "wandb"}))
    assert online.ok and "1 online wandb run" in online.detail
    assert rundirs_item(jobs, rundirs()).ok
    assert not rundirs_item(jobs, rundirs(truncated=True)).ok
    assert not rundirs_item(jobs, "rundirs failed (exit 2)").ok


def test_evaluate_adds_the_items_and_a_foreign_process_makes_it_unsafe(fixtures: Path) -> None:
    gpus = table(fixtures, "nvsmi_table/driver535-8xH100-with-processes.txt")
    result = evaluate("box", snap(gpus, [{"id": "j1", "state": "succeeded"}]), [], {},
                      run_dirs=rundirs())
    assert not result.safe
    assert [i.name for i in result.items if not i.ok] == ["no GPU work outside gpuroom's jobs"]
