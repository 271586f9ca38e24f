"""Unknown and changed host keys on every path that reaches a box (issue 18, host keys).

tests/system/test_link_ssh.py has the link's own refusals; here the verbs that act (queue add,
pull by each method) and a key that changes between two polls of a running room's fleet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness.hostile import gpuroom, hosts_toml

from gpuroom.tui.config import Config, HostConfig, Settings
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.model import LinkState

pytestmark = pytest.mark.sshd

def other_key_line(box: Any) -> str:
    import asyncssh

    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    return f"[{box.host}]:{box.port} {other}\n"


@pytest.mark.attack("host keys", "queue add and pull by sftp, openssh and rsync to a box whose "
                    "key is unknown or changed: refused before anything runs or is written")
@pytest.mark.parametrize("key", ["unknown", "changed"])
def test_acting_verbs_refuse_an_unverified_box(sshd_box: Any, tmp_path: Path, key: str) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("" if key == "unknown" else other_key_line(sshd_box))
    sshd_box.write_ssh_config({"box-bad": {"UserKnownHostsFile": str(known),
                                           "StrictHostKeyChecking": "yes"}})
    config = hosts_toml(tmp_path / "hosts.toml", {"bad": {"ssh": "box-bad"}},
                        sshd_box.ssh_config)
    local = tmp_path / "pulled"
    for verb in (["queue", "add", "bad", "--", "touch", str(sshd_box.home / "ran")],
                 ["pull", "bad", "--method", "sftp", "--to", str(local)],
                 ["pull", "bad", "--method", "openssh", "--to", str(local)],
                 ["pull", "bad", "--method", "rsync", "--to", str(local)],
                 ["status"]):
        done = gpuroom(config, *verb)
        said = done.stdout + done.stderr
        assert done.returncode != 0, (verb, said)
        assert ("CHANGED" if key == "changed" else "SHA256:") in said, (verb, said)
    assert not (sshd_box.home / ".gpuroom").exists()  # nothing uploaded, nothing queued
    assert not (sshd_box.home / "ran").exists()
    assert not local.exists() or not any(local.rglob("*"))


@pytest.mark.attack("host keys", "the box's key changes between two polls (a new connection "
                    "after a drop): the next poll is refused as CHANGED, the host is not UP")
async def test_a_key_that_changes_between_polls_is_refused(sshd_box: Any, tmp_path: Path
                                                          ) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(sshd_box.known_hosts.read_text())
    sshd_box.write_ssh_config({"box-k": {"UserKnownHostsFile": str(known)}})
    config = Config(path=tmp_path / "h.toml",
                    settings=Settings(ssh_config=str(sshd_box.ssh_config)))
    config.hosts["box"] = HostConfig(name="box", ssh="box-k")
    fleet = Fleet(config)
    try:
        assert (await fleet.poll_host("box")).state is LinkState.UP
        # What a box replaced behind the same address looks like from here.
        known.write_text(other_key_line(sshd_box))
        sshd_box.kill_all()
        sshd_box.start()
        # The first poll may still find the old connection gone (a broken pipe); the ones
        # after it connect afresh, and are refused every time: no silent re-trust.
        errors = []
        for _ in range(3):
            state = await fleet.poll_host("box")
            assert state.state is not LinkState.UP, errors
            errors.append(state.error or "")
        assert all("CHANGED" in e for e in errors[1:]), errors
    finally:
        await fleet.close()
