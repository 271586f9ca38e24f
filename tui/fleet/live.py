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
from gpuroom.tui.config import Config, HostConfig
from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.fleet.mirror import (
    FAILOVER_ENV,
    LIST_DEADLINE_S,
    Mirror,
    MirrorOutcome,
    MirrorState,
    committed,
)
from gpuroom.tui.fleet.move import Lineage, lineage_text, move_job
from gpuroom.tui.fleet.outputs import PullRecords, check_gate, pull_jobs, pull_root
from gpuroom.tui.fleet.pending import PendingLedger
from gpuroom.tui.fleet.replay import RecordingError
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.present.slurm import queue_backend
from gpuroom.tui.rules.drift import tree_paths_to_read
from gpuroom.tui.rules.money import dead_runner_queues
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.snapshot import Job as JobView
from gpuroom.tui.snapshot import LogChunk as LogChunkView
from gpuroom.tui.snapshot import Snapshot as SnapshotView
from gpuroom.tui.snapshot import load_answer, read_log_doc, read_queue_view
from gpuroom.tui.transport.link import HostLink, LinkError
from gpuroom.tui.transport.localcode import read_tree
from gpuroom.tui.transport.pull import take_manifest

if TYPE_CHECKING:
    from gpuroom.tui.rules.gate import GateResult
    from gpuroom.tui.transport.pull import Progress, PullResult

MAX_CONCURRENT_POLLS = 16
RUNNER_RETRY_S = 60.0
BACKOFF_CAP_S = 60.0
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


