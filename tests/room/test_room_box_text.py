"""Box text is never markup: a snapshot whose every string holds Rich markup, escape
sequences, bidi controls, NUL and 5 KB lines is drawn literally in every pane and screen.

Seen: a GPU process named ``python train.py [/]`` closed the room with MarkupError, and
``[reverse]x[/reverse]`` restyled the pane. The data is the real helper's scenario
(tests/data/scenario-healthy.json) with every string replaced (tests/harness/hostile_text.py);
the replay is a real recording (tests/data/doctor/cgroup_oom.jsonl) treated the same way.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest
from harness.hostile_docs import examples, mutate, nested, real_snapshots
from harness.hostile_text import LITERALS, PAYLOADS, hostile_copy, terminal_controls
from harness.room import screen_text
from paths import DATA
from textual.pilot import Pilot

from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.fleet.replay import ReplayFleet, load_recording
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.tui.room.detail_screen import DetailScreen
from gpuroom.tui.room.findings_screen import FindingsScreen
from gpuroom.tui.room.gate_screen import GateScreen
from gpuroom.tui.room.jobdetail_screen import JobDetailScreen
from gpuroom.tui.room.screens import ConfirmScreen
from gpuroom.tui.rules.gate import GateResult, evaluate
from gpuroom.widgets.gpu import GpuPanel
from gpuroom.widgets.queue import QueueTable

os.environ["TZ"] = "UTC"
time.tzset()

SIZES = [(80, 24), (200, 60)]


class HostileFleet(StaticFleet):
    """The hostile scenario; its gate is the real checklist over the hostile snapshot and a
    hostile manifest, as a live box's gate would compute it."""

    async def gate(self, host: str) -> GateResult:
        view = self.host(host).view
        jobs = view.jobs if view is not None else ()
        outputs = {j.id: hostile_copy([{"path": "ckpt.pt", "sha256": "x", "size": 1,
                                        "mtime": 1.0}]) for j in jobs}
        return evaluate(host, view, [], outputs, run_dirs=hostile_copy("error"))


def hostile_scenario() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / "scenario-healthy.json").read_text())
    for h in data["hosts"]:
        h["snapshot"] = hostile_copy(h["snapshot"])
        h["error"] = hostile_copy("error")
        for e in h.get("history", []):
            e["snapshot"] = hostile_copy(e["snapshot"])
    return data


def seen(app: GpuroomApp, where: str) -> str:
    """The screen as text; fails on any character that would drive the terminal."""
    text = screen_text(app)
    bad = terminal_controls(text)
    assert not bad, f"{where}: {bad!r} reached the screen"
    assert app.is_running, f"{where}: the room closed ({app.return_code})"
    return text


async def open_everything(app: GpuroomApp, pilot: Pilot[Any], *, live: bool) -> str:
    """Every host's panes, GPU processes and `i`; then, on the first host (the one with
    jobs), the findings, the gate, and its job's `i`, kill question and detail. All the
    text seen."""
    shown = [seen(app, "panes")]
    hosts = len(app.fleet.hosts())
    for host_row in range(hosts):
        await pilot.press(*(["down"] if host_row else []), "enter")
        await pilot.pause()
        shown.append(seen(app, f"host {host_row}"))
        await pilot.press("p")
        await pilot.pause()
        assert app.query_one(GpuPanel).show_processes
        shown.append(seen(app, f"host {host_row}: gpu processes"))
        await pilot.press("p", "i")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        shown.append(seen(app, f"host {host_row}: detail"))
        await pilot.press("escape")
    await pilot.press(*["up"] * (hosts - 1), "enter", "d")
    await pilot.pause()
    assert isinstance(app.screen, FindingsScreen)
    shown.append(seen(app, "findings"))
    await pilot.press("escape")
    if live:
        await pilot.press("T")
        await _workers(app, "gate")
        assert isinstance(app.screen, GateScreen)
        shown.append(seen(app, "gate"))
        await pilot.press("escape")
    await pilot.press("tab")  # the queue pane
    await pilot.pause()
    assert app.query_one(QueueTable).selected_job is not None
    await pilot.press("i")
    await pilot.pause()
    shown.append(seen(app, "job `i`"))
    await pilot.press("escape")
    if live:  # K asks first, naming the job and its command
        await pilot.press("K")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        shown.append(seen(app, "kill?"))
        await pilot.press("n")
    await pilot.press("enter")
    await _workers(app, "jobdetail")
    assert isinstance(app.screen, JobDetailScreen) and app.screen.answered
    shown.append(seen(app, "job detail"))
    await pilot.press("escape")
    return "\n".join(shown)


async def _workers(app: GpuroomApp, group: str) -> None:
    for _ in range(50):
        await asyncio.sleep(0.02)
        workers = [w for w in app.workers if w.group == group]
        if workers:
            await app.workers.wait_for_complete(workers)
        if not workers or all(w.is_finished for w in workers):
            break
    await asyncio.sleep(0.05)


