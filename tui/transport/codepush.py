"""``gpuroom push HOST SRC [DEST]``: the user's code onto a box, through gpuroom's own transport.

The files are what git would commit (``git ls-files``: tracked, and untracked ones no
.gitignore excludes); outside a git work tree, rsync's own reading of each directory's
.gitignore picks them. Either way the list goes to rsync NUL-separated on stdin, so no name is
ever globbed, split or read as an option. rsync runs over the link's own ssh (the user's
ssh_config, and the known_hosts and keys the link uses: HostLink.bulk_ssh_argv) with
``--partial``, so an interrupted push resumes; its quick check (size and mtime) makes a repeat
push send nothing. Then the box's helper hashes every pushed file afresh (remote/manifest.py,
no cache) and each sha256 must equal the local one: that, not rsync's exit status, is what
says the code arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.sanitize import last_words
from gpuroom.tui.snapshot import load_answer
from gpuroom.tui.transport.link import HostLink, PushIO
from gpuroom.tui.transport.pull import MANIFEST_TIMEOUT_S, RSYNC_REMOTE, sha256_file

RSYNC_IO_TIMEOUT_S = 60  # rsync's --timeout: no byte either way this long ends the push
LIST_TIMEOUT_S = 60.0  # git ls-files, or rsync --list-only, on the user's tree
STDERR_CAP = 64 * 1024
MANIFEST_BATCH = 200  # --only paths per manifest call: one exec's command line stays short
_STOP_GRACE_S = 5.0
_SENT_FILES = re.compile(r"Number of regular files transferred: ([\d,.']+)")
_SENT_BYTES = re.compile(r"Total bytes sent: ([\d,.']+)")
# rsync --list-only: "-rw-r--r--          1,234 2026/11/26 20:00:00 path/with spaces"
_LISTED = re.compile(r"^(\S)\S*\s+[\d,.']+\s+\S+\s+\S+\s(.*)$")


class CodePushError(GpuroomError):
    """The code did not arrive as it is here; what is on the box says so."""


class DestError(CodePushError):
    """A DEST that can only be a slip of the user's."""

    exit_code = 2  # tui/cli/main.py: usage


@dataclass(frozen=True)
class CodePushResult:
    """What a push moved and what the box's hashes confirmed."""

    dest: str  # as the box's rsync and helper read it (relative: under the login's home)
    files: int  # files in the pushed list
    sent_files: int  # of those, files rsync sent this time (0: the box had them all)
    sent_bytes: int
    verified: int  # regular files whose sha256 on the box equals the local one
    selection: str  # "git ls-files" or ".gitignore (rsync)"


def check_dest(dest: str) -> str:
    """DEST as the user wrote it, refused where it can only be a slip: empty, or the root."""
    if not dest.strip() or dest.strip().rstrip("/") == "" or "\0" in dest:
        raise DestError(f"refusing to push to {dest!r}: not a directory to fill",
                        "name the box's directory, e.g. ~/proj or /workspace/proj")
    return dest


def default_dest(src: Path, workdir: str | None) -> str:
    """The host's ``workdir`` when hosts.toml sets one, else ``~/<basename of SRC>``."""
    return workdir or f"~/{src.resolve().name}"


def _box_path(dest: str, local: bool) -> str:
    """DEST as rsync and the helper read it. rsync runs with -s (its arguments are never a
    shell's), so nothing expands ``~``: ``~/x`` is written as ``x``, relative to the home
    the login lands in; on the local host it is the absolute path."""
    if local:
        return str(Path(dest).expanduser().resolve())
    if dest == "~":
        return "."
    return dest[2:] if dest.startswith("~/") else dest


async def _run(argv: Sequence[str], stdin: bytes | None, timeout_s: float | None,
               cwd: Path | None = None) -> tuple[int, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=cwd,
        start_new_session=True)  # its own group: a cancel stops rsync and its ssh together
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout_s)
    except BaseException:
        await _stop(proc)
        raise
    return proc.returncode or 0, out, err[-STDERR_CAP:]


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), _STOP_GRACE_S)
    except asyncio.TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


