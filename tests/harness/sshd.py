"""A real OpenSSH sshd on loopback for the SSH tests, and the client files that reach it.

The server runs in the foreground (`sshd -D -e`), logs VERBOSE into its work dir and is driven
through its process tree: `stop()` is a clean shutdown, `kill_all()` a crashed box (the listener
and every session die at once), `freeze()`/`thaw()` a black-holed link (TCP stays open, nothing
answers: U17 half-open) and `start()` brings it back on the same port with the same host key.
"""

from __future__ import annotations

import errno
import functools
import os
import pwd
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import procs

TEST_USER = os.environ.get("GPUROOM_TEST_USER", "gpuroomtest")
GPUROOM_DIR = ".gpuroom"  # what a clean box must not have at the start of a test
READY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
SSH_CONNECT_TIMEOUT_S = 10  # in the generated ssh_config: a frozen box never hangs a test forever
BIND_ATTEMPTS = 3  # a free port can be taken between probing and sshd binding it
_POLL_S = 0.02
_LOG_TAIL_CHARS = 3000
_SYSTEM_DIRS = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")
_RUN_SSHD_DIR = Path("/run/sshd")  # sshd's privilege-separation chroot, must exist


class SshdStartError(RuntimeError):
    """sshd exited or did not get ready; the message carries the tail of its log."""


class _PortTaken(SshdStartError):
    pass


def find_tool(name: str) -> str | None:
    """The path of a system tool, looking in the sbin dirs too (not on a user's PATH)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), *_SYSTEM_DIRS])
    return shutil.which(name, path=path)


def missing_requirements() -> str | None:
    """Why the sshd harness cannot run here, with the fix; None when it can."""
    if os.geteuid() != 0:
        return (
            "the sshd harness needs root (it creates the user gpuroomtest and runs sshd): "
            "run the tests as root, as CI does"
        )
    tools = {
        "sshd": "openssh-server",
        "ssh": "openssh-client",
        "ssh-keygen": "openssh-client",
        "useradd": "passwd",
    }
    for tool, package in tools.items():
        if find_tool(tool) is None:
            return f"{tool} not installed: apt-get install {package}"
    return None


@functools.lru_cache(maxsize=1)
def sshd_version() -> tuple[int, int]:
    """(major, minor) of the installed OpenSSH server."""
    sshd = find_tool("sshd")
    if sshd is None:
        raise SshdStartError("sshd not installed: apt-get install openssh-server")
    # Older sshd has no -V but still prints the version in its usage text.
    out = subprocess.run([sshd, "-V"], capture_output=True, text=True, timeout=10, check=False)
    match = re.search(r"OpenSSH_(\d+)\.(\d+)", out.stderr + out.stdout)
    if match is None:
        raise SshdStartError(f"cannot read the sshd version from: {out.stderr.strip()!r}")
    return int(match.group(1)), int(match.group(2))


# ---------------------------------------------------------------------------------------------
# The test user and the client key


@dataclass(frozen=True)
class BoxUser:
    """The unprivileged account the tests log in as."""

    name: str
    uid: int
    gid: int
    home: Path


def ensure_test_user(name: str = TEST_USER) -> BoxUser:
    """Create the test user when absent: /bin/bash, a home dir, not locked for pubkey auth."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        useradd = find_tool("useradd") or "useradd"
        made = subprocess.run(
            [useradd, "--create-home", "--shell", "/bin/bash", "--user-group", name],
            capture_output=True, text=True, timeout=30, check=False,
        )
        try:  # a parallel test run may have created it first: that is fine
            entry = pwd.getpwnam(name)
        except KeyError:
            raise RuntimeError(f"useradd {name} failed: {made.stderr.strip()}") from None
    if entry.pw_uid == 0:
        raise RuntimeError(f"test user {name} is root: tests must log in as an unprivileged user")
    if entry.pw_shell != "/bin/bash":
        _run_checked([find_tool("usermod") or "usermod", "--shell", "/bin/bash", name])
    # useradd leaves the password field '!', which sshd (without PAM) treats as a locked account.
    _run_checked([find_tool("usermod") or "usermod", "--password", "*", name])
    home = Path(entry.pw_dir)
    if not home.is_dir():
        home.mkdir(mode=0o750, parents=True)
        os.chown(home, entry.pw_uid, entry.pw_gid)
    return BoxUser(name=name, uid=entry.pw_uid, gid=entry.pw_gid, home=home)


