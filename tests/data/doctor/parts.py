"""Snapshot parts for the rule unit tests (tests/unit/tui/test_doctor.py, test_clock.py).

Every part is a copy of what the real helper wrote into the committed recordings (built by
build_recordings.py); a test varies a value, never a name: ``vary`` refuses a key the helper
did not write, so a field renamed in the helper fails here as in the recordings.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from fakes import capture  # noqa: E402

from gpuroom.remote.kernel import parse_kernel_log  # noqa: E402


def _lines(name: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (HERE / f"{name}.jsonl").read_text().splitlines()]


def _jobs(snap: dict[str, Any]) -> list[dict[str, Any]]:
    return [j for view in snap["queue"]["queues"].values() for j in view["jobs"]]


# A poll of the box training (one H100 board of the capture, job j1 running, a checkpoint).
_TRAINING = _lines("link_drop")[-1]["snapshot"]
T0: float = _lines("link_drop")[0]["t"]
_SLURM_JOB_KEYS = {k for line in (HERE.parent / "slurm" / "session.jsonl").read_text()
                   .splitlines()[:3] for j in _jobs(json.loads(line)["snapshot"]) for k in j}


def vary(d: dict[str, Any], **values: Any) -> dict[str, Any]:
    """``d`` with some values changed; a key the helper did not write is a KeyError."""
    for key, value in values.items():
        if key not in d:
            raise KeyError(f"the helper writes no {key!r} here (it has {sorted(d)})")
        d[key] = value
    return d


def h100(index: int = 0, *, power: float | None = None, temp: float | None = None,
         util: float | None = None, used_mib: float | None = None) -> dict[str, Any]:
    """The H100 board of fixtures/nvsmi_table/driver535-8xH100-with-processes.txt (no clocks
    in that capture), as the helper wrote it; keyword values replace the captured ones."""
    gpu = copy.deepcopy(_TRAINING["gpus"][0])
    gpu["index"] = index
    given = {"power_w": power, "temp_c": temp, "util_gpu_pct": util, "mem_used_mib": used_mib}
    return vary(gpu, **{k: v for k, v in given.items() if v is not None})


def idle_gpu() -> dict[str, Any]:
    """A board at rest: fixtures/nvsmi_table/driver570-rtx5090-no-processes.txt (24 of 575 W)."""
    return copy.deepcopy(_lines("idle_3h")[0]["snapshot"]["gpus"][0])


def a10_throttled() -> dict[str, Any]:
    """The A10 of fixtures/throttle/a10-...-SOURCE-EDITED.txt: SM 210 of 1695 MHz, 21.3 of
    150 W, HW Slowdown and HW Power Brake Slowdown active."""
    return copy.deepcopy(_lines("throttle")[0]["snapshot"]["gpus"][0])


OOM_CAPTURED_PID = 184256  # the pid fixtures/dmesg_oom/mini-container-constraint-memcg.txt kills


def oom_event() -> dict[str, Any]:
    """The kernel parser's event for fixtures/dmesg_oom/mini-container-constraint-memcg.txt,
    as captured: an attempt is built around its pid, never the other way round."""
    (event,) = parse_kernel_log(capture("dmesg_oom/mini-container-constraint-memcg.txt"))
    return event


def inode_full_disk() -> dict[str, Any]:
    """/data of the inode_full recording: a tmpfs with 99 % of its inodes used."""
    return copy.deepcopy(_lines("inode_full")[0]["snapshot"]["disks"][-1])


def job(job_id: str = "j1", state: str = "running", *, start: float | None = None,
        log_size: int | None = None, ckpt: dict[str, Any] | None = None,
        log_mtime: float | None = None, **extra: Any) -> dict[str, Any]:
    """The recordings' train job as the queue reported it while running. ``extra`` may set
    any key a real job carries, Slurm's included (tests/data/slurm/session.jsonl)."""
    j = copy.deepcopy(_jobs(_TRAINING)[0])
    vary(j, id=job_id, state=state)
    if start is not None:
        vary(j["attempts"][-1], start=start)
    if log_size is not None:
        vary(j["log_chunk"], size=log_size, next_offset=log_size)
    if log_mtime is not None:
        # The helper sends the log's mtime since the recordings were made (its own clock).
        j["log_chunk"]["mtime"] = log_mtime
    if ckpt is not None:
        missing = set(ckpt) - set(j["checkpoint"])
        if missing:
            raise KeyError(f"the helper writes no {sorted(missing)} in a checkpoint")
        j["checkpoint"] = ckpt
    if state not in ("launching", "running"):
        j.pop("log_chunk")
        j.pop("checkpoint")
    for key, value in extra.items():
        if key not in j and key not in _SLURM_JOB_KEYS:
            raise KeyError(f"no real job carries {key!r}")
        j[key] = value
    return j


# What the runner records of an attempt's end since the recordings were made: the training
# process under the ``queue _exec`` wrapper, the group's pids it saw, the job's own memory
# cgroup, how many OOM kills that cgroup counted while the attempt ran, and the log's last
# error line.
ATTEMPT_END_KEYS = ("child_pid", "pids", "cgroup", "oom_kills", "error_line")


def ended(j: dict[str, Any], state: str, t: float, **attempt: Any) -> dict[str, Any]:
    """``j`` after its attempt ended at ``t`` (the helper then sends no log or checkpoint)."""
    j = copy.deepcopy(j)
    j["state"] = state
    last = j["attempts"][-1]
    for key in ATTEMPT_END_KEYS:
        last.setdefault(key, None)
    vary(last, end=t, **attempt)
    j.pop("log_chunk", None)
    j.pop("checkpoint", None)
    return j


def snapshot(t: float = T0, *, gpus: list[dict[str, Any]] | None = None,
             jobs: list[dict[str, Any]] | None = None, boot_id: str | None = None,
             uptime_s: float | None = None, oom_kill: int = 0,
             events: list[dict[str, Any]] | None = None,
             disks: list[dict[str, Any]] | None = None,
             holders: list[dict[str, Any]] | None = None,
             vcpus: float | None = None) -> dict[str, Any]:
    """The training poll with its sections replaced: no GPU and no job unless given."""
    snap = copy.deepcopy(_TRAINING)
    host = snap["host"]
    vary(host, time=t, uptime_s=uptime_s if uptime_s is not None
         else host["uptime_s"] + (t - host["time"]))
    if boot_id is not None:
        vary(host, boot_id=boot_id)
        vary(snap["kernel"]["cursor"], boot_id=boot_id)
    vary(snap["cgroup"], oom_kill=oom_kill, cpu_quota_vcpus=vcpus)
    vary(snap, gpus=gpus or [], vram_holders=holders or [])
    vary(snap["kernel"], events=events or [])
    if disks is not None:
        vary(snap, disks=disks)
    view = next(iter(snap["queue"]["queues"].values()))
    view["jobs"] = list(jobs or [])
    if not jobs:
        snap["queue"]["queues"] = {}
    return snap
