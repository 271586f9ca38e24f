"""Issue 19 item 7 end to end: a real job saves with the real Checkpointer (torch on the CPU),
the real helper reports how long the save took, and `gpuroom doctor` judges the cadence.

Run on the local link (the same helper and poll path as a box, without SSH): the test sshd's
user has no torch to run the job with. The queue root, its runner's tmux server and the
checkpoints are this test's own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuroom.tui.cli.main import main

pytest.importorskip("torch")

SAVE_AND_WAIT = ("import os, time, torch\n"
                 "from gpuroom.remote.checkpoint import Checkpointer\n"
                 "ck = Checkpointer(os.environ['GPUROOM_CKPT_DIR'])\n"
                 "ck.save(400, model=torch.nn.Linear(64, 64))\n"
                 "ck.wait()\n"
                 "print('saved', flush=True)\n"
                 "time.sleep(120)\n")


@pytest.fixture
def local_box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    socket = f"gpuroom-cadence-{tmp_path.name}"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GPUROOM_HOME", str(tmp_path / "gpuroom"))
    monkeypatch.setenv("GPUROOM_TMUX_SOCKET", socket)
    monkeypatch.delenv("TMUX", raising=False)
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "hosts.toml"
    try:
        yield config
    finally:
        # The job runs in its own process group: the runner ends it on a queue kill; the
        # runner lives in this test's own tmux server.
        main(["--config", str(config), "queue", "kill", "local", "j1"])
        subprocess.run(["tmux", "-L", socket, "kill-server"], check=False,
                       capture_output=True)


def _hosts(path: Path, mtbf_hours: float) -> None:
    path.write_text(f"[hosts.local]\nlocal = true\nmtbf_hours = {mtbf_hours}\n")
    path.chmod(0o600)


def _doctor(config: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    main(["--config", str(config), "doctor", "--json"])
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_a_late_checkpoint_by_young_daly_is_a_warning(
        local_box: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _hosts(local_box, 1000.0)
    assert main(["--config", str(local_box), "queue", "add", "local", "--gpus", "0", "--",
                 sys.executable, "-c", SAVE_AND_WAIT]) == 0
    capsys.readouterr()
    deadline = time.monotonic() + 60
    while True:
        assert main(["--config", str(local_box), "probe", "local", "--compact"]) == 0
        snap = json.loads(capsys.readouterr().out)
        jobs = [j for q in snap["queue"]["queues"].values() for j in q["jobs"]]
        ckpt = jobs[0].get("checkpoint") if jobs else None
        if ckpt and ckpt.get("save_s") is not None:
            break
        assert time.monotonic() < deadline, jobs
        time.sleep(0.3)
    assert ckpt["path"].endswith("ckpt-000000000400.pt") and ckpt["save_s"] > 0
    # MTBF 1000 h: W = sqrt(2 * 3.6e6 s * C) is hours; the checkpoint is seconds old.
    assert [f for f in _doctor(local_box, capsys)["findings"] if f["id"] == "principle 8"] == []
    # MTBF 0.36 s: W is well under a second; wait past it and the checkpoint is late.
    _hosts(local_box, 0.0001)
    time.sleep(1.5)
    (late,) = [f for f in _doctor(local_box, capsys)["findings"] if f["id"] == "principle 8"]
    assert late["severity"] == "warn" and "newest checkpoint" in late["title"]
    assert "Young/Daly interval" in late["seen"] and "save " in late["seen"]
