"""HostState + the parsed snapshot -> display rows.

The snapshot is read by gpuroom.tui.snapshot (field names, old spellings, the number rule);
here it only becomes text and levels. Every string the box wrote goes through sanitize_line.
Pure functions: time comes in as ``now``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpuroom.remote.queue_events import (
    ACTIVE_STATES,
    FAILED_STATES,
    FINAL_STATES,
    LIVE_STATES,
)
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.present.format import fmt_age, fmt_hours, fmt_money, fmt_pct, fmt_whole
from gpuroom.tui.present.slurm import slurm_summary
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.snapshot import Job, RawSnapshot, Snapshot, read_snapshot

Level = Literal["ok", "warn", "crit"]

# U7: inodes run out before bytes, so they alarm earlier.
BYTES_WARN_PCT = 85.0
BYTES_CRIT_PCT = 95.0
INODES_WARN_PCT = 80.0
INODES_CRIT_PCT = 90.0

# Clock-event reasons that say nothing is wrong (an idle GPU clocks down on purpose).
BENIGN_THROTTLE = frozenset({"idle", "gpu_idle", "applications_clocks_setting", "none"})

# nvidia-smi -q "Clocks Event Reasons" names, shortened for a narrow column.
THROTTLE_SHORT = {
    "sw_power_cap": "SwPwrCap",
    "hw_slowdown": "HwSlow",
    "hw_thermal_slowdown": "HwThermal",
    "hw_power_brake_slowdown": "PwrBrake",
    "sw_thermal_slowdown": "SwThermal",
    "sync_boost": "SyncBoost",
    "display_clock_setting": "Display",
    "board_limit": "BoardLim",
    "reliability": "Reliab",
}
_LEVEL_RANK = {"ok": 0, "warn": 1, "crit": 2}
# The queue pane's colour per job state (remote/queue_events.py STATES): work in progress
# green, waiting cyan, a failure red, an end on request yellow, a clean end dim.
STATE_STYLE: dict[str, str] = {
    "queued": "cyan",
    **dict.fromkeys(ACTIVE_STATES, "green"),
    **dict.fromkeys(FAILED_STATES, "bold red"),
    "killed": "yellow",
    "succeeded": "dim",
    "removed": "dim",
}
MODEL_WIDTH = 9  # "H100 80GB": enough to tell cards apart in the hosts table


# ----------------------------------------------------------------------------- text


def _str(value: Any) -> str:
    """A snapshot field as display text. The snapshot is the box's: a job name, a mount point
    or an error in it may carry escape sequences, and none of them reaches a pane."""
    return "" if value is None else sanitize_line(str(value))


def worst(*levels: Level) -> Level:
    """The more urgent of several levels."""
    return max(levels, key=lambda lv: _LEVEL_RANK[lv], default="ok")


def box_now(host: HostState, now: float) -> float:
    """The box's clock now, as extrapolated from its last snapshot.

    Ages of jobs and checkpoints are differences of box timestamps; comparing them to the
    jump host's clock would add the clock skew between the two machines.
    """
    snap = host.view
    t = snap.host.time if snap is not None else None
    if t is None or host.last_ok is None:
        return now
    last_ok: float = host.last_ok
    return t + max(0.0, now - last_ok)


# ----------------------------------------------------------------------------- link state


def link_text(host: HostState, now: float) -> str:
    """UP / STALE 3m / DOWN: reason, as the hosts table and banner say it."""
    if host.state is LinkState.UP:
        return "UP"
    if host.state is LinkState.STALE:
        return f"STALE {fmt_age(host.age_s(now))}"
    return f"DOWN: {host.error or 'never answered'}"


_LINK_LEVEL: dict[LinkState, Level] = {
    LinkState.UP: "ok",
    LinkState.STALE: "warn",
    LinkState.DOWN: "crit",
}


def link_level(host: HostState) -> Level:
    level: Level = _LINK_LEVEL[host.state]
    return level


# ----------------------------------------------------------------------------- GPUs


@dataclass(frozen=True)
class GpuRow:
    """One GPU, dmon-like. None = not reported."""

    index: int
    name: str
    sm_mhz: float | None
    sm_max_mhz: float | None
    mem_mhz: float | None
    mem_max_mhz: float | None
    power_w: float | None
    power_limit_w: float | None
    temp_c: float | None
    util_gpu: float | None
    util_mem: float | None
    mem_used_mib: float | None
    mem_total_mib: float | None
    throttle: tuple[str, ...]  # active reasons that cost clocks (idle filtered out)

    @property
    def level(self) -> Level:
        return "warn" if self.throttle else "ok"

    @property
    def throttle_short(self) -> str:
        return ",".join(THROTTLE_SHORT.get(t, t) for t in self.throttle)


def gpu_rows(snapshot: Snapshot | None) -> list[GpuRow]:
    """One row per GPU of the snapshot."""
    if snapshot is None:
        return []
    return [
        GpuRow(
            index=i if g.index is None else g.index,
            name=_str(g.name),
            sm_mhz=g.clock_sm_mhz,
            sm_max_mhz=g.clock_sm_max_mhz,
            mem_mhz=g.clock_mem_mhz,
            mem_max_mhz=g.clock_mem_max_mhz,
            power_w=g.power_w,
            power_limit_w=g.power_limit_w,
            temp_c=g.temp_c,
            util_gpu=g.util_gpu_pct,
            util_mem=g.util_mem_pct,
            mem_used_mib=g.mem_used_mib,
            mem_total_mib=g.mem_total_mib,
            throttle=tuple(_str(r) for r in g.clock_event_reasons if r not in BENIGN_THROTTLE),
        )
        for i, g in enumerate(snapshot.gpus)
    ]


def gpu_absence(snapshot: Snapshot | None) -> str | None:
    """Why there are no GPU rows ("no GPU" is a normal state), None when there are some."""
    if snapshot is None:
        return "no snapshot yet"
    if snapshot.gpus:
        return None
    reason = snapshot.gpu_error
    if reason is None:
        reason = snapshot.section_error("gpus")
    if reason is None:
        reason = "none found" if "gpus" in snapshot.sections else "not reported by the probe"
    return _str(reason)


def gpu_summary(rows: Sequence[GpuRow]) -> tuple[str, str, str]:
    """(count+model, mean SM clock / max, total power / limit) for the hosts table."""
    if not rows:
        return "0", "-", "-"
    names = {r.name.replace("NVIDIA ", "").replace("GeForce ", "")[:MODEL_WIDTH] for r in rows}
    model = (names.pop() or "?") if len(names) == 1 else "mixed"
    count = f"{len(rows)}x {model}"

    def mean(values: Iterable[float | None]) -> float | None:
        got = [v for v in values if v is not None]
        return sum(got) / len(got) if got else None

    def total(values: Iterable[float | None]) -> float | None:
        got = [v for v in values if v is not None]
        return sum(got) if got else None

    sm, sm_max = mean(r.sm_mhz for r in rows), mean(r.sm_max_mhz for r in rows)
    pw, pw_max = total(r.power_w for r in rows), total(r.power_limit_w for r in rows)
    sm_text = f"{fmt_whole(sm)}/{fmt_whole(sm_max, missing='?')}" if sm is not None else "-"
    pw_text = f"{fmt_whole(pw)}/{fmt_whole(pw_max, missing='?')}" if pw is not None else "-"
    return count, sm_text, pw_text


# ----------------------------------------------------------------------------- disks


def _level(pct: float | None, warn: float, crit: float) -> Level:
    if pct is None:
        return "ok"
    if pct >= crit:
        return "crit"
    return "warn" if pct >= warn else "ok"


@dataclass(frozen=True)
class DiskRow:
    """One watched mount: ``df -h`` and ``df -i`` of it."""

    path: str
    error: str | None
    size_bytes: float | None
    used_bytes: float | None
    avail_bytes: float | None
    bytes_pct: float | None
    inodes_total: float | None
    inodes_used: float | None
    inodes_free: float | None
    inodes_pct: float | None

    @property
    def bytes_level(self) -> Level:
        return _level(self.bytes_pct, BYTES_WARN_PCT, BYTES_CRIT_PCT)

    @property
    def inodes_level(self) -> Level:
        return _level(self.inodes_pct, INODES_WARN_PCT, INODES_CRIT_PCT)

    @property
    def level(self) -> Level:
        return worst(self.bytes_level, self.inodes_level)


def _pct(used: float | None, total: float | None) -> float | None:
    if used is None or not total:
        return None
    return 100.0 * used / total


def disk_rows(snapshot: Snapshot | None) -> list[DiskRow]:
    """The snapshot's disks: statvfs facts per path, one row per filesystem.

    home and cwd are often the same filesystem as a watched mount; a repeated ``device``
    would show the same numbers twice, so only its first path is kept.
    """
    rows: list[DiskRow] = []
    seen_devices: set[int] = set()
    for d in snapshot.disks if snapshot is not None else ():
        path = _str(d.path)
        if d.error is not None:
            rows.append(DiskRow(path, _str(d.error), *([None] * 8)))
            continue
        if d.device is not None:
            if d.device in seen_devices:
                continue
            seen_devices.add(d.device)
        total, free = d.total_bytes, d.free_bytes
        itotal, ifree = d.total_inodes, d.free_inodes
        used = None if total is None or free is None else total - free
        iused = None if itotal is None or ifree is None else itotal - ifree
        rows.append(
            DiskRow(
                path=path,
                error=None,
                size_bytes=total,
                used_bytes=used,
                avail_bytes=free,
                bytes_pct=_pct(used, total),
                inodes_total=itotal,
                inodes_used=iused,
                inodes_free=ifree,
                # Filesystems without inode accounting (btrfs, some NFS) report 0 total.
                inodes_pct=_pct(iused, itotal),
            )
        )
    return rows


# ----------------------------------------------------------------------------- queue & jobs

# Pending action entries in HostState.pending: "kill:<job>", "relaunch:<job>:<attempt>",
# "add:<job>:<name>". The app writes one when it sends the action; a snapshot that shows the
# action took effect retires it (principle 3: say only what the box confirmed).


def pending_kill(job_id: str) -> str:
    return f"kill:{job_id}"


def pending_relaunch(job_id: str, attempt: int | None) -> str:
    return f"relaunch:{job_id}:{attempt if attempt is not None else ''}"


def pending_add(job_id: str, name: str) -> str:
    return f"add:{job_id}:{name}"


@dataclass(frozen=True)
class JobRow:
    """One job of the selected host's queue."""

    id: str
    name: str
    state: str
    attempt: int | None
    runtime_s: float | None
    exit_code: int | None
    command: str
    ckpt_age_s: float | None
    pending: str | None = None  # "kill", "relaunch", "add" while the box has not confirmed
    slurm: str = ""  # Slurm id, state, reason, time left (slurm_summary); "" for a box job

    @property
    def level(self) -> Level:
        if self.pending:
            return "warn"
        return "crit" if self.state in FAILED_STATES else "ok"


