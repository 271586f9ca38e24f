"""The doctor: what a snapshot (and the one before it) says is wrong, as gotcha-id findings.

Pure functions of (previous snapshot | None, snapshot | None, link state, profile, now): no
I/O, no wall clock, so recordings replay to the same findings. Each finding carries its gotcha
id (U7, GEN8, ...: docs/GOTCHAS.md), what was seen with its numbers, and the fix in a line.

A failed poll is never a dead run (GEN8): a host that did not answer gets one finding saying
so and nothing is concluded from its old snapshot. A job that was running and is gone is
explained by the strongest evidence first (U3's ladder): reboot, cgroup OOM, kernel OOM line
naming its pid, a lost GPU, and only then a signal or a kill. A kill the user asked for
(``queue kill``, the room's K) is recorded in the queue and needs no ladder: it says so. A
kernel log the helper could not read is said, not taken as clean (U44).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence

from gpuroom.profiles import Profile
from gpuroom.remote.queue_events import ACTIVE_STATES
from gpuroom.tui.errors import FIX_CLAUSE
from gpuroom.tui.model import HeldFailover, HostState, LinkState, Move
from gpuroom.tui.present.format import fmt_bytes, fmt_duration, fmt_number, fmt_text, fmt_utc
from gpuroom.tui.present.slurm import expected_start_text, wait_reason
from gpuroom.tui.rules.cadence import cadence_findings
from gpuroom.tui.rules.drift import LocalCode, drift_findings, tree_drift_findings
from gpuroom.tui.rules.finding import (
    SEVERITY_RANK,
    Finding,
    Severity,
    fix_for,
    path_under,
)
from gpuroom.tui.rules.job_leftovers import leftover_findings
from gpuroom.tui.rules.money import (
    Recall,
    cpu_training_findings,
    cpu_training_jobs,
    dead_gpu_events,
    dead_gpu_findings,
    log_findings,
    reboot_findings,
)
from gpuroom.tui.rules.moves import held_findings, move_findings
from gpuroom.tui.rules.plausible import clock_findings
from gpuroom.tui.rules.resume import restart_findings
from gpuroom.tui.rules.stall import job_gpus, stall_findings
from gpuroom.tui.rules.survival import ckpt_survival_findings, preempt_findings
from gpuroom.tui.snapshot import Attempt, Checkpoint, Disk, Gpu, Job, Kernel, SlurmRun, Snapshot

# U21: "100% util" with the SM clock and the power both low is a GPU fed a trickle of kernels.
UNDERFED_UTIL_PCT = 80.0
UNDERFED_CLOCK_FRAC = 0.6
UNDERFED_POWER_FRAC = 0.35
# U23: an H100 throttles around 83 C. The probe has no base clock; 80 % of the max SM clock
# stands in for it (H100 SXM: base 1590 of max 1980 MHz).
HOT_C = 83.0
BASE_CLOCK_FRAC = 0.8
THROTTLE_REASONS = frozenset({"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown",
                              "hw_thermal_slowdown", "hw_power_brake_slowdown"})
# U38: "~0 %" util.
IDLE_UTIL_PCT = 5.0
# U43: a log quiet for less than this is just between prints, not "frozen".
LOG_SILENT_S = 120.0
BUSY_CPU_FRACTION = 0.1  # of one core over the poll window: a job working, not waiting
MIB = 1 << 20  # NVML and the queue count GPU memory in MiB
# U7 / U6 thresholds.
INODE_WARN_PCT = 90.0
INODE_CRIT_PCT = 99.0
BYTES_CRIT_PCT = 95.0
BYTES_LOW_PCT = 90.0
TMP_SUFFIXES = (".tmp", ".partial", ".part")
# U44: a failed section's name and error are the box's words, bounded for a finding.
SECTION_NAME_MAX = 40
SECTION_ERROR_MAX = 300
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
# Slurm (SLURM1-SLURM5 in docs/GOTCHAS.md). The ends those gotchas explain, with the
# gotcha whose fix applies: TIMEOUT is the walltime kill SLURM2 budgets for, OUT_OF_MEMORY is
# SLURM4, PREEMPTED / NODE_FAIL are "requeue territory", where SLURM5 decides whether the
# checkpoint survived.
SLURM_END_IDS = {"TIMEOUT": "SLURM2", "OUT_OF_MEMORY": "SLURM4", "PREEMPTED": "SLURM5",
                 "NODE_FAIL": "SLURM5"}
SLURM_END_TITLES = {
    "TIMEOUT": "hit its walltime (Slurm TIMEOUT)",
    "OUT_OF_MEMORY": "was OOM-killed by its cgroup (Slurm OUT_OF_MEMORY)",
    "PREEMPTED": "was preempted (Slurm PREEMPTED)",
    "NODE_FAIL": "lost its node (Slurm NODE_FAIL)",
}
# SLURM2: once the wall is nearer than this many warning leads, a checkpoint older than one
# lead is what the SIGKILL would roll the job back to.
SLURM_LEAD_FACTOR = 2.0


FIX = {
    "GEN8": "a dropped poll is not a dead run: re-ssh and check the process, log tail and "
            "checkpoint mtime before concluding anything",
    "GEN6": "tmux/nohup do not survive a reboot: relaunch the same command and resume from "
            "the last checkpoint; add an @reboot relaunch on a box that reboots often",
    "U9": "size num_workers against memory.max, not CPU count; share one copy across workers; "
          "do not shrink the batch for a phantom OOM",
    "U22": "a hardware fault, not your code: stop the instance and re-rent a different box",
    "U3": "diagnose cheap to conclusive (dmesg, GPU memory, cgroup, uptime) before 'fixing'; "
          "a pkill may have matched more than intended",
    "U21": "util % is a liar: read SM clock and power (dmon -s pucvmet) and feed the GPU (U24)",
    "U23": "a tenant cannot fix cooling or power: flag it and re-rent a healthier box; do not "
           "read the slowdown as a regression",
    "U38": "CPU-data-bound, not stalled: move the transform to the GPU or tune num_workers / "
           "prefetch (U24)",
    "U7": "watch df -i, not only df -h: clean by value (keep eval JSONs, drop scratch), shard "
          "many small files into tar (U25)",
    "U6": "pre-budget ckpt_size x runs + latest; delete the *.tmp / rolling latest.pth, keep "
          "best.pth, or move checkpoints to durable storage",
    "U11": "a holder nvidia-smi cannot see locks VRAM: fuser -v /dev/nvidia*, kill the listed "
           "pids (or restart the container)",
    "GEN7": "the operator is the scheduler: serialize through the queue or pin each run to its "
            "own card with CUDA_VISIBLE_DEVICES",
    "U40": "cap the thread pools to the slice: export OMP_NUM_THREADS=N MKL_NUM_THREADS=N "
           "with N the cgroup's vCPUs, in the launch wrapper",
    "U43": "stdout is block-buffered off a TTY (the queue sets PYTHONUNBUFFERED=1 for python; "
           "other programs: stdbuf -oL CMD) and a progress bar drawn only on a terminal (rich, "
           "tqdm) never reaches the log: print or log a line every N steps, and judge liveness "
           "by checkpoints, not log cadence",
    "U10": "check free VRAM before launch; size the batch to fit beside the running job; "
           "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "SLURM1": "the warning handler only sets a flag; the job checkpoints at a safe point (end "
              "of step), then scontrol requeue $SLURM_JOB_ID or exits so --requeue returns "
              "it, and the requeued run resumes from that checkpoint",
    "SLURM2": "at the wall Slurm sends SIGTERM, then SIGKILL after KillWait (~30 s): raise "
              "--time or requeue; budget the warning (--signal=...@LEAD) so a full checkpoint "
              "fits before the wall even with Slurm's 60 s jitter; checkpoint periodically "
              "too, never only on the signal; write it atomically (tmp, fsync, rename)",
    "SLURM4": "OOM is a job state, not a traceback: read sacct -o MaxRSS,ReqMem and raise "
              "--mem / --mem-per-cpu to MaxRSS x 1.2; host RAM (U9), not VRAM (U10): do not "
              "shrink the batch",
    "SLURM5": "requeue territory: requeue the job (--requeue, or relaunch it) and resume from "
              "the last checkpoint, which must be on the shared FS (/scratch/$USER): "
              "node-local $TMPDIR is wiped when the job ends",
    "T6": "check the fingerprint with your provider; the error names the command that trusts "
          "it",
    "U44": "read the error: until it is fixed, what that part of the box would show is unseen; "
           "`gpuroom probe {host}` prints the helper's own report (errors[].trace)",
}

# U44 for the kernel log: what makes dmesg readable to the helper's user.
KERNEL_BLIND_FIX = ("as root on the box: sysctl -w kernel.dmesg_restrict=0 (persist it in "
                    "/etc/sysctl.d/), or run the helper as a user in group adm; a rental that "
                    "allows neither leaves Xid and OOM detection off")
# A kill the queue recorded as asked for: nothing to diagnose.
KILLED_FIX = ("nothing to diagnose, the kill was asked for: relaunch it (R, or gpuroom queue "
              "relaunch {host} {job}) if it should run again")


def _finding(fid: str, severity: Severity, host: str, title: str, seen: str) -> Finding:
    return Finding(fid, severity, host, title, seen, fix_for(FIX[fid], host))


# ------------------------------------------------------------------------------- readers

def _jobs(snap: Snapshot | None) -> dict[str, Job]:
    return dict(snap.iter_jobs()) if snap is not None else {}


def _attempt(job: Job | None) -> Attempt | None:
    return job.last_attempt if job is not None else None


def _attempt_no(job: Job | None) -> int | None:
    a = _attempt(job)
    return a.attempt if a is not None else None


def _gpu_label(gpu: Gpu) -> str:
    return f"GPU {gpu.index if gpu.index is not None else '?'} ({gpu.name or 'GPU'})"


def _by_index(snap: Snapshot | None) -> dict[int | None, Gpu]:
    return {g.index: g for g in snap.gpus} if snap is not None else {}


def _log_size(job: Job) -> float | None:
    chunk = job.log_chunk
    if chunk is None:
        return None
    return chunk.size if chunk.size is not None else chunk.next_offset


# ------------------------------------------------------------------------------- link

def link_findings(host: str, link: LinkState, error: str | None,
                  age_s: float | None, host_key: str | None = None) -> list[Finding]:
    """GEN8 / U3's separate trap: the poll failed, which says nothing about the job. A poll
    refused at the box's host key (T6) says so: the user has a key to check, not a link."""
    if link is LinkState.UP:
        return []
    if host_key is not None:
        message, _, fix = (error or "").partition(FIX_CLAUSE)
        changed = host_key == "changed"
        return [Finding("T6", "critical" if changed else "warn", host,
                        "host key CHANGED: refused until you check it" if changed else
                        "unknown host key: refused until you check and trust it",
                        message or "no answer", fix or FIX["T6"])]
    age = f"last good snapshot {fmt_duration(age_s)} ago" if age_s is not None else "never answered"
    return [_finding(
        "GEN8", "warn", host,
        f"link {link.value}: the poll failed, this does NOT mean the job died",
        f"{error or 'no answer'}; {age}")]


