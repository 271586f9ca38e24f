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
from harness.hostile_docs import examples, hostile_snapshots
from harness.hostile_text import terminal_controls
from hypothesis import given, settings

from gpuroom.tui.cli.doctor import _failed, _print, examine
from gpuroom.tui.cli.main import _print_table, _state_json
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.rules.watch import FleetWatch
from gpuroom.tui.sanitize import sanitize_line

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
