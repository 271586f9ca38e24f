"""The only module that speaks SSH: one connection per host, bounded requests, the helper.

A HostLink owns one transport (asyncssh to a box, or a subprocess for the local host), puts
the helper zipapp on the box (temp name, rename, sha256 verified on the box, reused when the
same hash is already there) and answers ``poll``: one probe document per call, either over a
long-lived ``serve`` channel or by one exec. Every request has a deadline and an output cap;
any failure closes the transport and raises LinkError, so nothing hangs half-open (U17) and
the next poll starts from a fresh connection. A LinkError means "no answer", never "the run
is dead" (GEN8): deciding that is the doctor's job, from a later good snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import posixpath
import re
import secrets
import shlex
import shutil
import socket
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import asyncssh

from gpuroom.remote import SCHEMA
from gpuroom.tui.config import (
    HostConfig,
    check_alias,
    default_ssh_config_path,
)
from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.localpath import open_append
from gpuroom.tui.sanitize import last_words, sanitize_line
from gpuroom.tui.snapshot import load_answer, snapshot_problems
from gpuroom.tui.ssh_config import check_ssh_config, ssh_config_aliases
from gpuroom.tui.transport.helper_build import HelperArchive, helper_archive
from gpuroom.tui.transport.openssh_trust import trust_options

CONNECT_TIMEOUT_S = 10.0
LOGIN_TIMEOUT_S = 15.0
# A dead peer is noticed after interval * count: 3 s * 3 = ~9 s, not TCP's two hours.
KEEPALIVE_INTERVAL_S = 3.0
KEEPALIVE_COUNT_MAX = 3
REQUEST_TIMEOUT_S = 10.0  # one probe; the box answers in milliseconds when healthy
DEPLOY_TIMEOUT_S = 60.0
OUTPUT_CAP_BYTES = 8 << 20  # 8 MiB: a probe is tens of KiB; more means something is wrong
READ_CHUNK = 1 << 16
MIN_BOX_PYTHON = (3, 8)

# Every interpreter started for the helper (the hash check included) is isolated: -I keeps out
# the user site (usercustomize), PYTHONPATH, PYTHONHOME and the other PYTHON* variables, and
# the current directory, so a file planted by anything running as the box's user cannot run
# inside the helper while its hash still matches. A zipapp run with -I still has the archive
# as sys.path[0] (Python 3.8 too). Defence in depth: the jump host trusts no answer anyway.
ISOLATED = "-I"

# Runs on the box with the box's own python3: hashes the helper without trusting it, and
# reports the interpreter version. A fixed program with the path as argv, never a pipeline.
_CHECK_SNIPPET = (
    "import hashlib,json,os,sys\n"
    "p=os.path.expanduser(sys.argv[1])\n"
    "try:\n"
    " f=open(p,'rb');h=hashlib.sha256(f.read()).hexdigest();f.close()\n"
    "except OSError:\n"
    " h=None\n"
    "print(json.dumps({'py':list(sys.version_info[:3]),'sha':h}))\n"
)


class LinkError(GpuroomError):
    """No usable answer from a host. The message names the host and the cause."""

    def __init__(self, host: str, message: str, *, fix: str | None = None) -> None:
        super().__init__(f"{host}: {message}", fix)
        self.host = host
        self.reason = message


class SshConfigRefused(LinkError):
    """The user's ssh config is one asyncssh must not read (an Include loop, a FIFO, a link
    to a device): a configuration error, naming the file and line."""

    exit_code = 2  # tui/cli/main.py: usage or config error


class RemoteFileError(LinkError):
    """The file, not the link: it vanished, shrank or could not be read; the link is fine."""


class RemoteFileRefused(RemoteFileError):
    """The file cannot be pulled as it is (not a regular file, or it never opened in time):
    asking the box again would not change that, so the pull fails this file and goes on."""


class HostKeyError(LinkError):
    """The box's host key is unknown or changed: refused, never silently trusted."""

    def __init__(self, host: str, message: str, *, fix: str | None = None,
                 changed: bool = False) -> None:
        super().__init__(host, message, fix=fix)
        self.changed = changed


class UploadError(Exception):
    """Putting a file on the box failed: at which step (naming the file) and the error."""

    def __init__(self, step: str, error: str) -> None:
        super().__init__(f"{step} failed: {error}")
        self.step = step
        self.error = error


@dataclass
class ExecResult:
    rc: int | None
    stdout: bytes
    stderr: bytes

    def failure(self) -> str:
        """How the command ended, as one line fit for any terminal: "exit 2: <stderr tail>".

        The stderr is the box's: escape sequences in it must not reach a CLI terminal or the
        room, so it goes through last_words like every other child's stderr.
        """
        status = "no exit status" if self.rc is None else f"exit {self.rc}"
        words = last_words(self.stderr)
        return f"{status}: {words}" if words else status


class _Reader(Protocol):
    async def read(self, n: int = -1) -> bytes: ...


class _Writer(Protocol):
    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...


async def _read_all(reader: _Reader, cap: int) -> bytes:
    buf = bytearray()
    while True:
        chunk = await reader.read(READ_CHUNK)
        if not chunk:
            return bytes(buf)
        buf += chunk
        if len(buf) > cap:
            raise OverflowError(f"answer exceeded {cap} bytes")


class ServeChannel:
    """One ``helper serve`` process: a request line in, a JSON line out, bounded both ways."""

    def __init__(self, reader: _Reader, writer: _Writer, closer: Any) -> None:
        self._reader = reader
        self._writer = writer
        self._closer = closer
        self._buf = bytearray()

    async def request(self, payload: dict[str, Any], cap: int) -> dict[str, Any]:
        self._writer.write(json.dumps(payload, separators=(",", ":")).encode() + b"\n")
        await self._writer.drain()
        line = await self._read_line(cap)
        answer = load_answer(line)
        if not isinstance(answer, dict):
            raise ValueError("serve answered something other than a JSON object")
        return answer

    async def _read_line(self, cap: int) -> bytes:
        while True:
            i = self._buf.find(b"\n")
            if i > cap or (i < 0 and len(self._buf) > cap):
                raise OverflowError(f"answer exceeded {cap} bytes")
            if i >= 0:
                line = bytes(self._buf[:i])
                del self._buf[: i + 1]
                return line
            chunk = await self._reader.read(READ_CHUNK)
            if not chunk:
                raise EOFError("the helper closed its channel")
            self._buf += chunk

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a channel that is already gone
            self._closer()


