"""Issue 20 item 1 in the room: enter on a job in the queue pane shows the job in full, as
`gpuroom queue show` says it (the same rows, tui/present/jobdetail.py), asked of the box
through the fleet; box text inert; esc closes; listed in ? and the palette."""

from __future__ import annotations

import os
import time

from harness.room import screen_text
from test_app_pilot import RecordingFleet, make_app

from gpuroom.tui.room.app import GpuroomApp, GpuroomCommands
from gpuroom.tui.room.detail_screen import DetailScreen
from gpuroom.tui.room.jobdetail_screen import JobDetailScreen
from gpuroom.tui.room.screens import HelpScreen
from gpuroom.tui.snapshot import Job, read_queue_view
from gpuroom.widgets.queue import QueueTable

os.environ["TZ"] = "UTC"
time.tzset()

OSC52 = "\x1b]52;c;ZXZpbA==\x07"
CLEAR = "\x1b[2J"
MARKUP = "[bold red]x[/]"
EVIL = f"{OSC52}{CLEAR}{MARKUP}"


NOW = 1_795_294_606.0  # the room's clock here; the checkpoint was written a minute before


def shown_job(job_id: str) -> Job:
    """What the box's `queue show` answers for ``job_id``: hostile words everywhere it may
    write, a token in the env, two attempts and a newest checkpoint."""
    return read_queue_view({"queue": "default", "ok": True, "jobs": [{
        "id": job_id, "name": f"sweep{EVIL}", "state": "running",
        "argv": ["python", "train.py", f"--tag={EVIL}"], "cwd": "/work/proj",
        "env": {"HF_TOKEN": "hf_s3cret", "LR": "3e-4"}, "gpus": 2, "priority": 3,
        "after": ["j1"], "log": "/q/logs/j3.log", "ckpt_dir": "/ckpt/j3",
        "checkpoint": {"path": "/ckpt/j3/step_1200.pt", "size": 3 << 20, "mtime": NOW - 60},
        "attempts": [
            {"attempt": 1, "start": 0.0, "end": 65.0, "exit_code": None, "signal": "SIGKILL",
             "duration": 65.0, "end_reason": f"oom {EVIL}", "gpus": [0, 1]},
            {"attempt": 2, "start": 70.0, "gpus": [0, 1]},
        ]}]}).jobs[0]


class ShowFleet(RecordingFleet):
    """A fleet whose box answers `queue show` (or fails to, with ``fail_with``)."""

    async def queue_show(self, host: str, job_id: str, queue: str = "default") -> Job:
        self.calls.append(("show", host, job_id, queue))
        self._maybe_fail()
        return shown_job(job_id)


def make(name: str = "healthy") -> tuple[GpuroomApp, ShowFleet]:
    fleet, _ = ShowFleet.load(name)
    return GpuroomApp(fleet, clock=lambda: NOW), fleet


async def answered(app: GpuroomApp) -> JobDetailScreen:
    screen = app.screen
    assert isinstance(screen, JobDetailScreen), type(screen)
    loading = [w for w in app.workers if w.group == "jobdetail"]
    if loading:  # an empty list would mean "all", the fleet's endless worker included
        await app.workers.wait_for_complete(loading)
    assert screen.answered
    return screen


async def test_enter_on_a_job_shows_what_queue_show_says_inert_and_esc_closes() -> None:
    app, fleet = make()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("tab")  # the queue pane; its cursor is on the running job
        job = app.query_one(QueueTable).selected_job
        assert job is not None and job.id == "j3"
        await pilot.press("enter")
        screen = await answered(app)
        await pilot.pause()
        assert fleet.calls == [("show", "h100-a", "j3", "default")]
        rows = dict(screen.rows)
        assert rows["command"] == "python train.py '--tag=[bold red]x[/]'"
        assert rows["cwd"] == "/work/proj"
        assert rows["env"] == "HF_TOKEN, LR (values hidden)"
        assert rows["GPUs"] == "asked 2, given 0,1"
        assert rows["after"] == "j1" and rows["priority"] == "3"
        assert rows["attempts"] == "2"
        assert rows["  attempt 1"].startswith("1970-01-01 00:00:00 -> 00:01:05 UTC (1m), "
                                              "signal SIGKILL")
        assert rows["  attempt 2"].startswith("1970-01-01 00:01:10 UTC -> running")
        assert rows["newest checkpoint"] == "/ckpt/j3/step_1200.pt (step 1200, 1m old, 3.0MiB)"
        assert rows["log"] == "/q/logs/j3.log"
        text = screen_text(app)
        assert "hf_s3cret" not in text and "3e-4" not in text
        assert "\x1b" not in "".join(t for _, t in screen.rows)
        # The box's markup is words on screen, never a style.
        assert MARKUP in text and "/ckpt/j3/step_1200.pt" in text
        await pilot.press("escape")
        assert not isinstance(app.screen, DetailScreen)
        assert app.query_one(QueueTable).has_focus


async def test_enter_on_the_hosts_pane_still_selects_the_host() -> None:
    app, fleet = make()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("j", "enter")
        await pilot.pause()
        assert app.selected_host == "rtx-b"
        assert not isinstance(app.screen, DetailScreen) and fleet.calls == []


async def test_a_failed_show_says_why_and_the_fix() -> None:
    app, fleet = make()
    fleet.fail_with = "h100-a: queue show failed (exit 255)"
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("tab", "enter")
        screen = await answered(app)
        rows = dict(screen.rows)
        assert rows["error"] == ("queue show on h100-a failed: "
                                 "h100-a: queue show failed (exit 255)")


async def test_the_palette_and_help_list_job_detail_with_its_key() -> None:
    app, fleet = make()
    async with app.run_test(size=(120, 40)) as pilot:
        hits = {str(h.display): h.help async for h in GpuroomCommands(app.screen).discover()}
        (label,) = [d for d in hits if d.startswith("job detail")]
        assert hits[label] == "key: enter"
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert ("enter", label) in app.screen.rows
        await pilot.press("escape")
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"job detail")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await answered(app)
        assert fleet.calls == [("show", "h100-a", "j3", "default")]


async def test_a_recording_shows_the_job_as_recorded() -> None:
    app, _ = make_app("failed")  # a plain StaticFleet: no box to ask
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("tab")
        job = app.query_one(QueueTable).selected_job
        assert job is not None
        await pilot.press("enter")
        screen = await answered(app)
        rows = dict(screen.rows)
        assert rows["job"].startswith(f"h100-a/{job.id}") and rows["state"] == job.state
        assert "error" not in rows and rows["command"] == job.command


async def test_enter_shows_the_lineage_the_i_detail_shows() -> None:
    app, fleet = make()
    [host] = [h for h in fleet.hosts() if h.name == "h100-a"]
    host.moves = {"j3": "from rtx/j7"}  # as the fleet sets it from moves.json
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("tab")
        await pilot.press("i")
        detail = app.screen
        assert isinstance(detail, DetailScreen) and ("moved", "from rtx/j7") in detail.rows
        await pilot.press("escape")
        await pilot.press("enter")
        screen = await answered(app)
        assert ("moved", "from rtx/j7") in screen.rows
