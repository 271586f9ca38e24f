"""The hosts table: one row per host, every cell already text."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuroom.tui.errors import FIX_CLAUSE
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.present.box import BoxView
from gpuroom.tui.present.disks import (
    BYTES_CRIT_PCT,
    BYTES_WARN_PCT,
    INODES_CRIT_PCT,
    INODES_WARN_PCT,
    disk_rows,
)
from gpuroom.tui.present.format import fmt_age, fmt_cut, fmt_hours, fmt_money, fmt_pct, fmt_text
from gpuroom.tui.present.gpus import gpu_rows, gpu_summary
from gpuroom.tui.present.jobs import running_job
from gpuroom.tui.present.levels import Level, level_of
from gpuroom.tui.snapshot import Snapshot

SECTION_NAME_WIDTH = 16  # a section's name is the box's word: bounded in the state cell


def link_text(host: HostState, now: float) -> str:
    """UP / STALE 3m07s / DOWN 12m / DOWN, as the hosts table says it: short enough never to
    be cut. The age ticks every second; why the host does not answer is in its panes
    (link_problem) and its detail screen, whole."""
    if host.state is LinkState.UP:
        return "UP"
    age = host.age_s(now)
    if host.state is LinkState.STALE:
        return f"STALE {fmt_age(age, ticking=True)}"
    return "DOWN" if age is None else f"DOWN {fmt_age(age, ticking=True)}"


@dataclass(frozen=True)
class LinkProblem:
    """Why the selected host shows no fresh numbers, said in its panes instead of them."""

    headline: str  # "DOWN: no answer yet" / "STALE: last answer 3m07s ago, shown below"
    cause: str  # the error as the link said it (the failing hop named), without its fix
    fix: str | None
    next_try: str  # "next try in 12 s" / "next try now" / "" when nothing polls (replay)

    def lines(self) -> tuple[str, ...]:
        """The block a pane shows: headline with the next try (first, so a short pane at
        80x24 still shows when), cause, fix; empty parts left out."""
        fix = f"Fix: {self.fix}" if self.fix else ""
        head = f"{self.headline}; {self.next_try}" if self.next_try else self.headline
        return tuple(x for x in (head, self.cause, fix) if x)


def link_problem(host: HostState, now: float) -> LinkProblem | None:
    """What the panes of a STALE or DOWN host say; None for an UP host."""
    if host.state is LinkState.UP:
        return None
    age = host.age_s(now)
    if age is None:
        headline = f"{host.state.name}: no answer yet"
    elif host.state is LinkState.STALE:
        headline = f"STALE: last answer {fmt_age(age, ticking=True)} ago, shown below"
    else:
        headline = f"DOWN: last answer {fmt_age(age, ticking=True)} ago"
    # The fleet stored str(LinkError): "host: cause. Fix: fix" (tui/errors.py with_fix).
    cause, mark, fix = fmt_text(host.error or "never answered").partition(FIX_CLAUSE)
    prefix = f"{host.name}: "
    cause = cause[len(prefix):] if cause.startswith(prefix) else cause
    if host.next_try is None:
        when = ""
    elif host.next_try <= now:
        when = "next try now"
    else:
        when = f"next try in {host.next_try - now:.0f} s"
    return LinkProblem(headline=headline, cause=cause, fix=fix.strip() if mark else None,
                       next_try=when)


def failed_sections(snap: Snapshot | None) -> tuple[tuple[str, str], ...]:
    """(section, error) for each section the helper's probe could not collect (its
    ``errors[]``), inert: both are the box's text."""
    if snap is None:
        return ()
    return tuple((fmt_cut(fmt_text(e.section or "?"), SECTION_NAME_WIDTH),
                  fmt_text(e.error or "no error text")) for e in snap.errors)


def failed_sections_text(snap: Snapshot | None) -> str:
    """One line for a table's error cell: "section kernel failed: OSError: ..."; "" if none."""
    return "; ".join(f"section {name} failed: {error}" for name, error in failed_sections(snap))


_LINK_LEVEL: dict[LinkState, Level] = {
    LinkState.UP: "ok",
    LinkState.STALE: "warn",
    LinkState.DOWN: "crit",
}


def link_level(host: HostState) -> Level:
    level: Level = _LINK_LEVEL[host.state]
    return level


@dataclass(frozen=True)
class HostRow:
    """One line of the hosts table, every cell already text."""

    name: str
    state: str
    profile: str
    gpus: str
    sm_clock: str
    power: str
    disk_pct: str
    inode_pct: str
    job: str
    billed: str
    findings: str
    level: Level
    disk_level: Level
    inode_level: Level
    findings_level: Level = "ok"
    box: str = "-"  # the job cgroup's "cpu% mem%" of quota and limit (present/box.py)
    box_level: Level = "ok"


def billed_cell(price_per_hour: float | None, seconds: float | None) -> str:
    """Spend so far, short: "$9.96 4.0h"; without a price only the hours."""
    if seconds is None:
        return "-"
    return " ".join(part for part in (fmt_money(price_per_hour, seconds), fmt_hours(seconds))
                    if part)


def findings_cell(severities: Iterable[str]) -> tuple[str, Level]:
    """How many findings, marked by the worst: "2!!" critical, "1!" warn, "3" info only."""
    sev = list(severities)
    if not sev:
        return "-", "ok"
    if "critical" in sev:
        return f"{len(sev)}!!", "crit"
    if "warn" in sev:
        return f"{len(sev)}!", "warn"
    return str(len(sev)), "ok"


def host_row(host: HostState, now: float, *, billed: str = "-",
             findings: Iterable[str] = (), box: BoxView | None = None) -> HostRow:
    """``billed`` from the danger clock, ``findings`` the severities of the host's findings,
    ``box`` the host's CPU and memory (present/box.py BoxHistory.view)."""
    snap = host.view
    gpus = gpu_rows(snap)
    count, sm, power = gpu_summary(gpus)
    if not gpus:
        count = "no GPU" if snap is not None else "-"
    disks = disk_rows(snap)
    b = max((d.bytes_pct for d in disks if d.bytes_pct is not None), default=None)
    i = max((d.inodes_pct for d in disks if d.inodes_pct is not None), default=None)
    b_level = level_of(b, BYTES_WARN_PCT, BYTES_CRIT_PCT)
    i_level = level_of(i, INODES_WARN_PCT, INODES_CRIT_PCT)
    find_text, find_level = findings_cell(findings)
    state, level = link_text(host, now), link_level(host)
    failed = failed_sections(snap) if host.state is LinkState.UP else ()
    if failed:
        # Answering is not the same as being watched: a section that failed is a blind spot
        # (U44), so the row says which, as a warning, next to UP.
        state = f"UP, {'+'.join(name for name, _ in failed)} failed"
        level = "warn"
    return HostRow(
        name=host.name,
        state=state,
        profile=host.profile,
        gpus=count,
        sm_clock=sm,
        power=power,
        disk_pct=fmt_pct(b),
        inode_pct=fmt_pct(i),
        job=running_job(snap),
        billed=billed,
        findings=find_text,
        level=level,
        disk_level=b_level,
        inode_level=i_level,
        findings_level=find_level,
        box=box.cell() if box is not None and snap is not None else "-",
        box_level=box.level if box is not None else "ok",
    )
