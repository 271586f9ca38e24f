"""Every key of the control room, driven through Pilot against a recording fleet."""

from __future__ import annotations

import json
import os
import time
from contextlib import nullcontext
from typing import Any

import pytest
from textual.content import Content
from textual.widgets import Input
from textual.widgets._toast import Toast

from gpuroom.tui.fleet.api import FleetError, StaticFleet
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.tui.room.screens import AddJobScreen, ConfirmScreen, HelpScreen
from gpuroom.widgets.banner import DangerBanner
from gpuroom.widgets.gpu import GpuPanel
from gpuroom.widgets.hosts import HostsTable
from gpuroom.widgets.logtail import LogTail
from gpuroom.widgets.queue import QueueTable

os.environ["TZ"] = "UTC"
time.tzset()

from paths import DATA  # noqa: E402  (after TZ is pinned, like the app's imports)


class RecordingFleet(StaticFleet):
    """StaticFleet whose actions are recorded (and can be told to fail)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[Any, ...]] = []
        self.ckpts: tuple[str, ...] = ()
        self.fail_with: str | None = None

    @classmethod
    def load(cls, name: str) -> tuple[RecordingFleet, float]:
        data = json.loads((DATA / f"scenario-{name}.json").read_text())
        static = StaticFleet.from_scenario(data)
        fleet = cls(static.hosts(), ssh={h.name: ["ssh", h.name] for h in static.hosts()
                                         if h.profile != "local"})
        fleet.backlog = static.backlog
        return fleet, float(data["now"])

    def _maybe_fail(self) -> None:
        if self.fail_with:
            raise FleetError(self.fail_with)

    async def queue_add(self, host: str, argv: list[str], *, name: str | None, gpus: int,
                        retries: int, cwd: str | None = None,
                        ckpts: tuple[str, ...] = ()) -> str:
        self.calls.append(("add", host, argv, name, gpus, retries, cwd))
        self.ckpts = ckpts
        self._maybe_fail()
        return "j99"

    async def queue_kill(self, host: str, job_id: str) -> None:
        self.calls.append(("kill", host, job_id))
        self._maybe_fail()

    async def queue_relaunch(self, host: str, job_id: str) -> None:
        self.calls.append(("relaunch", host, job_id))
        self._maybe_fail()

    async def refresh(self, host: str | None = None) -> None:
        self.calls.append(("refresh", host))
        await super().refresh(host)


def make_app(name: str = "healthy", **kwargs: Any) -> tuple[GpuroomApp, RecordingFleet]:
    fleet, now = RecordingFleet.load(name)
    return GpuroomApp(fleet, clock=lambda: now, **kwargs), fleet


async def settle(app: GpuroomApp) -> None:
    """Wait for action workers; the fleet's own worker runs for the app's lifetime."""
    actions = [w for w in app.workers if w.group in ("kill", "relaunch", "add", "refresh")]
    if actions:  # an empty list would mean "all", the fleet's endless worker included
        await app.workers.wait_for_complete(actions)


def queue_states(app: GpuroomApp) -> dict[str, tuple[str, str | None]]:
    return {j.id: (j.state, j.pending) for j in app.query_one(QueueTable).jobs}


@pytest.mark.attack("hostile text", "startup selects first host and its running job")
async def test_startup_selects_first_host_and_its_running_job() -> None:
    app, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.selected_host == "h100-a"
        assert app.query_one(QueueTable).selected_job_id == "j3"
        log = app.query_one(LogTail)
        assert log.source == "h100-a/j3"
        assert "step 4040 loss 2.3290 lr 3.0e-04 tok/s 410k" in log.lines
        # The OSC 52 clipboard write and the \r progress redraws never reach the screen.
        assert all("\x1b" not in line and "\r" not in line for line in log.lines)
        assert "eval 100%|##########| 50/50" in log.lines
        assert app.query_one(HostsTable).row_count == 3


async def test_arrows_jk_and_enter_select_a_host() -> None:
    app, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("j", "enter")
        assert app.selected_host == "rtx-b"
        assert app.query_one(GpuPanel).view is not None
        assert app.query_one(GpuPanel).view.host == "rtx-b"  # type: ignore[union-attr]
        await pilot.press("down", "enter")
        assert app.selected_host == "local"
        view = app.query_one(GpuPanel).view
        assert view is not None and not view.rows and "NVML" in (view.absence or "")
        await pilot.press("k", "up", "enter")
        assert app.selected_host == "h100-a"


async def test_tab_moves_between_panes() -> None:
    app, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        assert isinstance(app.focused, HostsTable)
        await pilot.press("tab")
        assert isinstance(app.focused, QueueTable)
        await pilot.press("tab")
        assert isinstance(app.focused, LogTail)
        await pilot.press("shift+tab")
        assert isinstance(app.focused, QueueTable)


async def test_slash_filters_hosts_and_escape_clears() -> None:
    app, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("slash")
        assert isinstance(app.focused, Input)
        await pilot.press("r", "t", "x")  # typed into the filter, not taken as keys
        hosts = app.query_one(HostsTable)
        assert [r.name for r in hosts.hosts] == ["rtx-b"]
        assert app.fleet.calls == []  # type: ignore[attr-defined]
        await pilot.press("enter")
        assert isinstance(app.focused, HostsTable)
        await pilot.press("escape")
        assert len(hosts.hosts) == 3


async def test_question_mark_opens_help_listing_every_key() -> None:
    app, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
    bound = {b.action for b in GpuroomApp.BINDINGS if not isinstance(b, tuple)}
    assert {"kill", "relaunch", "add_job", "toggle_follow", "refresh", "ssh", "quit",
            "filter", "help"} <= bound


async def test_ctrl_p_palette_offers_every_action() -> None:
    app, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause()
        assert app.screen.__class__.__name__ == "CommandPalette"
        await pilot.press(*"relaunch")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        await settle(app)
    assert ("relaunch", "h100-a", "j3") in app.fleet.calls  # type: ignore[attr-defined]


async def test_K_asks_naming_host_and_job_then_kills_and_shows_pending() -> None:
    app, fleet = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("K")
        assert isinstance(app.screen, ConfirmScreen)
        assert "j3" in app.screen.question and "h100-a" in app.screen.question
        await pilot.press("n")
        assert fleet.calls == []
        await pilot.press("K", "y")
        await settle(app)
        await pilot.pause()
        assert fleet.calls == [("kill", "h100-a", "j3")]
        # Truthful: still running on the box until a snapshot says otherwise.
        assert queue_states(app)["j3"] == ("running", "kill")
        host = fleet.host("h100-a")
        snap = json.loads(json.dumps(host.snapshot))
        for j in snap["queue"]["queues"]["default"]["jobs"]:
            if j["id"] == "j3":
                j["state"] = "killed"
        fleet.feed("h100-a", snap, at=float(host.last_ok or 0) + 5)
        await pilot.pause()
        assert queue_states(app)["j3"] == ("killed", None)
        assert host.pending == []


async def test_failed_kill_notifies_with_host_job_cause_and_fix() -> None:
    app, fleet = make_app()
    fleet.fail_with = "ssh: connection lost"
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("K", "y")
        await settle(app)
        await pilot.pause()
        (note,) = list(app._notifications)
        assert note.severity == "error"
        for part in ("j3", "h100-a", "connection lost", "Fix:"):
            assert part in note.message
        assert queue_states(app)["j3"] == ("running", None)  # nothing pending after failure


@pytest.mark.attack("hostile text", "a toast quoting the box is plain inert text")
async def test_a_toast_quoting_the_box_is_plain_inert_text() -> None:
    # As markup, "[/]" raises and "[@click=...]" is an action; raw, ESC reaches the terminal.
    app, fleet = make_app()
    fleet.fail_with = "boom \x1b]52;c;ZXZpbA==\x07\x1b[2J[@click=app.quit]x[/] [b]bold[/b]"
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await pilot.press("K", "y")
        await settle(app)
        await pilot.pause()
        (note,) = list(app._notifications)
        assert note.markup is False
        assert "\x1b" not in note.message and "\x07" not in note.message, repr(note.message)
        assert "[@click=app.quit]x[/] [b]bold[/b]" in note.message
        (toast,) = app.screen.query(Toast)
        shown = toast.render()
        assert isinstance(shown, Content)
        assert "[@click=app.quit]x[/] [b]bold[/b]" in shown.plain
        assert app.is_running


async def test_R_relaunches_selected_job() -> None:
    app, fleet = make_app("failed")
    async with app.run_test(size=(120, 40)) as pilot:
        queue = app.query_one(QueueTable)
        ids = [j.id for j in queue.jobs]
        queue.move_cursor(row=ids.index("j5"))
        await pilot.press("R")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.question.splitlines()[-1] == (
            "no checkpoint seen: it starts from scratch unless the program finds one of its own")
        assert fleet.calls == []  # nothing reaches the box before "y"
        await pilot.press("y")
        await settle(app)
        await pilot.pause()
        assert fleet.calls == [("relaunch", "h100-a", "j5")]
        assert queue_states(app)["j5"] == ("failed", "relaunch")


async def test_R_asks_naming_the_checkpoint_the_job_will_resume_from() -> None:
    """The failed recording's j5, as if its last attempt had recorded its newest checkpoint
    (remote/queue_runner.py does at every attempt's end)."""
    data = json.loads((DATA / "scenario-failed.json").read_text())
    snap = data["hosts"][0]["snapshot"]
    (j5,) = [j for q in snap["queue"]["queues"].values() for j in q["jobs"] if j["id"] == "j5"]
    j5["attempts"][-1]["checkpoint"] = {
        "path": "/root/ckpt/default/j5/ckpt-000000002800.pt", "size": 1 << 20,
        "mtime": snap["host"]["time"] - 180}
    static = StaticFleet.from_scenario(data)
    fleet = RecordingFleet(static.hosts())
    app = GpuroomApp(fleet, clock=lambda: float(data["now"]))
    async with app.run_test(size=(120, 40)) as pilot:
        queue = app.query_one(QueueTable)
        queue.move_cursor(row=[j.id for j in queue.jobs].index("j5"))
        await pilot.press("R")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.question.splitlines()[-1] == (
            "resumes from: /root/ckpt/default/j5/ckpt-000000002800.pt (step 2800, 3m old), "
            "if the program loads it on start")
        await pilot.press("n")
        await pilot.pause()
    assert fleet.calls == []


async def test_a_adds_a_job_split_with_shlex() -> None:
    app, fleet = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("a")
        assert isinstance(app.screen, AddJobScreen)
        app.screen.query_one("#command", Input).value = "python train.py --note 'two words'"
        app.screen.query_one("#name", Input).value = "sweep"
        app.screen.query_one("#gpus", Input).value = "2"
        app.screen.query_one("#retries", Input).value = "1"
        app.screen.query_one("#command", Input).focus()
        await pilot.press("enter")
        await settle(app)
        await pilot.pause()
        assert fleet.calls == [
            ("add", "h100-a", ["python", "train.py", "--note", "two words"], "sweep", 2, 1,
             None)]
        assert queue_states(app)["j99"] == ("sent", "add")


async def test_add_form_rejects_bad_quoting_without_sending() -> None:
    app, fleet = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("a")
        app.screen.query_one("#command", Input).value = "python 'unclosed"
        app.screen.query_one("#command", Input).focus()
        await pilot.press("enter")
        assert isinstance(app.screen, AddJobScreen)
        assert "quotation" in str(app.screen.query_one("#error").render())
        await pilot.press("escape")
        assert fleet.calls == []


async def test_f_toggles_follow() -> None:
    app, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        log = app.query_one(LogTail)
        assert log.follow and log.auto_scroll
        await pilot.press("f")
        assert not log.follow and not log.auto_scroll
        await pilot.press("f")
        assert log.follow


async def test_r_polls_the_selected_host_now() -> None:
    app, fleet = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("r")
        await settle(app)
        assert fleet.calls == [("refresh", "h100-a")]


async def test_s_suspends_and_runs_ssh_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[list[str]] = []

    def spawn(argv: list[str]) -> int:
        ran.append(argv)
        return 0

    app, _ = make_app(spawn=spawn)
    # The headless test driver cannot suspend; the real terminal driver can.
    monkeypatch.setattr(app, "suspend", nullcontext)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("s")
        assert ran == [["ssh", "h100-a"]]
        await pilot.press("j", "j", "enter", "s")  # local: no ssh
        assert ran == [["ssh", "h100-a"]]


async def test_q_quits() -> None:
    app, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


async def test_stale_host_and_new_log_bytes_update_panes() -> None:
    app, fleet = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        log = app.query_one(LogTail)
        before = log.line_count
        host = fleet.host("h100-a")
        snap = json.loads(json.dumps(host.snapshot))
        j3 = next(j for j in snap["queue"]["queues"]["default"]["jobs"] if j["id"] == "j3")
        old = j3["log_chunk"]
        extra = b"step 4050 \x1b[31mloss\x1b[0m 2.3201\n"
        j3["log_chunk"] = dict(old, offset=old["size"], size=old["size"] + len(extra),
                               data_b64=__import__("base64").b64encode(extra).decode())
        fleet.feed("h100-a", snap, at=float(host.last_ok or 0) + 5)
        fleet.feed("h100-a", snap, at=float(host.last_ok or 0) + 10)  # same bytes again
        await pilot.pause()
        assert log.line_count == before + 1
        assert log.lines[-1] == "step 4050 loss 2.3201"
        fleet.fail("h100-a", "poll timed out", at=0)
        await pilot.pause()
        banner = app.query_one(DangerBanner)
        assert any(d.text.startswith("WARN h100-a: link stale") and "NOT mean the job died"
                   in d.text and d.text.endswith("[GEN8]") for d in banner.items)


async def test_add_form_defaults_to_no_gpu_on_a_box_without_one() -> None:
    app, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("a")
        assert app.screen.query_one("#gpus", Input).value == "1"  # h100-a has GPUs
        await pilot.press("escape")
        app.query_one(HostsTable).focus()
        await pilot.press("j", "j")
        await pilot.press("enter")
        await pilot.pause()
        assert app.selected_host == "local"
        await pilot.press("a")
        assert app.screen.query_one("#gpus", Input).value == "0"


async def test_config_warnings_are_said_once_the_room_is_up() -> None:
    # The room hides stderr, so a warning printed before it opens would go unseen.
    warning = "/x/hosts.toml can be read by other users (mode 0644). Fix: chmod 600 /x/hosts.toml"
    app, _ = make_app(warnings=[warning])
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await pilot.pause()
        (note,) = list(app._notifications)
        assert note.severity == "warning" and note.message == warning


async def test_the_palette_shows_each_actions_key_and_quit_once() -> None:
    # Issue 17: the palette listed actions without their keys, and Quit twice (Textual's own
    # system command beside ours).
    from gpuroom.tui.room.app import GpuroomCommands

    app, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        system = [c.title for c in app.get_system_commands(app.screen)]
        assert "Quit" not in system and "Theme" in system
        hits = [h async for h in GpuroomCommands(app.screen).discover()]
        by_name = {str(h.display): h.help for h in hits}
        assert by_name["quit"] == "key: q"
        assert by_name["kill the selected job (asks first)"] == "key: K"
        assert all(h.help and h.help.startswith("key: ") for h in hits)


async def test_the_add_form_keeps_its_labels_and_sends_the_working_directory() -> None:
    # Issue 17 item 12: prefilled values hid the placeholders that named the fields, and
    # there was no working directory.
    from textual.widgets import Label

    app, fleet = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("a")
        assert isinstance(app.screen, AddJobScreen)
        labels = [str(label.render()) for label in app.screen.query(".field").results(Label)]
        assert labels[2:] == ["GPUs", "retries after a failed attempt",
                              "working directory on the box (optional)",
                              "the program's checkpoints under it (optional; default: found "
                              "by name)"]
        assert app.screen.query_one("#gpus", Input).value == "1"  # prefilled, still labelled
        app.screen.query_one("#command", Input).value = "python train.py"
        app.screen.query_one("#cwd", Input).value = " ~/proj "
        app.screen.query_one("#ckpt", Input).value = "out/ckpt.pt 'out/checkpoint-*'"
        app.screen.query_one("#command", Input).focus()
        await pilot.press("enter")
        await settle(app)
        assert fleet.calls == [("add", "h100-a", ["python", "train.py"], None, 1, 0, "~/proj")]
        assert fleet.ckpts == ("out/ckpt.pt", "out/checkpoint-*")
