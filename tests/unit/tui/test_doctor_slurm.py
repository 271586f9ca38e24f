"""Issue 9's doctor and danger clock for Slurm, on a recording of a real Slurm session.

tests/data/slurm/session.jsonl was recorded once from the test cluster of
tests/harness/slurm.py by tests/data/slurm/record_session.py: real probe snapshots every ~2 s
of four jobs (resumable: warned, requeued, resumed, COMPLETED; stale: one old checkpoint, then
TIMEOUT; wide: PENDING on Resources; fails: FAILED exit 7). No Slurm is started here. The ends
that cluster cannot produce (OUT_OF_MEMORY, PREEMPTED, NODE_FAIL, CANCELLED) are made from the
recorded TIMEOUT record with queue_slurm's own _apply_final, as the queue records them.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from paths import DATA

from gpuroom.profiles import load_profile
from gpuroom.remote import queue_slurm
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.rules.clock import ClockItem, banner_lines, host_clocks
from gpuroom.tui.rules.doctor import (
    FIX,
    Finding,
    diagnose,
    job_findings,
    slurm_findings,
    vanished_findings,
    walltime_left,
)
from gpuroom.tui.rules.watch import FleetWatch
from gpuroom.tui.snapshot import Job
from gpuroom.tui.snapshot import read_optional as view

SESSION = DATA / "slurm" / "session.jsonl"
LINES: list[dict[str, Any]] = [json.loads(raw) for raw in SESSION.read_text().splitlines()]
SLURM = load_profile("slurm")
HOST = "login"
Snap = dict[str, Any]


def jobs(snap: Snap) -> dict[str, dict[str, Any]]:
    """The recorded jobs by name (the recorder gave each a distinct one)."""
    return {j["name"]: j for j in snap["queue"]["queues"]["default"]["jobs"]}


def key(job: dict[str, Any]) -> str:
    return f"default/{job['id']}"


def first(pred: Callable[[dict[str, dict[str, Any]]], bool], start: int = 0) -> int:
    """Index of the first recorded poll from ``start`` whose jobs satisfy ``pred``."""
    for i in range(start, len(LINES)):
        if pred(jobs(LINES[i]["snapshot"])):
            return i
    raise AssertionError("the recording has no such poll")


def snap_at(i: int) -> tuple[Snap, float]:
    return copy.deepcopy(LINES[i]["snapshot"]), float(LINES[i]["t"])


def about(findings: list[Finding], job: dict[str, Any]) -> list[Finding]:
    return [f for f in findings if f"/{job['id']} " in f.title]


def ids(findings: list[Finding]) -> list[str]:
    return [f.id for f in findings]


def ended_as(job: dict[str, Any], state: str, exit_code: int | None = 0) -> dict[str, Any]:
    """``job`` (a final record) as the queue records another end: _apply_final and the
    attempt's end_reason, as queue_slurm.fold_slurm writes them."""
    job = copy.deepcopy(job)
    queue_slurm._apply_final(job, state, exit_code, None)
    job["attempts"][-1]["end_reason"] = state
    return job


def with_job(snap: Snap, name: str, job: dict[str, Any]) -> Snap:
    snap = copy.deepcopy(snap)
    view = snap["queue"]["queues"]["default"]
    view["jobs"] = [job if j["name"] == name else j for j in view["jobs"]]
    return snap


def clocks_of(snap: Snap, now: float, kind: str, profile: Any = SLURM) -> list[ClockItem]:
    return [c for c in host_clocks(HOST, view(snap), profile, now) if c.kind == kind]


# ------------------------------------------------------------------------ final states

LAST, T_LAST = snap_at(len(LINES) - 1)


def test_the_recording_holds_the_real_ends() -> None:
    got = {n: (j["state"], j["slurm_state"]) for n, j in jobs(LAST).items()}
    assert got == {"resumable": ("succeeded", "COMPLETED"), "stale": ("failed", "TIMEOUT"),
                   "wide": ("succeeded", "COMPLETED"), "fails": ("failed", "FAILED")}