@pytest.mark.attack("trust", "a snapshot whose every string is Rich markup ([/], [reverse], "
                    "[link=file://], [@click=app.quit]), ANSI/OSC, bidi, NUL and 5 KB lines, "
                    "with every pane and screen of the room opened at 80x24 and 200x60")
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_room_shows_hostile_box_text_literally(size: tuple[int, int]) -> None:
    data = hostile_scenario()
    fleet = HostileFleet.from_scenario(data)
    now = float(data["now"])
    app = GpuroomApp(fleet, clock=lambda: now)
    async with app.run_test(size=size) as pilot:
        for _ in fleet.play_backlog():
            await pilot.pause()
        await pilot.pause()
        text = await open_everything(app, pilot, live=True)
        assert app.is_running
    assert app.return_code in (None, 0)
    for literal in LITERALS:
        assert literal in text, literal


def hostile_recording(tmp_path: Path) -> Path:
    lines = (DATA / "doctor" / "cgroup_oom.jsonl").read_text().splitlines()
    out = []
    for raw in lines:
        doc = json.loads(raw)
        doc["snapshot"] = hostile_copy(doc.get("snapshot"))
        if isinstance(doc.get("error"), str):
            doc["error"] = hostile_copy(doc["error"])
        doc["host"] = "[/]h100-a\x1b]52;c;aGk=\x07"
        out.append(json.dumps(doc))
    path = tmp_path / "hostile.jsonl"
    path.write_text("\n".join(out) + "\n")
    return path


@pytest.mark.attack("trust", "`gpuroom replay` of a recording whose every string, host name "
                    "included, is Rich markup, escapes, bidi and NUL")
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_replay_of_a_hostile_recording_shows_it_literally(
        tmp_path: Path, size: tuple[int, int]) -> None:
    fleet = ReplayFleet(load_recording(hostile_recording(tmp_path)), speed=0)
    app = GpuroomApp(fleet, clock=fleet.now, replay="hostile.jsonl at 0x")
    async with app.run_test(size=size) as pilot:
        await asyncio.wait_for(fleet.finished.wait(), 20)
        await pilot.pause()
        text = await open_everything(app, pilot, live=False)
        assert app.is_running
    assert app.return_code in (None, 0)
    for literal in ("[/]h100-a", *LITERALS):
        assert literal in text, literal


@pytest.mark.attack("trust", "a box whose queue answer names one job id twice (two queues, or "
                    "a forged line) while the room shows its queue pane")
async def test_a_job_id_sent_twice_does_not_close_the_room() -> None:
    data: dict[str, Any] = json.loads((DATA / "scenario-healthy.json").read_text())
    queues = data["hosts"][0]["snapshot"]["queue"]["queues"]
    queues["other"] = json.loads(json.dumps(queues["default"]))  # the same ids again
    fleet = StaticFleet.from_scenario(data)
    now = float(data["now"])
    app = GpuroomApp(fleet, clock=lambda: now)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("enter")
        await pilot.pause()
        assert app.is_running
        ids = [j.id for j in app.query_one(QueueTable).jobs]
        assert len(ids) == 2 * len(set(ids))  # the pane's rows say the box sent each twice
        assert app.query_one(QueueTable).row_count == len(set(ids))
    assert app.return_code in (None, 0)


ROOM_VALUES: list[Any] = [*PAYLOADS, "", 10 ** 400, -(10 ** 400), -1, 0, 1e308, -1e308, 5e-324,
                          math.nan, math.inf, -math.inf, True, None, [], {}, ["[/]"],
                          {"[/]": "\x1b[2J"}, nested(300)]


@pytest.mark.attack("trust", "snapshots generated from real ones (every node may become "
                    "markup, escapes, a huge, negative or non-finite number, the wrong type, "
                    "deep nesting or a repeated element) fed poll after poll to a running room")
async def test_the_room_draws_generated_hostile_snapshots() -> None:
    docs = real_snapshots()
    fleet = StaticFleet([HostState(name="box", state=LinkState.DOWN)])
    app = GpuroomApp(fleet, clock=lambda: 1_795_294_600.0)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        for seed in range(examples(24)):  # the same 24 snapshots on every run (deterministic)
            rng = random.Random(seed)
            doc = mutate(json.loads(docs[seed % len(docs)]), rng, ROOM_VALUES,
                         (0.02, 0.1, 0.3)[seed % 3])
            fleet.feed("box", doc if isinstance(doc, dict) else {}, 1_795_294_590.0 + seed)
            if seed == 0:
                await pilot.press("enter")
            if seed % 4 == 3:
                await pilot.press("p")
            await pilot.pause()
            seen(app, f"generated snapshot {seed}")
    assert app.return_code in (None, 0)
