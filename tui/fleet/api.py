"""The interface the control room drives, and a static implementation of it.

The real fleet (SSH links, polling) lives in ``tui/fleet/live.py``; the app only sees this
Protocol, so tests, ``replay`` and snapshot tests run the same UI against ``StaticFleet``.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.fleet.pending import PendingLedger
from gpuroom.tui.model import HostState, LinkState, PendingAction, Snapshot
from gpuroom.tui.rules.gate import GateResult
from gpuroom.tui.snapshot import Job, LogChunk
from gpuroom.tui.transport.pull import Progress, PullResult


@dataclass(frozen=True)
class ConfigReload:
    """hosts.toml changed and was read again: the hosts it added, removed and changed, or
    why the new file was refused (the old config stays)."""

    error: str | None = None
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        if self.error is not None:
            return f"hosts.toml changed but was not applied: {self.error}"
        parts = [f"{what} {', '.join(names)}" for what, names in
                 (("added", self.added), ("removed", self.removed), ("changed", self.changed))
                 if names]
        return "hosts.toml re-read: " + ("; ".join(parts) or "no host changed")


class FleetError(GpuroomError):
    """An action the fleet could not do; ``str()`` is the message shown to the user."""


class FleetAPI(Protocol):
    """What the UI may ask of the fleet. Actions raise with a user-facing message."""

    def hosts(self) -> list[HostState]: ...

    async def run(self, on_change: Callable[[str], None]) -> None:
        """Poll forever; call ``on_change(host_name)`` from the event loop after each update."""
        ...

    async def refresh(self, host: str | None = None) -> None: ...

    def reload_config(self) -> ConfigReload | None:
        """hosts.toml read again if it changed since last read; None when it did not."""
        ...

    def show_log(self, host: str, job_key: str) -> None:
        """The room starts showing this job's log ("queue/id"): fetch its tail soon."""
        ...

    async def log_before(self, host: str, job_key: str, end: int) -> LogChunk | None:
        """Older bytes of the job's log, ending at offset ``end``; None when none can be had."""
        ...

    async def queue_add(
        self, host: str, argv: list[str], *, name: str | None, gpus: int, retries: int,
        cwd: str | None = None, ckpts: tuple[str, ...] = (),
    ) -> str: ...

    async def queue_kill(self, host: str, job_id: str) -> None: ...

    async def queue_relaunch(self, host: str, job_id: str) -> None: ...

    async def queue_remove(self, host: str, job_id: str) -> None:
        """Take a queued job off the host's queue (the box refuses a running one)."""
        ...

    async def queue_move(self, host: str, job_id: str, position: int) -> None:
        """Move a queued job to ``position`` among the queued jobs (0: next to start)."""
        ...

    async def queue_pause(self, host: str, paused: bool) -> None:
        """Pause (start no new job; running ones go on) or resume the host's queue."""
        ...

    async def job_move(self, host: str, job_id: str, to: str) -> str:
        """`queue move`: the job goes on on ``to`` from its newest verified checkpoint
        (tui/fleet/move.py); answers the lineage line "A/j7 -> B/j3 (from ckpt step N)"."""
        ...

    async def queue_show(self, host: str, job_id: str, queue: str = "default") -> Job:
        """One job in full, as ``gpuroom queue show`` reads it from the box."""
        ...

    def mark_pending(self, host: str, action: PendingAction) -> None:
        """Show ``action`` on ``host`` as sent until a snapshot confirms it."""
        ...

    def drop_pending(self, host: str, action: PendingAction) -> None:
        """``action`` never took effect (the box refused it): stop showing it."""
        ...

    def ssh_argv(self, host: str) -> list[str] | None: ...

    async def pull(
        self, host: str, job: str | None, on_progress: Callable[[str, Progress], None]
    ) -> list[tuple[str, PullResult]]:
        """Pull each job's outputs home (verified); per job id, what happened."""
        ...

    async def gate(self, host: str) -> GateResult: ...

    def pull_records(self) -> list[dict[str, Any]]:
        """The pull records the gate reads (pulls.json), for the danger clock."""
        ...

    def teardown_argv(self, host: str) -> list[str] | None:
        """The user's own teardown command for the host, if hosts.toml gives one."""
        ...


