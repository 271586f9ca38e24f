"""The one way gpuroom reads a file the user named (hosts.toml, an ssh config, a profile, a
recording): only a regular file, and only up to a size cap.

A path can name anything: a symlink to /dev/zero reads until memory runs out, a FIFO blocks
the open for ever, a device or a socket is no config. The file is opened with O_NONBLOCK (so a
FIFO cannot hang the open), then ``fstat`` of that very descriptor must say "regular file"
before one byte is read. The user's own symlink to a regular file is followed, as any editor
would.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.present.format import fmt_bytes

# hosts.toml, an ssh config or a profile is a few KiB; this is far past any real one.
CONFIG_MAX_BYTES = 4 << 20  # 4 MiB
_CHUNK_BYTES = 1 << 16


class LocalFileError(GpuroomError):
    """A local file gpuroom will not read: not a regular file, or over its size cap."""

    exit_code = 2  # tui/cli/main.py: usage or config error

    def __init__(self, path: Path, message: str, fix: str) -> None:
        super().__init__(f"{path}: {message}", fix)
        self.path = path
        self.reason = message


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: Path, what: str) -> int:
    """A read-only descriptor of ``path``, which must be (or link to) a regular file.

    Raises FileNotFoundError as ``open`` does (a caller may treat a missing file as empty),
    LocalFileError for anything that is not a regular file, OSError for the rest.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            target = f" (a link to {os.path.realpath(path)})" if path.is_symlink() else ""
            raise LocalFileError(path, f"{what} is {_kind(mode)}{target}, not a regular file",
                                 f"point it at a plain text file (ls -lL {path})")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path, what: str, cap: int = CONFIG_MAX_BYTES) -> bytes:
    """The bytes of ``path``, a regular file of at most ``cap`` bytes (see ``open_regular``).

    A bigger file is refused whole, never read half: its tail would be silently lost.
    """
    fd = open_regular(path, what)
    try:
        chunks: list[bytes] = []
        got = 0
        while got <= cap:
            chunk = os.read(fd, min(_CHUNK_BYTES, cap + 1 - got))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            got += len(chunk)
    finally:
        os.close(fd)
    raise LocalFileError(path, f"{what} is over {fmt_bytes(cap)}, far more than such a file "
                               "holds", f"check that {path} is the file you meant (ls -lL {path})")


def read_lines(path: Path, what: str, *, line_cap: int, total_cap: int) -> Iterator[bytes]:
    """The lines of a regular file, streamed (see ``open_regular``), each without its newline.

    A line longer than ``line_cap`` or a file past ``total_cap`` is refused, naming the line:
    a file with no newline at all must not be held whole in memory.
    """
    fd = open_regular(path, what)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            n = 0
            total = 0
            while True:
                n += 1
                line = f.readline(line_cap + 1)
                if not line:
                    return
                total += len(line)
                if len(line) > line_cap and not line.endswith(b"\n"):
                    raise LocalFileError(
                        path, f"line {n} of {what} is over {fmt_bytes(line_cap)}",
                        f"check that {path} is the file you meant, or cut that line")
                if total > total_cap:
                    raise LocalFileError(
                        path, f"{what} is over {fmt_bytes(total_cap)} (at line {n})",
                        f"cut it into parts (split -l 100000 {path} part-) and use one")
                yield line.rstrip(b"\n")
    finally:
        os.close(fd)