# ------------------------------------------------------------------------------- U3 ladder

def _job_died(old: Job, new: Job | None, rebooted: bool, new_boot: str | None) -> bool:
    """A job running before that is not running the same attempt now (and did not succeed)."""
    if new is None:
        return True
    state = new.state
    if state == "succeeded":
        return False
    if state in ACTIVE_STATES:
        if _attempt_no(old) != _attempt_no(new):
            return True  # a retry already started: the earlier attempt ended between polls
        # After a reboot the queue may still say "running" until its runner notices.
        new_a = _attempt(new)
        attempt_boot = new_a.boot_id if new_a is not None else None
        return rebooted and attempt_boot is not None and attempt_boot != new_boot
    return True


def _old_attempt_in(new: Job | None, old: Job) -> Attempt | None:
    """The attempt that was running, as the new snapshot reports its end."""
    return new.attempt(_attempt_no(old)) if new is not None else None


def vanished_findings(host: str, prev: Snapshot | None, snap: Snapshot,
                      recall: Recall | None = None) -> list[Finding]:
    """Explain each job that was running in ``prev`` and is not now, strongest evidence first.
    ``recall`` carries the kernel events of the last window, so an Xid logged one poll before
    the job died still explains it."""
    out: list[Finding] = []
    old_boot = prev.host.boot_id if prev is not None else None
    new_boot = snap.host.boot_id
    rebooted = old_boot is not None and new_boot is not None and old_boot != new_boot
    old_jobs, new_jobs = _jobs(prev), _jobs(snap)
    events = recall.events if recall is not None else snap.kernel.events
    oom_before = prev.cgroup.oom_kill if prev is not None else None
    oom_now = snap.cgroup.oom_kill
    # The counter restarts at 0 with the box, so a rise only means something within one boot.
    cgroup_oom = (not rebooted and oom_before is not None and oom_now is not None
                  and oom_now > oom_before)
    dead_gpu = dead_gpu_events(events)
    explained_reboot = False
    for key, old in old_jobs.items():
        if old.state not in ACTIVE_STATES:
            continue
        new = new_jobs.get(key)
        label = f"job {key} ({old.name or key})"
        if not _job_died(old, new, rebooted, new_boot):
            if old.is_slurm and new is not None and _requeued_between(old, new):
                out.append(_requeued_finding(host, label, old, new))
            continue
        ended = _old_attempt_in(new, old)
        if old.is_slurm:
            # The box's own evidence (reboot, cgroup, dmesg, Xid) is the login node's, not the
            # compute node's: Slurm's state is the verdict (SLURM4: OOM is a job STATE).
            if not (new is not None and new.state == "failed"
                    and new.slurm_state in SLURM_END_IDS):
                out.append(_ended_finding(host, label, new, ended, old))
            continue  # a final state a SLURM gotcha explains is slurm_findings' steady finding
        if ended is not None and ended.end_reason == "killed":
            # The queue's own record (kill_requested answered by killed) is the strongest
            # evidence there is: no OOM or signal guess may replace it.
            out.append(_killed_finding(host, old.id, label, ended))
            continue
        job_pids = _job_pids(_attempt(old), ended)
        oom_lines = [e for e in events if e.kind == "oom" and e.pid in job_pids]
        own_oom = ended.oom_kills if ended is not None else None
        if rebooted or (ended is not None and ended.end_reason == "orphaned_by_reboot"):
            explained_reboot = True
            uptime = snap.host.uptime_s
            out.append(_finding(
                "GEN6", "critical", host, f"{label} died: the box rebooted",
                f"boot_id {str(old_boot)[:8]} -> {str(new_boot)[:8]}"
                + (f", uptime {fmt_duration(uptime)}" if uptime is not None and uptime >= 0
                   else "")))
        elif ended is not None and own_oom is not None and own_oom > 0:
            out.append(_finding(
                "U9", "critical", host, f"{label} died: OOM-kill in its own cgroup",
                f"memory.events oom_kill +{own_oom} while it ran"
                f" ({ended.cgroup or 'its cgroup'})"
                + (f", {ended.signal}" if ended.signal else "")))
        elif cgroup_oom:
            out.append(_finding(
                "U9", "critical", host, f"{label} died: cgroup OOM-kill",
                f"cgroup oom_kill {oom_before:.0f} -> {oom_now:.0f} (U41: the counter rose, "
                f"so it was your cgroup)"))
        elif oom_lines:
            e = oom_lines[0]
            where = "memory cgroup" if e.memcg else "kernel"
            out.append(_finding(
                "U9", "critical", host, f"{label} died: {where} OOM-killed pid {e.pid}",
                e.line or f"Killed process {e.pid} ({e.process})"))
        elif dead_gpu:
            e = dead_gpu[0]
            what = f"Xid {e.code}" if e.kind == "xid" else "GPU fell off the bus"
            out.append(_finding(
                "U22", "critical", host, f"{label} died: {what}, the GPU is dead",
                e.line or what))
        else:
            out.append(_ended_finding(host, label, new, ended, kernel=snap.kernel))
    if rebooted and not explained_reboot:
        out.append(_finding(
            "GEN6", "info", host, "the box rebooted (no job was running)",
            f"boot_id {str(old_boot)[:8]} -> {str(new_boot)[:8]}"))
    return out