def test_timeout_is_a_steady_slurm2_finding_with_what_was_seen() -> None:
    stale = jobs(LAST)["stale"]
    found = about(diagnose(None, view(LAST), LinkState.UP, SLURM, T_LAST, host=HOST), stale)
    assert ids(found) == ["SLURM2"]
    f = found[0]
    assert f.severity == "warn" and "hit its walltime (Slurm TIMEOUT)" in f.title
    assert f"Slurm job {stale['slurm_id']} on {stale['node']}" in f.seen
    assert f"of a {stale['time_limit_s']} s walltime" in f.seen
    # The recorded run says the warning reached the script and the job ignored it.
    assert stale["attempts"][-1]["runs"][-1]["warned"] == 1
    assert "reached the job, which did not stop in time" in f.seen
    assert f.fix == FIX["SLURM2"] and "raise --time or requeue" in f.fix
    # Steady: every poll after the end says it again, with no transition to see.
    ends = [i for i, line in enumerate(LINES)
            if jobs(line["snapshot"])["stale"]["slurm_state"] == "TIMEOUT"]
    assert len(ends) >= 2
    for i in ends:
        snap, t = snap_at(i)
        assert ids(about(slurm_findings(HOST, view(snap), t), stale)) == ["SLURM2"]


def test_completed_and_plain_failed_jobs_get_no_slurm_state_finding() -> None:
    found = slurm_findings(HOST, view(LAST), T_LAST)
    for name in ("resumable", "wide", "fails"):
        assert about(found, jobs(LAST)[name]) == [], name


@pytest.mark.parametrize(("state", "fid", "words"), [
    ("OUT_OF_MEMORY", "SLURM4", "OOM-killed by its cgroup"),
    ("PREEMPTED", "SLURM5", "was preempted"),
    ("NODE_FAIL", "SLURM5", "lost its node"),
])
def test_oom_preempted_and_node_fail_are_explained_with_the_seed_fix(
        state: str, fid: str, words: str) -> None:
    stale = ended_as(jobs(LAST)["stale"], state, exit_code=0)
    found = about(slurm_findings(HOST, view(with_job(LAST, "stale", stale)), T_LAST), stale)
    assert ids(found) == [fid]
    assert words in found[0].title and f"Slurm {state}" in found[0].title
    assert found[0].fix == FIX[fid]
    if fid == "SLURM5":
        assert f"checkpoints in {stale['ckpt_dir']}" in found[0].seen
        assert "/scratch/$USER" in found[0].fix and "$TMPDIR" in found[0].fix
    else:
        assert "MaxRSS" in found[0].fix and "do not shrink the batch" in found[0].fix


def test_a_relaunched_or_cancelled_job_has_no_final_state_finding() -> None:
    stale = jobs(LAST)["stale"]
    cancelled = ended_as(stale, "CANCELLED", exit_code=None)
    assert cancelled["state"] == "killed"
    assert about(slurm_findings(HOST, view(with_job(LAST, "stale", cancelled)), T_LAST),
                 stale) == []
    # `queue relaunch` queues a new attempt: the TIMEOUT belongs to the one before.
    relaunched = copy.deepcopy(stale)
    relaunched.update(state="queued", slurm_state="PENDING", slurm_id="99", reason=None)
    assert about(slurm_findings(HOST, view(with_job(LAST, "stale", relaunched)), T_LAST),
                 stale) == []


def test_the_end_is_said_once_not_also_as_an_unexplained_exit() -> None:
    i = first(lambda j: j["stale"]["slurm_state"] == "TIMEOUT")
    prev, _ = snap_at(i - 1)
    snap, t = snap_at(i)
    stale = jobs(snap)["stale"]
    assert jobs(prev)["stale"]["state"] == "running"
    assert about(vanished_findings(HOST, view(prev), view(snap)), stale) == []
    assert ids(about(diagnose(view(prev), view(snap), LinkState.UP, SLURM, t, host=HOST),
                     stale)) == ["SLURM2"]


# ------------------------------------------------------------------------ SLURM2 while running

def _stale_near_wall(j: dict[str, dict[str, Any]]) -> bool:
    s = j["stale"]
    return (s["state"] == "running" and s["time_left_s"] is not None
            and s["time_left_s"] < 2 * s["signal_lead_s"])


