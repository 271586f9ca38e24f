"""The danger clock: what each host is costing, and which timer will cost data or money next.

Pure: snapshots, the profile, a price and an injected ``now`` in; ``ClockItem``s out. Idle time
needs history, so ``IdleTracker`` remembers, per host, since when it has been idle; it is fed
every poll and does no I/O.

The clocks (principle 10): money billed since the box booted (or since the user's rented_at);
money burnt idle; Slurm walltime left, and how long (and why) a Slurm job has been pending; a
notebook's session cap and idle timeout; a stopped box's auto-release; checkpoints still on a
box whose queue has finished.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gpuroom.profiles import Profile
from gpuroom.remote.queue_events import ACTIVE_STATES, FINAL_STATES
from gpuroom.tui.present.format import fmt_duration, fmt_money
from gpuroom.tui.rules.doctor import walltime_left
from gpuroom.tui.rules.finding import SEVERITY_RANK, Finding, Severity
from gpuroom.tui.rules.gate import Record, job_pull, units_key
from gpuroom.tui.rules.plausible import MAX_UPTIME_S, clock_problem
from gpuroom.tui.rules.stall import gpu_idle, stalls
from gpuroom.tui.sanitize import sanitize_line, truncate_display
from gpuroom.tui.snapshot import Job, Snapshot

# Idle shorter than this is between jobs, not forgotten.
IDLE_NOTE_S = 10 * 60.0
IDLE_WARN_S = 30 * 60.0
IDLE_CRIT_S = 2 * 3600.0
# A timer ending sooner than these escalates.
TIMER_WARN_S = 2 * 3600.0
TIMER_CRIT_S = 30 * 60.0
# A stopped box's release (days away): warn two days before, critical in the last half day.
RELEASE_WARN_S = 2 * 86400.0
RELEASE_CRIT_S = 12 * 3600.0
WALLTIME_WARN_S = 3600.0
WALLTIME_CRIT_S = 10 * 60.0
# A GCP preemptible VM's hard cap, counted from its boot (U45).
GCP_PREEMPTIBLE_CAP_S = 24 * 3600.0
# A Slurm job pending longer than this is worth a look at its reason.
PENDING_WARN_S = 3600.0
# Slurm's pending reason is remote text: shown as one bounded plain line.
REASON_MAX_CHARS = 60


@dataclass(frozen=True)
class ClockItem:
    host: str
    # spend | idle | walltime | pending | session_cap | idle_timeout | auto_release | unpulled
    # | preemptible_cap
    kind: str
    severity: Severity
    text: str
    seconds: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def foreign_gpu_work(snap: Snapshot) -> bool:
    """With no gpuroom job running, a compute process on a GPU is someone's work (a notebook,
    a run started by hand), so the box is not idle whatever it draws. While a job runs its
    processes may show under pids of another namespace (a container): not judged then."""
    if any(j.state in ACTIVE_STATES for j in snap.jobs):
        return False
    return any(not p.display_only for g in snap.gpus for p in g.processes)


def is_idle(snap: Snapshot, prev: Snapshot | None = None,
            stall_after_s: float | None = None) -> bool:
    """Billing for nothing: no job running but stalled ones (stall.py), no GPU work gpuroom
    did not start, and every GPU (if any) near idle power."""
    stalled = {s.job.key for s in stalls(prev, snap, stall_after_s)}
    if any(j.state in ACTIVE_STATES and j.key not in stalled for j in snap.jobs):
        return False
    if foreign_gpu_work(snap):
        return False
    return all(gpu_idle(g) for g in snap.gpus)


def box_idle_since(snap: Snapshot, polled_at: float) -> float | None:
    """Since when the box says it has been idle, on the jump host's clock: the span the box
    measured on its own clock (its ``now`` minus its ``idle_since``), counted back from
    ``polled_at``. A span is never negative nor longer than the box's uptime (a forged or
    confused answer cannot bill more idle time than the box has been up); None when the box
    does not say or its uptime cannot be true."""
    idle = snap.idle
    if idle is None or idle.idle_since is None or idle.now is None:
        return None
    uptime = snap.host.uptime_s
    if uptime is None or not 0 <= uptime <= MAX_UPTIME_S:
        return None
    span = min(max(0.0, idle.now - idle.idle_since), uptime)
    return polled_at - span


def _stalled_for(snap: Snapshot, prev: Snapshot | None, stall_after_s: float | None) -> float:
    """How long the longest stall has lasted (0 with none): the idle time it already cost."""
    return max((s.seconds for s in stalls(prev, snap, stall_after_s)), default=0.0)


class IdleTracker:
    """Since when each host has been idle. Feed it every poll; a failed poll (no snapshot)
    changes nothing, since a dropped link says nothing about the box (GEN8). The box's own
    answer (``box_idle_since``) starts the count; what the polls see refines it."""

    def __init__(self) -> None:
        self._since: dict[str, float | None] = {}
        self._boot: dict[str, str | None] = {}
        self._prev: dict[str, Snapshot] = {}
        self._stalled: dict[str, bool] = {}
        self._busy: dict[str, float] = {}  # the last poll that saw the host at work

    def feed(self, host: str, snapshot: Snapshot | None, now: float,
             stall_after_s: float | None = None) -> None:
        if snapshot is None:
            return
        boot = snapshot.host.boot_id
        prev = self._prev.get(host)
        self._prev[host] = snapshot
        stalled = bool(stalls(prev, snapshot, stall_after_s))
        self._stalled[host] = stalled
        box = box_idle_since(snapshot, now)
        if not is_idle(snapshot, prev, stall_after_s):
            self._since[host] = None
            self._busy[host] = now
        elif self._since.get(host) is None:
            # A stalled job has been burning money since its last sign of life, not since
            # this poll noticed it; an idle box since the moment its own records say.
            start = now - _stalled_for(snapshot, prev, stall_after_s)
            if box is not None and not stalled:
                start = min(start, box)
            busy = self._busy.get(host)
            # Never before a poll that saw work: a box can forget (a new helper process).
            self._since[host] = max(start, busy) if busy is not None else start
        elif boot is not None and self._boot.get(host) not in (None, boot):
            # A reboot between polls: the box was not idle before it, it was down; count anew.
            self._since[host] = max(box, self._busy.get(host) or box) \
                if box is not None and not stalled else now
        self._boot[host] = boot

    def stalled(self, host: str) -> bool:
        """Whether the last poll saw a stalled job (the idle clock then says so)."""
        return self._stalled.get(host, False)

    def idle_since(self, host: str) -> float | None:
        return self._since.get(host)

    def idle_for(self, host: str, now: float) -> float | None:
        since = self._since.get(host)
        return None if since is None else now - since


def billed_seconds(snap: Snapshot, now: float, rented_at: float | None = None) -> float | None:
    """Since the user's rented_at when given, else since the box booted (uptime at probe time
    plus the probe's age); None when the box's uptime or clock cannot be true."""
    if rented_at is not None:
        return max(0.0, now - rented_at)
    if clock_problem(snap, now) is not None:
        return None  # a finding about the box (plausible.py), never negative or absurd money
    uptime, taken = snap.host.uptime_s, snap.host.time
    if uptime is None:
        return None
    return uptime + (max(0.0, now - taken) if taken is not None else 0.0)


def _slurm_label(job: Job) -> str:
    return f"{job.id} (Slurm {job.slurm_id})" if job.slurm_id else job.id


def _lead_note(job: Job) -> str:
    lead = job.signal_lead_s
    return f"; warning {fmt_duration(lead)} before" if lead else ""


def _pending_since(job: Job) -> float | None:
    """When the job last entered the queue: its submission, or the end of the run that a
    requeue sent back (both on the login node's clock)."""
    attempt = job.last_attempt
    since = attempt.submitted if attempt is not None else None
    runs = job.runs
    ended = runs[-1].end if runs else None
    if ended is not None and (since is None or ended > since):
        since = ended
    return since


def _pending_item(host: str, job: Job, snap: Snapshot, now: float) -> ClockItem:
    """A PENDING Slurm job and why (Resources, Priority, BeginTime, ...)."""
    raw = job.reason or job.slurm_state or "no reason given"
    reason = truncate_display(sanitize_line(raw), REASON_MAX_CHARS)
    since = _pending_since(job)
    waited: float | None = None
    if since is not None:
        # Measured on the login node's clock up to the probe, then the probe's age: the same
        # rule as billed_seconds, so a skewed laptop clock does not age the wait.
        taken = snap.host.time
        waited = ((taken - since) + max(0.0, now - taken)) if taken is not None else now - since
        waited = max(0.0, waited)
    requeued = bool(job.restarts) or bool(job.runs)
    text = f"job {_slurm_label(job)}: pending"
    if waited is not None:
        text += f" {fmt_duration(waited)}" + (" since its requeue" if requeued else "")
    text += f" ({reason})"
    sev: Severity = "warn" if waited is not None and waited > PENDING_WARN_S else "info"
    return ClockItem(host, "pending", sev, text, waited)


def _timer_severity(left: float, warn: float = TIMER_WARN_S,
                    crit: float = TIMER_CRIT_S) -> Severity:
    if left <= crit:
        return "critical"
    return "warn" if left <= warn else "info"


def box_outputs(job: Job) -> list[dict[str, Any]]:
    """What a poll shows of a job's checkpoint dir, as manifest-like entries for
    ``job_pull``: its newest file (the probe looks in the dir of every running and finished
    job), or nothing when the job wrote none."""
    c = job.checkpoint
    if c is None or not c.path:
        return []
    if c.source in ("declared", "discovered"):
        return []  # the program's own units: unit_outputs, under the cwd's pull record
    path = c.path
    if job.ckpt_dir and path.startswith(job.ckpt_dir.rstrip("/") + "/"):
        path = posixpath.relpath(path, job.ckpt_dir)  # pull records name files under the dir
    return [{"path": path, "kind": "file", "size": c.size, "mtime": c.mtime}]


def _synced(job: Job) -> bool:
    return job.sync is not None and job.sync.state == "synced"


def unit_outputs(job: Job) -> list[dict[str, Any]]:
    """The files of a job's own checkpoint units (declared or discovered under its cwd) as
    a poll shows them: each unit's newest mtime, no per-file size."""
    found = job.ckpt_units
    if found is None:
        return []
    return [{"path": f, "kind": "file", "size": None, "mtime": u.mtime}
            for u in found.units for f in u.files]


def _needs_pull(host: str, job: Job, records: Sequence[Record]) -> bool:
    if job_pull(host, units_key(job.id), unit_outputs(job), records, job.queue_id).needs_pull:
        return True
    return job_pull(host, job.id, box_outputs(job), records, job.queue_id).needs_pull


def unpulled_jobs(host: str, jobs: Iterable[Job], records: Sequence[Record]) -> list[Job]:
    """Finished work still only on the box: a succeeded job that wrote a checkpoint which
    neither a pull (the records the teardown gate reads) nor its durable sync (U33) took
    home. A job that died wants a relaunch (the doctor says why), not a pull."""
    return [j for j in jobs if j.state == "succeeded" and not _synced(j)
            and _needs_pull(host, j, records)]


def host_clocks(host: str, snap: Snapshot | None, profile: Profile | None, now: float, *,
                price_per_hour: float | None = None, rented_at: float | None = None,
                tracker: IdleTracker | None = None,
                records: Sequence[Record] = (), spot: str | None = None,
                down_since: float | None = None) -> list[ClockItem]:
    """Every clock of one host. ``snap`` None (never answered) yields nothing to count from
    but a stopped box's release. ``records`` are the pull records (pulls.json), read by the
    caller; ``spot`` is hosts.toml's (a GCP preemptible VM is stopped 24 h after its start,
    idle or not); ``down_since`` is when the host went DOWN after being UP (tui/fleet/downs.py),
    from which a profile's release after a stop counts down."""
    if down_since is not None:
        released = [_released_item(host, c, now - down_since)
                    for c in (profile.danger_clocks if profile is not None else ())
                    if c.kind == "auto_release_after_stop" and _whole(c.seconds)]
        if snap is None:
            return released
    else:
        released = []
    if snap is None:
        return []
    out: list[ClockItem] = []
    billed = billed_seconds(snap, now, rented_at)
    if billed is not None and price_per_hour is not None:
        since = "rented" if rented_at is not None else "boot"
        out.append(ClockItem(host, "spend", "info",
                             f"{fmt_money(price_per_hour, billed)} billed over "
                             f"{fmt_duration(billed)} since {since} (${price_per_hour:.2f}/h)",
                             billed))
    idle = tracker.idle_for(host, now) if tracker is not None else None
    if idle is not None and idle >= IDLE_NOTE_S:
        sev: Severity = ("critical" if idle >= IDLE_CRIT_S
                         else "warn" if idle >= IDLE_WARN_S else "info")
        cost = fmt_money(price_per_hour, idle)
        out.append(ClockItem(host, "idle", sev,
                             f"idle {fmt_duration(idle)} while billing"
                             + (f": {cost} burnt" if cost else "")
                             + (" (a running job stalled, GPU at idle power)"
                                if tracker is not None and tracker.stalled(host)
                                else " (no job running, GPU at idle power)"), idle))
    jobs = snap.jobs
    slurm_host = profile is not None and profile.kind == "slurm"
    for job in jobs:
        if not (slurm_host or job.backend == "slurm"):
            continue
        if job.state in ACTIVE_STATES:
            left = walltime_left(job, now)
            if left is not None:
                out.append(ClockItem(
                    host, "walltime", _timer_severity(left, WALLTIME_WARN_S, WALLTIME_CRIT_S),
                    f"job {_slurm_label(job)}: walltime ends in {fmt_duration(left)} (SIGTERM, "
                    f"then SIGKILL){_lead_note(job)}", left))
        elif job.state == "queued" and job.slurm_id:
            out.append(_pending_item(host, job, snap, now))
    uptime = billed_seconds(snap, now)
    if spot == "gcp-preemptible" and uptime is not None:
        left = GCP_PREEMPTIBLE_CAP_S - uptime
        out.append(ClockItem(host, "preemptible_cap", _timer_severity(left),
                             f"GCP preemptible: stopped 24 h after its start, in "
                             f"{fmt_duration(left)} (a Spot VM has no cap) [U45]", left))
    for clock in profile.danger_clocks if profile is not None else ():
        if not isinstance(clock.seconds, int) or isinstance(clock.seconds, bool):
            continue
        approx = "~" if clock.approximate else ""
        if clock.kind == "session_cap" and uptime is not None:
            left = clock.seconds - uptime
            out.append(ClockItem(host, "session_cap", _timer_severity(left),
                                 f"session cap ({approx}{fmt_duration(clock.seconds)}) ends in "
                                 f"{fmt_duration(left)}", left))
        elif clock.kind == "idle_timeout" and idle is not None:
            left = clock.seconds - idle
            out.append(ClockItem(host, "idle_timeout", _timer_severity(left),
                                 f"idle timeout ({approx}{fmt_duration(clock.seconds)}) "
                                 f"disconnects in {fmt_duration(left)}", left))
        elif clock.kind == "auto_release_after_stop" and not released:
            out.append(ClockItem(host, "auto_release", "info",
                                 f"if stopped, released after {fmt_duration(clock.seconds)}: "
                                 f"{clock.text}", float(clock.seconds)))
    out += released
    if jobs and all(j.state in FINAL_STATES for j in jobs):
        unpulled = unpulled_jobs(host, jobs, records)
        if unpulled:
            out.append(ClockItem(
                host, "unpulled", "warn",
                "queue finished; checkpoints not pulled for "
                + ", ".join(j.id for j in unpulled[:4])
                + (" (destroy loses them)" if profile is not None
                   and profile.meter_stop_irreversible is True else ""), None))
    return out


def _whole(seconds: object) -> bool:
    return isinstance(seconds, int) and not isinstance(seconds, bool)


def _released_item(host: str, clock: Any, down_for: float) -> ClockItem:
    """A stopped box's release, counted from when it went down (it may be down for another
    reason: the line says "if stopped")."""
    left = max(0.0, clock.seconds - down_for)
    approx = "~" if clock.approximate else ""
    head = f"down {fmt_duration(max(0.0, down_for))}: "
    text = (f"{head}if stopped, released in {approx}{fmt_duration(left)}" if left > 0 else
            f"{head}if it was stopped, it has been released ({approx}"
            f"{fmt_duration(clock.seconds)} after a stop)")
    return ClockItem(host, "auto_release",
                     _timer_severity(left, RELEASE_WARN_S, RELEASE_CRIT_S),
                     f"{text}: {clock.text}", left)


def _rank(severity: str) -> int:
    return SEVERITY_RANK[severity]


def banner_lines(findings: Iterable[Finding], clock_items: Iterable[ClockItem],
                 limit: int | None = 3) -> list[str]:
    """The worst ``limit`` things across the fleet (all with None), one line each; info never
    makes the banner.

    Critical before warn; at equal severity a finding (something is wrong now) comes before a
    clock (something will be), and a longer-running clock before a shorter one.
    """
    ranked: list[tuple[int, int, float, str]] = []
    for f in findings:
        if f.severity != "info":
            ranked.append((-_rank(f.severity), 0, 0.0,
                           f"{f.severity.upper()} {f.host}: {f.title} [{f.id}]"))
    for c in clock_items:
        if c.severity != "info":
            # Longer idle is worse; a timer with less left is worse.
            tie = (-(c.seconds or 0.0) if c.kind in ("idle", "spend", "pending")
                   else (c.seconds or 0.0))
            ranked.append((-_rank(c.severity), 1, tie,
                           f"{c.severity.upper()} {c.host}: {c.text}"))
    ranked.sort(key=lambda r: r[:3])
    # Titles and clock texts carry remote words (job names, Slurm reasons, kernel lines); the
    # banner writes these lines as they are, so nothing that drives a terminal may be left.
    return [sanitize_line(r[3]) for r in ranked[:limit]]


__all__ = [
    "ClockItem", "IdleTracker", "banner_lines", "billed_seconds", "box_idle_since", "box_outputs",
    "foreign_gpu_work", "gpu_idle",
    "host_clocks", "is_idle", "unpulled_jobs", "walltime_left",
]
