"""The room's move key (issue 21 item 2): M moves the selected job to another host, as
`gpuroom queue move` does (tui/fleet/move.py), after a confirm naming both hosts. With more
than one other host, a picker asks which first. The key itself is in screens.KEYS."""

from __future__ import annotations

from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.present.text import box_lines, box_text
from gpuroom.tui.room.screens import ConfirmScreen
from gpuroom.tui.room.steer import SteerKeys


class PickHostScreen(ModalScreen[str | None]):
    """Which host a job moves to; escape cancels."""

    DEFAULT_CSS = """
    PickHostScreen { align: center middle; }
    PickHostScreen > OptionList { width: 60; height: auto; max-height: 16; }
    PickHostScreen > Label { width: 60; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, question: str, hosts: list[str]) -> None:
        super().__init__()
        self.question = question
        self.hosts = hosts

    def compose(self) -> ComposeResult:
        yield Label(box_lines(self.question))
        yield OptionList(*(Option(box_text(h), id=h) for h in self.hosts))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


class MoveKey(SteerKeys):
    """action_move_job; GpuroomApp gives the fleet, the selection and _failed."""

    def action_move_job(self) -> None:
        picked = self._selected_job("move to another host")
        if picked is None:
            return
        h, job = picked
        others = [o.name for o in self.fleet.hosts() if o.name != h.name]
        if not others:
            self.notify(f"job {job.id}: there is no other host to move it to (hosts.toml)",
                        severity="warning")
            return
        label = f"{job.id} ({job.name})" if job.name else job.id

        def confirm(to: str | None) -> None:
            if not to:
                return
            question = (f"Move job {label} from {h.name} to {to}?\nIt is killed on {h.name}; "
                        f"its newest checkpoint is pulled home, verified, and pushed to {to}; "
                        f"the identical command is added there.\n{job.command}")

            def answered(yes: bool | None) -> None:
                if yes:
                    self._send_move(h.name, job.id, to)

            self.push_screen(ConfirmScreen(question, yes="Move"), answered)

        if len(others) == 1:
            confirm(others[0])
        else:
            self.push_screen(PickHostScreen(f"Move job {label} from {h.name} to:", others),
                             confirm)

    @work(group="steer")
    async def _send_move(self, host: str, job: str, to: str) -> None:
        self.notify(f"{host}: moving {job} to {to}…")
        try:
            line = await self.fleet.job_move(host, job, to)
        except GpuroomError as exc:
            self._failed(f"move of job {job} to {to}", host, exc,
                         "check both hosts are UP (r polls now), then try again")
            return
        self.notify(line)
        for name in (host, to):
            try:
                await self.fleet.refresh(name)  # both queues show the lineage
            except GpuroomError as exc:
                self._failed("poll", name, exc, "see the host's state for the cause")