class Transport(Protocol):
    """What the link needs from a way to reach a box."""

    python: str

    async def exec(self, argv: list[str], *, stdin: bytes | None, cap: int) -> ExecResult: ...

    async def put_file(self, rel_path: str, data: bytes) -> None: ...

    async def open_serve(self, argv: list[str]) -> ServeChannel: ...

    async def close(self) -> None: ...


# The helper verbs that only read and never start a process of the user's (a runner passes
# its caller's environment on to every job it launches): on the local host they get only the
# environment a reader needs, not the user's tokens and hooks. Queue and secret verbs keep the
# whole environment, so a job still sees the user's own. Over SSH nothing is trimmed: the box's
# shell builds the environment before our command runs, so trimming it there would protect
# nothing that -I does not.
READER_VERBS = frozenset({"probe", "serve", "manifest", "rundirs", "du", "version"})
READER_ENV = frozenset({"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR",
                        "LD_LIBRARY_PATH", "XDG_RUNTIME_DIR", "TMUX_TMPDIR"})
READER_ENV_PREFIXES = ("LC_", "GPUROOM_", "SLURM_", "CUDA_", "NVIDIA_")


def reader_env(argv: list[str], env: dict[str, str]) -> dict[str, str] | None:
    """The environment for the local helper started with ``argv``: trimmed for the hash
    check and the reader verbs, None (all of it) for every other verb."""
    verb = argv[3] if len(argv) > 3 and argv[1] == ISOLATED else None
    if not (argv[1:3] == [ISOLATED, "-c"] or verb in READER_VERBS):
        return None
    return {k: v for k, v in env.items()
            if k in READER_ENV or k.startswith(READER_ENV_PREFIXES)}


class LocalTransport:
    """The jump host itself, reached by subprocess: gpuroom with no configuration."""

    def __init__(self) -> None:
        self.python = sys.executable
        self._procs: list[asyncio.subprocess.Process] = []

    async def exec(self, argv: list[str], *, stdin: bytes | None, cap: int) -> ExecResult:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(Path.home()),
            env=reader_env(argv, dict(os.environ)),
        )
        try:
            if stdin is not None and proc.stdin is not None:
                proc.stdin.write(stdin)
                await proc.stdin.drain()
                proc.stdin.close()
            assert proc.stdout is not None and proc.stderr is not None
            out, err = await asyncio.gather(_read_all(proc.stdout, cap),
                                            _read_all(proc.stderr, cap))
            rc = await proc.wait()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise
        return ExecResult(rc=rc, stdout=out, stderr=err)

    async def put_file(self, rel_path: str, data: bytes) -> None:
        final = Path.home() / rel_path
        tmp = final.with_name(f".{final.name}.tmp-{secrets.token_hex(4)}")
        step = f"creating {final.parent}"
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            step = f"writing {tmp}"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            step = f"renaming {tmp} to {final}"
            os.replace(tmp, final)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise UploadError(step, exc.strerror or str(exc)) from exc

    async def open_serve(self, argv: list[str]) -> ServeChannel:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            cwd=str(Path.home()),
            env=reader_env(argv, dict(os.environ)),
        )
        assert proc.stdin is not None and proc.stdout is not None
        self._procs.append(proc)

        def close() -> None:
            if proc.returncode is None:
                proc.kill()

        return ServeChannel(proc.stdout, proc.stdin, close)

    async def close(self) -> None:
        for proc in self._procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        self._procs.clear()


