"""How the room shows errors: a GpuroomError as its message and one fix, anything else as a
bug whose traceback goes to the state dir's log while the room keeps running."""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Callable
from typing import Any

import pytest

from gpuroom.tui.errors import EXIT_INTERNAL, GpuroomError, internal_log_path
from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.widgets.queue import QueueTable

os.environ["TZ"] = "UTC"
time.tzset()

from paths import DATA  # noqa: E402  (after TZ is pinned, like the app's imports)


class FailingFleet(StaticFleet):
    """The healthy scenario's fleet whose queue actions raise ``failure`` (and its polling
    loop ``run_failure``, after the first round of updates)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.failure: Exception | None = None
        self.run_failure: Exception | None = None
        self.kills: list[tuple[str, str]] = []

    async def run(self, on_change: Callable[[str], None]) -> None:
        if self.run_failure is None:
            await super().run(on_change)
            return
        for h in self.hosts():
            on_change(h.name)
        raise self.run_failure

    async def queue_kill(self, host: str, job_id: str) -> None:
        self.kills.append((host, job_id))
        if self.failure is not None:
            raise self.failure


def make_app(failure: Exception | None) -> tuple[GpuroomApp, FailingFleet]:
    data = json.loads((DATA / "scenario-healthy.json").read_text())
    static = StaticFleet.from_scenario(data)
    fleet = FailingFleet(static.hosts())
    fleet.backlog = static.backlog
    fleet.failure = failure
    now = float(data["now"])
    return GpuroomApp(fleet, clock=lambda: now), fleet


async def kill_selected(app: GpuroomApp, pilot: Any) -> None:
    await pilot.press("K", "y")
    kills = [w for w in app.workers if w.group == "kill"]
    if kills:  # an empty list would mean "all", the fleet's endless worker included
        await app.workers.wait_for_complete(kills)
    await pilot.pause()


def errors(app: GpuroomApp) -> list[str]:
    return [n.message for n in app._notifications if n.severity == "error"]


async def test_a_gpuroom_error_shows_its_message_and_its_own_fix_once() -> None:
    app, fleet = make_app(GpuroomError("h100-a: the runner is not answering",
                                       "run `gpuroom queue ls h100-a`, then K again"))
    async with app.run_test(size=(120, 40)) as pilot:
        await kill_selected(app, pilot)
        assert fleet.kills == [("h100-a", "j3")]
        (message,) = errors(app)
        assert message == ("kill of job j3 on h100-a failed: h100-a: the runner is not "
                           "answering. Fix: run `gpuroom queue ls h100-a`, then K again")
        assert app.is_running
        job = next(j for j in app.query_one(QueueTable).jobs if j.id == "j3")
        assert job.pending is None  # taken back: the kill did not happen
    assert not internal_log_path().exists()  # not a bug: nothing logged


async def test_a_gpuroom_error_without_fix_gets_the_rooms_fix() -> None:
    app, _ = make_app(GpuroomError("h100-a: link dropped"))
    async with app.run_test(size=(120, 40)) as pilot:
        await kill_selected(app, pilot)
        (message,) = errors(app)
        assert message.count("Fix:") == 1
        assert message.endswith("Fix: check the host is UP (r polls now), then K again")


@pytest.mark.expect_internal_error
async def test_a_bug_in_a_worker_is_logged_and_shown_as_one_line() -> None:
    app, fleet = make_app(RuntimeError("dict changed size during iteration\n  second line"))
    async with app.run_test(size=(120, 40)) as pilot:
        await kill_selected(app, pilot)
        log = internal_log_path()
        (message,) = errors(app)
        assert message == ("internal error: RuntimeError: dict changed size during iteration "
                           f"| second line; details in {log}")
        assert "Traceback" not in message
        assert app.is_running  # Textual would have exited and printed the traceback
        job = next(j for j in app.query_one(QueueTable).jobs if j.id == "j3")
        assert job.pending is None
        # Still usable: the next key works.
        await pilot.press("j", "enter")
        assert app.selected_host == "rtx-b"
    text = log.read_text()
    assert "Traceback (most recent call last)" in text
    assert "in queue_kill" in text and "RuntimeError: dict changed size" in text
    assert "room worker kill" in text
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700
    assert fleet.kills == [("h100-a", "j3")]


@pytest.mark.expect_internal_error
async def test_a_bug_in_a_key_handler_ends_the_room_with_one_line_not_a_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Textual stops the message loop a handler raised in, so the room cannot go on; what it
    # prints on the way out is the bug line, where Textual would print a rich traceback.
    app, _ = make_app(None)

    def broken() -> None:
        raise KeyError("selected")

    monkeypatch.setattr(app, "action_toggle_follow", broken)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f")
        await pilot.pause()
    assert app.return_code == EXIT_INTERNAL
    log = internal_log_path()
    # What Textual prints on the terminal once the room is gone: the line (folded by rich at
    # the console's width), nothing else.
    out, err = capsys.readouterr()
    assert "".join(err.splitlines()) == \
        f"gpuroom: internal error: KeyError: 'selected'; details in {log}"
    assert "Traceback" not in out + err
    text = log.read_text()
    assert "in broken" in text and "KeyError: 'selected'" in text


@pytest.mark.expect_internal_error
async def test_a_bug_while_the_room_starts_ends_it_the_same_way(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    app, _ = make_app(None)

    def broken(*_args: Any) -> None:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(GpuroomApp, "_refresh_log", broken)  # on_mount draws the log
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
    assert app.return_code == EXIT_INTERNAL
    out, err = capsys.readouterr()
    assert "".join(err.splitlines()) == ("gpuroom: internal error: ZeroDivisionError: "
                                         f"division by zero; details in {internal_log_path()}")
    assert "Traceback" not in out + err
    assert "ZeroDivisionError: division by zero" in internal_log_path().read_text()


@pytest.mark.attack("hostile text", "a bug line quoting a box is inert")
@pytest.mark.expect_internal_error
async def test_a_bug_line_quoting_a_box_is_inert() -> None:
    app, _ = make_app(ValueError("job name \x1b]52;c;ZXZpbA==\x07\x1b[2Jx"))
    async with app.run_test(size=(120, 40)) as pilot:
        await kill_selected(app, pilot)
        (message,) = errors(app)
        assert "\x1b" not in message and "\x07" not in message
        assert message.startswith("internal error: ValueError: job name x; details in ")
    assert "\x1b" not in internal_log_path().read_text()


async def test_polling_that_stops_on_a_gpuroom_error_says_so_with_its_fix() -> None:
    app, fleet = make_app(None)
    fleet.run_failure = GpuroomError("hosts.toml vanished", "run gpuroom hosts import")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        (message,) = errors(app)
        assert message == ("fleet polling stopped: hosts.toml vanished. Fix: run gpuroom "
                           "hosts import")
        assert app.is_running


@pytest.mark.expect_internal_error
async def test_a_bug_in_the_polling_loop_is_logged_and_the_room_stays() -> None:
    app, fleet = make_app(None)
    fleet.run_failure = IndexError("list index out of range")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        (message,) = errors(app)
        assert message == ("internal error: IndexError: list index out of range; details in "
                           f"{internal_log_path()}")
        assert app.is_running and app.selected_host == "h100-a"
    text = internal_log_path().read_text()
    assert "room worker fleet" in text and "in run" in text
