"""The disk pane's rows (``df -h`` and ``df -i`` side by side), from the parsed snapshot."""

from __future__ import annotations

from dataclasses import dataclass

from gpuroom.tui.present.format import fmt_text
from gpuroom.tui.present.levels import Level, level_of, worst
from gpuroom.tui.snapshot import Snapshot

# U7: inodes run out before bytes, so they alarm earlier.
BYTES_WARN_PCT = 85.0
BYTES_CRIT_PCT = 95.0
INODES_WARN_PCT = 80.0
INODES_CRIT_PCT = 90.0


@dataclass(frozen=True)
class DiskRow:
    """One watched mount: ``df -h`` and ``df -i`` of it."""

    path: str
    error: str | None
    size_bytes: float | None
    used_bytes: float | None
    avail_bytes: float | None
    bytes_pct: float | None
    inodes_total: float | None
    inodes_used: float | None
    inodes_free: float | None
    inodes_pct: float | None

    @property
    def bytes_level(self) -> Level:
        return level_of(self.bytes_pct, BYTES_WARN_PCT, BYTES_CRIT_PCT)

    @property
    def inodes_level(self) -> Level:
        return level_of(self.inodes_pct, INODES_WARN_PCT, INODES_CRIT_PCT)

    @property
    def level(self) -> Level:
        return worst(self.bytes_level, self.inodes_level)


def disk_rows(snapshot: Snapshot | None) -> list[DiskRow]:
    """The snapshot's disks: statvfs facts per path, one row per filesystem.

    home and cwd are often the same filesystem as a watched mount; a repeated ``device``
    would show the same numbers twice, so only its first path is kept.
    """
    rows: list[DiskRow] = []
    seen_devices: set[int] = set()
    for d in snapshot.disks if snapshot is not None else ():
        path = fmt_text(d.path)
        if d.error is not None:
            # One short line the pane shows whole; the doctor says what the profile expected.
            rows.append(DiskRow(path, "not mounted" if d.missing else fmt_text(d.error),
                                *([None] * 8)))
            continue
        if d.device is not None:
            if d.device in seen_devices:
                continue
            seen_devices.add(d.device)
        # The numbers df prints for this filesystem (tui/snapshot.py Disk).
        rows.append(
            DiskRow(
                path=path,
                error=None,
                size_bytes=d.total_bytes,
                used_bytes=d.used_bytes,
                avail_bytes=d.free_bytes,
                bytes_pct=d.bytes_pct,
                inodes_total=d.total_inodes,
                inodes_used=d.used_inodes,
                inodes_free=d.inodes_left,
                inodes_pct=d.inodes_pct,
            )
        )
    return rows
