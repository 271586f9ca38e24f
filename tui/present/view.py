"""HostState + probe snapshot -> display rows. The ONE place that knows snapshot field names.

The ``gpus`` and ``queue`` sections are still being defined by other engineers, so every read
here is defensive (missing key, wrong type, alternative spelling -> a blank cell, never an
exception) and the alternative spellings sit in small tuples at the top of each reader. When
the names settle, only this module changes. Pure functions: time comes in as ``now``.
"""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpuroom.tui.model import HostState, LinkState, Snapshot
from gpuroom.tui.present.slurm import slurm_summary
from gpuroom.tui.sanitize import sanitize_line

Level = Literal["ok", "warn", "crit"]

# U7: inodes run out before bytes, so they alarm earlier.
BYTES_WARN_PCT = 85.0
BYTES_CRIT_PCT = 95.0
INODES_WARN_PCT = 80.0
INODES_CRIT_PCT = 90.0

# Clock-event reasons that say nothing is wrong (an idle GPU clocks down on purpose).
BENIGN_THROTTLE = frozenset({"idle", "gpu_idle", "applications_clocks_setting", "none"})
# remote/queue_events.py states: queued, launching, running, succeeded, failed, killed, removed.
FAILED_JOB_STATES = frozenset({"failed", "orphaned", "error", "lost"})
ENDED_JOB_STATES = frozenset({"succeeded", "done", "failed", "killed", "removed", "orphaned"})
LIVE_JOB_STATES = frozenset({"queued", "launching", "running", "starting", "pending"})

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
MODEL_WIDTH = 9  # "H100 80GB": enough to tell cards apart in the hosts table


# ----------------------------------------------------------------------------- small readers


def _get(d: Any, *keys: str) -> Any:
    """First present, non-None value among alternative spellings of one field."""
    if not isinstance(d, Mapping):
        return None
    for key in keys:
        value = d.get(key)
        if value is not None:
            return value
    return None