def test_near_the_wall_an_old_checkpoint_is_a_slurm2_warning() -> None:
    snap, t = snap_at(first(_stale_near_wall))
    stale = jobs(snap)["stale"]
    assert snap["host"]["time"] - stale["checkpoint"]["mtime"] > stale["signal_lead_s"]
    found = about(slurm_findings(HOST, view(snap), t), stale)
    assert ids(found) == ["SLURM2"] and found[0].severity == "warn"
    assert found[0].title.endswith("no checkpoint newer than the warning lead")
    assert stale["checkpoint"]["path"] in found[0].seen
    assert f"warning {stale['signal_lead_s']} s before the wall" in found[0].seen


def test_no_checkpoint_at_all_near_the_wall_is_the_same_warning() -> None:
    snap, t = snap_at(first(_stale_near_wall))
    stale = jobs(snap)["stale"]
    stale["checkpoint"] = None
    found = about(slurm_findings(HOST, view(with_job(snap, "stale", stale)), t), stale)
    assert ids(found) == ["SLURM2"] and f"no checkpoint in {stale['ckpt_dir']}" in found[0].seen


def test_far_from_the_wall_or_without_a_warning_lead_there_is_no_slurm2_warning() -> None:
    i = first(lambda j: j["stale"]["state"] == "running")
    snap, t = snap_at(i)
    stale = jobs(snap)["stale"]
    assert stale["time_left_s"] >= 2 * stale["signal_lead_s"]
    assert about(slurm_findings(HOST, view(snap), t), stale) == []
    near, t_near = snap_at(first(_stale_near_wall))
    unarmed = dict(jobs(near)["stale"], signal_lead_s=0)
    assert about(slurm_findings(HOST, view(with_job(near, "stale", unarmed)), t_near),
                 unarmed) == []


def test_a_job_checkpointing_every_few_seconds_is_never_warned() -> None:
    # resumable's 50 s lead is most of its 60 s walltime: it is always "near the wall", and
    # its first seconds (no checkpoint yet, running for less than a lead) must not warn.
    running = 0
    for i, line in enumerate(LINES):
        job = jobs(line["snapshot"])["resumable"]
        if job["state"] != "running":
            continue
        running += 1
        snap, t = snap_at(i)
        assert about(slurm_findings(HOST, view(snap), t), job) == [], (i, job)
    assert running >= 5
    # ... while the stale job is warned at some poll before its end.
    warned = [i for i, line in enumerate(LINES)
              if about(slurm_findings(HOST, view(line["snapshot"]), line["t"]),
                       jobs(line["snapshot"])["stale"])
              and jobs(line["snapshot"])["stale"]["state"] == "running"]
    assert warned


# ------------------------------------------------------------------------ pending clock

def _wide_pending(j: dict[str, dict[str, Any]]) -> bool:
    return bool(j["wide"]["state"] == "queued" and j["wide"]["reason"] == "Resources")


def test_a_pending_slurm_job_shows_its_reason_as_info() -> None:
    snap, t = snap_at(first(_wide_pending))
    wide = jobs(snap)["wide"]
    items = [c for c in clocks_of(snap, t, "pending") if f"Slurm {wide['slurm_id']})" in c.text]
    assert len(items) == 1 and items[0].severity == "info"
    assert "(Resources)" in items[0].text
    waited = snap["host"]["time"] - wide["attempts"][-1]["submitted"] + (t - snap["host"]["time"])
    assert items[0].seconds == pytest.approx(waited)
    assert banner_lines([], items) == []


def test_pending_longer_than_an_hour_warns() -> None:
    snap, t = snap_at(first(_wide_pending))
    wide = jobs(snap)["wide"]
    later = [c for c in clocks_of(snap, t + 3700, "pending")
             if f"Slurm {wide['slurm_id']})" in c.text]
    assert [c.severity for c in later] == ["warn"]
    assert banner_lines([], later) == [f"WARN {HOST}: {later[0].text}"]


def test_running_and_finished_jobs_are_not_pending() -> None:
    assert clocks_of(LAST, T_LAST, "pending") == []
    snap, t = snap_at(first(lambda j: j["wide"]["state"] == "running"))
    assert not [c for c in clocks_of(snap, t, "pending")
                if f"Slurm {jobs(snap)['wide']['slurm_id']})" in c.text]


