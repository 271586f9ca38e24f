"""Job deaths the user has acknowledged: ``acks.json`` in the jump host's state dir.

`gpuroom doctor --ack HOST/JOB` writes one, and so does clearing the room's findings; the
room, `watch`, `export` and `doctor` read the same file, so a death read once stops being
critical everywhere (and stops `doctor` exiting 2 for cron). An ack names the attempt it saw
end: when the job is relaunched and dies again, that death is new.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import platformdirs

from gpuroom.tui.errors import GpuroomError

MAX_ACKS = 1000  # the oldest are dropped: a job acknowledged long ago has left its queue
_JOB_ID = re.compile(r"^j\d+(_\d+)?$")  # remote/queue.py's ids (j5_3: a task of array j5)


class AckError(GpuroomError):
    exit_code = 2  # a usage error


def state_file(path: Path | None = None) -> Path:
    return path or Path(platformdirs.user_state_dir("gpuroom")) / "acks.json"


def parse_target(text: str) -> tuple[str, str]:
    """``HOST/JOB`` as `doctor --ack` takes it."""
    host, _, job = text.partition("/")
    if not host or not _JOB_ID.match(job):
        raise AckError(f"--ack {text!r}: expected HOST/JOB, a host of hosts.toml and a job id "
                       "such as j3", "write it as host/job, e.g. gpuroom doctor --ack h100/j3 "
                       "(the hosts: gpuroom hosts list; a host's job ids: gpuroom queue ls "
                       "h100)")
    return host, job


class Acks:
    """The acknowledged deaths, re-read when the file changes (another process may write)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = state_file(path)
        self._seen: tuple[int, int] | None = None
        self._keys: set[tuple[str, str, int | None]] = set()
        self._records: list[dict[str, Any]] = []

    def _refresh(self) -> None:
        try:
            st = self.path.stat()
        except OSError:
            self._seen, self._keys, self._records = None, set(), []
            return
        key = (st.st_mtime_ns, st.st_size)
        if key == self._seen:
            return
        self._seen = key
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError):
            doc = {}  # damaged: nothing is acknowledged (the safe side), the next ack rewrites
        acks = doc.get("acks") if isinstance(doc, dict) else None
        self._records = [a for a in acks if isinstance(a, dict)] if isinstance(acks, list) \
            else []
        self._keys = {(str(a.get("host")), str(a.get("job")),
                       a.get("attempt") if isinstance(a.get("attempt"), int) else None)
                      for a in self._records}

    def acked(self, host: str, job: str, attempt: int | None) -> bool:
        self._refresh()
        return (host, job, attempt) in self._keys

    def add(self, host: str, job: str, attempt: int | None, *, now: float) -> None:
        """Record one ack (atomically: tmp, fsync, rename; readable by this user only)."""
        self._refresh()
        if (host, job, attempt) in self._keys:
            return
        records = [*self._records, {"host": host, "job": job, "attempt": attempt, "at": now}]
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # private
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"acks": records[-MAX_ACKS:]}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._seen = None