def _job_pids(running: Attempt | None, ended: Attempt | None) -> set[int]:
    """The processes an attempt was: the wrapper, the training process under it and the
    group's processes the runner saw (a data-loader worker the kernel may pick)."""
    pids: set[int] = set()
    for a in (running, ended):
        if a is None:
            continue
        pids.update(p for p in (a.pid, a.child_pid) if p is not None)
        pids.update(a.pids or ())
    return pids


def _killed_finding(host: str, job: str, label: str, ended: Attempt) -> Finding:
    """A job gpuroom killed because the user asked (queue kill, K)."""
    seen = ["the queue recorded a kill request and gpuroom's runner ended the job"]
    if ended.end is not None:
        seen.append(f"at {fmt_utc(ended.end)} (the box's clock)")
    if ended.signal:
        seen.append(f"by {ended.signal}")
    if ended.duration is not None:
        seen.append(f"after {fmt_duration(ended.duration)}")
    return Finding("U3", "info", host, f"{label} was killed on request (by gpuroom)",
                   " ".join(seen), fix_for(KILLED_FIX, host, job))


def _not_seen(kernel: Kernel | None) -> str:
    """What the ladder ruled out: with the kernel log unreadable, OOM and Xid are unknown."""
    if kernel is None or kernel.readable:
        return "no reboot, OOM or Xid seen"
    why = f" ({kernel.detail})" if kernel.detail else ""
    return f"no reboot seen; kernel log unreadable{why}, so an OOM kill or Xid is not ruled out"


