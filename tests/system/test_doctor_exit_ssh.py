"""`gpuroom doctor` for cron over the real sshd: its exit code says how urgent (0 nothing, 1
warnings, 2 critical), an ended job's log tail is read for the log rules (U10 CUDA OOM, U35),
and `--ack HOST/JOB` acknowledges a job's death in the jump host's state dir."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.monitorbox import add_job, queue_box, wait_job

from gpuroom.remote.queue_events import FINAL_STATES
from gpuroom.tui.cli.main import main

OOM = ("echo step 1; echo 'RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB "
       "(GPU 0; 23.69 GiB total capacity)' >&2; exit 1")
TRACKER_OFF = "echo 'wandb: Tracking run with wandb disabled.'; echo done"


@pytest.fixture
def box(sshd_box: Any, fixtures: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    with queue_box(sshd_box, fixtures, tmp_path) as config:
        yield config


def doctor(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    rc = main(["--config", str(config), "doctor", "--json"])
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return rc, doc


@pytest.mark.sshd
def test_a_job_dead_of_cuda_oom_is_u10_and_exit_2_until_acknowledged(
        box: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = add_job(box, "sh", "-c", OOM)
    wait_job(box, job, lambda j: j.state in FINAL_STATES)
    rc, doc = doctor(box, capsys)
    assert set(doc) == {"hosts", "findings", "clocks", "failed_jobs", "banner"}
    (u10,) = [f for f in doc["findings"] if f["id"] == "U10"]
    assert u10["severity"] == "critical" and u10["host"] == "box"
    assert f"job {job}" in u10["title"] and "CUDA out of memory" in u10["seen"]
    assert rc == 2
    # Acknowledged from the CLI: recorded on this machine, the next run is quiet.
    assert main(["--config", str(box), "doctor", "--ack", f"box/{job}"]) == 0
    assert f"box/{job}" in capsys.readouterr().out
    rc, doc = doctor(box, capsys)
    assert [f for f in doc["findings"] if f["id"] == "U10"] == []
    assert doc["failed_jobs"] == []
    assert rc == 0, doc
    # A warning only (a tracker that records nothing, said by the log of a job that
    # succeeded) exits 1.
    quiet = add_job(box, "sh", "-c", TRACKER_OFF)
    wait_job(box, quiet, lambda j: j.state in FINAL_STATES)
    rc, doc = doctor(box, capsys)
    assert [f["severity"] for f in doc["findings"] if f["id"] == "U35"] == ["warn"]
    assert rc == 1, doc


@pytest.mark.sshd
def test_acking_a_job_the_box_does_not_have_is_refused(
        box: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(box), "doctor", "--ack", "box/j999"]) == 2
    err = capsys.readouterr().err
    assert "j999" in err and "gpuroom queue ls box" in err
