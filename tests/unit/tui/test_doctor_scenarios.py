"""Issue 7's "done when": replaying each recording gives exactly its finding and banner line.

Recordings are JSON lines as tui/fleet/live.py's Recorder writes them, built by
tests/data/doctor/build_recordings.py from the real probe and fixture captures. The replay
feeds the doctor the previous good snapshot per host, the way the room does; time is each
line's own "t", never the wall clock.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from paths import DATA

from gpuroom.profiles import ProfileError, load_profile
from gpuroom.tui.model import LinkState
from gpuroom.tui.rules.clock import ClockItem, IdleTracker, banner_lines, host_clocks
from gpuroom.tui.rules.doctor import Finding, diagnose
from gpuroom.tui.snapshot import read_optional as view

DOCTOR = DATA / "doctor"
PRICE = {"h100-a": 2.49, "idle-box": 2.49, "a10-c": 0.76}


def replay(name: str) -> tuple[set[str], list[Finding], list[ClockItem]]:
    """Every finding id seen over the whole replay; the last poll's findings and clocks."""
    prev: dict[str, Any] = {}
    last_ok: dict[str, float] = {}
    tracker = IdleTracker()
    seen: set[str] = set()
    findings: list[Finding] = []
    clocks: list[ClockItem] = []
    for raw in (DOCTOR / f"{name}.jsonl").read_text().splitlines():
        rec = json.loads(raw)
        host, t, link = rec["host"], float(rec["t"]), LinkState(rec["state"])
        try:
            profile = load_profile(rec["profile"])
        except ProfileError:
            profile = None
        snap = rec["snapshot"]
        findings = diagnose(view(prev.get(host)), view(snap), link, profile, t, host=host,
                            error=rec["error"], last_ok=last_ok.get(host))
        seen |= {f.id for f in findings}
        tracker.feed(host, view(snap), t)
        clocks = host_clocks(host, view(snap if snap is not None else prev.get(host)), profile, t,
                             price_per_hour=PRICE.get(host), tracker=tracker)
        if link is LinkState.UP:
            prev[host], last_ok[host] = snap, t
    return seen, findings, clocks


@pytest.mark.parametrize(("name", "ids", "banner"), [
    ("reboot", {"GEN6"},
     ["CRITICAL h100-a: job default/j1 (train) died: the box rebooted [GEN6]"]),
    ("cgroup_oom", {"U9"},
     ["CRITICAL h100-a: job default/j1 (train) died: cgroup OOM-kill [U9]"]),
    # Xid 79's own message without the Xid token (the nvsentinel capture): "fell off the bus".
    ("xid79", {"U22"},
     ["CRITICAL h100-a: job default/j1 (train) died: GPU fell off the bus, the GPU is dead "
      "[U22]"]),
    ("throttle", {"U23"}, ["WARN a10-c: GPU 0 (NVIDIA A10) is throttling [U23]"]),
    # 9940 of 10000 inodes: df -i prints 100% (it rounds up), and so does the doctor.
    ("inode_full", {"U7"}, ["CRITICAL h100-a: /data: inodes 100 % used [U7]"]),
    ("idle_3h", set(),
     ["CRITICAL idle-box: idle 3.0 h while billing: $7.47 burnt (no job running, GPU at idle "
      "power)"]),
    ("link_drop", {"GEN8"}, []),
])
def test_scenario(name: str, ids: set[str], banner: list[str]) -> None:
    seen, findings, clocks = replay(name)
    assert seen == ids
    assert banner_lines(findings, clocks) == banner


def test_link_drop_says_the_job_is_not_dead() -> None:
    # The banner is empty again once the link is back; mid-drop the finding must say so.
    lines = (DOCTOR / "link_drop.jsonl").read_text().splitlines()
    rec = json.loads(lines[2])
    prev = json.loads(lines[1])["snapshot"]
    out = diagnose(view(prev), None, LinkState(rec["state"]), None, rec["t"], host="h100-a",
                   error=rec["error"], last_ok=json.loads(lines[1])["t"])
    assert [f.id for f in out] == ["GEN8"]
    assert "does NOT mean the job died" in out[0].title
    assert "5 s ago" in out[0].seen and "timed out" in out[0].seen


def test_idle_box_spend_counts_from_boot() -> None:
    _, _, clocks = replay("idle_3h")
    spend = [c for c in clocks if c.kind == "spend"]
    # The box's own uptime at the last poll (the recording's 3 h of polls are the jump host's
    # clock; the box booted before them), not the time the tracker has seen it idle.
    last = json.loads((DOCTOR / "idle_3h.jsonl").read_text().splitlines()[-1])
    uptime = last["snapshot"]["host"]["uptime_s"]
    assert [c.seconds for c in spend] == [pytest.approx(uptime)]
    assert spend[0].text.startswith(f"${uptime / 3600 * 2.49:.2f} billed over ")
    assert spend[0].text.endswith(" since boot ($2.49/h)")
