"""Each doctor rule fires on its evidence and stays quiet without it (positive + negative).

Snapshots are parts of the committed recordings (tests/data/doctor/parts.py: what the real
helper wrote, a value varied where a rule needs it); ``now`` is injected.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import pytest
from paths import DATA

sys.path.insert(0, str(DATA / "doctor"))
import parts as rec

from gpuroom.tui.model import LinkState
from gpuroom.tui.rules.doctor import diagnose
from gpuroom.tui.snapshot import read_optional as view

T = rec.T0


def ids(prev: dict[str, Any] | None, snap: dict[str, Any]) -> set[str]:
    return {f.id for f in diagnose(view(prev), view(snap), LinkState.UP, None, T + 10, host="h")}


def _running(**kw: Any) -> dict[str, Any]:
    return rec.snapshot(T, gpus=[rec.h100(0)], jobs=[rec.job(**kw)])


def test_quiet_on_a_healthy_training_box() -> None:
    assert ids(_running(), rec.snapshot(T + 5, gpus=[rec.h100(0)], jobs=[rec.job()])) == set()


def test_u21_needs_two_underfed_samples() -> None:
    # U21's "busy util, idle board": the A10 capture's clocks and power, util at 99 %.
    board = rec.vary(rec.a10_throttled(), util_gpu_pct=99, clock_event_reasons=[])
    under = rec.snapshot(T, gpus=[board])
    assert ids(under, under) == {"U21"}
    assert ids(rec.snapshot(T, gpus=[rec.h100(0)]), under) == set()


def test_u23_reasons_and_hot_slow_clock() -> None:
    assert ids(None, rec.snapshot(T, gpus=[rec.a10_throttled()])) == {"U23"}
    # No reason reported, but hot and slow (SM 210 of 1695 MHz at 86 C).
    hot = rec.vary(rec.a10_throttled(), temp_c=86, clock_event_reasons=[])
    assert ids(None, rec.snapshot(T, gpus=[hot])) == {"U23"}
    warm = rec.vary(rec.a10_throttled(), temp_c=86, clock_event_reasons=[],
                    clock_sm_mhz=1695)  # hot but at full clock: not throttling
    assert ids(None, rec.snapshot(T, gpus=[warm])) == set()
    # The H100 capture has no clocks: hot alone says nothing.
    assert ids(None, rec.snapshot(T, gpus=[rec.h100(0, temp=86.0)])) == set()


def test_u38_zero_util_while_log_grows() -> None:
    zero = rec.h100(0, util=0.0)
    prev = rec.snapshot(T, gpus=[zero], jobs=[rec.job(log_size=4096)])
    assert ids(prev, rec.snapshot(T + 5, gpus=[zero], jobs=[rec.job(log_size=8192)])) == {"U38"}
    assert ids(prev, rec.snapshot(T + 5, gpus=[zero], jobs=[rec.job(log_size=4096)])) == set()


def test_u43_silent_log_with_advancing_checkpoint() -> None:
    c1 = {"path": "/root/ckpt/step_1.pt", "size": 1 << 20, "mtime": T - 600}
    c2 = dict(c1, mtime=T + 100)
    prev = rec.snapshot(T, gpus=[rec.h100(0)], jobs=[rec.job(ckpt=c1)])
    assert ids(prev, rec.snapshot(T + 300, gpus=[rec.h100(0)], jobs=[rec.job(ckpt=c2)])) \
        == {"U43"}
    # A 5 s window is just between prints.
    assert ids(prev, rec.snapshot(T + 5, gpus=[rec.h100(0)], jobs=[rec.job(ckpt=c2)])) == set()


def test_u43_at_the_rooms_poll_rate_by_the_logs_own_age() -> None:
    """The room keeps the previous snapshot ~5 s old: silence is the log's own age, set
    against the checkpoints written since it last changed."""
    ckpt = {"path": "/root/ckpt/step_9.pt", "size": 1 << 20, "mtime": T - 10}
    gpu = [rec.h100(0)]
    prev = rec.snapshot(T - 5, gpus=gpu, jobs=[rec.job(ckpt=ckpt, log_mtime=T - 300)])
    now = rec.snapshot(T, gpus=gpu, jobs=[rec.job(ckpt=ckpt, log_mtime=T - 300)])
    out = [f for f in diagnose(view(prev), view(now), LinkState.UP, None, T, host="h")
           if f.id == "U43"]
    assert [(f.severity, f.title) for f in out] == [
        ("info", "job default/j1 (train): log silent but checkpoint advancing")]
    assert "log unchanged for 5 min" in out[0].seen
    assert "checkpoint was written 10 s ago" in out[0].seen
    assert ids(None, now) == {"U43"}  # one poll is enough: no window is needed
    # A log that moved recently, or a checkpoint older than the silence, is no finding.
    fresh = rec.snapshot(T, gpus=gpu, jobs=[rec.job(ckpt=ckpt, log_mtime=T - 30)])
    assert "U43" not in ids(prev, fresh)
    stale = rec.snapshot(T, gpus=gpu, jobs=[rec.job(ckpt=dict(ckpt, mtime=T - 400),
                                                    log_mtime=T - 300)])
    assert "U43" not in ids(prev, stale)


def test_u7_inodes_even_with_bytes_fine() -> None:
    assert ids(None, rec.snapshot(T, disks=[rec.inode_full_disk()])) == {"U7"}
    assert ids(None, rec.snapshot(T)) == set()  # the VM's real disks: few inodes used


def test_u6_full_disk_tmp_file_and_projected_checkpoint() -> None:
    d = rec.inode_full_disk()
    rec.vary(d, free_inodes=d["total_inodes"])  # inodes fine: bytes alone
    full = d | {"free_bytes": d["total_bytes"] // 50}
    assert ids(None, rec.snapshot(T, disks=[full])) == {"U6"}
    low = d | {"free_bytes": d["total_bytes"] // 12}
    tmp = {"path": "/data/ckpt/latest.pth.tmp", "size": 1 << 30, "mtime": T}
    assert ids(None, rec.snapshot(T, disks=[low], jobs=[rec.job(ckpt=tmp)])) == {"U6"}
    big = {"path": "/data/ckpt/latest.pth", "size": 60 << 30, "mtime": T}
    assert ids(None, rec.snapshot(T, disks=[low], jobs=[rec.job(ckpt=big)])) == {"U6"}
    small = dict(big, size=d["free_bytes"] // 2)
    assert ids(None, rec.snapshot(T, disks=[d], jobs=[rec.job(ckpt=small)])) == set()


def test_u11_and_gen7() -> None:
    holder = {"pid": 4242, "comm": "python", "cmdline": "python train.py", "state": "Z",
              "devices": ["/dev/nvidia0"]}
    assert ids(None, rec.snapshot(T, gpus=[rec.h100(0)], holders=[holder])) == {"U11"}
    shared = rec.h100(0)
    shared["processes"] = [{"pid": 1, "type": "C"}, {"pid": 2, "type": "C"}]
    assert ids(None, rec.snapshot(T, gpus=[shared])) == {"GEN7"}
    single = rec.h100(0)
    single["processes"] = [{"pid": 1, "type": "C"}]
    assert ids(None, rec.snapshot(T, gpus=[single])) == set()


def test_u40_threads_over_the_slice() -> None:
    # fixtures/cgroup/cpu.max-1-cpu.txt: 100000/100000 = 1 vCPU, on the VM's 2 cores.
    assert ids(None, rec.snapshot(T, jobs=[rec.job()], vcpus=1.0)) == {"U40"}
    capped = rec.job(env={"OMP_NUM_THREADS": "1"})
    assert ids(None, rec.snapshot(T, jobs=[capped], vcpus=1.0)) == set()


def test_u10_only_when_the_job_records_its_ask() -> None:
    busy = rec.h100(0, used_mib=70000.0)
    asks = rec.job(state="queued", vram_mib=40000)
    assert ids(None, rec.snapshot(T, gpus=[busy], jobs=[asks])) == {"U10"}
    assert ids(None, rec.snapshot(T, gpus=[busy], jobs=[rec.job(state="queued")])) == set()


@pytest.mark.parametrize(("attempt", "expected", "severity"), [
    # remote/queue_runner.py records a signal by its name. A failed job is critical, as the
    # banner says of it in a room that did not see it end.
    ({"signal": "SIGTERM", "end_reason": "exited"}, "ended by signal SIGTERM", "critical"),
    ({"signal": "SIGTERM", "end_reason": "killed"}, "was killed on request", "info"),
    ({"exit_code": 1, "end_reason": "exited"}, "exited with code 1", "critical"),
])
def test_u3_bottom_of_the_ladder(attempt: dict[str, Any], expected: str, severity: str) -> None:
    prev = _running()
    j = rec.ended(prev["queue"]["queues"]["default"]["jobs"][0], "failed", T + 5, **attempt)
    out = diagnose(view(prev), view(rec.snapshot(T + 5, gpus=[rec.idle_gpu()], jobs=[j])),
                   LinkState.UP, None, T + 5, host="h")
    assert [(f.id, f.severity) for f in out] == [("U3", severity)]
    assert expected in out[0].title


def test_an_exit_1_is_as_severe_in_a_room_that_saw_it_as_in_one_started_after() -> None:
    """The severity is the job's state's: failed is critical (the banner's line for a failed
    job no finding explains), a failure the queue retries is a warning. The finding quotes the
    log's last error line, as the runner recorded it."""
    from gpuroom.tui.model import HostState
    from gpuroom.tui.present.banner import failed_job_dangers

    prev = _running()
    job = prev["queue"]["queues"]["default"]["jobs"][0]
    err = "ValueError: batch size 4096 does not divide the dataset"
    failed = rec.ended(job, "failed", T + 5, exit_code=1, end_reason="exited", error_line=err)
    now = rec.snapshot(T + 5, jobs=[failed])
    (seen,) = diagnose(view(prev), view(now), LinkState.UP, None, T + 5, host="h")
    assert (seen.id, seen.severity) == ("U3", "critical") and err in seen.seen
    after_restart = HostState("h", snapshot=now)
    (line,) = failed_job_dangers([after_restart], T + 5)
    assert line.level == "crit"
    retried = rec.ended(job, "queued", T + 5, exit_code=1, end_reason="exited",
                        error_line=err)
    (warned,) = diagnose(view(prev), view(rec.snapshot(T + 5, jobs=[retried])), LinkState.UP,
                         None, T + 5, host="h")
    assert (warned.id, warned.severity) == ("U3", "warn") and err in warned.seen


