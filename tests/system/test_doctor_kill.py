"""A job killed on request (`queue kill`, the room's K) is explained as killed on request by
gpuroom, with when, never as U3's "a pkill may have matched more than intended" (issue 17
item 16). The real queue and runner kill a real job; the real probe reports before and after.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.queuebox import Box

from gpuroom.remote.probe import ProbeSession
from gpuroom.tui.rules.doctor import vanished_findings
from gpuroom.tui.snapshot import read_snapshot


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    b = Box(tmp_path)
    b.json("config", "--idle-exit", "1")  # the runner leaves soon after the queue empties
    try:
        yield b
    finally:
        b.cleanup()


def _probe(session: ProbeSession, box: Box) -> dict[str, Any]:
    return session.snapshot({"queue_root": str(box.root)})


def test_a_job_killed_with_K_is_killed_on_request_not_a_stray_pkill(box: Box) -> None:
    job = box.add("sleep", "60")
    box.wait_state(job, ("running",))
    session = ProbeSession()
    try:
        before = _probe(session, box)
        proc = box.run("kill", job, "--grace", "1", check=False)
        assert proc.returncode == 0, proc.stderr
        box.wait_state(job, ("killed",))
        after = _probe(session, box)
    finally:
        session.close()
    out = vanished_findings("box", read_snapshot(before), read_snapshot(after))
    assert len(out) == 1, out
    (f,) = out
    assert (f.id, f.severity) == ("U3", "info")
    assert f"default/{job}" in f.title and "killed on request (by gpuroom)" in f.title
    assert "kill request" in f.seen and "UTC" in f.seen and "SIGTERM" in f.seen
    assert "pkill" not in f.fix + f.seen
