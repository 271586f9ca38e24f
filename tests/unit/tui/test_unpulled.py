"""One truth for "are the checkpoints home?" (issue 17 item 7): the danger clock's unpulled
item and the teardown gate both ask tui/rules/gate.py's job_pull, with the same pull records.

Jobs are the recordings' (tests/data/doctor/parts.py); a record is what
tui/transport/pull.py's record_pull writes after a verified pull. The same over the test
sshd with a real pull: tests/system/test_unpulled_ssh.py.
"""

from __future__ import annotations

import sys
from typing import Any

from paths import DATA

sys.path.insert(0, str(DATA / "doctor"))
import parts as rec

from gpuroom.tui.rules.clock import box_outputs, host_clocks
from gpuroom.tui.rules.gate import evaluate
from gpuroom.tui.snapshot import Job
from gpuroom.tui.snapshot import read_optional as view

T = rec.T0


def _done(**ckpt: Any) -> dict[str, Any]:
    """j1 finished, its newest checkpoint as the helper reports it (``ckpt`` varies it)."""
    running = rec.job()
    return dict(rec.ended(running, "succeeded", T, exit_code=0),
                checkpoint=dict(running["checkpoint"], **ckpt))


def _record(job: dict[str, Any], *, at: float, sha: str = "ab" * 32,
            size: int | None = None) -> dict[str, Any]:
    """record_pull's entry for a verified pull of ``job``'s newest checkpoint at ``at``."""
    c = job["checkpoint"]
    rel = c["path"][len(job["ckpt_dir"]) + 1:]
    return {"host": "d", "job": job["id"], "dir": job["ckpt_dir"], "local_dir": "/home/x",
            "files": [{"path": rel, "size": c["size"] if size is None else size,
                       "sha256": sha, "verified_by": "load"}],
            "verified_by": "load", "time": at}


def _unpulled(job: dict[str, Any], records: list[dict[str, Any]]) -> list[str]:
    items = host_clocks("d", view(rec.snapshot(T, jobs=[job])), None, T, records=records)
    return [c.text for c in items if c.kind == "unpulled"]


def test_a_verified_pull_clears_the_unpulled_clock() -> None:
    job = _done()
    assert _unpulled(job, []) and "j1" in _unpulled(job, [])[0]
    assert _unpulled(job, [_record(job, at=T + 60)]) == []


def test_a_job_that_wrote_no_checkpoint_is_never_named() -> None:
    job = dict(rec.ended(rec.job(), "succeeded", T, exit_code=0), checkpoint=None)
    assert job["ckpt_dir"]  # every job has a dir; this one stayed empty
    assert _unpulled(job, []) == []


def test_a_checkpoint_written_after_the_pull_is_unpulled_again() -> None:
    job = _done()
    mtime = job["checkpoint"]["mtime"]
    assert _unpulled(job, [_record(job, at=mtime - 30)])  # pulled before the last save
    assert _unpulled(job, [_record(job, at=mtime + 30, size=1)])  # another size: not it
    other = dict(_record(job, at=mtime + 30), host="elsewhere")
    assert _unpulled(job, [other])  # a pull of another host's j1 is not this one's


def test_the_gate_and_the_clock_agree_on_the_same_records() -> None:
    job = _done()
    snap = view(rec.snapshot(T, jobs=[job]))
    record = _record(job, at=T + 60)
    # The gate reads the box's manifest (sha256 included); the clock reads the poll.
    manifest = [dict(e, sha256=record["files"][0]["sha256"])
                for e in box_outputs(Job.read(job))]
    for records in ([], [record]):
        gate = evaluate("d", snap, records, {"j1": manifest})
        pulled_item = next(i for i in gate.items if i.name == "every job's outputs pulled")
        assert pulled_item.ok == (not _unpulled(job, records))


def _done_with_units() -> dict[str, Any]:
    """j1 finished, its program's own checkpoint dir found under its cwd (not gpuroom's)."""
    job = _done(path="/w/checkpoint-20", source="discovered", kind="dir", step=20)
    job["ckpt_units"] = {"source": "discovered", "cwd": "/w", "units": [
        {"path": "checkpoint-20", "kind": "dir", "size": 20, "mtime": T - 5, "step": 20,
         "files": ["checkpoint-20/a.safetensors", "checkpoint-20/b.pt"]}]}
    return job


def test_the_programs_own_units_are_unpulled_until_their_cwd_pull_has_them() -> None:
    job = _done_with_units()
    assert _unpulled(job, []) and "j1" in _unpulled(job, [])[0]
    half = {"host": "d", "job": "j1 units", "dir": "/w", "time": T + 60, "files": [
        {"path": "checkpoint-20/a.safetensors", "size": 10, "sha256": "ab" * 32}]}
    assert _unpulled(job, [half])  # one file of the dir is not a pulled unit
    whole = dict(half, files=[*half["files"], {"path": "checkpoint-20/b.pt", "size": 10,
                                               "sha256": "cd" * 32}])
    assert _unpulled(job, [whole]) == []
    # A pull of gpuroom's own dir for j1 is not a pull of the program's checkpoints.
    assert _unpulled(job, [dict(whole, job="j1", dir=job["ckpt_dir"])])
