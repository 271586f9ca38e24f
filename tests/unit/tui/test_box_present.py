"""Issue 20 item 4: the box's CPU and memory (present/box.py) from the cgroup the helper reads,
with the cgroup captures' quota, and a bounded history per host."""

from __future__ import annotations

from typing import Any

from paths import FIXTURES

from gpuroom.remote.hostinfo import parse_cpu_max
from gpuroom.tui.present.box import BoxHistory
from gpuroom.tui.snapshot import read_snapshot

GIB = 1024 ** 3


def quota(name: str) -> float | None:
    text = (FIXTURES / "cgroup" / name).read_text(encoding="utf-8").split("\n---\n", 1)[1]
    return parse_cpu_max(text)


def snap(at: float, usage_usec: float | None, *, vcpus: float | None, mem: float,
         limit: float | None, load: float = 0.5, cpus: int = 16) -> Any:
    return read_snapshot({
        "host": {"time": at, "cpu_count": cpus, "loadavg_host": [load, 0.4, 0.3]},
        "cgroup": {"version": 2, "memory_current": mem, "memory_max": limit,
                   "cpu_quota_vcpus": vcpus, "cpu_usage_usec": usage_usec}})


def test_cpu_use_is_the_cgroups_cpu_time_between_two_polls_against_its_quota() -> None:
    one_cpu = quota("cpu.max-1-cpu.txt")
    assert one_cpu == 1.0
    history = BoxHistory()
    history.observe("a", snap(100.0, 5_000_000, vcpus=one_cpu, mem=2 * GIB, limit=8 * GIB))
    first = history.view("a", snap(100.0, 5_000_000, vcpus=one_cpu, mem=2 * GIB,
                                   limit=8 * GIB))
    assert first.cpu_vcpus is None and first.cell() == "- 25%"  # one reading: no rate yet
    later = snap(102.0, 6_900_000, vcpus=one_cpu, mem=7.8 * GIB, limit=8 * GIB, load=3.0)
    history.observe("a", later)
    view = history.view("a", later)
    assert view.cpu_vcpus is not None and abs(view.cpu_vcpus - 0.95) < 1e-9
    assert view.cell() == "95% 98%"
    assert (view.cpu_level, view.mem_level, view.level) == ("warn", "crit", "crit")
    assert view.parts() == ("cpu 0.9/1 vCPU", "mem 7.8GiB/8.0GiB", "load 3.00/vCPU")
    assert view.cpu_history == (None, 95.0) and len(view.sparklines()[1]) == 2


def test_without_a_quota_the_box_cpus_are_the_limit_and_no_memory_limit_says_so() -> None:
    assert quota("cpu.max-unlimited-in-container.txt") is None
    history = BoxHistory()
    history.observe("b", snap(10.0, 0, vcpus=None, mem=GIB, limit=None))
    now = snap(20.0, 80_000_000, vcpus=None, mem=GIB, limit=None, load=8.0)
    history.observe("b", now)
    view = history.view("b", now)
    assert view.cell() == "50% -"
    assert view.parts() == ("cpu 8.0/16 vCPU", "mem 1.0GiB/no limit", "load 0.50/vCPU")


def test_history_is_bounded_and_the_same_snapshot_counts_once() -> None:
    history = BoxHistory(length=3)
    for n in range(6):
        s = snap(float(n), n * 1_000_000, vcpus=2.0, mem=GIB, limit=4 * GIB)
        history.observe("c", s)
        history.observe("c", s)
    view = history.view("c", s)
    assert view.mem_history == (25.0, 25.0, 25.0) and view.cpu_history == (50.0, 50.0, 50.0)


def test_a_counter_that_went_backwards_is_no_rate() -> None:
    # A new cgroup (the job restarted in a fresh one) starts its counter again.
    history = BoxHistory()
    history.observe("d", snap(1.0, 9_000_000, vcpus=1.0, mem=GIB, limit=None))
    s = snap(2.0, 1_000, vcpus=1.0, mem=GIB, limit=None)
    history.observe("d", s)
    assert history.view("d", s).cpu_vcpus is None
