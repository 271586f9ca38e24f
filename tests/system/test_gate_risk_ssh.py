"""Issue 19 item 11 against the real sshd box: the gate sees a foreign GPU process (the
8xH100 capture's, through the nvidia-smi replay), a job's --output files not copied to a
durable dir, and a TensorBoard run dir the job wrote under its cwd; and stays open for an
idle desktop GPU, synced outputs, an old run dir and an online wandb run."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import clijson
from harness.gpubox import SMI_CAPTURES, gpu_python
from harness.hostile import hosts_toml

pytestmark = pytest.mark.sshd

WAIT_S = 60.0
# The 2x3090 table for the GPUs, the 8xH100 table's python processes on them (the replay
# prints the first capture of a kind, so the GTX 1080 desktop table is left out here).
H100_BUSY = (SMI_CAPTURES[0], "nvsmi_table/driver535-8xH100-with-processes.txt")
# A job that writes TensorBoard events and a model under its cwd.
WRITES = ("import os; os.makedirs('runs/exp', exist_ok=True); "
          "open('runs/exp/events.out.tfevents.1.box', 'w').write('e'); "
          "open('model.pt', 'w').write('m')")
RISK_ITEMS = ("no GPU work outside gpuroom's jobs", "declared outputs copied to the durable dir",
              "tracker run dirs (TensorBoard, offline wandb) copied off the box")


@pytest.fixture
def box(sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    yield sshd_box
    sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


def config_for(sshd_box: Any, tmp_path: Path, python: Path) -> Path:
    return hosts_toml(tmp_path / "hosts.toml",
                      {"box": {"ssh": sshd_box.alias, "python": str(python)}},
                      sshd_box.ssh_config)


def cli_json(capsys: pytest.CaptureFixture[str], config: Path, *argv: str
             ) -> tuple[int, dict[str, Any]]:
    return clijson.cli_json(capsys, "--config", str(config), *argv)


def run_job(capsys: pytest.CaptureFixture[str], config: Path, cwd: str, *opts: str) -> None:
    rc, doc = cli_json(capsys, config, "queue", "add", "box", "--json", "--cwd", cwd,
                       "--output", "model.pt", *opts, "--", "python3", "-c", WRITES)
    assert rc == 0 and doc["ok"], doc
    deadline = time.monotonic() + WAIT_S
    while True:
        _, ls = cli_json(capsys, config, "queue", "ls", "box", "--json")
        job = next(j for j in ls["jobs"] if j["id"] == doc["job"])
        if job["state"] == "succeeded" and (job.get("sync") or {}).get("state") != "pending":
            return
        assert job["state"] not in ("failed", "killed"), job
        assert time.monotonic() < deadline, job
        time.sleep(0.3)


def gate(capsys: pytest.CaptureFixture[str], config: Path) -> dict[str, dict[str, Any]]:
    rc, doc = cli_json(capsys, config, "gate", "box", "--json")
    items = {i["name"]: i for i in doc["items"]}
    assert (rc == 0) == doc["safe"] == all(i["ok"] for i in items.values()), doc
    return items


def test_the_gate_sees_foreign_gpu_work_unsynced_outputs_and_a_tensorboard_dir(
        box: Any, fixtures: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cwd = box.home / "gate-risk"
    assert box.run("mkdir", "-p", str(cwd)).returncode == 0
    with gpu_python(box, fixtures, "gate-busy", H100_BUSY) as python:
        config = config_for(box, tmp_path, python)
        run_job(capsys, config, str(cwd), "--gpus", "0")
        items = gate(capsys, config)
    assert not items[RISK_ITEMS[0]]["ok"], items[RISK_ITEMS[0]]
    assert "pid 3375095 /usr/bin/python, 18GiB" in items[RISK_ITEMS[0]]["detail"]
    assert not items[RISK_ITEMS[1]]["ok"]
    assert "--output model.pt: no durable dir was set" in items[RISK_ITEMS[1]]["detail"]
    assert not items[RISK_ITEMS[2]]["ok"]
    assert f"{cwd}/runs/exp (tensorboard)" in items[RISK_ITEMS[2]]["detail"]


def test_an_idle_gpu_synced_outputs_and_old_or_online_runs_leave_the_items_open(
        box: Any, fixtures: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cwd, durable = box.home / "gate-calm", box.home / "gate-durable"
    old = cwd / "runs" / "before" / "events.out.tfevents.0.box"
    online = cwd / "wandb" / "run-20250101_000000-abc" / "files" / "output.log"
    script = (f"mkdir -p {durable} {old.parent} {online.parent} && touch -d '2020-01-01' {old}"
              f" && touch {online}")
    assert box.run("sh", "-c", script).returncode == 0
    with gpu_python(box, fixtures, "gate-idle", SMI_CAPTURES) as python:
        config = config_for(box, tmp_path, python)
        # The job's own run dir is the one finding: removed, what is left is old or online.
        run_job(capsys, config, str(cwd), "--gpus", "0", "--durable-dir", str(durable))
        assert box.run("rm", "-r", str(cwd / "runs" / "exp")).returncode == 0
        assert box.run("touch", str(online)).returncode == 0  # written after the job started
        items = gate(capsys, config)
    for name in RISK_ITEMS:
        assert items[name]["ok"], items[name]
    assert "1 online wandb run(s)" in items[RISK_ITEMS[2]]["detail"]
    assert os.path.exists(durable)
