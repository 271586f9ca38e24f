"""The test sshd's box with the GPU boundary replayed and a queue of its own, for the idle
clock, `gpuroom watch` and `gpuroom doctor` tests: a hosts.toml naming it, real jobs added
through the real verbs, and cleanup of the runner and any job still running."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import tomli_w
from paths import ROOT

from gpuroom.tui.config import load
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.snapshot import Job
from harness.gpubox import gpu_python

# Two RTX 3090s at 1 % and 0 % util and a process table with no process on them.
IDLE_GPUS = ("query_gpu/2x-rtx3090-driver515-csv-header.txt",
             "nvsmi_table/driver570-rtx5090-no-processes.txt")
# A real table that lists a compute process on every GPU (someone else's work).
FOREIGN_GPUS = ("query_gpu/2x-rtx3090-driver515-csv-header.txt",
                "nvsmi_table/driver535-8xH100-with-processes.txt")
WAIT_S = 60.0
FAKE_DMESG = ROOT / "tests" / "fakes" / "dmesg"


@contextmanager
def queue_box(sshd_box: Any, fixtures: Path, tmp_path: Path, *,
              captures: Sequence[str] = IDLE_GPUS, price_per_hour: float = 2.5,
              settings: dict[str, Any] | None = None,
              host: dict[str, Any] | None = None) -> Iterator[Path]:
    """hosts.toml (0600) for host ``box``: the test user with its own GPUROOM_HOME."""
    name = "gpuroom-monitor-test"
    root = sshd_box.home / name
    # The kernel log replayed empty (tests/fakes/dmesg), as a box whose dmesg reads: a box
    # that may not read it is a warning of its own (U44), not what these tests are about.
    env = {"GPUROOM_HOME": str(root / "home"), "GPUROOM_DMESG": str(root / "dmesg"),
           "GPUROOM_FAKE_DMESG_CAPTURE": "/dev/null"}
    with gpu_python(sshd_box, fixtures, name, captures, extra_env=env) as python:
        user = pwd.getpwnam(sshd_box.user)
        shutil.copy(FAKE_DMESG, root / "dmesg")
        os.chown(root / "dmesg", user.pw_uid, user.pw_gid)
        path = tmp_path / "hosts.toml"
        path.write_bytes(tomli_w.dumps({
            "settings": {"ssh_config": str(sshd_box.ssh_config), "poll_interval_s": 0.5,
                         **(settings or {})},
            "hosts": {"box": {"ssh": sshd_box.alias, "python": str(python),
                              "price_per_hour": price_per_hour, **(host or {})}}}).encode())
        path.chmod(0o600)
        try:
            yield path
        finally:
            _end_jobs(sshd_box, path)
            # The runner lives in the test user's tmux server, outside sshd's tree.
            sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


def helper_queue_ls(config: Path, host: str = "box") -> dict[str, Any]:
    """The helper's own `queue ls` answer on ``host`` (its runner too, which the CLI's
    listing leaves out)."""
    async def ls() -> dict[str, Any]:
        fleet = Fleet(load(config))
        try:
            result = await fleet.link(host).helper("queue", "ls")
            doc: dict[str, Any] = json.loads(result.stdout)
            return doc
        finally:
            await fleet.close()
    return asyncio.run(ls())


def _end_jobs(sshd_box: Any, config: Path) -> None:
    try:
        doc = helper_queue_ls(config)
    except Exception:
        return
    for job in doc.get("jobs", []):
        pid = (job.get("attempts") or [{}])[-1].get("pid")
        if job.get("state") in ("launching", "running") and pid:
            sshd_box.run("kill", "-KILL", "--", f"-{pid}")


def add_job(config: Path, *argv: str) -> str:
    """``queue add`` through the helper (argv as given), the new job's id."""
    async def add() -> str:
        fleet = Fleet(load(config))
        try:
            result = await fleet.link("box").helper("queue", "add", "--", *argv,
                                                    timeout_s=60.0)
            return str(json.loads(result.stdout)["job"])
        finally:
            await fleet.close()
    return asyncio.run(add())


def wait_job(config: Path, job: str, done: Callable[[Job], bool]) -> Job:
    """Poll (a Fleet of its own) until ``done(job)``; the job as that poll saw it."""
    async def poll() -> Job:
        fleet = Fleet(load(config))
        try:
            deadline = time.monotonic() + WAIT_S
            while True:
                view = (await fleet.poll_host("box")).view
                j = view.job(job) if view is not None else None
                if j is not None and done(j):
                    return j
                assert time.monotonic() < deadline, j
                await asyncio.sleep(0.3)
        finally:
            await fleet.close()
    return asyncio.run(poll())
