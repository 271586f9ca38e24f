"""The teardown gate's items for what a finished queue can still leave at risk (P9, U20).

Pure. The gate (tui/rules/gate.py) asked only about jobs and their pulls; these items see what
else on the box stops it being safe to stop paying: GPU work gpuroom did not start (a foreign
650 W process), a job's declared ``--output`` files not copied to the durable dir, and
TensorBoard or offline wandb run dirs a job wrote under its cwd (remote/rundirs.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuroom.remote.queue_events import FINAL_STATES
from gpuroom.tui.present.format import fmt_bytes
from gpuroom.tui.rules.stall import gpu_idle
from gpuroom.tui.sanitize import truncate_display
from gpuroom.tui.snapshot import Job, RunDirs, Snapshot

SHOWN = 5  # entries one item's detail names; the rest are counted
NAME_CHARS = 40
MIB = 1024 * 1024
# Run dirs that hold the only copy (an online wandb run is on the tracker's server too).
AT_RISK_KINDS = ("tensorboard", "wandb-offline")


@dataclass
class GateItem:
    name: str
    ok: bool
    detail: str


def _listed(parts: Sequence[str]) -> str:
    more = f" (+{len(parts) - SHOWN})" if len(parts) > SHOWN else ""
    return "; ".join(parts[:SHOWN]) + more


def gpu_work_item(snapshot: Snapshot | None) -> GateItem:
    """GPU processes or power that no gpuroom job explains: with every job final, any compute
    process, any process holding /dev/nvidia*, or a GPU above idle power is someone's work
    (another user's run, a notebook, a job started by hand) that a teardown would kill."""
    name = "no GPU work outside gpuroom's jobs"
    if snapshot is None:
        return GateItem(name, False, "no snapshot from this host yet")
    if not snapshot.gpus:
        return GateItem(name, True, "no GPU on this host")
    if any(j.state not in FINAL_STATES for j in snapshot.jobs):
        # The queue item already says not safe; the GPUs' work is checked once it is final.
        return GateItem(name, True, "gpuroom jobs are still live (see the queue item)")
    seen: list[str] = []
    for gpu in snapshot.gpus:
        procs = [p for p in gpu.processes if not p.display_only]
        power = (f"{gpu.power_w:.0f} W of {gpu.power_limit_w:.0f} W"
                 if gpu.power_w is not None and gpu.power_limit_w else None)
        for p in procs:
            what = truncate_display(p.name or p.comm or "?", NAME_CHARS)
            mem = f", {fmt_bytes(p.used_mib * MIB)}" if p.used_mib is not None else ""
            seen.append(f"GPU {gpu.index}: pid {p.pid} {what}{mem}"
                        + (f" at {power}" if power else ""))
        if not procs and not gpu_idle(gpu):
            draw = power or f"{gpu.util_gpu_pct or 0:.0f}% busy"
            seen.append(f"GPU {gpu.index}: {draw} with no process listed")
    for holder in snapshot.vram_holders:
        seen.append(f"pid {holder.pid} "
                    f"{truncate_display(holder.comm or '?', NAME_CHARS)} holds /dev/nvidia*")
    if seen:
        return GateItem(name, False, "not a gpuroom job's: " + _listed(seen)
                        + ". Stopping the box ends it: ask its owner, or kill it yourself")
    return GateItem(name, True, f"{len(snapshot.gpus)} GPU(s) idle, no process on them")


def outputs_item(jobs: Sequence[Job]) -> GateItem:
    """A succeeded job's ``--output`` files are copied to the durable dir by the runner
    (U33); until that copy is ``synced`` they exist only on the box."""
    name = "declared outputs copied to the durable dir"
    declared = [j for j in jobs if j.outputs and j.state == "succeeded"]
    missing = []
    for job in declared:
        state = job.sync.state if job.sync is not None else None
        if state == "synced":
            continue
        why = {"pending": "copy still running", "failed": "the copy failed"}.get(
            state or "", "no durable dir was set (queue config --durable-dir)")
        globs = truncate_display(" ".join(job.outputs), NAME_CHARS)
        missing.append(f"{job.key} --output {globs}: {why}")
    if missing:
        return GateItem(name, False, _listed(missing))
    return GateItem(name, True, f"{len(declared)} job(s) with --output, every copy synced"
                    if declared else "no succeeded job declared --output")


def rundirs_item(jobs: Sequence[Job], run_dirs: RunDirs | str) -> GateItem:
    """Tracker run dirs under the jobs' cwds written after the job started. ``run_dirs`` is
    the box's answer, or why it could not be had."""
    name = "tracker run dirs (TensorBoard, offline wandb) copied off the box"
    if isinstance(run_dirs, str):
        return GateItem(name, False, f"could not list them: {run_dirs}")
    by_cwd: dict[str, list[str]] = {}
    for job in jobs:
        if job.cwd:
            by_cwd.setdefault(job.cwd, []).append(job.key)
    risky: list[str] = []
    online = 0
    for scan in run_dirs.scans:
        owners = ",".join(by_cwd.get(scan.cwd or "", [])) or "?"
        if scan.truncated:
            risky.append(f"{owners}: the walk of {scan.cwd} was cut, a run dir may be missed "
                         "(keep datasets out of the job's cwd)")
        for d in scan.dirs:
            if d.kind in AT_RISK_KINDS:
                risky.append(f"{owners}: {scan.cwd}/{d.path} ({d.kind})")
            else:
                online += 1
    if run_dirs.cut:
        risky.append("more job dirs than one call lists: check the rest by hand")
    if risky:
        return GateItem(name, False, _listed(risky) + ". Copy them home (rsync -a HOST:DIR .) "
                        "or write them under $GPUROOM_CKPT_DIR so gpuroom pull takes them, "
                        "then remove them on the box")
    note = f", {online} online wandb run(s) on the tracker" if online else ""
    return GateItem(name, True, f"none under {len(run_dirs.scans)} job dir(s){note}")
