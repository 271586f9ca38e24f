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

from gpuroom.profiles import ProfileError, load_profile
from gpuroom.remote.queue_events import LIVE_STATES
from gpuroom.tui.config import Config, ConfigError, HostConfig, load
from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.fleet.api import ConfigReload
from gpuroom.tui.fleet.intent import Intent, check_job_id, move_target_refusal
from gpuroom.tui.fleet.mirror import (
    LIST_DEADLINE_S,
    Mirror,
    MirrorOutcome,
    MirrorState,
    committed,
)
from gpuroom.tui.fleet.move import Lineage, lineage_text, move_job, moved_away
from gpuroom.tui.fleet.outputs import PullRecords, check_gate, pull_jobs, pull_root
from gpuroom.tui.fleet.pending import PendingLedger
from gpuroom.tui.fleet.replay import RecordingError
from gpuroom.tui.model import HeldFailover, HostState, LinkState
from gpuroom.tui.present.slurm import queue_backend
from gpuroom.tui.rules.drift import tree_paths_to_read
from gpuroom.tui.rules.money import dead_runner_queues
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.snapshot import Job as JobView
from gpuroom.tui.snapshot import LogChunk as LogChunkView
from gpuroom.tui.snapshot import Snapshot as SnapshotView
from gpuroom.tui.snapshot import (
    for_host,
    load_answer,
    queue_identity,
    read_log_doc,
    read_queue_view,
)
from gpuroom.tui.transport.link import HostKeyError, HostLink, LinkError
from gpuroom.tui.transport.localcode import read_tree
from gpuroom.tui.transport.pull import take_manifest

if TYPE_CHECKING:
    from gpuroom.tui.rules.gate import GateResult
    from gpuroom.tui.transport.pull import Progress, PullResult

MAX_CONCURRENT_POLLS = 16
RUNNER_RETRY_S = 60.0
BACKOFF_CAP_S = 60.0
FAILOVER_TICK_S = 1.0  # how often hosts that stopped answering are checked for failover
# The tail of a log the room starts showing (a poll stays bounded: the helper caps a chunk at
# 64 KiB too), and how much more one scroll back to its top fetches.
LOG_TAIL_BYTES = 64 << 10
LOG_OLDER_BYTES = 64 << 10
LOG_TAIL_LINES = 2000  # an ended job's tail for the log rules: at most LOG_TAIL_BYTES of it


def backoff_delay(failures: int, base_s: float, cap_s: float = BACKOFF_CAP_S,
                  rng: random.Random | None = None) -> float:
    """Capped exponential backoff with jitter: many hosts failing together spread out."""
    raw = min(cap_s, base_s * 2.0 ** max(0, failures - 1))
    jitter = rng.uniform(0.5, 1.0) if rng is not None else random.uniform(0.5, 1.0)
    return raw * jitter


def _configured(state: HostState, host: HostConfig) -> HostState:
    """``state`` with what hosts.toml says of ``host`` (at start, and after a reload)."""
    state.profile, state.price_per_hour, state.rented_at = (host.profile, host.price_per_hour,
                                                            host.rented_at)
    state.stall_after_s, state.cpu_training_after_s = (host.stall_after_s,
                                                       host.cpu_training_after_s)
    state.mtbf_s, state.spot, state.code, state.error = (host.mtbf_s, host.spot, host.code,
                                                         host.error)
    return state


