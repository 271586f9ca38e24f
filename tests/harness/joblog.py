"""An ended job with a long log in a queue directory, for the log tail tests."""

from __future__ import annotations

from pathlib import Path

from gpuroom.remote.queue_events import EventWriter


def numbered_lines(n: int) -> bytes:
    """b"line-0\\n" ... b"line-{n-1}\\n"."""
    return b"".join(b"line-%d\n" % i for i in range(n))


def write_failed_job(root: Path, lines: int) -> Path:
    """Queue ``default`` under ``root`` (a GPUROOM_HOME) with job j1 failed (exit 3) and a log
    of ``lines`` numbered lines; the log's path."""
    qdir = root / "queues" / "default"
    writer = EventWriter(str(qdir))
    try:
        writer.append("added", argv=["train"], cwd="/")
        writer.append("launching", job="j1", attempt=1, boot_id="B")
        writer.append("started", job="j1", attempt=1, pid=1, pgid=1, boot_id="B")
        writer.append("exited", job="j1", attempt=1, exit_code=3)
    finally:
        writer.close()
    (qdir / "logs").mkdir(exist_ok=True)
    log = qdir / "logs" / "j1.log"
    log.write_bytes(numbered_lines(lines))
    return log
