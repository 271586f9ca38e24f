"""The one monitor pipeline of the room, `gpuroom export`, `gpuroom watch` and `gpuroom
doctor`: each poll outcome goes to the doctor and the clocks (tui/rules/watch.py), an ended
job's log tail is read once for the log rules, acknowledged deaths are left out
(tui/fleet/acks.py), when each host went down is remembered (tui/fleet/downs.py, a stopped
box's release countdown), and the critical items of the moment that are new, changed or due
again (tui/rules/alerts.py) ring the bell, run ``notify_command`` and POST to ``notify_url``.

The callers only say how a line reaches their user: the room as a toast, the verbs on
stderr. The decision and the sending are here, once.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any

from gpuroom.remote.queue_events import FINAL_STATES
from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.fleet.acks import AckError, Acks
from gpuroom.tui.fleet.api import FleetAPI
from gpuroom.tui.fleet.downs import HostDowns
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.present.banner import Danger, failed_job_dangers
from gpuroom.tui.rules.alerts import DEFAULT_RENOTIFY_S, Alert
from gpuroom.tui.rules.clock import ClockItem
from gpuroom.tui.rules.doctor import Finding
from gpuroom.tui.rules.money import LOG_RULES, log_text_findings
from gpuroom.tui.rules.watch import FleetWatch
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.snapshot import Job, LogChunk
from gpuroom.tui.transport.notify_http import NotifyError, UrlNotifier

TailReader = Callable[[str, str], Awaitable[LogChunk | None]]
# Runs the user's notify_command (tui/room/commands.py run_user_command): (argv, timeout).
CommandRunner = Callable[[list[str], float], Awaitable[tuple[int, bytes]]]
NOTIFY_TIMEOUT_S = 30.0
# The ended jobs whose tails are read per host, newest end first: a queue's long history
# must not cost hundreds of SSH calls when the monitor starts.
MAX_TAILS_PER_HOST = 8
# The findings about one job's death, which an acknowledgement of it silences (a surviving
# daemon of the same job is still burning money: not silenced).
DEATH_IDS = frozenset({"U3", "U9", "GEN6", "U22", "job", *(r[0] for r in LOG_RULES)})
_JOB_IN_TITLE = re.compile(r"\bjob (?:[A-Za-z0-9_-]+/)?(j\d+(?:_\d+)?)\b")


def _attempt_no(job: Job) -> int | None:
    last = job.last_attempt
    return last.attempt if last is not None else None


def failed_alert_items(failed: Iterable[Danger]) -> list[Finding]:
    """A failed job's banner line as an item the alert gate sends, with what to do."""
    out = []
    for d in failed:
        prefix = f"CRITICAL {d.host}: "
        title = d.text[len(prefix):] if d.text.startswith(prefix) else d.text
        out.append(Finding("job", "critical", d.host, title, "-",
                           f"read its log (gpuroom queue logs {d.host} {d.job}), then "
                           f"gpuroom doctor --ack {d.host}/{d.job}"))
    return out