WIPE_ATTEMPTS = 30  # x 0.1 s


def box_python(root: Path, script: str, user: str) -> Path:
    """``root/python3``, an executable ``script`` for hosts.toml's ``python`` (a GPU stand-in
    put in the helper's way), with everything under ``root`` given to the test ``user``: the
    box reads nothing of the jump host's checkout."""
    wrapper = root / "python3"
    wrapper.write_text(script)
    wrapper.chmod(0o755)
    owner = pwd.getpwnam(user)
    for path in (root, *root.rglob("*")):
        os.chown(path, owner.pw_uid, owner.pw_gid)
    return wrapper


def wipe_gpuroom_dir(user: BoxUser) -> None:
    """Remove ~/.gpuroom of the test user so a test starts on a clean box."""
    target = user.home / GPUROOM_DIR
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.exists():
        # A queue runner the previous test stopped (tmux kill-session returns before the
        # runner is gone) may still write its last state file while this removes the dir.
        for attempt in range(WIPE_ATTEMPTS):
            try:
                shutil.rmtree(target)
                return
            except OSError as exc:
                if exc.errno != errno.ENOTEMPTY or attempt == WIPE_ATTEMPTS - 1:
                    raise
                time.sleep(0.1)


def generate_key(path: Path, comment: str) -> str:
    """A fresh ed25519 key pair at path (private, 0600) and path.pub; returns the public line."""
    keygen = find_tool("ssh-keygen") or "ssh-keygen"
    _run_checked([keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    return path.with_name(path.name + ".pub").read_text().strip()


@dataclass(frozen=True)
class ClientIdentity:
    """Who the tests log in as and with which key, shared by every sshd the harness starts."""

    user: BoxUser
    workdir: Path
    client_key: Path
    client_key_pub: str
    authorized_keys: Path

    @classmethod
    def create(cls, user: BoxUser) -> ClientIdentity:
        workdir = Path(tempfile.mkdtemp(prefix="gpuroom-ssh-id-"))
        # The user must reach authorized_keys (sshd reads it with the user's uid); the private
        # keys stay 0600 and root-owned, so 0711 on the dir exposes nothing else.
        workdir.chmod(0o711)
        client_key = workdir / "client_ed25519"
        pub = generate_key(client_key, "gpuroom-test-client")
        auth_dir = workdir / "auth"
        auth_dir.mkdir(mode=0o755)
        authorized_keys = auth_dir / "authorized_keys"
        authorized_keys.write_text(pub + "\n")
        authorized_keys.chmod(0o644)
        return cls(user, workdir, client_key, pub, authorized_keys)

    def remove(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def known_hosts_line(host: str, port: int, host_key_pub: str) -> str:
    """One known_hosts line, in the form ssh looks up ([host]:port unless port is 22)."""
    key_type, key_b64 = host_key_pub.split()[:2]
    name = host if port == 22 else f"[{host}]:{port}"
    return f"{name} {key_type} {key_b64}"


def render_ssh_config(hosts: Mapping[str, Mapping[str, str]]) -> str:
    """An ssh_config with one Host block per alias, options in the given order."""
    blocks = []
    for alias, options in hosts.items():
        lines = [f"Host {alias}"]
        for key, value in options.items():
            shown = f'"{value}"' if " " in value else value
            lines.append(f"    {key} {shown}")
        blocks.append("\n".join(lines))
    return "# Generated by tests/harness for one test session.\n" + "\n\n".join(blocks) + "\n"


def client_options(
    identity: ClientIdentity, hostname: str, port: int, known_hosts: Path
) -> dict[str, str]:
    """The options of a Host block for one of the harness's sshds."""
    return {
        "HostName": hostname,
        "Port": str(port),
        "User": identity.user.name,
        "IdentityFile": str(identity.client_key),
        "IdentitiesOnly": "yes",
        "IdentityAgent": "none",
        "UserKnownHostsFile": str(known_hosts),
        "GlobalKnownHostsFile": "/dev/null",
        "StrictHostKeyChecking": "yes",
        "BatchMode": "yes",
        "ConnectTimeout": str(SSH_CONNECT_TIMEOUT_S),
    }


def ssh_argv(
    ssh_config: Path,
    alias: str,
    remote_argv: Sequence[str],
    options: Mapping[str, str] | None = None,
) -> list[str]:
    """argv for the plain OpenSSH client.

    ssh joins its trailing words with spaces and the remote login shell splits them again, so the
    remote argv is quoted exactly once here (shlex.join) and survives as the same argv.
    """
    argv = [find_tool("ssh") or "ssh", "-F", str(ssh_config)]
    for key, value in (options or {}).items():
        argv += ["-o", f"{key}={value}"]
    argv.append(alias)
    if remote_argv:
        argv += ["--", shlex.join(remote_argv)]
    return argv


# ---------------------------------------------------------------------------------------------
# One sshd process


@dataclass
class SshdServer:
    """One foreground sshd listening on listen_host:port, optionally inside a network namespace."""

    name: str
    workdir: Path
    listen_host: str
    port: int  # 0: pick a free port at the first start, then keep it
    host_key: Path
    host_key_pub: str
    authorized_keys: Path
    user: str
    netns: str | None = None
    probe_tcp: bool = True  # False when this namespace cannot reach the listener (box behind jump)
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _frozen: list[int] = field(default_factory=list, init=False, repr=False)

    @classmethod
    def create(
        cls,
        name: str,
        workdir: Path,
        *,
        listen_host: str,
        port: int,
        identity: ClientIdentity,
        netns: str | None = None,
        probe_tcp: bool = True,
    ) -> SshdServer:
        host_key = workdir / f"{name}_host_ed25519"
        pub = generate_key(host_key, f"gpuroom-test-{name}-host")
        return cls(
            name=name, workdir=workdir, listen_host=listen_host, port=port, host_key=host_key,
            host_key_pub=pub, authorized_keys=identity.authorized_keys, user=identity.user.name,
            netns=netns, probe_tcp=probe_tcp,
        )

    @property
    def config_path(self) -> Path:
        return self.workdir / f"{self.name}_sshd_config"

    @property
    def log(self) -> Path:
        return self.workdir / f"{self.name}_sshd.log"

    @property
    def pid_file(self) -> Path:
        return self.workdir / f"{self.name}_sshd.pid"

    @property
    def pid(self) -> int | None:
        """The listener's pid while it runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def running(self) -> bool:
        """The listener process exists (it may be frozen)."""
        return self.pid is not None

    @property
    def frozen(self) -> bool:
        return bool(self._frozen)

    @property
    def alive(self) -> bool:
        """Running and answering (not frozen)."""
        return self.running and not self.frozen

    def config_text(self) -> str:
        lines = [
            f"ListenAddress {self.listen_host}",
            f"Port {self.port}",
            f"HostKey {self.host_key}",
            f"PidFile {self.pid_file}",
            # A harness-owned file: per-session keys never touch the shared user's ~/.ssh.
            # StrictModes would refuse it because /tmp above it is world-writable.
            f"AuthorizedKeysFile {self.authorized_keys}",
            "StrictModes no",
            f"AllowUsers {self.user}",
            "PermitRootLogin no",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "UseDNS no",
            "MaxSessions 100",
            "MaxStartups 100:30:200",
            "LoginGraceTime 30",
            "AllowTcpForwarding yes",
            "X11Forwarding no",
            "PrintMotd no",
            "PrintLastLog no",
            "Subsystem sftp internal-sftp",
            "LogLevel VERBOSE",
        ]
        if sshd_version() >= (9, 8):
            # Killed sessions and refused keys would otherwise get 127.0.0.1 penalised.
            lines.append("PerSourcePenalties no")
        return "# Generated by tests/harness.\n" + "\n".join(lines) + "\n"

    def start(self) -> None:
        """Start sshd and wait until it listens; the same port and host key as before."""
        if self.running:
            raise SshdStartError(f"sshd {self.name} already running (pid {self.pid})")
        _RUN_SSHD_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
        pick_port = self.port == 0
        for attempt in range(1, BIND_ATTEMPTS + 1):
            if pick_port:
                self.port = free_port(self.listen_host)
            self.config_path.write_text(self.config_text())
            try:
                self._spawn_and_wait()
                return
            except _PortTaken:
                if not pick_port or attempt == BIND_ATTEMPTS:
                    raise

    def _argv(self) -> list[str]:
        sshd = find_tool("sshd")
        if sshd is None:
            raise SshdStartError("sshd not installed: apt-get install openssh-server")
        argv = [sshd, "-D", "-e", "-f", str(self.config_path)]
        if self.netns is not None:
            argv = [find_tool("ip") or "ip", "netns", "exec", self.netns, *argv]
        return argv

    def _spawn_and_wait(self) -> None:
        offset = self.log.stat().st_size if self.log.exists() else 0
        env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
        with self.log.open("ab") as log:
            proc = subprocess.Popen(
                self._argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                start_new_session=True,
            )
        self._proc = proc
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            text = self._log_since(offset)
            if proc.poll() is not None:
                self._proc = None
                error = _PortTaken if "Cannot bind any address" in text else SshdStartError
                raise error(
                    f"sshd {self.name} exited with {proc.returncode}: {text[-_LOG_TAIL_CHARS:]}"
                )
            if "Server listening on" in text and (not self.probe_tcp or self._accepts_tcp()):
                return
            if time.monotonic() > deadline:
                self.kill_all()
                raise SshdStartError(
                    f"sshd {self.name} not listening on {self.listen_host}:{self.port} "
                    f"after {READY_TIMEOUT_S} s: {text[-_LOG_TAIL_CHARS:]}"
                )
            time.sleep(_POLL_S)

    def _log_since(self, offset: int) -> str:
        with self.log.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def log_tail(self, chars: int = _LOG_TAIL_CHARS) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def _accepts_tcp(self) -> bool:
        try:
            with socket.create_connection((self.listen_host, self.port), timeout=1.0):
                return True
        except OSError:
            return False

    def tree(self) -> list[int]:
        """The listener and every per-connection sshd and session process under it."""
        pid = self.pid
        return [] if pid is None else [pid, *procs.descendants(pid)]

    def freeze(self) -> None:
        """SIGSTOP the whole sshd tree: TCP stays open (the kernel still ACKs), nothing answers."""
        pid = self.pid
        if pid is None:
            raise RuntimeError(f"sshd {self.name} is not running")
        if not self._frozen:
            self._frozen = procs.stop_tree(pid)

    def thaw(self) -> None:
        """SIGCONT what freeze() stopped."""
        frozen, self._frozen = self._frozen, []
        procs.continue_pids(frozen)

    def kill_all(self) -> None:
        """SIGKILL the listener and every session under it at once, like a crashed box."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            # Stop first so nobody forks or reparents while we collect the tree.
            pids = procs.stop_tree(proc.pid)
            procs.kill_pids(pids)
        proc.wait(timeout=STOP_TIMEOUT_S)
        self._proc = None
        self._frozen = []

    def stop(self) -> None:
        """Terminate gracefully (SIGTERM to the tree); SIGKILL whatever outlives STOP_TIMEOUT_S."""
        proc = self._proc
        if proc is None:
            return
        self._frozen = []
        left = procs.terminate_pids(self.tree(), STOP_TIMEOUT_S)
        if left:
            procs.kill_pids(left)
        proc.wait(timeout=STOP_TIMEOUT_S)
        self._proc = None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the caller retries if it is taken meanwhile)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


# ---------------------------------------------------------------------------------------------
# The box on loopback


class SshClient:
    """The plain OpenSSH client against this harness's generated ssh_config, as the test user.

    Subclasses provide ``identity``, ``ssh_config`` and ``default_alias``.
    """

    identity: ClientIdentity

    @property
    def user(self) -> str:
        return self.identity.user.name

    @property
    def home(self) -> Path:
        return self.identity.user.home

    @property
    def client_key(self) -> Path:
        return self.identity.client_key

    @property
    def ssh_config(self) -> Path:
        raise NotImplementedError

    @property
    def default_alias(self) -> str:
        raise NotImplementedError

    def ssh_argv(
        self, *remote_argv: str, alias: str | None = None,
        options: Mapping[str, str] | None = None,
    ) -> list[str]:
        """argv for `ssh -F ssh_config [-o K=V]... ALIAS -- <remote argv quoted once>`."""
        return ssh_argv(self.ssh_config, alias or self.default_alias, remote_argv, options)

    def run(
        self, *remote_argv: str, alias: str | None = None,
        options: Mapping[str, str] | None = None, timeout: float = 30.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run remote_argv with the plain ssh client; never raises on a non-zero exit."""
        return subprocess.run(
            self.ssh_argv(*remote_argv, alias=alias, options=options),
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
            check=False,
        )


@dataclass
class SshdBox(SshClient):
    """A box reachable as `ssh -F ssh_config box`: a real sshd on 127.0.0.1 plus client files."""

    server: SshdServer
    identity: ClientIdentity
    workdir: Path
    alias: str = "box"
    _extra_hosts: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)

    @classmethod
    def create(cls, identity: ClientIdentity) -> SshdBox:
        workdir = Path(tempfile.mkdtemp(prefix="gpuroom-sshd-"))
        server = SshdServer.create(
            "box", workdir, listen_host="127.0.0.1", port=0, identity=identity
        )
        return cls(server=server, identity=identity, workdir=workdir)

    # The attributes tests and the link read.
    @property
    def host(self) -> str:
        return self.server.listen_host

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def host_key_pub(self) -> str:
        return self.server.host_key_pub

    @property
    def log(self) -> Path:
        return self.server.log

    @property
    def ssh_config(self) -> Path:
        return self.workdir / "ssh_config"

    @property
    def default_alias(self) -> str:
        return self.alias

    @property
    def known_hosts(self) -> Path:
        return self.workdir / "known_hosts"

    @property
    def alive(self) -> bool:
        return self.server.alive

    @property
    def frozen(self) -> bool:
        return self.server.frozen

    def host_options(self) -> dict[str, str]:
        """The ssh_config options of the `box` alias (extra aliases start from these)."""
        return client_options(self.identity, self.host, self.port, self.known_hosts)

    def write_ssh_config(
        self, extra_hosts: Mapping[str, Mapping[str, str]] | None = None
    ) -> Path:
        """Rewrite ssh_config as `box` plus extra_hosts (replacing earlier extras).

        Each extra alias takes the box's options with its own on top, so
        {"box-badkey": {"UserKnownHostsFile": "/tmp/other"}} is the same box checked against
        another known_hosts.
        """
        if extra_hosts is not None:
            self._extra_hosts = {alias: dict(opts) for alias, opts in extra_hosts.items()}
        base = self.host_options()
        hosts = {self.alias: base}
        hosts.update({alias: {**base, **opts} for alias, opts in self._extra_hosts.items()})
        self.ssh_config.write_text(render_ssh_config(hosts))
        return self.ssh_config

    def _write_client_files(self) -> None:
        line = known_hosts_line(self.host, self.port, self.host_key_pub)
        self.known_hosts.write_text(line + "\n")
        self.write_ssh_config()

    def start(self) -> None:
        """Start sshd (again): same port, same host key, so a client simply reconnects."""
        self.server.start()
        self._write_client_files()

    def stop(self) -> None:
        self.server.stop()

    def kill_all(self) -> None:
        self.server.kill_all()

    def freeze(self) -> None:
        self.server.freeze()

    def thaw(self) -> None:
        self.server.thaw()

    def reset(self) -> None:
        """Between tests: thaw, restart when a test killed it, base ssh_config, no ~/.gpuroom."""
        if self.server.frozen:
            self.thaw()
        if not self.server.running:
            self.server.kill_all()  # reap a listener that died on its own
            self.start()
        self._extra_hosts = {}
        self.write_ssh_config()
        wipe_gpuroom_dir(self.identity.user)

    def close(self) -> None:
        """Kill everything this box started and remove its files."""
        try:
            self.server.kill_all()
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _run_checked(argv: Sequence[str]) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({done.returncode}): {done.stderr.strip()}")
