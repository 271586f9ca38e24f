"""A job's log tail on the box: what the probe ships for a job the room selects, and what
`queue logs --lines/--end --json` answers (issue 17 item 1)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from harness.joblog import numbered_lines, write_failed_job

from gpuroom.remote.queue import collect, main, read_log_chunk

LINES = 9000


def _log(n: int = LINES) -> bytes:
    return numbered_lines(n)


def _data(chunk: dict[str, Any]) -> bytes:
    return base64.b64decode(chunk["data_b64"])


def _failed_job(root: Path) -> Path:
    return write_failed_job(root, LINES)


class _Session:
    def __init__(self) -> None:
        self.state: dict[str, Any] = {}


def test_a_tail_request_ships_an_ended_jobs_last_bytes_from_a_line_start(
        tmp_path: Path) -> None:
    log = _failed_job(tmp_path)
    size = log.stat().st_size
    assert size > 64 * 1024  # the tail is really a tail, not the whole file
    plain = collect(_Session(), {"queue_root": str(tmp_path)})
    [job] = plain["queue"]["queues"]["default"]["jobs"]
    assert job["state"] == "failed" and "log_chunk" not in job  # nobody asked: nothing sent

    asked = collect(_Session(), {"queue_root": str(tmp_path),
                                 "logs": {"default/j1": {"tail": 64 * 1024}}})
    [job] = asked["queue"]["queues"]["default"]["jobs"]
    chunk = job["log_chunk"]
    data = _data(chunk)
    assert chunk["next_offset"] == size and chunk["offset"] == size - len(data)
    assert size - 64 * 1024 <= chunk["offset"]
    # It starts at a line start: the byte before it ends a line, and it ends with the last.
    assert log.read_bytes()[chunk["offset"] - 1 : chunk["offset"]] == b"\n"
    assert data.startswith(b"line-") and data.endswith(b"line-%d\n" % (LINES - 1))


def test_a_tail_starts_at_the_cut_when_that_is_already_a_line_start(tmp_path: Path) -> None:
    log = tmp_path / "j1.log"
    log.write_bytes(b"aaaa\nbbbb\ncccc\n")
    chunk = read_log_chunk(str(log), {"tail": 10})
    assert _data(chunk) == b"bbbb\ncccc\n"  # "bbbb" begins exactly 10 bytes from the end
    one_line = tmp_path / "one.log"
    one_line.write_bytes(b"x" * 100 + b"\n")
    # A single line longer than the tail: its end is shown rather than nothing.
    assert _data(read_log_chunk(str(one_line), {"tail": 10})) == b"x" * 9 + b"\n"


def test_lines_and_end_read_the_last_lines_and_the_bytes_before_an_offset(
        tmp_path: Path) -> None:
    log = tmp_path / "j1.log"
    log.write_bytes(_log(100) + b"unfinished")
    last = read_log_chunk(str(log), {"tail": 1 << 20, "lines": 3})
    # A final line without its newline counts as a line, as tail -n counts it.
    assert _data(last) == b"line-98\nline-99\nunfinished"
    start = last["offset"]
    before = read_log_chunk(str(log), {"tail": 30, "end": start})
    data = _data(before)
    assert before["offset"] + len(data) == start and before["next_offset"] == start
    assert data == b"line-95\nline-96\nline-97\n"  # from a line start, ending where it was
    everything = read_log_chunk(str(log), {"tail": 1 << 20, "lines": 1000})
    assert everything["offset"] == 0
    size = log.stat().st_size
    none = read_log_chunk(str(log), {"tail": 1 << 20, "lines": 0})
    assert none["offset"] == none["next_offset"] == size and _data(none) == b""


def test_queue_logs_json_answers_the_last_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              ) -> None:
    _failed_job(tmp_path)
    rc = main(["logs", "j1", "--root", str(tmp_path), "--lines", "2", "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert _data(doc) == b"line-%d\nline-%d\n" % (LINES - 2, LINES - 1)
    rc = main(["logs", "j1", "--root", str(tmp_path), "--end", str(doc["offset"]),
               "--max-bytes", "20", "--json"])
    assert rc == 0
    older = json.loads(capsys.readouterr().out)
    assert _data(older).endswith(b"line-%d\n" % (LINES - 3))
    assert older["next_offset"] == doc["offset"]