class Monitor:
    """Findings, clocks and alerts for one fleet, fed each poll outcome by ``observe``."""

    def __init__(self, fleet: FleetAPI, *, renotify_s: float = DEFAULT_RENOTIFY_S,
                 notify_url: str | None = None, notify_command: Sequence[str] | None = None,
                 clock: Callable[[], float] = time.time, acks: Acks | None = None,
                 tails: TailReader | None = None, bell: Callable[[], None] | None = None,
                 say: Callable[[Alert], None] | None = None,
                 warn: Callable[[str], None] | None = None,
                 run_command: CommandRunner | None = None,
                 deliver: Callable[[Alert], object] | None = None,
                 downs: HostDowns | None = None) -> None:
        """``tails`` reads an ended job's log tail (None: the log rules see only what the
        polls ship); ``bell`` rings once per batch of new items; ``say`` is told each new
        item; ``warn`` each failure to deliver one (a channel's own error, with its fix);
        ``run_command`` starts ``notify_command`` (None: it is not run). ``deliver``
        starts ``send(alert)`` the caller's way (the room: in a worker); by default a
        task of the running loop."""
        self.fleet = fleet
        self.watch = FleetWatch(renotify_s)
        self.clock = clock
        self.acks = acks if acks is not None else Acks()
        self.downs = downs if downs is not None else HostDowns()
        self._notifier = UrlNotifier(notify_url) if notify_url else None
        self._command = list(notify_command) if notify_command and run_command else None
        self._runner = run_command
        self._deliver = deliver
        self._tails = tails
        self._bell = bell
        self._say = say
        self._warn = warn or (lambda _line: None)
        self._tailed: set[tuple[str, str, int | None]] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ reading

    def _host(self, name: str) -> HostState | None:
        return next((h for h in self.fleet.hosts() if h.name == name), None)

    def observe(self, host: str) -> None:
        """One poll outcome of ``host`` (the fleet's on_change)."""
        h = self._host(host)
        if h is None:
            return
        self.watch.observe(h, self.clock())
        self.downs.observe(h)
        if self._tails is not None and h.state is LinkState.UP and h.view is not None:
            for job in self._tails_wanted(h):
                self._spawn(self._read_tail(h.name, job))

    def _tails_wanted(self, h: HostState) -> list[Job]:
        view = h.view
        assert view is not None
        ended = [j for j in view.jobs if j.state in FINAL_STATES and j.last_attempt is not None]
        ended.sort(key=lambda j: -((j.last_attempt.end if j.last_attempt else None) or 0.0))
        out = []
        for job in ended[:MAX_TAILS_PER_HOST]:
            key = (h.name, job.key, _attempt_no(job))
            if key in self._tailed or self.acks.acked(h.name, job.id, _attempt_no(job)):
                continue
            self._tailed.add(key)  # once per attempt, whatever the answer
            out.append(job)
        return out

    async def _read_tail(self, host: str, job: Job) -> None:
        assert self._tails is not None
        try:
            chunk = await self._tails(host, job.key)
        except (GpuroomError, OSError, asyncio.TimeoutError) as exc:
            self._warn(f"{host}: the log tail of {sanitize_line(job.id)} could not be read "
                       f"({sanitize_line(str(exc))}); its log rules wait for the next start")
            return
        data = chunk.data if chunk is not None else None
        if data:
            self.watch.remember(host, log_text_findings(host, job, data), self.clock())

    def _acked_job(self, host: str, job_id: str) -> bool:
        h = self._host(host)
        job = h.view.job(job_id) if h is not None and h.view is not None else None
        return (job is not None and job.state in FINAL_STATES
                and self.acks.acked(host, job.id, _attempt_no(job)))

    def findings(self) -> list[Finding]:
        """Every host's findings, worst first, less the acknowledged deaths."""
        out = []
        for f in self.watch.findings():
            m = _JOB_IN_TITLE.search(f.title) if f.id in DEATH_IDS else None
            if m is not None and self._acked_job(f.host, m.group(1)):
                continue
            out.append(f)
        return out

    def clocks(self, hosts: Sequence[HostState] | None = None,
               now: float | None = None) -> list[ClockItem]:
        hosts = self.fleet.hosts() if hosts is None else hosts
        return self.watch.clocks(hosts, self.clock() if now is None else now,
                                 self.fleet.pull_records(), self.downs.all_down())

    def failed(self, findings: Iterable[Finding], now: float | None = None) -> list[Danger]:
        """The failed jobs no finding explains, less the acknowledged ones."""
        dangers = failed_job_dangers(self.fleet.hosts(), self.clock() if now is None else now,
                                     [(f.host, f.title) for f in findings])
        return [d for d in dangers if not self.acks.acked(d.host, d.job, d.attempt)]

    # ------------------------------------------------------------------ acting

    def alert(self, findings: Sequence[Finding], clocks: Sequence[ClockItem],
              failed: Sequence[Danger] = ()) -> list[Alert]:
        """Send the critical items of this moment that are due: the bell once, then each
        item to ``say``, ``notify_command`` and ``notify_url``."""
        fresh = self.watch.new_criticals([*findings, *failed_alert_items(failed)], clocks,
                                         self.clock())
        if fresh and self._bell is not None:
            self._bell()
        for alert in fresh:
            if self._say is not None:
                self._say(alert)
            if self._command or self._notifier is not None:
                if self._deliver is not None:
                    self._deliver(alert)
                else:
                    self._spawn(self.send(alert))
        return fresh

    async def send(self, alert: Alert) -> None:
        """``alert`` to each channel; one that fails or hangs never holds back another."""
        await asyncio.gather(self._post(alert), self._run_command(alert))

    async def _post(self, alert: Alert) -> None:
        if self._notifier is None:
            return
        try:
            await self._notifier.send(alert.to_json())
        except NotifyError as exc:
            self._warn(str(exc))

    async def _run_command(self, alert: Alert) -> None:
        if not self._command or self._runner is None:
            return
        argv = [*self._command, sanitize_line(alert.line)]
        try:
            rc, out = await self._runner(argv, NOTIFY_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as exc:
            self._warn(f"notify_command {argv[0]} failed: {exc!r}. Fix: check "
                       "[settings] notify_command in hosts.toml")
            return
        if rc:
            self._warn(f"notify_command {argv[0]} exited {rc}: "
                       f"{sanitize_line(out.decode(errors='replace'))[-200:]}")

    def ack(self, host: str, job_id: str) -> int | None:
        """Acknowledge ``job_id``'s death on ``host`` as the last poll showed it: the
        attempt acknowledged. Only a job that ended can be."""
        h = self._host(host)
        job = h.view.job(job_id) if h is not None and h.view is not None else None
        if job is None or job.state not in FINAL_STATES:
            why = "is not in its queue" if job is None else f"is {job.state}, not ended"
            raise AckError(f"{host}: job {job_id} {why}",
                           f"gpuroom queue ls {host} (acknowledge a job that ended)")
        attempt = _attempt_no(job)
        self.acks.add(host, job.id, attempt, now=self.clock())
        return attempt

    def clear(self) -> int:
        """The room's clear: the remembered findings are forgotten and every failed job the
        banner shows is acknowledged (the same record `doctor --ack` writes)."""
        n = self.watch.clear()
        for d in self.failed(self.findings()):
            self.acks.add(d.host, d.job, d.attempt, now=self.clock())
            n += 1
        return n

    # ------------------------------------------------------------------ tasks

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def settle(self) -> None:
        """Wait for the tail reads and the alerts under way (and any they start)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()


__all__ = ["DEATH_IDS", "Monitor", "failed_alert_items"]
