"""The log pane's bookkeeping (tui/present/log.py) and the line still being written
(tui/sanitize.py LineSplitter.partial), shared by the pane and `queue logs` (issue 17)."""

from __future__ import annotations

import io
import sys

import pytest

from gpuroom.tui.cli.queue import LogWriter
from gpuroom.tui.present.log import (
    LogChunk,
    LogCursor,
    Match,
    advance_log,
    find_matches,
    match_label,
    prepend_log,
    step_match,
)
from gpuroom.tui.sanitize import LineSplitter


def _chunk(offset: int, data: bytes, size: int | None = None, job: str = "j1") -> LogChunk:
    return LogChunk(job_id=job, offset=offset, inode=7,
                    size=size if size is not None else offset + len(data), data=data,
                    reset=False)


def test_a_tail_reaching_further_back_replaces_what_the_pane_shows() -> None:
    # The pane first had only the bytes since the fleet's cursor (1000..1100), then the tail
    # the room asked for arrives (0..1200): shown whole, not just its last 100 bytes.
    _, _, _, cursor = advance_log(None, _chunk(1000, b"x" * 100))
    assert cursor == LogCursor("j1", 7, 1100, 1000)
    data, fresh, skipped, cursor = advance_log(cursor, _chunk(0, b"y" * 1200))
    assert fresh and skipped == 0 and data == b"y" * 1200
    assert cursor.start == 0 and cursor.end == 1200
    # What follows keeps the start.
    data, fresh, _, cursor = advance_log(cursor, _chunk(1200, b"z"))
    assert not fresh and data == b"z" and cursor.start == 0 and cursor.end == 1201


def test_older_bytes_fit_only_right_above_what_is_shown() -> None:
    cursor = LogCursor("j1", 7, end=500, start=300)
    assert prepend_log(cursor, _chunk(100, b"a" * 200)) == (b"a" * 200,
                                                            LogCursor("j1", 7, 500, 100))
    assert prepend_log(cursor, _chunk(100, b"a" * 150)) is None  # a gap: not adjacent
    assert prepend_log(cursor, _chunk(100, b"a" * 200, job="j2")) is None
    assert prepend_log(cursor, _chunk(300, b"a")) is None  # nothing older
    assert prepend_log(None, _chunk(0, b"a")) is None


def test_the_line_being_rewritten_shows_its_latest_state() -> None:
    split = LineSplitter()
    assert split.feed(b"epoch 1\n\r  5%|#  | 5/100") == ["epoch 1"]
    assert split.partial() == "  5%|#  | 5/100"
    assert split.feed(b"\r 50%|#####| 50/100") == []
    assert split.partial() == " 50%|#####| 50/100"
    assert split.feed(b"\r100%|##########| 100/100\n") == ["100%|##########| 100/100"]
    assert split.partial() is None


@pytest.mark.attack("hostile text",
                    "OSC 52 and CSI 2J inside a progress line that is still being rewritten")
def test_an_unfinished_line_is_as_inert_as_a_finished_one() -> None:
    split = LineSplitter()
    split.feed(b"\x1b]52;c;aGk=\x07\x1b[2Jbar\xc2\x9b31m")
    assert split.partial() == "bar"


def test_hours_of_redraws_without_a_newline_hold_only_the_latest() -> None:
    split = LineSplitter()
    for step in range(20000):
        split.feed(b"\rstep %05d" % step)
    assert split.partial() == "step 19999"
    assert len(split._pending) < 100  # not 20000 redraws kept in memory


def test_queue_logs_on_a_terminal_redraws_the_unfinished_line_in_place(
        monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    writer = LogWriter(tty=True)
    writer.write(b"start\n\r 10%")
    writer.write(b"\r 60%")
    writer.write(b"\r100%\ndone\n")
    writer.close()
    clear = LogWriter.CLEAR_LINE
    assert out.getvalue() == f"start\n 10%{clear} 60%{clear}100%\ndone\n"
    # What a terminal finally shows: each \r-redraw replaced the one before.
    shown = [line.rsplit("\r", 1)[-1].replace("\x1b[K", "")
             for line in out.getvalue().split("\n")]
    assert shown == ["start", "100%", "done", ""]


def test_search_is_smart_case_and_finds_every_occurrence_in_order() -> None:
    lines = ["loss NaN at step 3", "ok", "nan nan", "NaN"]
    assert find_matches(lines, "nan") == [Match(0, 5, 8), Match(2, 0, 3), Match(2, 4, 7),
                                          Match(3, 0, 3)]
    assert find_matches(lines, "NaN") == [Match(0, 5, 8), Match(3, 0, 3)]  # a capital: exact
    assert find_matches(lines, "") == []
    assert find_matches(lines, "a.") == []  # the needle is text, never a pattern
    assert len(find_matches(["a" * 50] * 10, "a", limit=7)) == 7


def test_search_columns_hold_where_lowering_changes_a_strings_length() -> None:
    # "İ".lower() is two characters: columns from a lowered copy would be off by one.
    line = "İİ loss"
    (m,) = find_matches([line], "loss")
    assert line[m.start:m.end] == "loss"


def test_n_and_N_start_from_the_view_and_go_round() -> None:
    matches = [Match(y, 0, 1) for y in (5, 40, 90)]
    assert step_match(matches, None, 1, (30, 60)) == 1  # first at or below the top
    assert step_match(matches, None, -1, (30, 60)) == 1  # last at or above the bottom
    assert step_match(matches, None, 1, (95, 120)) == 0  # none below: round to the first
    assert step_match(matches, None, -1, (0, 3)) == 2  # none above: round to the last
    assert step_match(matches, 2, 1, (0, 3)) == 0 and step_match(matches, 0, -1, (0, 3)) == 2
    assert step_match([], None, 1, (0, 3)) is None


def test_the_search_label_counts() -> None:
    assert match_label("nan", None, 0) == "/nan: no match"
    assert match_label("nan", None, 1) == "/nan: 1 match (n / N)"
    assert match_label("nan", None, 17) == "/nan: 17 matches (n / N)"
    assert match_label("nan", 2, 17) == "/nan: match 3/17"
    assert match_label("a", 0, 5, limit=5) == "/a: match 1/5+"


def test_last_error_line_is_the_cut_error_of_the_attempt_shown_last() -> None:
    from gpuroom.tui.present.log import last_error_line

    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    lines = ["=== gpuroom j5 attempt 1 ...", "step 1", "Traceback (most recent call last):",
             '  File "train.py", line 3', oom, "gpuroom: exit 1"]
    assert last_error_line(lines, 40) == oom
    assert last_error_line(lines, len(oom)) is None  # it fits: shown once, in the pane
    assert last_error_line(["error: no such file: data.bin" + "x" * 40], 40) is not None
    assert last_error_line(["Killed"], 3) == "Killed"
    # A relaunched job's earlier error is history once its new attempt has begun.
    assert last_error_line([*lines, "=== gpuroom j5 attempt 2 ...", "step 1"], 40) is None
    assert last_error_line(["loss 2.1 (no errors so far)" * 3], 10) is None