class StaticFleet(PendingLedger):
    """A fleet whose snapshots are handed to it (recordings, tests) instead of polled.

    It never reaches a box, so the queue actions refuse with a message saying so.
    """

    def __init__(
        self,
        hosts: Iterable[HostState],
        ssh: dict[str, list[str]] | None = None,
    ) -> None:
        self._hosts = list(hosts)
        self._ssh = dict(ssh or {})
        self._on_change: Callable[[str], None] | None = None
        self._stopped = asyncio.Event()
        # Earlier snapshots of a recording, oldest first: (host, snapshot, time).
        self.backlog: list[tuple[str, Snapshot, float]] = []

    @classmethod
    def from_scenario(cls, data: Mapping[str, Any]) -> StaticFleet:
        """A fleet from a scenario document (tests/data/scenario-*.json): hosts with their
        final state, and each host's earlier snapshots kept in ``backlog``."""
        hosts = []
        backlog = []
        for h in data.get("hosts", []):
            hosts.append(
                HostState(
                    name=h["name"],
                    profile=h.get("profile", "generic-ssh"),
                    state=LinkState(h.get("state", "down")),
                    error=h.get("error"),
                    snapshot=h.get("snapshot"),
                    last_ok=h.get("last_ok"),
                    last_try=h.get("last_ok"),
                    price_per_hour=h.get("price_per_hour"),
                )
            )
            backlog += [(h["name"], e["snapshot"], float(e["at"])) for e in h.get("history", [])]
        fleet = cls(hosts, ssh={h.name: ["ssh", h.name] for h in hosts if h.profile != "local"})
        fleet.backlog = sorted(backlog, key=lambda item: item[2])
        return fleet

    def play_backlog(self) -> Iterator[str]:
        """Feed the backlog one snapshot at a time, then restore every host's final state.

        Yields after each feed so a test can let the UI handle each poll separately (the
        per-tick HostChanged merges when it is not handled in between).
        """
        finals = [copy.copy(h) for h in self._hosts]
        for name, snapshot, at in self.backlog:
            self.feed(name, snapshot, at)
            yield name
        for h, final in zip(self._hosts, finals, strict=True):
            h.__dict__.update(final.__dict__)
            self._changed(h.name)
            yield h.name

    def hosts(self) -> list[HostState]:
        return self._hosts

    def _pending_host(self, host: str) -> HostState | None:
        return next((h for h in self._hosts if h.name == host), None)

    def host(self, name: str) -> HostState:
        for h in self._hosts:
            if h.name == name:
                return h
        raise FleetError(f"{name}: no such host in this fleet")

    def feed(self, name: str, snapshot: Snapshot, at: float) -> None:
        """One good poll of ``name`` answered ``snapshot`` at time ``at``."""
        h = self.host(name)
        h.snapshot = copy.deepcopy(snapshot)
        h.state = LinkState.UP
        h.error = None
        h.last_ok = h.last_try = at
        h.polls_ok += 1
        self.retire_confirmed(h)
        self._changed(name)

    def fail(self, name: str, error: str, at: float, *, down: bool = False) -> None:
        """One failed poll: the last snapshot is kept, the host goes STALE (or DOWN)."""
        h = self.host(name)
        h.state = LinkState.DOWN if down or h.snapshot is None else LinkState.STALE
        h.error = error
        h.last_try = at
        h.polls_failed += 1
        self._changed(name)

    def _changed(self, name: str) -> None:
        if self._on_change is not None:
            self._on_change(name)

    async def run(self, on_change: Callable[[str], None]) -> None:
        self._on_change = on_change
        for h in self._hosts:
            on_change(h.name)
        # Nothing to poll: stay "running" until the app goes away, like the real fleet.
        await self._stopped.wait()

    async def refresh(self, host: str | None = None) -> None:
        for h in self._hosts if host is None else [self.host(host)]:
            self._changed(h.name)

    def reload_config(self) -> ConfigReload | None:
        return None  # a scenario or a recording has no hosts.toml

    def show_log(self, host: str, job_key: str) -> None:
        """A recording holds the bytes it holds: nothing to ask for."""

    async def log_before(self, host: str, job_key: str, end: int) -> LogChunk | None:
        return None

    async def queue_add(
        self, host: str, argv: list[str], *, name: str | None, gpus: int, retries: int,
        cwd: str | None = None, ckpts: tuple[str, ...] = (),
    ) -> str:
        raise FleetError(f"{host}: this is a recording; no box to add a job to")

    async def queue_kill(self, host: str, job_id: str) -> None:
        raise FleetError(f"{host}: this is a recording; job {job_id} cannot be killed from it")

    async def queue_relaunch(self, host: str, job_id: str) -> None:
        raise FleetError(f"{host}: this is a recording; job {job_id} cannot be relaunched")

    async def queue_remove(self, host: str, job_id: str) -> None:
        raise FleetError(f"{host}: this is a recording; job {job_id} cannot be removed")

    async def queue_move(self, host: str, job_id: str, position: int) -> None:
        raise FleetError(f"{host}: this is a recording; job {job_id} cannot be moved")

    async def queue_pause(self, host: str, paused: bool) -> None:
        raise FleetError(f"{host}: this is a recording; its queue cannot be "
                         f"{'paused' if paused else 'resumed'}")

    async def job_move(self, host: str, job_id: str, to: str) -> str:
        raise FleetError(f"{host}: this is a recording; job {job_id} cannot be moved to {to}")

    async def queue_show(self, host: str, job_id: str, queue: str = "default") -> Job:
        """A recording has no box to ask: the job as its snapshot recorded it (no newest
        checkpoint unless the job was running)."""
        view = self.host(host).view
        job = view.job(job_id) if view is not None else None
        if job is None:
            raise FleetError(f"{host}: this recording holds no job {job_id}")
        return job

    def ssh_argv(self, host: str) -> list[str] | None:
        return self._ssh.get(host)

    async def pull(
        self, host: str, job: str | None, on_progress: Callable[[str, Progress], None]
    ) -> list[tuple[str, PullResult]]:
        raise FleetError(f"{host}: this is a recording; there is no box to pull from")

    async def gate(self, host: str) -> GateResult:
        raise FleetError(f"{host}: this is a recording; the gate needs the live box")

    def pull_records(self) -> list[dict[str, Any]]:
        return []  # a recording has no pulls of its own

    def teardown_argv(self, host: str) -> list[str] | None:
        return None
