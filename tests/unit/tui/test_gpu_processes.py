"""Issue 20 item 3: the GPU pane's process list, nvitop-like, on the real nvidia-smi captures.

Each process is marked: one of the box's gpuroom jobs (its pid or process group is a running
attempt's pid: the runner starts every attempt in its own session), a display process (type G,
ignored by the free-GPU check, GEN7), a foreign process, or a zombie holder of /dev/nvidia*
the process list does not show (U11).
"""

from __future__ import annotations

from typing import Any

import pytest
from paths import FIXTURES

from gpuroom.remote.gpu import parse_nvsmi_table
from gpuroom.tui.present.gpus import gpu_processes
from gpuroom.tui.snapshot import read_snapshot


def table_processes(name: str) -> list[dict[str, Any]]:
    text = (FIXTURES / "nvsmi_table" / name).read_text(encoding="utf-8")
    rows: list[dict[str, Any]] = parse_nvsmi_table(text.split("\n---\n", 1)[1])["processes"]
    return rows


def snapshot(processes: list[dict[str, Any]], jobs: list[dict[str, Any]] | None = None,
             holders: list[dict[str, Any]] | None = None) -> Any:
    gpus: dict[int, list[dict[str, Any]]] = {}
    for p in processes:
        gpus.setdefault(p["gpu"], []).append(p)
    return read_snapshot({
        "gpus": [{"index": i, "processes": ps} for i, ps in sorted(gpus.items())],
        "vram_holders": holders or [],
        "queue": {"queues": {"default": {"jobs": jobs or []}}}})


def test_ddp_ranks_in_the_jobs_process_group_are_the_job_and_a_stray_rank_is_foreign() -> None:
    # The 8xH100 capture: one python per GPU. A gpuroom job whose attempt started as pid
    # 3375090 (torchrun); ranks 0-6 are in its process group, rank 7 was started by hand.
    procs = table_processes("driver535-8xH100-with-processes.txt")
    assert len(procs) == 8
    for p in procs:
        p["user"] = "alice"
        p["pgid"] = 3375090 if p["pid"] != 3375102 else 3375102
    job = {"id": "j7", "state": "running", "argv": ["torchrun", "train.py"],
           "attempts": [{"attempt": 1, "pid": 3375090, "start": 1.0}]}
    rows = gpu_processes(snapshot(procs, [job]))
    assert [(r.gpu, r.pid, r.mark) for r in rows] == [
        *((str(i), str(3375095 + i), "job") for i in range(7)), ("7", "3375102", "foreign")]
    first = rows[0]
    assert (first.user, first.type, first.command, first.vram, first.mark_text) == (
        "alice", "C", "/usr/bin/python", "18430", "job j7")
    assert rows[-1].level == "warn"


def test_a_finished_attempts_pid_no_longer_claims_a_process() -> None:
    # pids are reused: an attempt that ended says nothing of whoever holds its number now.
    procs = table_processes("driver535-8xH100-with-processes.txt")[:1]
    job = {"id": "j1", "state": "succeeded",
           "attempts": [{"attempt": 1, "pid": 3375095, "start": 1.0, "end": 2.0}]}
    assert [r.mark for r in gpu_processes(snapshot(procs, [job]))] == ["foreign"]


def test_display_processes_are_marked_display_and_zombies_come_last() -> None:
    # The GTX 1080 desktop capture: Xorg and gnome-shell (type G); plus a holder of
    # /dev/nvidia0 the process list does not show (U11).
    procs = table_processes("driver460-gtx1080-with-processes.txt")
    holder = {"pid": 4242, "comm": "python3", "state": "S", "user": "bob",
              "cmdline": "python3 dead_rank.py", "devices": ["/dev/nvidia0"]}
    rows = gpu_processes(snapshot(procs, holders=[holder]))
    assert [(r.pid, r.type, r.command, r.mark) for r in rows] == [
        ("1335", "G", "/usr/libexec/Xorg", "display"),
        ("1476", "G", "/usr/bin/gnome-shell", "display"),
        ("4242", "-", "python3 dead_rank.py", "zombie")]
    assert rows[-1].gpu == "?" and rows[-1].user == "bob" and rows[-1].level == "crit"
    assert rows[-1].mark_text == "zombie U11"


@pytest.mark.attack("hostile text", "a GPU process's name, user and a zombie's cmdline carry "
                    "OSC 52 and SGR escape sequences")
def test_box_text_in_a_process_row_is_inert() -> None:
    procs = [{"gpu": 0, "pid": 7, "type": "C\x1b[2J", "name": "evil\x1b]52;c;aGk=\x07x",
              "used_mib": 5, "user": "\x1b[31mroot"}]
    holder = {"pid": 8, "comm": "x", "cmdline": "python3 \x1b]52;c;aGk=\x07", "user": "\x9b2J"}
    rows = gpu_processes(snapshot(procs, holders=[holder]))
    assert [r.mark for r in rows] == ["foreign", "zombie"]
    for row in rows:
        for cell in (row.command, row.user, row.type):
            assert "\x1b" not in cell and "\x07" not in cell and "\x9b" not in cell
    assert gpu_processes(None) == []


@pytest.mark.attack("bad answers", "a process row with a bool pid, a list pgid, a numeric user "
                    "and NaN VRAM, and a processes field that is not a list")
def test_torn_process_fields_read_as_unknown_never_as_a_job() -> None:
    job = {"id": "j1", "state": "running", "attempts": [{"attempt": 1, "pid": 1, "start": 1.0}]}
    procs = [{"gpu": 0, "pid": True, "pgid": [1], "user": 5, "used_mib": "NaN", "type": None}]
    row = gpu_processes(snapshot(procs, [job]))[0]
    # True is no pid 1 (the number rule): the job's attempt does not claim this row.
    assert (row.pid, row.user, row.vram, row.type, row.mark) == ("-", "5", "-", "-", "foreign")
    snap = read_snapshot({"gpus": [{"index": 0, "processes": "pid 1"}]})
    assert gpu_processes(snap) == []