class SshTransport:
    """One asyncssh connection built from the user's ssh config, known_hosts and agent."""

    def __init__(self, conn: asyncssh.SSHClientConnection, python: str = "python3", *,
                 user_ciphers: bool = False) -> None:
        self._conn = conn
        self.python = python
        self.user_ciphers = user_ciphers  # the user's ssh_config names Ciphers for the alias

    @classmethod
    async def connect(cls, host: str, alias: str, ssh_config: Path | None,
                      python: str = "python3") -> SshTransport:
        named = ssh_config is not None and ssh_config.exists()
        config = [str(ssh_config)] if named else ()
        # With no file named, asyncssh reads ~/.ssh/config: that one is checked then.
        _check_ssh_config(host, ssh_config if ssh_config is not None and named
                          else default_ssh_config_path())
        options = await _config_options(config, alias)
        ciphers = _cipher_preference(options)
        hops = _proxy_jump(options)
        # The jump hosts first, each failure naming its hop; asyncssh's own ProxyJump would
        # raise the same OSError for a dead jump as for a dead box behind it.
        jump = await _open_jumps(host, alias, hops, config) if hops else None
        try:
            try:
                conn = await asyncssh.connect(
                    alias,
                    config=config,
                    tunnel=jump or (),
                    connect_timeout=CONNECT_TIMEOUT_S,
                    login_timeout=LOGIN_TIMEOUT_S,
                    keepalive_interval=KEEPALIVE_INTERVAL_S,
                    keepalive_count_max=KEEPALIVE_COUNT_MAX,
                    # Probes are small JSON; compression only costs CPU on both ends.
                    compression_algs=None,
                    encryption_algs=ciphers,
                )
            except BaseException:
                if jump is not None:
                    jump.close()
                raise
        except asyncssh.HostKeyNotVerifiable as exc:
            raise await _host_key_error(host, alias, config) from exc
        except asyncssh.PermissionDenied as exc:
            raise LinkError(host, f"ssh login to {alias!r} was refused ({exc.reason})",
                            fix=f"check User and IdentityFile for Host {alias} in your ssh "
                                "config, or add the key to your agent (ssh-add)") from exc
        except socket.gaierror as exc:
            raise _unresolved(host, alias, ssh_config, exc) from exc
        except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
            if hops:
                last = hops.split(",")[-1]
                raise LinkError(host, f"the jump host {last!r} answered, but {alias!r} behind "
                                f"it did not: {_describe(exc)}",
                                fix=f"check the box from the jump host (ssh {last}, then ssh "
                                    f"to the HostName of {alias}): is it up, is the address "
                                    "right?") from exc
            raise LinkError(host, f"cannot connect to {alias!r}: {_describe(exc)}",
                            fix="check that the box is up and the alias is right "
                                f"(ssh {alias} true)") from exc
        if jump is not None:
            conn.set_tunnel(jump)  # closing the box's connection closes the jumps too
        return cls(conn, python, user_ciphers=not ciphers)

    async def exec(self, argv: list[str], *, stdin: bytes | None, cap: int) -> ExecResult:
        proc = await self._conn.create_process(remote_command(argv), encoding=None)
        try:
            if stdin is not None:
                proc.stdin.write(stdin)
            # Closing stdin at once: a helper that reads it sees EOF, never waits on us.
            proc.stdin.write_eof()
            out, err = await asyncio.gather(_read_all(proc.stdout, cap),
                                            _read_all(proc.stderr, cap))
            await proc.wait_closed()
        finally:
            proc.close()
        return ExecResult(rc=proc.exit_status, stdout=out, stderr=err)

    async def put_file(self, rel_path: str, data: bytes) -> None:
        parent, _, name = rel_path.rpartition("/")
        tmp = f"{parent}/.{name}.tmp-{secrets.token_hex(4)}"
        async with self._conn.start_sftp_client() as sftp:
            step = f"creating ~/{parent}"
            try:
                await sftp.makedirs(parent, exist_ok=True)
                step = f"writing ~/{tmp}"
                async with sftp.open(tmp, "wb") as f:
                    await f.write(data)
                step = f"renaming ~/{tmp} to ~/{rel_path}"
                try:
                    await sftp.posix_rename(tmp, rel_path)
                except asyncssh.SFTPOpUnsupported:
                    # Servers without the posix-rename extension: plain rename refuses to
                    # replace, which is what we want for a content-named file anyway.
                    await sftp.rename(tmp, rel_path)
            except asyncssh.SFTPError as exc:
                with contextlib.suppress(asyncssh.Error):  # no temp file left behind
                    await sftp.remove(tmp)
                raise UploadError(step, f"SFTP error {exc.code} ({sanitize_line(exc.reason)})",
                                  ) from exc

    async def open_serve(self, argv: list[str]) -> ServeChannel:
        proc = await self._conn.create_process(remote_command(argv), encoding=None)
        return ServeChannel(proc.stdout, proc.stdin, proc.close)

    async def close(self) -> None:
        self._conn.abort()
        with contextlib.suppress(Exception):  # already closing; nothing left to report
            await asyncio.wait_for(self._conn.wait_closed(), 2.0)


# OpenSSH's own default cipher list (since 6.5), AES-GCM moved to the front: what a spawned
# ssh for bulk bytes offers when the user's ssh_config names no Ciphers (see below).
OPENSSH_GCM_FIRST = ("aes128-gcm@openssh.com,aes256-gcm@openssh.com,"
                     "chacha20-poly1305@openssh.com,aes128-ctr,aes192-ctr,aes256-ctr")


def _aes_gcm_first(algs: list[bytes]) -> list[bytes]:
    """The same ciphers, AES-GCM (aes128 first) ahead of the rest, chacha20 included."""
    def rank(alg: bytes) -> int:
        return {b"aes128-gcm@openssh.com": 0, b"aes256-gcm@openssh.com": 1}.get(alg, 2)
    return sorted(algs, key=rank)  # stable: the rest keep asyncssh's order


async def _config_options(config: Any, alias: str) -> asyncssh.SSHClientConnectionOptions:
    """What the user's ssh_config says for ``alias``. Only the config is wanted here: no key
    files, known_hosts or agent read for it (the connect that follows reads those once)."""
    options: asyncssh.SSHClientConnectionOptions = \
        await asyncssh.SSHClientConnectionOptions.construct(
            config=config, host=alias, client_keys=None, known_hosts=None, agent_path=None)
    return options


def _cipher_preference(options: asyncssh.SSHClientConnectionOptions) -> Any:
    """asyncssh's ciphers with AES-GCM first, unless the user's ssh_config names Ciphers.

    asyncssh offers chacha20-poly1305 first, as OpenSSH does, but computes it in Python-driven
    pieces: a 2 GiB pull over SFTP ran at 0.71x rsync with it and 1.02x with AES-GCM, which
    runs on the CPU's AES instructions (bench/pull.py, quiet machine). A Ciphers line the user
    wrote is theirs.
    """
    default = list(asyncssh.encryption.get_default_encryption_algs())
    if list(options.encryption_algs) != default:
        return ()  # () lets asyncssh take the config's own list
    return [alg.decode("ascii") for alg in _aes_gcm_first(default)]


def _proxy_jump(options: asyncssh.SSHClientConnectionOptions) -> str | None:
    """The alias's ProxyJump as the user's ssh_config gives it ("jump", "u@a:22,b"), or None."""
    tunnel = options.tunnel
    return tunnel if isinstance(tunnel, str) and tunnel and tunnel != "none" else None


async def _open_jumps(host: str, alias: str, hops: str,
                      config: Any) -> asyncssh.SSHClientConnection:
    """Each ProxyJump hop in turn, as asyncssh itself would, but a hop that fails is named:
    "cannot reach the jump host 'jump' (ProxyJump of 'box'): ..."."""
    conn: asyncssh.SSHClientConnection | None = None
    for hop in hops.split(","):
        user, _, target = hop.rpartition("@")
        name, _, port = target.partition(":")
        try:
            nxt = await asyncssh.connect(
                name, int(port) if port.isdigit() else (), username=user or (),
                tunnel=conn or (), config=config, connect_timeout=CONNECT_TIMEOUT_S,
                login_timeout=LOGIN_TIMEOUT_S)
        except BaseException as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, (OSError, asyncssh.Error, asyncio.TimeoutError)):
                raise LinkError(host, f"cannot reach the jump host {hop!r} (ProxyJump of "
                                f"{alias!r}): {_describe(exc)}",
                                fix=f"check the jump host first (ssh {hop} true), then "
                                    f"{alias} behind it") from exc
            raise
        nxt.set_tunnel(conn)  # closing the last hop closes the ones before it
        conn = nxt
    assert conn is not None  # hops is never empty
    return conn


