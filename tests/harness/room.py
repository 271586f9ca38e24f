"""Waiting on the room's action workers, shared by the Pilot tests and the live-box room test,
and the room's screen as plain text."""

from __future__ import annotations

import io
import time
from typing import Any

from rich.console import Console

from gpuroom.tui.room.app import GpuroomApp
from gpuroom.tui.room.gate_screen import GateScreen
from gpuroom.widgets.queue import QueueTable


async def finish(app: GpuroomApp, group: str) -> None:
    """Wait for the action workers of ``group``; an empty list would wait for every worker,
    the fleet's endless one included."""
    workers = [w for w in app.workers if w.group == group]
    if workers:
        await app.workers.wait_for_complete(workers)


async def open_gate(app: GpuroomApp, pilot: Any) -> GateScreen:
    """Press T and wait for the gate check; the gate screen it opens."""
    await pilot.press("T")
    await finish(app, "gate")
    await pilot.pause()
    assert isinstance(app.screen, GateScreen)
    return app.screen


async def job_reaches(app: GpuroomApp, pilot: Any, job_id: str, state: str,
                      timeout_s: float = 60.0) -> None:
    """Let the live room poll until its queue pane shows ``job_id`` in ``state``."""
    deadline = time.monotonic() + timeout_s
    while True:
        await pilot.pause(0.3)
        states = {j.id: j.state for j in app.query_one(QueueTable).jobs}
        if states.get(job_id) == state:
            return
        assert time.monotonic() < deadline, states


def screen_text(app: GpuroomApp) -> str:
    """Every character on screen, one line per row, modal screens over the room included: what
    a user reads, for Pilot tests to assert on."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True,
                      legacy_windows=False, safe_box=False, force_terminal=True)
    console.print(app.screen._compositor.render_update(
        full=True, screen_stack=app._background_screens))
    return console.export_text()
