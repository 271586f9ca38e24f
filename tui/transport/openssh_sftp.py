"""Big files through the OpenSSH client: ``ssh -s ALIAS sftp``, read side of SFTP v3 only.

Why a second SFTP client when asyncssh has one: a 2 GiB pull is CPU-bound on the jump host,
and asyncssh spends Python time on every 32 KiB SSH packet the box's sshd sends (about 65 000
of them per 2 GiB), while OpenSSH's client decrypts in C and hands over a pipe. Measured side by
side (bench/pull.py): the same pull needed about a quarter less CPU through ``ssh`` than through
asyncssh, which on a saturated pair of cores is the difference between trailing rsync and
leading it.

The session is one ``ssh`` process per pull, reused for every big file, started with the
user's alias and ssh_config (ProxyJump, keys, known_hosts: OpenSSH verifies the host key; the
asyncssh link that took the manifest has verified it already). The byte loop runs in a worker
thread with blocking pipe I/O, so the event loop (the room's screen) only sees progress; a
cancel kills the process, which ends the thread's read.

Reads are pipelined: up to PULL_MAX_REQUESTS requests in flight, answers written to the .part
strictly in file order, so an interruption leaves a correct prefix to resume from, as on the
asyncssh path. A server may answer a read with fewer bytes than asked (SFTP allows it); the rest
is asked for again before anything later is written.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import os
import select
import signal
import struct
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from gpuroom.tui.sanitize import last_words, sanitize_line
from gpuroom.tui.transport.link import (
    PULL_BLOCK_BYTES,
    PULL_MAX_REQUESTS,
    PULL_OPEN_TIMEOUT_S,
    PULL_READ_TIMEOUT_S,
    LinkError,
    RemoteFileError,
    RemoteFileRefused,
    cut_to,
    not_regular,
)

# SFTP v3 packet types (draft-ietf-secsh-filexfer-02) and the status codes named in errors.
_INIT, _VERSION, _OPEN, _CLOSE, _READ, _LSTAT, _FSTAT = 1, 2, 3, 4, 5, 7, 8
_STATUS, _HANDLE, _DATA, _ATTRS, _EXTENDED, _EXTENDED_REPLY = 101, 102, 103, 105, 200, 201
_ATTR_SIZE, _ATTR_UIDGID, _ATTR_PERMISSIONS = 0x1, 0x2, 0x4
_FX_EOF = 1
_FX_NAMES = {2: "no such file", 3: "permission denied", 4: "failure"}
_READ_FLAG = 0x1
_LIMITS_EXT = b"limits@openssh.com"
# Without the limits extension a server is only known to answer this much per read.
_SAFE_BLOCK = 32 << 10
_MAX_MESSAGE = (1 << 20) + 1024  # larger than any answer to what we ask: a broken stream
_START_TIMEOUT_S = 60.0  # login and the SFTP handshake; ssh's ConnectTimeout cuts sooner
_PROGRESS_EVERY = 4 << 20  # progress crosses to the event loop this often, not per block
_STOP_GRACE_S = 5.0
_STDERR_CAP = 4096


class SessionUnavailable(LinkError):
    """ssh or its sftp subsystem did not come up: the caller falls back to the asyncssh link."""


class _Late(LinkError):
    """No answer within the deadline of one request."""


def _string(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


class _Pipes:
    """Blocking framed I/O on the ssh process's pipes, with a deadline per answer."""

    def __init__(self, proc: subprocess.Popen[bytes], host: str) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.host = host
        self._in = proc.stdin.fileno()
        self._out = proc.stdout.fileno()
        setpipe = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux only
        if setpipe is not None:
            with contextlib.suppress(OSError):  # capped by fs.pipe-max-size: keep the default
                # A 1 MiB pipe: a 255 KiB answer crosses in one or two reads, not sixteen.
                fcntl.fcntl(self._out, setpipe, 1 << 20)
        self._poll = select.poll()
        self._poll.register(self._out, select.POLLIN)

    def send(self, kind: int, body: bytes) -> None:
        msg = struct.pack(">IB", len(body) + 1, kind) + body
        view = memoryview(msg)
        while view:
            view = view[os.write(self._in, view):]

    def _fill(self, view: memoryview, timeout_s: float) -> None:
        got = 0
        while got < len(view):
            if not self._poll.poll(int(timeout_s * 1000)):
                raise _Late(self.host, f"the box sent nothing for {timeout_s:.0f} s over "
                                           "ssh's sftp session")
            n = os.readv(self._out, [view[got:]])
            if n == 0:
                raise EOFError("ssh closed its output")
            got += n

    def receive(self, timeout_s: float) -> tuple[int, memoryview]:
        """One message: (type, body after the type byte)."""
        head = bytearray(5)
        self._fill(memoryview(head), timeout_s)
        length, kind = struct.unpack(">IB", head)
        if not 1 <= length <= _MAX_MESSAGE:
            raise LinkError(self.host, f"ssh's sftp session sent a {length}-byte message; "
                                       "the stream is not SFTP (a shell rc file printing?)")
        body = bytearray(length - 1)
        self._fill(memoryview(body), timeout_s)
        return kind, memoryview(body)


