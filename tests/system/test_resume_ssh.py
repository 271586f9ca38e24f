"""Resumes checked over the real sshd: a relaunched job that restarts below the step its
previous attempt reached is a warning naming both steps. The job is a real process under the
real runner that behaves like a program without resume logic: the first run reaches step
2800 and fails, the rerun starts over and writes step 1800."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_money_ssh import Make, doctor, ids, money_box, queue, running, wait_for

from gpuroom.tui.config import load

__all__ = ["money_box"]  # the fixture, shared with the money tests

FROM_SCRATCH = ('cd "$GPUROOM_CKPT_DIR"; echo up; '
                'if [ -e ckpt-000000002800.pt ]; then printf b > ckpt-000000001800.pt; '
                'exec sleep 120; fi; printf a > ckpt-000000002800.pt; exit 1')


def test_a_rerun_that_restarts_below_the_previous_step_is_a_warning(
        money_box: Make, capsys: pytest.CaptureFixture[str]) -> None:
    config = money_box()
    job: str = queue(config, capsys, "add", "box", "--", "sh", "-c", FROM_SCRATCH)["job"]
    running(config, job, ("failed",))
    listed = queue(config, capsys, "ls", "box")["jobs"]
    ended = next(j for j in listed if j["id"] == job)["attempts"][-1]
    assert ended["checkpoint"]["path"].endswith("ckpt-000000002800.pt")
    assert [f for f in ids(doctor(config, capsys), "principle 8")
            if "restarted" in f["title"]] == []
    queue(config, capsys, "relaunch", "box", job)
    home = Path(load(config).hosts["box"].python).parent / "home"
    wait_for(lambda: any(home.glob("ckpt/default/*/ckpt-000000001800.pt")), "the rerun's save")
    running(config, job)
    (found,) = [f for f in ids(doctor(config, capsys), "principle 8") if "restarted" in f["title"]]
    assert found["severity"] == "warn" and "attempt 2 restarted below attempt 1" in found["title"]
    assert "step 1800" in found["seen"] and "step 2800" in found["seen"]
    queue(config, capsys, "kill", "box", job)