def test_kernel_oom_line_naming_the_training_process_not_the_wrapper() -> None:
    """The attempt's pid is the ``queue _exec`` wrapper's; the kernel kills the training
    process under it (child_pid), or one of the group's processes the runner saw."""
    prev = _running()
    job = prev["queue"]["queues"]["default"]["jobs"][0]
    wrapper = job["attempts"][-1]["pid"]
    assert wrapper != rec.OOM_CAPTURED_PID
    event = rec.oom_event()
    child = rec.ended(job, "failed", T + 5, signal="SIGKILL", child_pid=rec.OOM_CAPTURED_PID)
    out = diagnose(view(prev), view(rec.snapshot(T + 5, jobs=[child], events=[event])),
                   LinkState.UP, None, T + 5, host="h")
    assert [(f.id, f.severity) for f in out] == [("U9", "critical")]
    assert f"OOM-killed pid {rec.OOM_CAPTURED_PID}" in out[0].title
    worker = rec.ended(job, "failed", T + 5, signal="SIGKILL", child_pid=wrapper + 1,
                       pids=[wrapper + 1, rec.OOM_CAPTURED_PID])
    assert ids(prev, rec.snapshot(T + 5, jobs=[worker], events=[event])) == {"U9"}
    other = rec.ended(job, "failed", T + 5, signal="SIGKILL", child_pid=wrapper + 1,
                      pids=[wrapper + 1])
    assert ids(prev, rec.snapshot(T + 5, jobs=[other], events=[event])) == {"U3"}


