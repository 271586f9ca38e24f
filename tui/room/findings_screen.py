"""The doctor's findings across the fleet (key d): what was seen, with numbers, and the fix."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from gpuroom.tui.present.banner import Danger
from gpuroom.tui.present.text import box_text
from gpuroom.tui.rules.clock import ClockItem
from gpuroom.tui.rules.doctor import Finding

SEVERITY_STYLE = {"critical": "bold red", "warn": "bold yellow", "info": "cyan"}


def findings_table(findings: Sequence[Finding], clocks: Sequence[ClockItem],
                   failed: Sequence[Danger] = ()) -> Table:
    table = Table(expand=True, show_lines=True)
    table.add_column("sev", no_wrap=True)
    table.add_column("host", no_wrap=True)
    table.add_column("id", no_wrap=True)
    table.add_column("what", ratio=3)
    table.add_column("fix", ratio=2)
    for f in findings:
        # Titles and "seen" quote kernel lines and remote errors: plain, stripped text.
        what = box_text(f.title, "bold")
        what.append("\n")
        what.append_text(box_text(f.seen))
        table.add_row(box_text(f.severity, SEVERITY_STYLE.get(f.severity, "")),
                      box_text(f.host), box_text(f.id), what, box_text(f.fix, "dim"))
    for c in clocks:
        table.add_row(box_text(c.severity, SEVERITY_STYLE.get(c.severity, "")),
                      box_text(c.host), box_text("clock"), box_text(c.text), box_text(c.kind))
    for d in failed:  # failed jobs no finding explains (the banner shows them too)
        table.add_row(box_text("critical", SEVERITY_STYLE["critical"]),
                      box_text(d.host), box_text("job"), box_text(d.text),
                      box_text("read the job's log (select it in the queue pane)", "dim"))
    if not findings and not clocks and not failed:
        table.add_row(*map(box_text, ("ok", "-", "-", "nothing wrong seen", "-")))
    return table


class FindingsScreen(ModalScreen[bool]):
    """Dismisses True when the user asks to clear remembered transitions."""

    DEFAULT_CSS = """
    FindingsScreen { align: center middle; }
    FindingsScreen > VerticalScroll {
        width: 100%; height: 100%; border: round $accent; padding: 0 1; background: $surface;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,d,q", "close", "Close"),
        Binding("c", "clear", "Clear remembered"),
    ]

    def __init__(self, findings: Sequence[Finding], clocks: Sequence[ClockItem],
                 failed: Sequence[Danger] = ()) -> None:
        super().__init__()
        self.findings = list(findings)
        self.clocks = list(clocks)
        self.failed = list(failed)

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Label(box_text(
                f"Doctor: {len(self.findings)} finding(s), {len(self.clocks)} clock(s), "
                f"{len(self.failed)} failed job(s)"
                "  (esc closes; c clears remembered job deaths once read)"))
            yield Static(findings_table(self.findings, self.clocks, self.failed))

    def action_close(self) -> None:
        self.dismiss(False)

    def action_clear(self) -> None:
        self.dismiss(True)
