"""A stopped box's auto-release (AutoDL releases a powered-off box after 15 days) counts down
from when the jump host saw it go DOWN after being UP (tui/fleet/downs.py), instead of a
constant "if stopped" line."""

from __future__ import annotations

import sys
from pathlib import Path

from paths import DATA

sys.path.insert(0, str(DATA / "doctor"))
import parts as rec

from gpuroom.profiles import load_profile
from gpuroom.tui.fleet.downs import HostDowns
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.rules.clock import host_clocks
from gpuroom.tui.snapshot import read_optional as view

T = rec.T0
DAY = 86400.0
AUTODL = load_profile("autodl")


def _release(items: list) -> list:  # type: ignore[type-arg]
    return [c for c in items if c.kind == "auto_release"]


def test_a_box_down_three_days_has_twelve_left() -> None:
    (item,) = _release(host_clocks("a1", None, AUTODL, T, down_since=T - 3 * DAY))
    assert item.seconds == 12 * DAY and item.severity == "info"
    assert "down 3 days" in item.text and "released in 12 days" in item.text


def test_the_last_half_day_is_critical_and_past_it_says_released() -> None:
    (item,) = _release(host_clocks("a1", None, AUTODL, T, down_since=T - 14.8 * DAY))
    assert item.severity == "critical"
    (gone,) = _release(host_clocks("a1", None, AUTODL, T, down_since=T - 16 * DAY))
    assert gone.severity == "critical" and "released" in gone.text and gone.seconds == 0.0


def test_an_up_box_keeps_the_constant_reminder() -> None:
    (item,) = _release(host_clocks("a1", view(rec.snapshot(T)), AUTODL, T))
    assert item.severity == "info" and "if stopped, released after 15 days" in item.text


def _state(state: LinkState, at: float) -> HostState:
    return HostState(name="a1", profile="autodl", state=state, last_ok=at if state is
                     LinkState.UP else None, last_try=at)


def test_down_after_up_is_recorded_and_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "downs.json"
    downs = HostDowns(path)
    downs.observe(_state(LinkState.UP, T))
    downs.observe(_state(LinkState.DOWN, T + 600))
    assert downs.down_since("a1") == T  # its last answer: it went down after that
    # A new process (the room restarted, `gpuroom doctor` from cron) reads the same record.
    again = HostDowns(path)
    again.observe(_state(LinkState.DOWN, T + 3 * DAY))
    assert again.down_since("a1") == T
    again.observe(_state(LinkState.UP, T + 4 * DAY))
    assert again.down_since("a1") is None and HostDowns(path).down_since("a1") is None


def test_a_host_never_seen_up_has_no_countdown(tmp_path: Path) -> None:
    downs = HostDowns(tmp_path / "downs.json")
    downs.observe(_state(LinkState.DOWN, T))
    assert downs.down_since("a1") is None
    downs.observe(_state(LinkState.STALE, T))  # stale is not down
    assert downs.down_since("a1") is None
