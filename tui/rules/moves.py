"""The doctor's word on each automatic move (issue 21 item 3): a job the fleet failed over
from a host that stayed down, said on the host it left, from the fleet's move records as
the model holds them (HostState.moved). Pure: no I/O, time comes in as ``now``.

A failover acts on a host that did not answer, which alone is no proof the run died (GEN8):
so the finding says why the fleet moved it and whether the old copy has been fenced yet
(killed by its runner once the host answered), since until then it may run, and bill, twice.
A failover the fleet held back, because only the box said it came back wiped, is a warning.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuroom.tui.model import HeldFailover, Move
from gpuroom.tui.present.format import fmt_duration, fmt_hhmm, fmt_text, fmt_utc
from gpuroom.tui.rules.finding import Finding

# A fenced failover is said for a day, long enough to be read the morning after; one whose
# old copy is not fenced yet is said until it is.
SAID_FOR_S = 86400.0

FENCED_FIX = "nothing to do: it goes on on the host it was moved to"
PENDING_FIX = ("nothing to do while the host is down; when it answers the fleet (the room or "
               "`gpuroom watch`) kills the old copy before it can continue: stop the rental "
               "if the box should not come back (it may still bill)")


def move_findings(host: str, moves: Iterable[Move], now: float) -> list[Finding]:
    """One finding per failover away from ``host``: warn until its old copy is fenced, then
    info for SAID_FOR_S."""
    out: list[Finding] = []
    for m in moves:
        if not m.auto or m.src_host != host:
            continue
        if not m.fence and now - (m.fenced_at or m.at) > SAID_FOR_S:
            continue
        job, dst = fmt_text(m.src_job), f"{m.dst_host}/{fmt_text(m.dst_job)}"
        if m.down_s is not None:
            down = f" after {host} was down {fmt_duration(m.down_s)}"
        else:
            down = f" after {fmt_text(m.why)}" if m.why else ""
        if m.fence:
            fenced = f"{host}'s copy not fenced yet"
        elif m.fenced_at is not None:
            fenced = f"{host}'s copy fenced at {fmt_hhmm(m.fenced_at, utc=True)}"
        else:
            fenced = f"{host}'s copy fenced"
        step = f"ckpt step {m.step} (mirrored home)" if m.step is not None else \
            "no checkpoint home: it started from the beginning"
        out.append(Finding(
            "GEN8", "warn" if m.fence else "info", host,
            f"{job} moved from {host} to {dst}{down}; {fenced}",
            f"failover at {fmt_utc(m.at)}: {dst} resumes from {step}",
            PENDING_FIX if m.fence else FENCED_FIX))
    return out


def held_findings(host: str, held: Iterable[HeldFailover]) -> list[Finding]:
    """One warning per failover not made: the box reports a new boot and an empty checkpoint
    dir, which any job on it can forge, and this jump host saw no outage to back it."""
    return [Finding(
        "GEN6", "warn", host,
        f"{fmt_text(h.job)}: {host} reports a new boot and ckpt step {h.step} gone from its "
        "checkpoint dir, but this jump host saw it answer throughout: not failed over",
        f"boot id {fmt_text(h.boot)} (the box's word); ckpt step {h.step} is mirrored home",
        f"look at the box (gpuroom queue show {host} {fmt_text(h.job)}); if it really lost "
        f"its disk, move the job yourself: gpuroom queue move {host} {fmt_text(h.job)} --to "
        "HOST2") for h in held]
