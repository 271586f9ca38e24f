"""A finding: one thing the doctor says is wrong, with its gotcha id, what was seen and the fix.

Its own module so that rule modules (stall.py, money.py) and the doctor that gathers them can
all build findings without importing one another in a circle.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass
from typing import Literal

from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.snapshot import Job, for_host

JOB_IN_FIX = "{job}"  # as HOST_IN_FIX: a fix table's text names the job the finding is about

Severity = Literal["info", "warn", "critical"]
SEVERITY_RANK: dict[str, int] = {"info": 0, "warn": 1, "critical": 2}


@dataclass(frozen=True)
class Finding:
    id: str
    severity: Severity
    host: str
    title: str
    seen: str
    fix: str

    def __post_init__(self) -> None:
        # Titles and "seen" quote the box (a boot_id, a kernel line, a queue's name): each
        # is one inert line from here on, wherever it goes (a table, a webhook, an argv of
        # notify_command), whichever rule wrote it.
        for name in ("host", "title", "seen", "fix"):
            object.__setattr__(self, name, sanitize_line(getattr(self, name)))

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def fix_for(fix: str, host: str, job: str | None = None) -> str:
    """``fix`` with the real host (and job) as shell words where its table text says {host}
    ({job}): the user pastes it as it is."""
    text = for_host(fix, host)
    return text.replace(JOB_IN_FIX, shlex.quote(job)) if job is not None else text


def job_label(job: Job) -> str:
    """``job ID (NAME)`` in a finding's title. The id and the name are the box's words (a
    forged event can carry escapes): made inert here, as the lines a finding quotes are."""
    return sanitize_line(f"job {job.id} ({job.name or job.id})")


def path_under(path: str, root: str) -> bool:
    """``path`` is ``root`` or inside it (box paths, as the probe reported them)."""
    return path == root or path.startswith(root.rstrip("/") + "/")
