"""The user's OpenSSH client config as gpuroom reads it before asyncssh does.

asyncssh follows ``Include`` with no loop check and no depth limit (a config that includes
itself ends in RecursionError) and opens the top file with a plain ``open`` (a FIFO hangs, a
link to /dev/zero is read until memory runs out). ``check_ssh_config`` walks the same files
first, through ``localfile.read_regular``, and refuses what asyncssh would choke on with the
file and line; ``ssh_config_aliases`` reads the Host aliases from the same walk.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.localfile import read_regular

# OpenSSH's own limit (readconf.c READCONF_MAX_DEPTH): "Include nesting too deep" past it.
MAX_INCLUDE_DEPTH = 16
# Files one walk may read at most: a glob of thousands of files is no ssh config.
MAX_FILES = 256


class SshConfigError(GpuroomError):
    """An ssh config gpuroom will not hand to asyncssh; the message names file and line."""

    exit_code = 2  # tui/cli/main.py: usage or config error


@dataclass(frozen=True)
class Line:
    path: Path
    number: int
    key: str  # lower case, as ssh matches keywords
    value: str


def _included(pattern: str) -> list[Path]:
    """The files an Include pattern names, as asyncssh and ssh resolve it: relative to
    ~/.ssh, globbed, only files (a FIFO or a device is skipped, as asyncssh skips it)."""
    path = Path(pattern).expanduser()
    if path.anchor:
        base, rest = Path(path.anchor), str(Path(*path.parts[1:]))
    else:
        base, rest = Path("~/.ssh").expanduser(), pattern
    if not rest or rest == ".":
        return [path] if path.is_file() else []
    return sorted(p for p in base.glob(rest) if p.is_file())


class _Walk:
    def __init__(self) -> None:
        # The files being read, outermost first, by (device, inode): a loop is one of them.
        self.stack: list[tuple[tuple[int, int], Path]] = []
        self.files = 0

    def lines(self, path: Path) -> Iterator[Line]:
        try:
            st = path.stat()
        except OSError:
            return  # a vanished include is skipped, as ssh skips it
        self.files += 1
        if self.files > MAX_FILES:
            raise SshConfigError(f"{path}: the ssh config's Includes read over {MAX_FILES} "
                                 "files", f"narrow the Include patterns that lead to {path} "
                                 "to the files you mean")
        try:
            data = read_regular(path, "the ssh config")
        except (FileNotFoundError, NotADirectoryError):
            return  # gone since the glob
        except OSError as exc:
            raise SshConfigError(f"{path}: cannot read the ssh config "
                                 f"({exc.strerror or exc})", f"chmod 600 {path}") from None
        self.stack.append(((st.st_dev, st.st_ino), path))
        try:
            text = data.decode("utf-8", errors="replace")
            for number, raw in enumerate(text.splitlines(), 1):
                stripped = raw.strip()
                if not stripped or stripped.startswith("#"):
                    continue
                parts = re.split(r"[\s=]+", stripped, maxsplit=1)
                if len(parts) < 2:
                    continue
                line = Line(path, number, parts[0].lower(), parts[1])
                if line.key == "include":
                    yield from self._include(line)
                else:
                    yield line
        finally:
            self.stack.pop()

    def _include(self, line: Line) -> Iterator[Line]:
        where = f"{line.path} line {line.number}"
        try:
            patterns = shlex.split(line.value)
        except ValueError:
            patterns = line.value.split()
        for pattern in patterns:
            for inc in _included(pattern):
                try:
                    st = inc.stat()
                except OSError:
                    continue
                loop = next((p for i, p in self.stack if i == (st.st_dev, st.st_ino)), None)
                if loop is not None:
                    raise SshConfigError(
                        f"{where}: Include {pattern} reads {inc}, which is already being read "
                        f"({loop}): the Includes loop",
                        f"remove that Include from {line.path}, or the one that leads back")
                if len(self.stack) > MAX_INCLUDE_DEPTH:
                    raise SshConfigError(
                        f"{where}: Includes nest over {MAX_INCLUDE_DEPTH} deep (ssh's limit)",
                        f"flatten the Includes under {line.path}")
                yield from self.lines(inc)


def walk(path: Path) -> Iterator[Line]:
    """Every non-Include line of ``path`` and the files it Includes, in file order.

    Raises SshConfigError for an Include loop, nesting past ssh's limit or too many files,
    LocalFileError (localfile.py) for a file that is not regular or too big. A missing top
    file yields nothing.
    """
    if not os.path.lexists(path):
        return iter(())
    return _Walk().lines(path)


def check_ssh_config(path: Path) -> None:
    """Read ``path`` and its Includes as asyncssh will, refusing what it would choke on."""
    for _ in walk(path):
        pass


def ssh_config_aliases(path: Path) -> list[str]:
    """Every non-wildcard Host alias of an OpenSSH client config, in file order.

    Include directives are followed (relative to ~/.ssh, as ssh does); Match blocks are
    skipped since they name no alias.
    """
    seen: list[str] = []
    for line in walk(path.expanduser()):
        if line.key != "host":
            continue
        for alias in line.value.split():
            if any(c in alias for c in "*?!") or alias in seen:
                continue
            seen.append(alias)
    return seen
