"""Hosts pane: one row per host, the fleet at a glance."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist

from gpuroom.tui.messages import HostSelected
from gpuroom.tui.view import HostRow, Level

LEVEL_STYLE: dict[Level, str] = {"ok": "", "warn": "bold yellow", "crit": "bold red"}
# Most telling first: at 80 columns the right-hand ones scroll off.
COLUMNS = ("host", "state", "GPUs", "SM MHz", "power W", "disk", "inode", "job", "profile",
           "billed", "find")
STATE_WIDTH = 28  # a DOWN reason is cut here; the banner and the log say the rest


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


class HostsTable(DataTable[Text]):
    """Hosts with link state, GPUs, worst disk/inode use and running job."""

    DEFAULT_CSS = """
    HostsTable { height: auto; max-height: 12; scrollbar-size-horizontal: 0; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]

    hosts: reactive[tuple[HostRow, ...]] = reactive((), always_update=True)
    """The hosts to show, already filtered and formatted."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False)

    def on_mount(self) -> None:
        for label in COLUMNS:
            self.add_column(label, key=label)

    def watch_hosts(self, rows: tuple[HostRow, ...]) -> None:
        current = self.highlighted_host
        self.clear()
        for r in rows:
            self.add_row(
                Text(r.name, style="bold"),
                Text(_cut(r.state, STATE_WIDTH), style=LEVEL_STYLE[r.level]),
                Text(r.gpus),
                Text(r.sm_clock),
                Text(r.power),
                Text(r.disk_pct, style=LEVEL_STYLE[r.disk_level]),
                Text(r.inode_pct, style=LEVEL_STYLE[r.inode_level]),
                Text(_cut(r.job, 16)),
                Text(r.profile),
                Text(r.billed),
                Text(r.findings),
                key=r.name,
            )
        names = [r.name for r in rows]
        if current in names:
            self.move_cursor(row=names.index(current), animate=False)

    @property
    def highlighted_host(self) -> str | None:
        if not self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        except CellDoesNotExist:  # cursor outside the (just cleared) table
            return None
        return None if key.value is None else str(key.value)

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.post_message(HostSelected(str(event.row_key.value)))
