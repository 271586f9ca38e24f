"""The one formatter: bytes, counts, percentages, durations, ages, money, rates, sparklines.

Every pane, finding, clock and CLI table words a number through here, so the same quantity
reads the same everywhere. Bytes are binary with IEC units and no space ("1.5KiB", "252GiB":
what df -h calls "252G", without df -H's ambiguity, and narrow enough for a pane's column, as
nvitop's bytes2human); counts are decimal ("16K", as df -hi). Pure; a value not reported
(None) reads as NA.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from gpuroom.tui.sanitize import sanitize_line

NA = "-"  # a value the box did not report
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_COUNT_UNITS = ("", "K", "M", "G")
SPARK_CHARS = "▁▂▃▄▅▆▇█"


def _scaled(value: float, units: Sequence[str], step: float) -> str:
    """One decimal below 10, none above (df -h's rule); the first unit is shown whole."""
    for unit in units:
        if abs(value) < step or unit == units[-1]:
            if unit == units[0]:
                return f"{int(value)}{unit}"
            return f"{value:.1f}{unit}" if abs(value) < 10 else f"{value:.0f}{unit}"
        value /= step
    raise AssertionError("unreachable: the last unit always returns")  # pragma: no cover


def fmt_bytes(n: float | None) -> str:
    """512B, 1.5KiB, 84GiB (powers of 1024)."""
    return NA if n is None else _scaled(float(n), _BYTE_UNITS, 1024.0)


def fmt_rate(bytes_per_s: float | None) -> str:
    """12MiB/s."""
    return NA if bytes_per_s is None else f"{fmt_bytes(bytes_per_s)}/s"


def fmt_count(n: float | None) -> str:
    """980, 16K, 1.2M (powers of 1000, as ``df -hi``)."""
    return NA if n is None else _scaled(float(n), _COUNT_UNITS, 1000.0)


def fmt_pct(p: float | None) -> str:
    """42%."""
    return NA if p is None else f"{p:.0f}%"


def fmt_number(v: float | None, unit: str = "") -> str:
    """A reported reading as a finding or a cell words it: 1980, 21.3, 250W; "?" when not
    reported (inside prose, where NA would read as a minus)."""
    if v is None:
        return "?"
    text = str(int(v)) if float(v).is_integer() else f"{v:g}"
    return text + unit


def fmt_whole(v: float | None, unit: str = "", missing: str = NA) -> str:
    """A reading rounded for a narrow cell: 250W, 36C, 1980."""
    return missing if v is None else f"{v:.0f}{unit}"


def fmt_age(seconds: float | None, *, ticking: bool = False) -> str:
    """Compact, for table cells: 42s, 3m, 2h05m, 3d04h. Negative (clock skew) reads as 0s.
    ``ticking``: seconds shown under an hour (3m07s), for an age redrawn every second."""
    if seconds is None or not math.isfinite(seconds):
        return NA  # a difference of two forged times can be infinite
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s" if ticking else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def _moment(fmt: str, epoch_s: float, *, utc: bool) -> str:
    """``epoch_s`` through strftime, or what it is when no calendar holds it: a box's clock
    reading is any number, and the C library refuses years past its time_t."""
    try:
        return time.strftime(fmt, time.gmtime(epoch_s) if utc else time.localtime(epoch_s))
    except (OverflowError, OSError, ValueError):
        return f"(time {epoch_s:g} out of range)"


def fmt_clock(epoch_s: float) -> str:
    """A moment in local time, to the second: 2026-11-23 18:53:20."""
    return _moment("%Y-%m-%d %H:%M:%S", epoch_s, utc=False)


def fmt_hhmm(epoch_s: float, *, utc: bool = False) -> str:
    """"12:30" (local time) or "12:30 UTC": a time of day close enough to need no date."""
    return _moment("%H:%M UTC" if utc else "%H:%M", epoch_s, utc=utc)


def fmt_duration(seconds: float) -> str:
    """In words, for findings and clocks: 40 s, 12 min, 3.5 h, 4 days."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def fmt_hours(seconds: float | None) -> str:
    """Billed or up time in hours: 4.0h."""
    return NA if seconds is None else f"{seconds / 3600:.1f}h"


def fmt_utc(epoch: float) -> str:
    """A moment for findings, independent of this machine's zone: 2026-11-24 12:03:04 UTC."""
    return _moment("%Y-%m-%d %H:%M:%S UTC", epoch, utc=True)


def fmt_mmss(seconds: float) -> str:
    """Slurm's own notation for time left (squeue %L): 0:41."""
    if not math.isfinite(seconds):
        return NA
    s = max(0, int(seconds))
    return f"{s // 60}:{s % 60:02d}"


def fmt_money(price_per_hour: float | None, seconds: float) -> str:
    """What ``seconds`` cost at ``price_per_hour``: $9.96; "" without a price."""
    return "" if price_per_hour is None else f"${price_per_hour * seconds / 3600.0:.2f}"


def fmt_progress(done: int, total: int, rate_bps: float, eta_s: float | None) -> str:
    """A transfer: 1.2GiB/4.0GiB 95MiB/s ETA 31s."""
    eta = f"{eta_s:.0f}s" if eta_s is not None else "?"
    return f"{fmt_bytes(done)}/{fmt_bytes(total)} {fmt_rate(rate_bps)} ETA {eta}"


def sparkline(values: Sequence[float | None], top: float | None = None) -> str:
    """Block-character sparkline scaled to ``top`` (e.g. the max clock), gaps as spaces.

    Scaled to the hardware maximum, not to the window's own max, so a GPU stuck at a
    throttled clock reads low instead of filling the line (U21/U23).
    """
    got = [v for v in values if v is not None and math.isfinite(v)]
    hi = top if top and math.isfinite(top) else (max(got) if got else 0.0)
    if not hi:
        return " " * len(values)
    steps = len(SPARK_CHARS) - 1

    def block(v: float | None) -> str:
        # A forged reading can be anything: huge over a tiny limit is infinite, NaN a gap.
        level = None if v is None else v / hi * steps
        if level is None or math.isnan(level):
            return " "
        return SPARK_CHARS[steps if level >= steps else 0 if level <= 0 else round(level)]

    return "".join(block(v) for v in values)


def fmt_text(value: object) -> str:
    """Text the box wrote, made inert for a pane: its escape sequences never reach the
    terminal (gpuroom.tui.sanitize)."""
    return "" if value is None else sanitize_line(str(value))


def fmt_cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters; a cut always ends in "…", so a shortened
    command or error never reads as the whole of it."""
    if len(text) <= width:
        return text
    return text[: max(0, width - 1)] + "…"
