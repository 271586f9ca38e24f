"""The log pane's bytes: each job's log chunk from the snapshot, shown exactly once."""

from __future__ import annotations

from dataclasses import dataclass

from gpuroom.tui.sanitize import LineSplitter
from gpuroom.tui.snapshot import LogChunk as LogChunkView
from gpuroom.tui.snapshot import Snapshot

# The pane cuts bytes into inert display lines with the sanitizer's splitter; it is named
# here so widgets need nothing but tui/present/.
__all__ = ["LineSplitter", "LogChunk", "LogCursor", "advance_log", "chunk_of", "log_chunk",
           "log_key", "prepend_log"]


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
    """How far the log pane has shown one job's log file: bytes ``start`` to ``end``."""

    job_id: str
    inode: int | None
    end: int
    start: int = 0


def chunk_of(job_id: str, view: LogChunkView | None) -> LogChunk | None:
    """The pane's chunk of a chunk the helper sent; None when none or not base64."""
    if view is None:
        return None
    data = view.data
    if data is None:
        return None
    return LogChunk(job_id=job_id, offset=view.offset or 0, inode=view.inode, size=view.size,
                    data=data, reset=view.reset)


def log_chunk(snapshot: Snapshot | None, job_id: str) -> LogChunk | None:
    """The log bytes job ``job_id`` carried in the snapshot; None when none or not base64."""
    job = snapshot.job(job_id) if snapshot is not None else None
    return chunk_of(job_id, job.log_chunk) if job is not None else None


def log_key(snapshot: Snapshot | None, job_id: str) -> str | None:
    """The job's "queue/id", as the fleet asks the helper for its log."""
    job = snapshot.job(job_id) if snapshot is not None else None
    return job.key if job is not None else None


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
        # A tail reaching back further than what is shown (the job was just selected, and
        # the pane had only the bytes since the fleet's cursor): it replaces the pane.
        or (chunk.offset < cursor.start and end >= cursor.end)
    )
    if fresh or cursor is None:
        return chunk.data, True, 0, LogCursor(chunk.job_id, chunk.inode, end, chunk.offset)
    new_cursor = LogCursor(chunk.job_id, chunk.inode, end, cursor.start)
    if end <= cursor.end:
        return b"", False, 0, cursor
    if chunk.offset > cursor.end:
        return chunk.data, False, chunk.offset - cursor.end, new_cursor
    return chunk.data[cursor.end - chunk.offset :], False, 0, new_cursor


def prepend_log(cursor: LogCursor | None, chunk: LogChunk) -> tuple[bytes, LogCursor] | None:
    """Older bytes for the top of a pane at ``cursor``: (bytes, next cursor), or None when
    ``chunk`` does not end where the pane starts (another job, a replaced file, a stale
    answer)."""
    if cursor is None or cursor.job_id != chunk.job_id or chunk.offset >= cursor.start:
        return None
    if cursor.inode is not None and chunk.inode is not None and cursor.inode != chunk.inode:
        return None
    if chunk.offset + len(chunk.data) != cursor.start:
        return None
    return chunk.data, LogCursor(cursor.job_id, cursor.inode, cursor.end, chunk.offset)
