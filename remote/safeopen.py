"""Opening a box file that a job controls, without ever blocking on it.

A job can turn its log or a checkpoint into a FIFO, a device or a socket; open(2) of a FIFO
with no writer waits for ever, and the helper that waits is a poll that never answers. Every
read of a job's file goes through ``open_regular``. Standard library only (py3.8+).
"""

from __future__ import annotations

import os
import stat
from typing import IO, Optional


class NotRegular(OSError):
    """The path is a FIFO, device, socket or directory: refused before any read."""


def special_kind(mode: int) -> Optional[str]:
    """What a non-regular file is ("a FIFO"), or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    for test, what in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return what
    return f"mode {mode:o}"


def open_regular(path: str) -> IO[bytes]:
    """``path`` opened for reading only if it is a regular file, without ever blocking.

    open(2) of a FIFO waits for a writer, for ever; O_NONBLOCK returns at once, and the
    fstat of what opened (not the name, which a job can swap) decides. OSError otherwise,
    naming the path and what it is.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
                 | getattr(os, "O_NOCTTY", 0))
    try:
        what = special_kind(os.fstat(fd).st_mode)
        if what is not None:
            raise NotRegular(f"{path} is {what}, not a regular file: not read")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
