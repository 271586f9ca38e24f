"""A queue's identity (remote/queue_events.py): made once with the queue, read strictly, carried
onto each job of the snapshot, and the only thing that tells a new queue's j1 from an old one's
in what the jump host keeps (here: the teardown gate's pull records)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuroom.remote.queue_events import (
    QUEUE_ID_FILE,
    EventWriter,
    ensure_queue_id,
    read_queue_id,
)
from gpuroom.tui.rules.gate import job_pull
from gpuroom.tui.snapshot import read_snapshot

OLD, NEW = "a" * 32, "b" * 32


def test_a_queue_gets_its_identity_once_when_it_is_made(tmp_path: Path) -> None:
    qdir = tmp_path / "queues" / "default"
    EventWriter(str(qdir)).close()
    made = read_queue_id(str(qdir))
    assert made is not None and len(made) == 32
    assert ensure_queue_id(str(qdir)) == made  # never rewritten
    EventWriter(str(qdir)).close()
    assert read_queue_id(str(qdir)) == made
    assert not [p for p in os.listdir(qdir) if p.startswith(".")]  # no tmp file left
    other = tmp_path / "queues" / "other"
    EventWriter(str(other)).close()
    assert read_queue_id(str(other)) not in (None, made)


@pytest.mark.attack("trust", "a job rewrites its queue's identity file with markup or a FIFO")
def test_an_identity_file_that_is_not_one_is_no_identity(tmp_path: Path) -> None:
    for text in ("[red]x", "A" * 32, "a" * 31, "a" * 32 + "\nmore", ""):
        (tmp_path / QUEUE_ID_FILE).write_text(text)
        assert read_queue_id(str(tmp_path)) is None, text
    (tmp_path / QUEUE_ID_FILE).unlink()
    os.mkfifo(tmp_path / QUEUE_ID_FILE)
    assert read_queue_id(str(tmp_path)) is None  # refused, never waited on


def test_the_snapshot_carries_the_identity_onto_each_job_and_drops_a_forged_one() -> None:
    snap = read_snapshot({"queue": {"queues": {
        "default": {"id": NEW, "jobs": [{"id": "j1", "state": "running"}]},
        "forged": {"id": "../../x", "jobs": [{"id": "j1", "state": "running"}]}}}})
    assert sorted((j.queue, j.queue_id) for j in snap.jobs) == [("default", NEW),
                                                                ("forged", None)]


@pytest.mark.attack("faults", "a new rental's j1 is taken as pulled because the old rental's "
                    "j1 was")
def test_a_pull_of_an_earlier_queues_job_of_that_id_does_not_count() -> None:
    entries = [{"path": "ckpt-000000000005.pt", "kind": "file", "size": 3, "mtime": 10.0,
                "sha256": "c" * 64}]
    record = {"host": "box", "queue_id": OLD, "job": "j1", "dir": "/c", "time": 20.0,
              "files": [{"path": "ckpt-000000000005.pt", "size": 3, "sha256": "c" * 64,
                         "verified_by": "hash"}]}
    assert not job_pull("box", "j1", entries, [record], OLD).needs_pull
    assert job_pull("box", "j1", entries, [record], NEW).needs_pull
    unlabelled = {k: v for k, v in record.items() if k != "queue_id"}
    assert job_pull("box", "j1", entries, [unlabelled], NEW).needs_pull
