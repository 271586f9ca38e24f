"""The schema check of tui/snapshot.py, for the keys only some situations produce.

tests/system/test_snapshot_schema.py checks every key a poll of a box carries against the real
helper over the test sshd. The keys a box writes only in some situations are checked here
against real output of the same helper code: a Slurm queue (the recorded real-Slurm session),
kernel events (remote/kernel.py on the dmesg captures), a /dev/nvidia* holder (remote/vram.py
scanning a real process), and the NVML path's GPU rows (remote/gpu.py's template). Last, the
check itself: renaming any key the reader reads makes it fail.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import split_capture
from fakes.nvml import FakeNvml
from paths import DATA, FIXTURES

from gpuroom.remote import gpu, hostinfo, kernel, vram
from gpuroom.tui.snapshot import Origin, Snapshot, keys_seen, schema_keys

SESSION = [json.loads(raw) for raw in (DATA / "slurm" / "session.jsonl").read_text()
           .splitlines()]
# Issue 23's keys (a job's in-allocation probe, array tasks, the expected start), recorded
# from the same test cluster by tests/data/slurm/record_allocation.py.
ALLOCATION = [json.loads(raw) for raw in (DATA / "slurm" / "allocation.jsonl").read_text()
              .splitlines()]


def required(origin: Origin, under: str = "") -> set[str]:
    return {p for p, k in schema_keys(Snapshot) if k.origin == origin and p.startswith(under)}


def missing(origin: Origin, docs: list[Any], under: str = "") -> set[str]:
    """Keys of ``origin`` the reader reads that none of the raw documents ``docs`` carries."""
    return required(origin, under) - keys_seen(Snapshot, docs)


def test_slurm_keys_are_in_the_recorded_real_slurm_session() -> None:
    assert required("slurm")  # the table marks some: otherwise this checks nothing
    assert missing("slurm", [line["snapshot"] for line in [*SESSION, *ALLOCATION]]) == set()


def kernel_events(fixtures: Path) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for capture in sorted([*(fixtures / "dmesg_xid").glob("*.txt"),
                           *(fixtures / "dmesg_oom").glob("*.txt")]):
        events += kernel.parse_kernel_log(split_capture(capture.read_text())[1])
    return events


def test_kernel_event_keys_are_in_real_parses_of_the_dmesg_captures(fixtures: Path) -> None:
    events = kernel_events(fixtures)
    assert {e["kind"] for e in events} >= {"xid", "oom"}
    assert missing("kernel", [{"kernel": {"events": events}}]) == set()


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[str]:
    """A real process holding a file under ``tmp_path`` open, as a CUDA process holds
    /dev/nvidia0; yields the prefix to scan for."""
    device = tmp_path / "nvidia0"
    device.write_text("")
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; f = open(sys.argv[1]); print('ready', flush=True); time.sleep(60)",
         str(device)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        yield str(tmp_path)
    finally:
        child.kill()
        child.wait(timeout=10)


def test_vram_holder_keys_are_in_a_real_scan(holder: str) -> None:
    deadline = time.monotonic() + 5
    while not (holders := vram.unlisted(vram.scan_holders("/proc", holder), set(), 0)):
        assert time.monotonic() < deadline, "the holder never showed in /proc"
        time.sleep(0.05)
    assert missing("vram", [{"vram_holders": holders}]) == set()


def test_gpu_keys_are_the_nvml_template_and_its_rows() -> None:
    """The nvidia-smi path is checked over sshd; NVML builds its rows from the same template
    (remote/gpu.py _EMPTY_GPU), filled through the pynvml stand-in."""
    rows = gpu.nvml_gpus(FakeNvml())
    read = {p.split(".")[1].removesuffix("[]") for p in required("probe", "gpus[].")}
    assert read <= set(gpu._EMPTY_GPU)
    assert all(set(r) == set(gpu._EMPTY_GPU) for r in rows)
    assert missing("probe", [{"gpus": rows}], "gpus[].") == set()


# ------------------------------------------------------------------ the check can fail


def _rename(obj: Any, segments: list[str]) -> None:
    """Rename the key at ``segments`` ("queues{}", "jobs[]", "id") wherever it occurs."""
    head, rest = segments[0], segments[1:]
    key = head.removesuffix("[]").removesuffix("{}")
    if not isinstance(obj, dict) or key not in obj:
        return
    if not rest:
        obj[key + "_v2"] = obj.pop(key)
        return
    child = obj[key]
    if head.endswith("[]"):
        items = child if isinstance(child, list) else []
    elif head.endswith("{}"):
        items = list(child.values()) if isinstance(child, dict) else []
    else:
        items = [child]
    for item in items:
        _rename(item, rest)


def real_documents() -> list[Any]:
    """Real helper output: two polls of a Slurm login node, NVML rows, kernel events."""
    docs: list[Any] = [SESSION[-1]["snapshot"], SESSION[len(SESSION) // 2]["snapshot"],
                       ALLOCATION[-1]["snapshot"],
                       {"gpus": gpu.nvml_gpus(FakeNvml())},
                       # The disk collector run here: newer keys than the recorded session.
                       {"disks": hostinfo.disks([])},
                       # And the cgroup collector: its CPU time is newer than the session.
                       {"cgroup": hostinfo.cgroup_facts()}]
    if FIXTURES.is_dir():
        docs.append({"kernel": {"events": kernel_events(FIXTURES)}})
    return docs


ORIGIN = {p: k.origin for p, k in schema_keys(Snapshot)}
SEEN = sorted(keys_seen(Snapshot, real_documents()))
# Written only by a local runner's job (checked over sshd), a failure path or a holder scan.
ELSEWHERE = {
    "queue.queues{}.jobs[].attempts[].boot_id", "queue.queues{}.jobs[].attempts[].gpus",
    "queue.queues{}.jobs[].attempts[].pid", "queue.queues{}.jobs[].sync.state",
    # A local runner's status (runner.json): the recorded session is a Slurm login node,
    # which has no runner. (A job's wait reason, priority and dependencies are written for
    # Slurm jobs too; the allocation recording carries them.)
    "queue.queues{}.runner.pid",
    "queue.queues{}.runner.heartbeat", "queue.queues{}.runner.write_error",
    "queue.queues{}.runner.error",
    # A running local job's scripts compared with their launch (remote/drift.py).
    "queue.queues{}.jobs[].code_changed",
    # The secrets a local job exports (a Slurm job refuses --secret).
    "queue.queues{}.jobs[].secrets",
    # The allocation recording watched a path that does not exist: its disk error is real.
    *(required("failure") - {"disks[].error"}), *required("vram"),
    # A spot queue's preemption notice: tests/system/test_preempt_ssh.py polls one.
    *required("preempt"),
    # What code an attempt launched with: tests/system/test_drift_ssh.py polls one.
    *required("code"),
    # issue 19: a local job's log mtime and CPU seconds, the local runner's boot and hook
    "queue.queues{}.jobs[].log_chunk.mtime", "queue.queues{}.jobs[].cpu_s",
    "queue.queues{}.runner.boot_id", "queue.queues{}.runner.reboot_hook",
    "queue.queues{}.jobs[].checkpoint.save_s",
    # A local job's own checkpoints under its cwd (remote/ckptunits.py): a Slurm job's cwd is
    # on the cluster's disks, walked by nobody; test_snapshot_schema.py polls them over sshd.
    *{p for p in ORIGIN if p.startswith(("queue.queues{}.jobs[].ckpt_units",))},
    "queue.queues{}.jobs[].checkpoint.step", "queue.queues{}.jobs[].checkpoint.source",
    "queue.queues{}.jobs[].checkpoint.kind", "queue.queues{}.jobs[].ckpts",
    # A job's unreadable log and an ended job's surviving daemon: test_hostile_stuck.py.
    *required("leftover"),
    # The queue's identity: the recordings predate it; test_queue_identity_ssh.py polls one.
    "queue.queues{}.id",
    # How a local attempt ended, as its runner saw it: tests/system/test_queue_oom.py.
    "queue.queues{}.jobs[].attempts[].child_pid", "queue.queues{}.jobs[].attempts[].pids",
    "queue.queues{}.jobs[].attempts[].cgroup", "queue.queues{}.jobs[].attempts[].oom_kills",
    "queue.queues{}.jobs[].attempts[].error_line",  # tests/system/test_queue_log_lines.py
    # An ended attempt's newest checkpoint: tests/system/test_resume_ssh.py.
    "queue.queues{}.jobs[].attempts[].checkpoint",
    *(f"queue.queues{{}}.jobs[].attempts[].checkpoint.{k}" for k in
      ("path", "size", "mtime", "save_s", "step", "source", "kind")),
    # The box's own idle answer is newer than the recordings: test_snapshot_schema.py polls it.
    "idle", "idle.idle_since", "idle.now", "idle.busy", "idle.basis",
}


def test_the_real_documents_carry_every_other_key(fixtures: Path) -> None:
    assert set(ORIGIN) - set(SEEN) == ELSEWHERE


@pytest.mark.parametrize("path", SEEN)
def test_renaming_a_key_the_helper_writes_fails_the_check(path: str) -> None:
    docs = copy.deepcopy(real_documents())
    for doc in docs:
        _rename(doc, path.split("."))
    assert path in missing(ORIGIN[path], docs)
