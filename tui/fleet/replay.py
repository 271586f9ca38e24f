"""Recordings: `gpuroom record FILE` writes them, `gpuroom replay FILE` plays them in the room.

A recording is JSON lines as ``fleet.Recorder`` writes them, one poll outcome per line:
``{"t", "host", "profile", "state", "error", "snapshot", ...}``. Replay drives the same app
through ``StaticFleet`` with no network; the app's clock is the recording's own time, so ages,
idle time and spend read as they did when recorded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.localfile import LocalFileError, read_lines
from gpuroom.tui.model import HostState, LinkState, Snapshot
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.snapshot import fmt_value, load_answer, number

# A gap longer than this in a recording (the recorder was stopped, the laptop slept) is not
# waited out at --speed 1: the replay moves on after this long.
MAX_WAIT_S = 5.0
# One line is one poll outcome: a snapshot the link capped at 8 MiB, re-encoded (a non-ASCII
# character may take 12 bytes as \u escapes). The whole file is held in memory as records.
MAX_LINE_BYTES = 32 << 20  # 32 MiB
MAX_RECORDING_BYTES = 2 << 30  # 2 GiB


class RecordingError(GpuroomError):
    """A recording that cannot be replayed; the message names the file and line."""

    exit_code = 2  # tui/cli/main.py: usage error (the FILE argument)


@dataclass(frozen=True)
class Record:
    t: float
    host: str
    profile: str
    state: LinkState
    error: str | None
    snapshot: Snapshot | None
    price_per_hour: float | None = None
    rented_at: float | None = None


def _parse(path: Path, n: int, raw: str) -> Record:
    where = f"{path}:{n}"
    try:
        doc = load_answer(raw)
    except ValueError as exc:
        raise RecordingError(f"{where}: not JSON ({exc})",
                             "cut the line, or record again with `gpuroom record FILE`") from None
    if not isinstance(doc, dict):
        raise RecordingError(f"{where}: a line must be a JSON object, got {type(doc).__name__}")
    try:
        t = number(doc["t"])
        host = doc["host"]
        state = LinkState(doc["state"])
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordingError(f"{where}: missing or bad field {exc} (each line needs t, host, "
                             "state)", "was this written by `gpuroom record`?") from None
    if t is None:  # not a finite number (10**400 made float() raise OverflowError)
        raise RecordingError(f"{where}: field t must be a time in seconds, got "
                             f"{fmt_value(doc['t'])}", "was this written by `gpuroom record`?")
    if not isinstance(host, str) or not host:
        raise RecordingError(f"{where}: field host must be a non-empty string")
    snapshot = doc.get("snapshot")
    if snapshot is not None and not isinstance(snapshot, dict):
        raise RecordingError(f"{where}: field snapshot must be an object or null")
    if state is LinkState.UP and snapshot is None:
        raise RecordingError(f"{where}: state is up but there is no snapshot")

    def num(key: str) -> float | None:
        value = doc.get(key)
        return number(value) if isinstance(value, (int, float)) else None

    return Record(t=t, host=host, profile=str(doc.get("profile") or "generic-ssh"), state=state,
                  error=sanitize_line(doc["error"]) if isinstance(doc.get("error"), str) else None,
                  snapshot=snapshot, price_per_hour=num("price_per_hour"),
                  rented_at=num("rented_at"))


def load_recording(path: Path) -> list[Record]:
    """Every line of a recording, in time order. Blank lines are skipped; a bad one is an
    error naming its line (a recording cut mid-line by a crash: only a last line may be
    partial, and it is dropped). Only a regular file is read, line by line, each line and
    the whole bounded (tui/localfile.py)."""
    records: list[Record] = []
    bad: RecordingError | None = None  # a bad line is an error unless it was the last
    try:
        for n, data in enumerate(read_lines(path, "the recording", line_cap=MAX_LINE_BYTES,
                                            total_cap=MAX_RECORDING_BYTES), 1):
            raw = data.decode("utf-8", errors="replace")
            if not raw.strip():
                continue
            if bad is not None:
                raise bad
            try:
                records.append(_parse(path, n, raw))
            except RecordingError as exc:
                if not records:
                    raise
                bad = exc  # the recorder may have been killed mid-write
    except LocalFileError as exc:
        raise RecordingError(exc.message, exc.fix) from None
    except OSError as exc:
        raise RecordingError(f"{path}: cannot read ({exc.strerror})") from None
    if not records:
        raise RecordingError(f"{path}: no records", "record one with `gpuroom record FILE`")
    records.sort(key=lambda r: r.t)
    return records


class ReplayFleet(StaticFleet):
    """A StaticFleet that plays a recording at ``speed`` x real time (0 = as fast as the
    screen takes it), then holds the last state. ``now()`` is the recording's time."""

    def __init__(self, records: list[Record], *, speed: float = 1.0,
                 sleep: Callable[[float], Any] = asyncio.sleep,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        first: dict[str, Record] = {}
        for r in records:
            first.setdefault(r.host, r)
        super().__init__(
            [HostState(name=r.host, profile=r.profile, price_per_hour=r.price_per_hour,
                       rented_at=r.rented_at) for r in first.values()],
            ssh={h: ["ssh", h] for h, r in first.items() if r.profile != "local"},
        )
        self.records = records
        self.speed = speed
        self._sleep = sleep
        self._monotonic = monotonic
        self._t = records[0].t
        self._fed_at = monotonic()
        self.played = 0
        self.finished = asyncio.Event()

    def now(self) -> float:
        """The recording's time: the last fed line's, advancing with the wall clock at
        ``speed`` until the next line (frozen once the recording has ended)."""
        if self.finished.is_set() or self.speed <= 0:
            return self._t
        return self._t + (self._monotonic() - self._fed_at) * self.speed

    def apply(self, r: Record) -> None:
        self._t = r.t
        self._fed_at = self._monotonic()
        if r.state is LinkState.UP and r.snapshot is not None:
            self.feed(r.host, r.snapshot, r.t)
        else:
            self.fail(r.host, r.error or "poll failed", r.t, down=r.state is LinkState.DOWN)
        self.played += 1

    async def run(self, on_change: Callable[[str], None]) -> None:
        self._on_change = on_change
        prev_t = self.records[0].t
        for r in self.records:
            gap = r.t - prev_t
            prev_t = r.t
            await self._sleep(min(MAX_WAIT_S, gap / self.speed) if self.speed > 0 else 0)
            self.apply(r)
        self.finished.set()
        await self._stopped.wait()
