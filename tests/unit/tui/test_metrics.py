"""The exporter's metrics from the room's own inputs (tui/present/metrics.py), on recordings
of real captures: throttle reasons as 0/1 gauges, Xid counted once per event, findings and
danger clocks, and a box's hostile words kept out of label names and values."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from fakes import split_capture
from paths import DATA
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from gpuroom.remote import kernel
from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.present.metrics import Family, KernelCounts, fleet_families
from gpuroom.tui.rules.watch import FleetWatch
from gpuroom.tui.transport.metrics_http import to_metrics

XID_CAPTURE = "dxvk1027-driver418-xid31-13-32.txt"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(families: list[Family]) -> Samples:
    """Through prometheus-client's exposition and parser, as Prometheus would read it."""

    class Fixed:
        def collect(self):  # type: ignore[no-untyped-def]
            return to_metrics(families)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def _families(hosts: list[HostState], now: float, counts: KernelCounts | None = None
              ) -> list[Family]:
    watch = FleetWatch()
    for h in hosts:
        watch.observe(h, now)
    idle = {h.name: watch.tracker.idle_for(h.name, now) or 0.0 for h in hosts}
    return fleet_families(hosts, watch.findings(), watch.clocks(hosts, now), now,
                          idle_for=idle, kernel=(counts or KernelCounts()).counts)


def test_throttle_reasons_are_labelled_0_1_gauges_per_gpu() -> None:
    fleet = StaticFleet.from_scenario(json.loads((DATA / "scenario-throttle.json").read_text()))
    hosts = fleet.hosts()
    now = max(h.last_ok or 0 for h in hosts) + 5
    got = _scrape(_families(hosts, now))

    def reason(gpu: str, name: str) -> float:
        return got[("gpuroom_gpu_clock_event_reason_active",
                    (("gpu", gpu), ("host", "a10-c"), ("reason", name)))]

    assert reason("0", "hw_slowdown") == 1.0 and reason("0", "hw_power_brake_slowdown") == 1.0
    assert reason("0", "sw_power_cap") == 0.0 and reason("1", "sw_power_cap") == 1.0
    assert got[("gpuroom_gpu_sm_clock_hertz", (("gpu", "0"), ("host", "a10-c")))] == 210e6
    assert got[("gpuroom_gpu_power_watts", (("gpu", "1"), ("host", "a10-c")))] == 18.31
    findings = {k[1] for k in got if k[0] == "gpuroom_findings"}
    assert any(dict(k)["host"] == "a10-c" for k in findings), findings


def test_kernel_events_are_counted_once_each_and_a_down_host_exports_only_its_link(
        fixtures: Path) -> None:
    # A real dmesg with Xid 31, 13 and 32 lines, sent by the box over two polls.
    _meta, text = split_capture((fixtures / "dmesg_xid" / XID_CAPTURE).read_text())
    events = kernel.parse_kernel_log(text)
    xids = sum(1 for e in events if e["kind"] == "xid")
    assert xids >= 2
    fleet = StaticFleet.from_scenario(json.loads((DATA / "scenario-throttle.json").read_text()))
    h = next(x for x in fleet.hosts() if x.name == "a10-c")
    assert h.snapshot is not None and h.last_ok is not None
    counts = KernelCounts()
    for n, part in enumerate((events[:1], events[1:])):
        h.snapshot = {**h.snapshot, "kernel": {"log": "ok", "events": part}}
        h.last_ok = h.last_try = h.last_ok + n
        counts.observe(h)
        counts.observe(h)  # the same poll seen twice counts once
    got = _scrape(_families([h], h.last_ok + 5, counts))
    assert got[("gpuroom_kernel_events_total", (("host", "a10-c"), ("kind", "xid")))] == xids
    h.state = LinkState.DOWN
    names = {k[0] for k in _scrape(_families([h], h.last_ok + 5, counts))}
    assert "gpuroom_host_up" in names and "gpuroom_gpu_temperature_celsius" not in names


@pytest.mark.attack("hostile text", "a box's mount path and GPU name carry quotes, newlines "
                                    "and an escape sequence into the metrics' labels")
def test_hostile_words_stay_inert_label_values() -> None:
    fleet = StaticFleet.from_scenario(json.loads((DATA / "scenario-throttle.json").read_text()))
    h = next(x for x in fleet.hosts() if x.name == "a10-c")
    snap = copy.deepcopy(h.snapshot)
    assert snap is not None
    snap["gpus"][0]["name"] = 'A10"}\nevil_metric 1\n\x1b[2J'
    snap["gpus"][0]["clock_event_reasons"] = ["x\"} 1\nbad{"]
    h.snapshot = snap
    h.last_try = (h.last_try or 0) + 1
    got = _scrape(_families([h], (h.last_ok or 0) + 5))
    assert not any(k[0].startswith("evil") for k in got)
    models = [dict(k[1])["model"] for k in got if k[0] == "gpuroom_gpu_info"]
    assert all("\n" not in m and "\x1b" not in m for m in models), models
    reasons = {dict(k[1])["reason"] for k in got
               if k[0] == "gpuroom_gpu_clock_event_reason_active" and got[k] == 1.0}
    assert "other" in reasons and not any("bad" in r for r in reasons)
