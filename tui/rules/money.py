"""What burns rented-GPU money or work without a job dying (issue 19, items 2, 3, 4, 8).

- Training on the CPU (U31, K8S6): a box rented for GPUs where the probe finds none, or a
  running job that asked for GPUs with no process on any of them while they idle.
- A dead GPU on its own (U22): a dead-GPU Xid or "fallen off the bus" in the kernel events of
  the last window, a volatile uncorrected ECC count that rose, or fewer GPUs than this boot
  showed before, even with no job running.
- Reboots and dead runners in steady state (GEN6): a running attempt from another boot, a dead
  runner while jobs wait or run, and a box that survives a reboot with no @reboot entry.
- The log bytes the probe already ships (U10, U28, U35, U26): CUDA OOM, a driver too old for
  the build, a tracker that records nothing, CRLF line ends.

Pure: snapshots, the profile and ``Recall`` (what the room remembers beyond the previous poll,
kept by watch.py) in; findings out.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from gpuroom.profiles import Profile
from gpuroom.remote.queue_events import ACTIVE_STATES, DEFAULT_QUEUE, LIVE_STATES
from gpuroom.tui.present.format import fmt_duration
from gpuroom.tui.rules.finding import Finding, Severity, fix_for, job_label
from gpuroom.tui.rules.stall import gpu_idle, job_gpus
from gpuroom.tui.sanitize import sanitize_line, truncate_display
from gpuroom.tui.snapshot import Job, KernelEvent, Snapshot

# U22: Xid codes that mean the board is gone or must be reset: 48 double-bit ECC, 79 fallen
# off the bus, 94/95 contained/uncontained ECC error, 119 GSP RPC timeout, 154 recovery action
# "reset required" (NVIDIA's Xid catalogue).
DEAD_GPU_XIDS = frozenset({48, 79, 94, 95, 119, 154})
# How long a kernel event stays evidence (watch.py keeps the window).
KERNEL_WINDOW_S = 15 * 60.0
# U31: a job that asked for GPUs has had this long to put a process on one (hosts.toml
# cpu_training_after_min overrides it per host).
NO_GPU_PROCESS_S = 5 * 60.0
# A kernel or log line quoted in a finding.
LINE_MAX = 200

DEAD_GPU_FIX = ("this GPU is dead or dying: save (the last checkpoint is what you have), pull "
                "it (P), then stop the instance and re-rent a different box; do not debug "
                "your code on it")
CPU_FIX = ("the job trains on the CPU at GPU prices: check nvidia-smi on the box, "
           "torch.cuda.is_available(), CUDA_VISIBLE_DEVICES and the container's GPU "
           "runtime/limit (--gpus all, nvidia.com/gpu); kill it and relaunch once a GPU is seen")
NO_GPU_FIX = ("the probe sees no GPU on a box you pay GPU prices for: check the driver "
              "(nvidia-smi), the container runtime, or re-rent; jobs asking for GPUs are refused "
              "at queue add until one is seen")
STALE_RUNNING_FIX = ("the box rebooted under the job, which is no longer running: the queue's "
                     "runner requeues it when it starts (the room restarts a dead runner; by "
                     "hand: gpuroom queue start {host}); resume from the last checkpoint")
DEAD_RUNNER_FIX = ("the room starts the runner again at the next poll (it owns the queue's "
                   "state; starting it is safe); by hand: gpuroom queue start {host}")
BOOT_HOOK_FIX = ("gpuroom queue boot-hook {host} installs an @reboot crontab entry that starts "
                 "the runner again after a reboot")
def _queue_fix(fix: str, queue: str | None) -> str:
    """A fix naming `gpuroom queue start HOST` for a queue other than the default one."""
    if not queue or queue == DEFAULT_QUEUE:
        return fix
    return f"{fix} --queue {shlex.quote(queue)}"


LOG_FIX = {
    "U10": "GPU memory, not host RAM: lower the batch (or accumulate gradients), free the card "
           "of other processes, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "U28": "the torch build, the CUDA toolkit and the box's driver disagree: install the torch "
           "wheel for the driver's CUDA (nvidia-smi shows the highest it supports) or rent a box "
           "with a newer driver",
    "U35": "the run records no curves: set WANDB_API_KEY (gpuroom secret push, not --env), or "
           "sync the offline run dir before teardown (wandb sync)",
    "U26": "the script has Windows CRLF line ends: sed -i 's/\\r$//' SCRIPT (or dos2unix), then "
           "relaunch; queue add --fix-crlf converts it for you",
}
# (gotcha id, severity, title, pattern) over the log bytes since the cursor.
LOG_RULES: tuple[tuple[str, Severity, str, re.Pattern[bytes]], ...] = (
    ("U10", "critical", "CUDA out of memory",
     re.compile(rb"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError")),
    ("U28", "critical", "the driver is too old for this torch/CUDA build",
     re.compile(rb"no kernel image is available for execution|CUDA driver version is "
                rb"insufficient|NVIDIA driver on your system is too old")),
    ("U35", "warn", "the tracker records nothing",
     re.compile(rb"api_key not configured|wandb: W&B syncing is set to .offline|"
                rb"wandb: Tracking run with wandb disabled")),
    ("U26", "critical", "a script has CRLF line ends",
     re.compile(rb"\$'\\r': command not found|\r: bad interpreter|\r: No such file")),
)
TRACKER_OFF = ("offline", "disabled", "dryrun")


@dataclass(frozen=True)
class Recall:
    """What the room remembers of a host beyond the previous poll (watch.py)."""

    events: tuple[KernelEvent, ...] = ()  # kernel events of the last KERNEL_WINDOW_S
    gpus_seen: int | None = None  # the most GPUs a poll of this boot showed



def _line(raw: str | None, fallback: str) -> str:
    return truncate_display(sanitize_line(raw or fallback), LINE_MAX)


def _same_boot(prev: Snapshot | None, snap: Snapshot) -> bool:
    return (prev is not None and prev.host.boot_id is not None
            and prev.host.boot_id == snap.host.boot_id)


# ------------------------------------------------------------------------------- U22

def dead_gpu_events(events: Iterable[KernelEvent]) -> list[KernelEvent]:
    return [e for e in events
            if e.kind == "gpu_lost" or (e.kind == "xid" and e.code in DEAD_GPU_XIDS)]


def dead_gpu_findings(host: str, prev: Snapshot | None, snap: Snapshot,
                      recall: Recall | None = None) -> list[Finding]:
    out: list[Finding] = []
    events = recall.events if recall is not None else snap.kernel.events
    seen: set[tuple[str | None, int | None, str | None]] = set()
    for e in dead_gpu_events(events):
        key = (e.kind, e.code, e.pci)
        if key in seen:
            continue
        seen.add(key)
        what = f"Xid {e.code}" if e.kind == "xid" else "fell off the bus"
        where = f"GPU {e.pci}" if e.pci else "a GPU"
        out.append(Finding("U22", "critical", host,
                           f"{where}: {what}: this GPU is dead or dying",
                           _line(e.line, what), DEAD_GPU_FIX))
    if _same_boot(prev, snap):
        assert prev is not None
        before = {g.index: g for g in prev.gpus}
        for g in snap.gpus:
            old = before.get(g.index)
            new_ecc = g.ecc_volatile_uncorrected
            old_ecc = old.ecc_volatile_uncorrected if old is not None else None
            if new_ecc is not None and old_ecc is not None and new_ecc > old_ecc:
                out.append(Finding(
                    "U22", "critical", host,
                    f"GPU {g.index}: uncorrected ECC errors rising: this GPU is dying",
                    f"volatile uncorrected ECC {old_ecc:.0f} -> {new_ecc:.0f}", DEAD_GPU_FIX))
    most = recall.gpus_seen if recall is not None else None
    if _same_boot(prev, snap) and prev is not None:
        most = max(most or 0, len(prev.gpus))
    # A GPU that vanished leaves the others listed, or (the last one) NVML's error; an empty
    # list with no error is a probe that did not look. A kernel line above already says it.
    if most and len(snap.gpus) < most and (snap.gpus or snap.gpu_error) and not seen:
        out.append(Finding("U22", "critical", host,
                           f"{most - len(snap.gpus)} GPU(s) gone: this GPU is dead or dying",
                           f"{len(snap.gpus)} GPU(s) now, {most} earlier in this boot"
                           + (f"; {_line(snap.gpu_error, '')}" if snap.gpu_error else ""),
                           DEAD_GPU_FIX))
    return out


# ------------------------------------------------------------------------------- U31

def rents_gpus(profile: Profile | None, price_per_hour: float | None) -> bool:
    """A host paid for as a GPU box: a price in hosts.toml or a GPU rental's profile (not a
    Slurm login node or a notebook, and not the generic box, which may be a CPU server)."""
    if profile is not None and profile.kind != "ssh":
        return False
    if price_per_hour is not None:
        return True
    return profile is not None and profile.platform != "generic-ssh"


def _asked_gpus(job: Job) -> bool:
    a = job.last_attempt
    return bool(job.gpus) or bool(a is not None and a.gpus)


def _gpuless(job: Job, snap: Snapshot) -> bool:
    """The job's GPUs (all of them) idle with no process on any; a desktop's display
    processes (type G: Xorg, gnome-shell) hold the card whatever the job does."""
    gpus = job_gpus(job, snap)
    return all(gpu_idle(g) and all(p.display_only for p in g.processes) for g in gpus)


def _running_for(job: Job, snap: Snapshot) -> float | None:
    a = job.last_attempt
    t = snap.host.time
    return t - a.start if a is not None and a.start is not None and t is not None else None


def cpu_training_jobs(prev: Snapshot | None, snap: Snapshot,
                      after_s: float | None = None) -> list[Job]:
    """Running jobs that asked for GPUs and have run ``after_s`` (default NO_GPU_PROCESS_S)
    with their GPUs idle and no process on any of them, on this poll and the one before
    (same attempt)."""
    limit = NO_GPU_PROCESS_S if after_s is None else after_s
    out = []
    for job in snap.jobs:
        if job.state != "running" or job.is_slurm or not _asked_gpus(job):
            continue
        ran = _running_for(job, snap)
        if ran is None or ran < limit or not _gpuless(job, snap):
            continue
        # The room's previous poll, when it has one, must agree (gpuroom doctor has one poll).
        old = prev.job(job.id) if prev is not None else None
        old_a, new_a = (old.last_attempt if old else None), job.last_attempt
        if prev is not None and old is not None and old_a is not None and new_a is not None \
                and old_a.attempt == new_a.attempt and not _gpuless(old, prev):
            continue
        out.append(job)
    return out


def cpu_training_findings(host: str, prev: Snapshot | None, snap: Snapshot,
                          profile: Profile | None,
                          price_per_hour: float | None = None, *,
                          after_s: float | None = None) -> list[Finding]:
    out: list[Finding] = []
    if not snap.gpus and "gpus" in snap.sections and rents_gpus(profile, price_per_hour):
        why = _line(snap.gpu_error, "NVML and nvidia-smi found no GPU")
        out.append(Finding("U31", "critical", host, "no GPU on a box rented for GPUs",
                           why, NO_GPU_FIX))
    for job in cpu_training_jobs(prev, snap, after_s):
        ran = _running_for(job, snap) or 0.0
        gpus = job_gpus(job, snap)
        seen = (f"running {fmt_duration(ran)}; "
                + ("no GPU on the box" if not gpus else
                   "no compute process on GPU " + ", ".join(str(g.index) for g in gpus)
                   + " and at idle power"))
        out.append(Finding("U31", "critical", host, f"{job_label(job)} trains on the CPU",
                           seen, CPU_FIX))
    return out


# ------------------------------------------------------------------------------- GEN6

def reboot_findings(host: str, snap: Snapshot, profile: Profile | None) -> list[Finding]:
    """Steady GEN6 findings: they hold at every poll while the queue says so."""
    out: list[Finding] = []
    boot = snap.host.boot_id
    for job in snap.jobs:
        a = job.last_attempt
        if job.state in ACTIVE_STATES and not job.is_slurm and a is not None \
                and a.boot_id is not None and boot is not None and a.boot_id != boot:
            out.append(Finding(
                "GEN6", "critical", host, f"{job_label(job)} is not running: the box rebooted",
                f"the queue says {job.state} since boot {_line(a.boot_id[:8], '?')}; the box "
                f"is now boot {_line(boot[:8], '?')}", fix_for(STALE_RUNNING_FIX, host)))
    queues = snap.queue.queues if snap.queue is not None else ()
    survives = profile is not None and profile.kind == "ssh"
    for q in queues:
        local = [j for j in q.jobs if not j.is_slurm]
        if q.runner is None or q.backend == "slurm" or not local:
            continue
        live = [j for j in local if j.state in LIVE_STATES]
        if live and not q.runner.alive:
            out.append(Finding(
                "GEN6", "warn", host, f"queue {_line(q.name, '?')}: its runner is dead",
                f"{len(live)} job(s) queued or running with no runner: "
                + _line(", ".join(j.id for j in live[:4]), "?"),
                _queue_fix(fix_for(DEAD_RUNNER_FIX, host), q.name)))
        if survives and q.runner.reboot_hook is False:
            out.append(Finding(
                "GEN6", "info", host, f"queue {_line(q.name, '?')}: no @reboot entry",
                "a reboot of this box leaves the queue stopped until a runner is started",
                fix_for(BOOT_HOOK_FIX, host)))
    return out


def dead_runner_queues(snap: Snapshot) -> list[str]:
    """Queues whose runner is dead while local jobs wait or run: the fleet starts them."""
    queues = snap.queue.queues if snap.queue is not None else ()
    return [q.name for q in queues
            if q.runner is not None and not q.runner.alive and q.backend != "slurm"
            and any(j.state in LIVE_STATES and not j.is_slurm for j in q.jobs)]


# ------------------------------------------------------------------------------- log bytes

def log_text_findings(host: str, job: Job, data: bytes) -> list[Finding]:
    """What log bytes of ``job`` say (U10, U28, U35, U26): a poll's chunk since the cursor,
    or an ended job's tail read once by the monitor (tui/fleet/monitor.py)."""
    out: list[Finding] = []
    for fid, sev, title, pattern in LOG_RULES:
        m = pattern.search(data)
        if m is None:
            continue
        start = data.rfind(b"\n", 0, m.start()) + 1
        end = data.find(b"\n", m.end())
        line = data[start:end if end >= 0 else len(data)].decode("utf-8", "replace")
        out.append(Finding(fid, sev, host, f"{job_label(job)}: {title}",
                           _line(line.replace("\r", "\\r"), title), LOG_FIX[fid]))
    return out


def log_findings(host: str, snap: Snapshot) -> list[Finding]:
    """What a running job's new log bytes (the chunk since the cursor) say, and a tracker
    switched off with no key (U35). The watch keeps these on screen after the poll."""
    out: list[Finding] = []
    for job in snap.jobs:
        chunk = job.log_chunk
        data = chunk.data if chunk is not None else None
        if data:
            out += log_text_findings(host, job, data)
        mode = (job.env.get("WANDB_MODE") or "").lower()
        if job.state in LIVE_STATES and mode in TRACKER_OFF and not job.env.get("WANDB_API_KEY"):
            out.append(Finding("U35", "warn", host,
                               f"{job_label(job)}: the tracker records nothing",
                               f"WANDB_MODE={mode} and no WANDB_API_KEY in its environment",
                               LOG_FIX["U35"]))
    return out
