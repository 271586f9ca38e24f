"""The box's uptime and clock checked for what cannot be true (tui/rules/plausible.py), and
the money clock that counts nothing from them (tui/rules/clock.py billed_seconds)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuroom.tui.rules.clock import billed_seconds
from gpuroom.tui.rules.plausible import clock_findings, clock_problem, plausible_uptime
from gpuroom.tui.snapshot import read_snapshot

NOW = 1_790_000_000.0
DAY = 86400.0


def snap(**host: Any) -> Any:
    return read_snapshot({"schema": 1, "host": {"hostname": "b", **host}})


@pytest.mark.parametrize(("host", "says"), [
    ({"uptime_s": -1e9, "time": NOW}, "negative"),
    ({"uptime_s": 1e12, "time": NOW}, "longer than any box"),
    ({"uptime_s": 60.0, "time": NOW - 3 * 365 * DAY}, "behind"),
    ({"uptime_s": 60.0, "time": 1e18}, "ahead of"),
])
def test_an_impossible_uptime_or_clock_is_a_finding_and_bills_nothing(
        host: dict[str, float], says: str) -> None:
    s = snap(**host)
    problem = clock_problem(s, NOW)
    assert problem is not None and says in problem, problem
    assert billed_seconds(s, NOW) is None and plausible_uptime(s, NOW) is None
    [finding] = clock_findings("b", s, NOW)
    assert finding.title.startswith("the box's clock/uptime is implausible") and finding.fix
    assert billed_seconds(s, NOW, rented_at=NOW - 3600) == 3600.0  # the user's own clock


@pytest.mark.parametrize("host", [
    {"uptime_s": 3600.0, "time": NOW - 10},
    {"uptime_s": 3600.0, "time": NOW + 200},  # a few minutes of skew
    {"uptime_s": 60.0, "time": NOW + 600},  # ahead, and rebooted a minute ago: no future boot
    {"uptime_s": 3600.0, "time": NOW - 40 * DAY},  # a snapshot kept while the host was down
    {},
])
def test_an_ordinary_clock_is_believed(host: dict[str, float]) -> None:
    s = snap(**host)
    assert clock_problem(s, NOW) is None and clock_findings("b", s, NOW) == []
    if host:
        assert billed_seconds(s, NOW) is not None
