"""The control room: hosts, the selected host's queue/GPUs/disks, a job's log, the danger banner.

The app owns selection and pushes data down into the panes; the fleet (FleetAPI) is the only
thing that talks to boxes, and every call to it runs in a worker so the screen never blocks.
"""

from __future__ import annotations

import asyncio
import shlex
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator
from functools import partial
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult, SuspendNotSupported, SystemCommand
from textual.binding import Binding, BindingType
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import Horizontal
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Input, Static
from textual.worker import NoActiveWorker, WorkerFailed, get_current_worker

from gpuroom.remote.queue_events import FINAL_STATES
from gpuroom.tui.errors import EXIT_INTERNAL, GpuroomError, describe, with_fix
from gpuroom.tui.fleet.api import FleetAPI
from gpuroom.tui.fleet.monitor import Monitor
from gpuroom.tui.fleet.outputs import pull_fix, result_lines
from gpuroom.tui.model import HostState, LinkState, PendingAction
from gpuroom.tui.present.banner import fleet_dangers
from gpuroom.tui.present.box import BoxHistory
from gpuroom.tui.present.detail import host_detail, job_detail
from gpuroom.tui.present.disks import disk_rows
from gpuroom.tui.present.format import fmt_clock, fmt_cut, fmt_progress
from gpuroom.tui.present.gpus import (
    HISTORY_LEN,
    GpuView,
    gpu_absence,
    gpu_processes,
    gpu_rows,
)
from gpuroom.tui.present.hosts import billed_cell, host_row, link_problem, link_text
from gpuroom.tui.present.jobs import (
    JobRow,
    job_rows,
)
from gpuroom.tui.present.log import chunk_of, last_error_line, log_chunk, log_key
from gpuroom.tui.present.resume import resume_text
from gpuroom.tui.present.text import box_text
from gpuroom.tui.room.commands import run_user_command
from gpuroom.tui.room.detail_screen import DetailScreen
from gpuroom.tui.room.findings_screen import FindingsScreen
from gpuroom.tui.room.gate_screen import GateScreen
from gpuroom.tui.room.jobdetail_screen import JobDetailScreen
from gpuroom.tui.room.messages import HostChanged
from gpuroom.tui.room.move_key import MoveKey
from gpuroom.tui.room.screens import (
    KEYS,
    AddJobRequest,
    AddJobScreen,
    ConfirmScreen,
    HelpScreen,
    footer_width,
    key_hint,
    key_label,
)
from gpuroom.tui.rules.alerts import DEFAULT_RENOTIFY_S, Alert
from gpuroom.tui.rules.clock import banner_lines, billed_seconds
from gpuroom.tui.rules.gate import GateResult
from gpuroom.tui.rules.watch import FleetWatch
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.transport.interactive import SshExit, run_interactive_ssh
from gpuroom.tui.transport.pull import Progress
from gpuroom.widgets.banner import DangerBanner
from gpuroom.widgets.disk import DiskPanel
from gpuroom.widgets.errorline import LastErrorLine
from gpuroom.widgets.gpu import GpuPanel
from gpuroom.widgets.hosts import HostsTable
from gpuroom.widgets.logtail import LogTail
from gpuroom.widgets.queue import QueueTable

Spawn = Callable[[list[str]], "int | SshExit"]
TEARDOWN_TIMEOUT_S = 600.0
PROGRESS_EVERY_S = 0.5
FLEET_PANES_EVERY_S = 0.5
COALESCE_ABOVE_HOSTS = 20
TICK_S = 1.0  # a STALE or DOWN host's age and next try are redrawn this often

class GpuroomCommands(Provider):
    """Every action of KEYS as a ctrl+p command."""

    def _commands(self) -> Iterator[tuple[str, str, str]]:
        for k in KEYS:
            if k.palette and k.action:
                yield k.description, k.action, k.key

    async def discover(self) -> Hits:
        for description, action, key in self._commands():
            yield DiscoveryHit(description, partial(self.app.run_action, action),
                               help=f"key: {key_label(key)}")

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for description, action, key in self._commands():
            score = matcher.match(description)
            if score > 0:
                yield Hit(
                    score,
                    matcher.highlight(description),
                    partial(self.app.run_action, action),
                    help=f"key: {key_label(key)}",
                )


