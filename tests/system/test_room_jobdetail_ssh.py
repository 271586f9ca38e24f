"""Enter on a job in the room against the real box over the test sshd (issue 20 item 1): the
room asks the box's helper (`queue show`) through the fleet and shows the job in full, with
the same rows `gpuroom queue show` prints; env values never reach the screen, box text is
inert. The Pilot tests without a box are in tests/room/test_room_jobdetail.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from harness.room import job_reaches, screen_text

from gpuroom.tui import config as cfg
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.tui.room.jobdetail_screen import JobDetailScreen
from gpuroom.tui.snapshot import load_answer
from gpuroom.widgets.queue import QueueTable

# Writes a checkpoint named for its step, then exits 3: an attempt with an exit code.
JOB = ("import os;d=os.environ['GPUROOM_CKPT_DIR'];"
       "open(os.path.join(d,'step_1200.pt'),'wb').write(b'c'*4096);raise SystemExit(3)")
EVIL = "x\x1b]52;c;ZXZpbA==\x07\x1b[2J[bold red]y[/]"


@pytest.mark.sshd
@pytest.mark.attack("hostile text", "a job name carrying OSC 52, CSI 2J and markup, shown in "
                    "the room's job detail (enter) read from the real box")
async def test_enter_shows_the_real_jobs_detail_from_the_box(
        sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    path = tmp_path / "hosts.toml"
    path.write_bytes(tomli_w.dumps({
        "settings": {"ssh_config": str(sshd_box.ssh_config), "poll_interval_s": 0.5},
        "hosts": {"box": {"ssh": sshd_box.alias}}}).encode())
    fleet = Fleet(cfg.load(path))
    app = GpuroomApp(fleet)
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            added = await fleet.link("box").helper(
                "queue", "add", "--env", "HF_TOKEN=hf_s3cret", f"--name={EVIL}", "--gpus", "0",
                "--", "python3", "-c", JOB)
            assert added.rc == 0, added.stderr
            jid = str(load_answer(added.stdout)["job"])
            await job_reaches(app, pilot, jid, "failed")
            await pilot.press("tab")
            assert app.query_one(QueueTable).selected_job_id == jid
            await pilot.press("enter")
            screen = app.screen
            assert isinstance(screen, JobDetailScreen)
            deadline = time.monotonic() + 30
            while not screen.answered:
                await pilot.pause(0.1)
                assert time.monotonic() < deadline
            await pilot.pause()
            rows = dict(screen.rows)
            assert "error" not in rows, rows
            assert rows["job"] == f"box/{jid} (x[bold red]y[/])"
            assert rows["state"] == "failed"
            assert rows["command"].startswith("python3 -c ")
            assert rows["env"] == "HF_TOKEN (values hidden)"
            assert rows["attempts"] == "1"
            assert ", exit 3, " in rows["  attempt 1"]
            assert rows["newest checkpoint"].startswith(f"{rows['checkpoint dir']}/step_1200.pt "
                                                        "(step 1200, ")
            assert rows["newest checkpoint"].endswith(", 4.0KiB, gpuroom's)")  # where found
            assert rows["log"].endswith(f"/logs/{jid}.log")
            text = screen_text(app)
            assert "hf_s3cret" not in text and "x[bold red]y[/]" in text
            assert all("\x1b" not in t and "\x07" not in t for _, t in screen.rows)
            await pilot.press("escape")
            assert not isinstance(app.screen, JobDetailScreen)
    finally:
        sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")
