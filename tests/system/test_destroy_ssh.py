"""Issue 19 item 5, the destroy half, against the real sshd box. A user profile shaped like
RunPod ("podlike": its volume disk /workspace at ~/survives, which survives a stop and not a
destroy): `queue add` with checkpoints there says so once (info); the teardown gate names the
job's unpulled checkpoints there when the host's teardown destroys, not when it only stops,
and not once they are pulled home."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import clijson
from harness.hostile import hosts_toml

from gpuroom.profiles import PACKAGED_DIR
from gpuroom.tui.cli.main import main

pytestmark = pytest.mark.sshd

WAIT_S = 60.0
PULLED = "every job's outputs pulled"
WRITE = ("import os; open(os.path.join(os.environ['GPUROOM_CKPT_DIR'], 'step_400.bin'), 'w')"
         ".write('weights')")


@pytest.fixture
def pod(sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("COLUMNS", "400")
    profiles = tmp_path / "xdg" / "gpuroom" / "profiles"
    profiles.mkdir(parents=True)
    text = (PACKAGED_DIR / "runpod.toml").read_text()
    text = text.replace('platform = "runpod"', 'platform = "podlike"')
    (profiles / "podlike.toml").write_text(text.replace('"/workspace"', '"~/survives"'))
    assert sshd_box.run("sh", "-c", f"rm -rf {sshd_box.home / 'survives'} && "
                        f"mkdir -p {sshd_box.home / 'survives'}").returncode == 0
    yield sshd_box
    sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


def config(pod: Any, tmp_path: Path, teardown: list[str]) -> Path:
    return hosts_toml(tmp_path / "hosts.toml",
                      {"pod": {"ssh": pod.alias, "profile": "podlike",
                               "teardown_command": teardown,
                               "pull_to": str(tmp_path / "home")}}, pod.ssh_config)


def gate_item(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, Any]:
    _, doc = clijson.cli_json(capsys, "--config", str(path), "gate", "pod", "--json")
    return next(i for i in doc["items"] if i["name"] == PULLED)


def test_a_destroy_names_unpulled_checkpoints_on_the_volume_a_stop_keeps(
        pod: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    remove = config(pod, tmp_path, ["podctl", "remove", "pod", "abc"])
    runs = pod.home / "survives" / "runs"
    rc = main(["--config", str(remove), "queue", "add", "pod", "--gpus", "0", "--durable-dir",
               str(runs), "--", "python3", "-c", WRITE])
    out = capsys.readouterr()
    assert rc == 0, out
    assert out.err.count("info: ") == 1 and "survives a stop but not a destroy" in out.err
    assert "warning" not in out.err
    deadline = time.monotonic() + WAIT_S
    while True:
        _, ls = clijson.cli_json(capsys, "--config", str(remove), "queue", "ls", "pod", "--json")
        job = ls["jobs"][0]
        if job["state"] == "succeeded":
            break
        assert job["state"] not in ("failed", "killed") and time.monotonic() < deadline, job
        time.sleep(0.3)
    ckpt = job["ckpt_dir"]
    assert ckpt.startswith(str(runs))

    item = gate_item(capsys, remove)
    assert not item["ok"]
    assert (f"the teardown destroys {ckpt} of {job['id']} (on ~/survives, which survives a "
            "stop, not a destroy)") in item["detail"], item

    # The same box torn down by a stop keeps the volume: not pulled, but no destroy claim.
    stop = config(pod, tmp_path, ["podctl", "stop", "pod", "abc"])
    item = gate_item(capsys, stop)
    assert not item["ok"] and "destroys" not in item["detail"], item

    # Pulled home: a destroy takes nothing that is not also here.
    remove = config(pod, tmp_path, ["podctl", "remove", "pod", "abc"])
    assert main(["--config", str(remove), "pull", "pod"]) == 0, capsys.readouterr()
    capsys.readouterr()
    item = gate_item(capsys, remove)
    assert item["ok"] and "destroys" not in item["detail"], item


def test_checkpoints_off_the_volume_get_no_destroy_note_at_add(
        pod: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    remove = config(pod, tmp_path, ["podctl", "remove", "pod", "abc"])
    rc = main(["--config", str(remove), "queue", "add", "pod", "--gpus", "0", "--",
               "sleep", "1"])
    err = capsys.readouterr().err
    assert rc == 0 and "info: " not in err and "warning: $GPUROOM_CKPT_DIR is" in err