class GpuroomApp(MoveKey):
    """gpuroom's TUI. ``clock`` is injectable so ages in tests and snapshots are fixed."""

    TITLE = "gpuroom"
    CSS = """
    Screen { layout: vertical; }
    #filter { display: none; height: 1; border: none; padding: 0 1; }
    #replay { height: 1; padding: 0 1; background: $warning 40%; text-style: bold; }
    #filter.-shown { display: block; }
    #logsearch { display: none; height: 1; border: none; padding: 0 1; }
    #logsearch.-shown { display: block; }
    #row1 { height: 14; }
    #row2 { height: 1fr; }
    #queue, #gpu, #log, #disk { border-top: solid $panel-lighten-2; }
    #queue:focus-within, #log:focus { border-top: solid $accent; }
    #gpu { width: 1fr; }
    #queue { width: 1fr; }
    #log { width: 2fr; }
    #disk { width: 1fr; }
    HostsTable:focus { background-tint: $accent 5%; }
    /* 80 columns: panes stack, the numbers that matter stay on screen. */
    .-narrow #row1 { layout: vertical; height: 11; }
    .-narrow #queue { width: 1fr; height: 5; }
    .-narrow #gpu { width: 1fr; height: 6; }
    .-narrow HostsTable { max-height: 5; }
    .-narrow #disk { width: 38; }
    /* 120-159 columns: the queue takes what the GPU table does not need (its throttle list
       is cut with "…"), so the command column is more than "pyt". */
    .-wide #queue { width: 13fr; }
    .-wide #gpu { width: 11fr; }
    /* Shown instead of the footer where its word per key no longer fits (on_resize). */
    #keyhint { display: none; dock: bottom; height: 1;
               background: $footer-background; color: $footer-foreground; }
    """
    HORIZONTAL_BREAKPOINTS = [  # noqa: RUF012 (App declares it as a plain list)
        (0, "-narrow"),
        (120, "-wide"),
        (160, "-widest"),
    ]
    BINDINGS: ClassVar[list[BindingType]] = [
        *(
            Binding(k.key, k.action, k.short or k.description, show=bool(k.short))
            for k in KEYS
            if k.action and k.action != "command_palette"
        ),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]
    COMMANDS: ClassVar = App.COMMANDS | {GpuroomCommands}

    def __init__(
        self,
        fleet: FleetAPI,
        *,
        clock: Callable[[], float] = time.time,
        spawn: Spawn = run_interactive_ssh,
        bell: bool = False,
        notify_command: list[str] | None = None,
        notify_url: str | None = None,
        renotify_s: float = DEFAULT_RENOTIFY_S,
        warnings: list[str] | None = None,
        replay: str | None = None,
    ) -> None:
        """``replay``: the recording's name when the fleet plays one; the room then says so
        on screen and refuses, at once, every key that needs a box."""
        super().__init__()
        self.fleet = fleet
        self.replay = replay
        self.clock = clock
        self._spawn = spawn
        self._warnings = list(warnings or ())  # said once the room is up (stderr is hidden)
        # The one monitor pipeline (tui/fleet/monitor.py), as `watch` and `export` use it.
        self.monitor = Monitor(
            fleet, renotify_s=renotify_s, notify_url=notify_url,
            notify_command=notify_command, clock=clock,
            tails=getattr(fleet, "log_tail", None),
            bell=self._ring if bell else None,
            warn=lambda line: self.notify(line, severity="warning"),
            run_command=run_user_command, deliver=self._deliver_alert)
        self._fleet_timer: Timer | None = None
        self._fleet_at = 0.0
        self._log_fed: tuple[str, object] | None = None
        self.selected_host: str | None = None
        self.host_filter = ""
        self._job_choice: dict[str, str] = {}  # host -> job the user picked
        self._gpu_sm: dict[str, dict[int, deque[float | None]]] = {}
        self._gpu_pw: dict[str, dict[int, deque[float | None]]] = {}
        self._history_at: dict[str, float | None] = {}
        self._box_history = BoxHistory()
        self._footer: Footer | None = None
        self._hint: Static | None = None

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Textual's own palette commands, less its Quit: KEYS has quit, with its key."""
        for command in super().get_system_commands(screen):
            if command.title != "Quit":
                yield command

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """Every toast is plain, inert text, whoever asks (widgets pass markup=True).

        Messages quote the box: its stderr, a job's name, a path. As markup, "[/]" in them
        raises and "[@click=app.quit]" becomes an action the user might click; raw, an escape
        sequence would reach the terminal.
        """
        del markup
        lines = (sanitize_line(line) for line in message.split("\n"))
        super().notify("\n".join(lines), title=sanitize_line(title), severity=severity,
                       timeout=timeout, markup=False)

    def _handle_exception(self, error: Exception) -> None:
        """Every exception nothing else caught: a handler's, a timer's, a render's, and a
        worker's (Textual wraps those in WorkerFailed).

        Textual's own version exits and prints a rich traceback, locals included, to the
        user's terminal. Here a GpuroomError is shown with its fix, anything else is a bug:
        its traceback goes to the state dir's log (gpuroom.tui.errors.report_bug) and the user
        sees "internal error: <one line>; details in <path>".
        A worker's failure ends only that worker, so it is a toast and the room goes on. Any
        other exception has stopped the message loop it was raised in (MessagePump breaks out
        of it), so the room cannot go on: it exits, printing that same line, not a traceback.
        """
        cause = error.error if isinstance(error, WorkerFailed) else error
        try:
            worker = get_current_worker()
            where = f"room worker {worker.group}: {worker.description}"
        except NoActiveWorker:
            where = "room"
        text = describe(cause, context=where)
        if isinstance(error, WorkerFailed) and self.is_running:
            self.notify(text, severity="error", timeout=30)
            return
        code = cause.exit_code if isinstance(cause, GpuroomError) else EXIT_INTERNAL
        self.exit(return_code=code, message=box_text(f"gpuroom: {text}"))
        # What Textual's version signals too: whoever waits for the screen to settle (Pilot)
        # stops waiting, as the loop that raised will never settle. Unlike Textual's, the
        # exception is not kept for Pilot to re-raise: the line above is the whole report.
        self._exception_event.set()

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        if self.replay is not None:
            yield Static(self._replay_text(), id="replay")
        yield DangerBanner(id="banner")
        yield Input(placeholder="filter hosts (enter keeps, esc clears)", id="filter")
        yield Input(placeholder="search the log (enter keeps, then n / N; esc clears)",
                    id="logsearch")
        yield HostsTable(id="hosts")
        with Horizontal(id="row1"):
            yield QueueTable(id="queue")
            yield GpuPanel(id="gpu")
        with Horizontal(id="row2"):
            yield LastErrorLine(id="logerror")
            yield LogTail(id="log")
            yield DiskPanel(id="disk")
        self._footer = Footer()
        self._hint = Static(box_text(key_hint()), id="keyhint")
        yield self._footer
        yield self._hint

    def on_resize(self) -> None:
        self._fit_footer()
        self.call_after_refresh(self._show_error_line)  # once the log pane has its new width

    def _fit_footer(self) -> None:
        """The footer, or where it would lose keys off its end (q quit went first), one line
        naming every key group (screens.key_hint)."""
        if self._footer is None or self._hint is None:
            return  # resized before compose
        hint = self.size.width < footer_width()
        self._footer.display = not hint
        self._hint.display = hint

    def on_mount(self) -> None:
        self._fit_footer()
        for warning in self._warnings:
            self.notify(warning, severity="warning", timeout=30)
        self.query_one("#queue", QueueTable).border_title = "queue"
        self.query_one("#disk", DiskPanel).border_title = "disk (df -h | df -i)"
        self._refresh_fleet_panes()
        hosts = self.fleet.hosts()
        if hosts:
            self._select(hosts[0].name)
        self.query_one(HostsTable).focus()
        self._run_fleet()
        self.set_interval(TICK_S, self._tick)

    def _replay_text(self) -> Text:
        return box_text(f"REPLAY of {self.replay or ''} at {fmt_clock(self.clock())} "
                        "(recorded time): read-only, nothing reaches a box")

    def _tick(self) -> None:
        """Once a second: a host that does not answer changes nothing the fleet would
        announce, yet its age grows and its next try comes closer; both are redrawn. A
        replay's clock moves on."""
        if self.replay is not None:
            self.query_one("#replay", Static).update(self._replay_text())
        self._reload_config()
        if all(h.state is LinkState.UP for h in self.fleet.hosts()):
            return
        self._schedule_fleet_panes()
        h = self.host(self.selected_host)
        if h is not None and h.state is not LinkState.UP:
            self._refresh_host_panes()

    def _reload_config(self) -> None:
        """An edited hosts.toml takes effect in the room (a stat a tick; read when it
        changed); a file that does not validate is said, and the old one stays in use."""
        reload = self.fleet.reload_config()
        if reload is None:
            return
        self.notify(reload.text, severity="error" if reload.error else "information",
                    timeout=30 if reload.error else 8)
        if reload.error is None:
            names = [h.name for h in self.fleet.hosts()]
            if self.selected_host not in names and names:
                self._select(names[0])
            self._schedule_fleet_panes()

    @work(group="fleet")
    async def _run_fleet(self) -> None:
        # A bug here leaves the worker for _handle_exception, like every worker's.
        try:
            await self.fleet.run(self._fleet_changed)
        except GpuroomError as exc:
            self.notify(with_fix(f"fleet polling stopped: {exc.message}",
                                 exc.fix or "check the hosts config, then restart"),
                        severity="error", timeout=30)

    @property
    def findings_watch(self) -> FleetWatch:
        """The doctor's and the clocks' memory, kept by the monitor."""
        return self.monitor.watch

    def _fleet_changed(self, host: str) -> None:
        """Called by the fleet in the event loop after every poll outcome. The doctor sees
        each outcome here, before HostChanged notices merge on a busy screen."""
        self.monitor.observe(host)
        self.post_message(HostChanged(host))

    def _ring(self) -> None:
        self.bell()  # looked up at each ring: a test may replace it

    @work(group="notify")
    async def _deliver_alert(self, alert: Alert) -> None:
        await self.monitor.send(alert)

    # ------------------------------------------------------------------ state -> panes

    def host(self, name: str | None) -> HostState | None:
        return next((h for h in self.fleet.hosts() if h.name == name), None)

    def _visible_hosts(self) -> list[HostState]:
        needle = self.host_filter.lower()
        return [h for h in self.fleet.hosts() if needle in h.name.lower()]

    def _schedule_fleet_panes(self) -> None:
        """Redraw the fleet-wide panes now, or at most every FLEET_PANES_EVERY_S on a big
        fleet: each redraw is O(hosts), and 200 hosts polled every 5 s change 40 times a
        second."""
        if len(self.fleet.hosts()) <= COALESCE_ABOVE_HOSTS:
            self._refresh_fleet_panes()
            return
        if self._fleet_timer is not None:
            return
        wait = self._fleet_at + FLEET_PANES_EVERY_S - time.monotonic()
        if wait <= 0:
            self._refresh_fleet_panes()
        else:
            self._fleet_timer = self.set_timer(wait, self._flush_fleet_panes)

    def _flush_fleet_panes(self) -> None:
        self._fleet_timer = None
        self._refresh_fleet_panes()

    def _refresh_fleet_panes(self) -> None:
        self._fleet_at = time.monotonic()
        now = self.clock()
        rows = []
        severities: dict[str, list[str]] = {}
        findings = self.monitor.findings()
        for f in findings:
            severities.setdefault(f.host, []).append(f.severity)
        for h in self._visible_hosts():
            snap = h.view
            billed = billed_seconds(snap, now, h.rented_at) if snap is not None else None
            rows.append(host_row(h, now, billed=billed_cell(h.price_per_hour, billed),
                                 findings=severities.get(h.name, ()),
                                 box=self._box_history.view(h.name, snap)))
        self.query_one(HostsTable).hosts = tuple(rows)
        hosts = self.fleet.hosts()
        # Findings and clocks once per redraw: banner and alerts read the same lists.
        clocks = self.monitor.clocks(hosts, now)
        # A failed job the doctor did not explain still makes the banner, and alerts.
        failed = self.monitor.failed(findings, now)
        self.monitor.alert(findings, clocks, failed)
        # Every item, not the first three of one source: the banner cuts and counts the rest.
        self.query_one(DangerBanner).items = fleet_dangers(
            banner_lines(findings, clocks, limit=None), failed)

    def _record_gpu_history(self, h: HostState) -> None:
        # One point per good snapshot, however often the host is redrawn.
        if h.last_ok is None or self._history_at.get(h.name) == h.last_ok:
            return
        self._history_at[h.name] = h.last_ok
        self._box_history.observe(h.name, h.view)
        sm = self._gpu_sm.setdefault(h.name, {})
        pw = self._gpu_pw.setdefault(h.name, {})
        for g in gpu_rows(h.view):
            sm.setdefault(g.index, deque(maxlen=HISTORY_LEN)).append(g.sm_mhz)
            pw.setdefault(g.index, deque(maxlen=HISTORY_LEN)).append(g.power_w)

    def _refresh_host_panes(self) -> None:
        h = self.host(self.selected_host)
        queue = self.query_one(QueueTable)
        if h is None:
            queue.host = ""
            queue.jobs = ()
            self.query_one(GpuPanel).view = None
            self.query_one(DiskPanel).disks = ()
            self.query_one(LogTail).show("")
            return
        now = self.clock()
        problem = link_problem(h, now)
        lines = problem.lines() if problem is not None else ()
        queue.host = h.name
        queue.border_title = box_text(f"queue {h.name}" + (f" ({link_text(h, now)})"
                                                           if problem else ""))
        queue.jobs = tuple(job_rows(h, now))
        rows = tuple(gpu_rows(h.view))
        sm, pw = self._gpu_sm.get(h.name, {}), self._gpu_pw.get(h.name, {})
        self.query_one(GpuPanel).view = GpuView(
            host=h.name,
            rows=rows,
            absence=gpu_absence(h.view),
            sm_history=tuple(tuple(sm.get(g.index, ())) for g in rows),
            power_history=tuple(tuple(pw.get(g.index, ())) for g in rows),
            problem=lines,
            processes=tuple(gpu_processes(h.view)),
            box=self._box_history.view(h.name, h.view) if h.view is not None else None,
        )
        disk = self.query_one(DiskPanel)
        disk.disks = tuple(disk_rows(h.view))
        disk.problem = lines
        self._restore_job_cursor(h.name)
        self._refresh_log()

    def _restore_job_cursor(self, host: str) -> None:
        queue = self.query_one(QueueTable)
        wanted = self._job_choice.get(host)
        ids = [j.id for j in queue.jobs]
        if wanted not in ids:
            # Default to what the user most likely wants to read: the running job, else the
            # job that failed.
            wanted = next((j.id for j in queue.jobs if j.state == "running"), None) or next(
                (j.id for j in queue.jobs if j.level == "crit"), None
            )
        if wanted in ids:
            queue.move_cursor(row=ids.index(wanted), animate=False)

    def _refresh_log(self) -> None:
        log = self.query_one(LogTail)
        h = self.host(self.selected_host)
        job = self.query_one(QueueTable).selected_job
        if h is None or job is None or job.pending == "add":
            log.show("")
            return
        source = f"{h.name}/{job.id}"
        if log.source != source:
            log.show(source)
            # Any job's log, ended or not, starts with its tail: the fleet asks the box now.
            key = log_key(h.view, job.id)
            if key is not None:
                self.fleet.show_log(h.name, key)
        # One snapshot's chunk is decoded once, however often the panes redraw.
        if self._log_fed == (source, h.snapshot) and log.cursor is not None:
            return
        self._log_fed = (source, h.snapshot)
        chunk = log_chunk(h.view, job.id)
        if chunk is not None:
            log.append_chunk(chunk)
        self._show_error_line()

    def _show_error_line(self) -> None:
        """The log's last error line in full below the panes, where the log pane cuts it."""
        log = self.query_one(LogTail)
        width = log.scrollable_content_region.width
        line = last_error_line(list(log.lines), width) if log.source and width else None
        self.query_one(LastErrorLine).line = f"{log.source}: {line}" if line else ""

    def _select(self, host: str) -> None:
        self.selected_host = host
        self._refresh_host_panes()

    # ------------------------------------------------------------------ messages

    @on(HostChanged)
    def _host_changed(self, message: HostChanged) -> None:
        h = self.host(message.host)
        if h is not None:
            self._record_gpu_history(h)
        self._schedule_fleet_panes()
        if self.selected_host is None and self.fleet.hosts():
            self._select(self.fleet.hosts()[0].name)
        elif message.host == self.selected_host:
            self._refresh_host_panes()

    @on(HostsTable.Selected)
    def _host_selected(self, message: HostsTable.Selected) -> None:
        self._select(message.host)

    @on(QueueTable.Selected)
    def _job_selected(self, message: QueueTable.Selected) -> None:
        if message.host:
            if self._job_choice.get(message.host) == message.job_id and \
                    self.query_one(LogTail).source == f"{message.host}/{message.job_id}":
                return  # the table re-announces the row it kept; the log is already there
            self._job_choice[message.host] = message.job_id
        self._refresh_log()

    @on(LogTail.OlderWanted)
    def _older_wanted(self, message: LogTail.OlderWanted) -> None:
        h = self.host(self.selected_host)
        job = self.query_one(QueueTable).selected_job
        if h is None or job is None or message.source != f"{h.name}/{job.id}":
            return
        key = log_key(h.view, job.id)
        if key is not None:
            self._fetch_older(h.name, job.id, key, message.start)

    @work(exclusive=True, group="log")
    async def _fetch_older(self, host: str, job_id: str, key: str, end: int) -> None:
        try:
            view = await self.fleet.log_before(host, key, end)
        except GpuroomError as exc:
            self._failed(f"reading older log of {job_id}", host, exc,
                         "check the host is UP (r polls now), then scroll up again")
            return
        log = self.query_one(LogTail)
        if log.source != f"{host}/{job_id}":
            return  # the user moved on
        chunk = chunk_of(job_id, view)
        if chunk is None:
            log.no_older("not in this recording")
        else:
            log.prepend_chunk(chunk)

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.host_filter = event.value
        self._refresh_fleet_panes()

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self) -> None:
        self.query_one(HostsTable).focus()

    @on(LogTail.SearchWanted)
    def _log_search_wanted(self, message: LogTail.SearchWanted) -> None:
        box = self.query_one("#logsearch", Input)
        box.value = message.search
        box.add_class("-shown")
        box.focus()

    @on(Input.Changed, "#logsearch")
    def _log_search_changed(self, event: Input.Changed) -> None:
        self.query_one(LogTail).search = event.value  # matches light up as the user types

    @on(Input.Submitted, "#logsearch")
    def _log_search_submitted(self) -> None:
        """Enter keeps the search and goes to a match: on a followed log the newest one (the
        last in view or above it), on a paused one the first from the view's top down."""
        self.query_one("#logsearch", Input).remove_class("-shown")
        log = self.query_one(LogTail)
        log.focus()
        log.action_next_match(-1 if log.follow else 1)

    def _close_log_search(self) -> None:
        box = self.query_one("#logsearch", Input)
        box.value = ""
        box.remove_class("-shown")
        log = self.query_one(LogTail)
        log.search = ""
        log.focus()

    # ------------------------------------------------------------------ actions

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("-shown")
        box.focus()

    def action_clear_filter(self) -> None:
        if self.focused is self.query_one("#logsearch", Input):
            self._close_log_search()  # esc in the log's search box clears the search
            return
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("-shown")
        self.host_filter = ""
        self._refresh_fleet_panes()
        self.query_one(HostsTable).focus()

    def action_toggle_follow(self) -> None:
        log = self.query_one(LogTail)
        log.follow = not log.follow

    def action_toggle_processes(self) -> None:
        gpu = self.query_one(GpuPanel)
        gpu.show_processes = not gpu.show_processes

    def _recorded(self, verb: str) -> bool:
        """True (and said at once, before any dialog) when the room plays a recording: no
        key that needs a box can act on one (STYLE: replay is read-only by construction)."""
        if self.replay is None:
            return False
        self.notify(f"cannot {verb}: this is a recording ({sanitize_line(self.replay)}), "
                    "there is no box to act on. Fix: open the room on the live hosts "
                    "(gpuroom) to act", severity="warning")
        return True

    def _selected_job(self, verb: str) -> tuple[HostState, JobRow] | None:
        h = self.host(self.selected_host)
        job = self.query_one(QueueTable).selected_job
        if h is None or job is None or job.pending == "add":
            where = f"on {h.name}" if h else "(no host selected: enter on a host)"
            self.notify(f"nothing to {verb}: no job selected {where}", severity="warning")
            return None
        return h, job

    def action_kill(self) -> None:
        if self._recorded("kill a job"):
            return
        picked = self._selected_job("kill")
        if picked is None:
            return
        h, job = picked
        if job.state in FINAL_STATES:
            self.notify(f"job {job.id} on {h.name} already {job.state}", severity="warning")
            return
        label = f"{job.id} ({job.name})" if job.name else job.id
        question = f"Kill job {label} on {h.name}?\n{job.command}"

        def answered(yes: bool | None) -> None:
            if yes:
                self._send_kill(h.name, job.id)

        self.push_screen(ConfirmScreen(question), answered)

    def action_relaunch(self) -> None:
        if self._recorded("relaunch a job"):
            return
        picked = self._selected_job("relaunch")
        if picked is None:
            return
        h, job = picked
        label = f"{job.id} ({job.name})" if job.name else job.id
        seen = h.view.job(job.id) if h.view is not None else None
        box_now = h.view.host.time if h.view is not None else None
        question = (f"Relaunch job {label} on {h.name}?\n{job.command}\n"
                    f"{resume_text(seen, box_now)}")

        def answered(yes: bool | None) -> None:
            if yes:
                self._send_relaunch(h.name, job.id, job.attempt)

        self.push_screen(ConfirmScreen(question, yes="Relaunch"), answered)

    def action_add_job(self) -> None:
        if self._recorded("add a job"):
            return
        h = self.host(self.selected_host)
        if h is None:
            self.notify("no host selected: enter on a host first", severity="warning")
            return

        def submitted(request: AddJobRequest | None) -> None:
            if request is not None:
                self._send_add(h.name, request)

        # A job asking for a GPU on a box without one fails at once as unschedulable.
        no_gpu = h.view is not None and not gpu_rows(h.view)
        self.push_screen(AddJobScreen(h.name, gpus=0 if no_gpu else 1), submitted)

    def action_refresh(self) -> None:
        if self._recorded("poll a host"):
            return
        self._send_refresh(self.selected_host)

    def action_ssh(self) -> None:
        if self._recorded("ssh to a host"):
            return
        host = self.selected_host
        if host is None:
            self.notify("no host selected: enter on a host first", severity="warning")
            return
        argv = self.fleet.ssh_argv(host)
        if argv is None:
            self.notify(f"{host} is this machine: no ssh needed", severity="information")
            return
        try:
            with self.suspend():
                ended = self._spawn(argv)
        except SuspendNotSupported:
            self.notify(
                f"cannot hand the terminal to ssh here. Run it yourself: {shlex.join(argv)}",
                severity="error",
            )
            return
        except OSError as exc:
            self.notify(
                f"ssh to {host} did not start: {exc}. Fix: install OpenSSH or check PATH.",
                severity="error",
            )
            return
        rc, said = (ended.rc, ended.stderr_tail) if isinstance(ended, SshExit) else (ended, "")
        if rc:
            # The room redrew over what ssh printed: say it again, it is the cause.
            self.notify(f"ssh {host} exited with status {rc}" + (f": {said}" if said else ""),
                        severity="warning", timeout=30)

    def action_detail(self) -> None:
        h = self.host(self.selected_host)
        if h is None:
            self.notify("no host selected: enter on a host first", severity="warning")
            return
        queue = self.query_one(QueueTable)
        job = queue.selected_job
        if queue.has_focus and job is not None:
            self.push_screen(DetailScreen(f"job {h.name}/{job.id}", job_detail(h, job)))
        else:
            self.push_screen(DetailScreen(f"host {h.name}", host_detail(h, self.clock())))

    def action_job_detail(self) -> None:
        """The selected job in full, from the box (queue show); a replay shows its record."""
        picked = self._selected_job("show")
        if picked is None:
            return
        h, job = picked
        recorded = h.view.job(job.id) if h.view is not None else None
        queue = recorded.queue if recorded is not None else "default"
        self.push_screen(JobDetailScreen(
            h.name, job.id, partial(self.fleet.queue_show, h.name, job.id, queue), self.clock,
            lineage=h.moves.get(job.id, "")))

    @on(QueueTable.Opened)
    def _job_opened(self, message: QueueTable.Opened) -> None:
        if message.host == self.selected_host:
            self.action_job_detail()

    def action_findings(self) -> None:
        findings = self.monitor.findings()
        clocks = self.monitor.clocks()

        def closed(clear: bool | None) -> None:
            if clear:
                # Failed jobs are acknowledged as `gpuroom doctor --ack` does (acks.json).
                n = self.monitor.clear()
                self.notify(f"cleared {n} remembered finding(s)")
                self._refresh_fleet_panes()

        failed = self.monitor.failed(findings)
        self.push_screen(FindingsScreen(findings, clocks, failed), closed)

    def action_pull(self) -> None:
        if self._recorded("pull outputs"):
            return
        h = self.host(self.selected_host)
        if h is None:
            self.notify("no host selected: enter on a host first", severity="warning")
            return
        job = self.query_one(QueueTable).selected_job
        self._send_pull(h.name, job.id if job is not None and job.pending != "add" else None)

    def action_gate(self) -> None:
        if self._recorded("check the teardown gate"):
            return
        if self.selected_host is None:
            self.notify("no host selected: enter on a host first", severity="warning")
            return
        self._check_gate(self.selected_host)

    # ------------------------------------------------------------------ workers (network)

    @work(exclusive=True, group="pull")
    async def _send_pull(self, host: str, job: str | None) -> None:
        queue = self.query_one(QueueTable)
        what = f"{host}/{job}" if job else f"{host} (every job)"
        self.notify(f"pulling {what}…")
        last = [0.0]

        def progress(jid: str, p: Progress) -> None:
            now = time.monotonic()
            if now - last[0] < PROGRESS_EVERY_S and p.done < p.total:
                return
            last[0] = now
            queue.border_subtitle = box_text(
                f"pull {jid}: {fmt_progress(p.done, p.total, p.rate_bps, p.eta_s)}")

        try:
            results = await self.fleet.pull(host, job, progress)
        except GpuroomError as exc:
            self._failed(f"pull of {what}", host, exc,
                         "check the host is UP; a rerun resumes where it stopped")
            return
        finally:
            queue.border_subtitle = ""
        if not results:
            self.notify(f"{host}: no job has a checkpoint dir to pull", severity="warning")
            return
        bad = [(jid, r) for jid, r in results if not r.ok]
        files = sum(len(r.files) for _, r in results)
        # Home, but the load check (an extra) refused or failed: each line carries its fix.
        unloaded = [(jid, f) for jid, r in results for f in r.load_failed]
        if bad:
            detail = "; ".join(sanitize_line(line) for jid, r in bad
                               for line in result_lines(jid, r)[:3])
            self.notify(with_fix(f"pull from {host}: {len(bad)} job(s) not verified: {detail}",
                                 pull_fix(host, results)), severity="error", timeout=30)
        elif unloaded:
            detail = "; ".join(sanitize_line(f"{jid}/{f.path}: {f.load_error}")
                               for jid, f in unloaded[:2])
            self.notify(f"pulled {files} file(s) from {host}, all exact copies (T shows the "
                        f"gate); {len(unloaded)} failed the load check: {detail}",
                        severity="warning", timeout=30)
        else:
            self.notify(f"pulled {files} file(s) of {len(results)} job(s) from {host}, all "
                        "verified; T shows the gate", timeout=10)

    @work(exclusive=True, group="gate")
    async def _check_gate(self, host: str) -> None:
        self.notify(f"checking the teardown gate of {host}…")
        try:
            result = await self.fleet.gate(host)
        except GpuroomError as exc:
            self._failed("the gate check", host, exc, "check the host is UP, then T again")
            return
        argv = self.fleet.teardown_argv(host)

        def answered(run: bool | None) -> None:
            if run and argv and result.safe:
                self._run_teardown(result, argv)

        self.push_screen(GateScreen(result, argv), answered)

    @work(exclusive=True, group="teardown")
    async def _run_teardown(self, result: GateResult, argv: list[str]) -> None:
        host = result.host
        self.notify(f"running your teardown_command for {host}: {shlex.join(argv)}")
        try:
            rc, out = await run_user_command(argv, TEARDOWN_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as exc:
            self._failed("teardown_command", host, exc,
                         "run it yourself; check [hosts.NAME] teardown_command")
            return
        # Its last line, or say there was none (a bare "finished:" read as cut off); a line
        # of only escape sequences is none once they are stripped.
        lines = [sanitize_line(line).strip()
                 for line in out.decode(errors="replace").splitlines()]
        tail = next((line for line in reversed(lines) if line), "no output")
        if rc:
            self.notify(f"teardown_command for {host} exited {rc} ({tail}). "
                        "Fix: the box may still bill; check your provider's console",
                        severity="error", timeout=60)
        else:
            self.notify(f"teardown_command for {host} finished (exit 0): {tail}", timeout=30)

    def _mark(self, host: str, action: PendingAction) -> None:
        self.fleet.mark_pending(host, action)
        if host == self.selected_host:
            self._refresh_host_panes()

    def _unmark(self, host: str, action: PendingAction) -> None:
        self.fleet.drop_pending(host, action)
        if host == self.selected_host:
            self._refresh_host_panes()

    def _failed(self, what: str, host: str, exc: GpuroomError | OSError | asyncio.TimeoutError,
                fix: str) -> None:
        """Say what failed on which host and why, with one fix: the error's own when it has
        one (it knows more), else ``fix``. Bugs never come here (see _handle_exception)."""
        if isinstance(exc, GpuroomError):
            why, fix = exc.message, exc.fix or fix
        else:  # the user's own command (teardown_command): the OS said no
            why = str(exc) or type(exc).__name__
        self.notify(with_fix(f"{what} on {host} failed: {why}", fix), severity="error",
                    timeout=15)

    async def _pended(self, host: str, action: PendingAction, call: Awaitable[None],
                      what: str, fix: str) -> None:
        """Show ``action`` as pending while ``call`` runs; on failure take it back and say
        why. On success the fleet keeps it until a poll confirms it (principle 3)."""
        self._mark(host, action)
        try:
            await call
        except GpuroomError as exc:
            self._unmark(host, action)
            self._failed(what, host, exc, fix)
        except Exception:
            self._unmark(host, action)  # a bug: nothing is on its way; _handle_exception says so
            raise

    @work(exclusive=True, group="kill")
    async def _send_kill(self, host: str, job_id: str) -> None:
        await self._pended(host, PendingAction("kill", job_id, self.clock()),
                           self.fleet.queue_kill(host, job_id),
                           f"kill of job {job_id}",
                           "check the host is UP (r polls now), then K again")

    @work(exclusive=True, group="relaunch")
    async def _send_relaunch(self, host: str, job_id: str, attempt: int | None) -> None:
        await self._pended(host, PendingAction("relaunch", job_id, self.clock(),
                                               attempt=attempt),
                           self.fleet.queue_relaunch(host, job_id), f"relaunch of job {job_id}",
                           "check the host is UP (r polls now), then R again")

    @work(exclusive=True, group="add")
    async def _send_add(self, host: str, request: AddJobRequest) -> None:
        label = request.name or fmt_cut(shlex.join(request.argv), 30)
        # Shown at once; its id is known only when the box answers.
        sent = PendingAction("add", None, self.clock(), label=label)
        self._mark(host, sent)
        try:
            job_id = await self.fleet.queue_add(
                host, request.argv, name=request.name, gpus=request.gpus,
                retries=request.retries, cwd=request.cwd, ckpts=request.ckpts,
            )
        except GpuroomError as exc:
            self._unmark(host, sent)
            self._failed(f"adding job {label!r}", host, exc,
                         "check the host is UP and the command, then a again")
            return
        except Exception:
            self._unmark(host, sent)  # a bug: nothing is on its way; _handle_exception says so
            raise
        self._unmark(host, sent)
        self._mark(host, PendingAction("add", job_id, self.clock(), label=label))

    @work(exclusive=True, group="refresh")
    async def _send_refresh(self, host: str | None) -> None:
        try:
            await self.fleet.refresh(host)
        except GpuroomError as exc:
            self._failed("poll", host or "the fleet", exc, "see the host's state for the cause")