def _attempt_no(j: Job) -> int | None:
    last = j.last_attempt
    if last is not None and last.attempt is not None:
        return last.attempt
    return len(j.attempts)


def job_rows(host: HostState, now: float) -> list[JobRow]:
    """The snapshot's jobs plus the actions still waiting for confirmation."""
    t = box_now(host, now)
    rows = []
    ids = set()
    snap = host.view
    for j in snap.jobs if snap is not None else ():
        jid = _str(j.id)
        ids.add(jid)
        last = j.last_attempt
        started = last.start if last is not None else None
        ended = last.end if last is not None else None
        ckpt = j.checkpoint.mtime if j.checkpoint is not None else None
        pend = None
        for entry in host.pending:
            kind, _, rest = entry.partition(":")
            if kind in ("kill", "relaunch") and rest.split(":", 1)[0] == jid:
                pend = kind
        rows.append(
            JobRow(
                id=jid,
                name=_str(j.name),
                state=_str(j.state) or "?",
                attempt=_attempt_no(j),
                runtime_s=None if started is None else (ended if ended is not None else t)
                - started,
                exit_code=last.exit_code if last is not None else j.exit_code,
                command=_str(j.command),
                ckpt_age_s=None if ckpt is None else t - ckpt,
                pending=pend,
                slurm=slurm_summary(j),
            )
        )
    for entry in host.pending:
        kind, _, rest = entry.partition(":")
        jid, _, name = rest.partition(":")
        if kind == "add" and jid not in ids:
            rows.append(JobRow(jid, name, "sent", None, None, None, "", None, pending="add"))
    return rows


