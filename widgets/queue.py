"""Queue pane: the jobs of the selected host, with actions still awaiting confirmation."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist

from gpuroom.tui.messages import JobSelected
from gpuroom.tui.view import JobRow, fmt_age

COMMAND_WIDTH = 40  # characters of the command shown; the rest is "…"
STATE_STYLE = {"running": "green", "launching": "green", "failed": "bold red",
               "orphaned": "bold red", "killed": "yellow", "queued": "cyan", "succeeded": "dim",
               "removed": "dim"}


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


class QueueTable(DataTable[Text]):
    """Jobs of one host: id, name, state, attempt, runtime, exit, command, checkpoint age."""

    DEFAULT_CSS = """
    QueueTable { height: 1fr; scrollbar-size-horizontal: 0; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]

    jobs: reactive[tuple[JobRow, ...]] = reactive((), always_update=True)
    """The selected host's jobs, pending actions included."""

    host: str = ""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row")

    def on_mount(self) -> None:
        self.add_columns("id", "name", "state", "try", "runtime", "exit", "command", "ckpt")

    def watch_jobs(self, jobs: tuple[JobRow, ...]) -> None:
        current = self.selected_job_id
        self.clear()
        for j in jobs:
            if j.pending:
                # Truthful: the box has not confirmed this yet (principle 3).
                state = Text(f"{j.pending}…", style="bold magenta")
            else:
                state = Text(j.state, style=STATE_STYLE.get(j.state.lower(), ""))
            self.add_row(
                Text(j.id),
                Text(j.name),
                state,
                Text("-" if j.attempt is None else str(j.attempt)),
                Text(fmt_age(j.runtime_s)),
                Text("-" if j.exit_code is None else str(j.exit_code)),
                Text(_cut(j.command, COMMAND_WIDTH)),
                Text(fmt_age(j.ckpt_age_s)),
                key=j.id,
            )
        ids = [j.id for j in jobs]
        if current in ids:
            self.move_cursor(row=ids.index(current), animate=False)

    @property
    def selected_job_id(self) -> str | None:
        if not self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        except CellDoesNotExist:  # cursor outside the (just cleared) table
            return None
        return None if key.value is None else str(key.value)

    @property
    def selected_job(self) -> JobRow | None:
        jid = self.selected_job_id
        return next((j for j in self.jobs if j.id == jid), None)

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.post_message(JobSelected(self.host, str(event.row_key.value)))
