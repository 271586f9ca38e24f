"""Danger clock: idle escalation, notebook caps, Slurm walltime hook, unpulled checkpoints."""

from __future__ import annotations

import sys

from paths import DATA

sys.path.insert(0, str(DATA / "doctor"))
import parts as rec

from gpuroom.profiles import load_profile
from gpuroom.tui.rules.clock import IdleTracker, banner_lines, host_clocks, walltime_left
from gpuroom.tui.snapshot import Job
from gpuroom.tui.snapshot import read_optional as view

T = rec.T0


def _kinds(items: list) -> dict[str, str]:  # type: ignore[type-arg]
    return {c.kind: c.severity for c in items}


def test_idle_escalates_and_a_running_job_resets_it() -> None:
    tracker = IdleTracker()
    idle = rec.snapshot(T, gpus=[rec.idle_gpu()])
    tracker.feed("b", view(idle), T)
    for minutes, sev in ((5, None), (20, "info"), (45, "warn"), (150, "critical")):
        tracker.feed("b", view(idle), T + minutes * 60)
        got = _kinds(host_clocks("b", view(idle), None, T + minutes * 60, tracker=tracker))
        assert got.get("idle") == sev
    busy = rec.snapshot(T, gpus=[rec.h100(0)], jobs=[rec.job()])
    tracker.feed("b", view(busy), T + 9000)
    assert tracker.idle_since("b") is None
    tracker.feed("b", None, T + 9005)  # a failed poll says nothing
    assert tracker.idle_since("b") is None


def test_session_cap_from_the_colab_profile() -> None:
    snap = rec.snapshot(T, uptime_s=11 * 3600)
    items = host_clocks("c", view(snap), load_profile("colab"), T)
    cap = [c for c in items if c.kind == "session_cap"]
    assert [c.severity for c in cap] == ["warn"] and cap[0].seconds == 3600.0
    fresh = host_clocks("c", view(rec.snapshot(T, uptime_s=600)), load_profile("colab"), T)
    assert [c.severity for c in fresh if c.kind == "session_cap"] == ["info"]


def test_walltime_hook_only_for_slurm_jobs_with_a_limit() -> None:
    job = rec.job(start=T - 3000, time_limit_s=3600)
    assert walltime_left(Job.read(job), T) == 600.0
    snap = rec.snapshot(T, jobs=[job])
    assert _kinds(host_clocks("s", view(snap), load_profile("slurm"), T))["walltime"] == "critical"
    assert "walltime" not in _kinds(host_clocks("s", view(snap), load_profile("generic-ssh"), T))
    assert walltime_left(Job.read(rec.job()), T) is None


def test_unpulled_checkpoints_on_a_finished_queue() -> None:
    # The helper reports a finished job's newest checkpoint as it does a running one's.
    done = dict(rec.ended(rec.job(), "succeeded", T, exit_code=0),
                checkpoint=rec.job()["checkpoint"])
    items = host_clocks("d", view(rec.snapshot(T, jobs=[done])), None, T)
    assert _kinds(items).get("unpulled") == "warn"
    synced = dict(done, sync={"state": "synced"})
    assert "unpulled" not in _kinds(host_clocks("d", view(rec.snapshot(T, jobs=[synced])), None, T))


def test_auto_release_is_informational_and_never_in_the_banner() -> None:
    items = host_clocks("a", view(rec.snapshot(T)), load_profile("autodl"), T)
    assert _kinds(items)["auto_release"] == "info"
    assert banner_lines([], items) == []
