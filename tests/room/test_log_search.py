"""Issue 20 item 5: search in the log pane. `/` with the log pane focused opens the search
(elsewhere `/` still filters hosts), matches are highlighted, `n` / `N` go to the next /
previous one (scrolled into view, follow paused, "match 3/17" in the title), esc clears; and
the ring dropping old lines does not slide the text a paused reader is on."""

from __future__ import annotations

import os
import time

import pytest
from harness.room import screen_text
from test_log_pane import FAILED, BoxFleet, _app, _raw_chunk, _rows
from textual.binding import Binding
from textual.pilot import Pilot
from textual.widgets import Input

from gpuroom.tui.room.app import GpuroomApp
from gpuroom.tui.room.screens import HelpScreen, key_label
from gpuroom.widgets.logtail import CURRENT_STYLE, MATCH_STYLE, MAX_LINES, LogTail

os.environ["TZ"] = "UTC"
time.tzset()


def lines_of(n: int, start: int = 0) -> bytes:
    """Numbered lines; every 50th says "loss nan" (in capitals every 100th)."""
    out = []
    for i in range(start, start + n):
        word = (b"LOSS NaN" if i % 100 == 0 else b"loss nan") if i % 50 == 0 else b"loss 2.3"
        out.append(b"step %d %s\n" % (i, word))
    return b"".join(out)


def _room() -> tuple[GpuroomApp, BoxFleet, bytes]:
    app, fleet = _app()
    return app, fleet, lines_of(1000)


async def fed(app: GpuroomApp, fleet: BoxFleet, pilot: Pilot[None], data: bytes,
              at: int = 0) -> LogTail:
    """One more poll carrying ``data`` at offset ``at`` of the shown job's log, handled."""
    await pilot.pause()
    fleet.with_chunk(FAILED, _raw_chunk(at, data, at + len(data)))
    await pilot.pause()
    await pilot.pause()
    return app.query_one(LogTail)


async def test_slash_in_the_log_pane_searches_and_n_N_walk_the_matches() -> None:
    app, fleet, data = _room()
    async with app.run_test(size=(120, 40)) as pilot:
        log = await fed(app, fleet, pilot, data)
        assert log.follow
        log.focus()
        await pilot.press("slash")
        box = app.query_one("#logsearch", Input)
        assert box.has_focus and app.host_filter == ""  # not the host filter
        await pilot.press(*"loss nan")
        await pilot.pause()
        assert log.search == "loss nan" and len(log.matches) == 20  # any case: smart case
        assert "20 matches" in str(log.border_title)
        await pilot.press("enter")
        await pilot.pause()
        assert log.has_focus and not box.display
        # The log was followed: enter goes to the newest match, step 950.
        first = log.current
        assert first == 19 and log.matches[first].line == 950
        assert not log.follow  # reading a match pauses follow
        m = log.matches[first]
        assert f"match {first + 1}/20" in str(log.border_title)
        top = round(log.scroll_y)
        assert top <= m.line < top + log.scrollable_content_region.height  # in view
        await pilot.press("n")
        assert log.current == 0 and "match 1/20" in str(log.border_title)  # round the end
        await pilot.press("N", "N")
        assert log.current == 18
        m = log.matches[log.current]
        top = round(log.scroll_y)
        row = _rows(log)[m.line - top]
        assert "loss nan" in row.lower()
        # The current match is drawn in its own style, the others in the match style.
        strip = log.render_line(m.line - top)
        assert any(seg.style is not None and seg.style.bgcolor == CURRENT_STYLE.bgcolor
                   and seg.text.lower() == "loss nan" for seg in strip), list(strip)
        # New lines while reading a match do not move the view.
        held = _rows(log)
        await fed(app, fleet, pilot, lines_of(100, 1000), at=len(data))
        assert _rows(log) == held and len(log.matches) == 22
        assert log.current is not None and log.matches[log.current] == m  # still current
        # Another match, scrolled to by hand, is drawn in the plain match style.
        log.scroll_to(y=850, animate=False, immediate=True)
        assert any(seg.style is not None and seg.style.bgcolor == MATCH_STYLE.bgcolor
                   and seg.text.lower() == "loss nan" for seg in log.render_line(0))
        # esc clears: no match, no highlight, the title says nothing of a search.
        await pilot.press("escape")
        assert log.search == "" and log.matches == [] and "match" not in str(log.border_title)
        assert all(seg.style is None or seg.style.bgcolor != MATCH_STYLE.bgcolor
                   for seg in log.render_line(0))


