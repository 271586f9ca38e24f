"""Waiting on the room's action workers, shared by the Pilot tests and the live-box room test,
and the room's screen as plain text."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from gpuroom.tui.room.app import GpuroomApp
from gpuroom.tui.room.gate_screen import GateScreen


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


def screen_text(app: GpuroomApp) -> str:
    """Every character on screen, one line per row, modal screens over the room included: what
    a user reads, for Pilot tests to assert on."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True,
                      legacy_windows=False, safe_box=False, force_terminal=True)
    console.print(app.screen._compositor.render_update(
        full=True, screen_stack=app._background_screens))
    return console.export_text()
