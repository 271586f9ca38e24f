"""`gpuroom watch` with no terminal alerts as the room does: a job that died of CUDA OOM on
the real sshd box reaches a webhook on 127.0.0.1 (notify_url) as its U10 item, and watch
prints one line for it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from harness.monitorbox import add_job, queue_box, wait_job
from harness.webhook import webhook

from gpuroom.remote.queue_events import FINAL_STATES

OOM = "echo 'RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2; exit 1"
WAIT_S = 60.0


def _u10(bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [b for b in bodies if b["id"] == "U10"]


@pytest.mark.sshd
def test_watch_posts_a_dead_jobs_critical_item_with_no_terminal(
        sshd_box: Any, fixtures: Path, tmp_path: Path) -> None:
    with webhook() as hook, queue_box(sshd_box, fixtures, tmp_path,
                                      settings={"notify_url": hook.url}) as config:
        job = add_job(config, "sh", "-c", OOM)
        wait_job(config, job, lambda j: j.state in FINAL_STATES)
        env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
        with open(os.devnull, "rb") as devnull:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gpuroom.tui.cli.main", "--config", str(config),
                 "watch", "--duration", "30"], stdin=devnull, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
            try:
                deadline = time.monotonic() + WAIT_S
                while not _u10(hook.bodies) and time.monotonic() < deadline:
                    time.sleep(0.2)
                time.sleep(1.0)  # an alert sent twice would arrive by now
            finally:
                proc.terminate()
                out, err = proc.communicate(timeout=30)
    u10 = _u10(hook.bodies)
    assert len(u10) == 1, (hook.bodies, out, err)
    assert u10[0]["host"] == "box" and u10[0]["severity"] == "critical"
    assert f"job {job}" in u10[0]["text"] and "CUDA out of memory" in u10[0]["text"]
    lines = [line for line in out.splitlines() if "[U10]" in line]
    assert len(lines) == 1 and lines[0].startswith("CRITICAL box:"), out
    assert "Traceback" not in err