def _ended_finding(host: str, label: str, new: Job | None, ended: Attempt | None,
                   old: Job | None = None, *, kernel: Kernel | None = None) -> Finding:
    """The bottom of the ladder: no reboot, no OOM, no Xid seen (or, as ``kernel`` says, the
    kernel log could not be read). A Slurm job comes here directly: back in the queue with
    the same Slurm id it was requeued, not ended."""
    reason = ended.end_reason if ended is not None else None
    signal = ended.signal if ended is not None else None
    code = ended.exit_code if ended is not None else None
    not_seen = _not_seen(kernel)
    if new is None:
        return _finding("U3", "warn", host, f"{label} is gone from the queue",
                        f"{not_seen}; the job is no longer listed")
    if new.is_slurm and new.state == "queued" and (old is None or new.slurm_id == old.slurm_id):
        return _requeued_finding(host, label, old, new)
    if new.is_slurm and reason == "CANCELLED":
        return _finding("U3", "info", host, f"{label} was cancelled (scancel)",
                        f"Slurm job {new.slurm_id} CANCELLED")
    if reason == "killed" and ended is not None:
        return _killed_finding(host, new.id, label, ended)
    # The job's state, not what this room happened to see, sets the level: a failed job is
    # critical here as in the banner of a room started after it ended; one the queue is
    # retrying is a warning.
    level: Severity = "critical" if new.state == "failed" else "warn"
    error = ended.error_line if ended is not None else None
    quoted = f"; the log's last error: {error}" if error else ""
    if signal:
        return _finding("U3", level, host, f"{label} ended by signal {signal}",
                        f"{not_seen}: a manual kill (pkill matching more than intended) or an "
                        f"SSH HUP{quoted}")
    if reason == "vanished":
        return _finding("U3", level, host, f"{label} vanished",
                        f"the wrapper died without recording an exit ({new.reason})")
    return _finding("U3", level, host, f"{label} exited with code {code}",
                    f"{not_seen}{quoted}" if error else
                    f"{not_seen}: read the log tail for the error")


# ------------------------------------------------------------------------------- Slurm

def _requeued_between(old: Job, new: Job) -> bool:
    """Running at both polls, but a run ended and the same Slurm job started again between
    them (a requeue faster than the poll interval)."""
    if new.slurm_id != old.slurm_id:
        return False
    return len(new.runs) > len(old.runs) or (new.restarts or 0) > (old.restarts or 0)


def _requeued_finding(host: str, label: str, old: Job | None, new: Job) -> Finding:
    """Info: the job is back in Slurm's queue under the same id. The batch script records a
    run it requeued after the walltime warning (SLURM1's path); a requeue with no such record
    is Slurm's own (preemption, node failure, an admin's scontrol requeue: SLURM5)."""
    runs = new.runs
    last: SlurmRun | None = runs[-1] if runs else None
    old_runs = old.runs if old is not None else ()
    by_script = last is not None and last.requeue and len(runs) > len(old_runs)
    seen = [f"Slurm job {new.slurm_id} back in the queue"]
    if by_script and last is not None:
        seen.append(f"run {last.restart} exited {last.exit_code} after the "
                    f"walltime warning and the batch script requeued it")
    else:
        seen.append("no run record of this requeue: Slurm requeued it (preemption, node "
                    "failure or scontrol requeue)")
    state = new.slurm_state
    if state and new.state == "queued":
        seen.append(f"{state}" + (f" ({new.reason})" if new.reason else ""))
    restarts = max(new.restarts or 0, len(runs))
    if restarts:
        seen.append(f"requeued x{restarts}")
    return _finding("SLURM1" if by_script else "SLURM5", "info", host,
                    f"{label} was requeued", "; ".join(seen))


def walltime_left(job: Job, now: float) -> float | None:
    """Seconds until Slurm kills the job at its walltime: from ``end_time`` (squeue's time
    left when probed), else ``time_limit_s`` after the current attempt's start."""
    end = job.end_time
    if end is None:
        limit = job.time_limit_s
        attempt = job.last_attempt
        start = attempt.start if attempt is not None else None
        if limit is None or start is None:
            return None
        end = start + limit
    return end - now


def _slurm_end(host: str, key: str, job: Job) -> Finding | None:
    state = job.slurm_state or ""
    fid = SLURM_END_IDS.get(state)
    if fid is None or job.state != "failed":
        return None  # relaunched (a new attempt is queued) or ended some other way
    label = f"job {key} ({job.name or key})"
    seen = [f"Slurm job {job.slurm_id}" + (f" on {job.node}" if job.node else "")]
    elapsed, limit = job.elapsed_s, job.time_limit_s
    if elapsed is not None:
        seen.append(f"ran {fmt_duration(elapsed)}"
                    + (f" of a {fmt_duration(limit)} walltime" if limit is not None else ""))
    if job.exit_code is not None:
        seen.append(f"exit {job.exit_code}")
    runs = job.runs
    lead = job.signal_lead_s
    if state == "TIMEOUT":
        if not lead:
            seen.append("no walltime warning was armed (signal lead 0)")
        elif runs and runs[-1].warned:
            seen.append(f"the warning ({lead:.0f} s before the wall) reached the job, "
                        f"which did not stop in time")
        elif runs:
            seen.append("the walltime warning never reached the batch script")
    if state in ("PREEMPTED", "NODE_FAIL") and job.ckpt_dir:
        seen.append(f"checkpoints in {job.ckpt_dir}")
    if runs and len(runs) > 1:
        seen.append(f"after {len(runs) - 1} requeue(s)")
    return _finding(fid, "warn", host, f"{label} {SLURM_END_TITLES[state]}", "; ".join(seen))


