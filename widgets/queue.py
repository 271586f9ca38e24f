"""Queue pane: the jobs of the selected host, with actions still awaiting confirmation."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable

from gpuroom.tui.present.format import fmt_age, fmt_cut
from gpuroom.tui.present.jobs import STATE_STYLE, JobRow
from gpuroom.widgets.rowtable import RowTable

COMMAND_WIDTH = 40  # characters of the command shown; the rest is "…"
SLURM_WIDTH = 36
STATE_WIDTH = 40  # a queued job's state says why it waits; the rest is "…"
COLUMNS = ("id", "name", "state", "try", "runtime", "exit", "command", "ckpt")


class QueueTable(RowTable):
    """Jobs of one host: id, name, state, attempt, runtime, exit, command, checkpoint age;
    on a Slurm host also the Slurm id, state, pending reason and walltime left."""

    DEFAULT_CSS = """
    QueueTable { height: 1fr; scrollbar-size-horizontal: 0; }
    """

    @dataclass
    class Selected(Message):
        """The cursor moved to a job of ``host``."""

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
        rows = []
        for j in jobs:
            if j.pending:
                # Truthful: the box has not confirmed this yet (principle 3).
                state = Text(f"{j.pending}…", style="bold magenta")
            else:
                state = Text(fmt_cut(j.state_text, STATE_WIDTH),
                             style=STATE_STYLE.get(j.state, ""))
            cells = [
                Text(j.id),
                Text(j.name),
                state,
                Text("-" if j.attempt is None else str(j.attempt)),
                Text(fmt_age(j.runtime_s)),
                Text(j.ended_by),
                Text(fmt_cut(j.command, COMMAND_WIDTH)),
                Text(fmt_age(j.ckpt_age_s)),
            ]
            if slurm:
                # Slurm's reason text comes from the box: plain Text, never markup.
                cells.insert(3, Text(fmt_cut(j.slurm, SLURM_WIDTH)))
            rows.append((j.id, tuple(cells)))
        self.set_rows(rows)

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
