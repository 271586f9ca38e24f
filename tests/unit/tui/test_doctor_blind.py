"""What the doctor could not see is said (U44), and a kill the user asked for is not a mystery
(issue 17 item 16; issue 18 item 2's errors[]).

The kernel sections are the real helper's (remote/kernel.py) reading the replayed dmesg of
tests/fakes/dmesg, refused as util-linux refuses a user under kernel.dmesg_restrict=1; the
section errors are the real ProbeSession's, with one collector raising.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from harness.boxenv import probe_with_a_broken_section
from paths import DATA, ROOT

sys.path.insert(0, str(DATA / "doctor"))
import parts as rec

from gpuroom.remote import kernel
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.present.hosts import failed_sections_text, host_row
from gpuroom.tui.rules.clock import banner_lines
from gpuroom.tui.rules.doctor import Finding, diagnose
from gpuroom.tui.rules.watch import FleetWatch
from gpuroom.tui.snapshot import read_optional as view
from gpuroom.tui.snapshot import read_snapshot

T = rec.T0
FAKE_DMESG = ROOT / "tests" / "fakes" / "dmesg"


@pytest.fixture
def dmesg_denied() -> Iterator[None]:
    with mock.patch.dict(os.environ, {"GPUROOM_DMESG": str(FAKE_DMESG),
                                      "GPUROOM_FAKE_DMESG_MODE": "denied"}):
        yield


def _denied_kernel() -> dict[str, Any]:
    section = kernel.read_kernel_log({})
    assert section["log"] == "denied", section  # the helper's own verdict on the refusal
    return section


def _running() -> dict[str, Any]:
    return rec.snapshot(T, gpus=[rec.h100(0)], jobs=[rec.job()])


def _ended(state: str, **attempt: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    prev = _running()
    j = rec.ended(prev["queue"]["queues"]["default"]["jobs"][0], state, T + 5, **attempt)
    return prev, rec.snapshot(T + 5, gpus=[rec.idle_gpu()], jobs=[j])


def _diagnose(prev: dict[str, Any] | None, snap: dict[str, Any]) -> list[Finding]:
    return diagnose(view(prev), view(snap), LinkState.UP, None, T + 10, host="h")


# ---------------------------------------------------------------- killed on request

def test_a_job_killed_with_K_is_said_to_be_killed_by_gpuroom_with_when() -> None:
    prev, snap = _ended("killed", signal="SIGTERM", end_reason="killed", duration=300.0)
    (f,) = _diagnose(prev, snap)
    assert f.severity == "info"
    assert "killed on request (by gpuroom)" in f.title
    assert "kill request" in f.seen and "UTC" in f.seen and "SIGTERM" in f.seen
    assert "pkill" not in f.fix and "pkill" not in f.seen
    assert "relaunch" in f.fix


def test_a_requested_kill_outranks_an_oom_counter_that_rose_in_the_same_window() -> None:
    # The cgroup counter rising while the kill ran must not turn the user's own kill into U9.
    prev, snap = _ended("killed", signal="SIGKILL", end_reason="killed")
    snap["cgroup"]["oom_kill"] = 1
    (f,) = _diagnose(prev, snap)
    assert (f.id, f.severity) == ("U3", "info")
    assert "killed on request" in f.title


def test_a_signal_nobody_asked_for_still_points_at_a_stray_pkill() -> None:
    prev, snap = _ended("failed", signal="SIGTERM", end_reason="exited")
    (f,) = _diagnose(prev, snap)
    assert (f.id, f.severity) == ("U3", "critical")  # failed: as the banner says it
    assert "pkill" in f.seen and "killed on request" not in f.title


# ---------------------------------------------------------------- an unreadable kernel log

def test_an_unreadable_kernel_log_is_a_finding_with_the_fix(dmesg_denied: None) -> None:
    snap = rec.snapshot(T)
    snap["kernel"] = _denied_kernel()
    out = _diagnose(None, snap)
    (f,) = [f for f in out if f.id == "U44"]
    assert f.severity == "info"
    assert "kernel log unreadable" in f.title and "blind" in f.title
    assert "Operation not permitted" in f.seen
    assert "kernel.dmesg_restrict=0" in f.fix and "group adm" in f.fix


def test_a_readable_kernel_log_says_nothing() -> None:
    assert [f for f in _diagnose(None, rec.snapshot(T)) if f.id == "U44"] == []


def test_the_u3_ladder_says_kernel_log_unreadable_not_no_oom_seen(dmesg_denied: None) -> None:
    prev, snap = _ended("failed", exit_code=1, end_reason="exited")
    snap["kernel"] = _denied_kernel()
    (u3,) = [f for f in _diagnose(prev, snap) if f.id == "U3"]
    assert "kernel log unreadable" in u3.seen
    assert "no reboot, OOM or Xid seen" not in u3.seen


# ---------------------------------------------------------------- the probe's errors[]

@pytest.fixture
def broken_kernel_probe(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A real probe whose kernel collector raised: the section is missing, errors[] says why."""
    return probe_with_a_broken_section(monkeypatch)


