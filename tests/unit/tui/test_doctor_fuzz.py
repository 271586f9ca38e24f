"""Property-based fuzzing of what the headless verbs make of a lying box: `doctor` (the
doctor's rules through tui/rules/doctor.py diagnose and the room's FleetWatch, and the verb's
table and JSON), `status` (its table and JSON) and `export` (the exposition, which must parse
with prometheus_client's own parsers, text and OpenMetrics). No exception, no escape in what
a terminal prints, metrics a scraper reads."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from typing import Any

import pytest
from harness.hostile_docs import examples, hostile_snapshots, real_snapshots
from harness.hostile_text import terminal_controls
from hypothesis import example, given, settings
from prometheus_client.core import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text

from gpuroom.tui.cli.doctor import _failed, _print, examine
from gpuroom.tui.cli.main import _print_table, _state_json
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.present.metrics import KernelCounts, fleet_families
from gpuroom.tui.rules.watch import FleetWatch
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.transport.metrics_http import to_metrics

NOW = 1_795_294_600.0
FUZZ = settings(max_examples=examples(40), deadline=None)
PROFILES = ("generic-ssh", "slurm", "runpod")


def hosts(docs: list[dict[str, Any]]) -> list[HostState]:
    out = []
    for n, doc in enumerate(docs):
        out.append(HostState(name=f"box{n}", profile=PROFILES[n % len(PROFILES)],
                             state=LinkState.UP, snapshot=doc, last_ok=NOW - n,
                             last_try=NOW - n, price_per_hour=1.5, rented_at=NOW - 3600))
    out.append(HostState(name="gone", state=LinkState.STALE, snapshot=docs[0],
                         # as the fleet keeps a failed poll's error (live.py): one inert line
                         error=sanitize_line("[/] \x1b]52;c;eA==\x07 refused"), last_ok=NOW - 99,
                         last_try=NOW))
    return out


class _Fleet:
    def __init__(self, families: list[Any]) -> None:
        self.families = families

    def collect(self) -> Any:
        yield from to_metrics(self.families)


@pytest.mark.attack("trust", "generated hostile snapshots through `doctor` (diagnose, the "
                    "room's watch over two polls, the verb's table and JSON) and `status`")
@FUZZ
@given(first=hostile_snapshots(), second=hostile_snapshots())
def test_doctor_and_status_take_any_answer(first: dict[str, Any],
                                           second: dict[str, Any]) -> None:
    states = hosts([first, second])
    findings, clocks = examine(states, NOW)
    watch = FleetWatch()
    for t, doc in ((NOW - 60, first), (NOW, second)):  # a transition: first, then second
        h = HostState(name="box0", state=LinkState.UP, snapshot=doc, last_ok=t, last_try=t)
        watch.observe(h, t)
    findings += watch.findings()
    clocks += watch.clocks(states, NOW)
    printed = io.StringIO()
    with redirect_stdout(printed):
        _print(findings, clocks, _failed(states, findings, NOW))
        _print_table(states)
    out = printed.getvalue()
    assert "gpuroom status" in out
    assert terminal_controls(out) == []
    for f in findings:
        assert terminal_controls(f"{f.title} {f.seen} {f.fix} {f.host}") == [], f.id
    for s in states:
        json.dumps(_state_json(s))  # status --json never fails on what the box sent


def _seen_by_fuzzing() -> dict[str, Any]:
    """What the fuzz found first: one GPU listed twice (a duplicate series) and a negative
    oom_kill counter; both failed the OpenMetrics scrape."""
    doc = json.loads(real_snapshots()[0])
    doc["gpus"] = doc["gpus"] + doc["gpus"][:1]
    doc["cgroup"]["oom_kill"] = -1
    return doc


@pytest.mark.attack("trust", "generated hostile snapshots through `export`: the exposition "
                    "parses with prometheus_client's text and OpenMetrics parsers")
@FUZZ
@given(first=hostile_snapshots(), second=hostile_snapshots())
@example(first=_seen_by_fuzzing(), second=_seen_by_fuzzing())
def test_the_exposition_parses_whatever_the_box_said(first: dict[str, Any],
                                                     second: dict[str, Any]) -> None:
    states = hosts([first, second])
    watch, kernel = FleetWatch(), KernelCounts()
    for h in states:
        watch.observe(h, NOW)
        kernel.observe(h)
    families = fleet_families(states, watch.findings(), watch.clocks(states, NOW), NOW,
                              idle_for={"box0": 10.0}, kernel=kernel.counts)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fleet(families))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    parsed = {f.name: f for f in parse_text(text)}
    assert "gpuroom_host_up" in parsed
    om = list(parse_om(generate_openmetrics(registry).decode()))
    assert om
    for fam in parsed.values():
        for sample in fam.samples:
            assert all(terminal_controls(v) == [] for v in sample.labels.values())
