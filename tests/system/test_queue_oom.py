"""An OOM-killed attempt, as the runner sees it: the training process under the ``queue _exec``
wrapper and the OOM count of the job's own memory cgroup (U9). The kernel is the only fake: the
job raises its cgroup's ``oom_kill`` counter in a cgroup tree the test owns, then dies by
SIGKILL as a kernel OOM kill ends it."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.queuebox import Box, queue_box, wait_until

from gpuroom.remote import hostinfo


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    yield from queue_box(tmp_path)


def _cgroup_v2(tmp: Path) -> Path:
    """A cgroup v2 root whose directory for this process's path holds memory.events."""
    root = tmp / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory\n")
    own = next(line[3:].strip().lstrip("/") for line in
               Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::"))
    where = root / own
    where.mkdir(parents=True, exist_ok=True)
    (where / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\n")
    return where


def test_an_oom_killed_attempt_names_its_process_and_cgroup_and_is_not_retried(
        box: Box, tmp_path: Path) -> None:
    cg = _cgroup_v2(tmp_path)
    env = dict(box.env, GPUROOM_CGROUP_ROOT=str(tmp_path / "cgroup"))
    box.json("config", "--slots", "1", env=env)
    oom = ("import os, signal, pathlib\n"
           "pathlib.Path('train.pid').write_text(str(os.getpid()))\n"
           f"ev = pathlib.Path({str(cg / 'memory.events')!r})\n"
           "ev.write_text(ev.read_text().replace('oom_kill 0', 'oom_kill 1'))\n"
           "os.kill(os.getpid(), signal.SIGKILL)\n")
    job = box.add(sys.executable, "-c", oom, opts=("--retries", "2"), env=env)
    final = box.wait_state(job, ("failed",))
    assert len(final["attempts"]) == 1 and final["retries_used"] == 0
    (attempt,) = final["attempts"]
    train_pid = int((box.work / "train.pid").read_text())
    assert attempt["signal"] == signal.Signals.SIGKILL.name
    assert attempt["child_pid"] == train_pid != attempt["pid"]
    assert attempt["cgroup"] == str(cg) and attempt["oom_kills"] == 1
    assert "OOM-killed" in final["reason"] and "not retried" in final["reason"]
    assert not [e for e in box.events(job) if e["ev"] == "requeued"]


def test_a_sigkill_without_an_oom_is_retried_and_the_cgroup_is_the_jobs_own(
        box: Box, tmp_path: Path) -> None:
    cg = _cgroup_v2(tmp_path)
    env = dict(box.env, GPUROOM_CGROUP_ROOT=str(tmp_path / "cgroup"))
    box.json("config", "--slots", "1", env=env)
    killed = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"
    job = box.add(sys.executable, "-c", killed, opts=("--retries", "1"), env=env)

    def both_failed() -> dict[str, Any] | None:
        j = box.job(job)
        return j if j["state"] == "failed" and len(j["attempts"]) == 2 else None

    final = wait_until(both_failed, 15, "the retry failed too")
    assert final["retries_used"] == 1
    assert [a["oom_kills"] for a in final["attempts"]] == [0, 0]
    assert all(a["cgroup"] == str(cg) for a in final["attempts"])


def test_memory_cgroup_of_reads_the_process_own_line(tmp_path: Path) -> None:
    """The real /proc of this machine: our own cgroup (v2 unified or v1 memory)."""
    got = hostinfo.memory_cgroup_of(int(Path("/proc/self").resolve().name))
    if got is not None:
        assert Path(got).is_dir() and got.startswith(hostinfo.CGROUP_ROOT)
    cg = _cgroup_v2(tmp_path)
    assert hostinfo.memory_cgroup_of(int(Path("/proc/self").resolve().name),
                                     str(tmp_path / "cgroup")) == str(cg)
    assert hostinfo.oom_kill_count(str(cg)) == 0
