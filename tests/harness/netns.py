"""A jump topology in network namespaces: root -> jump -> box, the box unreachable from root.

    root ns  gpr<sfx>a 10.213.P.1/24 ── gpr<sfx>b 10.213.P.2/24  jump ns (sshd :22)
                                         gpr<sfx>c 10.213.Q.1/24 ── gpr<sfx>d 10.213.Q.2/24  box ns

Network safety: before any namespace or address exists, the root namespace gets
`unreachable 10.213.0.0/16` (with a metric of its own, so parallel runs each add and remove
theirs), so a mistaken connect to a 10.213 address fails locally instead of leaving the machine.
Root reaches the jump through the more specific connected /24; the box's /24 only exists inside
the namespaces, so from root it hits the unreachable route. The jump needs no IP forwarding:
ProxyJump asks the jump's sshd for a direct-tcpip channel to the box.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from . import procs
from .sshd import (
    ClientIdentity,
    SshClient,
    SshdServer,
    client_options,
    find_tool,
    known_hosts_line,
    render_ssh_config,
    wipe_gpuroom_dir,
)

SUPERNET = "10.213.0.0/16"
_SUPERNET_PREFIX = "10.213."
ROUTE_METRIC_BASE = 21300  # + the pair index: one unreachable route per live topology
SUBNET_PICK_ATTEMPTS = 20
SSH_PORT = 22
NS_PREFIX = "gprj"
_IP_TIMEOUT_S = 10.0


class NetnsUnavailable(RuntimeError):
    """This machine does not let us create namespaces or routes; the message says why and how."""


def _ip() -> str:
    return find_tool("ip") or "ip"


def _ip_run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [_ip(), *args], capture_output=True, text=True, timeout=_IP_TIMEOUT_S, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def missing_requirements() -> str | None:
    """Why namespaces cannot be used here, with the fix; None when they may be."""
    if os.geteuid() != 0:
        return "network namespaces need root: run the tests as root, as CI does"
    if find_tool("ip") is None:
        return "ip not installed: apt-get install iproute2"
    return None


def _not_permitted(stderr: str) -> bool:
    return "Operation not permitted" in stderr or "Permission denied" in stderr


def _route_args(metric: int) -> list[str]:
    return ["unreachable", SUPERNET, "metric", str(metric)]


def add_safety_route(metric: int) -> None:
    """``unreachable 10.213.0.0/16`` with this topology's own metric: first, before any
    namespace or address exists, so a mistaken connect fails here instead of leaving."""
    done = _ip_run("route", "add", *_route_args(metric), check=False)
    if done.returncode != 0:
        if _not_permitted(done.stderr):
            raise NetnsUnavailable(
                f"ip route add not permitted ({done.stderr.strip()}): "
                "run as root with CAP_NET_ADMIN (a container needs --privileged or "
                "--cap-add NET_ADMIN --cap-add SYS_ADMIN)"
            )
        raise RuntimeError(f"ip route add {SUPERNET} failed: {done.stderr.strip()}")
    shown = _ip_run("route", "show", "exact", SUPERNET).stdout
    if not any(
        line.startswith("unreachable") and f"metric {metric}" in line
        for line in shown.splitlines()
    ):
        raise RuntimeError(f"safety route unreachable {SUPERNET} missing after adding: {shown}")


def del_safety_route(metric: int) -> list[str]:
    """Remove it at teardown; what went wrong, if anything."""
    done = _ip_run("route", "del", *_route_args(metric), check=False)
    return [f"ip route del {SUPERNET}: {done.stderr.strip()}"] if done.returncode else []


def add_netns(ns: str) -> None:
    done = _ip_run("netns", "add", ns, check=False)
    if done.returncode != 0:
        if _not_permitted(done.stderr) or "mount" in done.stderr:
            raise NetnsUnavailable(
                f"ip netns add not permitted ({done.stderr.strip()}): run as root with "
                "CAP_SYS_ADMIN (a container needs --privileged)"
            )
        raise RuntimeError(f"ip netns add {ns} failed: {done.stderr.strip()}")


def del_netns(ns: str) -> list[str]:
    """Kill what still runs in ``ns`` (a daemonised tmux left the sshd tree), delete it."""
    if ns not in list_netns():
        return []
    errors: list[str] = []
    pids = [int(p) for p in _ip_run("netns", "pids", ns, check=False).stdout.split()]
    try:
        procs.kill_pids(pids)
    except TimeoutError as exc:
        errors.append(str(exc))
    done = _ip_run("netns", "del", ns, check=False)
    if done.returncode != 0:
        errors.append(f"ip netns del {ns}: {done.stderr.strip()}")
    return errors


def leftovers(namespaces: tuple[str, ...], links: tuple[str, ...], metric: int) -> list[str]:
    """What of a topology still exists in the kernel (empty after a clean teardown)."""
    left = [f"namespace {ns}" for ns in namespaces if ns in list_netns()]
    left += [f"link {dev}" for dev in links if _link_exists(dev)]
    routes = _ip_run("route", "show", "exact", SUPERNET).stdout.splitlines()
    left += [f"route {r}" for r in routes if f"metric {metric}" in r]
    return left


@dataclass
class _Namespaced(SshClient):
    """What both topologies have: their files' dir, their names' suffix, their /24 pair."""

    identity: ClientIdentity
    workdir: Path
    suffix: str
    pair_index: int  # picks the two /24s and the route metric

    @property
    def route_metric(self) -> int:
        return ROUTE_METRIC_BASE + self.pair_index

    @property
    def ssh_config(self) -> Path:
        return self.workdir / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.workdir / "known_hosts"


@dataclass
class JumpTopology(_Namespaced):
    """Two namespaces with an sshd each; `ssh -F ssh_config box-via-jump` goes through the jump."""

    jump_alias: str = "jump"
    box_alias: str = "box-via-jump"
    jump_sshd: SshdServer | None = field(default=None, repr=False)
    box_sshd: SshdServer | None = field(default=None, repr=False)
    _route_added: bool = field(default=False, repr=False)

    # -- names and addresses ------------------------------------------------------------------
    @property
    def jump_ns(self) -> str:
        return f"{NS_PREFIX}-jump-{self.suffix}"

    @property
    def box_ns(self) -> str:
        return f"{NS_PREFIX}-box-{self.suffix}"

    @property
    def veths(self) -> tuple[str, str, str, str]:
        """(root side, jump side to root, jump side to box, box side); 15 chars at most."""
        return tuple(f"gpr{self.suffix}{end}" for end in "abcd")  # type: ignore[return-value]

    @property
    def outer_subnet(self) -> str:
        return f"{_SUPERNET_PREFIX}{2 * self.pair_index}"

    @property
    def inner_subnet(self) -> str:
        return f"{_SUPERNET_PREFIX}{2 * self.pair_index + 1}"

    @property
    def root_ip(self) -> str:
        return f"{self.outer_subnet}.1"

    @property
    def jump_ip(self) -> str:
        return f"{self.outer_subnet}.2"

    @property
    def jump_inner_ip(self) -> str:
        return f"{self.inner_subnet}.1"

    @property
    def box_ip(self) -> str:
        return f"{self.inner_subnet}.2"

    # -- build and tear down -------------------------------------------------------------------
    def _add_safety_route(self) -> None:
        add_safety_route(self.route_metric)
        self._route_added = True

    def build(self) -> None:
        """Create everything; the caller must call teardown() whatever happens."""
        self._add_safety_route()  # first, before any namespace or address exists
        add_netns(self.jump_ns)
        _ip_run("netns", "add", self.box_ns)
        root_end, jump_out, jump_in, box_end = self.veths
        j, b = self.jump_ns, self.box_ns
        _ip_run("link", "add", root_end, "type", "veth", "peer", "name", jump_out, "netns", j)
        _ip_run("link", "add", jump_in, "netns", j, "type", "veth", "peer", "name", box_end,
                "netns", b)
        _ip_run("addr", "add", f"{self.root_ip}/24", "dev", root_end)
        _ip_run("link", "set", root_end, "up")
        for ns, dev, addr in (
            (j, jump_out, self.jump_ip), (j, jump_in, self.jump_inner_ip), (b, box_end, self.box_ip)
        ):
            _ip_run("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip_run("-n", ns, "link", "set", dev, "up")
        for ns in (j, b):
            _ip_run("-n", ns, "link", "set", "lo", "up")

        self.jump_sshd = SshdServer.create(
            "jump", self.workdir, listen_host=self.jump_ip, port=SSH_PORT,
            identity=self.identity, netns=j,
        )
        self.box_sshd = SshdServer.create(
            "box", self.workdir, listen_host=self.box_ip, port=SSH_PORT,
            identity=self.identity, netns=b,
            probe_tcp=False,  # root cannot reach the box, by design
        )
        self.jump_sshd.start()
        self.box_sshd.start()
        self.write_client_files()

    def write_client_files(self) -> None:
        assert self.jump_sshd is not None and self.box_sshd is not None
        self.known_hosts.write_text(
            known_hosts_line(self.jump_ip, SSH_PORT, self.jump_sshd.host_key_pub) + "\n"
            + known_hosts_line(self.box_ip, SSH_PORT, self.box_sshd.host_key_pub) + "\n"
        )
        jump = client_options(self.identity, self.jump_ip, SSH_PORT, self.known_hosts)
        box = client_options(self.identity, self.box_ip, SSH_PORT, self.known_hosts)
        box["ProxyJump"] = self.jump_alias
        self.ssh_config.write_text(render_ssh_config({self.jump_alias: jump, self.box_alias: box}))

    def teardown(self) -> None:
        """Kill the sshds and whatever else runs in the namespaces, delete them, the veth and the
        route, then check nothing is left (raises listing what is)."""
        errors: list[str] = []
        for server in (self.jump_sshd, self.box_sshd):
            if server is not None:
                try:
                    server.kill_all()
                except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                    errors.append(f"killing sshd {server.name}: {exc}")
        for ns in (self.jump_ns, self.box_ns):
            # Sessions that daemonised (tmux) left the sshd tree but still hold the namespace.
            errors += del_netns(ns)
        root_end = self.veths[0]
        if _link_exists(root_end):
            _ip_run("link", "del", root_end, check=False)
        if self._route_added:
            errors += del_safety_route(self.route_metric)
            self._route_added = False
        shutil.rmtree(self.workdir, ignore_errors=True)
        errors += self.leftovers()
        if errors:
            raise RuntimeError("jump topology teardown left things behind: " + "; ".join(errors))

    def leftovers(self) -> list[str]:
        """What of this topology still exists in the kernel (empty after a clean teardown)."""
        return leftovers((self.jump_ns, self.box_ns), self.veths[:1], self.route_metric)

    # -- use ------------------------------------------------------------------------------------
    @property
    def default_alias(self) -> str:
        """ssh_argv/run default to the box behind the jump."""
        return self.box_alias

    def reset(self) -> None:
        """Between tests: thaw, restart a killed sshd, no ~/.gpuroom."""
        for server in (self.jump_sshd, self.box_sshd):
            if server is None:
                continue
            if server.frozen:
                server.thaw()
            if not server.running:
                server.kill_all()
                server.start()
        wipe_gpuroom_dir(self.identity.user)


def list_netns() -> list[str]:
    out = _ip_run("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _link_exists(dev: str) -> bool:
    return _ip_run("link", "show", "dev", dev, check=False).returncode == 0


def _pick_pair_index() -> int:
    """A pair of /24s in 10.213/16 that no address or route on this machine uses yet."""
    used = _ip_run("-o", "addr", "show").stdout + _ip_run("route", "show", "table", "all").stdout
    for _ in range(SUBNET_PICK_ATTEMPTS):
        index = random.randint(1, 126)
        subnets = (f"{_SUPERNET_PREFIX}{2 * index}.", f"{_SUPERNET_PREFIX}{2 * index + 1}.")
        metric = f"metric {ROUTE_METRIC_BASE + index}"
        if not any(s in used for s in subnets) and metric not in used:
            return index
    raise RuntimeError(f"no free /24 pair in {SUPERNET} after {SUBNET_PICK_ATTEMPTS} tries")


@dataclass
class TwoBoxTopology(_Namespaced):
    """Two boxes, each alone in its namespace behind its own veth and /24 from root (issue 21
    item 4: a job fails over from box a to box b when a's link is cut).

        root ns  gpr<sfx>e 10.213.P.1/24 ── gpr<sfx>f 10.213.P.2/24  box a ns (sshd :22)
        root ns  gpr<sfx>g 10.213.Q.1/24 ── gpr<sfx>h 10.213.Q.2/24  box b ns (sshd :22)

    The same safety route as JumpTopology's is added before anything else and removed last.
    Both boxes are the one test user on this machine's filesystem: tests give each its own
    GPUROOM_HOME (a python wrapper) and its own TMUX_TMPDIR, so each box's runner and jobs
    live in its namespace.
    """

    servers: dict[str, SshdServer] = field(default_factory=dict, repr=False)
    _route_added: bool = field(default=False, repr=False)

    BOXES = ("a", "b")

    def ns(self, box: str) -> str:
        return f"{NS_PREFIX}-two{box}-{self.suffix}"

    def veths(self, box: str) -> tuple[str, str]:
        """(root side, box side)."""
        ends = "ef" if box == "a" else "gh"
        return f"gpr{self.suffix}{ends[0]}", f"gpr{self.suffix}{ends[1]}"

    def subnet(self, box: str) -> str:
        return f"{_SUPERNET_PREFIX}{2 * self.pair_index + self.BOXES.index(box)}"

    def ip(self, box: str) -> str:
        return f"{self.subnet(box)}.2"

    def alias(self, box: str) -> str:
        return f"box{box}"

    @property
    def default_alias(self) -> str:
        return self.alias("a")

    def build(self) -> None:
        """Create everything; the caller must call teardown() whatever happens."""
        add_safety_route(self.route_metric)  # first, before any namespace or address exists
        self._route_added = True
        for box in self.BOXES:
            ns, (root_end, box_end) = self.ns(box), self.veths(box)
            add_netns(ns)
            _ip_run("link", "add", root_end, "type", "veth", "peer", "name", box_end,
                    "netns", ns)
            _ip_run("addr", "add", f"{self.subnet(box)}.1/24", "dev", root_end)
            _ip_run("link", "set", root_end, "up")
            _ip_run("-n", ns, "addr", "add", f"{self.ip(box)}/24", "dev", box_end)
            _ip_run("-n", ns, "link", "set", box_end, "up")
            _ip_run("-n", ns, "link", "set", "lo", "up")
            server = SshdServer.create(f"box{box}", self.workdir, listen_host=self.ip(box),
                                       port=SSH_PORT, identity=self.identity, netns=ns)
            self.servers[box] = server
            server.start()
        self.known_hosts.write_text("".join(
            known_hosts_line(self.ip(b), SSH_PORT, self.servers[b].host_key_pub) + "\n"
            for b in self.BOXES))
        self.ssh_config.write_text(render_ssh_config({
            self.alias(b): client_options(self.identity, self.ip(b), SSH_PORT, self.known_hosts)
            for b in self.BOXES}))

    def cut(self, box: str) -> None:
        """The box is lost: its sshd and every session die, its link goes down."""
        self.servers[box].kill_all()
        _ip_run("-n", self.ns(box), "link", "set", self.veths(box)[1], "down")

    def restore(self, box: str) -> None:
        """It is back: link up, sshd listening again (same host key)."""
        _ip_run("-n", self.ns(box), "link", "set", self.veths(box)[1], "up")
        self.servers[box].start()

    def pids(self, box: str) -> list[int]:
        """Every process in the box's namespace (sshd, tmux, runner, jobs)."""
        out = _ip_run("netns", "pids", self.ns(box), check=False).stdout
        return [int(p) for p in out.split()]

    def teardown(self) -> None:
        """Kill the sshds and whatever else runs in the namespaces, delete them, the veths
        and the route, then check nothing is left (raises listing what is)."""
        errors: list[str] = []
        for server in self.servers.values():
            try:
                if server.frozen:
                    server.thaw()
                server.kill_all()
            except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                errors.append(f"killing sshd {server.name}: {exc}")
        for box in self.BOXES:
            errors += del_netns(self.ns(box))
            if _link_exists(self.veths(box)[0]):
                _ip_run("link", "del", self.veths(box)[0], check=False)
        if self._route_added:
            errors += del_safety_route(self.route_metric)
            self._route_added = False
        shutil.rmtree(self.workdir, ignore_errors=True)
        errors += leftovers(tuple(self.ns(b) for b in self.BOXES),
                            tuple(self.veths(b)[0] for b in self.BOXES), self.route_metric)
        if errors:
            raise RuntimeError("two-box topology teardown left things behind: "
                               + "; ".join(errors))


_Topology = TypeVar("_Topology", "JumpTopology", "TwoBoxTopology")


@contextlib.contextmanager
def _built(kind: type[_Topology], identity: ClientIdentity, prefix: str) -> Iterator[_Topology]:
    """Build a topology and always tear it down, even when building fails half-way."""
    topo = kind(
        identity=identity,
        workdir=Path(tempfile.mkdtemp(prefix=prefix)),
        suffix=secrets.token_hex(3),
        pair_index=_pick_pair_index(),
    )
    topo.workdir.chmod(0o711)
    try:
        topo.build()
        yield topo
    finally:
        topo.teardown()


def jump_topology(identity: ClientIdentity) -> contextlib.AbstractContextManager[JumpTopology]:
    """Build a JumpTopology and always tear it down, even when building fails half-way."""
    return _built(JumpTopology, identity, "gpuroom-netns-")


def two_box_topology(
    identity: ClientIdentity,
) -> contextlib.AbstractContextManager[TwoBoxTopology]:
    """Build a TwoBoxTopology and always tear it down, even when building fails half-way."""
    return _built(TwoBoxTopology, identity, "gpuroom-netns2-")


T = TypeVar("T")


@contextlib.contextmanager
def built_or_skip(build: Callable[[ClientIdentity], contextlib.AbstractContextManager[T]],
                  identity: ClientIdentity) -> Iterator[T]:
    """A topology for a fixture, or the test skipped saying why (no root, no ip, ...)."""
    reason = missing_requirements()
    if reason is not None:
        pytest.skip(reason)
    try:
        with build(identity) as topo:
            yield topo
    except NetnsUnavailable as exc:
        pytest.skip(str(exc))


__all__ = [
    "SUPERNET",
    "JumpTopology",
    "NetnsUnavailable",
    "TwoBoxTopology",
    "built_or_skip",
    "jump_topology",
    "list_netns",
    "missing_requirements",
    "two_box_topology",
]
