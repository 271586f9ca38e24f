"""Helpers for the queue tests (no tests here): a box-side queue in a temp root, driven
through the real CLI (``python -m gpuroom.remote queue``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gpuroom.remote.queue_events import read_events
from gpuroom.remote.queue_runner import proc_starttime

CLI = [sys.executable, "-m", "gpuroom.remote", "queue"]


def wait_until(pred: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """Running and not a zombie (a container's PID 1 may never reap orphans)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return data[data.rfind(b")") + 2:].split()[0] not in (b"Z", b"X")


class Box:
    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "gpuroom"
        self.work = tmp / "work"
        self.work.mkdir()
        self.socket = "gpuroom-test-" + uuid.uuid4().hex[:10]
        self.env = dict(os.environ)
        for var in ("TMUX", "TMUX_PANE", "GPUROOM_BOOT_ID", "GPUROOM_QUEUE_CRASH_AT",
                    "GPUROOM_GPUS_JSON", "GPUROOM_CGROUP_ROOT", "OMP_NUM_THREADS",
                    "MKL_NUM_THREADS"):
            self.env.pop(var, None)
        # tmux keeps its socket under TMUX_TMPDIR: inside the test's tmp dir, nothing outlives it.
        tmux_dir = tmp / "tmux"
        tmux_dir.mkdir(mode=0o700)
        self.env.update({"GPUROOM_HOME": str(self.root), "GPUROOM_TMUX_SOCKET": self.socket,
                         "TMUX_TMPDIR": str(tmux_dir)})
        self.children: list[subprocess.Popen[bytes]] = []

    @property
    def qdir(self) -> Path:
        return self.root / "queues" / "default"

    def run(self, *args: str, env: dict[str, str] | None = None, check: bool = True,
            timeout: float = 30.0) -> subprocess.CompletedProcess[bytes]:
        proc = subprocess.run([*CLI, *args], env=env or self.env, cwd=self.work,
                              capture_output=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"queue {args[0]} rc={proc.returncode}: "
                                 f"{proc.stdout!r} {proc.stderr!r}")
        return proc

    def json(self, *args: str, **kw: Any) -> dict[str, Any]:
        out = self.run(*args, **kw).stdout
        return dict(json.loads(out))

    def add(self, *argv: str, opts: tuple[str, ...] = (), **kw: Any) -> str:
        doc = self.json("add", *opts, "--", *argv, **kw)
        return str(doc["job"])

    def ls(self) -> dict[str, Any]:
        return self.json("ls", "--json")

    def job(self, job_id: str) -> dict[str, Any]:
        return next(j for j in self.ls()["jobs"] if j["id"] == job_id)

    def wait_state(self, job_id: str, states: tuple[str, ...], timeout: float = 15.0
                   ) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            job = self.job(job_id)
            return job if job["state"] in states else None

        return dict(wait_until(check, timeout, f"{job_id} in {states}"))

    def events(self, job_id: str | None = None) -> list[dict[str, Any]]:
        events, _ = read_events(str(self.qdir))
        return [e for e in events if job_id is None or e.get("job") == job_id
                or (e["ev"] == "added" and f"j{e['seq']}" == job_id)]

    def runner_pid(self) -> int | None:
        try:
            text = (self.qdir / "runner.lock").read_text().strip()
        except OSError:
            return None
        return int(text) if text else None

    def wait_runner(self) -> int:
        from gpuroom.remote.queue import runner_alive

        wait_until(lambda: runner_alive(str(self.qdir)), 10, "a runner")
        pid = self.runner_pid()
        assert pid is not None
        return pid

    def kill_runner_9(self) -> None:
        from gpuroom.remote.queue import runner_alive

        pid = self.wait_runner()
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not runner_alive(str(self.qdir)), 10, "runner lock released")

    def cleanup(self) -> None:
        """Kill what this test started: runners by the pid they recorded, job groups by the
        pid/starttime the queue recorded, then this test's own tmux server."""
        if self.qdir.exists():
            pid = self.runner_pid()
            if pid and alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for ev in self.events():
                if ev.get("ev") == "started" and ev.get("pid"):
                    if proc_starttime(int(ev["pid"])) == ev.get("starttime"):
                        try:
                            os.killpg(int(ev["pid"]), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
        for child in self.children:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=10)
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], env=self.env,
                       capture_output=True, check=False, timeout=10)


def queue_box(tmp: Path) -> Iterator[Box]:
    """A test's queue (the body of its ``box`` fixture): every runner leaves soon after the
    queue empties, and what the test started is killed after it."""
    b = Box(tmp)
    b.json("config", "--idle-exit", "1")
    try:
        yield b
    finally:
        b.cleanup()
