"""One job in full (issue 20 item 1): the rows ``gpuroom queue show`` prints as lines and the
room's job detail (enter on a job) shows as a table; one source for both. Pure: the job comes
from gpuroom.tui.snapshot, time comes in as ``now``; every string the box wrote goes through
sanitize_line (fmt_text).
"""

from __future__ import annotations

from gpuroom.tui.present.detail import Rows
from gpuroom.tui.present.format import fmt_age, fmt_bytes, fmt_text, fmt_utc
from gpuroom.tui.present.resume import checkpoint_step
from gpuroom.tui.snapshot import Attempt, Checkpoint, Job


def _span(a: Attempt) -> str:
    """"2026-11-26 20:17:54 -> 20:17:55 UTC": the end's date only when it differs, so the
    attempt's line fits 80 columns instead of wrapping mid-item."""
    if a.start is None:
        return "not started"
    start = fmt_utc(a.start)
    if a.end is None:
        return f"{start} -> running"
    end = fmt_utc(a.end)
    if end[:10] == start[:10]:
        return f"{start.removesuffix(' UTC')} -> {end[11:]}"
    return f"{start} -> {end}"


def _attempt_text(a: Attempt) -> str:
    if a.signal:
        how = f"signal {fmt_text(a.signal)}"
    elif a.exit_code is not None:
        how = f"exit {a.exit_code}"
    else:
        how = "no exit yet"
    duration = f" ({fmt_age(a.duration)})" if a.duration is not None else ""
    # "exited" says what the exit code says already; "killed", "reboot" say more.
    reason = f", {fmt_text(a.end_reason)}" if a.end_reason and a.end_reason != "exited" else ""
    gpus = ",".join(str(g) for g in a.gpus) if a.gpus else "none"
    return f"{_span(a)}{duration}, {how}{reason}, GPUs {gpus}"


def _checkpoint_text(ckpt: Checkpoint | None, now: float) -> str:
    if ckpt is None or not ckpt.path:
        return "none"
    step = ckpt.step if ckpt.step is not None else checkpoint_step(ckpt.path)
    age = fmt_age(now - ckpt.mtime) if ckpt.mtime is not None else "?"
    where = f", {fmt_text(ckpt.source)}" if ckpt.source else ""  # declared, discovered...
    return (f"{fmt_text(ckpt.path)}{'/' if ckpt.kind == 'dir' else ''} (step "
            f"{step if step is not None else '?'}, {age} old, {fmt_bytes(ckpt.size)}{where})")


def _code_rows(job: Job) -> Rows:
    """What code the newest attempt launched with (U42), and what changed since (U2)."""
    last = job.last_attempt
    code = last.code if last is not None else None
    if code is None:
        return []
    rows: Rows = [("script", f"{fmt_text(s.path)} sha256 {fmt_text((s.sha256 or '?')[:12])}"
                   + (" (changed since launch)" if s.path in job.code_changed else ""))
                  for s in code.scripts]
    if code.git is not None:
        rows.append(("git", f"HEAD {fmt_text((code.git.head or '?')[:12])}"
                     + (" with uncommitted changes" if code.git.dirty else ", clean")))
    return rows


def detail_title(job: Job) -> str:
    """"job j7 (sweep1)": the id, and the name when it says more."""
    title = f"job {fmt_text(job.id)}"
    if job.name and job.name != job.id:
        title += f" ({fmt_text(job.name)})"
    return title


def detail_rows(job: Job, now: float, lineage: str = "") -> Rows:
    """Every fact of one job a person asks about, as (label, text) rows, its state first:
    ``queue show`` prints them as lines, the room's job detail (enter) as a table. Env values
    are never shown (one may be a token). ``lineage``: HostState.moves' text for the job
    ("moved to B/j3", "from A/j7"), the one the ``i`` detail shows."""
    # A pushed secret reaches the job as an env var too: named with its secret, never valued.
    names = {k: fmt_text(k) for k in job.env}
    names.update((var, f"{fmt_text(var)} (secret {fmt_text(name)})" if var != name
                  else f"{fmt_text(var)} (secret)") for var, name in job.secrets)
    keys = ", ".join(names[k] for k in sorted(names))
    asked = "default (1 on a GPU box)" if job.gpus is None else str(job.gpus)
    last = job.last_attempt
    given = ",".join(str(g) for g in last.gpus) if last is not None and last.gpus else "none"
    rows: Rows = [
        ("state", fmt_text(job.state)),
        ("command", fmt_text(job.command)),  # every word, shell-quoted
        ("cwd", fmt_text(job.cwd) if job.cwd else "-"),
        ("env", f"{keys} (values hidden)" if keys else "none"),
        ("GPUs", f"asked {asked}, given {given}"),
    ]
    if job.priority:
        rows.append(("priority", str(job.priority)))
    if job.after:
        rows.append(("after", ", ".join(fmt_text(a) for a in job.after)))
    if job.edited_from:
        rows.append(("edited from", fmt_text(job.edited_from)))
    if job.waiting:
        rows.append(("waits", fmt_text(job.waiting)))
    if job.reason:
        rows.append(("reason", fmt_text(job.reason)))
    if lineage:
        rows.append(("moved", fmt_text(lineage)))
    rows.append(("attempts", str(len(job.attempts))))
    rows.extend((f"  attempt {a.attempt}", _attempt_text(a)) for a in job.attempts)
    rows.extend(_code_rows(job))
    rows.append(("checkpoint dir", fmt_text(job.ckpt_dir) if job.ckpt_dir else "-"))
    rows.append(("newest checkpoint", _checkpoint_text(job.checkpoint, now)))
    rows.append(("log", fmt_text(job.log_path) if job.log_path else "-"))
    return rows


def detail_lines(job: Job, now: float, lineage: str = "") -> list[str]:
    """``queue show``'s lines: "job j7 (name): state", then a "label: text" line per row."""
    (_, state), *rest = detail_rows(job, now, lineage)
    return [f"{detail_title(job)}: {state}", *(f"{label}: {text}" for label, text in rest)]
