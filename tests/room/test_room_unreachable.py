"""Issue 17 item 10: a STALE or DOWN host is readable: its panes say why with the fix, its
age ticks every second, the next try is announced, and `s` keeps ssh's own last words."""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
from typing import Any

import pytest
from harness.room import screen_text

from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.present.hosts import link_problem, link_text
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.tui.transport.interactive import SshExit, run_interactive_ssh
from gpuroom.widgets.gpu import GpuPanel
from gpuroom.widgets.hosts import HostsTable

os.environ["TZ"] = "UTC"
time.tzset()

NOW = 1_790_000_000.0
# What the fleet stores for a failed poll: str(LinkError), its fix after ". Fix: ".
REFUSED = ("gone: cannot connect to 'gone': [Errno 111] Connect call failed "
           "('127.0.0.1', 2222). Fix: check that the box is up and the alias is right "
           "(ssh gone true)")


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def down_fleet(**host: Any) -> StaticFleet:
    h = HostState(name="gone", state=LinkState.DOWN, error=REFUSED, last_try=NOW,
                  next_try=NOW + 12, **host)
    return StaticFleet([h], ssh={"gone": ["ssh", "gone"]})


def test_link_problem_splits_cause_and_fix_and_says_the_next_try() -> None:
    h = HostState(name="gone", state=LinkState.DOWN, error=REFUSED, next_try=NOW + 12)
    problem = link_problem(h, NOW)
    assert problem is not None
    assert problem.headline == "DOWN: no answer yet"
    assert problem.cause.startswith("cannot connect to 'gone': [Errno 111]")
    assert problem.fix == "check that the box is up and the alias is right (ssh gone true)"
    assert problem.next_try == "next try in 12 s"
    h.next_try = NOW - 1
    assert link_problem(h, NOW).next_try == "next try now"  # type: ignore[union-attr]
    assert link_problem(HostState("up", state=LinkState.UP), NOW) is None


def test_state_cell_is_short_and_ticks_by_the_second() -> None:
    h = HostState(name="b", state=LinkState.STALE, error="poll timed out", last_ok=NOW - 185)
    assert link_text(h, NOW) == "STALE 3m05s"
    assert link_text(h, NOW + 1) == "STALE 3m06s"
    h.state = LinkState.DOWN
    assert link_text(h, NOW) == "DOWN 3m05s"  # the reason is in the panes, whole
    assert link_text(HostState("never"), NOW) == "DOWN"


async def test_down_host_panes_show_the_error_and_fix_not_no_snapshot() -> None:
    app = GpuroomApp(down_fleet(), clock=lambda: NOW)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        screen = screen_text(app)
        assert "no snapshot yet" not in screen
        view = app.query_one(GpuPanel).view
        assert view is not None
        assert view.problem == (
            "DOWN: no answer yet; next try in 12 s",
            "cannot connect to 'gone': [Errno 111] Connect call failed ('127.0.0.1', 2222)",
            "Fix: check that the box is up and the alias is right (ssh gone true)",
        )
        # Whole on screen, wrapped inside the pane rather than cut.
        flat = " ".join(screen.split())
        assert "Fix: check that the box is up and the alias is right (ssh gone true)" in flat
        assert "next try in 12 s" in flat
        # The state cell is never cut mid-word: nothing in it ends in an ellipsis.
        assert [r.state for r in app.query_one(HostsTable).hosts] == ["DOWN"]


async def test_stale_age_and_next_try_tick_every_second() -> None:
    clock = Clock(NOW)
    fleet = down_fleet()
    h = fleet.host("gone")
    h.state, h.last_ok = LinkState.STALE, NOW - 60
    app = GpuroomApp(fleet, clock=clock)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        assert app.query_one(HostsTable).hosts[0].state == "STALE 1m00s"
        clock.t += 5  # nothing polls the host meanwhile: only the room's tick can redraw
        await pilot.pause(1.5)
        assert app.query_one(HostsTable).hosts[0].state == "STALE 1m05s"
        view = app.query_one(GpuPanel).view
        assert view is not None and view.problem[0].endswith("; next try in 7 s")


async def test_s_on_a_dead_host_says_what_ssh_said(monkeypatch: pytest.MonkeyPatch) -> None:
    def spawn(argv: list[str]) -> SshExit:
        return SshExit(255, "ssh: connect to host 10.0.0.9 port 22: Connection refused")

    app = GpuroomApp(down_fleet(), clock=lambda: NOW, spawn=spawn)
    monkeypatch.setattr(app, "suspend", nullcontext)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("s")
        await pilot.pause()
        said = [n.message for n in app._notifications]
        assert any("exited with status 255: ssh: connect to host 10.0.0.9 port 22: "
                   "Connection refused" in m for m in said), said


def test_interactive_ssh_keeps_its_stderr_tail(capfd: pytest.CaptureFixture[str]) -> None:
    # A real child writing to its stderr as ssh does; the user still sees it live.
    ended = run_interactive_ssh(["sh", "-c", "echo 'ssh: Could not resolve hostname x' >&2;"
                                 " echo '\x1b[31mred' >&2; exit 255"])
    assert ended.rc == 255
    assert ended.stderr_tail == "ssh: Could not resolve hostname x | red"
    assert "Could not resolve hostname x" in capfd.readouterr().err
