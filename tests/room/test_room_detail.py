"""Issue 17 item 8 (the room's part): a command cut in the queue pane ends in "…" inside the
pane, and `i` shows the whole of it; on a host, `i` shows the whole error with its fix."""

from __future__ import annotations

import os
import time

from harness.room import screen_text
from test_app_pilot import make_app

from gpuroom.tui.model import LinkState
from gpuroom.tui.room.detail_screen import DetailScreen
from gpuroom.widgets.gpu import GpuPanel
from gpuroom.widgets.queue import QueueTable

os.environ["TZ"] = "UTC"
time.tzset()

LONG_FIX = ("check that the box is up and the alias is right; if it sits behind a ProxyJump, "
            "check the jump host first (ssh jump true), then the box (ssh rtx-b true)")


async def test_queue_commands_are_cut_with_a_mark_inside_the_pane() -> None:
    app, _ = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        queue = app.query_one(QueueTable)
        lines = screen_text(app).splitlines()
        # Below the pane's top border: its header line, then a line per job.
        header = lines[queue.region.y + 1]
        rows = lines[queue.region.y + 2: queue.region.y + 2 + len(queue.jobs)]
        at = header.index("command")
        for job, row in zip(queue.jobs, rows, strict=True):
            shown = row[at: queue.region.right].strip()
            # The last thing in the pane is the command's cut, marked; never the next pane's.
            assert shown.endswith("…") and job.command.startswith(shown[:-1]), rows


async def test_i_on_a_job_shows_its_whole_command() -> None:
    app, _ = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("tab", "i")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        job = app.query_one(QueueTable).selected_job
        assert job is not None
        assert ("command", job.command) in app.screen.rows
        assert job.command in " ".join(screen_text(app).split())
        await pilot.press("escape")
        assert not isinstance(app.screen, DetailScreen)


async def test_i_on_a_host_shows_the_whole_error_and_fix() -> None:
    app, fleet = make_app("stale")
    h = fleet.host("rtx-b")
    h.error = f"rtx-b: cannot connect to 'rtx-b' via jump host 'jump': timed out. Fix: {LONG_FIX}"
    h.next_try = app.clock() + 30
    assert h.state is LinkState.STALE
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("j", "enter", "i")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        rows = dict(app.screen.rows)
        assert rows["state"] == "STALE 3m00s"
        assert rows["error"] == "cannot connect to 'rtx-b' via jump host 'jump': timed out"
        assert rows["fix"] == LONG_FIX
        assert rows["next try"] == "in 30 s"
        # Whole on screen: wrapped inside the box's borders, never cut.
        flat = " ".join(screen_text(app).replace("│", " ").split())
        assert LONG_FIX in flat and "via jump host 'jump'" in flat


async def test_a_throttle_list_too_long_for_the_gpu_pane_is_cut_with_a_mark() -> None:
    app, _ = make_app("throttle")
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        gpu = app.query_one(GpuPanel)
        lines = screen_text(app).splitlines()
        row = next(ln[gpu.region.x: gpu.region.right] for ln in lines[gpu.region.y:]
                   if ln[gpu.region.x: gpu.region.right].split()[:1] == ["0"])
        shown = row.split()[-1]
        assert shown.endswith("…") and "HwSlow,PwrBrake".startswith(shown[:-1]), row