def _slurm_ckpt_stale(host: str, key: str, job: Job, t: float) -> Finding | None:
    """SLURM2: the wall is near and the newest checkpoint is older than the warning lead, so
    a warning that comes late (or a save that does not fit in KillWait) loses the gap."""
    lead = job.signal_lead_s
    if job.state not in ACTIVE_STATES or not lead:
        return None
    left = walltime_left(job, t)
    if left is None or left >= SLURM_LEAD_FACTOR * lead:
        return None
    c = job.checkpoint
    mtime = c.mtime if c is not None else None
    elapsed = job.elapsed_s
    if mtime is not None:
        age = t - mtime
        if age <= lead:
            return None
        newest = f"newest checkpoint {fmt_duration(age)} old ({c.path if c else ''})"
    else:
        if elapsed is not None and elapsed <= lead:
            return None  # running for less than a lead: nothing could be older than one yet
        newest = "no checkpoint" + (f" in {job.ckpt_dir}" if job.ckpt_dir else "")
    label = f"job {key} ({job.name or key})"
    return _finding(
        "SLURM2", "warn", host, f"{label}: no checkpoint newer than the warning lead",
        f"Slurm job {job.slurm_id}: walltime left {fmt_duration(left)}, warning "
        f"{lead:.0f} s before the wall; {newest}")


def _slurm_waits(host: str, key: str, job: Job, t: float) -> Finding | None:
    """SLURM6: a pending job's reason code in words, what to do, and Slurm's expected start.
    Info while it waits its turn; warn when the reason never clears on its own."""
    if job.state != "queued" or not job.slurm_id:
        return None
    why = wait_reason(job.reason)
    if why is None:
        return None
    seen = [f"Slurm job {job.slurm_id} PENDING ({why.code}): {why.meaning}"]
    start = expected_start_text(job, t)
    seen.append(start or "Slurm gives no expected start yet")
    severity: Severity = "warn" if why.stuck else "info"
    title = f"job {key} ({job.name or key}) waits: {why.code}"
    return Finding("SLURM6", severity, host, title, "; ".join(seen), why.action)


def slurm_findings(host: str, snap: Snapshot, now: float) -> list[Finding]:
    """Steady Slurm findings: they hold as long as the job's record says so (Slurm's final
    state persists in the queue's events), not only on the poll that saw the change."""
    out: list[Finding] = []
    # The record's times are the login node's clock, as is host.time: compare like with like.
    t = snap.host.time
    t = now if t is None else t
    for key, job in _jobs(snap).items():
        if not job.is_slurm:
            continue
        for f in (_slurm_end(host, key, job), _slurm_ckpt_stale(host, key, job, t),
                  _slurm_waits(host, key, job, t)):
            if f is not None:
                out.append(f)
    return out


# ------------------------------------------------------------------------------- GPU health

def _underfed(gpu: Gpu) -> bool:
    util, clock, clock_max = gpu.util_gpu_pct, gpu.clock_sm_mhz, gpu.clock_sm_max_mhz
    power, limit = gpu.power_w, gpu.power_limit_w
    if util is None or clock is None or power is None or not clock_max or not limit:
        return False
    return (util >= UNDERFED_UTIL_PCT and clock < UNDERFED_CLOCK_FRAC * clock_max
            and power < UNDERFED_POWER_FRAC * limit)


def gpu_findings(host: str, prev: Snapshot | None, snap: Snapshot) -> list[Finding]:
    out: list[Finding] = []
    before = _by_index(prev)
    for gpu in snap.gpus:
        label = _gpu_label(gpu)
        old = before.get(gpu.index)
        # One sample is never enough for U21: the previous poll must agree.
        if _underfed(gpu) and old is not None and _underfed(old):
            out.append(_finding(
                "U21", "warn", host, f"{label} underfed: util high, SM clock and power low",
                f"util {fmt_number(gpu.util_gpu_pct)} %, SM {fmt_number(gpu.clock_sm_mhz)}/"
                f"{fmt_number(gpu.clock_sm_max_mhz)} MHz, power {fmt_number(gpu.power_w)}/"
                f"{fmt_number(gpu.power_limit_w)} W"))
        active = sorted(set(gpu.clock_event_reasons) & THROTTLE_REASONS)
        temp, clock, clock_max = gpu.temp_c, gpu.clock_sm_mhz, gpu.clock_sm_max_mhz
        hot_slow = (temp is not None and temp >= HOT_C and clock is not None
                    and clock_max is not None and clock < BASE_CLOCK_FRAC * clock_max)
        if active or hot_slow:
            seen = []
            if active:
                seen.append("active: " + ", ".join(active))
            seen.append(f"temp {fmt_number(temp)} C, "
                        f"SM {fmt_number(clock)}/{fmt_number(clock_max)} MHz")
            out.append(_finding("U23", "warn", host, f"{label} is throttling",
                                "; ".join(seen)))
        pids = sorted({p.pid for p in gpu.processes if p.pid is not None
                       and not p.display_only})
        if len(pids) >= 2:
            out.append(_finding(
                "GEN7", "warn", host, f"{label} is shared by {len(pids)} processes",
                "pids " + ", ".join(str(p) for p in pids)))
    holders = snap.vram_holders
    if holders:
        out.append(_finding(
            "U11", "warn", host,
            f"{len(holders)} process(es) hold /dev/nvidia* unseen by nvidia-smi",
            "; ".join(f"pid {h.pid} {h.comm or '?'} ({h.state or '?'})" for h in holders[:4])))
    return out


# ------------------------------------------------------------------------------- jobs

