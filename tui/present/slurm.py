"""One line about a Slurm job for the queue table and the room (issue 9). Pure."""

from __future__ import annotations

from gpuroom.tui.present.format import fmt_mmss
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.snapshot import Job


def slurm_summary(job: Job) -> str:
    """'123 RUNNING vm 0:41 left' / '123 PENDING (BeginTime) requeued x1'; '' for a box job."""
    if not job.slurm_id:
        return ""
    parts = [job.slurm_id, job.slurm_state or "?"]
    if job.reason:
        parts.append(f"({job.reason})")
    if job.node and job.state == "running":
        parts.append(job.node)
    if job.time_left_s is not None:
        parts.append(f"{fmt_mmss(job.time_left_s)} left")
    if job.restarts:
        parts.append(f"requeued x{job.restarts}")
    return sanitize_line(" ".join(parts))  # the reason and node are Slurm's text, from the box


def queue_backend(profile: str | None) -> str:
    """The queue backend for a host's profile: ``slurm`` on a login node, else ``local``."""
    return "slurm" if profile == "slurm" else "local"
