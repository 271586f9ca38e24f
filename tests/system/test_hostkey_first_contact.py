"""A new user's first contact with a box whose key is not known yet: `status` prints the
fingerprint and the command that trusts it whole, at any width, and the room says "unknown
host key", not a dropped poll (the real sshd, the key really unknown)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from harness.hostile import GPUROOM, hosts_toml
from harness.room import screen_text

from gpuroom.tui import config as cfg
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.widgets.banner import DangerBanner

pytestmark = pytest.mark.sshd

FINGERPRINT = re.compile(r"SHA256:[A-Za-z0-9+/]{43}")
WAIT_S = 30.0


def unknown_key_config(box: Any, tmp_path: Path) -> tuple[Path, Path]:
    """hosts.toml naming the box through an alias whose known_hosts is empty."""
    known = tmp_path / "known_hosts"
    known.write_text("")
    box.write_ssh_config({"nubox": {"UserKnownHostsFile": str(known),
                                    "StrictHostKeyChecking": "yes"}})
    return hosts_toml(tmp_path / "hosts.toml", {"nubox": {"ssh": "nubox"}},
                      box.ssh_config), known


def box_fingerprint(box: Any) -> str:
    """The box's ed25519 key's fingerprint, as ssh-keygen prints it."""
    keys = subprocess.run(["ssh-keyscan", "-p", str(box.port), "-t", "ed25519", box.host],
                          capture_output=True, text=True, timeout=30, check=True).stdout
    printed = subprocess.run(["ssh-keygen", "-lf", "-"], input=keys, capture_output=True,
                             text=True, timeout=30, check=True).stdout
    found = FINGERPRINT.search(printed)
    assert found, printed
    return found.group(0)


@pytest.mark.parametrize("columns", [80, 250])
def test_status_prints_the_fingerprint_and_the_trust_command_whole(
        sshd_box: Any, tmp_path: Path, columns: int) -> None:
    config, known = unknown_key_config(sshd_box, tmp_path)
    done = subprocess.run([GPUROOM, "--config", str(config), "status"], capture_output=True,
                          text=True, timeout=120, check=False,
                          env={**os.environ, "COLUMNS": str(columns), "TERM": "xterm"})
    assert done.returncode == 3, done.stdout + done.stderr
    said = done.stdout
    assert box_fingerprint(sshd_box) in said, said
    trust = (f"ssh-keyscan -p {sshd_box.port} -t ed25519 {sshd_box.host} >> {known}")
    assert trust in said, said
    # Pasted as printed, the command trusts the key: the next status reaches the box.
    subprocess.run(["sh", "-c", trust], check=True, timeout=30, capture_output=True)
    again = subprocess.run([GPUROOM, "--config", str(config), "status"], capture_output=True,
                           text=True, timeout=120, check=False)
    assert again.returncode == 0, again.stdout + again.stderr


async def test_the_room_says_unknown_host_key_on_first_contact(
        sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    config, _known = unknown_key_config(sshd_box, tmp_path)
    app = GpuroomApp(Fleet(cfg.load(config)))
    async with app.run_test(size=(200, 60)) as pilot:
        deadline = time.monotonic() + WAIT_S
        while not app.query_one(DangerBanner).items:
            assert time.monotonic() < deadline, screen_text(app)
            await pilot.pause(0.3)
        banner = " ".join(d.text for d in app.query_one(DangerBanner).items)
        assert "unknown host key" in banner, banner
        assert "the poll failed" not in banner, banner
