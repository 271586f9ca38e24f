"""Issue 19 item 5 against the real sshd box: with a profile whose only mount that survives a
stop is ~/survives (a user profile, as RunPod's /workspace), `queue add` warns when the job's
checkpoints go under ~/.gpuroom and the doctor says it while the job runs; with --durable-dir
under ~/survives neither does."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.hostile import hosts_toml

from gpuroom.profiles import PACKAGED_DIR
from gpuroom.tui.cli.main import main

pytestmark = pytest.mark.sshd

WAIT_S = 60.0


@pytest.fixture
def box_config(sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    # A user profile "podlike": RunPod's file with its surviving /workspace at ~/survives.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("COLUMNS", "400")  # one line per message
    profiles = tmp_path / "xdg" / "gpuroom" / "profiles"
    profiles.mkdir(parents=True)
    text = (PACKAGED_DIR / "runpod.toml").read_text()
    text = text.replace('platform = "runpod"', 'platform = "podlike"')
    (profiles / "podlike.toml").write_text(text.replace('"/workspace"', '"~/survives"'))
    path = hosts_toml(tmp_path / "hosts.toml",
                      {"pod": {"ssh": sshd_box.alias, "profile": "podlike"}}, sshd_box.ssh_config)
    assert sshd_box.run("mkdir", "-p", str(sshd_box.home / "survives")).returncode == 0
    yield path
    sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


def add(capsys: pytest.CaptureFixture[str], config: Path, *opts: str) -> tuple[str, str]:
    rc = main(["--config", str(config), "queue", "add", "pod", *opts, "--gpus", "0", "--",
               "sleep", "30"])
    out = capsys.readouterr()
    assert rc == 0, out
    return out.out, out.err


def doctor_u46(capsys: pytest.CaptureFixture[str], config: Path) -> list[dict[str, Any]]:
    main(["--config", str(config), "doctor", "--json"])
    return [f for f in json.loads(capsys.readouterr().out)["findings"] if f["id"] == "U46"]


def test_checkpoints_off_the_surviving_mount_are_warned_at_add_and_while_running(
        box_config: Path, sshd_box: Any, capsys: pytest.CaptureFixture[str]) -> None:
    _, err = add(capsys, box_config)
    assert "warning: $GPUROOM_CKPT_DIR is" in err and ".gpuroom/ckpt/default/j" in err
    assert "not under ~/survives" in err and "--durable-dir ~/survives/runs" in err
    deadline = time.monotonic() + WAIT_S
    while not (found := doctor_u46(capsys, box_config)):
        assert time.monotonic() < deadline, "no U46 finding while the job runs"
        time.sleep(0.5)
    assert found[0]["severity"] == "warn" and "is under none of ~/survives" in found[0]["seen"]
    main(["--config", str(box_config), "queue", "kill", "pod", "j1"])
    capsys.readouterr()


def test_checkpoints_under_the_surviving_mount_are_not_warned(
        box_config: Path, sshd_box: Any, capsys: pytest.CaptureFixture[str]) -> None:
    out, err = add(capsys, box_config, "--durable-dir", str(sshd_box.home / "survives" / "runs"))
    assert "warning" not in err and "added j" in out
    deadline = time.monotonic() + WAIT_S
    while True:  # once the job runs, the doctor has had the chance to say it
        rc = main(["--config", str(box_config), "queue", "ls", "pod", "--json"])
        jobs = json.loads(capsys.readouterr().out)["jobs"]
        if rc == 0 and jobs and jobs[0]["state"] == "running":
            break
        assert time.monotonic() < deadline, jobs
        time.sleep(0.3)
    assert doctor_u46(capsys, box_config) == []
    main(["--config", str(box_config), "queue", "kill", "pod", "j1"])
    capsys.readouterr()