def test_each_failed_section_is_a_warning_naming_it_and_its_error(
        broken_kernel_probe: dict[str, Any]) -> None:
    out = diagnose(None, read_snapshot(broken_kernel_probe), LinkState.UP, None, T,
                   host="h")
    (f,) = [f for f in out if f.id == "U44"]
    assert f.severity == "warn"
    assert "'kernel'" in f.title
    assert "OSError" in f.seen and "Input/output error" in f.seen
    # The section that failed is named once: no second "kernel log unreadable" for it.
    assert not any("kernel log unreadable" in g.title for g in out)


def test_a_host_with_a_failed_section_is_not_fleet_ok(
        broken_kernel_probe: dict[str, Any]) -> None:
    host = HostState(name="h", profile="local", state=LinkState.UP,
                     snapshot=broken_kernel_probe, last_ok=T, last_try=T)
    watch = FleetWatch()
    watch.observe(host, T)
    # This machine's real probe also says how long it has been idle: that clock is not
    # what this test is about.
    (line,) = [b for b in watch.banner([host], T) if "idle" not in b]
    assert line.startswith("WARN h:") and "'kernel'" in line and "[U44]" in line
    # Without the error the same host has nothing for the banner.
    clean = dict(broken_kernel_probe, errors=[])
    assert banner_lines(diagnose(None, read_snapshot(clean), LinkState.UP, None, T,
                                 host="h"), []) == []


@pytest.mark.attack("hostile text", "a probe error's section name and text carry OSC 52 and "
                    "CSI 2J: the hosts row and the status error cell stay inert")
def test_the_hosts_row_marks_the_failed_section_and_hostile_names_stay_inert(
        broken_kernel_probe: dict[str, Any]) -> None:
    host = HostState(name="h", state=LinkState.UP, snapshot=broken_kernel_probe, last_ok=T)
    row = host_row(host, T, findings=("warn",))
    assert (row.state, row.level) == ("UP, kernel failed", "warn")
    # The section's name and error are the box's words: no escape reaches a cell or a table.
    hostile = dict(broken_kernel_probe, errors=[
        {"section": "q\x1b]52;c;aGk=\x07ueue", "error": "\x1b[2JOSError: boom", "trace": ""}])
    row = host_row(HostState(name="h", state=LinkState.UP, snapshot=hostile, last_ok=T), T)
    text = row.state + failed_sections_text(read_snapshot(hostile))
    assert "\x1b" not in text and "\x07" not in text
    assert "OSError: boom" in text
    # A healthy host's row is plain UP.
    clean = dict(broken_kernel_probe, errors=[])
    assert host_row(HostState(name="h", state=LinkState.UP, snapshot=clean, last_ok=T),
                    T).state == "UP"
