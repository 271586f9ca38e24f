"""The detail screen's rows: everything a table cell had to cut, whole (key `i`).

One list of (label, text) per subject; the screen (tui/room/detail_screen.py) shows any such
list, so a later, fuller job detail adds rows here and needs no new screen.
"""

from __future__ import annotations

from gpuroom.tui.model import HostState
from gpuroom.tui.present.format import NA, fmt_age, fmt_clock
from gpuroom.tui.present.hosts import link_problem, link_text
from gpuroom.tui.present.jobs import JobRow

Rows = list[tuple[str, str]]


def _when(t: float | None, now: float) -> str:
    """"2026-11-23 18:53:20 (3m07s ago)", or NA."""
    if t is None:
        return NA
    return f"{fmt_clock(t)} ({fmt_age(now - t, ticking=True)} ago)"


def host_detail(host: HostState, now: float) -> Rows:
    """The host's link as the fleet knows it: state, the whole error and its fix (the
    failing hop is named in it by the link), when it last answered and when it is tried next."""
    rows: Rows = [("host", host.name), ("profile", host.profile),
                  ("state", link_text(host, now))]
    problem = link_problem(host, now)
    if problem is not None:
        rows.append(("error", problem.cause))
        if problem.fix:
            rows.append(("fix", problem.fix))
        if problem.next_try:
            rows.append(("next try", problem.next_try.removeprefix("next try ")))
    rows += [
        ("last answer", _when(host.last_ok, now)),
        ("last try", _when(host.last_try, now)),
        ("polls", f"{host.polls_ok} answered, {host.polls_failed} failed"),
    ]
    return rows


def job_detail(host: HostState, job: JobRow) -> Rows:
    """One job of ``host``: its whole command and how it stands."""
    rows: Rows = [
        ("job", f"{host.name}/{job.id}"),
        ("name", job.name or NA),
        ("state", f"{job.pending}… (not yet confirmed by the box)" if job.pending
         else job.state),
        ("try", NA if job.attempt is None else str(job.attempt)),
        ("exit", job.ended_by),
        ("runtime", fmt_age(job.runtime_s)),
        ("checkpoint", f"{fmt_age(job.ckpt_age_s)} old" if job.ckpt_age_s is not None else NA),
        ("command", job.command),
    ]
    if job.home_text:
        rows.append(("mirror", job.home_text))
    if job.lineage:
        rows.append(("moved", job.lineage))
    if job.slurm:
        rows.append(("slurm", job.slurm))
    return rows
