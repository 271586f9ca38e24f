"""The teardown gate in the room (key T): the checklist, and the user's own teardown command
offered only when every item holds and only after the host's name is typed (principle 9)."""

from __future__ import annotations

import shlex
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from gpuroom.tui.present.text import box_lines, box_text
from gpuroom.tui.rules.gate import GateResult


def checklist(result: GateResult) -> Table:
    table = Table(box=None, show_header=False, padding=(0, 1, 0, 0))
    table.add_column(no_wrap=True)
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for item in result.items:
        mark = Text("[x]", style="green") if item.ok else Text("[ ]", style="bold red")
        # Details carry file names from the box: never markup, no escapes.
        table.add_row(mark, box_text(item.name), box_text(item.detail))
    return table


class GateScreen(ModalScreen[bool]):
    """Dismisses True only when the gate is safe, a teardown command exists and the user
    typed the host's name; gpuroom itself never stops anything."""

    DEFAULT_CSS = """
    GateScreen { align: center middle; }
    GateScreen > Vertical {
        width: 96; max-width: 100%; height: auto; max-height: 100%;
        border: round $accent; padding: 0 1; background: $surface;
    }
    GateScreen #verdict.-safe { color: $success; text-style: bold; }
    GateScreen #verdict.-unsafe { color: $error; text-style: bold; }
    GateScreen #error { color: $error; height: auto; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close")]

    def __init__(self, result: GateResult, teardown: list[str] | None) -> None:
        super().__init__()
        self.result = result
        self.teardown = teardown

    def compose(self) -> ComposeResult:
        host = self.result.host
        safe = self.result.safe
        with Vertical():
            yield Label(box_text(f"Teardown gate: {host}  (esc closes)"))
            yield Static(checklist(self.result))
            verdict = Label(box_text(f"{host}: safe to stop" if safe
                                     else f"{host}: NOT safe to stop"), id="verdict")
            verdict.add_class("-safe" if safe else "-unsafe")
            yield verdict
            if safe and self.teardown:
                yield Label(box_lines(f"Your teardown_command: {shlex.join(self.teardown)}\n"
                                      f"Type {host} and enter to run it; anything else does "
                                      "nothing."))
                yield Input(placeholder=f"type {host} to run the teardown", id="confirm")
                yield Label("", id="error")
            elif safe:
                yield Label(box_text("No teardown_command in hosts.toml: stop the box yourself "
                                     "(gpuroom never stops, destroys or deletes anything)."))
            else:
                yield Label(box_text("Each unchecked item says what is missing (P pulls what is "
                                     "not home); the teardown is offered only when every item "
                                     "holds."))

    def on_mount(self) -> None:
        if self.query("#confirm"):
            self.query_one("#confirm", Input).focus()

    @on(Input.Submitted, "#confirm")
    def _typed(self, event: Input.Submitted) -> None:
        if event.value.strip() == self.result.host:
            self.dismiss(True)
        else:
            self.query_one("#error", Label).update(
                box_text(f"that is not {self.result.host!r}; nothing was run"))

    def action_close(self) -> None:
        self.dismiss(False)
