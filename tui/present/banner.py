"""The danger banner's items: the doctor's and the clocks' lines, and the failed jobs no
finding explains, ranked together so no critical item waits behind a warning."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from gpuroom.remote.queue_events import FAILED_STATES
from gpuroom.tui.model import HostState
from gpuroom.tui.present.format import fmt_cut
from gpuroom.tui.present.jobs import job_rows
from gpuroom.tui.present.levels import Level


@dataclass(frozen=True)
class Danger:
    """One urgent item for the banner."""

    level: Level
    host: str
    text: str
    fix: str = ""  # the command that says more, with the real host and job
    job: str = ""  # a failed job's id ("" for a doctor or clock line)
    attempt: int | None = None  # the attempt that failed (an acknowledgement names it)


def failed_job_dangers(hosts: Iterable[HostState], now: float,
                       explained: Iterable[tuple[str, str]] = ()) -> list[Danger]:
    """A banner line for each failed job no finding explains (a finding that names the job,
    as the doctor's "job default/j1 (train) died: ..." does, already says more)."""
    said = list(explained)
    out: list[Danger] = []
    for h in hosts:
        for j in job_rows(h, now):
            if j.state not in FAILED_STATES:
                continue
            named = re.compile(rf"/{re.escape(j.id)}\b")
            if any(host == h.name and named.search(title) for host, title in said):
                continue
            code = (f" exit {j.exit_code}" if j.exit_code is not None
                    else f" by {j.signal}" if j.signal else "")
            out.append(Danger("crit", h.name, f"CRITICAL {h.name}: job {j.name or j.id} "
                                              f"{j.state}{code}",
                              "read its log: gpuroom queue logs "
                              f"{shlex.quote(h.name)} {shlex.quote(j.id)}; then gpuroom doctor "
                              f"--ack {shlex.quote(h.name + '/' + j.id)}", j.id, j.attempt))
    return out


def fleet_dangers(lines: Iterable[str], failed: Iterable[Danger]) -> tuple[Danger, ...]:
    """Every urgent item, most urgent first: critical before warn whatever its source (the
    doctor and clock ``lines`` as banner_lines ranks them, then ``failed`` jobs), the order
    within a level kept. The banner shows the first few and counts the rest."""
    items = [Danger("crit" if line.startswith("CRITICAL") else "warn", "", line)
             for line in lines]
    items += failed
    return tuple(sorted(items, key=lambda d: d.level != "crit"))


_GOTCHA_ID = re.compile(r" (\[[A-Za-z0-9 -]+\])$")


def banner_line(text: str, width: int) -> str:
    """``text`` in one line of ``width``: cut with "…" before its gotcha id ("[U7]"), which
    stays, so the id never wraps onto the next banner line and pushes "+N more" off."""
    if len(text) <= width:
        return text
    found = _GOTCHA_ID.search(text)
    if found is None or width - len(found.group(1)) - 1 < 8:
        return fmt_cut(text, width)
    tag = found.group(1)
    return f"{fmt_cut(text[:found.start()], width - len(tag) - 1)} {tag}"
