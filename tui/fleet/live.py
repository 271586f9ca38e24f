"""The fleet: every host's link and latest state, polled with bounded concurrency.

The fleet is the model the room renders. It owns HostState objects and mutates them only
from the event loop; widgets read them. A failed poll keeps the last good snapshot and marks
the host STALE (then DOWN after ``down_after_s``); it never concludes a run died (GEN8).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from gpuroom.tui.config import Config, HostConfig
from gpuroom.tui.fleet.outputs import PullRecords, check_gate, pull_jobs, pull_root
from gpuroom.tui.fleet.pending import PendingLedger
from gpuroom.tui.fleet.replay import RecordingError
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.present.slurm import queue_backend
from gpuroom.tui.rules.money import dead_runner_queues
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.snapshot import Snapshot as SnapshotView
from gpuroom.tui.transport.link import HostLink, LinkError

if TYPE_CHECKING:
    from gpuroom.tui.rules.gate import GateResult
    from gpuroom.tui.transport.pull import Progress, PullResult

MAX_CONCURRENT_POLLS = 16
RUNNER_RETRY_S = 60.0
BACKOFF_CAP_S = 60.0


def backoff_delay(failures: int, base_s: float, cap_s: float = BACKOFF_CAP_S,
                  rng: random.Random | None = None) -> float:
    """Capped exponential backoff with jitter: many hosts failing together spread out."""
    raw = min(cap_s, base_s * 2.0 ** max(0, failures - 1))
    jitter = rng.uniform(0.5, 1.0) if rng is not None else random.uniform(0.5, 1.0)
    return raw * jitter


class Recorder:
    """Appends every poll outcome as one JSON line, for `gpuroom replay` and the tests."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._f: IO[str] = open(path, "a", encoding="utf-8")
        except OSError as exc:  # the user's path, not a bug
            raise RecordingError(f"{path}: cannot record to it ({exc.strerror or exc})",
                                 "give a file in a directory you can write") from exc

    def write(self, state: HostState) -> None:
        line = {
            "t": state.last_try,
            "host": state.name,
            "profile": state.profile,
            "state": state.state.value,
            "error": state.error,
            "snapshot": state.snapshot if state.state is LinkState.UP else None,
            # So a replay bills what the room billed.
            "price_per_hour": state.price_per_hour,
            "rented_at": state.rented_at,
        }
        self._f.write(json.dumps(line, separators=(",", ":")) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class Fleet(PendingLedger):
    """Hosts, their links and states. Implements the room's FleetAPI."""

    def __init__(self, config: Config, *, clock: Callable[[], float] = time.time,
                 recorder: Recorder | None = None, restart_runners: bool = False) -> None:
        self.config = config
        self.clock = clock
        self.recorder = recorder
        # The room and `record` start a queue's dead runner when a poll shows one (GEN6);
        # the one-shot verbs (status, doctor, probe) only look.
        self.restart_runners = restart_runners
        self._runner_tries: dict[tuple[str, str], float] = {}
        self._hosts: dict[str, HostConfig] = {h.name: h for h in config.effective_hosts()}
        self._states: dict[str, HostState] = {
            h.name: HostState(name=h.name, profile=h.profile, price_per_hour=h.price_per_hour,
                              rented_at=h.rented_at, stall_after_s=h.stall_after_s,
                              mtbf_s=h.mtbf_s,
                              error=h.error)
            for h in self._hosts.values()
        }
        ssh_config = config.ssh_config_path()
        self._links: dict[str, HostLink] = {
            h.name: HostLink(h, ssh_config=ssh_config, mode=config.settings.poll_mode)
            for h in self._hosts.values()
        }
        self._cursors: dict[str, dict[str, Any]] = {h: {} for h in self._hosts}
        self._failures: dict[str, int] = dict.fromkeys(self._hosts, 0)
        self._sem = asyncio.Semaphore(MAX_CONCURRENT_POLLS)
        self._wake: dict[str, asyncio.Event] = {}
        self._pull_records = PullRecords()

    def hosts(self) -> list[HostState]:
        return list(self._states.values())

    def _pending_host(self, host: str) -> HostState | None:
        return self._states.get(host)

    def state(self, name: str) -> HostState:
        return self._states[name]

    def link(self, name: str) -> HostLink:
        try:
            return self._links[name]
        except KeyError:
            raise LinkError(name, "no such host",
                            fix="see `gpuroom hosts list` for the configured names") from None

    def request_for(self, name: str) -> dict[str, Any]:
        """What the next probe of this host asks for: mounts and cursors."""
        request: dict[str, Any] = {"mounts": list(self._hosts[name].mounts)}
        request.update(self._cursors[name])
        return request

    def _advance_cursors(self, name: str, snapshot: SnapshotView) -> None:
        cursors = self._cursors[name]
        if snapshot.kernel.cursor is not None:
            cursors["kernel_cursor"] = snapshot.kernel.cursor
        logs: dict[str, Any] = {}
        for key, job in snapshot.iter_jobs():
            chunk = job.log_chunk
            if chunk is not None and chunk.next_offset is not None:
                logs[key] = {"offset": chunk.next_offset, "inode": chunk.inode}
        cursors["logs"] = logs

    async def poll_host(self, name: str) -> HostState:
        """Poll one host once and update its state; never raises for a link failure."""
        state = self._states[name]
        link = self._links[name]
        async with self._sem:
            state.last_try = self.clock()
            try:
                snapshot = await link.poll(self.request_for(name))
            except LinkError as exc:
                self._failures[name] += 1
                state.polls_failed += 1
                # Its text may quote the box (stderr, a disconnect reason): made inert once here.
                state.error = sanitize_line(str(exc))
                age = state.age_s(self.clock())
                if age is not None and age < self.config.settings.down_after_s:
                    state.state = LinkState.STALE
                else:
                    state.state = LinkState.DOWN
            else:
                self._failures[name] = 0
                state.polls_ok += 1
                state.state = LinkState.UP
                state.error = None
                state.snapshot = snapshot
                state.last_ok = state.last_try
                view = state.view  # parsed here, once; the panes read the same view
                assert view is not None
                self._advance_cursors(name, view)
                self.retire_confirmed(state)
        if self.restart_runners and state.state is LinkState.UP and state.view is not None:
            await self.start_dead_runners(name, state.view)
        if self.recorder is not None:
            self.recorder.write(state)
        return state

    async def start_dead_runners(self, name: str, view: SnapshotView) -> list[str]:
        """Start the runner of each queue whose runner is dead while jobs wait or run (GEN6:
        a reboot, a killed tmux). The runner owns the queue's state and ``queue start`` is a
        no-op while one holds the lock, so this is safe to repeat; it is tried at most once per
        RUNNER_RETRY_S per queue. Returns the queues it asked to start."""
        started = []
        now = self.clock()
        for queue in dead_runner_queues(view):
            last = self._runner_tries.get((name, queue))
            if last is not None and now - last < RUNNER_RETRY_S:
                continue
            self._runner_tries[(name, queue)] = now
            try:
                await self._queue_call(name, "start", "--queue", queue)
            except LinkError:
                continue  # the doctor keeps saying the runner is dead; the next try is later
            started.append(queue)
        return started

    async def poll_all(self) -> list[HostState]:
        return list(await asyncio.gather(*(self.poll_host(n) for n in self._states)))

    async def _host_loop(self, name: str, on_change: Callable[[str], None]) -> None:
        wake = self._wake.setdefault(name, asyncio.Event())
        interval = self.config.settings.poll_interval_s
        while True:
            await self.poll_host(name)
            on_change(name)
            failures = self._failures[name]
            delay = backoff_delay(failures, interval) if failures else interval
            wake.clear()
            try:
                await asyncio.wait_for(wake.wait(), delay)
            except (asyncio.TimeoutError, TimeoutError):
                pass

    async def run(self, on_change: Callable[[str], None]) -> None:
        """Poll every host forever (each on its own schedule) until cancelled."""
        tasks = [asyncio.create_task(self._host_loop(n, on_change)) for n in self._states]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.close()

    async def refresh(self, host: str | None = None) -> None:
        """Poll now: wakes the running loops, or polls directly when none runs."""
        names = [host] if host else list(self._states)
        if self._wake:
            for n in names:
                if n in self._wake:
                    self._wake[n].set()
        else:
            await asyncio.gather(*(self.poll_host(n) for n in names))

    async def _queue_call(self, host: str, *args: str, timeout_s: float = 60.0) -> str:
        result = await self.link(host).helper("queue", *args, timeout_s=timeout_s)
        if result.rc != 0:
            raise LinkError(host, f"queue {args[0]} failed ({result.failure()})")
        return result.stdout.decode(errors="replace")

    async def queue_add(self, host: str, argv: list[str], *, name: str | None = None,
                        gpus: int = 0, retries: int = 0, cwd: str | None = None) -> str:
        # A slurm-profile host is a login node: the helper submits with sbatch.
        profile = self._hosts[host].profile if host in self._hosts else None
        args = ["add", "--backend", queue_backend(profile), "--gpus", str(gpus),
                "--retries", str(retries)]
        if name:
            args += ["--name", name]
        if cwd:
            args += ["--cwd", cwd]
        out = await self._queue_call(host, *args, "--", *argv)
        return str(json.loads(out).get("job"))

    async def queue_kill(self, host: str, job_id: str) -> None:
        await self._queue_call(host, "kill", job_id, timeout_s=120.0)

    async def queue_relaunch(self, host: str, job_id: str) -> None:
        await self._queue_call(host, "relaunch", job_id)

    def ssh_argv(self, host: str) -> list[str] | None:
        return self.link(host).ssh_argv()

    async def pull(self, host: str, job: str | None,
                   on_progress: Callable[[str, Progress], None]) -> list[tuple[str, PullResult]]:
        return await pull_jobs(self.link(host), pull_root(self._hosts[host]), job,
                               on_progress=on_progress)

    async def gate(self, host: str) -> GateResult:
        return await check_gate(self.link(host))

    def pull_records(self) -> list[dict[str, Any]]:
        return self._pull_records.current()

    def teardown_argv(self, host: str) -> list[str] | None:
        cmd = self._hosts[host].teardown_command if host in self._hosts else None
        return list(cmd) if cmd else None

    async def close(self) -> None:
        await asyncio.gather(*(link.close() for link in self._links.values()),
                             return_exceptions=True)
        if self.recorder is not None:
            self.recorder.close()