def _mtime_ns(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _close_soon(link: HostLink) -> None:
    """Close a link no host uses any more, without waiting for it."""
    task = asyncio.get_running_loop().create_task(link.close())
    _CLOSING.add(task)
    task.add_done_callback(_CLOSING.discard)


_CLOSING: set[asyncio.Task[None]] = set()  # referenced until done: the loop keeps weak refs


def watched_mounts(host: HostConfig) -> list[str]:
    """The host's own mounts, then each mount its profile names by a path the box can
    statvfs (absolute or ~; "unknown" and $VAR paths are not), so the volume that must
    survive a stop is watched without listing it in hosts.toml."""
    out = list(host.mounts)
    try:
        profile = load_profile(host.profile)
    except ProfileError:
        return out  # "local" and unknown names: hosts.toml says why elsewhere
    for m in profile.mounts:
        if m.path.startswith(("/", "~")) and "$" not in m.path and m.path not in out:
            out.append(m.path)
    return out


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


def _queue_refusal(stdout: bytes, host: str) -> tuple[str, str | None] | None:
    """(error, fix) of a queue verb's JSON answer ``{"ok": false, ...}``, made inert, the
    fix naming ``host``."""
    try:
        doc = load_answer(stdout)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("ok") is not False or not doc.get("error"):
        return None
    fix = doc.get("fix")
    return sanitize_line(str(doc["error"])), \
        sanitize_line(for_host(str(fix), host)) if fix else None


class Fleet(PendingLedger):
    """Hosts, their links and states. Implements the room's FleetAPI."""

    def __init__(self, config: Config, *, clock: Callable[[], float] = time.time,
                 recorder: Recorder | None = None, restart_runners: bool = False,
                 mirror: bool = False,
                 on_mirror: Callable[[MirrorOutcome], None] | None = None) -> None:
        self.config = config
        self.clock = clock
        self.recorder = recorder
        # The room and `record` start a queue's dead runner when a poll shows one (GEN6);
        # the one-shot verbs (status, doctor, probe) only look.
        self.restart_runners = restart_runners
        self._runner_tries: dict[tuple[str, str], float] = {}
        self._hosts: dict[str, HostConfig] = {h.name: h for h in config.effective_hosts()}
        self._states: dict[str, HostState] = {
            h.name: _configured(HostState(name=h.name), h) for h in self._hosts.values()}
        self._links: dict[str, HostLink] = {h.name: self._new_link(h)
                                            for h in self._hosts.values()}
        self._mounts = {h.name: watched_mounts(h) for h in self._hosts.values()}
        self._cursors: dict[str, dict[str, Any]] = {h: {} for h in self._hosts}
        self._failures: dict[str, int] = dict.fromkeys(self._hosts, 0)
        # host -> the job key ("queue/id") whose log tail the next poll asks for.
        self._tail_wanted: dict[str, str] = {}
        self._sem = asyncio.Semaphore(MAX_CONCURRENT_POLLS)
        self._wake: dict[str, asyncio.Event] = {}
        self._pull_records = PullRecords()
        self._loops: dict[str, asyncio.Task[None]] = {}  # host -> its poll loop, while run runs
        self._loops_changed = asyncio.Event()
        self._config_mtime = _mtime_ns(config.path)
        self._on_change: Callable[[str], None] | None = None
        self._on_mirror = on_mirror
        self._failover_tries: dict[tuple[str, str], float] = {}  # (host, job): last try
        # (host, job): (boot id, newest checkpoint file as the poll saw it) when last asked
        self._wipe_checked: dict[tuple[str, str], tuple[str, str | None, float | None]] = {}
        # Only the long-running fleets (the room, `gpuroom watch`) mirror; a one-shot verb's
        # poll would start a pull it then cancels.
        self.mirror = Mirror(self._hosts, self._links, config.settings,
                             on_outcome=self._mirrored, clock=clock) if mirror else None
        # What the user added from here (tui/fleet/intent.py): what mirror, move and failover
        # may act on, and the command they carry.
        self.intents = (self.mirror.state if self.mirror is not None else MirrorState()).intents
        # A reboot this process saw for itself, the evidence "came back wiped" needs beyond
        # the box's word: host -> (boot id, clock of the last good poll under it); the hosts
        # whose polls failed since their last good one; host -> the boot it was seen come
        # back into after such an outage, its uptime shorter than the outage.
        self._boots: dict[str, tuple[str, float]] = {}
        self._unreachable: set[str] = set()
        self._witnessed_boot: dict[str, str] = {}

    def _new_link(self, host: HostConfig) -> HostLink:
        return HostLink(host, ssh_config=self.config.ssh_config_path(),
                        mode=self.config.settings.poll_mode)

    def hosts(self) -> list[HostState]:
        return list(self._states.values())

    def reload_config(self) -> ConfigReload | None:
        """hosts.toml read again when its mtime changed since it was last read (None when
        it did not), validated as at start. A file that does not validate changes nothing:
        the old config stays and the reload carries the error to show."""
        mtime = _mtime_ns(self.config.path)
        if mtime == self._config_mtime:
            return None
        self._config_mtime = mtime
        try:
            new = load(self.config.path)
        except ConfigError as exc:
            return ConfigReload(error=str(exc))
        return self._apply_config(new)

    def _apply_config(self, new: Config) -> ConfigReload:
        """Hosts added get a state, a link and a poll loop; hosts removed lose them; a host
        whose table changed keeps its last snapshot and gets a new link. Settings are the new
        file's from the next poll on (the alert settings are the room's, read at its start)."""
        old_ssh = self.config.ssh_config_path()
        self.config = new
        if self.mirror is not None:
            self.mirror.settings = new.settings
        wanted = {h.name: h for h in new.effective_hosts()}
        removed = [n for n in self._hosts if n not in wanted]
        added = [n for n in wanted if n not in self._hosts]
        changed = [n for n in wanted if n in self._hosts and
                   (wanted[n] != self._hosts[n] or new.ssh_config_path() != old_ssh)]
        for name in removed:
            loop = self._loops.pop(name, None)
            if loop is not None:
                loop.cancel()
            _close_soon(self._links.pop(name))
            for table in (self._hosts, self._states, self._mounts, self._cursors,
                          self._failures, self._wake, self._tail_wanted):
                table.pop(name, None)
        for name in added + changed:
            host = wanted[name]
            self._hosts[name] = host
            self._states[name] = _configured(self._states.get(name) or HostState(name=name),
                                             host)
            old = self._links.get(name)
            if old is not None:
                _close_soon(old)
            self._links[name] = self._new_link(host)
            self._mounts[name] = watched_mounts(host)
            self._cursors.setdefault(name, {})
            self._failures.setdefault(name, 0)
        if self._on_change is not None:
            for name in added:
                self._loops[name] = asyncio.create_task(self._host_loop(name, self._on_change))
            for name in removed + added + changed:
                self._on_change(name)
        self._loops_changed.set()
        return ConfigReload(added=tuple(added), removed=tuple(removed), changed=tuple(changed))

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
        request: dict[str, Any] = {"mounts": self._mounts[name]}
        request.update(self._cursors[name])
        wanted = self._tail_wanted.get(name)
        if wanted is not None:
            # A job the room starts showing gets its tail, whatever its state: the probe
            # ships bytes on its own only for running jobs and jobs with a cursor.
            request["logs"] = {**request.get("logs", {}), wanted: {"tail": LOG_TAIL_BYTES}}
        return request

    def show_log(self, host: str, job_key: str) -> None:
        """The room starts showing ``job_key``'s log on ``host``: poll now for its tail."""
        if host not in self._states:
            return
        self._tail_wanted[host] = job_key
        wake = self._wake.get(host)
        if wake is not None:
            wake.set()

    async def log_before(self, host: str, job_key: str, end: int) -> LogChunkView | None:
        """The ``LOG_OLDER_BYTES`` of the job's log before offset ``end``, from a line start."""
        queue, _, job_id = job_key.rpartition("/")
        out = await self._queue_call(host, "logs", "--queue", queue or "default",
                                     "--end", str(end), "--max-bytes", str(LOG_OLDER_BYTES),
                                     "--json", "--", job_id)
        try:
            return read_log_doc(load_answer(out))
        except ValueError:
            raise LinkError(host, "queue logs answered something that is not JSON") from None

    async def log_tail(self, host: str, job_key: str) -> LogChunkView | None:
        """The last ``LOG_TAIL_BYTES`` of an ended job's log (one poll ships none of it)."""
        queue, _, job_id = job_key.rpartition("/")
        out = await self._queue_call(host, "logs", "--queue", queue or "default",
                                     "--lines", str(LOG_TAIL_LINES), "--max-bytes",
                                     str(LOG_TAIL_BYTES), "--json", "--", job_id)
        try:
            return read_log_doc(load_answer(out))
        except ValueError:
            raise LinkError(host, "queue logs answered something that is not JSON") from None

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
        wanted = self._tail_wanted.get(name)
        if wanted is not None and wanted in logs:
            del self._tail_wanted[name]  # the tail arrived; what follows comes by the cursor

    async def poll_host(self, name: str) -> HostState:
        """Poll one host once and update its state; never raises for a link failure."""
        state = self._states[name]
        link = self._links[name]
        async with self._sem:
            state.last_try = self.clock()
            try:
                snapshot = await link.poll(self.request_for(name))
            except LinkError as exc:
                if name in self._boots:
                    self._unreachable.add(name)
                self._failures[name] += 1
                state.polls_failed += 1
                # Its text may quote the box (stderr, a disconnect reason): made inert once here.
                state.error = sanitize_line(str(exc))
                state.host_key = None if not isinstance(exc, HostKeyError) else \
                    "changed" if exc.changed else "unknown"
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
                state.host_key = None
                state.snapshot = snapshot
                state.last_ok = state.last_try
                view = state.view  # parsed here, once; the panes read the same view
                assert view is not None
                self._note_boot(name, view, state.last_try)
                self._advance_cursors(name, view)
                self.retire_confirmed(state)
                # The user's tree, read (git, off the loop) only while the U42 rule has a
                # running job to compare it with.
                code, paths = state.code, tree_paths_to_read(view)
                if code and paths is not None:
                    state.local_code = await asyncio.to_thread(read_tree, Path(code), paths)
                else:
                    state.local_code = None
                if self.mirror is not None:
                    state.mirrored = self.mirror.homes(name, view)
                    self.mirror.observe(name, view)
        if self.mirror is not None and state.state is LinkState.UP and state.view is not None:
            # Before any dead runner is restarted: a job moved away while this host was
            # unreachable must not run here again (its kill is the runner's first event).
            await self._fence(name, state.view)
            # Nor one whose box came back wiped: it would start from scratch here.
            await self._failover_wiped(name, state.view)
        elif self.mirror is not None and state.state is not LinkState.UP:
            # failover_after_s is the user's word for how long no answer means lost: the
            # host need not have reached DOWN (down_after_s) first.
            await self._failover(name)
        self._note_moves(name)  # after a fence or a failover: the doctor says each (GEN8)
        if self.restart_runners and state.state is LinkState.UP and state.view is not None:
            await self.start_dead_runners(name, state.view)
        if self.recorder is not None:
            self.recorder.write(state)
        return state

    def _note_boot(self, name: str, view: SnapshotView, now: float) -> None:
        """Remember ``name``'s boot, and whether this process saw it come back into a new
        one: polls failed in between and the new boot's uptime is shorter than the time since
        the last good poll under the old one. A box can forge its boot id and uptime, not
        the failed polls this process saw."""
        boot, uptime = view.host.boot_id, view.host.uptime_s
        outage = name in self._unreachable
        self._unreachable.discard(name)
        if not boot:
            return
        before = self._boots.get(name)
        if before is not None and before[0] != boot and outage and uptime is not None \
                and 0 <= uptime < now - before[1]:
            self._witnessed_boot[name] = boot
        self._boots[name] = (boot, now)

    def _lineage(self) -> Lineage:
        return Lineage(self.mirror.state if self.mirror is not None else MirrorState())

    def _note_moves(self, name: str) -> None:
        """``name``'s moves as the model holds them: the queues' lineage text and the
        records the doctor explains (tui/rules/moves.py); `gpuroom doctor` reads them too."""
        moved = self._lineage().involving(name)
        state = self._states[name]
        state.moved = moved
        state.moves = lineage_text(name, moved)

    async def _fence(self, name: str, view: SnapshotView) -> None:
        """Kill (or remove, if queued) each job of ``name`` that `queue move` took elsewhere
        while ``name`` could not be reached; done once a poll shows it ended."""
        assert self.mirror is not None
        lineage = Lineage(self.mirror.state)
        for move in lineage.fences(name):
            # Only in the queue it was moved from: a new queue's job of that id is another.
            job = next((j for j in view.jobs if j.id == move.src_job
                        and j.queue_id is not None and j.queue_id == move.src_queue), None)
            if job is None or job.state not in LIVE_STATES:
                lineage.fenced(move, at=self.clock())
                continue
            verb = "remove" if job.state == "queued" else "kill"
            try:
                await self._queue_call(name, verb, "--", job.id, timeout_s=120.0)
            except GpuroomError as exc:
                self._mirrored(MirrorOutcome(name, job.id, "failed", None,
                                             f"fencing it failed: {exc}"))
                continue
            self._mirrored(MirrorOutcome(
                name, job.id, "fenced", move.step,
                f"{verb} sent: it runs as {move.dst_host}/{move.dst_job} since it was moved "
                f"while {name} could not be reached"))

    async def _failover(self, name: str) -> None:
        """Move each live --failover job of ``name`` (as its last good poll showed it) to the
        first of its hosts that is UP, once ``name`` has been DOWN failover_after_s; from the
        mirror's copy of its command and newest checkpoint (tui/fleet/move.py). A failed try
        is tried again after the same wait; the old copy is fenced when ``name`` is back."""
        assert self.mirror is not None
        state = self._states[name]
        wait = self.config.settings.failover_after_s
        now = self.clock()
        if state.last_ok is None or state.view is None or now - state.last_ok < wait:
            return
        moved = moved_away(Lineage(self.mirror.state), name)
        intents = self.intents.for_jobs(name, state.view.jobs)
        for job in state.view.jobs:
            targets = self._failover_targets(name, intents.get(job.id))
            tried = self._failover_tries.get((name, job.id))
            if not targets or job.state not in LIVE_STATES or \
                    (job.queue_id, job.id) in moved or (
                    tried is not None and now - tried < wait):
                continue
            self._failover_tries[(name, job.id)] = now
            down_s = now - state.last_ok
            await self._move_away(name, job.id, targets, f"{name} DOWN {down_s:.0f} s",
                                  f"the copy on {name} is killed when it answers again",
                                  down_s=down_s, queue_id=job.queue_id)

    async def _failover_wiped(self, name: str, view: SnapshotView) -> None:
        """Move each live --failover job of ``name`` that last ran under another boot (the box
        rebooted or was replaced, GEN6) and whose checkpoint dir no longer holds the step the
        mirror brought home: the box came back wiped, and a restart there would begin from
        scratch; it resumes on a failover target from the mirrored checkpoint instead.
        The box is asked once per job, boot and newest checkpoint file the poll shows.
        Only a reboot this process saw (_note_boot) moves a job: on the box's word alone (its
        boot id, its listing) the doctor warns instead (HostState.held)."""
        assert self.mirror is not None
        boot = view.host.boot_id
        homes = self.mirror.homes(name, view)
        moved = moved_away(Lineage(self.mirror.state), name)
        intents = self.intents.for_jobs(name, view.jobs)
        state = self._states[name]
        live = {j.id for j in view.jobs if j.state in LIVE_STATES}
        state.held = [h for h in state.held if h.job in live and h.boot == boot]
        for job in view.jobs:
            home = homes.get(job.id)
            targets = self._failover_targets(name, intents.get(job.id))
            ckpt = job.checkpoint
            seen = (boot or "", ckpt.path if ckpt else None, ckpt.mtime if ckpt else None)
            if (boot is None or home is None or not targets or not job.ckpt_dir
                    or job.state not in LIVE_STATES or (job.queue_id, job.id) in moved
                    or all(a.boot_id in (None, boot) for a in job.attempts)
                    or self._wipe_checked.get((name, job.id)) == seen):
                continue
            self._wipe_checked[(name, job.id)] = seen
            try:
                doc = await take_manifest(self.link(name), job.ckpt_dir, defer_above=0,
                                          deadline_s=LIST_DEADLINE_S)
            except GpuroomError:
                del self._wipe_checked[(name, job.id)]  # asked again at the next poll
                continue
            found = committed(doc["files"])
            state.held = [h for h in state.held if h.job != job.id]
            if found and found[-1][0] >= home.step:
                continue  # the box kept its checkpoints: its runner resumes from them
            if self._witnessed_boot.get(name) != boot:
                state.held.append(HeldFailover(job.id, home.step, boot, self.clock()))
                continue
            why = (f"{name} came back wiped (a new boot, and ckpt step {home.step} is gone "
                   "from its checkpoint dir)")
            await self._move_away(name, job.id, targets, why, f"the copy on {name} is killed",
                                  why=why, queue_id=job.queue_id)

    def _failover_targets(self, name: str, intent: Intent | None) -> list[str]:
        """The hosts `queue add --failover` named for the job on this jump host (none for a
        job the box merely reports), less any that may not receive a job."""
        if intent is None:
            return []
        return [t for t in intent.failover if t in self._hosts and t != name
                and move_target_refusal(self._hosts[t]) is None]

    async def _move_away(self, name: str, job: str, targets: list[str], cause: str,
                         after: str, *, down_s: float | None = None,
                         why: str | None = None, queue_id: str | None = None) -> None:
        """A failover: ``job`` to the first of ``targets`` that is UP, said as an outcome."""
        assert self.mirror is not None
        up = [t for t in targets if self._states[t].state is LinkState.UP]
        if not up:
            self._mirrored(MirrorOutcome(name, job, "failed", None,
                                         f"failover: none of {', '.join(targets)} is UP"))
            return
        try:
            move = await move_job(self.link(name), self.link(up[0]), job,
                                  settings=self.config.settings, state=self.mirror.state,
                                  down_s=down_s, why=why, queue_id=queue_id)
        except GpuroomError as exc:
            self._mirrored(MirrorOutcome(name, job, "failed", None,
                                         f"failover to {up[0]}: {exc}"))
            return
        self._note_moves(up[0])  # its queue shows "from A/j7" before its next poll
        self._mirrored(MirrorOutcome(name, job, "failover", move.step,
                                     f"{cause}: {move.line}; {after}"))

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
        while True:
            interval = self.config.settings.poll_interval_s  # a reloaded file's from now on
            # Cleared before the poll: a wake-up asked for while it runs (the room selected
            # another job) polls again at once instead of being lost.
            wake.clear()
            state = await self.poll_host(name)
            failures = self._failures[name]
            delay = backoff_delay(failures, interval) if failures else interval
            # Said in the host's panes ("next try in 12 s"): a backing-off host otherwise
            # looks forgotten.
            state.next_try = self.clock() + delay
            on_change(name)
            try:
                await asyncio.wait_for(wake.wait(), delay)
            except (asyncio.TimeoutError, TimeoutError):
                pass

    def _mirrored(self, outcome: MirrorOutcome) -> None:
        if self.mirror is not None and outcome.host in self._states:
            state = self._states[outcome.host]
            state.mirrored = self.mirror.homes(outcome.host, state.view)
        if self._on_mirror is not None:
            self._on_mirror(outcome)
        if self._on_change is not None:
            self._on_change(outcome.host)

    async def run(self, on_change: Callable[[str], None]) -> None:
        """Poll every host forever (each on its own schedule) until cancelled."""
        self._on_change = on_change
        self._loops = {n: asyncio.create_task(self._host_loop(n, on_change))
                       for n in self._states}
        watch = asyncio.create_task(self._failover_watch())
        try:
            while True:  # the loops change when hosts.toml does (reload_config)
                self._loops_changed.clear()
                changed = asyncio.ensure_future(self._loops_changed.wait())
                loops = list(self._loops.values())
                done, _ = await asyncio.wait([*loops, changed],
                                             return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
                for task in done:
                    if task is not changed and not task.cancelled() and task.exception():
                        raise task.exception()  # type: ignore[misc]  # a bug in a loop
        finally:
            loops = [*self._loops.values(), watch]
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            await self.close()

    async def _failover_watch(self) -> None:
        """Judge failover on the clock, not at the next poll's end: a poll of a box that
        stopped answering waits out its connect deadline (tens of seconds), and the backoff
        after each failure grows, so a lost box would fail over minutes late."""
        while True:
            await asyncio.sleep(min(FAILOVER_TICK_S, self.config.settings.poll_interval_s))
            if self.mirror is None:
                continue
            for name, state in list(self._states.items()):
                if state.state in (LinkState.STALE, LinkState.DOWN):
                    await self._failover(name)  # a failed move is said as its outcome

    async def refresh(self, host: str | None = None) -> None:
        """Poll now: wakes the running loops, or polls directly when none runs."""
        names = [host] if host else list(self._states)
        if self._wake:
            for n in names:
                if n in self._wake:
                    self._states[n].next_try = self.clock()
                    self._wake[n].set()
        else:
            await asyncio.gather(*(self.poll_host(n) for n in names))

    async def _queue_call(self, host: str, *args: str, timeout_s: float = 60.0) -> str:
        result = await self.link(host).helper("queue", *args, timeout_s=timeout_s)
        if result.rc != 0:
            # The queue answers a refusal in its JSON (a full disk: the cause and the fix);
            # that beats "exit 1" with an empty stderr.
            answer = _queue_refusal(result.stdout, host)
            if answer is not None:
                raise LinkError(host, f"queue {args[0]} failed: {answer[0]}", fix=answer[1])
            raise LinkError(host, f"queue {args[0]} failed ({result.failure()})")
        return result.stdout.decode(errors="replace")

    async def queue_add(self, host: str, argv: list[str], *, name: str | None = None,
                        gpus: int = 0, retries: int = 0, cwd: str | None = None,
                        ckpts: tuple[str, ...] = ()) -> str:
        # A slurm-profile host is a login node: the helper submits with sbatch.
        profile = self._hosts[host].profile if host in self._hosts else None
        args = ["add", "--backend", queue_backend(profile), "--gpus", str(gpus),
                "--retries", str(retries)]
        # "--opt=value": a name or dir starting with "-" stays a value on the box.
        if name:
            args.append(f"--name={name}")
        if cwd:
            args.append(f"--cwd={cwd}")
        args += [f"--ckpt={c}" for c in ckpts]
        spot = self._hosts[host].spot if host in self._hosts else None
        if spot:
            args.append(f"--spot={spot}")  # its runner watches for the cloud's notice (U45)
        out = await self._queue_call(host, *args, "--", *argv)
        try:
            doc = load_answer(out)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise LinkError(host, "queue add answered something that is not its JSON")
        job = check_job_id(host, doc.get("job"))
        self.intents.record(Intent(host=host, job=job, argv=tuple(argv), added_at=self.clock(),
                                   cwd=cwd, name=name, gpus=gpus, retries=retries,
                                   ckpts=tuple(ckpts),
                                   queue_id=queue_identity(doc.get("queue_id"))))
        return job

    async def queue_kill(self, host: str, job_id: str) -> None:
        await self._queue_call(host, "kill", "--", job_id, timeout_s=120.0)

    async def queue_relaunch(self, host: str, job_id: str) -> None:
        await self._queue_call(host, "relaunch", "--", job_id)

    async def queue_remove(self, host: str, job_id: str) -> None:
        await self._queue_call(host, "remove", "--", job_id)

    async def queue_move(self, host: str, job_id: str, position: int) -> None:
        await self._queue_call(host, "move", "--", job_id, str(position))

    async def queue_pause(self, host: str, paused: bool) -> None:
        await self._queue_call(host, "pause" if paused else "resume")

    async def job_move(self, host: str, job_id: str, to: str) -> str:
        state = self.mirror.state if self.mirror is not None else MirrorState()
        move = await move_job(self.link(host), self.link(to), job_id,
                              settings=self.config.settings, state=state)
        return move.line

    async def queue_show(self, host: str, job_id: str, queue: str = "default") -> JobView:
        out = await self._queue_call(host, "show", f"--queue={queue}", "--", job_id)
        try:
            jobs = read_queue_view(load_answer(out)).jobs
        except ValueError:
            raise LinkError(host, "queue show answered something that is not JSON") from None
        if not jobs:
            raise LinkError(host, f"queue show answered no job {sanitize_line(job_id)}")
        return jobs[0]

    def ssh_argv(self, host: str) -> list[str] | None:
        return self.link(host).ssh_argv()

    async def pull(self, host: str, job: str | None,
                   on_progress: Callable[[str, Progress], None]) -> list[tuple[str, PullResult]]:
        return await pull_jobs(self.link(host), pull_root(self._hosts[host]), job,
                               on_progress=on_progress)

    async def gate(self, host: str) -> GateResult:
        return await check_gate(self.link(host), self._mounts[host])

    def pull_records(self) -> list[dict[str, Any]]:
        return self._pull_records.current()

    def teardown_argv(self, host: str) -> list[str] | None:
        cmd = self._hosts[host].teardown_command if host in self._hosts else None
        return list(cmd) if cmd else None

    async def close(self) -> None:
        if self.mirror is not None:
            await self.mirror.close()
        await asyncio.gather(*(link.close() for link in self._links.values()),
                             return_exceptions=True)
        if self.recorder is not None:
            self.recorder.close()