def _num(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _int(value: Any) -> int | None:
    n = _num(value)
    return int(n) if n is not None else None


def _str(value: Any) -> str:
    """A snapshot field as display text. The snapshot is the box's: a job name, a mount point
    or an error in it may carry escape sequences, and none of them reaches a pane."""
    return "" if value is None else sanitize_line(str(value))


def worst(*levels: Level) -> Level:
    """The more urgent of several levels."""
    return max(levels, key=lambda lv: _LEVEL_RANK[lv], default="ok")


# ----------------------------------------------------------------------------- formatting


def fmt_age(seconds: float | None) -> str:
    """Compact age: 42s, 3m, 2h05m, 3d04h. Negative (clock skew) reads as 0s."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def fmt_bytes(n: float | None) -> str:
    """``df -h`` style, powers of 1024: 512B, 1.5K, 252G."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "K", "M", "G", "T", "P"):
        if abs(value) < 1024 or unit == "P":
            if unit == "B":
                return f"{int(value)}B"
            return f"{value:.1f}{unit}" if value < 10 else f"{value:.0f}{unit}"
        value /= 1024
    return f"{value:.0f}P"  # pragma: no cover - loop always returns


def fmt_count(n: float | None) -> str:
    """``df -hi`` style counts, powers of 1000: 980, 16K, 1.2M."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("", "K", "M", "G"):
        if abs(value) < 1000 or unit == "G":
            if unit == "":
                return f"{int(value)}"
            return f"{value:.1f}{unit}" if value < 10 else f"{value:.0f}{unit}"
        value /= 1000
    return f"{value:.0f}G"  # pragma: no cover


def fmt_pct(p: float | None) -> str:
    return "-" if p is None else f"{p:.0f}%"


def box_now(host: HostState, now: float) -> float:
    """The box's clock now, as extrapolated from its last snapshot.

    Ages of jobs and checkpoints are differences of box timestamps; comparing them to the
    jump host's clock would add the clock skew between the two machines.
    """
    t = _num(_get((host.snapshot or {}).get("host"), "time"))
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


def _throttle_reasons(raw: Any) -> tuple[str, ...]:
    if isinstance(raw, Mapping):  # {"sw_power_cap": true, ...}
        raw = [k for k, v in raw.items() if v]
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        return ()
    out = []
    for reason in raw:
        key = _str(reason).strip().lower().replace(" ", "_").replace("-", "_")
        if key and key not in BENIGN_THROTTLE:
            out.append(key)
    return tuple(out)


def _mib(d: Mapping[str, Any], mib_key: str, bytes_key: str, plain_key: str) -> float | None:
    """Memory in MiB whichever unit the field came in (plain key: bytes, as NVML gives it)."""
    mib = _num(d.get(mib_key))
    if mib is not None:
        return mib
    b = _num(_get(d, bytes_key, plain_key))
    return None if b is None else b / (1 << 20)


def gpu_rows(snapshot: Snapshot | None) -> list[GpuRow]:
    """Every GPU dict in ``snapshot["gpus"]`` (a list, or {"devices": [...]})."""
    section = (snapshot or {}).get("gpus")
    devices = _get(section, "devices", "gpus") if isinstance(section, Mapping) else section
    if not isinstance(devices, list):
        return []
    rows = []
    for i, g in enumerate(devices):
        if not isinstance(g, Mapping):
            continue
        idx = _int(g.get("index"))
        rows.append(
            GpuRow(
                index=i if idx is None else idx,
                name=_str(g.get("name")),
                sm_mhz=_num(_get(g, "clock_sm_mhz", "sm_clock_mhz")),
                sm_max_mhz=_num(_get(g, "clock_sm_max_mhz", "sm_clock_max_mhz")),
                mem_mhz=_num(_get(g, "clock_mem_mhz", "mem_clock_mhz")),
                mem_max_mhz=_num(_get(g, "clock_mem_max_mhz", "mem_clock_max_mhz")),
                power_w=_num(_get(g, "power_w")),
                power_limit_w=_num(_get(g, "power_limit_w")),
                temp_c=_num(_get(g, "temp_c")),
                util_gpu=_num(_get(g, "util_gpu_pct", "util_gpu")),
                util_mem=_num(_get(g, "util_mem_pct", "util_mem")),
                mem_used_mib=_mib(g, "mem_used_mib", "mem_used_bytes", "mem_used"),
                mem_total_mib=_mib(g, "mem_total_mib", "mem_total_bytes", "mem_total"),
                # The probe writes clock_event_reasons; older recordings use the other two.
                throttle=_throttle_reasons(
                    _get(g, "clock_event_reasons", "clock_reasons", "throttle_reasons")
                ),
            )
        )
    return rows


def gpu_absence(snapshot: Snapshot | None) -> str | None:
    """Why there are no GPU rows ("no GPU" is a normal state), None when there are some."""
    if snapshot is None:
        return "no snapshot yet"
    if gpu_rows(snapshot):
        return None
    section = snapshot.get("gpus")
    reason = _get(section, "reason", "error") if isinstance(section, Mapping) else None
    if reason is None:
        reason = snapshot.get("gpu_error")
    if reason is None:
        for err in snapshot.get("errors") or []:
            if isinstance(err, Mapping) and err.get("section") == "gpus":
                reason = err.get("error")
    if reason is None:
        reason = "none found" if section is not None else "not reported by the probe"
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
    sm_text = f"{_n(sm)}/{_n(sm_max)}" if sm is not None else "-"
    pw_text = f"{_n(pw)}/{_n(pw_max)}" if pw is not None else "-"
    return count, sm_text, pw_text


def _n(v: float | None) -> str:
    return "?" if v is None else f"{v:.0f}"


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
    """``snapshot["disks"]``: statvfs facts per path, one row per filesystem.

    home and cwd are often the same filesystem as a watched mount; a repeated ``device``
    would show the same numbers twice, so only its first path is kept.
    """
    rows: list[DiskRow] = []
    seen_devices: set[Any] = set()
    for d in (snapshot or {}).get("disks") or []:
        if not isinstance(d, Mapping):
            continue
        path = _str(d.get("path"))
        if d.get("error") is not None:
            rows.append(DiskRow(path, _str(d["error"]), *([None] * 8)))
            continue
        dev = d.get("device")
        if dev is not None:
            if dev in seen_devices:
                continue
            seen_devices.add(dev)
        total, free = _num(d.get("total_bytes")), _num(d.get("free_bytes"))
        itotal, ifree = _num(d.get("total_inodes")), _num(d.get("free_inodes"))
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
        return "crit" if self.state.lower() in FAILED_JOB_STATES else "ok"


def _job_dicts(snapshot: Snapshot | None) -> list[Mapping[str, Any]]:
    """``queue.queues.<name>.jobs`` of every queue on the box (or a flat ``queue.jobs``)."""
    queue = (snapshot or {}).get("queue")
    if isinstance(queue, Mapping) and isinstance(queue.get("queues"), Mapping):
        jobs: list[Any] = []
        for view in queue["queues"].values():
            got = _get(view, "jobs")
            jobs += got if isinstance(got, list) else []
    else:
        flat: Any = _get(queue, "jobs") if isinstance(queue, Mapping) else queue
        jobs = flat if isinstance(flat, list) else []
    if not isinstance(jobs, list):
        return []
    return [j for j in jobs if isinstance(j, Mapping)]


def _last_attempt(j: Mapping[str, Any]) -> Mapping[str, Any]:
    attempts = j.get("attempts")
    if isinstance(attempts, list) and attempts and isinstance(attempts[-1], Mapping):
        return attempts[-1]
    return {}


def _attempt_no(j: Mapping[str, Any]) -> int | None:
    n = _int(_get(_last_attempt(j), "attempt"))
    if n is not None:
        return n
    if isinstance(j.get("attempts"), list):
        return len(j["attempts"])
    return _int(_get(j, "attempt"))


def _job_id(j: Mapping[str, Any]) -> str:
    return _str(_get(j, "id", "job_id"))


def _newest_checkpoint_mtime(j: Mapping[str, Any]) -> float | None:
    direct = _num(_get(j, "checkpoint_mtime"))
    if direct is not None:
        return direct
    ck = _get(j, "checkpoint", "checkpoints")
    items = ck if isinstance(ck, list) else [ck]
    mtimes = [m for m in (_num(_get(c, "mtime")) for c in items) if m is not None]
    return max(mtimes) if mtimes else None


def _command(j: Mapping[str, Any]) -> str:
    argv = _get(j, "argv")
    if isinstance(argv, list):
        return sanitize_line(shlex.join(str(a) for a in argv))
    return _str(_get(j, "command", "cmd"))


def job_rows(host: HostState, now: float) -> list[JobRow]:
    """Jobs of ``snapshot["queue"]["jobs"]`` plus the actions still waiting for confirmation."""
    t = box_now(host, now)
    rows = []
    ids = set()
    for j in _job_dicts(host.snapshot):
        jid = _job_id(j)
        ids.add(jid)
        last = _last_attempt(j)
        started = _num(_get(last, "start") if last else _get(j, "started_at", "start"))
        ended = _num(_get(last, "end") if last else _get(j, "ended_at", "end"))
        ckpt = _newest_checkpoint_mtime(j)
        pend = None
        for entry in host.pending:
            kind, _, rest = entry.partition(":")
            if kind in ("kill", "relaunch") and rest.split(":", 1)[0] == jid:
                pend = kind
        rows.append(
            JobRow(
                id=jid,
                name=_str(_get(j, "name")),
                state=_str(_get(j, "state", "status")) or "?",
                attempt=_attempt_no(j),
                runtime_s=None if started is None else (ended if ended is not None else t)
                - started,
                exit_code=_int(_get(last, "exit_code") if last
                               else _get(j, "exit_code", "returncode")),
                command=_command(j),
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


def still_pending(entry: str, snapshot: Snapshot | None) -> bool:
    """Whether a pending action is not yet visible in ``snapshot``.

    Decided from what the box reports, not from timing, so a snapshot taken before the
    action reached the box can never confirm it.
    """
    kind, _, rest = entry.partition(":")
    jid, _, extra = rest.partition(":")
    job = next((j for j in _job_dicts(snapshot) if _job_id(j) == jid), None)
    if kind == "add":
        return job is None
    if job is None:
        # kill: a job that left the queue is gone; relaunch: nothing to confirm against.
        return False
    state = _str(_get(job, "state", "status")).lower()
    if kind == "kill":
        return state not in ENDED_JOB_STATES
    if kind == "relaunch":
        attempt, before = _attempt_no(job), _int(extra)
        if before is not None and attempt is not None:
            return attempt <= before
        return state not in LIVE_JOB_STATES
    return False


def running_job(snapshot: Snapshot | None) -> str:
    for j in _job_dicts(snapshot):
        if _str(_get(j, "state", "status")).lower() == "running":
            return _str(_get(j, "name")) or _job_id(j)
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
    """``log_chunk`` = {offset, inode, size, data_b64, reset} of job ``job_id``."""
    for j in _job_dicts(snapshot):
        if _job_id(j) != job_id:
            continue
        log = _get(j, "log_chunk", "log")
        if not isinstance(log, Mapping):
            return None
        try:
            data = base64.b64decode(str(log.get("data_b64") or ""), validate=True)
        except (binascii.Error, ValueError):
            return None
        return LogChunk(
            job_id=job_id,
            offset=_int(log.get("offset")) or 0,
            inode=_int(log.get("inode")),
            size=_int(log.get("size")),
            data=data,
            reset=bool(log.get("reset")),
        )
    return None


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
    hours = f"{seconds / 3600:.1f}h"
    return hours if price_per_hour is None else f"${price_per_hour * seconds / 3600:.2f} {hours}"


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
    snap = host.snapshot
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
            if j.state.lower() not in FAILED_JOB_STATES:
                continue
            named = re.compile(rf"/{re.escape(j.id)}\b")
            if any(host == h.name and named.search(title) for host, title in said):
                continue
            code = f" exit {j.exit_code}" if j.exit_code is not None else ""
            out.append(Danger("crit", h.name, f"CRITICAL {h.name}: job {j.name or j.id} "
                                              f"{j.state}{code}"))
    return out


# ----------------------------------------------------------------------------- history

SPARK_CHARS = "▁▂▃▄▅▆▇█"
HISTORY_LEN = 24  # points of SM clock / power history per GPU (one per poll)


def sparkline(values: Sequence[float | None], top: float | None = None) -> str:
    """Block-character sparkline scaled to ``top`` (e.g. the max clock), gaps as spaces.

    Scaled to the hardware maximum, not to the window's own max, so a GPU stuck at a
    throttled clock reads low instead of filling the line (U21/U23).
    """
    got = [v for v in values if v is not None]
    hi = top if top else (max(got) if got else 0.0)
    if not hi:
        return " " * len(values)
    steps = len(SPARK_CHARS) - 1
    return "".join(
        " " if v is None else SPARK_CHARS[min(steps, max(0, round(v / hi * steps)))]
        for v in values
    )


@dataclass(frozen=True)
class GpuView:
    """Everything the GPU pane shows for one host."""

    host: str
    rows: tuple[GpuRow, ...]
    absence: str | None
    sm_history: tuple[tuple[float | None, ...], ...]  # per row, oldest first
    power_history: tuple[tuple[float | None, ...], ...]
