"""The log pane with Pilot: any job's tail at once, scroll-back, follow that follows, progress
bars in place, and a 5,000-character line (issue 17 items 1-3, issue 18 item 5)."""

from __future__ import annotations

import base64
import copy
import io
import itertools
import json
import os
import time
from typing import Any

import pytest
from harness.joblog import numbered_lines
from harness.room import finish
from textual.widgets import Log

from gpuroom.remote.queue import read_log_chunk, tail_start
from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.tui.snapshot import LogChunk as LogChunkView
from gpuroom.tui.snapshot import read_log_doc
from gpuroom.widgets.logtail import LogTail

os.environ["TZ"] = "UTC"
time.tzset()

from paths import DATA  # noqa: E402  (after TZ is pinned, like the app's imports)

HOST = "h100-a"
FAILED = "j5"  # scenario-failed: ended before the recording, no log bytes in it
INODE = 4242
LINES = 9000
TAIL = 16 << 10  # what this fleet sends for a selected job, as Fleet sends LOG_TAIL_BYTES


def _log(n: int = LINES) -> bytes:
    return numbered_lines(n)


def _raw_chunk(offset: int, data: bytes, size: int) -> dict[str, Any]:
    return {"offset": offset, "next_offset": offset + len(data), "inode": INODE, "size": size,
            "data_b64": base64.b64encode(data).decode(), "reset": False}


class BoxFleet(StaticFleet):
    """A recording whose box has the whole log of each job: show_log answers with the next
    snapshot carrying the tail, as the live fleet's next poll does, and log_before reads the
    older bytes with the helper's own tail rule (remote/queue.py tail_start)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.logs: dict[str, bytes] = {}
        self.asked: list[tuple[str, str]] = []
        self.clock = 0.0

    @classmethod
    def load(cls, name: str) -> tuple[BoxFleet, float]:
        data = json.loads((DATA / f"scenario-{name}.json").read_text())
        static = StaticFleet.from_scenario(data)
        return cls(static.hosts()), float(data["now"])

    def with_chunk(self, job_id: str, chunk: dict[str, Any]) -> None:
        """One more good poll of HOST whose ``job_id`` carries ``chunk``."""
        snap = copy.deepcopy(self.host(HOST).snapshot)
        assert snap is not None
        for job in snap["queue"]["queues"]["default"]["jobs"]:
            if job["id"] == job_id:
                job["log_chunk"] = chunk
        self.clock += 5
        self.feed(HOST, snap, at=float(self.host(HOST).last_ok or 0) + self.clock)

    def show_log(self, host: str, job_key: str) -> None:
        self.asked.append((host, job_key))
        log = self.logs.get(job_key)
        if log is not None:
            start = tail_start(io.BytesIO(log), len(log), TAIL)
            self.with_chunk(job_key.split("/")[1], _raw_chunk(start, log[start:], len(log)))

    async def log_before(self, host: str, job_key: str, end: int) -> LogChunkView | None:
        log = self.logs.get(job_key)
        if log is None:
            return None
        start = tail_start(io.BytesIO(log), end, TAIL)
        return read_log_doc(_raw_chunk(start, log[start:end], len(log)))


def _app(name: str = "failed") -> tuple[GpuroomApp, BoxFleet]:
    fleet, now = BoxFleet.load(name)
    return GpuroomApp(fleet, clock=lambda: now), fleet


def _rows(log: Log) -> list[str]:
    """What the pane's content area shows now, row by row."""
    return [log.render_line(y).text.rstrip() for y in range(log.scrollable_content_region.height)]


async def test_selecting_an_ended_job_shows_the_tail_of_its_log_at_once() -> None:
    app, fleet = _app()
    fleet.logs["default/j5"] = _log()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.pause()
        log = app.query_one(LogTail)
        assert log.source == f"{HOST}/{FAILED}"  # the failed job is the one shown at start
        assert (HOST, "default/j5") in fleet.asked
        assert log.lines[-1] == f"line-{LINES - 1}"
        # The pane starts at a line start and says that older bytes exist above it.
        assert log.lines[0].startswith("[… ") and "before this" in log.lines[0]
        assert log.lines[1].startswith("line-")
        assert _rows(log)[-1] == f"line-{LINES - 1}"  # and the view is at the end


def test_the_helper_tail_rule_matches_what_the_probe_ships(tmp_path: Any) -> None:
    # BoxFleet stands in for the box with the helper's own function; the probe's chunk for
    # a {"tail": N} cursor is the same bytes.
    path = tmp_path / "j5.log"
    path.write_bytes(_log())
    shipped = read_log_chunk(str(path), {"tail": TAIL})
    log = _log()
    assert shipped["offset"] == tail_start(io.BytesIO(log), len(log), TAIL)


