"""Key `i`: the whole of what a pane had to cut, as label / text rows that wrap, never cut.

Rows come from tui/present/detail.py (host_detail, job_detail); any list of rows works, so
a fuller job detail later is more rows, not another screen (the help screen is one too).
"""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from gpuroom.tui.present.detail import Rows
from gpuroom.tui.present.text import box_text


class DetailScreen(ModalScreen[None]):
    """One subject's rows; esc, i or q closes."""

    DEFAULT_CSS = """
    DetailScreen { align: center middle; }
    DetailScreen > VerticalScroll {
        width: 100; max-width: 100%; height: auto; max-height: 100%;
        border: round $accent; padding: 0 1; background: $surface;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,i,q", "close", "Close"),
    ]

    def __init__(self, title: str, rows: Rows, *, closes: str = "esc closes") -> None:
        super().__init__()
        self.title_text = title
        self.rows = rows
        self.closes = closes

    def _table(self) -> Table:
        table = Table(box=None, show_header=False, padding=(0, 2, 0, 0), expand=True)
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column(overflow="fold")  # a long command or error wraps, whole
        for label, text in self.rows:
            # The box's words (an error, a command): never markup, no escapes.
            table.add_row(box_text(label), box_text(text, limit=None))  # whole: it wraps
        return table

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(box_text(f"{self.title_text}  ({self.closes})", "bold"))
            yield Static(self._table(), id="rows")

    def show_rows(self, rows: Rows) -> None:
        """Replace the rows (an answer that arrived after the screen opened)."""
        self.rows = rows
        self.query_one("#rows", Static).update(self._table())

    def action_close(self) -> None:
        self.dismiss(None)
