"""The fleet asks the real helper for a selected job's log tail, then follows it, and reads
older bytes on request (issue 17 item 1), over the local link (the same helper and poll path
as a box, without SSH)."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.joblog import write_failed_job

from gpuroom.tui.config import Config, HostConfig
from gpuroom.tui.fleet.live import LOG_TAIL_BYTES, Fleet

LINES = 12000


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("GPUROOM_HOME", raising=False)
    return tmp_path


async def test_a_shown_job_gets_its_tail_then_what_follows_then_older_bytes(home: Path) -> None:
    log = write_failed_job(home / ".gpuroom", LINES).read_bytes()
    assert len(log) > LOG_TAIL_BYTES
    config = Config(path=home / "hosts.toml")
    config.hosts["local"] = HostConfig(name="local", local=True)
    fleet = Fleet(config)
    try:
        state = await fleet.poll_host("local")
        assert state.view is not None
        [job] = state.view.jobs
        assert job.state == "failed" and job.log_chunk is None  # nobody is looking at it

        fleet.show_log("local", "default/j1")
        assert fleet.request_for("local")["logs"]["default/j1"] == {"tail": LOG_TAIL_BYTES}
        state = await fleet.poll_host("local")
        assert state.view is not None
        chunk = state.view.jobs[0].log_chunk
        assert chunk is not None and chunk.data is not None and chunk.offset is not None
        assert chunk.next_offset == len(log) and log[chunk.offset - 1 : chunk.offset] == b"\n"
        assert chunk.data == log[chunk.offset :]
        # The tail arrived: the next poll asks only for what follows it.
        assert fleet.request_for("local")["logs"]["default/j1"] == {
            "offset": len(log), "inode": chunk.inode}

        older = await fleet.log_before("local", "default/j1", chunk.offset)
        assert older is not None and older.data is not None and older.offset is not None
        assert older.next_offset == chunk.offset
        assert older.data == log[older.offset : chunk.offset] and older.data.startswith(b"line-")
    finally:
        await fleet.close()
