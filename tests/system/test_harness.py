"""The harness itself, proven with the plain OpenSSH client (argv lists, -F, BatchMode=yes).

These guard what the SSH link's tests rely on: a real sshd as an unprivileged user, a crash that
kills live sessions, a freeze that leaves TCP half-open (U17), host-key checking, and a jump
topology whose box root cannot reach directly.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import subprocess
import time
from pathlib import Path

import pytest
from harness import generate_key, known_hosts_line, list_netns, netns
from harness.netns import SUPERNET, JumpTopology
from harness.sshd import TEST_USER, ClientIdentity, SshdBox

CRASH_NOTICED_S = 3.0  # a killed box closes the TCP connection: the client sees it at once
KEEPALIVE_OPTIONS = {"ServerAliveInterval": "1", "ServerAliveCountMax": "2"}
FROZEN_NOTICED_S = 6.0  # 1 s x (2 unanswered + 1) keepalives, plus slack
READY_LINE_TIMEOUT_S = 10.0
LOCAL_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def _start_session(argv: list[str]) -> subprocess.Popen[str]:
    """Start `ssh ... -- sh -c 'echo up; exec sleep 30'` and wait until the remote side runs."""
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], READY_LINE_TIMEOUT_S)
    if not ready:
        proc.kill()
        proc.wait(timeout=5)
        pytest.fail(f"remote session not up within {READY_LINE_TIMEOUT_S} s")
    line = proc.stdout.readline()
    if line != "up\n":
        proc.kill()
        _, err = proc.communicate(timeout=5)
        pytest.fail(f"remote session did not start: {line!r} {err}")
    return proc


def _wait_exit(proc: subprocess.Popen[str], timeout_s: float) -> tuple[int, str, float]:
    """(returncode, stderr, seconds waited); fails the test if ssh outlives timeout_s."""
    started = time.monotonic()
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate(timeout=5)
        pytest.fail(f"ssh still running {timeout_s} s later: the link would hang half-open")
    return proc.returncode, err, time.monotonic() - started


SESSION_ARGV = ("sh", "-c", "echo up; exec sleep 15")  # outlives each test, not by much


# ---------------------------------------------------------------------------------------------
# The loopback box


@pytest.mark.sshd
def test_box_logs_in_as_the_unprivileged_test_user(sshd_box: SshdBox) -> None:
    done = sshd_box.run("id", "-un")
    assert done.returncode == 0, done.stderr
    # GPUROOM_TEST_USER lets concurrent runs use separate users; never root.
    assert done.stdout.strip() == sshd_box.user == TEST_USER != "root"
    assert sshd_box.host == "127.0.0.1"
    assert sshd_box.home.is_dir()
    assert "Server listening on 127.0.0.1 port" in sshd_box.log.read_text()


@pytest.mark.sshd
def test_box_is_this_machine(sshd_box: SshdBox) -> None:
    done = sshd_box.run("hostname")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == socket.gethostname()


@pytest.mark.sshd
def test_remote_argv_is_quoted_once(sshd_box: SshdBox) -> None:
    """An argument with spaces and shell metacharacters arrives as one argv word."""
    tricky = "a b; echo injected $HOME 'q'"
    done = sshd_box.run("printf", "%s\\n", tricky)
    assert done.returncode == 0, done.stderr
    assert done.stdout == tricky + "\n"


@pytest.mark.sshd
def test_each_test_starts_without_gpuroom_dir(sshd_box: SshdBox) -> None:
    assert not (sshd_box.home / ".gpuroom").exists()
    done = sshd_box.run("mkdir", "-p", ".gpuroom/state")
    assert done.returncode == 0, done.stderr
    assert (sshd_box.home / ".gpuroom" / "state").is_dir()
    sshd_box.reset()
    assert not (sshd_box.home / ".gpuroom").exists()


@pytest.mark.sshd
def test_kill_all_drops_live_sessions_and_start_comes_back_same_port_same_key(
    sshd_box: SshdBox,
) -> None:
    port, host_key = sshd_box.port, sshd_box.host_key_pub
    session = _start_session(sshd_box.ssh_argv(*SESSION_ARGV))
    listener = sshd_box.server.pid
    assert listener is not None
    assert len(sshd_box.server.tree()) >= 3  # listener, per-connection sshd(s), sleep

    sshd_box.kill_all()
    code, err, waited = _wait_exit(session, CRASH_NOTICED_S)
    assert code == 255, err
    assert waited < CRASH_NOTICED_S
    with pytest.raises(OSError):
        socket.create_connection((sshd_box.host, port), timeout=1.0).close()

    sshd_box.start()
    assert (sshd_box.port, sshd_box.host_key_pub) == (port, host_key)
    assert sshd_box.server.pid != listener
    done = sshd_box.run("true")
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr and "host key" not in done.stderr.lower()


@pytest.mark.sshd
def test_frozen_box_fails_a_keepalive_session_quickly(sshd_box: SshdBox) -> None:
    """U17: TCP stays open but nothing answers; ServerAlive* must end the session."""
    session = _start_session(sshd_box.ssh_argv(*SESSION_ARGV, options=KEEPALIVE_OPTIONS))
    sshd_box.freeze()
    try:
        # The port still accepts: the kernel completes the handshake for a stopped listener.
        socket.create_connection((sshd_box.host, sshd_box.port), timeout=1.0).close()
        code, err, waited = _wait_exit(session, FROZEN_NOTICED_S + 2)
    finally:
        sshd_box.thaw()
    assert code == 255, err
    assert "Timeout, server" in err
    assert waited < FROZEN_NOTICED_S
    done = sshd_box.run("true")
    assert done.returncode == 0, done.stderr


@pytest.mark.sshd
def test_frozen_box_fails_a_new_connection_within_connect_timeout(sshd_box: SshdBox) -> None:
    sshd_box.freeze()
    try:
        started = time.monotonic()
        done = sshd_box.run("true", options={"ConnectTimeout": "2"}, timeout=10)
        waited = time.monotonic() - started
    finally:
        sshd_box.thaw()
    assert done.returncode == 255
    assert "timed out" in done.stderr
    assert waited < 5


@pytest.mark.sshd
def test_stop_is_graceful_and_the_next_test_gets_a_running_box(sshd_box: SshdBox) -> None:
    sshd_box.stop()
    assert not sshd_box.alive
    sshd_box.reset()
    assert sshd_box.alive
    assert sshd_box.run("true").returncode == 0


@pytest.mark.sshd
@pytest.mark.parametrize("known", ["other-key", "empty"])
def test_wrong_or_unknown_host_key_is_refused(
    sshd_box: SshdBox, tmp_path: Path, known: str
) -> None:
    bad = tmp_path / "known_hosts_bad"
    if known == "other-key":
        other = generate_key(tmp_path / "other_host_key", "not-the-box")
        bad.write_text(known_hosts_line(sshd_box.host, sshd_box.port, other) + "\n")
    else:
        bad.write_text("")
    sshd_box.write_ssh_config({"box-badkey": {"UserKnownHostsFile": str(bad)}})
    done = sshd_box.run("true", alias="box-badkey")
    assert done.returncode == 255
    assert "Host key verification failed" in done.stderr
    assert sshd_box.run("true").returncode == 0  # the real alias still works


@pytest.mark.sshd
def test_agent_socket_does_not_leak_in(sshd_box: SshdBox) -> None:
    assert "SSH_AUTH_SOCK" not in os.environ
    assert "IdentityAgent none" in sshd_box.ssh_config.read_text()


# ---------------------------------------------------------------------------------------------
# The jump topology


@pytest.mark.sshd
@pytest.mark.netns
def test_box_via_jump_is_this_machine(jump_topology: JumpTopology) -> None:
    done = jump_topology.run("cat", str(LOCAL_BOOT_ID))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == LOCAL_BOOT_ID.read_text().strip()
    jump = jump_topology.run("id", "-un", alias="jump")
    assert jump.returncode == 0, jump.stderr
    assert jump.stdout.strip() == jump_topology.user


@pytest.mark.sshd
@pytest.mark.netns
def test_root_cannot_reach_the_box_directly(jump_topology: JumpTopology) -> None:
    started = time.monotonic()
    with pytest.raises(OSError) as refused:
        socket.create_connection((jump_topology.box_ip, 22), timeout=5.0).close()
    assert refused.value.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH), refused.value
    assert time.monotonic() - started < 1.0  # a local route refusal, not a timeout
    route = subprocess.run(
        ["ip", "route", "get", jump_topology.box_ip], capture_output=True, text=True, check=False
    )
    # The kernel answers from the safety route: "RTNETLINK answers: No route to host".
    assert route.returncode != 0 and "No route to host" in route.stderr, route
    # ...while the jump is reachable through the connected /24.
    socket.create_connection((jump_topology.jump_ip, 22), timeout=5.0).close()


@pytest.mark.sshd
@pytest.mark.netns
def test_killed_box_behind_jump_comes_back(jump_topology: JumpTopology) -> None:
    assert jump_topology.box_sshd is not None
    jump_topology.box_sshd.kill_all()
    assert jump_topology.run("true", options={"ConnectTimeout": "3"}).returncode == 255
    jump_topology.reset()
    assert jump_topology.run("true").returncode == 0


@pytest.mark.sshd
@pytest.mark.netns
def test_topology_teardown_leaves_nothing_behind(
    ssh_identity: ClientIdentity, jump_topology: JumpTopology
) -> None:
    """A second, private topology (parallel to the session's) is built and torn down."""
    with netns.jump_topology(ssh_identity) as private:
        names = (private.jump_ns, private.box_ns)
        assert set(names) <= set(list_netns())
        assert private.pair_index != jump_topology.pair_index
        done = private.run("true")
        assert done.returncode == 0, done.stderr
    assert not set(names) & set(list_netns())
    assert private.leftovers() == []
    routes = subprocess.run(
        ["ip", "route", "show", "exact", SUPERNET], capture_output=True, text=True, check=True
    ).stdout
    assert f"metric {private.route_metric}" not in routes
    assert f"metric {jump_topology.route_metric}" in routes  # the session's stays until its end


# ---------------------------------------------------------------------------------------------
# Skips say what is missing and how to fix it


def test_skip_reasons_name_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness import sshd as sshd_harness

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "needs root" in (sshd_harness.missing_requirements() or "")
    assert "need root" in (netns.missing_requirements() or "")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(sshd_harness, "find_tool", lambda name: None)
    assert sshd_harness.missing_requirements() == (
        "sshd not installed: apt-get install openssh-server"
    )