def test_after_a_requeue_pending_counts_from_the_requeue() -> None:
    i = first(lambda j: j["resumable"]["state"] == "queued" and j["resumable"]["attempts"][-1]
              ["runs"])
    snap, t = snap_at(i)
    job = jobs(snap)["resumable"]
    item = [c for c in clocks_of(snap, t, "pending") if f"Slurm {job['slurm_id']})" in c.text]
    assert len(item) == 1 and "since its requeue" in item[0].text
    assert f"({job['reason']})" in item[0].text
    requeued_at = job["attempts"][-1]["runs"][-1]["end"]
    assert item[0].seconds == pytest.approx(t - requeued_at)


@pytest.mark.attack(
    "hostile text",
    "escape sequences in a Slurm pending reason: inert in the finding")
def test_a_reason_cannot_drive_the_terminal() -> None:
    snap, t = snap_at(first(_wide_pending))
    wide = dict(jobs(snap)["wide"], reason="Resources\x1b]52;c;ZXZpbA==\x07\x1b[2J" + "x" * 200)
    item = next(c for c in clocks_of(with_job(snap, "wide", wide), t + 3700, "pending")
                if f"Slurm {wide['slurm_id']})" in c.text)
    assert "\x1b" not in item.text and "\x07" not in item.text and "Resources" in item.text
    assert len(item.text) < 200
    # The banner carries finding titles (job names are remote too) through the same rule.
    f = Finding("SLURM2", "warn", HOST, "job default/j1 (n\x1b[31mame) hit its walltime", "", "")
    assert banner_lines([f], []) == [f"WARN {HOST}: job default/j1 (name) hit its walltime "
                                     f"[SLURM2]"]


# ------------------------------------------------------------------------ walltime clock

def test_walltime_clock_reads_the_recorded_end_time() -> None:
    snap, t = snap_at(first(_stale_near_wall))
    stale = jobs(snap)["stale"]
    assert stale["end_time"] is not None
    item = [c for c in clocks_of(snap, t, "walltime") if f"Slurm {stale['slurm_id']})" in c.text]
    assert len(item) == 1 and item[0].severity == "critical"
    assert item[0].seconds == pytest.approx(stale["end_time"] - t)
    assert f"warning {stale['signal_lead_s']} s before" in item[0].text


def test_walltime_clock_past_the_wall_falls_back_to_start_plus_limit() -> None:
    # squeue prints no time left once the wall has passed and Slurm is still killing the job.
    i = first(lambda j: j["stale"]["state"] == "running" and j["stale"]["time_left_s"] is None
              and j["stale"]["elapsed_s"] > j["stale"]["time_limit_s"])
    snap, t = snap_at(i)
    stale = jobs(snap)["stale"]
    left = walltime_left(Job.read(stale), t)
    assert left == pytest.approx(stale["attempts"][-1]["start"] + stale["time_limit_s"] - t)
    assert left is not None and left < 0
    item = [c for c in clocks_of(snap, t, "walltime") if f"Slurm {stale['slurm_id']})" in c.text]
    assert [c.severity for c in item] == ["critical"] and "ends in 0 s" in item[0].text


def test_no_walltime_clock_for_queued_or_finished_jobs() -> None:
    assert clocks_of(LAST, T_LAST, "walltime") == []
    snap, t = snap_at(0)
    assert all(j["state"] == "queued" for j in jobs(snap).values())
    assert clocks_of(snap, t, "walltime") == []


def test_a_slurm_job_gets_its_walltime_clock_whatever_the_host_profile() -> None:
    snap, t = snap_at(first(_stale_near_wall))
    assert clocks_of(snap, t, "walltime", profile=load_profile("generic-ssh"))
    box_only = with_job(snap, "stale", {k: v for k, v in jobs(snap)["stale"].items()
                                        if k not in ("backend", "slurm_id")})
    assert not [c for c in clocks_of(box_only, t, "walltime",
                                     profile=load_profile("generic-ssh"))
                if c.text.startswith(f"job {jobs(snap)['stale']['id']}")]


# ------------------------------------------------------------------------ requeue

def _requeue_polls() -> tuple[int, int]:
    i = first(lambda j: j["resumable"]["state"] == "queued" and j["resumable"]["attempts"][-1]
              ["runs"])
    return i - 1, i


