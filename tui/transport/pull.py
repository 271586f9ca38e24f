"""Pull a job's outputs from a box: manifest, resumable download, hash check, load test.

Order per file (the teardown gate trusts only what this module recorded):
  manifest on the box (big files listed unhashed; the box hashes them one by one while they
  travel, so a first pull is not a full read of the dir before the first byte moves) ->
  path safety -> download to NAME.part, resuming from its size (U12; big files through the
  OpenSSH client's SFTP on the same alias, the rest through SFTP on the link; ``rsync
  --append`` on request, or for big files where ssh cannot open its session) ->
  sha256 of the whole .part, read behind the writer, against the box's digest -> rename to
  NAME only on a match. A mismatch, or a file that shrank or vanished mid-fetch, re-takes the
  box's entry for that file and re-fetches from zero once (a file that changed during the
  pull is fetched again, never mixed); a second mismatch is a failure and leaves no NAME.
A file whose sha256 is the box's is home: an exact copy, what the teardown gate needs. Then,
as an extra, torch files are load-checked on the jump host when torch is there (weights_only
plus a short allow-list, remote/checkpoint.py SAFE_GLOBAL_NAMES); a file that fails it is
still home (the box has the same bytes) and the failure is said with what to do.
Verified pulls land in ``user_state_dir("gpuroom")/pulls.json``, written atomically, so the
gate survives restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import platformdirs

from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.localpath import open_append, safe_local_path, symlinked
from gpuroom.tui.sanitize import last_words, sanitize_line
from gpuroom.tui.snapshot import load_answer
from gpuroom.tui.statefile import TransferBusy, locked, transfer_lock, write_private
from gpuroom.tui.transport.link import (
    CONNECT_TIMEOUT_S,
    PULL_READ_TIMEOUT_S,
    HostLink,
    LinkError,
    PullIO,
    RemoteFileError,
    RemoteFileRefused,
    cut_to,
    not_regular,
)
from gpuroom.tui.transport.openssh_sftp import OpenSshSftp, SessionUnavailable

TORCH_SUFFIXES = (".pt", ".pth", ".ckpt")
LOAD_TEST_TIMEOUT_S = 600.0  # a multi-GB checkpoint loads in tens of seconds on a laptop
TORCH_EXTRA = "pip install 'gpuroom[torch]'"  # what adds the load check to a jump host
NO_TORCH = (f"hash-verified, not load-verified: torch is not installed here ({TORCH_EXTRA} "
            "adds the load check; the exact copy counts as home without it)")
MANIFEST_TIMEOUT_S = 300.0
HASH_CHUNK = 1 << 20
TAIL_HASH_CHUNK = 4 << 20  # the hasher thread's pread size: few GIL hand-offs per GiB
# Files at least this big are not hashed by the first manifest but while they travel
# (_BoxDigests). Below it, hashing costs less than the extra helper call (~50 ms) would.
DEFER_HASH_BYTES = 64 << 20
HASH_FLOOR_BPS = 50e6
# Which path moves a big file, measured on loopback (bench/pull.py, docs/PERFORMANCE.md): a
# big pull is CPU-bound on both ends, and the OpenSSH client (C, AES-GCM first when the
# user's config names no Ciphers) takes the least CPU per byte; asyncssh's SFTP keeps up only
# under AES-GCM, and rsync adds its processes and checksums to the same ssh. Files this big
# or bigger go through ssh's SFTP; smaller ones stay on the link, which is open already
# (ssh's session costs a login, once per pull). Where ssh cannot open its session, big files
# take rsync when the link runs another cipher than AES-GCM and both ends have rsync.
BULK_MIN_BYTES = 64 << 20
SFTP_FAST_CIPHERS = frozenset({"aes128-gcm@openssh.com", "aes256-gcm@openssh.com"})
METHODS = ("auto", "sftp", "openssh", "rsync")
RSYNC_REMOTE = "rsync"  # the box's rsync, by name on its PATH
RSYNC_PROBE_TIMEOUT_S = CONNECT_TIMEOUT_S + 10.0
RSYNC_POLL_S = 0.1  # how often the .part's size is read for progress and the hasher
RSYNC_STDERR_CAP = 4096
RSYNC_STOP_GRACE_S = 5.0
RSYNC_OPTIONS: tuple[str, ...] = ()  # extra rsync options, e.g. ("--bwlimit=20m",)


@dataclass
class Progress:
    """What a progress callback sees: bytes, rate and ETA across the whole pull."""

    done: int
    total: int
    rate_bps: float
    eta_s: float | None
    path: str


@dataclass
class FileResult:
    path: str
    size: int
    sha256: str | None = None
    status: str = "pending"  # verified | failed | refused | skipped
    verified_by: str | None = None  # hash | load
    detail: str = ""
    load_error: str = ""  # the load check failed on an exact copy: what it said, and the fix
    bytes_transferred: int = 0
    via: str = ""  # sftp | rsync: what moved the bytes of the last fetch


@dataclass
class PullResult:
    host: str
    job: str | None
    remote_dir: str
    local_dir: str
    files: list[FileResult] = field(default_factory=list)
    manifest_complete: bool = True
    manifest_reason: str | None = None
    bytes_transferred: int = 0
    load_tested: bool = False
    note: str = ""
    # Why the whole job was refused before anything moved (tui/localpath.py: a forged job id,
    # a symlink leading out of the pull root); nothing is written or recorded then.
    refused: str = ""
    # Another process (the room, `gpuroom watch`) is pulling this job into the same dir now:
    # nothing was done here, and running again later resumes where that one stops.
    busy: bool = False
    queue_id: str | None = None  # the identity of the job's queue (tui/snapshot.py)

    @property
    def ok(self) -> bool:
        """Every file home (sha256 the box's) and nothing refused; a failed load check does
        not change that."""
        return not self.refused and self.manifest_complete and \
            all(f.status == "verified" for f in self.files)

    @property
    def load_failed(self) -> list[FileResult]:
        return [f for f in self.files if f.load_error]

    @property
    def failures(self) -> list[FileResult]:
        return [f for f in self.files if f.status in ("failed", "refused")]


BUSY = "already being pulled by another gpuroom (the room or gpuroom watch); skipped here"


class PullError(GpuroomError):
    """The pull could not start (no manifest); per-file problems are in PullResult."""


NAME_MAX_BYTES = 255  # one path component, on every Linux filesystem a pull lands on
PART_SUFFIX = ".part"
# A partial download whose NAME.part could not be used: too long, or a name the box's own
# listing holds. Box names with this prefix are refused, so it never meets one of theirs.
PART_PREFIX = ".gpuroom-part-"


def part_path(target: Path, rel: str, listed: frozenset[str] = frozenset()) -> Path:
    """Where ``target``'s bytes gather before the hash check.

    NAME.part where that is a name of ours: within NAME_MAX and neither a file nor a
    directory in the box's listing (``listed``: its paths and their parent dirs). Otherwise
    a hidden name derived from NAME (so a rerun resumes it) that is always short enough.
    """
    name = target.name + PART_SUFFIX
    if len(os.fsencode(name)) <= NAME_MAX_BYTES and rel + PART_SUFFIX not in listed:
        return target.with_name(name)
    digest = hashlib.sha1(os.fsencode(target.name)).hexdigest()
    return target.with_name(PART_PREFIX + digest)


def listed_names(paths: Sequence[str]) -> frozenset[str]:
    """Every path of a listing and every directory above one (for part_path)."""
    out: set[str] = set()
    for rel in paths:
        parts = rel.split("/")
        out.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return frozenset(out)


def local_failure(exc: OSError) -> str:
    """This machine's side of a failed file, with its real cause (ENAMETOOLONG, EISDIR...)."""
    code = errno.errorcode.get(exc.errno or 0, "")
    where = f" ({exc.filename})" if exc.filename else ""
    text = f"writing here failed: {exc.strerror or exc}{' [' + code + ']' if code else ''}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{text}{where}; check free space (df -h) and pull again: it resumes"
    return f"{text}{where}"


def _refuse_local(host: str, path: Path) -> None:
    """A FIFO or device where this pull writes or hashes would block its open for ever."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    what = not_regular(mode)
    if what is not None:
        raise RemoteFileRefused(host, f"{path} on this machine is {what}, not a regular "
                                      "file: refused before opening it",
                                fix=f"move it away (mv {shlex.quote(str(path))} ...) and pull "
                                    "again")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


async def take_manifest(link: HostLink, remote_dir: str, only: list[str] | None = None, *,
                        defer_above: int | None = None,
                        deadline_s: float | None = None) -> dict[str, Any]:
    """The box's manifest of ``remote_dir``; see remote/manifest.py for ``defer_above``."""
    args = ["manifest"]
    for rel in only or []:
        args.append(f"--only={rel}")  # "=": a name starting with "-" stays a value
    if defer_above is not None:
        args += ["--defer-above", str(defer_above)]
    timeout_s = MANIFEST_TIMEOUT_S
    if deadline_s is not None:
        args += ["--deadline", f"{deadline_s:.0f}"]
        timeout_s = max(timeout_s, deadline_s + 60.0)
    # Options first, then "--": a box-given directory is never read as an option.
    result = await link.helper(*args, "--", remote_dir, timeout_s=timeout_s)
    try:
        doc = load_answer(result.stdout)
    except ValueError:
        raise PullError(f"{link.name}: manifest of {remote_dir} failed "
                        f"({result.failure()})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        raise PullError(f"{link.name}: manifest of {remote_dir}: unexpected answer")
    return doc


def hash_deadline_s(size: int) -> float:
    """How long the box may take to hash one file: the default bound, plus a slow disk's pace.

    The default bound alone would cut the manifest of any file past ~100 GB; a file that
    big reads at 50 MB/s even from a network volume.
    """
    return 120.0 + size / HASH_FLOOR_BPS


async def box_file_entry(link: HostLink, remote_dir: str, rel: str,
                         size: int) -> dict[str, Any] | None:
    """The box's manifest entry of one file, hashed now; None when it is gone or unreadable."""
    doc = await take_manifest(link, remote_dir, only=[rel], deadline_s=hash_deadline_s(size))
    for e in doc["files"]:
        if e.get("path") == rel and e.get("kind") == "file" and e.get("sha256"):
            return dict(e)
    return None


class _BoxDigests:
    """The box hashes the files its manifest deferred, one after another, in pull order.

    Started as soon as the first (stat-only for big files) manifest is in, so the box reads
    file N for its digest while file N's bytes are on the wire: a first pull of a big
    checkpoint costs about the transfer, not a full read of it first. One at a time, never in
    parallel: the box's disk is read in order, and its manifest cache is written by one
    process at a time.
    """

    def __init__(self, link: HostLink, remote_dir: str,
                 entries: list[dict[str, Any]]) -> None:
        loop = asyncio.get_running_loop()
        self._futures: dict[str, asyncio.Future[dict[str, Any] | None]] = {
            str(e["path"]): loop.create_future() for e in entries}
        self._task = asyncio.ensure_future(self._run(link, remote_dir, entries)) \
            if entries else None

    async def _run(self, link: HostLink, remote_dir: str,
                   entries: list[dict[str, Any]]) -> None:
        for e in entries:
            fut = self._futures[str(e["path"])]
            try:
                fut.set_result(await box_file_entry(link, remote_dir, str(e["path"]),
                                                    int(e["size"])))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # e.g. the link dropped: every waiter hears of it
                for left in self._futures.values():
                    if not left.done():
                        left.set_exception(exc)
                return

    async def entry(self, rel: str) -> dict[str, Any] | None:
        return await asyncio.shield(self._futures[rel])

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for fut in self._futures.values():
            if fut.done() and not fut.cancelled():
                fut.exception()  # retrieved: an error nobody waited for is not logged
            else:
                fut.cancel()


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def _load_fix(kind: str, refused: list[str]) -> str:
    """What to do about a failed load check of an exact copy (the box has the same bytes, so
    pulling again cannot help)."""
    if kind == "refused":
        return (f"nothing, for the gate: the copy is exact and counts as home. To load it, allow "
                f"{', '.join(refused) or 'that object'} yourself "
                "(torch.serialization.add_safe_globals) only if you trust what wrote the file")
    return ("the box has the same bytes, so pulling again cannot help: resume from an earlier "
            "checkpoint, or have the job save this one again")


async def load_test(path: Path) -> tuple[bool, str]:
    """Load a checkpoint in a subprocess (weights_only plus the trainers' allow-list): a crash
    or hang stays out of the TUI. Never a full unpickle: these bytes come from a rented box,
    and a full unpickle would run whatever code the file holds, on the jump host. A failure
    comes back as what the check said, then its fix."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuroom.remote.checkpoint", "verify", str(path), "--json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), LOAD_TEST_TIMEOUT_S)
    except (asyncio.TimeoutError, asyncio.CancelledError):
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
    if proc.returncode == 0:
        return True, "loaded (weights_only with the trainers' allow-list)"
    try:
        answer = load_answer(out.splitlines()[-1])
        message = sanitize_line(str(answer.get("error")))
        kind = str(answer.get("kind") or "corrupt")
        refused = [sanitize_line(str(g)) for g in answer.get("refused") or []][:5]
    except (ValueError, IndexError, AttributeError):
        message, kind, refused = last_words(err) or f"exit {proc.returncode}", "error", []
    what = "load check refused" if kind == "refused" else "load check failed"
    return False, f"{what}: {message}. Fix: {_load_fix(kind, refused)}"


class _Meter:
    def __init__(self, total: int, cb: Callable[[Progress], None] | None) -> None:
        self.total = total
        self.done = 0
        self.skipped = 0  # of done: bytes already here (a verified file, a .part's prefix)
        self.cb = cb
        self.started = time.monotonic()

    def skip(self, path: str, n: int) -> None:
        """``n`` bytes count as done without crossing the wire: they are not the rate."""
        self.skipped += n
        self.report(path, n)

    def rewind(self, done: int, skipped: int) -> None:
        """Back to an earlier (done, skipped): a discarded .part's bytes are to do again."""
        self.done, self.skipped = done, skipped

    def report(self, path: str, done_in_file_delta: int) -> None:
        self.done += done_in_file_delta
        if self.cb is None:
            return
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = (self.done - self.skipped) / elapsed
        left = max(self.total - self.done, 0)
        self.cb(Progress(self.done, self.total, rate, left / rate if rate > 0 else None, path))


class FetchFn(Protocol):
    """Append the box file's bytes past ``offset`` to ``part``; returns bytes received."""

    async def __call__(self, remote: str, part: Path, /, *, offset: int, size: int,
                       on_progress: Callable[[int], None]) -> int: ...


class _OpenSsh:
    """Big files through the OpenSSH client's SFTP (openssh_sftp.py), one session per pull.

    Where ``ssh`` cannot open the session (not installed, the config works for asyncssh but
    not for OpenSSH, no sftp subsystem), ``unusable`` says why and the files go the other way.
    """

    def __init__(self, link: HostLink, *, every_file: bool = False) -> None:
        self.link = link
        self.every_file = every_file
        self.unusable: str | None = None
        self.session_error: str | None = None  # why ssh's session did not start, if it did not
        self._session: OpenSshSftp | None = None
        if link.host.local or not link.host.ssh:
            self.unusable = "a local host"
        elif shutil.which("ssh") is None:
            self.unusable = "no ssh client on this machine"

    def wanted(self, size: int) -> bool:
        return self.unusable is None and (self.every_file or size >= BULK_MIN_BYTES)

    async def fetch(self, remote: str, part: Path, *, offset: int, size: int,
                    on_progress: Callable[[int], None]) -> int:
        if self._session is None:
            self._session = OpenSshSftp(self.link.name, self.link.bulk_ssh_argv(),
                                        self.link.host.ssh or "")
        return await self._session.fetch(remote, part, offset=offset, size=size,
                                         on_progress=on_progress)

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


class _Rsync:
    """rsync over the link's ssh alias, into the same .part the SFTP path would resume.

    ``--append`` (which implies ``--inplace``) writes straight into NAME.part, in order, from
    its current size: the same prefix contract as the SFTP path, so either can resume what
    the other left, and the same sha256 decides. ``--partial`` is not needed: in place, every
    byte written stays. The path is read from a NUL-separated --files-from list on stdin, so
    neither the box's shell nor rsync's own wildcard expansion sees it.
    """

    def __init__(self, link: HostLink, *, every_file: bool = False,
                 bwlimit_kbps: int | None = None) -> None:
        self.link = link
        self.every_file = every_file
        self.bwlimit_kbps = bwlimit_kbps  # the mirror's cap (rsync's own unit, KiB/s)
        self.usable: bool | None = None  # None: not asked yet
        self._probe_task: asyncio.Future[bool] | None = None

    def wanted(self, size: int) -> bool:
        """Whether rsync should move a file this big, if both ends have it."""
        return self.every_file or (
            size >= BULK_MIN_BYTES and self.link.bulk_cipher() not in SFTP_FAST_CIPHERS)

    def _ssh(self) -> list[str]:
        return self.link.bulk_ssh_argv()

    def _options(self) -> tuple[str, ...]:
        if self.bwlimit_kbps is None:
            return RSYNC_OPTIONS  # read now: a test may slow every pull through it
        return (f"--bwlimit={self.bwlimit_kbps}",)

    def start_probe(self) -> None:
        """Ask the box now, so the ssh login overlaps the manifest instead of following it."""
        if self._probe_task is None:
            self._probe_task = asyncio.ensure_future(self._probe())

    async def available(self) -> bool:
        """rsync here and on the box (asked once per pull, over a plain ssh)."""
        if self.usable is None:
            self.start_probe()
            assert self._probe_task is not None
            self.usable = await self._probe_task
        return self.usable

    async def close(self) -> None:
        task, self._probe_task = self._probe_task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _probe(self) -> bool:
        alias = self.link.host.ssh
        if self.link.host.local or not alias or shutil.which("rsync") is None:
            return False
        proc = await asyncio.create_subprocess_exec(
            *self._ssh(), "--", alias, RSYNC_REMOTE, "--version",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
        assert proc.stdout is not None
        try:
            out = await asyncio.wait_for(_read_tail(proc.stdout, 4096), RSYNC_PROBE_TIMEOUT_S)
            await asyncio.wait_for(proc.wait(), RSYNC_PROBE_TIMEOUT_S)
        except asyncio.TimeoutError:
            await _stop(proc)
            return False  # a box this slow to answer gets the SFTP path on the link
        except asyncio.CancelledError:
            await _stop(proc)
            raise
        return proc.returncode == 0 and out.startswith(b"rsync")

    async def fetch(self, remote: str, part: Path, *, offset: int, size: int,
                    on_progress: Callable[[int], None]) -> int:
        alias = self.link.host.ssh or ""
        argv = ["rsync", "--append", "-s", "--stats", f"--timeout={int(PULL_READ_TIMEOUT_S)}",
                f"--rsync-path={RSYNC_REMOTE}", *self._options(), "-e", shlex.join(self._ssh()),
                *_RSYNC_ONE_NAME, "--", f"{alias}:{'/' if remote.startswith('/') else '.'}",
                str(part.resolve())]
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        # The name travels as data, NUL-terminated: never globbed, split or read as an option.
        proc.stdin.write(os.fsencode(remote) + b"\0")
        proc.stdin.close()
        streams = asyncio.ensure_future(asyncio.gather(
            _read_tail(proc.stdout, RSYNC_STDERR_CAP), _read_tail(proc.stderr, RSYNC_STDERR_CAP)))
        try:
            while not streams.done():
                await asyncio.wait({streams}, timeout=RSYNC_POLL_S)
                on_progress(max(part.stat().st_size - offset, 0))
            out, err = streams.result()
            await proc.wait()
        except BaseException:
            await _stop(proc)  # its pipes close with it, so the readers end on their own
            streams.cancel()
            with contextlib.suppress(BaseException):
                await streams  # retrieved, so asyncio never logs it as lost
            raise
        appended = max(part.stat().st_size - offset, 0)
        on_progress(appended)
        if proc.returncode != 0:
            tail = last_words(err)
            # 23: a file-level error (gone, unreadable), 24: the file vanished mid-transfer.
            error = RemoteFileError if proc.returncode in (23, 24) else LinkError
            raise error(self.link.name, f"rsync of {remote} exited {proc.returncode} "
                                        f"after {appended} bytes: {tail}")
        m = _RSYNC_RECEIVED.search(out.decode(errors="replace"))
        # rsync's own count of what crossed the wire; the .part growth when it says nothing.
        return int(re.sub(r"\D", "", m.group(1))) if m else appended


# The file to fetch goes in a NUL-separated --files-from list, not as an argument: with -s the
# box's rsync expands wildcards in its arguments itself, so "*.bin" was every .bin file and
# the pull stopped at "destination must be a directory". --no-relative keeps one file, so the
# destination is the .part itself.
_RSYNC_ONE_NAME = ("--files-from=-", "--from0", "--no-relative", "--no-dirs")
_RSYNC_RECEIVED = re.compile(r"Total bytes received: ([\d,.']+)")


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM to the child's own process group (rsync and its ssh), SIGKILL if it lingers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), RSYNC_STOP_GRACE_S)
            return
        except asyncio.TimeoutError:
            continue


async def _read_tail(stream: asyncio.StreamReader, cap: int) -> bytes:
    """Everything until EOF, keeping only the last ``cap`` bytes (a box can print a lot)."""
    kept = b""
    while chunk := await stream.read(1 << 16):
        kept = (kept + chunk)[-cap:]
    return kept


class _TailHasher:
    """sha256 of a .part that is being appended to, read behind the writer in a thread.

    Hashing after the download re-reads the whole file (about 0.6 s per GiB here) on top of
    the transfer; reading behind the writer overlaps the two, and a resume hashes the prefix
    already on disk while the missing bytes arrive. Only bytes below the watermark the writer
    reports are read: the writer appends in order and never rewrites them, so what is hashed
    is what ends up in the file. ``finish`` hashes the rest once the writer has closed it.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd = os.open(path, os.O_RDONLY)
        self._h = hashlib.sha256()
        self._pos = 0
        self._limit = 0
        self._final = False
        self._stop = False
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="gpuroom-pull-hash",
                                        daemon=True)
        self._thread.start()

    def advance(self, limit: int) -> None:
        with self._cond:
            if limit > self._limit:
                self._limit = limit
                self._cond.notify()

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._stop and not self._final and self._pos >= self._limit:
                        self._cond.wait()
                    if self._stop:
                        return
                    limit, final = self._limit, self._final
                while self._pos < limit:
                    chunk = os.pread(self._fd, min(TAIL_HASH_CHUNK, limit - self._pos),
                                     self._pos)
                    if not chunk:
                        break  # still in the writer's buffer: wait for the next watermark
                    self._h.update(chunk)
                    self._pos += len(chunk)
                if final:
                    return  # short of the size only if the file shrank: the digest says so
        except BaseException as exc:  # handed to finish(); a thread has no one else to tell
            self._error = exc
        finally:
            os.close(self._fd)

    async def finish(self) -> str:
        """The digest of the whole file; call once its writer has closed it."""
        with self._cond:
            # The thread owns (and closes) the fd, so the size comes from the path.
            self._limit = max(self._limit, os.stat(self._path).st_size)
            self._final = True
            self._cond.notify()
        await asyncio.to_thread(self._thread.join)
        if self._error is not None:
            raise self._error
        if self._pos != os.stat(self._path).st_size:
            return ""  # the file changed under the hasher: no digest vouches for it
        return self._h.hexdigest()

    def abandon(self) -> None:
        """Stop without a digest (the fetch failed); the thread exits within one chunk."""
        with self._cond:
            self._stop = True
            self._cond.notify()


async def _fetch(fetch: FetchFn, remote: str, part: Path, *, size: int, meter: _Meter,
                 fr: FileResult) -> str:
    """Resume (or start) the .part; returns the sha256 of the whole .part ("" if unknown)."""
    offset = part.stat().st_size if part.exists() else 0
    if offset > size:
        offset = 0  # longer than the file on the box: cannot be a prefix of it
    # Truncate here rather than in fetch_file so the hasher never sees bytes that vanish.
    with open_append(part) as f:
        cut_to(f, offset)
    hasher = _TailHasher(part)
    hasher.advance(offset)
    meter.skip(fr.path, offset)
    last = 0

    def progress(written: int) -> None:
        nonlocal last
        meter.report(fr.path, written - last)
        last = written
        hasher.advance(offset + written)

    try:
        n = await fetch(remote, part, offset=offset, size=size, on_progress=progress)
    except BaseException:
        hasher.abandon()
        raise
    finally:
        fr.bytes_transferred += last
    fr.bytes_transferred += n - last
    return await hasher.finish()


@dataclass
class _Paths:
    """The ways bytes can come home in one pull, in the order they are tried for a file."""

    io: PullIO
    openssh: _OpenSsh | None = None
    rsync: _Rsync | None = None

    async def fetcher(self, size: int, fr: FileResult) -> FetchFn:
        if self.openssh is not None and self.openssh.wanted(size):
            fr.via = "openssh"
            return self.openssh.fetch
        if self.rsync is not None and self.rsync.wanted(size) and await self.rsync.available():
            fr.via = "rsync"
            return self.rsync.fetch
        fr.via = "sftp"
        return self.io.fetch_file

    async def fetch(self, remote: str, part: Path, *, size: int, meter: _Meter,
                    fr: FileResult) -> str:
        """_fetch through the first path that opens; one that cannot start is not retried."""
        while True:
            fetch = await self.fetcher(size, fr)
            try:
                return await _fetch(fetch, remote, part, size=size, meter=meter, fr=fr)
            except SessionUnavailable as exc:
                assert self.openssh is not None
                # wanted() is False from now on
                self.openssh.unusable = self.openssh.session_error = exc.reason

    async def close(self) -> None:
        for path in (self.openssh, self.rsync):
            if path is not None:
                await path.close()


async def _pull_one(link: HostLink, paths: _Paths, remote_dir: str,
                    entry: dict[str, Any], *, target: Path, meter: _Meter,
                    digests: _BoxDigests, names: frozenset[str]) -> FileResult:
    """_pull_file, with what fails this file alone turned into its result: the box refused
    or never opened it, or this machine could not write it. A LinkError (the link is gone)
    still ends the pull."""
    counted = (meter.done, meter.skipped)
    try:
        return await _pull_file(link, paths, remote_dir, entry, target=target, meter=meter,
                                digests=digests, names=names)
    except (RemoteFileRefused, OSError) as exc:
        meter.rewind(*counted)
        meter.total -= int(entry["size"])
        detail = exc.reason if isinstance(exc, RemoteFileRefused) else local_failure(exc)
        fr = FileResult(path=str(entry["path"]), size=int(entry["size"]), status="failed",
                        detail=detail)
        fr.sha256 = entry.get("sha256")
        return fr


async def _pull_file(link: HostLink, paths: _Paths, remote_dir: str,
                     entry: dict[str, Any], *, target: Path, meter: _Meter,
                     digests: _BoxDigests, names: frozenset[str]) -> FileResult:
    rel = entry["path"]
    size = int(entry["size"])
    fr = FileResult(path=rel, size=size, sha256=entry.get("sha256"))
    remote = remote_dir.rstrip("/") + "/" + rel
    part = part_path(target, rel, names)
    target.parent.mkdir(parents=True, exist_ok=True)
    for here in (target, part):
        _refuse_local(link.name, here)

    async def box_sha() -> str | None:
        """The box's digest; a deferred one waits for the box's hashing pass."""
        if fr.sha256 is None:
            again = await digests.entry(rel)
            if again is None or int(again["size"]) != size:
                return None  # gone, unreadable or resized on the box since it was listed
            fr.sha256 = str(again["sha256"])
        return fr.sha256

    if target.exists() and (want := await box_sha()) is not None and \
            await asyncio.to_thread(sha256_file, target) == want:
        fr.status, fr.verified_by, fr.detail = "verified", "hash", "already here"
        meter.skip(rel, size)
        return fr

    counted = (meter.done, meter.skipped)
    kept = part.stat().st_size if part.exists() else 0  # a .part an earlier pull left
    try:
        got = await paths.fetch(remote, part, size=size, meter=meter, fr=fr)
    except RemoteFileRefused:
        raise  # asking the box again would meet the same file
    except RemoteFileError:
        got = ""  # it shrank or vanished since it was listed: as a mismatch, ask again
    if got and got == await box_sha():
        os.replace(part, target)
        fr.status, fr.verified_by = "verified", "hash"
        return fr
    listed = (size, fr.sha256)  # what the box said the file was (no digest: it changed)
    # Mismatch: the .part may mix two versions of a file rewritten on the box. Ask the box
    # again what the file is now (a LinkError here keeps the .part), and fetch it whole once.
    again = await box_file_entry(link, remote_dir, rel, size)
    part.unlink(missing_ok=True)
    meter.rewind(*counted)
    if again is None:
        fr.status, fr.detail = "failed", "gone on the box since it was listed: nothing kept"
        return fr
    meter.total += int(again["size"]) - size
    size, sha = int(again["size"]), str(again["sha256"])
    fr.size, fr.sha256 = size, sha
    try:
        got = await paths.fetch(remote, part, size=size, meter=meter, fr=fr)
    except RemoteFileRefused:
        raise
    except RemoteFileError as exc:
        part.unlink(missing_ok=True)
        fr.status, fr.detail = "failed", f"changed on the box twice while pulled: {exc.reason}"
        return fr
    if got == sha:
        os.replace(part, target)
        fr.status, fr.verified_by = "verified", "hash"
        fr.detail = _refetch_reason(listed == (size, sha), kept if 0 < kept <= listed[0] else 0)
        return fr
    part.unlink(missing_ok=True)
    fr.status = "failed"
    fr.detail = ("sha256 mismatch twice: the bytes received are not the bytes the box's "
                 "manifest lists; kept nothing. Check the box's disk, then pull again")
    return fr


def _refetch_reason(unchanged: bool, kept: int) -> str:
    """Why a file was fetched a second time, as it really happened."""
    if not unchanged:
        return "re-fetched: the file changed on the box during the pull"
    if kept:
        return (f"re-fetched whole: the {kept}-byte .part kept here from an earlier pull did "
                "not match the box's sha256 (the file is unchanged on the box), so it was "
                "discarded")
    return ("re-fetched whole: the bytes received did not match the box's sha256 though the "
            "file is unchanged on the box (damaged on the way or on this disk); the first "
            "copy was discarded")


async def pull(link: HostLink, remote_dir: str, local_dir: str | Path, *,
               on_progress: Callable[[Progress], None] | None = None, job: str | None = None,
               load_test_torch: bool | None = None,
               state_path: Path | None = None, method: str = "auto",
               only: Sequence[str] | None = None,
               bwlimit_kbps: int | None = None,
               queue_id: str | None = None) -> PullResult:
    """Pull ``remote_dir`` into ``local_dir``; records the pull when everything verified.

    ``only``: these paths under ``remote_dir`` and nothing else (the mirror's newest
    checkpoint, tui/fleet/mirror.py); the record then lists only them. ``bwlimit_kbps``:
    every file through rsync --bwlimit (the one path that can cap its rate); where rsync
    cannot run, the files come uncapped over SFTP and the result's note says so.
    ``queue_id``: the identity of ``job``'s queue, kept in the record (a new queue's j1 is
    another job).

    ``method``: "auto" sends files of BULK_MIN_BYTES or more through the OpenSSH client's
    SFTP, and the rest through SFTP on the link; where ``ssh`` cannot open that session, big
    files take rsync when the link's cipher is not AES-GCM and both ends have rsync. "sftp"
    uses the link only; "openssh" and "rsync" use that path for every file when it works
    (SFTP on the link otherwise).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    if bwlimit_kbps is not None and method != "auto":
        raise ValueError("a bandwidth cap picks its own path (rsync): leave method 'auto'")
    paths = _Paths(PullIO(link))
    if bwlimit_kbps is not None:
        method = "capped"
        paths.rsync = _Rsync(link, every_file=True, bwlimit_kbps=bwlimit_kbps)
        paths.rsync.start_probe()
    if method in ("auto", "openssh"):
        paths.openssh = _OpenSsh(link, every_file=method == "openssh")
    if method in ("auto", "rsync"):
        paths.rsync = _Rsync(link, every_file=method == "rsync")
        if paths.rsync.every_file:
            paths.rsync.start_probe()  # the ssh login overlaps the manifest
    # One writer per job and destination across processes: two would share the .part.
    key = (link.name, queue_id or "", job or remote_dir, str(Path(local_dir).absolute()))
    try:
        with transfer_lock(state_file(state_path).parent, *key):
            return await _pull(link, remote_dir, Path(local_dir), paths,
                               on_progress=on_progress, job=job,
                               load_test_torch=load_test_torch, state_path=state_path,
                               only=list(only) if only is not None else None,
                               queue_id=queue_id)
    except TransferBusy:
        return PullResult(link.name, job, remote_dir, str(local_dir), busy=True,
                          refused=BUSY, queue_id=queue_id)
    except OSError as exc:
        # The link's own failures arrive as LinkError, and a file's as its result; an
        # OSError here is this machine's (the pull's dir or the state dir): the user's to fix.
        raise PullError(f"{link.name}: pulling into {local_dir} failed: {local_failure(exc)}",
                        "check that directory (ls -ld, df -h) and pull again: it "
                        "resumes") from exc
    finally:
        await paths.close()


async def _pull(link: HostLink, remote_dir: str, local: Path, paths: _Paths, *,
                on_progress: Callable[[Progress], None] | None, job: str | None,
                load_test_torch: bool | None, state_path: Path | None,
                only: list[str] | None = None, queue_id: str | None = None) -> PullResult:
    local.mkdir(parents=True, exist_ok=True)
    doc = await take_manifest(link, remote_dir, only, defer_above=DEFER_HASH_BYTES)
    box_dir = str(doc.get("dir") or remote_dir)
    result = PullResult(host=link.name, job=job, remote_dir=box_dir, local_dir=str(local),
                        manifest_complete=bool(doc.get("complete")),
                        manifest_reason=doc.get("reason"), queue_id=queue_id)
    names = listed_names([str(e.get("path")) for e in doc["files"]])
    todo: list[tuple[dict[str, Any], Path]] = []
    for entry in doc["files"]:
        rel = str(entry.get("path"))
        kind = entry.get("kind")
        if kind != "file":
            what = {"symlink": f"a symlink on the box (-> {entry.get('target')})"}.get(
                str(kind), f"not a regular file ({kind}: {entry.get('reason', '')})")
            result.files.append(FileResult(rel, 0, status="refused",
                                           detail=f"refused: {what}; never followed"))
            continue
        target = safe_local_path(local, rel)
        if any(part.startswith(PART_PREFIX) for part in rel.split("/")):
            result.files.append(FileResult(rel, int(entry.get("size") or 0), status="refused",
                                           detail=f"refused: names starting {PART_PREFIX} are "
                                                  "gpuroom's partial downloads"))
            continue
        if target is None:
            result.files.append(FileResult(rel, int(entry.get("size") or 0), status="refused",
                                           detail="refused: path would land outside "
                                                  f"{local}"))
            continue
        part = part_path(target, rel, names)
        if symlinked(part):  # written through, it would land wherever it points
            result.files.append(FileResult(rel, int(entry.get("size") or 0), status="refused",
                                           detail=f"refused: {part} is a symlink here; "
                                                  "never written through"))
            continue
        todo.append((entry, target))
    rsync, openssh = paths.rsync, paths.openssh
    if rsync is not None and any(rsync.wanted(int(e["size"])) and not
                                 (openssh is not None and openssh.wanted(int(e["size"])))
                                 for e, _ in todo):
        rsync.start_probe()  # the ssh login overlaps the first files
    meter = _Meter(sum(int(e["size"]) for e, _ in todo), on_progress)
    digests = _BoxDigests(link, box_dir, [e for e, _ in todo if e.get("sha256") is None])
    try:
        for entry, target in todo:
            # A LinkError propagates: the link is gone, the .part files stay for the resume.
            fr = await _pull_one(link, paths, box_dir, entry, target=target, meter=meter,
                                 digests=digests, names=names)
            result.files.append(fr)
            result.bytes_transferred += fr.bytes_transferred
    finally:
        await digests.close()
    do_load = torch_available() if load_test_torch is None else load_test_torch
    result.load_tested = do_load
    for fr in result.files:
        if fr.status != "verified" or not fr.path.endswith(TORCH_SUFFIXES):
            continue
        if not do_load:
            fr.detail = "hash-verified, not load-verified (no torch here)"
            continue
        target = safe_local_path(local, fr.path)
        assert target is not None
        ok, detail = await load_test(target)
        if ok:
            fr.verified_by, fr.detail = "load", detail
        else:  # still home: an exact copy of what the box has
            fr.detail = fr.load_error = detail
    notes = []
    if openssh is not None and openssh.session_error:
        notes.append(f"ssh's sftp session did not start, so big files came over the link "
                     f"instead: {openssh.session_error}")
    if not do_load and any(f.path.endswith(TORCH_SUFFIXES) for f in result.files):
        notes.append(NO_TORCH)
    if rsync is not None and rsync.bwlimit_kbps is not None and any(
            f.via not in ("", "rsync") for f in result.files):
        notes.append("bandwidth cap not applied: rsync could not run on both ends, so files "
                     "came over SFTP at full rate")
    result.note = "; ".join(notes)
    if result.ok and result.files:
        record_pull(result, state_path)
    return result


# -------------------------------------------------------------------------- pull records

def state_file(path: Path | None = None) -> Path:
    return path or Path(platformdirs.user_state_dir("gpuroom")) / "pulls.json"


def load_records(path: Path | None = None) -> list[dict[str, Any]]:
    p = state_file(path)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        return []
    except ValueError as exc:
        raise PullError(f"{p} is not valid JSON ({exc})",
                        "repair or move it: the teardown gate reads it") from exc
    pulls = doc.get("pulls") if isinstance(doc, dict) else None
    return [r for r in pulls if isinstance(r, dict)] if isinstance(pulls, list) else []


def record_pull(result: PullResult, path: Path | None = None) -> None:
    """Add (or replace) the record for this host/job/dir: under the file's lock, re-read
    there (the room and `gpuroom watch` may record at once), written atomically."""
    p = state_file(path)
    files: list[dict[str, Any]] = [
        {"path": f.path, "size": f.size, "sha256": f.sha256, "verified_by": f.verified_by,
         **({"load_error": f.load_error} if f.load_error else {})}
        for f in result.files if f.status == "verified"]
    torch_files = [f for f in files if str(f["path"]).endswith(TORCH_SUFFIXES)]
    by_load = bool(torch_files) and all(f["verified_by"] == "load" for f in torch_files)
    with locked(p):
        records = [r for r in load_records(p)
                   if (r.get("host"), r.get("queue_id"), r.get("job"), r.get("dir")) !=
                   (result.host, result.queue_id, result.job, result.remote_dir)]
        records.append({"host": result.host, "queue_id": result.queue_id, "job": result.job,
                        "dir": result.remote_dir,
                        "local_dir": result.local_dir, "files": files,
                        "verified_by": "load" if by_load else "hash", "time": time.time()})
        write_private(p, {"version": 1, "pulls": records})
