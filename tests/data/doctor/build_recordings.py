"""Recordings for the doctor and danger-clock tests (run from the repo root, as root).

    sudo .venv/bin/python tests/data/doctor/build_recordings.py

Every snapshot is ``gpuroom.remote.probe.ProbeSession().snapshot()`` on this machine, a poll
every POLL_S seconds of real time: a real queue running tests/data/jobs/loop.py, this machine's
disks, cgroup and kernel log, except where a line below points the helper at a capture (a dmesg
capture through tests/fakes/dmesg, a captured memory.events as the cgroup root) or at a mount of
its private namespace (an inode-full tmpfs on /data, a new boot id); GPUs are the captured
boards replayed at the NVML boundary (tests/data/realbox.py). This file sets only what the jump
host owns: host, profile, link state and error, and each line's time ``t``, which is the box's
clock moved by one offset per recording so its first poll reads the fixed clock (idle_3h: each
poll placed on a 10-minute grid). Lines are in tui/fleet/live.py's Recorder format.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import realbox
from realbox import LOST, T0, Box, Prober, q_boards, shift, table_boards

HERE = Path(__file__).resolve().parent
POLL_S = 5.0
H100 = "nvsmi_table/driver535-8xH100-with-processes.txt"
IDLE_BOARD = "nvsmi_table/driver570-rtx5090-no-processes.txt"
A10 = "throttle/a10-driver550-full-q-hwslowdown-powerbrake-SOURCE-EDITED.txt"
OOM_EVENTS = "cgroup/memory.events-docker-lab-box-oom_kill1.txt"
FALLEN_OFF = "dmesg_xid/nvsentinel155-driver570-fallen-off-bus-multiline-no-xid.txt"
# The box after the reboot: a fixed id so every rebuild reads the same.
BOOT2 = str(uuid.uuid5(uuid.NAMESPACE_URL, "gpuroom tests/data/doctor reboot"))


def line(t: float, host: str, snap: dict[str, Any] | None, *, profile: str,
         state: str = "up", error: str | None = None) -> dict[str, Any]:
    return {"t": t, "host": host, "profile": profile, "state": state, "error": error,
            "snapshot": snap}


class Recording:
    """Polls of one box, moved by one offset so the first reads T0; lines in order."""

    def __init__(self, host: str, profile: str) -> None:
        self.host, self.profile = host, profile
        self.by: float | None = None
        self.lines: list[dict[str, Any]] = []

    def up(self, snap: dict[str, Any]) -> None:
        if self.by is None:
            self.by = T0 - snap["host"]["time"]
        moved = shift(snap, self.by)
        self.lines.append(line(moved["host"]["time"], self.host, moved, profile=self.profile))

    def down(self, error: str) -> None:
        """A poll that failed: the jump host's line, POLL_S after the previous one."""
        self.lines.append(line(self.lines[-1]["t"] + POLL_S, self.host, None,
                               profile=self.profile, state="stale", error=error))


def training(name: str) -> tuple[Box, Prober, str]:
    """A box whose queue runs the train job (j1, the queue's first event), polled once it
    has printed a few steps."""
    box = Box(name, slots=None)
    job = box.add("python3", "loop.py", opts=("--name", "train"))
    box.wait_log(job, "step 3")
    return box, Prober(queue_root=box.root), job


def two_polls(rec: Recording, prober: Prober, boards: list[dict[str, Any]]) -> None:
    rec.up(prober.poll(boards))
    time.sleep(POLL_S)
    rec.up(prober.poll(boards))
    time.sleep(POLL_S)


def reboot(h100: list[dict[str, Any]]) -> Recording:
    """GEN6: the box goes down with everything on it (runner and job SIGKILLed), comes back
    with a new boot id; its runner marks the job orphaned_by_reboot."""
    rec = Recording("h100-a", "generic-ssh")
    box, prober, job = training("reboot")
    try:
        two_polls(rec, prober, h100)
        box.cleanup()  # the power goes: every process of the queue dies at once
        with realbox.boot_id(BOOT2):
            box.json("start")
            box.wait_state(job, ("failed",))
            rec.up(Prober(queue_root=box.root).poll(h100))  # a new helper on the new boot
    finally:
        box.stop()
    return rec


