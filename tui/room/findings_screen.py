"""The doctor's findings across the fleet (key d): what was seen, with numbers, and the fix."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from gpuroom.tui.present.banner import Danger
from gpuroom.tui.rules.clock import ClockItem
from gpuroom.tui.rules.doctor import Finding
from gpuroom.tui.sanitize import sanitize_line

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
        what = Text(sanitize_line(f.title), style="bold")
        what.append("\n" + sanitize_line(f.seen), style="")
        table.add_row(Text(f.severity, style=SEVERITY_STYLE.get(f.severity, "")),
                      Text(f.host), f.id, what, Text(f.fix, style="dim"))
    for c in clocks:
        table.add_row(Text(c.severity, style=SEVERITY_STYLE.get(c.severity, "")),
                      Text(c.host), "clock", Text(sanitize_line(c.text)), Text(c.kind))
    for d in failed:  # failed jobs no finding explains (the banner shows them too)
        table.add_row(Text("critical", style=SEVERITY_STYLE["critical"]),
                      Text(sanitize_line(d.host)), "job",
                      Text(sanitize_line(d.text)),
                      Text("read the job's log (select it in the queue pane)", style="dim"))
    if not findings and not clocks and not failed:
        table.add_row("ok", "-", "-", "nothing wrong seen", "-")
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
            yield Label(f"Doctor: {len(self.findings)} finding(s), {len(self.clocks)} clock(s), "
                        f"{len(self.failed)} failed job(s)"
                        "  (esc closes; c clears remembered job deaths once read)",
                        markup=False)
            yield Static(findings_table(self.findings, self.clocks, self.failed))

    def action_close(self) -> None:
        self.dismiss(False)

    def action_clear(self) -> None:
        self.dismiss(True)
