"""Issue 18's attacks on config, the SSH link and pulls, replayed against the real sshd."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from gpuroom.tui.cli.main import main
from gpuroom.tui.config import HostConfig
from gpuroom.tui.transport.link import REQUEST_TIMEOUT_S, HostLink, LinkError
from gpuroom.tui.transport.pull import pull

pytestmark = pytest.mark.sshd

# Every character a shell, a glob or an option parser would read as something else: a file
# named like this is still one file with this name, on every pull path.
HOSTILE_NAMES = ("*.bin", "a.bin", "?.bin", "[ab].bin", "b.bin", "with space.bin",
                 "quote'd \"both\".bin", "-leading-dash.bin", "--rsync-path=evil",
                 "new\nline.bin", "$(touch pwned).bin")
METHODS = ["sftp",
           pytest.param("openssh", marks=pytest.mark.skipif(shutil.which("ssh") is None,
                                                            reason="no OpenSSH client")),
           pytest.param("rsync", marks=pytest.mark.skipif(shutil.which("rsync") is None,
                                                          reason="rsync not installed"))]


def _own(box: Any, root: Path) -> None:
    uid, gid = box.identity.user.uid, box.identity.user.gid
    for dirpath, dirs, names in os.walk(root):
        for n in [dirpath, *(os.path.join(dirpath, x) for x in dirs + names)]:
            os.lchown(n, uid, gid)


@pytest.mark.attack("injection", "file names with * ? [ ] spaces quotes leading - newlines "
                                 "pulled by sftp, openssh and rsync")
@pytest.mark.parametrize("method", METHODS)
async def test_hostile_file_names_travel_every_pull_path_intact(
        sshd_box: Any, tmp_path: Path, method: str) -> None:
    src = sshd_box.home / "ckpt_names"
    shutil.rmtree(src, ignore_errors=True)
    (src / "sub [x]").mkdir(parents=True)
    want = {}
    for i, name in enumerate(HOSTILE_NAMES):
        rel = name if i % 2 else f"sub [x]/{name}"
        want[rel] = f"{i}:{name}".encode() * (i + 1)
        (src / rel).write_bytes(want[rel])
    _own(sshd_box, src)
    link = HostLink(HostConfig(name="box", ssh=sshd_box.alias), ssh_config=sshd_box.ssh_config)
    try:
        result = await pull(link, str(src), tmp_path / "out", method=method,
                            state_path=tmp_path / "pulls.json", load_test_torch=False)
    finally:
        await link.close()
    assert {f.path: f.status for f in result.files} == {rel: "verified" for rel in want}, \
        [(f.path, f.detail) for f in result.files]
    assert {f.via for f in result.files} == {method}
    for rel, data in want.items():
        assert (tmp_path / "out" / rel).read_bytes() == data
    assert not list((tmp_path / "out").rglob("*.part"))
    assert not (sshd_box.home / "pwned").exists()


@pytest.mark.attack("faults", "a .part corrupted on the jump host, then the pull resumed")
@pytest.mark.parametrize("method", METHODS)
async def test_part_corrupted_here_is_reported_as_a_bad_local_part(
        sshd_box: Any, tmp_path: Path, method: str) -> None:
    src = sshd_box.home / "ckpt_rot"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir()
    data = os.urandom(300_000)
    (src / "model.bin").write_bytes(data)
    _own(sshd_box, src)
    out = tmp_path / "out"
    out.mkdir()
    # A pull stopped after 100 kB, then one byte of its .part rotted on this machine.
    rotten = bytearray(data[:100_000])
    rotten[5000] ^= 0xFF
    (out / "model.bin.part").write_bytes(bytes(rotten))
    link = HostLink(HostConfig(name="box", ssh=sshd_box.alias), ssh_config=sshd_box.ssh_config)
    try:
        result = await pull(link, str(src), out, method=method,
                            state_path=tmp_path / "pulls.json", load_test_torch=False)
    finally:
        await link.close()
    [fr] = result.files
    assert result.ok and (out / "model.bin").read_bytes() == data
    assert "file changed on the box" not in fr.detail, fr.detail
    assert ".part kept here from an earlier pull did not match" in fr.detail, fr.detail
    assert "unchanged on the box" in fr.detail, fr.detail


@pytest.mark.attack("bad configuration", "an ssh alias missing from ~/.ssh/config")
def test_an_alias_missing_from_the_ssh_config_is_named_with_the_file(
        sshd_box: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 18: "[Errno -2] Name or service not known", naming neither alias nor file. The
    # '+' makes the C library refuse the name itself, so no DNS query leaves this machine.
    typo = f"{sshd_box.alias}+typo"
    config = tmp_path / "hosts.toml"
    config.write_text(f'[settings]\nssh_config = "{sshd_box.ssh_config}"\n'
                      f'[hosts.box]\nssh = "{typo}"\n')
    config.chmod(0o600)
    assert main(["--config", str(config), "status", "--json"]) == 3
    [host] = json.loads(capsys.readouterr().out)["hosts"]
    error = host["error"]
    assert f"cannot connect to {typo!r}: it is not a Host in {sshd_box.ssh_config}" in error, \
        error
    assert f"Fix: add 'Host {typo}'" in error, error


def _link(box: Any) -> HostLink:
    return HostLink(HostConfig(name="box", ssh=box.alias), ssh_config=box.ssh_config)


@pytest.mark.attack("faults", "the helper's place on the box cannot be written (a folder "
                              "squats its name)")
async def test_a_helper_that_cannot_be_replaced_says_which_file_and_which_error(
        sshd_box: Any) -> None:
    # Issue 18: "poll failed: Failure".
    link = _link(sshd_box)
    squatter = sshd_box.home / link.archive.remote_path
    (squatter / "inside").mkdir(parents=True)
    _own(sshd_box, sshd_box.home / ".gpuroom")
    try:
        with pytest.raises(LinkError) as caught:
            await link.poll({})
    finally:
        await link.close()
    text = str(caught.value)
    helper = f"~/{link.archive.remote_path}"
    assert f"cannot put the helper {helper} on the box: renaming ~/.gpuroom/bin/." in text, text
    assert "SFTP error 4 (Failure)" in text and f"rm -rf {helper}" in text, text
    assert [p.name for p in squatter.parent.iterdir()] == [squatter.name]  # no temp left


@pytest.mark.attack("faults", "the helper on the box edited in place (tampered)")
async def test_a_tampered_helper_is_replaced_and_said_once(sshd_box: Any) -> None:
    link = _link(sshd_box)
    helper = sshd_box.home / link.archive.remote_path
    helper.parent.mkdir(parents=True)
    helper.write_bytes(link.archive.data + b"\n# edited on the box\n")
    _own(sshd_box, sshd_box.home / ".gpuroom")
    try:
        first = await link.poll({})
        second = await link.poll({})
    finally:
        await link.close()
    assert helper.read_bytes() == link.archive.data and link.uploads == 1
    [note] = [e["error"] for e in first["errors"] if e["section"] == "helper"]
    assert note.startswith(f"gpuroom replaced ~/{link.archive.remote_path}: it hashed to ")
    assert "something on the box edited it" in note
    assert not [e for e in second["errors"] if e["section"] == "helper"]
    # A fresh link finds the right helper there: nothing to say.
    again = _link(sshd_box)
    try:
        third = await again.poll({})
    finally:
        await again.close()
    assert again.uploads == 0 and not [e for e in third["errors"] if e["section"] == "helper"]


@pytest.mark.attack("bad answers", "a helper that hangs on the first poll of a connection")
def test_status_on_a_hung_helper_answers_within_the_request_deadline(
        sshd_box: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 18: the first poll of a connection allowed connect + login + request budgets
    # together, so a helper that hangs took 45 s to report. The interpreter here is the real
    # python3 for everything but the helper itself, which never answers.
    hang = sshd_box.home / "python-whose-helper-hangs"
    hang.write_text('#!/bin/sh\ncase "$2" in *.pyz) exec sleep 600;; esac\n'
                    'exec python3 "$@"\n')
    hang.chmod(0o755)
    config = tmp_path / "hosts.toml"
    config.write_text(f'[settings]\nssh_config = "{sshd_box.ssh_config}"\n'
                      f'[hosts.box]\nssh = "{sshd_box.alias}"\npython = "{hang}"\n')
    config.chmod(0o600)
    started = time.monotonic()
    assert main(["--config", str(config), "status", "--json"]) == 3
    took = time.monotonic() - started
    [host] = json.loads(capsys.readouterr().out)["hosts"]
    # The request deadline is REQUEST_TIMEOUT_S whether or not the poll also connected; the
    # connect itself (loopback, the helper already uploaded or not) takes well under 5 s.
    assert f"no answer within {REQUEST_TIMEOUT_S:.0f} s from the helper" in host["error"], host
    assert took < REQUEST_TIMEOUT_S + 5.0, took