def test_the_jobs_own_cgroup_counted_an_oom_kill() -> None:
    """The probe's cgroup is its SSH session's scope; the runner read the job's own
    memory.events before and after the attempt, and that rise is the verdict."""
    prev = _running()
    job = prev["queue"]["queues"]["default"]["jobs"][0]
    j = rec.ended(job, "failed", T + 5, signal="SIGKILL", child_pid=4242,
                  cgroup="/sys/fs/cgroup/user.slice/user-1000.slice/session-7.scope",
                  oom_kills=1)
    out = diagnose(view(prev), view(rec.snapshot(T + 5, jobs=[j])), LinkState.UP, None, T + 5,
                   host="h")
    assert [(f.id, f.severity) for f in out] == [("U9", "critical")]
    assert "OOM-kill" in out[0].title and "session-7.scope" in out[0].seen
    assert "oom_kill +1" in out[0].seen


def test_succeeded_job_is_not_a_death() -> None:
    prev = _running()
    j = rec.ended(prev["queue"]["queues"]["default"]["jobs"][0], "succeeded", T + 5,
                  exit_code=0)
    assert ids(prev, rec.snapshot(T + 5, jobs=[copy.deepcopy(j)])) == set()


def test_u43_a_silent_log_while_the_job_burns_cpu() -> None:
    gpu = [rec.h100(0)]

    def busy(t: float, cpu_s: float) -> dict[str, Any]:
        j = rec.job(log_mtime=T - 300)
        j.pop("checkpoint")
        j["cpu_s"] = cpu_s  # the helper's CPU seconds of the job's group (procstat)
        return rec.snapshot(t, gpus=gpu, jobs=[j])

    (u43,) = [f for f in diagnose(view(busy(T - 5, 100.0)), view(busy(T, 104.0)),
                                  LinkState.UP, None, T, host="h") if f.id == "U43"]
    assert "log silent but the job is busy" in u43.title and "4.0 CPU-s" in u43.seen
    assert "U43" not in ids(busy(T - 5, 100.0), busy(T, 100.1))  # waiting, not working
