"""The room's queue-steering keys (issue 20 item 2): remove a queued job, move it earlier or
later, pause and resume the host's queue. Each is one request to the box's runner (the only
owner of job state); what changed is shown by the next poll, which is asked for at once.
The keys themselves are in screens.KEYS with the others."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from textual import work
from textual.app import App

from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.fleet.api import FleetAPI
from gpuroom.tui.model import HostState
from gpuroom.tui.present.jobs import JobRow
from gpuroom.tui.room.screens import ConfirmScreen


class SteerKeys(App[None]):
    """Actions of the steering keys; GpuroomApp gives the fleet, the selection and _failed."""

    fleet: FleetAPI
    selected_host: str | None

    def host(self, name: str | None) -> HostState | None:
        raise NotImplementedError

    def _selected_job(self, verb: str) -> tuple[HostState, JobRow] | None:
        raise NotImplementedError

    def _failed(self, what: str, host: str, exc: GpuroomError | OSError | asyncio.TimeoutError,
                fix: str) -> None:
        raise NotImplementedError

    def _queued_job(self, verb: str) -> tuple[HostState, JobRow] | None:
        picked = self._selected_job(verb)
        if picked is not None and picked[1].state != "queued":
            h, job = picked
            self.notify(f"job {job.id} on {h.name} is {job.state}: only a queued job can be "
                        f"{verb}d" + (" (kill it first)" if verb == "remove" else ""),
                        severity="warning")
            return None
        return picked

    def action_remove(self) -> None:
        picked = self._queued_job("remove")
        if picked is None:
            return
        h, job = picked
        label = f"{job.id} ({job.name})" if job.name else job.id
        question = f"Remove queued job {label} from {h.name}'s queue?\n{job.command}"

        def answered(yes: bool | None) -> None:
            if yes:
                self._send_steer(h.name, self.fleet.queue_remove(h.name, job.id),
                                 f"removal of job {job.id}", f"{job.id} removed")

        self.push_screen(ConfirmScreen(question, yes="Remove"), answered)

    def _move(self, step: int) -> None:
        picked = self._queued_job("move")
        if picked is None:
            return
        h, job = picked
        if job.position is None:
            self.notify(f"job {job.id} on {h.name}: the box did not say its place in line "
                        "(an older helper)", severity="warning")
            return
        to = max(0, job.position + step)
        self._send_steer(h.name, self.fleet.queue_move(h.name, job.id, to),
                         f"move of job {job.id}", f"{job.id} moved to place {to}")

    def action_move_up(self) -> None:
        self._move(-1)

    def action_move_down(self) -> None:
        self._move(1)

    def _host_for(self, verb: str) -> HostState | None:
        h = self.host(self.selected_host)
        if h is None:
            self.notify(f"nothing to {verb}: no host selected (enter on a host)",
                        severity="warning")
        return h

    def action_pause_queue(self) -> None:
        h = self._host_for("pause")
        if h is None:
            return
        name = h.name

        def answered(yes: bool | None) -> None:
            if yes:
                self._send_steer(name, self.fleet.queue_pause(name, True),
                                 "pausing the queue",
                                 f"{name}'s queue paused: no new job starts")

        self.push_screen(ConfirmScreen(f"Pause {name}'s queue? Running jobs go on; no queued "
                                       "job starts until it is resumed (g).", yes="Pause"),
                         answered)

    def action_resume_queue(self) -> None:
        h = self._host_for("resume")
        if h is not None:
            self._send_steer(h.name, self.fleet.queue_pause(h.name, False), "resuming the queue",
                             f"{h.name}'s queue resumed")

    @work(group="steer")
    async def _send_steer(self, host: str, call: Awaitable[None], what: str, done: str) -> None:
        try:
            await call
        except GpuroomError as exc:
            self._failed(what, host, exc, "check the host is UP (r polls now), then try again")
            return
        self.notify(f"{host}: {done}")
        try:
            await self.fleet.refresh(host)  # the box's own record shows the change
        except GpuroomError as exc:
            self._failed("poll", host, exc, "see the host's state for the cause")