def still_pending(entry: str, snapshot: RawSnapshot | None) -> bool:
    """Whether a pending action is not yet visible in ``snapshot``.

    Decided from what the box reports, not from timing, so a snapshot taken before the
    action reached the box can never confirm it.
    """
    kind, _, rest = entry.partition(":")
    jid, _, extra = rest.partition(":")
    snap = read_snapshot(snapshot) if snapshot is not None else None
    job = snap.job(jid) if snap is not None else None
    if kind == "add":
        return job is None
    if job is None:
        # kill: a job that left the queue is gone; relaunch: nothing to confirm against.
        return False
    state = job.state
    if kind == "kill":
        return state not in FINAL_STATES
    if kind == "relaunch":
        attempt, before = _attempt_no(job), int(extra) if extra.isdigit() else None
        if before is not None and attempt is not None:
            return attempt <= before
        return state not in LIVE_STATES
    return False


def running_job(snapshot: Snapshot | None) -> str:
    for j in snapshot.jobs if snapshot is not None else ():
        if j.state == "running":
            return _str(j.name) or _str(j.id)
    return "-"


# ----------------------------------------------------------------------------- log bytes


@dataclass(frozen=True)
class LogChunk:
    """Bytes of one job's log as a snapshot carried them."""

    job_id: str
    offset: int  # file offset of data[0]
    inode: int | None
    size: int | None  # file size on the box when read
    data: bytes
    reset: bool  # the helper says the file was truncated/replaced since the cursor