def link_drop(h100: list[dict[str, Any]]) -> Recording:
    """GEN8: two polls fail (the jump host's error), the third finds the job still training."""
    rec = Recording("h100-a", "generic-ssh")
    box, prober, _ = training("link-drop")
    try:
        two_polls(rec, prober, h100)
        for _ in range(2):
            rec.down("ssh: connect to host h100-a port 22: Connection timed out")
            time.sleep(POLL_S)
        rec.up(prober.poll(h100))
    finally:
        box.stop()
    return rec


def cgroup_oom(h100: list[dict[str, Any]]) -> Recording:
    """U9: the job is SIGKILLed, and the helper's cgroup reader, pointed at a captured
    memory.events, reads oom_kill 1 where this machine's own cgroup read 0."""
    rec = Recording("h100-a", "generic-ssh")
    box, prober, job = training("cgroup-oom")
    try:
        two_polls(rec, prober, h100)
        (box.work / "sigkill").touch()
        box.wait_state(job, ("failed",))
        with realbox.cgroup_capture(OOM_EVENTS):
            rec.up(prober.poll(h100))
    finally:
        box.stop()
    return rec


def xid79(h100: list[dict[str, Any]]) -> Recording:
    """U22: the GPU falls off the bus (the kernel log of the capture, NVML answering
    GPU_IS_LOST) and the job dies of a CUDA error."""
    rec = Recording("h100-a", "generic-ssh")
    box, prober, job = training("xid")
    try:
        two_polls(rec, prober, h100)
        (box.work / "gpu-lost").touch()
        box.wait_state(job, ("failed",))
        with realbox.dmesg_capture(FALLEN_OFF):
            rec.up(prober.poll(LOST))
    finally:
        box.stop()
    return rec


def inode_full(h100: list[dict[str, Any]]) -> Recording:
    """U7: a job training happily beside a /data whose inodes are 99 % used."""
    rec = Recording("h100-a", "generic-ssh")
    with realbox.inode_full_tmpfs("/data"):
        box, _, _ = training("inode")
        prober = Prober(queue_root=box.root, mounts=("/data",))
        try:
            two_polls(rec, prober, h100)
            rec.up(prober.poll(h100))
        finally:
            box.stop()
    return rec


def throttle() -> Recording:
    """U23: the A10 capture's board, nothing running."""
    rec = Recording("a10-c", "runpod")
    prober = Prober()
    for _ in range(3):
        rec.up(prober.poll(q_boards(A10)))
    return rec


def idle_3h() -> Recording:
    """An idle box billing: nothing queued, the RTX 5090 capture's board at 24 of 575 W, polled
    19 times; the jump host's clock puts the polls 10 minutes apart."""
    rec = Recording("idle-box", "lambda")
    prober = Prober()
    for i in range(19):
        snap = prober.poll(table_boards(IDLE_BOARD))
        moved = shift(snap, T0 + i * 600.0 - snap["host"]["time"])
        rec.lines.append(line(moved["host"]["time"], rec.host, moved, profile=rec.profile))
    return rec


def main() -> None:
    realbox.private_mounts()
    h100 = table_boards(H100)[:1]  # one board of the 8 in the capture
    recordings = {
        "reboot": reboot(h100), "link_drop": link_drop(h100), "cgroup_oom": cgroup_oom(h100),
        "xid79": xid79(h100), "inode_full": inode_full(h100), "throttle": throttle(),
        "idle_3h": idle_3h(),
    }
    for name, rec in recordings.items():
        path = HERE / f"{name}.jsonl"
        path.write_text("".join(json.dumps(x, separators=(",", ":"), sort_keys=True) + "\n"
                                for x in rec.lines))
        print(f"wrote {path} ({len(rec.lines)} polls)")


if __name__ == "__main__":
    main()