def test_running_to_pending_by_the_scripts_requeue_is_info_not_an_exit() -> None:
    before, after = _requeue_polls()
    prev, _ = snap_at(before)
    snap, _t = snap_at(after)
    job = jobs(snap)["resumable"]
    assert jobs(prev)["resumable"]["state"] == "running"
    assert job["restarts"] == 0  # the run record exists before restarts counts it
    found = about(vanished_findings(HOST, view(prev), view(snap)), job)
    assert [(f.id, f.severity) for f in found] == [("SLURM1", "info")]
    assert found[0].title.endswith("was requeued")
    assert "after the walltime warning" in found[0].seen and "exited with code" not in \
        found[0].title
    assert f"PENDING ({job['reason']})" in found[0].seen


def test_a_requeue_slurm_did_itself_is_slurm5() -> None:
    before, after = _requeue_polls()
    prev, _ = snap_at(before)
    snap, _t = snap_at(after)
    job = jobs(snap)["resumable"]
    job["attempts"][-1]["runs"] = []  # preemption / NODE_FAIL: the script wrote no record
    found = about(vanished_findings(HOST, view(prev), view(with_job(snap, "resumable", job))), job)
    assert [(f.id, f.severity) for f in found] == [("SLURM5", "info")]
    assert "Slurm requeued it" in found[0].seen


def test_a_requeue_between_two_polls_is_still_seen() -> None:
    before, after = _requeue_polls()
    running_again = first(lambda j: j["resumable"]["state"] == "running", after)
    prev, _ = snap_at(before)
    snap, _t = snap_at(running_again)
    found = about(vanished_findings(HOST, view(prev), view(snap)), jobs(snap)["resumable"])
    assert ids(found) == ["SLURM1"]


def test_no_requeue_finding_while_a_job_keeps_running_or_is_cancelled() -> None:
    before, _ = _requeue_polls()
    prev, _t = snap_at(before - 1)
    snap, _t = snap_at(before)
    assert about(vanished_findings(HOST, view(prev), view(snap)), jobs(snap)["resumable"]) == []
    i = first(_stale_near_wall)
    prev, _t = snap_at(i)
    cancelled = ended_as(jobs(prev)["stale"], "CANCELLED", exit_code=None)
    found = about(vanished_findings(HOST, view(prev), view(with_job(prev, "stale", cancelled))),
                  cancelled)
    assert [(f.id, f.severity) for f in found] == [("U3", "info")]
    assert "cancelled" in found[0].title


# ------------------------------------------------------------------------ login-node evidence

def test_the_login_nodes_cgroup_is_not_a_slurm_jobs_cpu_slice() -> None:
    snap, _t = snap_at(first(_stale_near_wall))
    snap["cgroup"]["cpu_quota_vcpus"] = 1.0
    snap["host"]["cpu_count"] = 2
    stale = jobs(snap)["stale"]
    assert [f for f in job_findings(HOST, None, view(snap)) if f.id == "U40"] == []
    box = {k: v for k, v in stale.items() if k not in ("backend", "slurm_id")}
    found = job_findings(HOST, None, view(with_job(snap, "stale", box)))
    assert [f.id for f in about(found, box)] == ["U40"]


# ------------------------------------------------------------------------ the room's memory

def test_replaying_the_session_through_the_watch() -> None:
    watch = FleetWatch()
    h = HostState(name=HOST, profile="slurm", state=LinkState.UP)
    exits = []
    for line in LINES:
        h.snapshot, h.last_try, h.last_ok = line["snapshot"], line["t"], line["t"]
        watch.observe(h, line["t"])
        exits += [f for f in watch.findings() if "exited with code None" in f.title]
    assert exits == []
    got = {(f.id, f.severity, f.title.split(") ", 1)[-1]) for f in watch.findings()}
    assert ("SLURM2", "warn", "hit its walltime (Slurm TIMEOUT)") in got
    assert ("SLURM1", "info", "was requeued") in got
    fails = jobs(LINES[-1]["snapshot"])["fails"]
    assert not about(watch.findings(), fails)  # never seen running: nothing vanished
    banner = watch.banner([h], T_LAST)
    assert any("hit its walltime (Slurm TIMEOUT) [SLURM2]" in line for line in banner)
