"""Log pane: the tail of the selected job's log, sanitized, bounded, following."""

from __future__ import annotations

from typing import ClassVar

from rich.cells import cell_len
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.widgets import Log

from gpuroom.tui.present.log import LineSplitter, LogChunk, LogCursor, advance_log

MAX_LINES = 10_000  # ring of lines kept; older ones drop off the top


class LogTail(Log):
    """Ring of the last 10k display lines of one job's log. Text arrives already as bytes
    from snapshots; only sanitized lines (tui/sanitize.py) are ever written."""

    DEFAULT_CSS = """
    LogTail { height: 1fr; border-title-color: $text-muted; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "scroll_down", "Down", show=False),
        Binding("k", "scroll_up", "Up", show=False),
    ]

    follow: reactive[bool] = reactive(True)
    """Scroll to each new line (f toggles)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(max_lines=MAX_LINES, auto_scroll=True, id=id)
        self.cursor: LogCursor | None = None
        self._splitter = LineSplitter()
        self.source = ""

    def watch_follow(self, follow: bool) -> None:
        self.auto_scroll = follow
        self._title()
        if follow:
            self.scroll_end(animate=False)

    def _title(self) -> None:
        mode = "follow" if self.follow else "PAUSED"
        # Text, not markup: the job id comes from the box.
        self.border_title = Text(f"log {self.source} ({mode})" if self.source else f"log ({mode})")

    def show(self, source: str) -> None:
        """Switch to another job (or none): the pane starts empty for it."""
        if source == self.source:
            return
        self.source = source
        self.cursor = None
        self._splitter.reset()
        self.clear()
        self._title()

    def _update_size(self, updates: int, lines: list[str]) -> None:  # type: ignore[override]
        # Log measures the widest new line in a thread worker, through a regex and cell_len
        # per line: 10k lines a chunk held the GIL against the event loop for tens of ms.
        # Lines here are already sanitized, so their width is their length unless non-ASCII.
        if lines:
            width = max(len(line) if line.isascii() else cell_len(line) for line in lines)
            self._update_maximum_width(updates, width)

    def append_chunk(self, chunk: LogChunk) -> int:
        """Write what is new in ``chunk``; return the number of lines written."""
        data, fresh, skipped, self.cursor = advance_log(self.cursor, chunk)
        if fresh:
            self._splitter.reset()
            self.clear()
        lines = []
        if skipped:
            self._splitter.reset()
            lines.append(f"[… {skipped} bytes not fetched …]")
        # A chunk of more lines than the ring holds: only its last MAX_LINES are decoded,
        # sanitized and written, the rest would be pruned unseen (a 50 MB/s flood stays cheap).
        lines += self._splitter.feed(data, keep=MAX_LINES)
        # The job's current line: shown now, completed by a later chunk's first line.
        if lines:
            # One write for the whole batch: a fast log costs one refresh per snapshot.
            self.write_lines([line.expandtabs(8) for line in lines])
        return len(lines)
