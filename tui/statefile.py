"""The jump host's state files (mirror.json, moves.json, intents.json, pulls.json): one way to
read and change them.

The room, `gpuroom watch`, `gpuroom export` and a `queue add` in a shell may run at once, and
each changes these files by read-modify-rename. Without a lock two writers each read the same
old document and the second rename drops the first one's record; so every change happens under
an advisory lock on a sidecar file (``.NAME.lock``, never the document itself, which a rename
replaces), and is written atomically (tmp, fsync, rename), readable by this user only.

``transfer_lock`` is the same idea for a pull: one process at a time brings a job home, so two
of them never write the same ``.part``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

LOCKS_DIR = "locks"  # beside the state files: one lock file per (host, queue, job) pulled


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the exclusive lock of state file ``path`` (blocking) while the block runs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the only descriptor of the open file drops its lock


def read_json(path: Path, what: str) -> Any:
    """The JSON document at ``path``; None when it does not exist or cannot be read (said in
    the log). A reader needs no lock: the document is only ever replaced by a rename."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("%s: %s unreadable (%s)", what, path, exc)
        return None


def write_private(path: Path, doc: Any) -> None:
    """Atomically (tmp, fsync, rename), readable by this user only. Call it under
    ``locked(path)``: the tmp name is per process, and only the lock orders the renames."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a tmp file left by a crash keeps its mode through O_TRUNC
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def update_state(path: Path, what: str, change: Callable[[Any], Any]) -> Any:
    """Read ``path``'s document (None when absent or unreadable), pass it to ``change`` and
    write what it returns, all under the file's lock; returns the document written."""
    with locked(path):
        doc = change(read_json(path, what))
        write_private(path, doc)
        return doc


class TransferBusy(Exception):
    """Another process holds the transfer lock of this job."""


def transfer_lock_path(state_dir: Path, *key: str) -> Path:
    """The lock file of one job's transfers: named by a digest of its key (host, queue, job:
    text from hosts.toml and from the box, never a file name as it is)."""
    digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:32]
    return state_dir / LOCKS_DIR / f"transfer-{digest}.lock"


@contextlib.contextmanager
def transfer_lock(state_dir: Path, *key: str) -> Iterator[None]:
    """Hold the transfer lock of ``key`` while the block runs, or raise TransferBusy at once
    when another process holds it (the kernel drops it when that process dies)."""
    path = transfer_lock_path(state_dir, *key)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise TransferBusy(" ".join(key)) from None
            raise
        yield
    finally:
        os.close(fd)
