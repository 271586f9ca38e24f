"""The log pane's bytes: each job's log chunk from the snapshot, shown exactly once; and the
pane's search (`/`, `n`, `N`) over the sanitized lines it shows."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gpuroom.tui.sanitize import LineSplitter
from gpuroom.tui.snapshot import LogChunk as LogChunkView
from gpuroom.tui.snapshot import Snapshot

# The pane cuts bytes into inert display lines with the sanitizer's splitter; it is named
# here so widgets need nothing but tui/present/.
__all__ = ["MAX_MATCHES", "LineSplitter", "LogChunk", "LogCursor", "Match", "advance_log",
           "chunk_of", "find_matches", "last_error_line", "log_chunk", "log_key", "match_label",
           "prepend_log", "step_match"]


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


# ----------------------------------------------------------------------------- search (`/`)

MAX_MATCHES = 10_000  # a one-letter search of a 10k-line log stays cheap; the count says "+"


@dataclass(frozen=True)
class Match:
    """One occurrence of the log search in the pane's line ``line``, columns [start, end)."""

    line: int
    start: int
    end: int


def find_matches(lines: Sequence[str], needle: str, limit: int = MAX_MATCHES) -> list[Match]:
    """Every occurrence of ``needle`` in the pane's lines (the sanitized text it shows), in
    reading order, at most ``limit``. Smart case, as in less and vim: a needle with no
    capital letter matches any case."""
    if not needle:
        return []
    flags = 0 if any(c.isupper() for c in needle) else re.IGNORECASE
    pattern = re.compile(re.escape(needle), flags)
    found: list[Match] = []
    for y, line in enumerate(lines):
        for m in pattern.finditer(line):
            found.append(Match(y, m.start(), m.end()))
            if len(found) >= limit:
                return found
    return found


def step_match(matches: Sequence[Match], current: int | None, step: int,
               view: tuple[int, int]) -> int | None:
    """The match ``n`` (step 1) or ``N`` (step -1) goes to: the next or previous one, going
    round at the ends. With none chosen yet, the first at or below the view's top line
    (``n``), or the last at or above its bottom line (``N``); ``view`` is (top, bottom)."""
    if not matches:
        return None
    if current is not None:
        return (current + step) % len(matches)
    top, bottom = view
    if step > 0:
        return next((i for i, m in enumerate(matches) if m.line >= top), 0)
    return next((i for i in range(len(matches) - 1, -1, -1) if matches[i].line <= bottom),
                len(matches) - 1)


def match_label(needle: str, current: int | None, total: int, limit: int = MAX_MATCHES) -> str:
    """The log pane's title words for a search: "/loss: match 3/17", "/loss: 17 matches",
    "/loss: no match"."""
    count = f"{total}+" if total >= limit else str(total)
    if not total:
        return f"/{needle}: no match"
    if current is None:
        return f"/{needle}: {count} match{'es' if total > 1 else ''} (n / N)"
    return f"/{needle}: match {current + 1}/{count}"


ATTEMPT_HEADER = "=== gpuroom "  # the runner's line before each attempt's output
ERROR_LOOKBACK_LINES = 40  # an error further up is history, not why the job just stopped
# What a job's last words look like when it dies: Python's exception line ("torch.
# OutOfMemoryError: CUDA out of memory ..."), a tool's "error:"/"fatal:", the shell's "Killed".
_ERROR_LINE = re.compile(r"^\s*(?:[A-Za-z_][\w.]*(?:Error|Exception)\b|(?:error|fatal)\b"
                         r"|Killed$|Segmentation fault)", re.IGNORECASE)


def last_error_line(lines: Sequence[str], width: int) -> str | None:
    """The last error line among the log's last lines, of the attempt shown last, when the
    pane, ``width`` columns wide, cuts it (a narrow room cut "CUDA out of memo"); None when
    there is none or it fits."""
    for line in reversed(lines[-ERROR_LOOKBACK_LINES:]):
        if line.startswith(ATTEMPT_HEADER):
            return None  # an earlier attempt's error: this one was relaunched past it
        if _ERROR_LINE.match(line):
            return line if len(line) > width else None
    return None
