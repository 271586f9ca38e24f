"""The one monitor pipeline (tui/fleet/monitor.py) on the real helper's data: a failed job the
banner shows is alerted like any critical item, once, and an acknowledged death is neither
shown nor alerted again, in this process or another."""

from __future__ import annotations

import asyncio
import json

from paths import DATA

from gpuroom.tui.fleet.acks import Acks
from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.fleet.monitor import Monitor
from gpuroom.tui.rules.alerts import Alert


def _fleet() -> tuple[StaticFleet, float]:
    data = json.loads((DATA / "scenario-failed.json").read_text())
    return StaticFleet.from_scenario(data), float(data["now"])


def test_a_failed_job_is_alerted_once_and_an_ack_silences_it() -> None:
    fleet, now = _fleet()
    said: list[Alert] = []
    monitor = Monitor(fleet, clock=lambda: now, say=said.append)
    for h in fleet.hosts():
        monitor.observe(h.name)
    findings = monitor.findings()
    failed = monitor.failed(findings)
    assert failed
    monitor.alert(findings, monitor.clocks(), failed)
    monitor.alert(findings, monitor.clocks(), failed)  # the next redraw: not again
    jobs = [a for a in said if a.id == "job"]
    assert len(jobs) == len(failed)
    first = failed[0]
    assert f"gpuroom doctor --ack {first.host}/{first.job}" in jobs[0].fix
    monitor.ack(first.host, first.job)
    assert first not in monitor.failed(monitor.findings())
    # Another process (gpuroom doctor, watch) reads the same record.
    other = Monitor(fleet, clock=lambda: now, acks=Acks())
    assert all((d.host, d.job) != (first.host, first.job)
               for d in other.failed(other.findings()))
    asyncio.run(monitor.settle())
