"""Modal screens: help (a detail screen of the keys), kill confirmation, add-job form. The key
table lives here too, so the help screen, the bindings and the command palette are all
generated from one list."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label

from gpuroom.tui.present.text import box_lines, box_text
from gpuroom.tui.room.detail_screen import DetailScreen


@dataclass(frozen=True)
class Key:
    """One key of the control room."""

    key: str  # Textual key spec, comma-separated alternatives
    action: str  # app action name; "" = handled by the focused pane
    description: str
    short: str = ""  # footer label; empty = not in the footer
    palette: bool = True  # also offered as a ctrl+p command
    group: str = ""  # the 80-column hint says a group's keys together: "K R a job"


KEYS: tuple[Key, ...] = (
    Key("up,down", "", "move in the focused pane", palette=False),
    Key("j,k", "", "move down / up (vi)", palette=False),
    Key("tab,shift+tab", "", "next / previous pane", palette=False),
    Key("enter", "", "hosts pane: show the highlighted host below", palette=False),
    Key("enter", "job_detail", "job detail: the selected job in full, as queue show says it "
        "(argv, cwd, env keys, GPUs, every attempt, why it waits, checkpoint, log)"),
    Key("slash", "filter", "filter hosts by name (esc clears)", short="filter"),
    Key("slash", "", "log pane: search the log's text; matches are highlighted (esc clears)",
        palette=False),
    Key("n,N", "", "log pane: next / previous match of the search (pauses follow)",
        palette=False),
    Key("pageup,pagedown", "", "log pane: a page up / down (up pauses follow)", palette=False),
    Key("home,end", "", "log pane: the first line kept (pauses follow) / the end, following "
        "again", palette=False),
    Key("question_mark", "help", "this help", short="help"),
    Key("ctrl+p", "command_palette", "command palette", palette=False),
    Key("K", "kill", "kill the selected job (asks first)", short="kill", group="job"),
    Key("R", "relaunch", "relaunch the selected job", short="relaunch", group="job"),
    Key("x", "remove", "remove the queued job (asks first)"),
    Key("plus", "move_up", "move the queued job one place earlier"),
    Key("minus", "move_down", "move the queued job one place later"),
    Key("z", "pause_queue", "pause the host's queue (asks first)"),
    Key("g", "resume_queue", "resume the host's queue"),
    Key("M", "move_job", "move the job to another host (asks first)"),
    Key("a", "add_job", "add a job to the selected host's queue", short="add", group="job"),
    Key("i", "detail", "detail: the selected job's whole command (from the queue pane), "
        "else the host's whole state, error and fix", short="detail"),
    Key("f", "toggle_follow", "follow / pause the log", short="follow"),
    Key("p", "toggle_processes", "GPU pane: every GPU process (job, foreign, zombie U11) / "
        "the GPU rows"),
    Key("r", "refresh", "poll the selected host now", short="refresh", group="host"),
    Key("s", "ssh", "interactive ssh to the selected host", short="ssh", group="host"),
    Key("d", "findings", "doctor: every finding and danger clock, with fixes", short="doctor"),
    Key("P", "pull", "pull the selected job's outputs home, verified (no job: all)",
        short="pull", group="host"),
    Key("T", "gate", "teardown gate: is it safe to stop paying for this host?", short="gate",
        group="host"),
    Key("q", "quit", "quit", short="quit"),
)

_KEY_NAMES = {"slash": "/", "question_mark": "?", "shift+tab": "shift+tab", "plus": "+",
              "minus": "-"}


def key_label(spec: str) -> str:
    """How a key spec is written for humans: "slash" -> "/"."""
    return " ".join(_KEY_NAMES.get(k, k) for k in spec.split(","))


def key_hint() -> str:
    """Every footer key on one line for 80 columns, a group's keys together ("K R a job",
    "r s P T host"), where the footer's one word per key no longer fits; ? lists them all."""
    parts: dict[str, list[str]] = {}
    for k in KEYS:
        if k.short:
            parts.setdefault(k.group or k.short, []).append(key_label(k.key))
    return "  ".join(f"{' '.join(keys)} {label}" for label, keys in parts.items())


PALETTE_FOOTER_WIDTH = 12  # "▏^p palette ", docked right of the keys


def footer_width() -> int:
    """Columns Textual's footer takes to show every key with its word and the palette's key:
    below this the room shows key_hint's one line instead."""
    keys = sum(len(key_label(k.key)) + len(k.short) + 3 for k in KEYS if k.short)
    return 1 + keys + PALETTE_FOOTER_WIDTH


