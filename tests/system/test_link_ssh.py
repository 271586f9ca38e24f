"""The link against a real OpenSSH sshd on loopback (and through a real jump host)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from gpuroom.tui.cli.main import main
from gpuroom.tui.config import Config, HostConfig, Settings
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.model import LinkState
from gpuroom.tui.transport.link import HostKeyError, HostLink, LinkError, SshTransport

pytestmark = pytest.mark.sshd

BOOT_ID = Path("/proc/sys/kernel/random/boot_id").read_text().strip()


@pytest.fixture
def box(sshd_box: Any) -> Any:
    """The harness's loopback box (tests/conftest.py), named for brevity here."""
    return sshd_box


def hosts_toml(tmp_path: Path, ssh_config: Path, hosts: dict[str, dict[str, Any]]) -> Path:
    import tomli_w

    p = tmp_path / "hosts.toml"
    p.write_bytes(tomli_w.dumps({"settings": {"ssh_config": str(ssh_config)},
                                 "hosts": hosts}).encode())
    return p


def run_status(capsys: pytest.CaptureFixture[str], config: Path) -> tuple[int, dict[str, Any]]:
    rc = main(["--config", str(config), "status", "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_status_json_matches_the_box(box: Any, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    config = hosts_toml(tmp_path, box.ssh_config, {"box": {"ssh": box.alias}})
    rc, doc = run_status(capsys, config)
    [host] = doc["hosts"]
    assert rc == 0, host["error"]
    snap = host["snapshot"]
    assert host["state"] == "up" and host["error"] is None
    assert snap["host"]["hostname"] == socket.gethostname()
    assert snap["host"]["boot_id"] == BOOT_ID
    [home] = [d for d in snap["disks"] if d["path"] == "~"]
    assert home["real_path"] == str(box.home)
    assert home["total_inodes"] == os.statvfs(box.home).f_files
    # The helper ran as the box's user, from the content-named file it was given.
    deployed = box.home / ".gpuroom" / "bin"
    [pyz] = list(deployed.glob("remote-*.pyz"))
    digest = hashlib.sha256(pyz.read_bytes()).hexdigest()
    assert pyz.name == f"remote-{digest[:12]}.pyz"
    assert snap["helper"]["sha256"] == digest
    assert pyz.stat().st_uid == box.identity.user.uid


async def test_second_connection_reuses_helper(box: Any) -> None:
    host = HostConfig(name="box", ssh=box.alias)
    first = HostLink(host, ssh_config=box.ssh_config)
    await first.poll({})
    await first.close()
    pyz = box.home / first.archive.remote_path
    inode, mtime = pyz.stat().st_ino, pyz.stat().st_mtime_ns
    second = HostLink(host, ssh_config=box.ssh_config, mode="exec")
    snap = await second.poll({})
    await second.close()
    assert first.uploads == 1 and second.uploads == 0
    assert (pyz.stat().st_ino, pyz.stat().st_mtime_ns) == (inode, mtime)
    assert snap["helper"]["sha256"] == first.archive.sha256


async def test_aes_gcm_first_unless_the_ssh_config_names_ciphers(box: Any) -> None:
    # asyncssh would pick chacha20-poly1305, its slowest cipher for bulk bytes (a pull).
    box.write_ssh_config({"box-ctr": {"Ciphers": "aes256-ctr"}})
    for alias, want in ((box.alias, "aes128-gcm@openssh.com"), ("box-ctr", "aes256-ctr")):
        transport = await SshTransport.connect("b", alias, box.ssh_config)
        try:
            assert transport._conn.get_extra_info("send_cipher") == want, alias
            assert transport._conn.get_extra_info("recv_cipher") == want, alias
        finally:
            await transport.close()


async def test_spawned_ssh_for_bulk_bytes_puts_aes_gcm_first_unless_the_config_names_ciphers(
        box: Any) -> None:
    # OpenSSH's own first choice is chacha20-poly1305 too; a -o Ciphers on the command line
    # would override the user's line, so it is added only when there is none.
    box.write_ssh_config({"box-ctr": {"Ciphers": "aes256-ctr"}})
    for alias, want in ((box.alias, "aes128-gcm@openssh.com"), ("box-ctr", "aes256-ctr")):
        link = HostLink(HostConfig(name="b", ssh=alias), ssh_config=box.ssh_config)
        try:
            await link.poll({})  # connected: the link knows what the config says
            argv = link.bulk_ssh_argv()
        finally:
            await link.close()
        assert ("-o" in argv and "BatchMode=yes" in argv), argv
        assert any(a.startswith("Ciphers=") for a in argv) == (alias == box.alias), argv
        # What the real ssh then negotiates with the real sshd.
        done = subprocess.run([*argv, "-v", "--", alias, "true"], capture_output=True,
                              text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr[-500:]
        assert f"server->client cipher: {want}" in done.stderr, done.stderr[-2000:]


@pytest.mark.attack(
    "host keys",
    "an unknown host key on the link: refused with its fingerprint and the ssh-keyscan "
    "line, nothing run on the box")
async def test_unknown_host_key_refused_with_fingerprint(box: Any, tmp_path: Path) -> None:
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    box.write_ssh_config({"box-unknown": {"UserKnownHostsFile": str(empty)}})
    link = HostLink(HostConfig(name="b", ssh="box-unknown"), ssh_config=box.ssh_config)
    with pytest.raises(HostKeyError) as err:
        await link.poll({})
    await link.close()
    text = str(err.value)
    expected = _fingerprint(box.host_key_pub)
    assert expected in text
    assert "ssh-keyscan" in text and str(box.port) in text and str(empty) in text
    assert not (box.home / ".gpuroom").exists()  # nothing ran on an unverified box


@pytest.mark.attack(
    "host keys",
    "a changed host key in known_hosts: refused as CHANGED with the ssh-keygen -R fix")
async def test_changed_host_key_refused_as_changed(box: Any, tmp_path: Path) -> None:
    import asyncssh

    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text(f"[{box.host}]:{box.port} {other}\n")
    box.write_ssh_config({"box-changed": {"UserKnownHostsFile": str(wrong)}})
    link = HostLink(HostConfig(name="b", ssh="box-changed"), ssh_config=box.ssh_config)
    with pytest.raises(HostKeyError, match="CHANGED") as err:
        await link.poll({})
    await link.close()
    assert "ssh-keygen -R" in str(err.value)


def _fingerprint(pub_line: str) -> str:
    import asyncssh

    return str(asyncssh.import_public_key(pub_line).get_fingerprint("sha256"))


@pytest.mark.attack(
    "faults",
    "sshd and every session killed between polls: STALE with the last snapshot, no "
    "verdict on jobs, UP again once it is back")
async def test_killed_sshd_goes_stale_then_recovers(box: Any, tmp_path: Path) -> None:
    config = Config(path=tmp_path / "h.toml", settings=Settings(ssh_config=str(box.ssh_config)))
    config.hosts["box"] = HostConfig(name="box", ssh=box.alias)
    fleet = Fleet(config)
    try:
        assert (await fleet.poll_host("box")).state is LinkState.UP
        good = fleet.state("box").snapshot
        box.kill_all()
        t0 = time.monotonic()
        state = await fleet.poll_host("box")
        took = time.monotonic() - t0
        assert state.state is LinkState.STALE, state.error
        assert state.snapshot is good  # the last good snapshot is kept, with its age
        assert took < 15.0
        assert "job" not in (state.error or "").lower()  # GEN8: no verdict about runs
        box.start()
        state = await fleet.poll_host("box")
        assert state.state is LinkState.UP, state.error
    finally:
        await fleet.close()


@pytest.mark.attack(
    "faults",
    "a frozen box (TCP open, nothing answers): STALE within the request deadline, then recovers")
async def test_frozen_box_is_stale_within_deadline(box: Any) -> None:
    link = HostLink(HostConfig(name="box", ssh=box.alias), ssh_config=box.ssh_config,
                    request_timeout_s=2.0)
    try:
        await link.poll({})
        box.freeze()
        t0 = time.monotonic()
        with pytest.raises(LinkError, match="no answer within"):
            await link.poll({})
        assert time.monotonic() - t0 < 6.0
        assert not link.connected
        box.thaw()
        snap = await link.poll({})
        assert snap["host"]["boot_id"] == BOOT_ID
    finally:
        box.thaw()
        await link.close()


@pytest.mark.attack(
    "bad configuration",
    "python = an interpreter the box lacks: named, with the fix")
async def test_box_without_python_says_so(box: Any) -> None:
    link = HostLink(HostConfig(name="box", ssh=box.alias, python="python3-not-here"),
                    ssh_config=box.ssh_config)
    with pytest.raises(LinkError) as err:
        await link.poll({})
    await link.close()
    assert "no python3-not-here on PATH" in str(err.value) and "Fix:" in str(err.value)


# What a hostile or broken box might write to stderr: an OSC 52 clipboard write, a screen
# clear, and text that Textual markup would read as an action.
HOSTILE_STDERR = r"boom \033]52;c;ZXZpbA==\007\033[2J[@click=app.quit]x[/]\n"


@pytest.mark.attack(
    "hostile text",
    "OSC 52, CSI 2J and Textual markup on the box's stderr: the host error is one inert line")
async def test_box_stderr_in_a_host_error_is_inert(box: Any, tmp_path: Path) -> None:
    fake = box.home / "python-that-fails"
    fake.write_text(f"#!/bin/sh\nprintf '{HOSTILE_STDERR}' >&2\nexit 3\n")
    fake.chmod(0o755)
    config = Config(path=tmp_path / "h.toml", settings=Settings(ssh_config=str(box.ssh_config)))
    config.hosts["box"] = HostConfig(name="box", ssh=box.alias, python=str(fake))
    fleet = Fleet(config)
    try:
        state = await fleet.poll_host("box")
    finally:
        await fleet.close()
    assert state.state is LinkState.DOWN
    error = state.error or ""
    assert "exit 3" in error and "boom" in error, error
    assert not any(c in error for c in "\x1b\x07\n"), repr(error)


@pytest.mark.attack("bad answers", "an interpreter that prints text instead of the helper's JSON")
async def test_helper_answer_not_json_is_host_error(box: Any) -> None:
    # `echo` stands in for an interpreter whose output is not the helper's JSON.
    link = HostLink(HostConfig(name="box", ssh=box.alias, python="echo"),
                    ssh_config=box.ssh_config)
    with pytest.raises(LinkError, match="unexpected"):
        await link.poll({})
    await link.close()


@pytest.mark.attack(
    "bad answers",
    "an answer over the output cap: a host error and the connection dropped")
async def test_answer_over_cap_drops_connection(box: Any) -> None:
    link = HostLink(HostConfig(name="box", ssh=box.alias), ssh_config=box.ssh_config,
                    mode="exec", output_cap=300)
    with pytest.raises(LinkError, match="exceeded 300 bytes"):
        await link.poll({})
    assert not link.connected
    await link.close()


@pytest.mark.attack(
    "bad configuration",
    "an alias with shell metacharacters, an unknown alias and a host without ssh: each "
    "fails alone, the good host is UP")
def test_bad_hosts_fail_alone(box: Any, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    config = hosts_toml(tmp_path, box.ssh_config, {
        "box": {"ssh": box.alias},
        "meta": {"ssh": "box;id"},
        "nowhere": {"ssh": "no-such-alias.invalid"},
        "noalias": {"profile": "runpod"},
    })
    rc, doc = run_status(capsys, config)
    states = {h["name"]: h for h in doc["hosts"]}
    assert rc == 3
    assert states["box"]["state"] == "up"
    assert "metacharacters" in states["meta"]["error"]
    assert states["nowhere"]["state"] == "down" and "cannot connect" in states["nowhere"]["error"]
    assert "no ssh alias" in states["noalias"]["error"]


@pytest.mark.netns
def test_status_through_jump_host(jump_topology: Any, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    topo = jump_topology
    config = hosts_toml(tmp_path, topo.ssh_config, {"far": {"ssh": "box-via-jump"},
                                                    "jump": {"ssh": "jump"}})
    rc, doc = run_status(capsys, config)
    states = {h["name"]: h for h in doc["hosts"]}
    assert rc == 0, states
    far = states["far"]["snapshot"]
    assert far["host"]["boot_id"] == BOOT_ID
    assert far["host"]["hostname"] == socket.gethostname()
    [home] = [d for d in far["disks"] if d["path"] == "~"]
    assert home["total_inodes"] == os.statvfs(home["real_path"]).f_files


async def test_probe_over_ssh_has_every_section_and_no_errors(box: Any) -> None:
    """Issue 3: the full document comes back from a box with no GPU, whatever dmesg allows."""
    link = HostLink(HostConfig(name="box", ssh=box.alias), ssh_config=box.ssh_config)
    try:
        snap = await link.poll({"mounts": ["/nonexistent-mount"]})
    finally:
        await link.close()
    for key in ("schema", "helper", "host", "cgroup", "disks", "gpus", "gpu_source", "kernel",
                "vram_holders", "queue", "errors"):
        assert key in snap, key
    assert snap["errors"] == []
    assert snap["gpus"] == [] and snap["gpu_source"] == "none"
    assert snap["kernel"]["log"] in ("ok", "partial", "denied", "unavailable")
    [missing] = [d for d in snap["disks"] if d["path"] == "/nonexistent-mount"]
    assert "error" in missing  # a missing mount is reported, not raised
    assert snap["host"]["cpu_count"] == os.cpu_count()


@pytest.mark.attack(
    "host keys",
    "HOME is not the passwd home: the s key's ssh must trust exactly the known_hosts the "
    "link trusted, not ask again from another file")
async def test_the_s_keys_ssh_and_bulk_ssh_read_the_known_hosts_the_link_reads(
        box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.sshd import client_options, known_hosts_line, render_ssh_config

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "known_hosts").write_text(
        known_hosts_line(box.host, box.port, box.host_key_pub) + "\n")
    monkeypatch.setenv("HOME", str(home))
    options = client_options(box.identity, box.host, box.port, box.known_hosts)
    del options["UserKnownHostsFile"], options["GlobalKnownHostsFile"]  # the defaults, ~ in each
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(render_ssh_config({"plain": options}))
    link = HostLink(HostConfig(name="b", ssh="plain"), ssh_config=ssh_config)
    try:
        await link.poll({})  # the link trusts the key in $HOME/.ssh/known_hosts
        interactive, bulk = link.ssh_argv(), link.bulk_ssh_argv()
    finally:
        await link.close()
    assert interactive is not None and interactive[-2:] == ["--", "plain"]
    for argv in ([*interactive, "true"], [*bulk, "--", "plain", "true"]):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0, (argv, done.stderr[-500:])