def _check_ssh_config(host: str, path: Path) -> None:
    """Refuse, before asyncssh reads it, an ssh config it would hang on or recurse in."""
    try:
        check_ssh_config(path)
    except GpuroomError as exc:
        raise SshConfigRefused(host, exc.message, fix=exc.fix) from None


def _unresolved(host: str, alias: str, ssh_config: Path | None,
                exc: socket.gaierror) -> LinkError:
    """A name that does not resolve, said with the alias and the ssh config that was read:
    a bare "[Errno -2] Name or service not known" names neither."""
    path = ssh_config or default_ssh_config_path()
    if alias in ssh_config_aliases(path):
        return LinkError(host, f"cannot connect to {alias!r}: a host name for it in {path} "
                               f"(its HostName, or a ProxyJump hop's) does not resolve "
                               f"({exc.strerror})",
                         fix=f"correct HostName under 'Host {alias}' in {path} "
                             f"(ssh -G {alias} shows what ssh makes of it)")
    read = f"it is not a Host in {path}" if path.is_file() else \
        f"it has no Host block: the ssh config {path} does not exist"
    return LinkError(host, f"cannot connect to {alias!r}: {read}, and as a host name it "
                           f"does not resolve ({exc.strerror})",
                     fix=f"add 'Host {alias}' with its HostName, User and Port to {path}, or "
                         "set this host's ssh = in hosts.toml to a Host that file has")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    text = str(exc) or type(exc).__name__
    return text


async def _host_key_error(host: str, alias: str, config: Any) -> HostKeyError:
    """Refuse with the key's fingerprint and the command that would trust it."""
    options = await asyncssh.SSHClientConnectionOptions.construct(config=config, host=alias)
    hostname, port = options.host, options.port
    known = options.known_hosts
    known_file = str(known[0]) if isinstance(known, (list, tuple)) and known else \
        "~/.ssh/known_hosts"
    fingerprint = "unknown"
    key_type = ""
    try:
        key = await asyncio.wait_for(
            asyncssh.get_server_host_key(alias, config=config), CONNECT_TIMEOUT_S)
        if key is not None:
            fingerprint = key.get_fingerprint("sha256")
            key_type = key.get_algorithm()
    except (OSError, asyncssh.Error, asyncio.TimeoutError):
        pass  # the refusal stands either way; the fingerprint is a courtesy
    target = f"[{hostname}]:{port}" if port != 22 else hostname
    changed = False
    with contextlib.suppress(Exception):  # an unreadable known_hosts: treat as unknown
        trusted = asyncssh.match_known_hosts(known_file, hostname, "", port)[0]
        changed = bool(trusted)
    if options.tunnel:
        trust = f"ssh -o StrictHostKeyChecking=accept-new {alias} true"
    else:
        type_arg = ["-t", key_type.replace("ssh-", "")] if key_type.startswith("ssh-") else []
        trust = shlex.join(["ssh-keyscan", "-p", str(port), *type_arg, hostname]) + \
            f" >> {known_file}"
    if changed:
        msg = (f"host key of {alias} ({target}) CHANGED: now {key_type} {fingerprint}, which "
               f"does not match {known_file}. This can be a rebuilt box or an attack")
        fix = (f"confirm the new fingerprint with your provider, then "
               f"ssh-keygen -R {shlex.quote(target)} -f {known_file} && {trust}")
    else:
        msg = (f"host key of {alias} ({target}) is not in {known_file}: "
               f"{key_type} {fingerprint}")
        fix = f"check the fingerprint with your provider, then trust it: {trust}"
    return HostKeyError(host, msg, fix=fix, changed=changed)


def remote_command(argv: list[str]) -> str:
    """``argv`` as the one command line the box's shell runs: every element quoted once, here
    and nowhere else. SSH carries the command as UTF-8 text, so an argument that is not (a
    raw byte that Python holds as a lone surrogate, from a non-UTF-8 terminal or file name) is
    refused with its position, not sent mangled or raised as a UnicodeEncodeError."""
    for i, arg in enumerate(argv):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as exc:
            code = ord(arg[exc.start])
            # Python's surrogateescape holds an undecodable byte B as U+DC00 + B.
            what = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"{code:#x}"
            raise GpuroomError(
                f"argument {i} of the command to the box, {ascii(arg)[:60]}, is not valid "
                f"UTF-8 ({what} at {exc.start})",
                "ssh carries commands as text: rename the file or re-type the argument in "
                "UTF-8, or write it into a script on the box and run that") from None
    return shlex.join(argv)


def env_on_stdin(env: dict[str, str]) -> tuple[list[str], bytes | None]:
    """A job's env for the helper's ``queue add`` / ``edit``: the option and the bytes for its
    stdin. The values go there (U34), where no ``ps`` on the box sees them; the helper's
    command line says only --env-stdin."""
    if not env:
        return [], None
    return ["--env-stdin"], json.dumps(env).encode()


def check_document(host: str, snapshot: Any) -> dict[str, Any]:
    """Refuse an answer that is not this gpuroom's probe document: another schema (the file on
    the box is not the helper we shipped, or is another version of it) or a section of the
    wrong type. Taken as UP, it would show an empty box as healthy."""
    problems = snapshot_problems(snapshot, SCHEMA)
    if not problems:
        return dict(snapshot)
    more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
    raise LinkError(host, f"the helper's answer is not a schema-{SCHEMA} probe document: "
                          f"{problems[0]}{more}",
                    fix="something on the box replaced or edited ~/.gpuroom/bin; delete that "
                        "folder on the box and poll again (r) to upload the helper afresh")