@dataclass(frozen=True)
class LogCursor:
    """How far the log pane has shown one job's log file."""

    job_id: str
    inode: int | None
    end: int


def log_chunk(snapshot: Snapshot | None, job_id: str) -> LogChunk | None:
    """The log bytes job ``job_id`` carried in the snapshot; None when none or not base64."""
    job = snapshot.job(job_id) if snapshot is not None else None
    if job is None or job.log_chunk is None:
        return None
    chunk = job.log_chunk
    data = chunk.data
    if data is None:
        return None
    return LogChunk(
        job_id=job_id,
        offset=chunk.offset or 0,
        inode=chunk.inode,
        size=chunk.size,
        data=data,
        reset=chunk.reset,
    )


def advance_log(cursor: LogCursor | None, chunk: LogChunk) -> tuple[bytes, bool, int, LogCursor]:
    """What of ``chunk`` is new to a pane at ``cursor``: (bytes, clear first?, bytes skipped,
    next cursor). The same snapshot delivered twice shows nothing twice."""
    end = chunk.offset + len(chunk.data)
    fresh = (
        cursor is None
        or cursor.job_id != chunk.job_id
        or chunk.reset
        or (cursor.inode is not None and chunk.inode is not None and cursor.inode != chunk.inode)
        or (chunk.size is not None and chunk.size < cursor.end)
    )
    new_cursor = LogCursor(chunk.job_id, chunk.inode, end)
    if fresh or cursor is None:
        return chunk.data, True, 0, new_cursor
    if end <= cursor.end:
        return b"", False, 0, cursor
    if chunk.offset > cursor.end:
        return chunk.data, False, chunk.offset - cursor.end, new_cursor
    return chunk.data[cursor.end - chunk.offset :], False, 0, new_cursor


