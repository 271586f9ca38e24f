"""Resumes checked (principle 8: a checkpoint is loaded on start). A new attempt whose newest
checkpoint, written since it started, is below the step the previous attempt had reached
restarted from scratch or from an older file, and may be overwriting the better one. Pure."""

from __future__ import annotations

from gpuroom.tui.present.resume import checkpoint_step
from gpuroom.tui.rules.finding import Finding, job_label
from gpuroom.tui.snapshot import Attempt, Checkpoint, Job, Snapshot

FIX = ("make the program load its newest checkpoint on start (its resume flag, e.g. "
       "init_from=resume / resume_from_checkpoint=True / ckpt_path=last), then kill and R; "
       "the older checkpoint may be overwritten by the next save")


def _earlier_newest(job: Job) -> tuple[Attempt, Checkpoint, int] | None:
    """The latest earlier attempt that recorded a newest checkpoint with a step in its name."""
    for a in reversed(job.attempts[:-1]):
        c = a.checkpoint
        step = checkpoint_step(c.path) if c is not None else None
        if c is not None and step is not None:
            return a, c, step
    return None


def restart_findings(host: str, snap: Snapshot) -> list[Finding]:
    out: list[Finding] = []
    for job in snap.jobs:
        current = job.attempts[-1] if job.attempts else None
        now = job.checkpoint
        if job.state != "running" or current is None or current.start is None or now is None \
                or now.mtime is None or now.mtime < current.start:
            continue  # no checkpoint of this attempt's own yet
        step = checkpoint_step(now.path)
        earlier = _earlier_newest(job)
        if step is None or earlier is None or step >= earlier[2]:
            continue
        before, ckpt, best = earlier
        out.append(Finding(
            "principle 8", "warn", host,
            f"{job_label(job)}: attempt {current.attempt} restarted below attempt "
            f"{before.attempt}'s newest checkpoint",
            f"attempt {current.attempt} wrote step {step} ({now.path}); attempt "
            f"{before.attempt} had reached step {best} ({ckpt.path})", FIX))
    return out