class HostLink:
    """A host's link: transport, helper on the box, and bounded polls."""

    def __init__(self, host: HostConfig, *, ssh_config: Path | None = None,
                 mode: str = "serve", request_timeout_s: float = REQUEST_TIMEOUT_S,
                 output_cap: int = OUTPUT_CAP_BYTES) -> None:
        self.host = host
        self.ssh_config = ssh_config
        self.mode = mode
        self.request_timeout_s = request_timeout_s
        self.output_cap = output_cap
        self.archive: HelperArchive = helper_archive()
        self.uploads = 0  # how many times this link wrote the helper to the box
        # Set when the helper on the box did not match its name's hash and was replaced;
        # the next poll's snapshot carries it in errors[] (once), then it is cleared.
        self.replaced_note: str | None = None
        self._transport: Transport | None = None
        self._serve: ServeChannel | None = None
        # One connect at a time; one request at a time on the serve channel. Helper
        # subcommands run on their own exec channels beside polls.
        self._connect_lock = asyncio.Lock()
        self._openssh_trust: list[str] | None = None
        self._serve_lock = asyncio.Lock()

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def connected(self) -> bool:
        return self._transport is not None

    async def _connect(self) -> Transport:
        async with self._connect_lock:
            if self._transport is not None:
                return self._transport
            return await self._open()

    async def _open(self) -> Transport:
        if self.host.error:
            raise LinkError(self.name, self.host.error)
        transport: Transport
        if self.host.local:
            transport = LocalTransport()
        else:
            alias = self.host.ssh or ""
            problem = check_alias(alias)
            if problem:
                raise LinkError(self.name, problem, fix="use the Host alias from your ssh config")
            transport = await SshTransport.connect(self.name, alias, self.ssh_config,
                                                   self.host.python)
        try:
            await asyncio.wait_for(self._deploy(transport), DEPLOY_TIMEOUT_S)
        except BaseException:
            await transport.close()
            raise
        self._transport = transport
        return transport

    async def _check(self, transport: Transport) -> dict[str, Any]:
        argv = [transport.python, ISOLATED, "-c", _CHECK_SNIPPET, self.archive.remote_path]
        try:
            result = await asyncio.wait_for(transport.exec(argv, stdin=None, cap=1 << 16),
                                            self.request_timeout_s)
        except (asyncio.TimeoutError, TimeoutError):
            raise LinkError(self.name, f"{transport.python} on the box did not answer within "
                            f"{self.request_timeout_s:.0f} s (hashing the helper)",
                            fix=f"run {transport.python} -c 1 on the box: a wrapper or a full "
                                "disk may hang it") from None
        if result.rc == 127 or b"not found" in result.stderr:
            raise LinkError(self.name, f"the box has no {transport.python} on PATH",
                            fix="install Python 3.8 or newer on the box (apt-get install -y "
                                "python3), or set python = \"/path/to/python3\" for this host "
                                "in hosts.toml")
        if result.rc != 0:
            raise LinkError(self.name, f"{transport.python} failed on the box "
                            f"({result.failure()})")
        try:
            info = load_answer(result.stdout)
        except ValueError as exc:
            raise LinkError(self.name, "the box's python3 printed something unexpected "
                            "(a login banner or shell rc writing to stdout?)",
                            fix="make ~/.bashrc quiet for non-interactive shells") from exc
        if not isinstance(info, dict):
            raise LinkError(self.name, "the box's python3 printed something unexpected")
        return info

    async def _deploy(self, transport: Transport) -> None:
        info = await self._check(transport)
        version = tuple(info.get("py") or (0, 0))
        if version < MIN_BOX_PYTHON:
            raise LinkError(self.name, f"the box's python3 is {'.'.join(map(str, version))}",
                            fix="gpuroom's helper needs Python 3.8 or newer on the box")
        found = info.get("sha")
        if found == self.archive.sha256:
            return  # the same content is already there: reuse, never overwrite
        helper = f"~/{self.archive.remote_path}"
        try:
            await transport.put_file(self.archive.remote_path, self.archive.data)
        except UploadError as exc:
            raise LinkError(self.name, f"cannot put the helper {helper} on the box: {exc}",
                            fix=f"on the box, {helper} must be a plain file you own, or "
                                f"absent, in a folder you can write (ls -la ~/.gpuroom/bin; "
                                f"rm -rf {helper}; df -h ~), then poll again (r)") from exc
        self.uploads += 1
        if found is not None:
            # A file under the helper's content-derived name with other content: something
            # on the box wrote it. Said once, in the next snapshot's errors[].
            what = found if isinstance(found, str) and re.fullmatch(r"[0-9a-f]{64}", found) \
                else "something else"
            self.replaced_note = (f"gpuroom replaced {helper}: it hashed to {what}, not the "
                                  f"{self.archive.sha256} its name says; something on the box "
                                  "edited it (check what else runs as this user there)")
        after = await self._check(transport)
        if after.get("sha") != self.archive.sha256:
            raise LinkError(self.name, f"the helper on the box hashes to {after.get('sha')}, "
                            f"expected {self.archive.sha256}",
                            fix="check the box's disk (df -h ~, df -i ~) and retry")

    def helper_argv(self, transport: Transport, *args: str) -> list[str]:
        return [transport.python, ISOLATED, self.archive.remote_path, *args]

    async def poll(self, request: dict[str, Any] | None = None) -> dict[str, Any]:
        """One probe document, or LinkError; on any failure the transport is dropped."""
        request = request or {}
        async with self._serve_lock:
            # Two deadlines, one per phase: connecting (and putting the helper there) has its
            # own, and the request has request_timeout_s whether or not this poll connected,
            # so a hung helper is reported as fast on a fresh connection as on an old one.
            phase, deadline = "while connecting", self._connect_deadline()
            try:
                transport = await asyncio.wait_for(self._connect(), deadline)
                phase, deadline = "from the helper", self.request_timeout_s
                snapshot = await asyncio.wait_for(self._poll(transport, request), deadline)
                note, self.replaced_note = self.replaced_note, None
                if note is not None:
                    snapshot["errors"] = [*snapshot.get("errors", []),
                                          {"section": "helper", "error": note}]
                return snapshot
            except LinkError:
                await self._drop()
                raise
            except asyncio.CancelledError:
                await self._drop()
                raise
            except (asyncio.TimeoutError, TimeoutError) as exc:
                await self._drop()
                raise LinkError(self.name, f"no answer within {deadline:.0f} s {phase}",
                                fix="the box or the link is overloaded or gone; "
                                    "gpuroom keeps retrying") from exc
            except (OSError, EOFError, OverflowError, ValueError, asyncssh.Error) as exc:
                await self._drop()
                raise LinkError(self.name, f"poll failed: {_describe(exc)}") from exc

    def _connect_deadline(self) -> float:
        """Connect, log in, check and maybe upload the helper: a budget apart from requests."""
        return CONNECT_TIMEOUT_S + LOGIN_TIMEOUT_S + 10.0

    async def _poll(self, transport: Transport, request: dict[str, Any]) -> dict[str, Any]:
        if self.mode == "serve":
            if self._serve is None:
                self._serve = await transport.open_serve(self.helper_argv(transport, "serve"))
            answer = await self._serve.request({"op": "probe", "args": request},
                                               self.output_cap)
            if not answer.get("ok"):
                raise LinkError(self.name,
                                f"helper error: {sanitize_line(str(answer.get('error')))}")
            snapshot = answer.get("snapshot")
        else:
            result = await transport.exec(
                self.helper_argv(transport, "probe", "--request", json.dumps(request)),
                stdin=None, cap=self.output_cap)
            if result.rc != 0:
                raise LinkError(self.name, f"probe failed ({result.failure()})")
            snapshot = load_answer(result.stdout)
        return check_document(self.name, snapshot)

    async def helper(self, *args: str, stdin: bytes | None = None,
                     timeout_s: float = 60.0, cap: int = OUTPUT_CAP_BYTES) -> ExecResult:
        """Run one helper subcommand on the box (queue add, kill, manifest ...)."""
        try:
            transport = await asyncio.wait_for(self._connect(), self._connect_deadline())
            return await asyncio.wait_for(
                transport.exec(self.helper_argv(transport, *args), stdin=stdin, cap=cap),
                timeout_s)
        except LinkError:
            await self._drop()
            raise
        except (asyncio.TimeoutError, TimeoutError) as exc:
            await self._drop()
            raise LinkError(self.name, f"helper {args[0] if args else ''} took over "
                            f"{timeout_s:.0f} s") from exc
        except (OSError, EOFError, OverflowError, asyncssh.Error) as exc:
            await self._drop()
            raise LinkError(self.name, f"helper {args[0] if args else ''} failed: "
                            f"{_describe(exc)}") from exc

    async def _drop(self) -> None:
        serve, self._serve = self._serve, None
        if serve is not None:
            serve.close()
        transport, self._transport = self._transport, None
        if transport is not None:
            await transport.close()

    async def close(self) -> None:
        await self._drop()

    def bulk_cipher(self) -> str | None:
        """The cipher the box's bytes arrive under now; None when local or not connected."""
        transport = self._transport
        if isinstance(transport, SshTransport):
            return str(transport._conn.get_extra_info("recv_cipher") or "") or None
        return None

    def bulk_ssh_argv(self) -> list[str]:
        """argv of a non-interactive ``ssh`` for bulk bytes (rsync's -e, the OpenSSH SFTP path).

        Never a prompt (the TUI owns the terminal); a dead box found as the link finds it.
        AES-GCM first unless the user's ssh_config names Ciphers: OpenSSH offers chacha20
        first, which costs the CPU about twice what AES-GCM does on AES-NI, and a pull of a big
        file is CPU-bound on both ends (bench/pull.py). A command-line -o would override the
        user's own line, so it is added only when the connected link found none.
        """
        argv = ["ssh"]
        if self.ssh_config is not None:
            argv += ["-F", str(self.ssh_config)]
        argv += ["-o", "BatchMode=yes",
                 "-o", f"ConnectTimeout={int(CONNECT_TIMEOUT_S)}",
                 "-o", f"ServerAliveInterval={int(KEEPALIVE_INTERVAL_S)}",
                 "-o", f"ServerAliveCountMax={KEEPALIVE_COUNT_MAX}"]
        transport = self._transport
        if isinstance(transport, SshTransport) and not transport.user_ciphers:
            argv += ["-o", f"Ciphers={OPENSSH_GCM_FIRST}"]
        return argv + self.openssh_trust()

    def ssh_argv(self) -> list[str] | None:
        """argv of an interactive shell on the box, for the `s` key; None for local."""
        if self.host.local or not self.host.ssh:
            return None
        argv = ["ssh"]
        if self.ssh_config is not None:
            argv += ["-F", str(self.ssh_config)]
        return [*argv, *self.openssh_trust(), "--", self.host.ssh]

    def openssh_trust(self) -> list[str]:
        """The link's known_hosts (and, where the homes differ, identity files) for a spawned
        OpenSSH client (openssh_trust.py); read from the ssh_config once per link."""
        if self._openssh_trust is None:
            self._openssh_trust = [] if self.host.local or not self.host.ssh else \
                _openssh_trust(self.ssh_config, self.host.ssh)
        return self._openssh_trust