def _queue_refusal(stdout: bytes) -> tuple[str, str | None] | None:
    """(error, fix) of a queue verb's JSON answer ``{"ok": false, ...}``, made inert."""
    try:
        doc = load_answer(stdout)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("ok") is not False or not doc.get("error"):
        return None
    fix = doc.get("fix")
    return sanitize_line(str(doc["error"])), sanitize_line(str(fix)) if fix else None


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
            h.name: HostState(name=h.name, profile=h.profile, price_per_hour=h.price_per_hour,
                              rented_at=h.rented_at, stall_after_s=h.stall_after_s,
                              cpu_training_after_s=h.cpu_training_after_s,
                              mtbf_s=h.mtbf_s, spot=h.spot, code=h.code,
                              error=h.error)
            for h in self._hosts.values()
        }
        ssh_config = config.ssh_config_path()
        self._links: dict[str, HostLink] = {
            h.name: HostLink(h, ssh_config=ssh_config, mode=config.settings.poll_mode)
            for h in self._hosts.values()
        }
        self._mounts = {h.name: watched_mounts(h) for h in self._hosts.values()}
        self._cursors: dict[str, dict[str, Any]] = {h: {} for h in self._hosts}
        self._failures: dict[str, int] = dict.fromkeys(self._hosts, 0)
        # host -> the job key ("queue/id") whose log tail the next poll asks for.
        self._tail_wanted: dict[str, str] = {}
        self._sem = asyncio.Semaphore(MAX_CONCURRENT_POLLS)
        self._wake: dict[str, asyncio.Event] = {}
        self._pull_records = PullRecords()
        self._on_change: Callable[[str], None] | None = None
        self._on_mirror = on_mirror
        self._failover_tries: dict[tuple[str, str], float] = {}  # (host, job): last try
        # (host, job): (boot id, newest checkpoint file as the poll saw it) when last asked
        self._wipe_checked: dict[tuple[str, str], tuple[str, str | None, float | None]] = {}
        # Only the long-running fleets (the room, `gpuroom watch`) mirror; a one-shot verb's
        # poll would start a pull it then cancels.
        self.mirror = Mirror(self._hosts, self._links, config.settings,
                             on_outcome=self._mirrored, clock=clock) if mirror else None

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
                # The user's tree, read (git, off the loop) only while the U42 rule has a
                # running job to compare it with.
                code, paths = state.code, tree_paths_to_read(view)
                if code and paths is not None:
                    state.local_code = await asyncio.to_thread(read_tree, Path(code), paths)
                else:
                    state.local_code = None
                if self.mirror is not None:
                    state.mirrored = self.mirror.homes(name)
                    self.mirror.observe(name, view)
        if self.mirror is not None and state.state is LinkState.UP and state.view is not None:
            # Before any dead runner is restarted: a job moved away while this host was
            # unreachable must not run here again (its kill is the runner's first event).
            await self._fence(name, state.view)
            # Nor one whose box came back wiped: it would start from scratch here.
            await self._failover_wiped(name, state.view)
        elif self.mirror is not None and state.state is LinkState.DOWN:
            await self._failover(name)
        self._note_moves(name)  # after a fence or a failover: the doctor says each (GEN8)
        if self.restart_runners and state.state is LinkState.UP and state.view is not None:
            await self.start_dead_runners(name, state.view)
        if self.recorder is not None:
            self.recorder.write(state)
        return state

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
            job = next((j for j in view.jobs if j.id == move.src_job), None)
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
        moved = {m.src_job for m in Lineage(self.mirror.state).load() if m.src_host == name}
        for job in state.view.jobs:
            targets = self._failover_targets(name, job)
            tried = self._failover_tries.get((name, job.id))
            if not targets or job.state not in LIVE_STATES or job.id in moved or (
                    tried is not None and now - tried < wait):
                continue
            self._failover_tries[(name, job.id)] = now
            down_s = now - state.last_ok
            await self._move_away(name, job.id, targets, f"{name} DOWN {down_s:.0f} s",
                                  f"the copy on {name} is killed when it answers again",
                                  down_s=down_s)

    async def _failover_wiped(self, name: str, view: SnapshotView) -> None:
        """Move each live --failover job of ``name`` that last ran under another boot (the box
        rebooted or was replaced, GEN6) and whose checkpoint dir no longer holds the step the
        mirror brought home: the box came back wiped, and a restart there would begin from
        scratch; it resumes on a failover target from the mirrored checkpoint instead.
        The box is asked once per job, boot and newest checkpoint file the poll shows."""
        assert self.mirror is not None
        boot = view.host.boot_id
        homes = self.mirror.homes(name)
        moved = {m.src_job for m in Lineage(self.mirror.state).load() if m.src_host == name}
        for job in view.jobs:
            home = homes.get(job.id)
            targets = self._failover_targets(name, job)
            ckpt = job.checkpoint
            seen = (boot or "", ckpt.path if ckpt else None, ckpt.mtime if ckpt else None)
            if (boot is None or home is None or not targets or not job.ckpt_dir
                    or job.state not in LIVE_STATES or job.id in moved
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
            if found and found[-1][0] >= home.step:
                continue  # the box kept its checkpoints: its runner resumes from them
            why = (f"{name} came back wiped (a new boot, and ckpt step {home.step} is gone "
                   "from its checkpoint dir)")
            await self._move_away(name, job.id, targets, why, f"the copy on {name} is killed",
                                  why=why)

    def _failover_targets(self, name: str, job: JobView) -> list[str]:
        return [t for t in job.env.get(FAILOVER_ENV, "").split(",")
                if t in self._links and t != name]

    async def _move_away(self, name: str, job: str, targets: list[str], cause: str,
                         after: str, *, down_s: float | None = None,
                         why: str | None = None) -> None:
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
                                  down_s=down_s, why=why)
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
        interval = self.config.settings.poll_interval_s
        while True:
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
            self._states[outcome.host].mirrored = self.mirror.homes(outcome.host)
        if self._on_mirror is not None:
            self._on_mirror(outcome)
        if self._on_change is not None:
            self._on_change(outcome.host)

    async def run(self, on_change: Callable[[str], None]) -> None:
        """Poll every host forever (each on its own schedule) until cancelled."""
        self._on_change = on_change
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
                    self._states[n].next_try = self.clock()
                    self._wake[n].set()
        else:
            await asyncio.gather(*(self.poll_host(n) for n in names))

    async def _queue_call(self, host: str, *args: str, timeout_s: float = 60.0) -> str:
        result = await self.link(host).helper("queue", *args, timeout_s=timeout_s)
        if result.rc != 0:
            # The queue answers a refusal in its JSON (a full disk: the cause and the fix);
            # that beats "exit 1" with an empty stderr.
            answer = _queue_refusal(result.stdout)
            if answer is not None:
                raise LinkError(host, f"queue {args[0]} failed: {answer[0]}", fix=answer[1])
            raise LinkError(host, f"queue {args[0]} failed ({result.failure()})")
        return result.stdout.decode(errors="replace")

    async def queue_add(self, host: str, argv: list[str], *, name: str | None = None,
                        gpus: int = 0, retries: int = 0, cwd: str | None = None) -> str:
        # A slurm-profile host is a login node: the helper submits with sbatch.
        profile = self._hosts[host].profile if host in self._hosts else None
        args = ["add", "--backend", queue_backend(profile), "--gpus", str(gpus),
                "--retries", str(retries)]
        # "--opt=value": a name or dir starting with "-" stays a value on the box.
        if name:
            args.append(f"--name={name}")
        if cwd:
            args.append(f"--cwd={cwd}")
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
        return str(doc.get("job"))

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
