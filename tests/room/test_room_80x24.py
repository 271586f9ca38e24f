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