def _openssh_trust(ssh_config: Path | None, alias: str) -> list[str]:
    """What the ssh_config makes asyncssh read for ``alias`` (its known_hosts files and
    IdentityFile lines), as OpenSSH options (openssh_trust.py)."""
    config = [str(ssh_config)] if ssh_config is not None and ssh_config.exists() else []
    try:
        options = asyncssh.SSHClientConnectionOptions(
            config=config, host=alias, client_keys=None, agent_path=None)
    except (OSError, ValueError, asyncssh.Error):
        return []  # a config asyncssh cannot read fails the link itself, in its own words
    known = options.known_hosts
    files = None if known is None else [str(f) for f in known] if isinstance(known, list) else []
    identities = options.config.get("IdentityFile")
    return trust_options(files, [str(k) for k in identities]
                         if isinstance(identities, (list, tuple)) else [])


# ============================================================================================
# Pull mechanics (issue 8). transfer.py moves files through these methods and never sees
# asyncssh. Reads are pipelined: many SFTP read requests in flight at once, written to the
# local file strictly in order, so an interruption leaves a .part that is a correct prefix and
# a resume appends only the missing bytes (U12).

# One SFTP read request: OpenSSH's sftp-server answers at most 261120 bytes per read, and a
# larger request is split by asyncssh into two (whose orphan fails noisily if the link drops).
PULL_BLOCK_BYTES = 255 << 10
PULL_MAX_REQUESTS = 64  # in flight at once: 16 MiB window, enough to fill a long fat pipe
PULL_READ_TIMEOUT_S = 60.0  # one block not answered in a minute: the link is gone
# An open or a stat of one box file: sftp-server answers these from its own disk in
# milliseconds; one that takes this long is stuck in the kernel (a FIFO with no writer, a
# dead NFS mount) and may never return.
PULL_OPEN_TIMEOUT_S = 30.0

