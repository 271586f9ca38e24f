"""hostinfo's cgroup parsers on every real capture in fixtures/cgroup, and cgroup_facts on trees
laid out like cgroup v2 and v1 whose files hold those captures (U9, U41: the oom_kill counter).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from paths import FIXTURES

from gpuroom.remote.hostinfo import cgroup_facts, parse_cpu_max, parse_flat_keyed, parse_memory_max

CGROUP = FIXTURES / "cgroup"


def capture(name: str) -> str:
    """The verbatim file contents below a fixture's '---' header line."""
    return (CGROUP / name).read_text(encoding="utf-8").split("\n---\n", 1)[1]


CPU_MAX_EXPECTED = {
    "cpu.max-1-cpu.txt": 1.0,
    "cpu.max-unlimited-in-container.txt": None,  # "max 100000": no quota
}

EVENTS_EXPECTED = {
    "memory.events-5keys-oom3-kill3.txt":
        {"low": 0, "high": 0, "max": 4127, "oom": 3, "oom_kill": 3},
    "memory.events-5keys-oom6-kill1-jvm.txt":
        {"low": 0, "high": 0, "max": 4127, "oom": 6, "oom_kill": 1},
    "memory.events-docker-lab-box-oom_kill1.txt":
        {"low": 0, "high": 0, "max": 253, "oom": 7, "oom_kill": 1, "oom_group_kill": 0},
    # oom 0 yet oom_kill 7: oom_kill propagates up, oom counts only where the limit was hit.
    "memory.events-oom_kill7-oom0-max31553152.txt":
        {"low": 0, "high": 0, "max": 31553152, "oom": 0, "oom_kill": 7, "oom_group_kill": 0},
}


def test_every_cgroup_capture_has_expectations() -> None:
    assert sorted(p.name for p in CGROUP.iterdir()) == sorted({**CPU_MAX_EXPECTED,
                                                               **EVENTS_EXPECTED})


@pytest.mark.parametrize("name", sorted(CPU_MAX_EXPECTED))
def test_parse_cpu_max_on_capture(name: str) -> None:
    assert parse_cpu_max(capture(name)) == CPU_MAX_EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EVENTS_EXPECTED))
def test_parse_flat_keyed_on_capture(name: str) -> None:
    assert parse_flat_keyed(capture(name)) == EVENTS_EXPECTED[name]


def test_parse_cpu_max_fractional_quota() -> None:
    assert parse_cpu_max("150000 100000\n") == 1.5
    assert parse_cpu_max("50000 100000") == 0.5


def test_parse_memory_max() -> None:
    # No memory.max capture exists; these are the kernel's two spellings, with its newline.
    assert parse_memory_max("max\n") is None
    assert parse_memory_max("1073741824\n") == 1024 * 1024 * 1024  # the jvm capture's 1024 MiB
    # v1 memory.limit_in_bytes with no limit: PAGE_COUNTER_MAX pages, read on this machine.
    assert parse_memory_max("9223372036854771712\n") is None


def test_parse_flat_keyed_skips_non_numeric_lines() -> None:
    assert parse_flat_keyed("oom_kill 2\nnot a pair\nbad x\n") == {"oom_kill": 2}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_cgroup_facts_v2_tree(tmp_path: Path) -> None:
    # At the root of the tree: what a container with a private cgroup namespace sees.
    _write(tmp_path / "cgroup.controllers", "cpuset cpu io memory pids\n")
    _write(tmp_path / "cpu.max", capture("cpu.max-1-cpu.txt"))
    _write(tmp_path / "memory.max", "134217728\n")  # the docker lab-box capture's 128 MiB
    _write(tmp_path / "memory.current", "134090752\n")
    _write(tmp_path / "memory.events", capture("memory.events-docker-lab-box-oom_kill1.txt"))
    # cpu.stat's CPU time so far (issue 20 item 4: the jump host turns two polls into a rate).
    _write(tmp_path / "cpu.stat", "usage_usec 8123456\nuser_usec 7000000\nsystem_usec 1123456\n")
    facts = cgroup_facts(root=str(tmp_path))
    # "0::/" in /proc/self/cgroup joins to "<root>/": the same directory either way.
    facts["path"] = os.path.normpath(facts["path"])
    assert facts == {
        "version": 2,
        "path": str(tmp_path),
        "memory_current": 134090752,
        "memory_max": 134217728,
        "oom_kill": 1,
        "oom": 7,
        "cpu_quota_vcpus": 1.0,
        "cpu_usage_usec": 8123456,
    }


def test_cgroup_facts_v2_unlimited(tmp_path: Path) -> None:
    _write(tmp_path / "cgroup.controllers", "cpu memory\n")
    _write(tmp_path / "cpu.max", capture("cpu.max-unlimited-in-container.txt"))
    _write(tmp_path / "memory.max", "max\n")
    _write(tmp_path / "memory.events", capture("memory.events-oom_kill7-oom0-max31553152.txt"))
    facts = cgroup_facts(root=str(tmp_path))
    assert (facts["version"], facts["memory_max"], facts["cpu_quota_vcpus"]) == (2, None, None)
    assert (facts["oom_kill"], facts["oom"], facts["memory_current"]) == (7, 0, None)


def test_cgroup_facts_v1_tree(tmp_path: Path) -> None:
    # v1 spells the same facts differently: the cpu.max capture's "100000 100000" is
    # cfs_quota_us/cfs_period_us, and the oom_kill counter lives in memory.oom_control.
    quota, period = capture("cpu.max-1-cpu.txt").split()
    _write(tmp_path / "cpu" / "cpu.cfs_quota_us", quota + "\n")
    _write(tmp_path / "cpu" / "cpu.cfs_period_us", period + "\n")
    _write(tmp_path / "memory" / "memory.limit_in_bytes", "1073741824\n")
    _write(tmp_path / "memory" / "memory.usage_in_bytes", "52428800\n")
    oom_kill = parse_flat_keyed(capture("memory.events-5keys-oom3-kill3.txt"))["oom_kill"]
    _write(tmp_path / "memory" / "memory.oom_control",
           f"oom_kill_disable 0\nunder_oom 0\noom_kill {oom_kill}\n")
    _write(tmp_path / "cpuacct" / "cpuacct.usage", "8123456789\n")  # nanoseconds
    facts = cgroup_facts(root=str(tmp_path))
    assert facts == {
        "version": 1,
        "path": str(tmp_path / "memory"),
        "memory_current": 52428800,
        "memory_max": 1073741824,
        "oom_kill": 3,
        "oom": None,
        "cpu_quota_vcpus": 1.0,
        "cpu_usage_usec": 8123456,
    }


def test_cgroup_facts_v1_unlimited(tmp_path: Path) -> None:
    _write(tmp_path / "cpu" / "cpu.cfs_quota_us", "-1\n")
    _write(tmp_path / "cpu" / "cpu.cfs_period_us", "100000\n")
    _write(tmp_path / "memory" / "memory.limit_in_bytes", "9223372036854771712\n")
    facts = cgroup_facts(root=str(tmp_path))
    assert (facts["version"], facts["memory_max"], facts["cpu_quota_vcpus"]) == (1, None, None)
    assert facts["oom_kill"] is None


def test_cgroup_facts_without_cgroups(tmp_path: Path) -> None:
    assert cgroup_facts(root=str(tmp_path))["version"] is None