async def list_files(src: Path) -> tuple[list[str], str]:
    """The files to push, relative to ``src``, and how they were chosen."""
    rc, out, _ = await _run(["git", "-C", str(src), "rev-parse", "--is-inside-work-tree"],
                            None, LIST_TIMEOUT_S)
    if rc == 0 and out.strip() == b"true":
        rc, out, err = await _run(["git", "-C", str(src), "ls-files", "-z", "--cached",
                                   "--others", "--exclude-standard"], None, LIST_TIMEOUT_S)
        if rc != 0:
            raise CodePushError(f"git ls-files in {src} failed: {last_words(err)}",
                                f"git -C {shlex.quote(str(src))} status")
        names = [os.fsdecode(n) for n in out.split(b"\0") if n]
        # A tracked file deleted here is listed by git but has nothing to send.
        return sorted(n for n in set(names) if os.path.lexists(src / n)), "git ls-files"
    rc, out, err = await _run(["rsync", "-r", "--list-only", "--filter=:- .gitignore",
                               "--exclude=/.git/", "--", f"{src}/"], None, LIST_TIMEOUT_S)
    if rc != 0:
        raise CodePushError(f"rsync could not list {src}: {last_words(err)}",
                            f"ls -la {shlex.quote(str(src))}")
    names = []
    for line in out.decode("utf-8", "surrogateescape").splitlines():
        m = _LISTED.match(line)
        if m and m.group(1) != "d" and m.group(2) != ".":
            names.append(m.group(2))
    return sorted(names), ".gitignore (rsync)"


def _count(pattern: re.Pattern[str], text: str) -> int:
    m = pattern.search(text)
    return int(re.sub(r"\D", "", m.group(1))) if m else 0


async def _box_hashes(link: HostLink, dest: str, names: list[str]) -> dict[str, str | None]:
    """The box's sha256 of each of ``names`` under ``dest``, hashed now (no cache)."""
    out: dict[str, str | None] = {}
    for i in range(0, len(names), MANIFEST_BATCH):
        only = [f"--only={n}" for n in names[i:i + MANIFEST_BATCH]]
        result = await link.helper("manifest", "--no-cache", *only, "--", dest,
                                   timeout_s=MANIFEST_TIMEOUT_S)
        try:
            doc: Any = load_answer(result.stdout)
        except ValueError:
            raise CodePushError(f"{link.name}: the box could not hash {dest} "
                                f"({result.failure()})") from None
        for entry in doc.get("files", []) if isinstance(doc, dict) else []:
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                digest = entry.get("sha256")
                out[entry["path"]] = digest if isinstance(digest, str) else None
    return out


async def push_tree(link: HostLink, src: Path, dest: str) -> CodePushResult:
    """rsync ``src``'s files to ``dest`` on the link's host, then check every sha256 there."""
    src = src.expanduser().resolve()
    if not src.is_dir():
        raise CodePushError(f"{src} is not a directory", "give the directory of your code")
    names, selection = await list_files(src)
    if not names:
        raise CodePushError(f"nothing to push in {src}: every file is ignored",
                            f"git -C {shlex.quote(str(src))} status --ignored")
    local = link.host.local
    box_dest = _box_path(check_dest(dest), local)
    argv = ["rsync", "-a", "--partial", "--stats", "--files-from=-", "--from0",
            f"--timeout={RSYNC_IO_TIMEOUT_S}"]
    # rsync makes only the last directory of DEST (--mkpath is rsync 3.2.3+, newer than
    # many boxes' rsync): the link makes them all.
    await PushIO(link).makedirs(box_dest)
    if local:
        target = f"{box_dest}/"
    else:
        argv += ["-s", f"--rsync-path={RSYNC_REMOTE}", "-e", shlex.join(link.bulk_ssh_argv())]
        target = f"{link.host.ssh}:{box_dest}/"
    rc, out, err = await _run([*argv, "--", f"{src}/", target],
                              b"".join(os.fsencode(n) + b"\0" for n in names), None)
    if rc != 0:
        raise CodePushError(f"{link.name}: rsync to {dest} exited {rc}: {last_words(err)}",
                            "push again: rsync resumes what arrived (--partial)")
    stats = out.decode("utf-8", "replace")
    regular = [n for n in names if (src / n).is_file() and not (src / n).is_symlink()]
    manifest_dest = box_dest if local or box_dest.startswith("/") else f"~/{box_dest}"
    on_box = await _box_hashes(link, manifest_dest, regular)
    wrong = [n for n in regular if on_box.get(n) != sha256_file(src / n)]
    if wrong:
        shown = ", ".join(wrong[:5]) + (f" and {len(wrong) - 5} more" if len(wrong) > 5 else "")
        raise CodePushError(f"{link.name}: {len(wrong)} file(s) differ on the box after the "
                            f"push: {shown}", "push again; if it repeats, check the box's "
                                              "disk (df -h)")
    return CodePushResult(dest=box_dest, files=len(names),
                          sent_files=_count(_SENT_FILES, stats),
                          sent_bytes=_count(_SENT_BYTES, stats), verified=len(regular),
                          selection=selection)

