"""The schema test: every key tui/snapshot.py reads is one the real helper writes (issue 16).

A poll of the test sshd's box by the real link and helper, with the GPU boundary replayed
(the fake nvidia-smi printing real captures, found the way a box finds it: by
$GPUROOM_NVIDIA_SMI in the helper's environment) and a real queue (a finished job with a
synced output and its log bytes, a running job with a checkpoint dir under its cwd), must
carry every key the reader reads for a box. So a key renamed in the helper fails here instead
of blanking a pane, as clock_event_reasons did the throttle column. The keys only some
situations write (Slurm, kernel events, /dev/nvidia* holders, NVML rows) are checked against
real output in tests/unit/tui/test_snapshot_keys.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import gpubox
from harness.boxenv import probe_with_a_broken_section

from gpuroom.tui.config import HostConfig
from gpuroom.tui.snapshot import Origin, Snapshot, keys_seen, schema_keys
from gpuroom.tui.transport.link import HostLink

WAIT_S = 60.0


def missing(origin: Origin, docs: list[Any]) -> set[str]:
    """Keys of ``origin`` the reader reads that none of the raw documents ``docs`` carries."""
    wanted = {p for p, k in schema_keys(Snapshot) if k.origin == origin}
    return wanted - keys_seen(Snapshot, docs)


@pytest.fixture
def gpu_python(sshd_box: Any, fixtures: Path) -> Iterator[Path]:
    """hosts.toml's ``python`` for the box with the GPU replay (tests/harness/gpubox.py)."""
    try:
        with gpubox.gpu_python(sshd_box, fixtures, "gpuroom-schema-test") as wrapper:
            yield wrapper
    finally:
        # The runner lives in the test user's tmux server, outside sshd's tree: end it here.
        sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


async def _queue(link: HostLink, *args: str) -> dict[str, Any]:
    result = await link.helper("queue", *args, timeout_s=60.0)
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


async def _until(link: HostLink, job: str, ready: Any) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while True:
        jobs = {j["id"]: j for j in (await _queue(link, "ls"))["jobs"]}
        if ready(jobs[job]):
            return jobs[job]
        assert time.monotonic() < deadline, jobs[job]
        await asyncio.sleep(0.3)


@pytest.mark.sshd
async def test_a_real_poll_over_ssh_carries_every_key_the_reader_reads(
        sshd_box: Any, gpu_python: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = gpu_python.parent
    link = HostLink(HostConfig(name="box", ssh=sshd_box.alias, python=str(gpu_python)),
                    ssh_config=sshd_box.ssh_config)
    try:
        done = (await _queue(link, "add", "--gpus", "0", "--cwd", str(work), "--durable-dir",
                             str(work / "durable"), "--output", "out.txt", "--",
                             "sh", "-c", "echo hello; echo out > out.txt"))["job"]
        await _until(link, done, lambda j: (j.get("sync") or {}).get("state") == "synced")
        running = (await _queue(link, "add", "--gpus", "0", "--cwd", str(work), "--",
                                "sh", "-c", 'echo step 1; echo w > "$GPUROOM_CKPT_DIR/c.pt"; '
                                'mkdir -p checkpoint-1 && echo w > checkpoint-1/model.pt; '
                                'sleep 60'))["job"]
        # The finished job's log comes with a cursor for it; the running one's always does.
        request = {"mounts": ["/nonexistent-mount"], "logs": {f"default/{done}": {"offset": 0}}}
        deadline = time.monotonic() + WAIT_S
        while True:
            snap = await link.poll(request)
            jobs = {j["id"]: j for j in snap["queue"]["queues"]["default"]["jobs"]}
            # The program's own checkpoint dir under the cwd, once past "still being written".
            if jobs[running]["state"] == "running" and \
                    (jobs[running].get("checkpoint") or {}).get("kind") == "dir":
                break
            assert time.monotonic() < deadline, jobs[running]
            await asyncio.sleep(0.3)
        await _queue(link, "kill", running)
    finally:
        await link.close()
    assert snap["gpu_source"] == "nvidia-smi", snap["gpu_error"]  # the replay answered
    assert missing("probe", [snap]) == set()
    # A missing mount is one failure path; a collector that raises is the other.
    broken = probe_with_a_broken_section(monkeypatch)
    assert [e["section"] for e in broken["errors"]] == ["kernel"]
    assert missing("failure", [snap, broken]) == set()

