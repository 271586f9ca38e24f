"""Markup in a path the box reports reaches the room's panes as text (issue 18, hostile text).

Found by tests/system/test_hostile_text.py: the disk pane shows a mount named
``ev[@click=app.quit]x`` as ``evx``: the path went through Rich markup, which made it a
clickable quit action, and a ``[/]`` in it would raise while drawing.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from gpuroom.tui.present.disks import DiskRow
from gpuroom.widgets.disk import DiskPanel


def drawn(rows: tuple[DiskRow, ...]) -> str:
    panel = DiskPanel()
    panel.disks = rows
    console = Console(width=100, record=True, color_system=None, file=io.StringIO())
    console.print(panel.render())
    return console.export_text()


@pytest.mark.attack("hostile text", "Rich markup ([red]…[/red], [@click=…], a lone [/]) in a "
                    "mount path the box reports: shown as text in the disk pane")
@pytest.mark.parametrize("path", ["[red]r[/red]", "[@click=app.quit]q", "x[/]"])
@pytest.mark.parametrize("error", [None, "gone"])
def test_a_mount_path_is_shown_as_text_not_markup(path: str, error: str | None) -> None:
    row = DiskRow(path, error, 1e9, 5e8, 5e8, 50.0, 1e6, 5e5, 5e5, 50.0)
    assert path in drawn((row,))