def job_findings(host: str, prev: Snapshot | None, snap: Snapshot,
                 cpu_training_after_s: float | None = None) -> list[Finding]:
    """U38, U43, U40, U10: what running and queued jobs show against the box."""
    out: list[Finding] = []
    old_jobs = _jobs(prev)
    window = None
    t_prev = prev.host.time if prev is not None else None
    t_now = snap.host.time
    if t_prev is not None and t_now is not None:
        window = t_now - t_prev
    vcpus = snap.cgroup.cpu_quota_vcpus
    cpu_count = snap.host.cpu_count
    # A job with no process on its GPUs is training on the CPU (U31, critical), not U38.
    on_cpu = {j.key for j in cpu_training_jobs(prev, snap, cpu_training_after_s)}
    for key, job in _jobs(snap).items():
        state = job.state
        label = f"job {key} ({job.name or key})"
        old = old_jobs.get(key)
        if state in ACTIVE_STATES and old is not None and old.state in ACTIVE_STATES \
                and _attempt_no(old) == _attempt_no(job):
            size_old, size_new = _log_size(old), _log_size(job)
            log_grew = size_old is not None and size_new is not None and size_new > size_old
            log_flat = size_old is not None and size_new is not None and size_new == size_old
            m_old = _mtime(old.checkpoint)
            m_new = _mtime(job.checkpoint)
            ckpt_moved = m_old is not None and m_new is not None and m_new > m_old
            # A Slurm job runs on a compute node: the probed box's GPUs are not its GPUs;
            # its own are those its in-allocation probe saw (issue 23), if any.
            gpus = [g for n in (job.telemetry.nodes if job.telemetry else ()) for g in n.gpus] \
                if job.is_slurm else job_gpus(job, snap)
            utils = [g.util_gpu_pct for g in gpus]
            if gpus and all(u is not None and u <= IDLE_UTIL_PCT for u in utils) \
                    and (log_grew or ckpt_moved) and job.key not in on_cpu:
                out.append(_finding(
                    "U38", "info", host, f"{label} runs with the GPU at ~0 % util",
                    f"util {', '.join(f'{u:.0f}' for u in utils if u is not None)} %, "
                    + ("log grew " + fmt_bytes((size_new or 0) - (size_old or 0))
                       if log_grew else "checkpoint advanced")
                    + ": CPU-data-bound, not stalled"))
            if _log_mtime(job) is None and log_flat and ckpt_moved and window is not None \
                    and window >= LOG_SILENT_S:
                # An older helper sends no log mtime: the only clock is the poll gap.
                out.append(_finding(
                    "U43", "info", host, f"{label}: log silent but checkpoint advancing",
                    f"no new log bytes for {fmt_duration(window)} while the checkpoint mtime moved "
                    f"{fmt_duration((m_new or 0) - (m_old or 0))}: buffered, not hung"))
        if state == "running":
            out.extend(_silent_log(host, label, job, old, now=t_now, window=window))
        # Nor is the login node's cgroup a Slurm job's CPU slice (SLURM3 is that story).
        if state in ACTIVE_STATES and vcpus is not None and cpu_count is not None \
                and vcpus < cpu_count and not job.is_slurm:
            caps = [_int_env(job.env.get(v)) for v in THREAD_VARS]
            set_caps = [c for c in caps if c is not None]
            cap_ok = bool(set_caps) and max(set_caps) <= math.ceil(vcpus)
            if not cap_ok:
                threads = max(set_caps) if set_caps else int(cpu_count)
                out.append(_finding(
                    "U40", "warn", host, f"{label}: thread pools larger than the CPU slice",
                    f"cgroup quota {vcpus:g} vCPUs of {cpu_count:.0f} host cores; threads "
                    f"{threads} ({'OMP_NUM_THREADS' if set_caps else 'no thread cap set'})"))
        if state == "queued":
            out.extend(_vram_short(host, label, job, snap))
    return out


def _log_mtime(job: Job) -> float | None:
    return job.log_chunk.mtime if job.log_chunk is not None else None


def _silent_log(host: str, label: str, job: Job, old: Job | None, *, now: float | None,
                window: float | None) -> list[Finding]:
    """U43 by the log's own age (its mtime, the box's clock), not by the gap between two polls
    (the room's previous snapshot is seconds old): a log unchanged past LOG_SILENT_S while a
    checkpoint was written after it, or while the job's processes use CPU, is output that does
    not reach the file (a progress UI drawn only on a terminal), not a hang."""
    log_m = _log_mtime(job)
    if log_m is None or now is None or now - log_m < LOG_SILENT_S:
        return []
    silent = f"log unchanged for {fmt_duration(now - log_m)} (its mtime)"
    ckpt = _mtime(job.checkpoint)
    # The probe reads the clock before it stats the checkpoint: one written meanwhile is
    # "newer" than the snapshot by a fraction of a second.
    if ckpt is not None and ckpt > log_m:
        return [_finding("U43", "info", host, f"{label}: log silent but checkpoint advancing",
                         f"{silent} while a checkpoint was written "
                         f"{fmt_duration(max(0.0, now - ckpt))} ago: its output does not reach "
                         "the log, it is not hung")]
    cpu_old = old.cpu_s if old is not None and _attempt_no(old) == _attempt_no(job) else None
    if cpu_old is not None and job.cpu_s is not None and window \
            and job.cpu_s - cpu_old >= BUSY_CPU_FRACTION * window:
        return [_finding("U43", "info", host, f"{label}: log silent but the job is busy",
                         f"{silent} while its processes used {job.cpu_s - cpu_old:.1f} CPU-s "
                         f"in {fmt_duration(window)}: its output does not reach the log")]
    return []


def _mtime(c: Checkpoint | None) -> float | None:
    return c.mtime if c is not None else None


