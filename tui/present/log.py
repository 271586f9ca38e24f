"""The log pane's bytes: each job's log chunk from the snapshot, shown exactly once."""

from __future__ import annotations

from dataclasses import dataclass

from gpuroom.tui.sanitize import LineSplitter
from gpuroom.tui.snapshot import Snapshot

# The pane cuts bytes into inert display lines with the sanitizer's splitter; it is named
# here so widgets need nothing but tui/present/.
__all__ = ["LineSplitter", "LogChunk", "LogCursor", "advance_log", "log_chunk"]


@dataclass(frozen=True)
class LogChunk:
    """Bytes of one job's log as a snapshot carried them."""

    job_id: str
    offset: int  # file offset of data[0]
    inode: int | None
    size: int | None  # file size on the box when read
    data: bytes
    reset: bool  # the helper says the file was truncated/replaced since the cursor


@dataclass(frozen=True)
class LogCursor:
    """How far the log pane has shown one job's log file."""

    job_id: str
    inode: int | None
    end: int


def log_chunk(snapshot: Snapshot | None, job_id: str) -> LogChunk | None:
    """The log bytes job ``job_id`` carried in the snapshot; None when none or not base64."""
    job = snapshot.job(job_id) if snapshot is not None else None
    if job is None or job.log_chunk is None:
        return None
    chunk = job.log_chunk
    data = chunk.data
    if data is None:
        return None
    return LogChunk(
        job_id=job_id,
        offset=chunk.offset or 0,
        inode=chunk.inode,
        size=chunk.size,
        data=data,
        reset=chunk.reset,
    )


def advance_log(cursor: LogCursor | None, chunk: LogChunk) -> tuple[bytes, bool, int, LogCursor]:
    """What of ``chunk`` is new to a pane at ``cursor``: (bytes, clear first?, bytes skipped,
    next cursor). The same snapshot delivered twice shows nothing twice."""
    end = chunk.offset + len(chunk.data)
    fresh = (
        cursor is None
        or cursor.job_id != chunk.job_id
        or chunk.reset
        or (cursor.inode is not None and chunk.inode is not None and cursor.inode != chunk.inode)
        or (chunk.size is not None and chunk.size < cursor.end)
    )
    new_cursor = LogCursor(chunk.job_id, chunk.inode, end)
    if fresh or cursor is None:
        return chunk.data, True, 0, new_cursor
    if end <= cursor.end:
        return b"", False, 0, cursor
    if chunk.offset > cursor.end:
        return chunk.data, False, chunk.offset - cursor.end, new_cursor
    return chunk.data[cursor.end - chunk.offset :], False, 0, new_cursor
