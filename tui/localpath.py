"""The one way a name a box gave becomes a path on the jump host.

A box names its jobs and the files in their checkpoint dirs, and anything running there can
make the helper say anything. So every such name is checked here before it
touches this machine's disk: a job id must be one the helper can mint (remote/queue_events.py
``is_job_id``), a manifest path must be relative components that stay under their root once
every symlink already on this disk is followed, and a file about to be written must not be a
symlink (it would be written through). A refusal says which host, which name and why; the
caller reports it and goes on with the rest.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from gpuroom.remote.queue_events import is_job_id
from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.sanitize import sanitize_line, truncate_display

SHOWN_CHARS = 160
NAME_MAX_BYTES = 255  # one component on Linux and macOS; longer fails mid-pull as ENAMETOOLONG
# O_NOFOLLOW: a symlink at the file's own name makes open fail (ELOOP) instead of writing
# wherever it points. Where the platform lacks it, the planning check (symlinked) still holds.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def shown(name: str) -> str:
    """A name from a box as a refusal quotes it: inert, one line, bounded."""
    return truncate_display(sanitize_line(repr(name)), SHOWN_CHARS)


class UnsafePath(GpuroomError):
    """A name from a box that would not stay a plain place under its root: refused."""

    def __init__(self, host: str, what: str, name: str, why: str, fix: str) -> None:
        super().__init__(f"{host}: {what} {shown(name)} refused: {why}; "
                         "nothing written, nothing recorded", fix)
        self.host = host
        self.name = name
        self.why = why


def _bad_component(part: str) -> str | None:
    """Why ``part`` cannot be one path component, or None."""
    if part in ("", ".", ".."):
        return f"{part!r} is not a name"
    if "/" in part or "\\" in part or "\x00" in part:
        return "it holds a separator or a NUL"
    if len(os.fsencode(part)) > NAME_MAX_BYTES:
        return f"a component is longer than {NAME_MAX_BYTES} bytes"
    return None


def _escapes(root: Path, parts: list[str]) -> Path | None:
    """``root``/parts, resolved, or None when following this disk's symlinks leaves ``root``."""
    base = root.resolve()
    target = base.joinpath(*parts).resolve()
    if target == base or base not in target.parents:
        return None
    return target


def safe_local_path(root: Path, rel: str) -> Path | None:
    """Where the manifest path ``rel`` lands under ``root``, or None when it would not stay
    there: absolute, empty, ``.``/``..`` or empty components, a backslash or NUL, a component
    longer than a file name can be, or a symlink on this disk that leads outside ``root``."""
    if not isinstance(rel, str) or not rel or rel.startswith("/"):
        return None
    # Judge the raw components: PurePosixPath would quietly fold "a//b" and "./a".
    parts = rel.split("/")
    if any(_bad_component(part) for part in parts):
        return None
    return _escapes(root, parts)


def job_dir(root: Path, host: str, job: str) -> Path:
    """``root/host/job``: where a job's files from ``host`` land. The job id must be one the
    helper mints (jN, jN_M) and the dir, once this disk's symlinks are followed, must stay
    under ``root``; UnsafePath names the host and the job otherwise."""
    if not is_job_id(job):
        raise UnsafePath(host, "job id", job, "not a job id the helper gives (jN, or jN_M for "
                         "a Slurm array task), so it cannot name a folder here",
                         f"gpuroom queue ls {host}: a job with such an id was not made by "
                         "gpuroom's helper; check what else runs on the box")
    bad = _bad_component(host)
    if bad is not None:  # hosts.toml's, not the box's; still one folder, never a path
        raise UnsafePath(host, "host name", host, bad, "rename the host in hosts.toml")
    target = _escapes(root, [host, job])
    if target is None:
        raise UnsafePath(host, "job", job, f"a symlink under {root} leads outside it",
                         f"remove the symlink under {root / host} (ls -la {root / host}), "
                         "or set pull_to for this host in hosts.toml")
    return target


def symlinked(path: Path) -> bool:
    """Whether ``path`` itself is a symlink (dangling or not): never written through."""
    return path.is_symlink()


def open_append(path: Path, *, buffering: int = -1) -> BinaryIO:
    """``path`` opened to append bytes, created if missing, never through a symlink at its
    own name (OSError ELOOP instead)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | _NOFOLLOW,
                 0o666)
    return os.fdopen(fd, "ab", buffering=buffering)
