"""The probe reports a succeeded job's newest checkpoint (or none), so the jump host's "not
pulled" clock can tell a job that wrote outputs from one that wrote nothing (issue 17 item 7),
and it walks a finished job's dir again only when the dir changes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gpuroom.remote import queue
from gpuroom.remote.queue_events import EventWriter


class _Session:
    def __init__(self) -> None:
        self.state: dict[str, Any] = {}


def _finished(root: Path) -> tuple[Path, Path]:
    """Two succeeded jobs: j1 wrote a checkpoint, j2's dir stayed empty."""
    dirs = []
    writer = EventWriter(str(root / "queues" / "default"))
    try:
        for _ in (1, 2):  # two adds in a row: j1 and j2
            writer.append("added", argv=["train"], cwd="/")
        for n in (1, 2):
            d = root / "ckpt" / f"j{n}"
            d.mkdir(parents=True)
            dirs.append(d)
            writer.append("launching", job=f"j{n}", attempt=1, boot_id="B", ckpt_dir=str(d))
            writer.append("started", job=f"j{n}", attempt=1, pid=1, pgid=1, boot_id="B")
            writer.append("exited", job=f"j{n}", attempt=1, exit_code=0)
    finally:
        writer.close()
    (dirs[0] / "final.pt").write_bytes(b"123")
    return dirs[0], dirs[1]


def _jobs(session: _Session, root: Path) -> dict[str, dict[str, Any]]:
    doc = queue.collect(session, {"queue_root": str(root)})
    return {j["id"]: j for j in doc["queue"]["queues"]["default"]["jobs"]}


def test_a_succeeded_job_reports_its_checkpoint_and_an_empty_dir_none(tmp_path: Path) -> None:
    wrote, _empty = _finished(tmp_path)
    jobs = _jobs(_Session(), tmp_path)
    assert jobs["j1"]["state"] == "succeeded"
    assert jobs["j1"]["checkpoint"]["path"] == str(wrote / "final.pt")
    assert jobs["j1"]["checkpoint"]["size"] == 3
    assert jobs["j2"]["checkpoint"] is None


def test_a_finished_dir_is_walked_again_only_when_it_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wrote, _empty = _finished(tmp_path)
    walked: list[str | None] = []
    real = queue.newest_checkpoint

    def counting(ckpt_dir: str | None) -> dict[str, Any] | None:
        walked.append(ckpt_dir)
        return real(ckpt_dir)

    monkeypatch.setattr(queue, "newest_checkpoint", counting)
    session = _Session()
    _jobs(session, tmp_path)
    assert len(walked) == 2
    _jobs(session, tmp_path)
    assert len(walked) == 2  # nothing changed: no walk
    (wrote / "later.pt").write_bytes(b"12345")
    os.utime(wrote, ns=(1, os.stat(wrote).st_mtime_ns + 10**9))  # a coarse-clock fs too
    jobs = _jobs(session, tmp_path)
    assert walked[2:] == [str(wrote)]
    assert jobs["j1"]["checkpoint"]["path"] == str(wrote / "later.pt")