class HelpScreen(DetailScreen):
    """Every key, from KEYS: the detail screen's rows, a key and what it does."""

    DEFAULT_CSS = """
    HelpScreen > VerticalScroll { width: 72; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "close", "Close"),
    ]

    def __init__(self) -> None:
        super().__init__("gpuroom keys", [(key_label(k.key), k.description) for k in KEYS],
                         closes="esc closes; ctrl+p runs any of them by name")


class ConfirmScreen(ModalScreen[bool]):
    """Yes/no for a destructive action; the question names the host and the job."""

    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Grid {
        grid-size: 2; grid-gutter: 1 2; grid-rows: auto 3;
        width: 60; height: auto; border: thick $error; padding: 1 2; background: $surface;
    }
    ConfirmScreen #question { column-span: 2; width: 1fr; }
    ConfirmScreen Button { width: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str, yes: str = "Kill") -> None:
        super().__init__()
        self.question = question
        self.yes = yes  # the button's verb: what "y" does

    def compose(self) -> ComposeResult:
        with Grid():
            # The job name and command come from the box: never markup, no escapes.
            yield Label(box_lines(self.question), id="question")
            yield Button(f"{self.yes} (y)", variant="error", id="yes")
            yield Button("Cancel (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        # Safe default: enter on the focused button cancels.
        self.query_one("#no", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


@dataclass(frozen=True)
class AddJobRequest:
    """What the add-job form asks the fleet for."""

    argv: list[str]
    name: str | None
    gpus: int
    retries: int
    cwd: str | None = None  # on the box; None: the helper's default (the login home)
    ckpts: tuple[str, ...] = ()  # --ckpt: the program's own checkpoints, under the cwd


def parse_add_form(command: str, name: str, gpus: str, retries: str,
                   cwd: str = "", *, ckpt: str = "") -> AddJobRequest:
    """Validate the form; raise ValueError with the message to show under it."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ValueError(f"command: {exc} (check the quotes)") from exc
    if not argv:
        raise ValueError("command: empty")
    try:
        n_gpus = int(gpus or "0")
        n_retries = int(retries or "0")
    except ValueError as exc:
        raise ValueError("GPUs and retries are whole numbers") from exc
    if n_gpus < 0 or n_retries < 0:
        raise ValueError("GPUs and retries cannot be negative")
    try:
        ckpts = tuple(shlex.split(ckpt))
    except ValueError as exc:
        raise ValueError(f"checkpoints: {exc} (check the quotes)") from exc
    return AddJobRequest(argv, name.strip() or None, n_gpus, n_retries, cwd.strip() or None,
                         ckpts)


class AddJobScreen(ModalScreen[AddJobRequest | None]):
    """Command (split with shlex, never run through a shell), name, GPUs, retries, working
    directory. Each field has a label above it: a prefilled value hides its placeholder."""

    DEFAULT_CSS = """
    AddJobScreen { align: center middle; }
    AddJobScreen > Vertical {
        width: 70; height: auto; border: round $accent; padding: 0 1; background: $surface;
    }
    AddJobScreen Input { margin: 0; }
    AddJobScreen .field { color: $text-muted; height: 1; margin-top: 1; }
    AddJobScreen #error { color: $error; height: auto; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, host: str, gpus: int = 1) -> None:
        super().__init__()
        self.host = host
        self.default_gpus = gpus

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(box_text(f"Add a job on {self.host}  (enter submits, esc cancels)"))
            yield Label("command (split like a shell would, never run through one)",
                        classes="field")
            yield Input(placeholder="command, e.g. python train.py --lr 3e-4", id="command")
            yield Label("name (optional)", classes="field")
            yield Input(placeholder="name (optional)", id="name")
            yield Label("GPUs", classes="field")
            yield Input(value=str(self.default_gpus), placeholder="GPUs", id="gpus",
                        type="integer")
            yield Label("retries after a failed attempt", classes="field")
            yield Input(value="0", placeholder="retries", id="retries", type="integer")
            yield Label("working directory on the box (optional)", classes="field")
            yield Input(placeholder="default: the login home, e.g. ~/proj", id="cwd")
            yield Label("the program's checkpoints under it (optional; default: found by name)",
                        classes="field")
            yield Input(placeholder="e.g. out/ckpt.pt 'out/checkpoint-*'", id="ckpt")
            yield Label("", id="error")

    @on(Input.Submitted)
    def _submit(self) -> None:
        values = {i.id: i.value for i in self.query(Input)}
        try:
            request = parse_add_form(
                values["command"], values["name"], values["gpus"], values["retries"],
                values["cwd"] or "", ckpt=values["ckpt"] or "",
            )
        except ValueError as exc:
            self.query_one("#error", Label).update(box_text(str(exc)))
            return
        self.dismiss(request)

    def action_cancel(self) -> None:
        self.dismiss(None)
