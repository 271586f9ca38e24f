"""Why a Slurm job waits, in words (issue 23): the reason code, its meaning, what to do, and
the expected start squeue's %S gives. On the recorded real session (tests/data/slurm) and on
the reason strings squeue prints; no Slurm is started here."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest
from paths import DATA

from gpuroom.remote import queue_slurm
from gpuroom.tui.present.slurm import PENDING_REASONS, slurm_summary, wait_reason
from gpuroom.tui.rules.doctor import slurm_findings
from gpuroom.tui.snapshot import Job, read_snapshot

LINES = [json.loads(raw) for raw in (DATA / "slurm" / "session.jsonl").read_text().splitlines()]
HOST = "login"


def wide_pending() -> tuple[dict[str, Any], dict[str, Any]]:
    """The first recorded poll where ``wide`` is PENDING on Resources, and that job."""
    for line in LINES:
        snap = line["snapshot"]
        for job in snap["queue"]["queues"]["default"]["jobs"]:
            if job["name"] == "wide" and job["state"] == "queued" and job["reason"] == \
                    "Resources":
                return copy.deepcopy(snap), job
    raise AssertionError("the recording has no pending 'wide'")


def with_wide(snap: dict[str, Any], **fields: Any) -> dict[str, Any]:
    snap = copy.deepcopy(snap)
    for job in snap["queue"]["queues"]["default"]["jobs"]:
        if job["name"] == "wide":
            job.update(fields)
    return snap


def waits(snap: dict[str, Any], name: str = "wide") -> list[Any]:
    """The SLURM6 findings about the job named ``name``."""
    t = snap["host"]["time"]
    return [f for f in slurm_findings(HOST, read_snapshot(snap), t)
            if f.id == "SLURM6" and f"({name}) waits: " in f.title]


@pytest.mark.parametrize(("raw", "code"), [
    ("Resources", "Resources"),
    ("(Priority)", "Priority"),                       # squeue's default %R wraps it
    ("ReqNodeNotAvail, UNAVAILABLE:node1", "ReqNodeNotAvail"),
    ("ReqNodeNotAvail,_May_be_reserved_for_other_job", "ReqNodeNotAvail"),
    ("QOSMaxGRESPerUser", "QOSMaxGRESPerUser"),
    ("launch failed requeued held", "launch failed requeued held"),
    ("DependencyNeverSatisfied", "DependencyNeverSatisfied"),
])
def test_squeues_reason_strings_map_to_their_code(raw: str, code: str) -> None:
    why = wait_reason(raw)
    assert why is not None and why.code == code
    assert (why.meaning, why.action, why.stuck) == PENDING_REASONS[code]


def test_an_unknown_reason_is_named_inert_and_points_to_the_manual() -> None:
    why = wait_reason("SomeNewCode\x1b[2J, detail")
    assert why is not None and "\x1b" not in why.code and why.code.startswith("SomeNewCode")
    assert "man squeue" in why.action and not why.stuck
    assert wait_reason(None) is None and wait_reason("  ") is None


def test_a_recorded_pending_job_says_why_it_waits_and_what_to_do() -> None:
    snap, wide = wide_pending()
    (f,) = waits(snap)
    assert f.severity == "info" and f.title == f"job default/{wide['id']} (wide) waits: Resources"
    assert f"Slurm job {wide['slurm_id']} PENDING (Resources): the nodes, GPUs" in f.seen
    assert f.fix == PENDING_REASONS["Resources"][1]


def test_the_expected_start_is_said_when_slurm_has_one() -> None:
    snap, _ = wide_pending()
    t = snap["host"]["time"]
    assert "Slurm gives no expected start yet" in waits(snap)[0].seen
    (f,) = waits(with_wide(snap, expected_start=t + 14 * 60))
    when = time.strftime("%H:%M", time.localtime(t + 14 * 60))
    assert f"expected to start {when} (in 14 min)" in f.seen


def test_a_reason_that_never_clears_warns() -> None:
    snap, _ = wide_pending()
    (f,) = waits(with_wide(snap, reason="PartitionTimeLimit"))
    assert f.severity == "warn" and "never start" in f.fix


def test_running_and_ended_jobs_do_not_wait() -> None:
    last = LINES[-1]["snapshot"]
    assert [f for f in slurm_findings(HOST, read_snapshot(last), last["host"]["time"])
            if f.id == "SLURM6"] == []


def test_the_queue_row_shows_the_expected_start() -> None:
    snap, wide = wide_pending()
    start = snap["host"]["time"] + 600
    job = Job.read({**wide, "expected_start": start})
    assert slurm_summary(job) == (f"{wide['slurm_id']} PENDING (Resources) starts "
                                  + time.strftime("%H:%M", time.localtime(start)))


def test_the_box_reads_squeues_expected_start_for_pending_jobs_only() -> None:
    job: dict[str, Any] = {"time_limit_s": None}
    row = {"T": "PENDING", "r": "Resources", "N": None, "M": "0:00", "l": "1:00",
           "L": "1:00", "S": "2026-11-24T12:30:00", "D": "1"}
    queue_slurm._apply_live(job, None, row, 0.0)
    assert job["expected_start"] == time.mktime((2026, 11, 24, 12, 30, 0, 0, 0, -1))
    assert job["nodes"] == 1
    queue_slurm._apply_live(job, None, {**row, "S": "N/A"}, 0.0)
    assert job["expected_start"] is None
    queue_slurm._apply_live(job, None, {**row, "T": "RUNNING", "N": "n1"}, 0.0)
    assert job["expected_start"] is None and job["state"] == "running"
