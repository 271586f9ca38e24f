"""Numbers from a box that cannot be true: its uptime and its clock.

The box's uptime and ``time.time()`` drive money (billed since boot), the session cap and the
preemptible cap. A negative uptime (a boot after the box's own now), an uptime longer than any
box stays up, or a clock a year or more off the jump host's is a broken clock or a forged
answer; either way it is a finding about the box, and every clock that would count from it
counts nothing (unknown), never negative money. A boot is judged on the box's own clock: a
box a few minutes ahead that just rebooted did not boot "in the future".
"""

from __future__ import annotations

from gpuroom.tui.present.format import fmt_duration, fmt_utc
from gpuroom.tui.rules.finding import Finding
from gpuroom.tui.snapshot import Snapshot

# Longer than any box stays up (no kernel of the last decades runs this long unpatched).
MAX_UPTIME_S = 20 * 365 * 86400.0
# The box's clock against the jump host's, either way: NTP-less boxes drift by seconds a
# day; a year is a clock set wrong (or a stale snapshot a year old, which counts nothing).
MAX_CLOCK_SKEW_S = 365 * 86400.0
LAST_DATE_EPOCH = 253402300800.0  # 10000-01-01: datetime's range ends before it

FIX = ("check the box's clock and uptime there (date -u; cat /proc/uptime; timedatectl to "
       "turn NTP on); until they read true no money is counted from them: set rented_at "
       "for this host in hosts.toml to count money from your rental's start")


def _moment(epoch: float) -> str:
    """A box's epoch as a date when it is one (years 1970 to 9999), else as the number."""
    return fmt_utc(epoch) if 0 <= epoch < LAST_DATE_EPOCH else f"{epoch:.0f} s since 1970"


def clock_problem(snap: Snapshot, now: float) -> str | None:
    """Why the box's uptime or clock cannot be true at the jump host's ``now``, or None."""
    uptime, taken = snap.host.uptime_s, snap.host.time
    if uptime is not None and uptime < 0:
        return f"uptime {uptime:.0f} s is negative (a boot after the box's own now)"
    if uptime is not None and uptime > MAX_UPTIME_S:
        return f"uptime {fmt_duration(uptime)} is longer than any box stays up"
    if taken is not None and abs(taken - now) > MAX_CLOCK_SKEW_S:
        side = "ahead of" if taken > now else "behind"
        return (f"its clock reads {_moment(taken)}, {fmt_duration(abs(taken - now))} {side} "
                "this machine's")
    return None


def plausible_uptime(snap: Snapshot, now: float) -> float | None:
    """The box's uptime, or None when its clock or uptime cannot be true."""
    return None if clock_problem(snap, now) is not None else snap.host.uptime_s


def clock_findings(host: str, snap: Snapshot, now: float) -> list[Finding]:
    """U44: what the box's clock would say (money, session caps) cannot be seen."""
    problem = clock_problem(snap, now)
    if problem is None:
        return []
    return [Finding("U44", "warn", host, f"the box's clock/uptime is implausible: {problem}",
                    "billed time, cost and uptime-based timers are shown as unknown", FIX)]
