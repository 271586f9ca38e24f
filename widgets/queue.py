"""Queue pane: the jobs of the selected host, with actions still awaiting confirmation."""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable

from gpuroom.tui.present.format import fmt_age, fmt_cut
from gpuroom.tui.present.jobs import STATE_STYLE, JobRow
from gpuroom.tui.present.text import box_text
from gpuroom.widgets.rowtable import RowTable

COMMAND_WIDTH = 40  # characters of the command shown at most; the rest is "…"
MIN_COMMAND_WIDTH = 4  # "pyt…": below this the command scrolls off rather than say nothing
# Below this much room for the command, the ckpt cell gives way (JobRow.ckpt_short): which
# command a row runs says more than when its checkpoint came home.
COMMAND_PRIORITY_WIDTH = 24
SLURM_WIDTH = 36
STATE_WIDTH = 40  # a queued job's state says why it waits; the rest is "…"
# The command last: it takes what the pane has left and its cut ends in "…" at the edge.
COLUMNS = ("id", "name", "state", "try", "runtime", "exit", "ckpt", "command")


class QueueTable(RowTable):
    """Jobs of one host: id, name, state, attempt, runtime, exit, checkpoint age, command;
    on a Slurm host also the Slurm id, state, pending reason and walltime left."""

    DEFAULT_CSS = """
    QueueTable { height: 1fr; scrollbar-size-horizontal: 0; }
    """

    @dataclass
    class Selected(Message):
        """The cursor moved to a job of ``host``."""

        host: str
        job_id: str

    @dataclass
    class Opened(Message):
        """Enter on a job of ``host``: show it in full."""

        host: str
        job_id: str

    jobs: reactive[tuple[JobRow, ...]] = reactive((), always_update=True)
    """The selected host's jobs, pending actions included."""

    host: str = ""

    def on_mount(self) -> None:
        self.set_columns(COLUMNS)

    def watch_jobs(self, jobs: tuple[JobRow, ...]) -> None:
        slurm = any(j.slurm for j in jobs)
        self.set_columns((*COLUMNS[:3], "slurm", *COLUMNS[3:]) if slurm else COLUMNS)
        short = self._command_width(jobs, short=False) < COMMAND_PRIORITY_WIDTH
        width = self._command_width(jobs, short=short)
        rows = []
        for j in jobs:
            # A pending action is truthful: the box has not confirmed it yet (principle 3).
            state = box_text(_state_cell(j), "bold magenta" if j.pending
                             else STATE_STYLE.get(j.state, ""))
            cells = [
                box_text(j.id),
                box_text(j.name_text),
                state,
                box_text("-" if j.attempt is None else str(j.attempt)),
                box_text(fmt_age(j.runtime_s)),
                box_text(j.ended_by),
                box_text(j.ckpt_short if short else j.ckpt_text),
                box_text(fmt_cut(j.command, width)),
            ]
            if slurm:
                # Slurm's reason text comes from the box, like every cell: never markup.
                cells.insert(3, box_text(fmt_cut(j.slurm, SLURM_WIDTH)))
            rows.append((j.id, tuple(cells)))
        self.set_rows(rows)

    def _command_width(self, jobs: tuple[JobRow, ...], *, short: bool) -> int:
        """What is left of the pane for the command once the other cells are drawn, so its
        cut ends in "…" inside the pane instead of running under the next one; `i` shows
        the whole command. ``short``: with the narrow ckpt cells."""
        if not self.size.width:
            return COMMAND_WIDTH
        cells = [{"id": j.id, "name": j.name_text, "state": _state_cell(j),
                  "try": str(j.attempt), "runtime": fmt_age(j.runtime_s), "exit": j.ended_by,
                  "ckpt": j.ckpt_short if short else j.ckpt_text,
                  "slurm": fmt_cut(j.slurm, SLURM_WIDTH)}
                 for j in jobs]
        others = sum(max([len(label), *(len(c.get(label, "")) for c in cells)])
                     + 2 * self.cell_padding for label in self._labels if label != "command")
        room = self.size.width - others - 2 * self.cell_padding - self.scrollbar_size_vertical
        return max(MIN_COMMAND_WIDTH, min(COMMAND_WIDTH, room))

    def on_resize(self) -> None:
        self.jobs = self.jobs  # re-cut the commands to the new width

    @property
    def selected_job_id(self) -> str | None:
        return self.highlighted_key

    @property
    def selected_job(self) -> JobRow | None:
        jid = self.selected_job_id
        return next((j for j in self.jobs if j.id == jid), None)

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.post_message(self.Selected(self.host, str(event.row_key.value)))

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.post_message(self.Opened(self.host, str(event.row_key.value)))


def _state_cell(j: JobRow) -> str:
    """The state column's text: a pending action, else the box's state (with why it waits)."""
    return f"{j.pending}…" if j.pending else fmt_cut(j.state_text, STATE_WIDTH)
