"""Recordings: `gpuroom record` against the real sshd, `gpuroom replay` loading and pacing."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest
from paths import DATA

from gpuroom.tui.cli.main import main
from gpuroom.tui.fleet.replay import MAX_WAIT_S, RecordingError, ReplayFleet, load_recording
from gpuroom.tui.model import LinkState

DOCTOR = DATA / "doctor"


def test_load_orders_by_time_and_keeps_every_field() -> None:
    records = load_recording(DOCTOR / "reboot.jsonl")
    assert [r.t for r in records] == sorted(r.t for r in records)
    assert {r.host for r in records} == {"h100-a"}
    assert all(r.snapshot is not None for r in records if r.state is LinkState.UP)


@pytest.mark.parametrize(("text", "needle"), [
    ("{not json\n{\"t\": 1, \"host\": \"a\", \"state\": \"up\", \"snapshot\": {}}\n",
     ":1: not JSON"),
    ("{\"host\": \"a\", \"state\": \"up\", \"snapshot\": {}}\n", ":1: missing or bad field"),
    ("{\"t\": 1, \"host\": \"a\", \"state\": \"sideways\"}\n", ":1: missing or bad field"),
    ("{\"t\": 1, \"host\": \"a\", \"state\": \"up\", \"snapshot\": null}\n", "no snapshot"),
    ("[1, 2]\n", "must be a JSON object"),
    ("\n\n", "no records"),
])
@pytest.mark.attack(
    "bad configuration",
    "a recording that is not what gpuroom wrote: file and line named")
def test_bad_recording_names_file_and_line(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(RecordingError) as err:
        load_recording(path)
    assert str(path) in str(err.value) and needle in str(err.value)


@pytest.mark.attack(
    "faults",
    "a recording whose last line was cut by a crash: that line is dropped")
def test_a_last_line_cut_by_a_crash_is_dropped(tmp_path: Path) -> None:
    good = (DOCTOR / "idle_3h.jsonl").read_text().splitlines()
    path = tmp_path / "cut.jsonl"
    path.write_text("\n".join(good[:3]) + "\n" + good[3][: len(good[3]) // 2])
    assert len(load_recording(path)) == 3


def test_replay_paces_by_the_recording_scaled_and_capped() -> None:
    records = load_recording(DOCTOR / "idle_3h.jsonl")  # polls 600 s apart
    waits: list[float] = []
    seen: list[str] = []

    async def fake_sleep(s: float) -> None:
        waits.append(s)

    async def play(speed: float) -> ReplayFleet:
        fleet = ReplayFleet(records, speed=speed, sleep=fake_sleep)
        task = asyncio.create_task(fleet.run(seen.append))
        await asyncio.wait_for(fleet.finished.wait(), 5)
        task.cancel()
        return fleet

    fleet = asyncio.run(play(300.0))
    gaps = [b.t - a.t for a, b in itertools.pairwise(records)]
    assert waits[1:] == [min(MAX_WAIT_S, g / 300.0) for g in gaps]
    assert fleet.played == len(records) and len(seen) == len(records)
    # The room's clock is the recording's, frozen at its end.
    assert fleet.now() == records[-1].t
    assert fleet.hosts()[0].last_ok == records[-1].t
    waits.clear()
    asyncio.run(play(0))
    assert set(waits) == {0}


def test_replay_marks_failed_polls_stale(tmp_path: Path) -> None:
    records = load_recording(DOCTOR / "link_drop.jsonl")
    fleet = ReplayFleet(records, speed=0)
    states = []
    for r in records:
        fleet.apply(r)
        states.append(fleet.hosts()[0].state)
    assert LinkState.STALE in states
    assert fleet.hosts()[0].snapshot is not None  # the last good snapshot is kept


def test_replay_cli_refuses_a_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    bad = tmp_path / "x.jsonl"
    bad.write_text("nope\n")
    assert main(["replay", str(bad)]) == 2
    assert f"{bad}:1: not JSON" in capsys.readouterr().err
    assert main(["replay", str(DOCTOR / "reboot.jsonl"), "--speed", "-1"]) == 2
