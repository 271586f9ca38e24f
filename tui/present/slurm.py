"""One line about a Slurm job for the queue table and the room (issue 9). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuroom.tui.sanitize import sanitize_line


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value)


def slurm_summary(job: Mapping[str, Any]) -> str:
    """'123 RUNNING vm 0:41 left' / '123 PENDING (BeginTime) requeued x1'; '' for a box job."""
    if not job.get("slurm_id"):
        return ""
    parts = [str(job["slurm_id"]), str(job.get("slurm_state") or "?")]
    if job.get("reason"):
        parts.append(f"({job['reason']})")
    if job.get("node") and job.get("state") == "running":
        parts.append(str(job["node"]))
    left = _int(job.get("time_left_s"))
    if left is not None:
        parts.append(f"{left // 60}:{left % 60:02d} left")
    restarts = _int(job.get("restarts"))
    if restarts:
        parts.append(f"requeued x{restarts}")
    return sanitize_line(" ".join(parts))  # the reason and node are Slurm's text, from the box


def queue_backend(profile: str | None) -> str:
    """The queue backend for a host's profile: ``slurm`` on a login node, else ``local``."""
    return "slurm" if profile == "slurm" else "local"
