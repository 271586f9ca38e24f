"""Hosts pane: one row per host, the fleet at a glance."""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable

from gpuroom.tui.present.format import fmt_cut
from gpuroom.tui.present.hosts import HostRow
from gpuroom.tui.present.levels import Level
from gpuroom.tui.present.text import box_text
from gpuroom.widgets.rowtable import RowTable

LEVEL_STYLE: dict[Level, str] = {"ok": "", "warn": "bold yellow", "crit": "bold red"}
# Most telling first: at 80 columns everything up to billed fits; the GPU readings (in the
# gpu pane too) and the profile scroll off to the right.
COLUMNS = ("host", "state", "find", "GPUs", "job", "disk", "inode", "billed", "cpu mem",
           "SM MHz", "power W", "profile")
STATE_WIDTH = 28


class HostsTable(RowTable):
    """Hosts with link state, GPUs, worst disk/inode use and running job."""

    DEFAULT_CSS = """
    HostsTable { height: auto; max-height: 12; scrollbar-size-horizontal: 0; }
    """

    @dataclass
    class Selected(Message):
        """The user picked a host (enter on its row)."""

        host: str

    hosts: reactive[tuple[HostRow, ...]] = reactive((), always_update=True)
    """The hosts to show, already filtered and formatted."""

    def on_mount(self) -> None:
        self.set_columns(COLUMNS)

    def watch_hosts(self, rows: tuple[HostRow, ...]) -> None:
        self.set_rows([(r.name, (
            box_text(r.name, style="bold"),
            # STALE and DOWN are short by construction (link_text: the reason is in the host's
            # panes and `i`); "UP, kernel+gpus failed" may not be, and is cut with "…".
            box_text(fmt_cut(r.state, STATE_WIDTH), style=LEVEL_STYLE[r.level]),
            box_text(r.findings, style=LEVEL_STYLE[r.findings_level]),
            box_text(r.gpus),
            box_text(fmt_cut(r.job, 16)),
            box_text(r.disk_pct, style=LEVEL_STYLE[r.disk_level]),
            box_text(r.inode_pct, style=LEVEL_STYLE[r.inode_level]),
            box_text(r.billed),
            box_text(r.box, style=LEVEL_STYLE[r.box_level]),
            box_text(r.sm_clock),
            box_text(r.power),
            box_text(r.profile),
        )) for r in rows])

    @property
    def highlighted_host(self) -> str | None:
        return self.highlighted_key

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.post_message(self.Selected(str(event.row_key.value)))
