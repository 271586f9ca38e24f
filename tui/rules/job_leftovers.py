"""What one job leaves that the rest of the host must not pay for. Pure.

A job that turned its own log or checkpoint dir into a FIFO or a device is blind in that
part (the helper refuses to read it, remote/safeopen.py): the job's finding, never the host's
link. A job that ended while a process it started lives on outside its process group (a
``setsid`` daemon, remote/jobmark.py) still holds the box: the doctor and the teardown gate
name each one by pid and command.
"""

from __future__ import annotations

from gpuroom.remote.queue_events import ACTIVE_STATES
from gpuroom.tui.rules.finding import Finding, job_label
from gpuroom.tui.rules.gate_items import GateItem
from gpuroom.tui.sanitize import sanitize_line, truncate_display
from gpuroom.tui.snapshot import Job, Snapshot

SHOWN = 5
COMMAND_CHARS = 60
JOB_BLIND_FIX = ("look at the job's log and checkpoint dir on the box (ls -l): a job must write "
                 "them as regular files; until then that part of the job is unseen")


def survivor_text(job: Job) -> str:
    """``pid 123 (sleep 1000); ...`` for a job's survivors; inert (the box's words)."""
    named = [f"pid {s.pid} ({truncate_display(sanitize_line(s.command or '?'), COMMAND_CHARS)})"
             for s in job.survivors[:SHOWN]]
    more = f" (+{len(job.survivors) - SHOWN})" if len(job.survivors) > SHOWN else ""
    return "; ".join(named) + more


def _ended_with_survivors(snap: Snapshot | None) -> list[Job]:
    jobs = snap.jobs if snap is not None else ()
    return [j for j in jobs if j.survivors and j.state not in ACTIVE_STATES]


def leftover_findings(host: str, snap: Snapshot) -> list[Finding]:
    """U44 for a job's unreadable part; U11-style for an ended job's surviving processes."""
    out: list[Finding] = []
    for job in snap.jobs:
        if job.probe_error:
            out.append(Finding("U44", "warn", host,
                               f"{job_label(job)}: the helper could not read part of it",
                               sanitize_line(job.probe_error)[:400], JOB_BLIND_FIX))
    for job in _ended_with_survivors(snap):
        pids = " ".join(str(s.pid) for s in job.survivors if s.pid is not None)
        out.append(Finding(
            "U11", "warn", host,
            f"{job_label(job)} is {job.state} but {len(job.survivors)} process(es) it "
            "started still run", survivor_text(job),
            f"they left the job's process group (setsid/daemon), so kill did not reach them; "
            f"check and stop them on the box: kill {pids}"))
    return out


def survivors_item(snap: Snapshot | None) -> GateItem | None:
    """A failing gate item naming an ended job's survivors; None when there are none (a box
    whose helper does not mark jobs reports none, so no item claims "none left")."""
    jobs = _ended_with_survivors(snap)
    if not jobs:
        return None
    detail = "; ".join(f"{sanitize_line(j.id)}: {survivor_text(j)}" for j in jobs[:SHOWN])
    return GateItem("no process of an ended job still running", False, detail)
