"""The room's screen as plain text, the way a user reads it (pilot tests assert on it)."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console


def screen_text(app: Any) -> str:
    """Every character on screen, one line per row, modal screens over the room included."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True,
                      legacy_windows=False, safe_box=False, force_terminal=True)
    console.print(app.screen._compositor.render_update(
        full=True, screen_stack=app._background_screens))
    return console.export_text()
