"""A stopped box's release counts down over the real sshd: `gpuroom doctor` sees the AutoDL box
up (the jump host records its answer in the state dir), then a later run from another process
finds it DOWN and counts AutoDL's 15 days from that answer, not a constant reminder."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import tomllib
from harness.monitorbox import queue_box
from harness.sshd import free_port

from gpuroom.profiles import load_profile
from gpuroom.tui.cli.main import main

RELEASE_S = next(c.seconds for c in load_profile("autodl").danger_clocks
                 if c.kind == "auto_release_after_stop")


def _doctor(config: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    main(["--config", str(config), "doctor", "--json"])
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def _unreachable(config: Path, tmp_path: Path) -> Path:
    """The same host, now answering nothing: its alias points at a closed port."""
    ssh_config = tmp_path / "ssh_config_stopped"
    ssh_config.write_text(f"Host stopped-box\n  HostName 127.0.0.1\n  Port {free_port()}\n"
                          "  ConnectTimeout 5\n")
    doc = tomllib.loads(config.read_text())
    doc["settings"]["ssh_config"] = str(ssh_config)
    doc["hosts"]["box"]["ssh"] = "stopped-box"
    stopped = tmp_path / "hosts-stopped.toml"
    stopped.write_bytes(tomli_w.dumps(doc).encode())
    stopped.chmod(0o600)
    return stopped


@pytest.mark.sshd
def test_a_box_that_went_down_counts_down_to_its_release(
        sshd_box: Any, fixtures: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    with queue_box(sshd_box, fixtures, tmp_path, host={"profile": "autodl"}) as config:
        before = time.time()
        up = _doctor(config, capsys)
        assert up["hosts"][0]["state"] == "up"
        (reminder,) = [c for c in up["clocks"] if c["kind"] == "auto_release"]
        assert reminder["text"].startswith("if stopped, released after 15 days")
        time.sleep(2.0)
        down = _doctor(_unreachable(config, tmp_path), capsys)
    assert down["hosts"][0]["state"] == "down"
    (clock,) = [c for c in down["clocks"] if c["kind"] == "auto_release"]
    assert clock["text"].startswith("down ") and "if stopped, released in" in clock["text"]
    assert clock["severity"] == "info"
    # Counted from the box's last answer, not from this run: at least the 2 s slept are gone.
    gone = RELEASE_S - clock["seconds"]
    assert 2.0 <= gone <= time.time() - before + 1.0
