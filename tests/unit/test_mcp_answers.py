"""gpuroom mcp's answer helpers: pages bounded, a forged time stays a value, the action log
private."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from gpuroom.tui.cli.mcp_server import MAX_LIMIT, ActionLog, moment, page_of


def test_a_page_is_bounded_and_says_where_the_next_starts() -> None:
    rows, page = page_of(list(range(250)), 0, 10**9)
    assert len(rows) == MAX_LIMIT and page.next_offset == MAX_LIMIT and page.total == 250
    rows, page = page_of(list(range(250)), 240, 20)
    assert rows == list(range(240, 250)) and page.next_offset is None
    rows, page = page_of([1, 2], -5, 0)  # nonsense in, one row from the start out
    assert rows == [1] and page.offset == 0


@pytest.mark.attack("trust", "a box reports a time no calendar holds")
def test_a_forged_time_is_no_crash() -> None:
    m = moment(1e300, 1e9)
    assert m.iso is None and m.ago == "0s"
    m = moment(1_700_000_000.0, 1_700_000_060.0)
    assert m.iso == "2023-11-14T22:13:20+00:00" and m.ago == "1m"


def test_the_action_log_is_private_even_when_the_file_was_not(tmp_path: Path) -> None:
    path = tmp_path / "state" / "mcp-actions.jsonl"
    path.parent.mkdir()
    path.write_text("")
    path.chmod(0o644)
    ActionLog(path).write("job_kill", {"host": "box", "job": "j1"}, "ok")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    [record] = [json.loads(line) for line in path.read_text().splitlines()]
    assert record["who"] == "mcp" and record["what"] == "job_kill" and record["result"] == "ok"


@pytest.mark.attack("trust", "the action log's path is a symlink planted to another file")
def test_the_action_log_never_writes_through_a_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    path = tmp_path / "mcp-actions.jsonl"
    os.symlink(victim, path)
    with pytest.raises(OSError):
        ActionLog(path).write("pull", {"host": "box"}, "ok")
    assert victim.read_text() == "keep\n"
