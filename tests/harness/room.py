"""Waiting on the room's action workers, shared by the Pilot tests and the live-box room test."""

from __future__ import annotations

from typing import Any

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
