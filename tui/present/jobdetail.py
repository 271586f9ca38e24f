"""One job in full, as lines (issue 20 item 1): ``gpuroom queue show`` prints them, and the
room's job detail can reuse them. Pure: the job comes from gpuroom.tui.snapshot, time comes in
as ``now``; every string the box wrote goes through sanitize_line (fmt_text).
"""

from __future__ import annotations

import os
import re

from gpuroom.tui.present.format import fmt_age, fmt_bytes, fmt_text, fmt_utc
from gpuroom.tui.snapshot import Attempt, Checkpoint, Job

_STEP_RE = re.compile(r"(\d+)")


def checkpoint_step(path: str | None) -> int | None:
    """The step a checkpoint's file name says (``step_1200.pt`` -> 1200; the last number in
    the name), None when the name holds no number."""
    if not path:
        return None
    found = _STEP_RE.findall(os.path.basename(path))
    return int(found[-1]) if found else None


def _attempt_line(a: Attempt) -> str:
    start = fmt_utc(a.start) if a.start is not None else "not started"
    end = fmt_utc(a.end) if a.end is not None else "running"
    if a.signal:
        how = f"signal {fmt_text(a.signal)}"
    elif a.exit_code is not None:
        how = f"exit {a.exit_code}"
    else:
        how = "no exit yet"
    duration = fmt_age(a.duration) if a.duration is not None else "-"
    reason = fmt_text(a.end_reason) if a.end_reason else "-"
    gpus = ",".join(str(g) for g in a.gpus) if a.gpus else "none"
    return (f"  attempt {a.attempt}: {start} -> {end}, {how}, {duration}, "
            f"ended: {reason}, GPUs {gpus}")


def _checkpoint_line(ckpt: Checkpoint | None, now: float) -> str:
    if ckpt is None or not ckpt.path:
        return "newest checkpoint: none"
    step = checkpoint_step(ckpt.path)
    age = fmt_age(now - ckpt.mtime) if ckpt.mtime is not None else "?"
    return (f"newest checkpoint: {fmt_text(ckpt.path)} (step {step if step is not None else '?'}"
            f", {age} old, {fmt_bytes(ckpt.size)})")


def _code_lines(job: Job) -> list[str]:
    """What code the newest attempt launched with (U42), and what changed since (U2)."""
    last = job.last_attempt
    code = last.code if last is not None else None
    if code is None:
        return []
    lines = [f"script: {fmt_text(s.path)} sha256 {fmt_text((s.sha256 or '?')[:12])}"
             + (" (changed since launch)" if s.path in job.code_changed else "")
             for s in code.scripts]
    if code.git is not None:
        lines.append(f"git: HEAD {fmt_text((code.git.head or '?')[:12])}"
                     + (" with uncommitted changes" if code.git.dirty else ", clean"))
    return lines


def detail_lines(job: Job, now: float) -> list[str]:
    """Every fact of one job a person asks about, one line each (env values never shown)."""
    title = f"job {fmt_text(job.id)}"
    if job.name and job.name != job.id:
        title += f" ({fmt_text(job.name)})"
    lines = [f"{title}: {fmt_text(job.state)}"]
    lines.append("command: " + fmt_text(job.command))  # every word, shell-quoted
    lines.append(f"cwd: {fmt_text(job.cwd) if job.cwd else '-'}")
    keys = ", ".join(fmt_text(k) for k in sorted(job.env))
    lines.append(f"env: {keys} (values hidden)" if keys else "env: none")
    asked = "default (1 on a GPU box)" if job.gpus is None else str(job.gpus)
    last = job.last_attempt
    given = ",".join(str(g) for g in last.gpus) if last is not None and last.gpus else "none"
    lines.append(f"GPUs: asked {asked}, given {given}")
    if job.priority:
        lines.append(f"priority: {job.priority}")
    if job.after:
        lines.append("after: " + ", ".join(fmt_text(a) for a in job.after))
    if job.edited_from:
        lines.append(f"edited from: {fmt_text(job.edited_from)}")
    if job.waiting:
        lines.append(f"waits: {fmt_text(job.waiting)}")
    if job.reason:
        lines.append(f"reason: {fmt_text(job.reason)}")
    lines.append(f"attempts: {len(job.attempts)}")
    lines.extend(_attempt_line(a) for a in job.attempts)
    lines.extend(_code_lines(job))
    lines.append(f"checkpoint dir: {fmt_text(job.ckpt_dir) if job.ckpt_dir else '-'}")
    lines.append(_checkpoint_line(job.checkpoint, now))
    lines.append(f"log: {fmt_text(job.log_path) if job.log_path else '-'}")
    return lines
