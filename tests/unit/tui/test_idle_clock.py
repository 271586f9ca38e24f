"""The idle clock from the box's own answer (the probe's ``idle`` section): right at the first
poll, measured on the box's clock, refined by what the jump host sees afterwards."""

from __future__ import annotations

import sys
from typing import Any

from paths import DATA

sys.path.insert(0, str(DATA / "doctor"))
import parts as rec

from gpuroom.remote import idle as box_idle
from gpuroom.remote.probe import ProbeSession
from gpuroom.tui.rules.clock import IdleTracker, banner_lines, host_clocks, is_idle
from gpuroom.tui.snapshot import read_optional as view

T = rec.T0
HOUR = 3600.0


def _answered(snap: dict[str, Any], box_now: float) -> dict[str, Any]:
    """``snap`` with the idle section the real helper derives from it at ``box_now``."""
    snap.update(box_idle.derive(ProbeSession(), snap, now=box_now))
    return snap


def _night(t: float = T, skew: float = 0.0) -> dict[str, Any]:
    """A box whose last job ended 10 h before ``t``; its clock is ``skew`` s ahead."""
    done = rec.ended(rec.job(), "succeeded", t + skew - 10 * HOUR, exit_code=0)
    snap = rec.snapshot(t + skew, gpus=[rec.idle_gpu()], jobs=[done], uptime_s=48 * HOUR)
    return _answered(snap, t + skew)


def test_the_first_poll_after_a_night_shows_the_night_and_the_money() -> None:
    tracker = IdleTracker()
    snap = view(_night())
    tracker.feed("box", snap, T)
    assert tracker.idle_for("box", T) == 10 * HOUR
    clocks = host_clocks("box", snap, None, T, price_per_hour=2.5, tracker=tracker)
    (item,) = [c for c in clocks if c.kind == "idle"]
    assert item.severity == "critical"
    assert "idle 10.0 h" in item.text and "$25.00 burnt" in item.text
    assert any("idle 10.0 h" in line for line in banner_lines([], clocks))


def test_the_span_is_the_box_clocks_not_the_jump_hosts() -> None:
    tracker = IdleTracker()
    tracker.feed("box", view(_night(skew=3 * HOUR)), T)  # the box's clock runs 3 h ahead
    assert tracker.idle_for("box", T + 60) == 10 * HOUR + 60


def test_the_jump_hosts_tracker_refines_it_after_a_busy_poll() -> None:
    tracker = IdleTracker()
    busy = _answered(rec.snapshot(T, gpus=[rec.h100(0)], jobs=[rec.job()]), T)
    assert busy["idle"]["idle_since"] is None
    tracker.feed("box", view(busy), T)
    # The next poll: the job ended, but a box that forgot it (a new helper process, an old
    # end) must not count from before the poll that saw work.
    later = _night(T + 60)
    tracker.feed("box", view(later), T + 60)
    assert tracker.idle_since("box") == T


def test_a_forged_idle_since_never_counts_past_the_boot() -> None:
    snap = rec.snapshot(T, gpus=[rec.idle_gpu()], uptime_s=2 * HOUR)
    snap["idle"] = {"idle_since": 0.0, "now": T, "busy": None, "basis": "job_end"}
    tracker = IdleTracker()
    tracker.feed("box", view(snap), T)
    assert tracker.idle_for("box", T) == 2 * HOUR
    snap["idle"] = {"idle_since": T + 99 * HOUR, "now": T, "busy": None, "basis": "job_end"}
    tracker = IdleTracker()
    tracker.feed("box", view(snap), T)
    assert tracker.idle_for("box", T) == 0.0


def test_a_box_with_a_foreign_compute_process_is_not_idle() -> None:
    gpu = rec.idle_gpu()
    gpu["processes"] = rec.h100(0)["processes"]  # the capture's python on the card
    assert gpu["processes"] and all(p.get("type") != "G" for p in gpu["processes"])
    snap = _answered(rec.snapshot(T, gpus=[gpu], uptime_s=48 * HOUR), T)
    assert snap["idle"]["busy"] == "foreign"
    read = view(snap)
    assert read is not None and not is_idle(read)
    tracker = IdleTracker()
    tracker.feed("box", read, T)
    assert tracker.idle_for("box", T) is None
