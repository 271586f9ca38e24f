"""Stalled while billing (issue 19, item 1; principle 1, U16): a job the queue calls
"running" that has done nothing for a while, on GPUs drawing idle power.

A hung job is invisible to the idle clock (it counts "no job running") and to the log pane (a
log that does not move looks like a quiet one). The evidence the probe already ships says it:
the log's and the newest checkpoint's mtimes (the box's clock, so no clock skew), the power of
the job's GPUs, and the CPU seconds of its process group across two polls. A long evaluation
still writes its log, and a CPU job at work burns CPU seconds: neither is a stall.

Pure (no I/O, no wall clock): snapshots and the host's threshold in, ``Stall``s out. The
doctor words them as findings (``stall_findings``) and the idle clock counts them
(``clock.is_idle``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuroom.tui.present.format import fmt_duration, fmt_money
from gpuroom.tui.rules.finding import Finding, Severity, job_label
from gpuroom.tui.snapshot import Gpu, Job, Snapshot

# A GPU drawing at most this share of its power limit is doing no training (an idle H100 draws
# ~70 of 700 W; the idle A10 of fixtures/throttle/a10-... 21.3 of 150 W).
IDLE_POWER_FRAC = 0.2
# The default stall threshold (hosts.toml ``stall_after_min`` overrides it per host).
STALL_AFTER_S = 20 * 60.0
# Critical once the stall has lasted this many thresholds (an hour by default).
STALL_CRIT_FACTOR = 3.0
# A process group using at least this many CPU-seconds per second is working, not hung.
CPU_BUSY_FRAC = 0.25

STALL_FIX = ("the job is hung while the box bills: look at its last log lines and py-spy dump "
             "--pid PID (a deadlock, a dead NCCL peer, a blocked read), then kill it (K) and "
             "relaunch from the last checkpoint; raise stall_after_min in hosts.toml for a "
             "job that is legitimately quiet")


def gpu_idle(gpu: Gpu) -> bool:
    power, limit = gpu.power_w, gpu.power_limit_w
    if power is not None and limit:
        return power <= IDLE_POWER_FRAC * limit
    util = gpu.util_gpu_pct
    return util is not None and util <= 1.0


def job_gpus(job: Job, snap: Snapshot) -> list[Gpu]:
    """The GPUs a job was pinned to, or every GPU of the box when it was not pinned."""
    attempt = job.last_attempt
    wanted = attempt.gpus if attempt is not None else None
    if wanted:
        return [g for g in snap.gpus if g.index in wanted]
    return list(snap.gpus)


def last_activity(job: Job) -> float | None:
    """The newest sign of life on the box's clock: the log's mtime, the newest checkpoint's,
    or the attempt's start when it has written neither yet."""
    marks = []
    if job.log_chunk is not None and job.log_chunk.mtime is not None:
        marks.append(job.log_chunk.mtime)
    if job.checkpoint is not None and job.checkpoint.mtime is not None:
        marks.append(job.checkpoint.mtime)
    attempt = job.last_attempt
    if attempt is not None and attempt.start is not None:
        marks.append(attempt.start)
    return max(marks) if marks else None


def cpu_rate(prev: Snapshot | None, snap: Snapshot, job: Job) -> float | None:
    """CPU-seconds per second of the job's process group between the two polls, or None when
    one of them did not measure it (first poll, another attempt, no /proc)."""
    if prev is None or job.cpu_s is None:
        return None
    old = prev.job(job.id) if prev.job(job.id) is not None else None
    t0, t1 = prev.host.time, snap.host.time
    if old is None or old.cpu_s is None or t0 is None or t1 is None or t1 <= t0:
        return None
    old_a, new_a = old.last_attempt, job.last_attempt
    if (old_a.attempt if old_a else None) != (new_a.attempt if new_a else None):
        return None
    return max(0.0, job.cpu_s - old.cpu_s) / (t1 - t0)


@dataclass(frozen=True)
class Stall:
    job: Job
    seconds: float  # since the last sign of life, on the box's clock
    gpus: tuple[Gpu, ...]
    cpu_rate: float | None


def stalls(prev: Snapshot | None, snap: Snapshot,
           after_s: float | None = None) -> list[Stall]:
    """Running jobs with no sign of life for ``after_s`` (default 20 min) whose GPUs sit at
    idle power and whose CPU is not busy. A job with no GPU is called stalled only when two
    polls measured its CPU flat: without that, a CPU job at work looks the same."""
    limit = STALL_AFTER_S if after_s is None else after_s
    t = snap.host.time
    if t is None:
        return []
    out = []
    for job in snap.jobs:
        if job.state != "running" or job.is_slurm:
            continue  # launching is not yet running; a Slurm job's GPUs are not this box's
        gpus = job_gpus(job, snap)
        if not all(gpu_idle(g) for g in gpus):
            continue
        last = last_activity(job)
        if last is None or t - last < limit:
            continue
        rate = cpu_rate(prev, snap, job)
        if rate is not None and rate >= CPU_BUSY_FRAC:
            continue
        if rate is None and not gpus:
            continue
        out.append(Stall(job, t - last, tuple(gpus), rate))
    return out


def stall_findings(host: str, prev: Snapshot | None, snap: Snapshot, *,
                   after_s: float | None = None,
                   price_per_hour: float | None = None) -> list[Finding]:
    limit = STALL_AFTER_S if after_s is None else after_s
    out = []
    for s in stalls(prev, snap, limit):
        sev: Severity = "critical" if s.seconds >= STALL_CRIT_FACTOR * limit else "warn"
        seen = [f"no log or checkpoint write for {fmt_duration(s.seconds)}"]
        if s.gpus:
            seen.append("GPU " + ", ".join(
                f"{g.index}: {g.power_w:.0f}/{g.power_limit_w:.0f} W" if g.power_w is not None
                and g.power_limit_w else f"{g.index}: idle" for g in s.gpus))
        if s.cpu_rate is not None:
            seen.append(f"CPU {s.cpu_rate:.2f} cores")
        burnt = fmt_money(price_per_hour, s.seconds)
        if burnt:
            seen.append(f"{burnt} burnt since it stalled")
        out.append(Finding("U16", sev, host,
                           f"{job_label(s.job)} stalled while billing",
                           "; ".join(seen), STALL_FIX))
    return out
