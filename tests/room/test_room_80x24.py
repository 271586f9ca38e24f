"""Issue 17 item 13: at 80x24 every pane's essentials are on screen: banner items stay one
line each with their gotcha id and "+N more", the hosts table keeps job, billed and findings,
and one line at the bottom still names every key group."""

from __future__ import annotations

import os
import time

import pytest
from harness.room import screen_text
from test_app_pilot import make_app

from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.present.banner import Danger, banner_line
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.tui.room.screens import KEYS, key_label
from gpuroom.widgets.banner import DangerBanner

os.environ["TZ"] = "UTC"
time.tzset()

LONG = ("CRITICAL h100-a: job default/j5 (finetune-with-a-long-name) died: cgroup OOM-kill "
        "while writing its checkpoint [U9]")


def test_banner_line_keeps_the_gotcha_id() -> None:
    cut = banner_line(LONG, 60)
    assert len(cut) == 60 and cut.endswith("… [U9]"), cut
    assert banner_line("short [U9]", 60) == "short [U9]"
    assert banner_line("x" * 70, 60) == "x" * 59 + "…"


async def test_80x24_banner_hosts_and_keys() -> None:
    app, _ = make_app("stale")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.query_one(DangerBanner).items = (
            Danger("crit", "h100-a", LONG),
            *(Danger("warn", "rtx-b", f"WARN rtx-b: finding number {n} with words [GEN8]")
              for n in range(4)),
        )
        await pilot.pause()
        lines = screen_text(app).splitlines()
        banner = lines[:3]
        assert banner[0].rstrip().endswith("… [U9]"), banner
        assert banner[2].rstrip().endswith("[GEN8]   (+2 more)"), banner
        assert lines[3].split()[:3] == ["host", "state", "find"], lines[3]
        header = lines[3].split()
        for column in ("job", "billed", "find", "disk", "inode", "GPUs"):
            assert column in header, lines[3]
        hint = lines[-1]
        for k in KEYS:
            if k.short:
                assert key_label(k.key) in hint.split(), (k.key, hint)
        for group in ("job", "host", "doctor", "quit"):
            assert group in hint.split(), hint


@pytest.mark.parametrize("width", [80, 100, 120, 129, 130, 160])
async def test_every_key_is_on_the_bottom_line_at_any_width(width: int) -> None:
    # At 120 columns Textual's footer had run out before "q quit".
    app, _ = make_app()
    async with app.run_test(size=(width, 36)) as pilot:
        await pilot.pause()
        bottom = screen_text(app).splitlines()[-1].split()
        for k in KEYS:
            if k.short:
                assert key_label(k.key) in bottom, (width, k.key, bottom)
        assert "quit" in bottom, bottom



async def test_one_long_banner_item_takes_one_line() -> None:
    # The doctor's GEN8 line for a DOWN host, there from the first frame: measured before the
    # banner knew its width, it took two rows, the second blank.
    host = HostState(name="far", state=LinkState.DOWN, error="far: refused", last_try=1e9,
                     last_ok=1e9 - 400)
    app = GpuroomApp(StaticFleet([host]), clock=lambda: 1e9)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        lines = screen_text(app).splitlines()
        assert lines[0].rstrip().endswith("[GEN8]") and lines[1].split()[0] == "host", lines[:3]


async def test_80x24_queue_gives_the_command_the_room_a_long_ckpt_cell_took() -> None:
    """A job with a checkpoint home had "35s (ckpt step 12000 home, 2m)" in its ckpt cell,
    28 columns, and the command column shrank to 3 characters."""
    import dataclasses

    from gpuroom.widgets.queue import QueueTable

    app, _ = make_app("healthy")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        queue = app.query_one(QueueTable)
        queue.jobs = tuple(dataclasses.replace(j, home_step=12000, home_age_s=130.0)
                           for j in queue.jobs)
        await pilot.pause()
        lines = screen_text(app).splitlines()
        header = next(n for n, line in enumerate(lines) if line.split()[:2] == ["id", "name"])
        assert lines[header].rstrip().endswith("command"), lines[header]
        running = next(line for line in lines[header:] if " llama-1b " in line)
        assert "35s (12000 home)" in running, running
        command = running[lines[header].index("command"):].strip()
        assert command.startswith("python3 trai") and len(command) >= 12, running


async def test_80x24_the_log_pane_cuts_no_error_line() -> None:
    """The one line saying why the job died was cut at the log pane's edge: "CUDA out of
    memo". Below the panes it is shown in full; where the pane is wide enough, not twice."""
    from test_log_pane import FAILED, _app, _raw_chunk

    from gpuroom.widgets.errorline import LastErrorLine

    error = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 "
             "has a total capacity of 79.15 GiB of which 1.02 GiB is free.")
    data = ("step 20 loss 2.29\nTraceback (most recent call last):\n  File \"train.py\", line "
            f"61, in main\n    loss = model(batch).loss\n{error}\n").encode()
    for size, shown in (((80, 24), True), ((260, 60), False)):
        app, fleet = _app()
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            fleet.with_chunk(FAILED, _raw_chunk(0, data, len(data)))
            for _ in range(3):
                await pilot.pause()
            pane = app.query_one(LastErrorLine)
            assert pane.display is shown, size
            text = " ".join(screen_text(app).split())
            assert ("1.02 GiB is free." in text) is True, (size, text)
            if shown:
                assert pane.line == f"h100-a/{FAILED}: {error}"
