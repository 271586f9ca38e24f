"""Under the log and disk panes: the log's last error line in full, wrapped, when the log pane
is too narrow to show it (the app decides which line, tui/present/log.py)."""

from __future__ import annotations

from rich.console import RenderableType
from textual.reactive import reactive
from textual.widget import Widget

from gpuroom.tui.present.text import box_text


class LastErrorLine(Widget):
    """One log line the pane cuts, in full; hidden when there is none."""

    DEFAULT_CSS = """
    LastErrorLine { dock: bottom; height: auto; max-height: 3; padding: 0 1;
                    background: $error 20%; display: none; }
    LastErrorLine.-shown { display: block; }
    """

    line: reactive[str] = reactive("", layout=True)
    """The error line (already inert: the log pane's own sanitized text); "" hides it."""

    def watch_line(self, line: str) -> None:
        self.set_class(bool(line), "-shown")

    def render(self) -> RenderableType:
        return box_text(self.line)  # never markup: the line is what the job printed
