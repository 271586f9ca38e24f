"""What a relaunch resumes from, in words for the room's R dialog. Pure.

The queue reruns the identical command: the job resumes only if the program loads a checkpoint
on start. The dialog says which checkpoint that would be (the newest the snapshot reports,
its step from its name, its age on the box's clock), or that there is none."""

from __future__ import annotations

import os
import re

from gpuroom.tui.present.format import fmt_age, fmt_text
from gpuroom.tui.snapshot import Checkpoint, Job

_STEP_RE = re.compile(r"(\d+)")


def checkpoint_step(path: str | None) -> int | None:
    """The step a checkpoint's file name says (``step_1200.pt`` -> 1200; the last number in
    the name), None when the name holds no number."""
    if not path:
        return None
    found = _STEP_RE.findall(os.path.basename(path))
    return int(found[-1]) if found else None


def newest_checkpoint(job: Job) -> Checkpoint | None:
    """The snapshot's newest checkpoint of the job, else the one its last ended attempt
    recorded."""
    if job.checkpoint is not None and job.checkpoint.path:
        return job.checkpoint
    for a in reversed(job.attempts):
        if a.checkpoint is not None and a.checkpoint.path:
            return a.checkpoint
    return None


def resume_text(job: Job | None, box_now: float | None) -> str:
    """"resumes from: PATH (step 2800, 3m old), if the program loads it on start", or what
    is not known. The path is the box's word: inert."""
    ckpt = newest_checkpoint(job) if job is not None else None
    if ckpt is None:
        return ("no checkpoint seen: it starts from scratch unless the program finds one of "
                "its own")
    step = checkpoint_step(ckpt.path)
    age = box_now - ckpt.mtime if box_now is not None and ckpt.mtime is not None else None
    return (f"resumes from: {fmt_text(ckpt.path)} ("
            f"{f'step {step}' if step is not None else 'step unknown'}, "
            f"{fmt_age(age) if age is not None else 'age unknown'} old), if the program "
            "loads it on start")