async def test_slash_elsewhere_still_filters_hosts_and_esc_in_the_box_clears_the_search() -> None:
    app, fleet, data = _room()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("slash")
        assert app.query_one("#filter", Input).has_focus
        await pilot.press("escape")
        log = app.query_one(LogTail)
        log.focus()
        await pilot.press("slash", *"Loss")  # a capital: exact case
        await fed(app, fleet, pilot, data)
        assert log.search == "Loss" and log.matches == []
        assert "no match" in str(log.border_title)
        await pilot.press("escape")
        assert log.search == "" and log.has_focus
        assert not app.query_one("#logsearch", Input).display


async def test_n_without_a_search_does_nothing_and_help_lists_the_log_keys() -> None:
    app, fleet, data = _room()
    async with app.run_test(size=(120, 40)) as pilot:
        log = await fed(app, fleet, pilot, data)
        log.focus()
        await pilot.press("n", "N")
        assert log.follow and log.current is None
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = dict(app.screen.rows)
        assert keys["n N"].startswith("log pane: next / previous match")
        assert any(k == "/" and d.startswith("log pane: search") for k, d in app.screen.rows)


async def test_the_ring_dropping_old_lines_does_not_slide_a_paused_view() -> None:
    app, fleet, _ = _room()
    data = b"".join(b"row %d\n" % i for i in range(MAX_LINES))
    async with app.run_test(size=(120, 40)) as pilot:
        log = await fed(app, fleet, pilot, data)
        log.focus()
        await pilot.press("pageup", "pageup")
        assert not log.follow
        held = _rows(log)
        more = b"".join(b"row %d\n" % i for i in range(MAX_LINES, MAX_LINES + 200))
        await fed(app, fleet, pilot, more, at=len(data))
        assert len(log.lines) == MAX_LINES and log.lines[-1] == f"row {MAX_LINES + 199}"
        assert _rows(log) == held  # the lines being read stay where they were


@pytest.mark.attack("hostile text", "a log line and the search both carrying Rich markup "
                    "'[/]' and an escape sequence, searched and highlighted in the log pane")
async def test_markup_in_the_log_and_the_search_stays_words() -> None:
    app, fleet, _ = _room()
    data = b"ok\n\x1b[31mstep [bold red]7[/] done\x1b]52;c;ZXZpbA==\x07\n"
    async with app.run_test(size=(120, 40)) as pilot:
        log = await fed(app, fleet, pilot, data)
        log.focus()
        await pilot.press("slash", *"d]7[/]", "enter")
        await pilot.pause()
        assert log.lines[-1] == "step [bold red]7[/] done"  # sanitized before it is searched
        assert [(m.line, m.start) for m in log.matches] == [(len(log.lines) - 1, 13)]
        assert "/d]7[/]: match 1/1" in screen_text(app)  # drawn as the words typed
        top = round(log.scroll_y)
        row = log.render_line(len(log.lines) - 1 - top)
        assert "step [bold red]7[/] done" in row.text


async def test_help_lists_every_key_of_the_log_pane() -> None:
    """Home and End (the log's start, and back to following) were bound but in no help row."""
    app, _, _ = _room()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        listed = {word for keys, _ in app.screen.rows for word in keys.split()}
        rows = dict(app.screen.rows)
        for binding in LogTail.BINDINGS:
            assert isinstance(binding, Binding)
            for key in binding.key.split(","):
                if key != "escape":  # said in the "/" row: esc clears the search
                    assert key_label(key) in listed, key
        assert rows["home end"].startswith("log pane: the first line kept")