ProgressFn = Any  # Callable[[int], None]: bytes of this file written so far (this call)


class _RangeSource(Protocol):
    async def read_at(self, offset: int, length: int) -> bytes: ...

    async def size(self) -> int: ...

    async def close(self) -> None: ...


class _LocalSource:
    def __init__(self, path: str, host: str) -> None:
        # Like SFTP, a relative path is relative to the user's home. O_NONBLOCK: a FIFO's
        # open would wait for a writer; what opened is then checked to be a regular file.
        full = Path.home() / os.path.expanduser(path)
        fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        what = not_regular(os.fstat(fd).st_mode)
        if what is not None:
            os.close(fd)
            raise RemoteFileRefused(host, f"{path} is {what}, not a regular file: refused")
        os.set_blocking(fd, True)
        self._f = open(fd, "rb")

    async def size(self) -> int:
        return os.fstat(self._f.fileno()).st_size

    async def read_at(self, offset: int, length: int) -> bytes:
        return await asyncio.to_thread(os.pread, self._f.fileno(), length, offset)

    async def close(self) -> None:
        self._f.close()


class _SftpSource:
    def __init__(self, sftp: Any, f: Any) -> None:
        self._sftp = sftp
        self._f = f

    async def read_at(self, offset: int, length: int) -> bytes:
        data = await asyncio.wait_for(self._f.read(length, offset), PULL_READ_TIMEOUT_S)
        return bytes(data)

    async def size(self) -> int:
        return int((await asyncio.wait_for(self._f.stat(), PULL_OPEN_TIMEOUT_S)).size or 0)

    async def close(self) -> None:
        with contextlib.suppress(Exception):  # the channel may already be torn down
            await asyncio.wait_for(self._f.close(), PULL_OPEN_TIMEOUT_S)
        with contextlib.suppress(Exception):
            self._sftp.exit()


_FILE_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
               (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symlink"))


def not_regular(mode: int | None) -> str | None:
    """What a file of this mode is when it is not a regular file ("a FIFO"), else None."""
    if mode is None or stat.S_ISREG(mode):
        return None
    return next((what for test, what in _FILE_KINDS if test(mode)), f"mode {mode:o}")


def _refuse(link: HostLink, remote_path: str, mode: int | None) -> None:
    what = not_regular(mode)
    if what is not None:
        raise RemoteFileRefused(link.name, f"{remote_path} is {what} now, not a regular file: "
                                           "refused before reading (it could block for ever)")


async def _bounded(link: HostLink, what: str, remote_path: str, step: Any) -> Any:
    """One SFTP request about a file, with PULL_OPEN_TIMEOUT_S; late is a stuck file."""
    try:
        return await asyncio.wait_for(step, PULL_OPEN_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise RemoteFileRefused(
            link.name, f"{what} {remote_path} got no answer in {PULL_OPEN_TIMEOUT_S:.0f} s "
                       "(the box's disk or mount is stuck there, or it is a special file)",
            fix=f"check {remote_path} on the box (ls -l, df); the other files were "
                "pulled") from None


async def _open_source(link: HostLink, remote_path: str) -> _RangeSource:
    transport = await asyncio.wait_for(link._connect(), link._connect_deadline())
    if isinstance(transport, SshTransport):
        sftp = await transport._conn.start_sftp_client()
        # One SFTP request per read where the server takes PULL_BLOCK_BYTES in one (its
        # limits@openssh.com answer): _pipelined_copy keeps the requests in flight itself,
        # and asyncssh's own parallel reader leaves tasks behind when a read is cancelled,
        # which fail with nobody listening once the connection goes.
        block = 0 if sftp.limits.max_read_len >= PULL_BLOCK_BYTES else -1
        try:
            # sftp-server's open(2) of a FIFO blocks until a writer comes, in a process
            # nothing on the box ever ends: look before opening, and look again at what
            # opened (the name may have been swapped in between).
            attrs = await _bounded(link, "lstat", remote_path, sftp.lstat(remote_path))
            _refuse(link, remote_path, attrs.permissions)
            f = await _bounded(link, "open", remote_path,
                               sftp.open(remote_path, "rb", block_size=block))
            try:
                attrs = await _bounded(link, "fstat", remote_path, f.stat())
                _refuse(link, remote_path, attrs.permissions)
            except BaseException:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(f.close(), PULL_OPEN_TIMEOUT_S)
                raise
        except BaseException:
            # A request stuck on the box keeps its channel: closing it frees this side.
            sftp.exit()
            raise
        return _SftpSource(sftp, f)
    return _LocalSource(remote_path, link.name)


async def _pipelined_copy(source: _RangeSource, out: Any, offset: int, end: int,
                          on_progress: ProgressFn | None) -> int:
    """Copy [offset, end) into ``out`` (positioned at offset) with requests in flight."""
    pending: list[asyncio.Task[bytes]] = []
    next_off = offset
    written = 0
    try:
        while next_off < end or pending:
            while next_off < end and len(pending) < PULL_MAX_REQUESTS:
                n = min(PULL_BLOCK_BYTES, end - next_off)
                pending.append(asyncio.ensure_future(source.read_at(next_off, n)))
                next_off += n
            data = await pending.pop(0)
            if not data:
                raise EOFError(f"file ended {end - offset - written} bytes early")
            expected = min(PULL_BLOCK_BYTES, end - offset - written)
            out.write(data)
            written += len(data)
            if len(data) < expected:
                # A short read (the file shrank on the box): later blocks would leave a hole.
                raise EOFError(f"short read at {offset + written}")
            if on_progress is not None:
                on_progress(written)
            # Blocks that already arrived never suspend the await above; yield here so a
            # cancel lands between blocks instead of after the whole file.
            await asyncio.sleep(0)
        return written
    finally:
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        out.flush()


def cut_to(f: BinaryIO, offset: int) -> None:
    """Cut an open file to ``offset`` bytes, leaving one already that long untouched.

    A truncate to 0 is ext4's "replace via truncate" pattern (auto_da_alloc): the close then
    starts write-back of everything written since, on the closing thread, and the pull's
    writer closes on the event loop. A fresh .part has nothing to cut.
    """
    if os.fstat(f.fileno()).st_size != offset:
        f.truncate(offset)


class PullIO:
    """Byte transfer from one host's box for the pull; see ``HostLink`` for the connection.

    A small object rather than methods on HostLink so the link's class body stays the
    integrator's; it uses the link's connection (and drops it on transport errors, like
    ``helper``).
    """

    def __init__(self, link: HostLink) -> None:
        self.link = link

    async def _fail(self, what: str, exc: BaseException) -> LinkError:
        # A missing file or an SFTP status is about the file; anything else is the link.
        if isinstance(exc, (FileNotFoundError, EOFError, asyncssh.SFTPError)) and \
                not isinstance(exc, asyncssh.SFTPConnectionLost):
            return RemoteFileError(self.link.name, f"{what} failed: {_describe(exc)}")
        await self.link._drop()
        return LinkError(self.link.name, f"{what} failed: {_describe(exc)}")

    async def read_range(self, remote_path: str, offset: int, length: int) -> bytes:
        """``length`` bytes of a file on the box from ``offset`` (fewer at its end)."""
        buf = _Buf()
        try:
            source = await _open_source(self.link, remote_path)
            try:
                await _pipelined_copy(source, buf, offset, offset + length, None)
            except EOFError:
                pass  # read_range answers what is there, like read(2)
            finally:
                await source.close()
        except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
            raise await self._fail(f"read {remote_path}", exc) from exc
        return bytes(buf.data)

    async def fetch_file(self, remote_path: str, local_path: str | Path, *, offset: int = 0,
                         size: int | None = None,
                         on_progress: ProgressFn | None = None) -> int:
        """Write the box file's bytes from ``offset`` (up to ``size``) into ``local_path``.

        Returns the bytes transferred by this call. ``local_path`` is cut to ``offset`` first,
        so bytes past the resume point never survive. On failure the local file keeps every
        byte written so far (an in-order prefix) and LinkError is raised.
        """
        local = Path(local_path)
        local.parent.mkdir(parents=True, exist_ok=True)
        # This machine's file is opened first and its errors keep their filename: a full
        # disk or a name too long here is not the link's failure (nothing is dropped).
        with open_append(local) as f:
            out = _LocalOut(f, str(local))
            try:
                source = await _open_source(self.link, remote_path)
                try:
                    if size is None:
                        size = await source.size()
                    cut_to(f, offset)
                    return await _pipelined_copy(source, out, offset, size, on_progress)
                finally:
                    await source.close()
            except (OSError, EOFError, asyncssh.Error, asyncio.TimeoutError) as exc:
                if isinstance(exc, OSError) and exc.filename == str(local):
                    raise
                raise await self._fail(f"fetch {remote_path}", exc) from exc


class _LocalOut:
    """The local file _pipelined_copy writes; an OSError names it (see fetch_file)."""

    def __init__(self, f: BinaryIO, name: str) -> None:
        self._f = f
        self._name = name

    def write(self, data: bytes) -> None:
        try:
            self._f.write(data)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, self._name) from exc

    def flush(self) -> None:
        try:
            self._f.flush()
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, self._name) from exc


