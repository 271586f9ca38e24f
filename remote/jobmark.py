"""Every process a job attempt started, found even when it left the job's process group.

The runner puts the job in its own process group and a kill signals that group, but a daemon
started with ``setsid`` (or a double fork into a new session) is in no group of the job's and
outlived ``queue kill``. So each attempt's environment carries a mark of its own
(``GPUROOM_ATTEMPT_MARK``: queue, job, attempt and a random token), inherited by everything
it starts; /proc/PID/environ of the user's processes tells which are the attempt's. The random
part means no other attempt's (or user's) process is taken for this one's. A process that
rewrites its own environment can hide; this finds what a training job's tools leave behind.
Standard library only (py3.8+).
"""

from __future__ import annotations

import binascii
import os
from typing import Dict, Iterable, List, Optional

MARK_VAR = "GPUROOM_ATTEMPT_MARK"
PROC = "/proc"
SCAN_LIMIT = 20000  # processes looked at per scan: a poll stays bounded
ENVIRON_MAX = 1 << 20  # bytes of one environment read (Linux caps argv+env near 2 MiB)
COMMAND_MAX = 200


def new_mark(queue: str, job_id: str, attempt: int) -> str:
    token = binascii.hexlify(os.urandom(8)).decode("ascii")
    return f"{queue}/{job_id}/{attempt}/{token}"


def _mark_of(pid: str, proc: str) -> Optional[str]:
    try:
        with open(os.path.join(proc, pid, "environ"), "rb") as f:
            env = f.read(ENVIRON_MAX)
    except OSError:
        return None  # gone, or not ours to read
    key = MARK_VAR.encode() + b"="
    for item in env.split(b"\0"):
        if item.startswith(key):
            return item[len(key):].decode("utf-8", "replace")
    return None


def _alive(pid: str, proc: str) -> bool:
    try:
        with open(os.path.join(proc, pid, "stat"), "rb") as f:
            data = f.read()
    except OSError:
        return False
    rest = data[data.rfind(b")") + 2:].split()
    return bool(rest) and rest[0] not in (b"Z", b"X")


def find(marks: Iterable[str], proc: str = PROC) -> Dict[str, List[int]]:
    """Live pids of this user carrying each of ``marks`` (a mark with none is absent)."""
    wanted = {m for m in marks if m}
    out: Dict[str, List[int]] = {}
    if not wanted:
        return out
    uid, me = os.getuid(), os.getpid()
    try:
        names = os.listdir(proc)
    except OSError:
        return out
    for name in names[:SCAN_LIMIT]:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            if os.stat(os.path.join(proc, name)).st_uid != uid:
                continue  # another user's: never ours to judge or signal
        except OSError:
            continue
        mark = _mark_of(name, proc)
        if mark in wanted and _alive(name, proc):
            out.setdefault(mark, []).append(int(name))
    return out


def command(pid: int, proc: str = PROC) -> str:
    """The process's command line, shortened, for a finding ("" when it is gone)."""
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as f:
            raw = f.read(COMMAND_MAX * 4)
    except OSError:
        return ""
    text = raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
    return text[:COMMAND_MAX]


def survivors(mark: Optional[str], proc: str = PROC) -> List[Dict[str, object]]:
    """The attempt's processes still alive: pid and command of each."""
    if not mark:
        return []
    return [{"pid": pid, "command": command(pid, proc)}
            for pid in sorted(find([mark], proc).get(mark, []))]


def signal_marked(mark: Optional[str], sig: int, proc: str = PROC) -> List[int]:
    """Send ``sig`` to every live process carrying ``mark``; the pids signalled.

    The mark is read again right before each signal, so a pid reused since the scan by a
    process without the mark is left alone.
    """
    sent: List[int] = []
    if not mark:
        return sent
    for pid in find([mark], proc).get(mark, []):
        if _mark_of(str(pid), proc) != mark:
            continue
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            continue
        sent.append(pid)
    return sent