async def test_home_on_the_log_pane_fetches_older_bytes_up_to_the_first_line() -> None:
    app, fleet = _app()
    fleet.logs["default/j5"] = _log()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        log = app.query_one(LogTail)
        log.focus()
        await pilot.pause()
        for _ in range(12):  # 9000 lines of ~10 bytes: 6 tails of 16 KiB
            await pilot.press("home")
            await finish(app, "log")
            await pilot.pause()
            if log.lines[0] == "line-0":
                break
        assert log.lines[0] == "line-0"
        assert list(log.lines) == [f"line-{i}" for i in range(LINES)]  # nothing lost, none twice
        assert not log.follow and "paused" in str(log.border_title)


async def test_follow_keeps_the_last_line_in_view_and_scrolling_up_pauses_it() -> None:
    app, fleet = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        log = app.query_one(LogTail)
        size = 0

        async def more(n: int) -> None:
            nonlocal size
            data = b"".join(b"step %d\n" % (size + i) for i in range(n))
            fleet.with_chunk(FAILED, _raw_chunk(size, data, size + len(data)))
            size += len(data)
            await pilot.pause()
            await pilot.pause()

        await more(500)  # a first chunk far taller than the pane
        assert log.follow and "(follow)" in str(log.border_title)
        assert log.scroll_y == log.max_scroll_y > 0
        assert _rows(log)[-1].startswith("step ")
        await more(40)
        assert log.scroll_y == log.max_scroll_y and _rows(log)[-1] == f"step {size_lines(log)}"

        log.focus()
        await pilot.press("up", "up")
        assert not log.follow
        assert "paused: f or End follows" in str(log.border_title)
        held = _rows(log)
        await more(40)
        assert _rows(log) == held  # paused: the view stays on what the user reads

        await pilot.press("end")
        await pilot.pause()
        assert log.follow and log.scroll_y == log.max_scroll_y
        assert _rows(log)[-1] == f"step {size_lines(log)}"
        await pilot.press("k")
        assert not log.follow
        await pilot.press("f")
        await pilot.pause()
        assert log.follow and log.scroll_y == log.max_scroll_y


def size_lines(log: LogTail) -> str:
    """The number in the pane's last line ("step N")."""
    return log.lines[-1].split()[-1]


async def test_a_progress_bar_shows_its_latest_state_in_place() -> None:
    app, fleet = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        log = app.query_one(LogTail)
        sent = b""

        async def write(data: bytes) -> None:
            nonlocal sent
            fleet.with_chunk(FAILED, _raw_chunk(len(sent), data, len(sent) + len(data)))
            sent += data
            await pilot.pause()
            await pilot.pause()

        await write(b"epoch 1\n\rtrain  10%|#         | 10/100")
        assert list(log.lines) == ["epoch 1", "train  10%|#         | 10/100"]
        await write(b"\rtrain  60%|######    | 60/100")
        assert list(log.lines) == ["epoch 1", "train  60%|######    | 60/100"]
        assert _rows(log)[1] == "train  60%|######    | 60/100"
        await write(b"\rtrain 100%|##########| 100/100\nepoch 2\n")
        assert list(log.lines) == ["epoch 1", "train 100%|##########| 100/100", "epoch 2"]


@pytest.mark.attack("hostile text",
                    "a 5,000-character line, cut mid-character across polls, in the open room's "
                    "selected log")
async def test_a_5000_character_line_in_an_open_room_blanks_nothing() -> None:
    app, fleet = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        log = app.query_one(LogTail)
        before = b"".join(b"beat-%d\n" % i for i in range(30))
        long_line = ("é" * 5000).encode()  # two bytes each: cut mid-character below
        after = b"".join(b"beat-%d\n" % i for i in range(30, 40))
        whole = before + long_line + b"\n" + after
        # As the polls of a running job see it: cut anywhere, the long line in pieces.
        cuts = [0, len(before) + 1001, len(before) + 6001, len(whole) - 20, len(whole)]
        for start, end in itertools.pairwise(cuts):
            fleet.with_chunk(FAILED, _raw_chunk(start, whole[start:end], end))
            await pilot.pause()
            await pilot.pause()
            rows = _rows(log)
            assert any(rows), f"blank pane after bytes {start}..{end}"
        assert log.scroll_x == 0
        assert _rows(log)[-1] == "beat-39"
        assert sum(1 for line in log.lines if line.startswith("é" * 100)) == 1
        assert "beat-29" in log.lines and "beat-30" in log.lines


async def test_a_recording_says_older_bytes_are_not_in_it_instead_of_promising_them() -> None:
    app, _ = _app()  # no log on "the box": the recording's own chunk is all there is
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        log = app.query_one(LogTail)
        assert "scroll up or Home for more" in log.lines[0]
        log.focus()
        await pilot.press("home")
        await finish(app, "log")
        await pilot.pause()
        assert log.lines[0] == "[… 291B before this: not in this recording …]"