class PushIO:
    """Byte transfer to one host's box (tui/transport/push.py, `queue move`); like PullIO, a
    small object using the link's connection."""

    def __init__(self, link: HostLink) -> None:
        self.link = link

    async def put_path(self, local: Path, remote_tmp: str, remote_final: str) -> None:
        """Stream ``local`` to ``remote_tmp``, then rename it to ``remote_final`` (its
        directory made first). LinkError on failure; ``remote_tmp`` may be left."""
        try:
            transport = await asyncio.wait_for(self.link._connect(),
                                               self.link._connect_deadline())
            if isinstance(transport, SshTransport):
                async with transport._conn.start_sftp_client() as sftp:
                    await sftp.makedirs(posixpath.dirname(remote_final), exist_ok=True)
                    await sftp.put(str(local), remote_tmp, block_size=PULL_BLOCK_BYTES)
                    await sftp.posix_rename(remote_tmp, remote_final)
            else:
                await asyncio.to_thread(_local_put, local, remote_tmp, remote_final)
        except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
            if not isinstance(exc, (OSError, asyncssh.SFTPError)) or \
                    isinstance(exc, asyncssh.SFTPConnectionLost):
                await self.link._drop()
            raise LinkError(self.link.name, f"copying {local.name} to {remote_final} failed: "
                            f"{_describe(exc)}") from exc

    async def makedirs(self, remote_dir: str) -> None:
        """Create ``remote_dir`` and its parents (relative: under the login's home)."""
        try:
            transport = await asyncio.wait_for(self.link._connect(),
                                               self.link._connect_deadline())
            if isinstance(transport, SshTransport):
                async with transport._conn.start_sftp_client() as sftp:
                    await sftp.makedirs(remote_dir, exist_ok=True)
            else:
                (Path.home() / Path(remote_dir).expanduser()).mkdir(parents=True, exist_ok=True)
        except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
            if isinstance(exc, asyncssh.SFTPConnectionLost) or \
                    not isinstance(exc, (OSError, asyncssh.SFTPError)):
                await self.link._drop()
            raise LinkError(self.link.name, f"creating {remote_dir} failed: "
                            f"{_describe(exc)}") from exc

    async def remove(self, remote_path: str) -> bool:
        """Remove one file on the box; False when that failed (it may not exist)."""
        try:
            transport = await asyncio.wait_for(self.link._connect(),
                                               self.link._connect_deadline())
            if isinstance(transport, SshTransport):
                async with transport._conn.start_sftp_client() as sftp:
                    await sftp.remove(remote_path)
            else:
                Path(remote_path).unlink()
        except (OSError, asyncssh.Error, asyncio.TimeoutError, LinkError):
            return False
        return True


def _local_put(local: Path, tmp: str, final: str) -> None:
    os.makedirs(os.path.dirname(final), exist_ok=True)
    shutil.copyfile(local, tmp)
    os.replace(tmp, final)


class _Buf:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, b: bytes) -> None:
        self.data += b

    def flush(self) -> None:
        pass