def _status(body: memoryview) -> tuple[int, str]:
    code = struct.unpack_from(">I", body, 4)[0]
    msg = ""
    with contextlib.suppress(struct.error, UnicodeDecodeError):
        (n,) = struct.unpack_from(">I", body, 8)
        msg = bytes(body[12:12 + n]).decode()
    return code, sanitize_line(msg)


class OpenSshSftp:
    """One ``ssh -s ALIAS sftp`` session for a pull; ``fetch`` moves one file at a time."""

    def __init__(self, host: str, ssh_argv: list[str], alias: str) -> None:
        self.host = host
        self._argv = [*ssh_argv, "-s", "--", alias, "sftp"]
        self._proc: subprocess.Popen[bytes] | None = None
        self._pipes: _Pipes | None = None
        self._stderr: IO[bytes] | None = None
        self._block = _SAFE_BLOCK
        self._next_id = 1
        self._lock = asyncio.Lock()

    # ---------------------------------------------------------------- session (worker thread)

    def _start(self) -> None:
        if self._stderr is None:
            self._stderr = tempfile.TemporaryFile()
        else:  # a session started again after a failure: only this one's words
            self._stderr.seek(0)
            self._stderr.truncate()
        try:
            self._proc = subprocess.Popen(
                self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                start_new_session=True)  # its own group: a cancel stops ssh and nothing else
        except OSError as exc:
            raise SessionUnavailable(self.host, f"cannot run ssh: {exc}") from exc
        self._pipes = _Pipes(self._proc, self.host)
        try:
            self._pipes.send(_INIT, struct.pack(">I", 3))
            kind, body = self._pipes.receive(_START_TIMEOUT_S)
            if kind != _VERSION:
                raise SessionUnavailable(self.host, f"sftp answered type {kind} to INIT")
            if _LIMITS_EXT in bytes(body):
                rid = self._id()
                self._pipes.send(_EXTENDED, struct.pack(">I", rid) + _string(_LIMITS_EXT))
                kind, body = self._pipes.receive(_START_TIMEOUT_S)
                if kind == _EXTENDED_REPLY:
                    max_read = struct.unpack_from(">Q", body, 12)[0]
                    if max_read > 0:
                        self._block = min(PULL_BLOCK_BYTES, max_read)
        except (EOFError, OSError, LinkError, struct.error) as exc:
            reason = self._stderr_tail() or str(exc)
            self._discard()
            if isinstance(exc, SessionUnavailable):
                raise
            raise SessionUnavailable(self.host, f"ssh's sftp session did not start: {reason}",
                                     fix=f"check that `{' '.join(self._argv)}` works") from exc

    def _id(self) -> int:
        self._next_id = (self._next_id + 1) & 0xFFFFFFFF
        return self._next_id

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        with contextlib.suppress(OSError, ValueError):
            if self._proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(0.5)  # its last words reach the file before it exits
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - _STDERR_CAP))
            return last_words(self._stderr.read())
        return ""

    def _last_words(self, exc: BaseException) -> str:
        # _discard already ran (in _copy); the stderr file outlives the process.
        return self._stderr_tail() or str(exc) or type(exc).__name__

    def _terminate(self) -> None:
        """Stop ssh (any thread). Its pipes stay open for the thread that reads them."""
        proc = self._proc
        if proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(_STOP_GRACE_S)
                return
            except subprocess.TimeoutExpired:
                continue

    def _discard(self) -> None:
        """End the session; only from the thread that reads its pipes (or with none running).

        Closing an fd another thread still polls would let that thread read whatever file
        reuses the number next.
        """
        self._terminate()
        proc, self._proc, self._pipes = self._proc, None, None
        if proc is not None:
            for f in (proc.stdin, proc.stdout):
                with contextlib.suppress(OSError):
                    if f is not None:
                        f.close()

    def _copy(self, remote: str, part: Path, offset: int, size: int,
              report: Callable[[int], None]) -> int:
        """Append [offset, size) of ``remote`` to ``part``; returns the data bytes received."""
        if self._pipes is None:
            self._start()
        pipes = self._pipes
        assert pipes is not None
        try:
            handle = self._open(pipes, remote)
        except RemoteFileError:
            raise  # the box said no; the session is fine
        except _Late as exc:
            # sftp-server is stuck in the kernel on this file (a FIFO swapped in after our
            # look, a dead mount): only a new session gets answers again, and this file fails
            # alone.
            self._discard()
            raise RemoteFileRefused(
                self.host, f"{remote} got no answer in {PULL_OPEN_TIMEOUT_S:.0f} s (the box's "
                           "disk or mount is stuck there, or it is a special file)",
                fix=f"check {remote} on the box (ls -l, df); the other files were "
                    "pulled") from exc
        except BaseException:
            self._discard()
            raise
        try:
            with open(part, "ab", buffering=0) as out:
                cut_to(out, offset)
                received = self._read_into(pipes, handle, out, offset=offset, size=size,
                                           report=report, remote=remote)
            pipes.send(_CLOSE, struct.pack(">I", self._id()) + handle)
            pipes.receive(PULL_READ_TIMEOUT_S)
        except BaseException:
            # Reads may still be in flight: their answers would be taken for the next file's.
            self._discard()
            raise
        return received

    def _open(self, pipes: _Pipes, remote: str) -> bytes:
        """The box's handle for ``remote``, as the string READ and CLOSE carry.

        sftp-server's open(2) of a FIFO waits for a writer, for ever: the name is looked at
        first (LSTAT), and what opened is looked at again (FSTAT), since a job may swap the
        name in between. Only a regular file is read.
        """
        name = _string(os.fsencode(remote))
        self._refuse(remote, self._attrs(pipes, _LSTAT, name, remote))
        pipes.send(_OPEN, struct.pack(">I", self._id()) + name
                   + struct.pack(">II", _READ_FLAG, 0))
        kind, body = pipes.receive(PULL_OPEN_TIMEOUT_S)
        if kind == _STATUS:
            code, msg = _status(body)
            raise RemoteFileError(self.host, f"open {remote} failed: "
                                             f"{_FX_NAMES.get(code, f'status {code}')} {msg}")
        if kind != _HANDLE:
            raise LinkError(self.host, f"sftp answered type {kind} to OPEN")
        (hlen,) = struct.unpack_from(">I", body, 4)
        handle = _string(bytes(body[8:8 + hlen]))
        try:
            self._refuse(remote, self._attrs(pipes, _FSTAT, handle, remote))
        except RemoteFileError:
            pipes.send(_CLOSE, struct.pack(">I", self._id()) + handle)
            pipes.receive(PULL_OPEN_TIMEOUT_S)
            raise
        return handle

    def _attrs(self, pipes: _Pipes, kind: int, what: bytes, remote: str) -> int | None:
        """The permissions word (file type and mode) of LSTAT/FSTAT, None if not sent."""
        pipes.send(kind, struct.pack(">I", self._id()) + what)
        answer, body = pipes.receive(PULL_OPEN_TIMEOUT_S)
        if answer == _STATUS:
            code, msg = _status(body)
            raise RemoteFileError(self.host, f"stat {remote} failed: "
                                             f"{_FX_NAMES.get(code, f'status {code}')} {msg}")
        if answer != _ATTRS:
            raise LinkError(self.host, f"sftp answered type {answer} to a stat")
        try:
            (flags,) = struct.unpack_from(">I", body, 4)
            at = 8 + (8 if flags & _ATTR_SIZE else 0) + (8 if flags & _ATTR_UIDGID else 0)
            return int(struct.unpack_from(">I", body, at)[0]) \
                if flags & _ATTR_PERMISSIONS else None
        except struct.error:
            raise LinkError(self.host, "sftp sent a malformed ATTRS answer") from None

    def _refuse(self, remote: str, mode: int | None) -> None:
        what = not_regular(mode)
        if what is not None:
            raise RemoteFileRefused(self.host, f"{remote} is {what} now, not a regular file: "
                                               "refused before reading (it could block for "
                                               "ever)")

    def _read_into(self, pipes: _Pipes, handle: bytes, out: Any, *, offset: int, size: int,
                   report: Callable[[int], None], remote: str) -> int:
        order: collections.deque[tuple[int, int, int]] = collections.deque()  # id, off, len
        answers: dict[int, tuple[int, memoryview]] = {}
        next_off, pos, received, reported = offset, offset, 0, 0

        def ask(off: int, length: int, *, first: bool = False) -> None:
            rid = self._id()
            pipes.send(_READ, struct.pack(">I", rid) + handle + struct.pack(">QI", off, length))
            (order.appendleft if first else order.append)((rid, off, length))

        while pos < size:
            while next_off < size and len(order) < PULL_MAX_REQUESTS:
                n = min(self._block, size - next_off)
                ask(next_off, n)
                next_off += n
            rid, off, length = order[0]
            while rid not in answers:  # sftp-server answers in order; others may not
                kind, body = pipes.receive(PULL_READ_TIMEOUT_S)
                answers[struct.unpack_from(">I", body)[0]] = (kind, body)
            order.popleft()
            kind, body = answers.pop(rid)
            if kind == _STATUS:
                code, msg = _status(body)
                if code == _FX_EOF:
                    raise RemoteFileError(self.host, f"{remote} ended at {pos} bytes, {size} "
                                                     "expected (it shrank on the box)")
                raise RemoteFileError(self.host, f"read {remote} failed: "
                                                 f"{_FX_NAMES.get(code, f'status {code}')} {msg}")
            if kind != _DATA:
                raise LinkError(self.host, f"sftp answered type {kind} to READ")
            (n,) = struct.unpack_from(">I", body, 4)
            data = body[8:8 + n]
            if len(data) != n or n == 0:
                raise LinkError(self.host, "sftp sent a malformed DATA answer")
            try:
                while data:
                    data = data[os.write(out.fileno(), data):]
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, out.name) from exc
            received += n
            pos += n
            if n < length:  # a short answer: the rest comes before any later block
                ask(off + n, length - n, first=True)
            if pos - offset - reported >= _PROGRESS_EVERY or pos >= size:
                reported = pos - offset
                report(reported)
        return received

    # ---------------------------------------------------------------- the event loop's side

    async def fetch(self, remote: str, part: Path, *, offset: int, size: int,
                    on_progress: Callable[[int], None]) -> int:
        """Append the box file's bytes past ``offset`` to ``part``; returns bytes received.

        Raises SessionUnavailable when ssh's sftp session never came up (nothing written),
        RemoteFileError for the file (gone, unreadable, shrank) and LinkError for the link.
        """
        loop = asyncio.get_running_loop()
        # The thread only records how far it is; on_progress runs here, in the pull's task,
        # so a callback may cancel that task or raise into it as on the other paths.
        latest = 0
        wake = asyncio.Event()

        def report(n: int) -> None:
            nonlocal latest
            latest = n
            loop.call_soon_threadsafe(wake.set)

        def run() -> int:
            try:
                return self._copy(remote, part, offset, size, report)
            except (RemoteFileError, SessionUnavailable):
                raise
            except OSError as exc:
                if exc.filename is not None:  # the local .part: disk full, a name too long
                    raise  # this machine's, not the link's: the pull fails that file
                raise LinkError(self.host, "ssh's sftp session failed: "
                                           f"{self._last_words(exc)}") from exc
            except EOFError as exc:
                raise LinkError(self.host, "ssh's sftp session ended: "
                                           f"{self._last_words(exc)}") from exc

        async with self._lock:
            done = loop.run_in_executor(None, run)
            shown = 0
            try:
                while not done.done():
                    waiter = asyncio.ensure_future(wake.wait())
                    either: set[asyncio.Future[Any]] = {done, waiter}
                    try:
                        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        waiter.cancel()
                    wake.clear()
                    if latest != shown:
                        shown = latest
                        on_progress(shown)
            except BaseException:
                # The thread is blocked on the pipe: killing ssh ends its read at once.
                await asyncio.to_thread(self._terminate)
                with contextlib.suppress(BaseException):
                    await done
                raise
            return done.result()

    async def close(self) -> None:
        async with self._lock:
            await asyncio.to_thread(self._discard)
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None

