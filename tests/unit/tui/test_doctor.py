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
    # remote/queue_runner.py records a signal by its name.
    ({"signal": "SIGTERM", "end_reason": "exited"}, "ended by signal SIGTERM", "warn"),
    ({"signal": "SIGTERM", "end_reason": "killed"}, "was killed on request", "info"),
    ({"exit_code": 1, "end_reason": "exited"}, "exited with code 1", "warn"),
])
def test_u3_bottom_of_the_ladder(attempt: dict[str, Any], expected: str, severity: str) -> None:
    prev = _running()
    j = rec.ended(prev["queue"]["queues"]["default"]["jobs"][0], "failed", T + 5, **attempt)
    out = diagnose(view(prev), view(rec.snapshot(T + 5, gpus=[rec.idle_gpu()], jobs=[j])),
                   LinkState.UP, None, T + 5, host="h")
    assert [(f.id, f.severity) for f in out] == [("U3", severity)]
    assert expected in out[0].title


def test_kernel_oom_line_naming_the_pid_and_not_another() -> None:
    prev = _running()
    j = rec.ended(prev["queue"]["queues"]["default"]["jobs"][0], "failed", T + 5,
                  signal="SIGKILL")
    pid = j["attempts"][-1]["pid"]
    mine = rec.snapshot(T + 5, jobs=[j], events=[rec.oom_event(pid)])
    assert ids(prev, mine) == {"U9"}
    other = rec.snapshot(T + 5, jobs=[j], events=[rec.oom_event(pid + 1)])
    assert ids(prev, other) == {"U3"}


def test_succeeded_job_is_not_a_death() -> None:
    prev = _running()
    j = rec.ended(prev["queue"]["queues"]["default"]["jobs"][0], "succeeded", T + 5,
                  exit_code=0)
    assert ids(prev, rec.snapshot(T + 5, jobs=[copy.deepcopy(j)])) == set()