def _int_env(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _vram_short(host: str, label: str, job: Job, snap: Snapshot) -> list[Finding]:
    """U10: a job carrying ``vram_mib`` (queue add --vram-mib) is checked against free VRAM."""
    ask = job.vram_mib
    gpus = snap.gpus
    if ask is None or not gpus:
        return []
    need = max(1, job.gpus or 1)
    free = []
    for g in gpus:
        used, total = g.mem_used_mib, g.mem_total_mib
        if used is not None and total is not None:
            free.append(total - used)
    fits = sum(1 for f in free if f >= ask)
    if not free or fits >= need:
        return []
    return [_finding(
        "U10", "warn", host, f"{label} will not fit in free VRAM",
        f"asks {fmt_bytes(ask * MIB)} on {need} GPU(s); free per GPU: "
        + ", ".join(fmt_bytes(f * MIB) for f in free))]


# ------------------------------------------------------------------------------- disks

def _unique_disks(snap: Snapshot) -> Iterator[Disk]:
    """Each filesystem once: ~ and the repo on one device are one disk."""
    seen: set[int | str | None] = set()
    for d in snap.disks:
        if d.error:
            continue
        key = d.device if d.device is not None else d.real_path
        if key in seen:
            continue
        seen.add(key)
        yield d


def _disk_for(path: str, snap: Snapshot) -> Disk | None:
    best: Disk | None = None
    for d in snap.disks:
        if d.error:
            continue
        root = d.where
        if not root:
            continue
        if path_under(path, root) and (best is None or len(root) > len(best.real_path or "")):
            best = d
    return best


def disk_findings(host: str, snap: Snapshot, profile: Profile | None) -> list[Finding]:
    out: list[Finding] = []
    cap = profile.inode_cap if profile is not None and isinstance(profile.inode_cap, int) \
        and not isinstance(profile.inode_cap, bool) else None
    for d in _unique_disks(snap):
        where = d.where
        ti, used = d.total_inodes, d.used_inodes
        tb, fb = d.total_bytes, d.free_bytes
        bytes_pct = d.bytes_pct  # df's Use%, as the disk pane shows it
        if ti and used is not None:
            limit = min(ti, float(cap)) if cap else ti
            # df's IUse% unless the profile caps inodes below the filesystem's count.
            pct = 100.0 * used / limit if cap and cap < ti else (d.inodes_pct or 0.0)
            if pct >= INODE_WARN_PCT:
                out.append(_finding(
                    "U7", "critical" if pct >= INODE_CRIT_PCT else "warn", host,
                    f"{where}: inodes {pct:.0f} % used",
                    f"{used:.0f} of {limit:.0f} inodes"
                    + (f" (profile cap {cap})" if cap else "")
                    + (f"; bytes only {bytes_pct:.0f} % used" if bytes_pct is not None else "")))
        if bytes_pct is not None and bytes_pct >= BYTES_CRIT_PCT:
            assert fb is not None
            out.append(_finding(
                "U6", "critical", host, f"{where}: disk {bytes_pct:.0f} % full",
                f"{fmt_bytes(fb)} free of {fmt_bytes(tb or 0)}: the next torch.save fails"))
    seen_u6 = {f.title.split(":")[0] for f in out if f.id == "U6"}
    for key, job in _jobs(snap).items():
        c = job.checkpoint
        if c is None or not c.path:
            continue
        path = c.path
        holder = _disk_for(path, snap)
        if holder is None:
            continue
        where = holder.where
        if where in seen_u6:
            continue  # the disk-full finding already says it
        tb, fb = holder.total_bytes, holder.free_bytes
        size = c.size
        if tb is None or fb is None or not tb:
            continue
        pct = 100.0 * (1 - fb / tb)
        if path.endswith(TMP_SUFFIXES) and pct >= BYTES_LOW_PCT:
            out.append(_finding(
                "U6", "warn", host, f"job {key}: a checkpoint temp file on a {pct:.0f} % disk",
                f"{path} on {where}, {fmt_bytes(fb)} free"))
        elif size is not None and size > fb and job.state in ACTIVE_STATES:
            out.append(_finding(
                "U6", "critical", host, f"job {key}: the next checkpoint will not fit",
                f"newest checkpoint {fmt_bytes(size)}, {fmt_bytes(fb)} free on {where}"))
    return out


def missing_mount_findings(host: str, snap: Snapshot, profile: Profile | None) -> list[Finding]:
    """A mount the host's profile says to watch that is not there (principle 4, U7): what is
    written to that path lands on whatever disk holds its parent, which may not survive."""
    if profile is None:
        return []
    expected = {m.path: m for m in profile.mounts}
    out: list[Finding] = []
    for d in snap.disks:
        mount = expected.get(d.path or "")
        if mount is None or not d.missing:
            continue
        name = profile.title or profile.platform
        out.append(Finding(
            "U7", "warn", host,
            f"{mount.path}: not mounted, but the {name} profile expects its {mount.role} there",
            f"{mount.path}: {d.error}; the profile says: {mount.note or mount.role}",
            f"attach or mount the {mount.role} at {mount.path} before writing checkpoints; "
            "if this box keeps it elsewhere, add that path to the host's mounts in hosts.toml"))
    return out


def queue_write_findings(host: str, snap: Snapshot) -> list[Finding]:
    """A queue runner whose writes fail (a full disk or inode table, issue 18): it lives and
    backs off, but no job starts or ends on the record until space is freed (U7)."""
    out: list[Finding] = []
    for q in snap.queue.queues if snap.queue is not None else ():
        error = q.runner.write_error if q.runner is not None else None
        if error:
            out.append(_finding("U7", "critical", host,
                                f"queue {q.name}: the runner cannot write its files", error))
    return out


# ------------------------------------------------------------------------------- blind spots

def blind_findings(host: str, snap: Snapshot) -> list[Finding]:
    """U44: what the helper could not look at is said, so "nothing seen" is not read as
    "nothing wrong". One finding per section whose collector failed (the probe's errors[]),
    and one for a kernel log it was refused (dmesg_restrict), which blinds U3's ladder and
    the Xid checks (U22)."""
    out: list[Finding] = []
    for e in snap.errors:
        section = (e.section or "?")[:SECTION_NAME_MAX]
        out.append(_finding(
            "U44", "warn", host, f"the helper's {section!r} section failed on the box",
            (e.error or "no error text")[:SECTION_ERROR_MAX]))
    kernel = snap.kernel
    failed = {e.section for e in snap.errors}
    if "kernel" in snap.sections and "kernel" not in failed and not kernel.readable:
        why = f"kernel log {kernel.log or 'not read'}" + (
            f": {kernel.detail}" if kernel.detail else "")
        out.append(Finding("U44", "info", host,
                           "kernel log unreadable: Xid and OOM-kill detection is blind",
                           why[:SECTION_ERROR_MAX], KERNEL_BLIND_FIX))
    return out


# ------------------------------------------------------------------------------- entry points

def diagnose(prev: Snapshot | None, snap: Snapshot | None, link: LinkState,
             profile: Profile | None, now: float, *, host: str, error: str | None = None,
             last_ok: float | None = None, recall: Recall | None = None,
             price_per_hour: float | None = None,
             stall_after_s: float | None = None,
             mtbf_s: float | None = None,
             cpu_training_after_s: float | None = None,
             local: LocalCode | None = None,
             moves: Sequence[Move] = (),
             held: Sequence[HeldFailover] = (),
             host_key: str | None = None) -> list[Finding]:
    """Every finding for one host. ``prev`` is the last good snapshot before ``snap``;
    ``error`` and ``last_ok`` (the HostState's) word the GEN8 finding of a failed poll;
    ``recall`` is the room's memory beyond ``prev`` (watch.py); the price and the host's
    stall threshold (hosts.toml) word the stall finding, ``cpu_training_after_s`` (hosts.toml
    cpu_training_after_min) is how long a GPU job may have no process on its GPUs; ``mtbf_s``
    (hosts.toml mtbf_hours) overrides the profile's for the checkpoint cadence. ``local`` is
    the host's ``code`` tree as the fleet read it: running jobs launched from other code are U42.
    ``moves`` (HostState.moved) are the fleet's moves from or to it, each failover said
    (rules/moves.py); ``held`` (HostState.held) the failovers it did not make on the box's
    word alone.

    When the link is not UP only GEN8 is said: an old snapshot is not evidence of anything.
    """
    if link is not LinkState.UP or snap is None:
        age = now - last_ok if last_ok is not None else None
        return link_findings(host, link if link is not LinkState.UP else LinkState.DOWN,
                             error, age, host_key) + move_findings(host, moves, now)
    out = vanished_findings(host, prev, snap, recall)
    out += gpu_findings(host, prev, snap)
    out += stall_findings(host, prev, snap, after_s=stall_after_s, price_per_hour=price_per_hour)
    out += cpu_training_findings(host, prev, snap, profile, price_per_hour,
                                 after_s=cpu_training_after_s)
    if not any(f.id == "U22" for f in out):  # a job's death by it already says "dead GPU"
        out += dead_gpu_findings(host, prev, snap, recall)
    out += reboot_findings(host, snap, profile)
    out += log_findings(host, snap)
    out += cadence_findings(host, snap, profile, mtbf_s)
    out += restart_findings(host, snap)
    out += job_findings(host, prev, snap, cpu_training_after_s)
    out += disk_findings(host, snap, profile)
    out += missing_mount_findings(host, snap, profile)
    out += slurm_findings(host, snap, now)
    out += queue_write_findings(host, snap)
    out += blind_findings(host, snap)
    out += leftover_findings(host, snap)
    out += job_node_findings(host, prev, snap, profile)
    out += preempt_findings(host, snap, now)
    out += ckpt_survival_findings(host, snap, profile)
    out += drift_findings(host, snap)
    if local is not None:
        out += tree_drift_findings(host, snap, local)
    out += clock_findings(host, snap, now)
    out += move_findings(host, moves, now) + held_findings(host, held)
    return sort_findings(out)


def job_node_findings(host: str, prev: Snapshot | None, snap: Snapshot,
                      profile: Profile | None) -> list[Finding]:
    """The GPU, disk and memory rules on each node of each running Slurm job, as its
    in-allocation probe saw it (issue 23): the login node's GPUs are not the job's."""
    before = {(j.slurm_id, n.host.hostname): n for j, n in prev.job_nodes} \
        if prev is not None else {}
    out: list[Finding] = []
    for job, node in snap.job_nodes:
        where = f"{host}/{fmt_text(node.host.hostname) or '?'}"  # the node's word: inert
        old = before.get((job.slurm_id, node.host.hostname))
        now_snap = node.as_snapshot()
        out += gpu_findings(where, old.as_snapshot() if old is not None else None, now_snap)
        out += disk_findings(where, now_snap, profile)
        oom, oom_before = node.cgroup.oom_kill, old.cgroup.oom_kill if old else None
        if oom is not None and oom_before is not None and oom > oom_before:
            out.append(_finding(
                "SLURM4", "warn", where,
                f"job {job.id} ({job.name or job.id}): OOM kill in its cgroup on the node",
                f"Slurm job {job.slurm_id}: memory.events oom_kill {oom_before:.0f} -> "
                f"{oom:.0f}; memory {fmt_bytes(node.cgroup.memory_current)} of "
                f"{fmt_bytes(node.cgroup.memory_max)}"))
    return out


def diagnose_fleet(states: Iterable[HostState], previous: Mapping[str, Snapshot | None],
                   profiles: Mapping[str, Profile | None], now: float) -> list[Finding]:
    """Every host's findings, worst first. ``previous`` maps a host to its prior snapshot."""
    out: list[Finding] = []
    for s in states:
        out += diagnose(previous.get(s.name), s.view, s.state, profiles.get(s.name), now,
                        host=s.name, error=s.error, last_ok=s.last_ok,
                        price_per_hour=s.price_per_hour, stall_after_s=s.stall_after_s,
                        mtbf_s=s.mtbf_s, cpu_training_after_s=s.cpu_training_after_s,
                        local=s.local_code,
                        moves=s.moved, held=s.held, host_key=s.host_key)
    return sort_findings(out)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-SEVERITY_RANK[f.severity], f.host, f.id))


def worst(findings: Iterable[Finding]) -> Severity | None:
    found: Severity | None = None
    for f in findings:
        if found is None or SEVERITY_RANK[f.severity] > SEVERITY_RANK[found]:
            found = f.severity
    return found


__all__ = [
    "FIX", "Finding", "Severity", "blind_findings", "diagnose", "diagnose_fleet", "disk_findings",
    "gpu_findings", "job_findings", "job_node_findings", "link_findings", "slurm_findings",
    "sort_findings", "vanished_findings", "walltime_left", "worst",
]