# ----------------------------------------------------------------------------- hosts table


@dataclass(frozen=True)
class HostRow:
    """One line of the hosts table, every cell already text."""

    name: str
    state: str
    profile: str
    gpus: str
    sm_clock: str
    power: str
    disk_pct: str
    inode_pct: str
    job: str
    billed: str
    findings: str
    level: Level
    disk_level: Level
    inode_level: Level
    findings_level: Level = "ok"


def billed_cell(price_per_hour: float | None, seconds: float | None) -> str:
    """Spend so far, short: "$9.96 4.0h"; without a price only the hours."""
    if seconds is None:
        return "-"
    return " ".join(part for part in (fmt_money(price_per_hour, seconds), fmt_hours(seconds))
                    if part)


def findings_cell(severities: Iterable[str]) -> tuple[str, Level]:
    """How many findings, marked by the worst: "2!!" critical, "1!" warn, "3" info only."""
    sev = list(severities)
    if not sev:
        return "-", "ok"
    if "critical" in sev:
        return f"{len(sev)}!!", "crit"
    if "warn" in sev:
        return f"{len(sev)}!", "warn"
    return str(len(sev)), "ok"


def host_row(host: HostState, now: float, *, billed: str = "-",
             findings: Iterable[str] = ()) -> HostRow:
    """``billed`` from the danger clock, ``findings`` the severities of the host's findings."""
    snap = host.view
    gpus = gpu_rows(snap)
    count, sm, power = gpu_summary(gpus)
    if not gpus:
        count = "no GPU" if snap is not None else "-"
    disks = disk_rows(snap)
    b = max((d.bytes_pct for d in disks if d.bytes_pct is not None), default=None)
    i = max((d.inodes_pct for d in disks if d.inodes_pct is not None), default=None)
    b_level = _level(b, BYTES_WARN_PCT, BYTES_CRIT_PCT)
    i_level = _level(i, INODES_WARN_PCT, INODES_CRIT_PCT)
    find_text, find_level = findings_cell(findings)
    return HostRow(
        name=host.name,
        state=link_text(host, now),
        profile=host.profile,
        gpus=count,
        sm_clock=sm,
        power=power,
        disk_pct=fmt_pct(b),
        inode_pct=fmt_pct(i),
        job=running_job(snap),
        billed=billed,
        findings=find_text,
        level=link_level(host),
        disk_level=b_level,
        inode_level=i_level,
        findings_level=find_level,
    )


# ----------------------------------------------------------------------------- danger banner


@dataclass(frozen=True)
class Danger:
    """One urgent item for the banner."""

    level: Level
    host: str
    text: str


def failed_job_dangers(hosts: Iterable[HostState], now: float,
                       explained: Iterable[tuple[str, str]] = ()) -> list[Danger]:
    """A banner line for each failed job no finding explains (a finding that names the job,
    as the doctor's "job default/j1 (train) died: ..." does, already says more)."""
    said = list(explained)
    out: list[Danger] = []
    for h in hosts:
        for j in job_rows(h, now):
            if j.state not in FAILED_STATES:
                continue
            named = re.compile(rf"/{re.escape(j.id)}\b")
            if any(host == h.name and named.search(title) for host, title in said):
                continue
            code = f" exit {j.exit_code}" if j.exit_code is not None else ""
            out.append(Danger("crit", h.name, f"CRITICAL {h.name}: job {j.name or j.id} "
                                              f"{j.state}{code}"))
    return out


# ----------------------------------------------------------------------------- history

HISTORY_LEN = 24  # points of SM clock / power history per GPU (one per poll)


@dataclass(frozen=True)
class GpuView:
    """Everything the GPU pane shows for one host."""

    host: str
    rows: tuple[GpuRow, ...]
    absence: str | None
    sm_history: tuple[tuple[float | None, ...], ...]  # per row, oldest first
    power_history: tuple[tuple[float | None, ...], ...]
