"""Log pane: the tail of the selected job's log, sanitized, bounded, following."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.cells import cell_len
from rich.style import Style
from textual.actions import SkipAction
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip
from textual.widgets import Log

from gpuroom.tui.present.format import fmt_bytes
from gpuroom.tui.present.log import (
    LineSplitter,
    LogChunk,
    LogCursor,
    Match,
    advance_log,
    find_matches,
    match_label,
    prepend_log,
    step_match,
)
from gpuroom.tui.present.text import box_text

MAX_LINES = 10_000  # ring of lines kept; older ones drop off the top
MATCH_STYLE = Style(color="black", bgcolor="yellow")
CURRENT_STYLE = Style(color="black", bgcolor="dark_orange", bold=True)


class LogTail(Log):
    """Ring of the last 10k display lines of one job's log. Text arrives already as bytes
    from snapshots; only sanitized lines (tui/sanitize.py) are ever written.

    With ``follow`` on, the last line is always in view; scrolling up pauses it (the title
    says so) and ``f`` or End resumes it. The line the job is still writing (a progress bar
    redrawn with ``\\r``) is shown as it looks now and replaced in place as it changes.

    ``search`` highlights every match in the lines shown; ``n`` / ``N`` go to the next /
    previous one (pausing follow) and the title says "match 3/17". The search box itself is
    the app's: ``/`` here asks for it (SearchWanted).
    """

    DEFAULT_CSS = """
    LogTail { height: 1fr; border-title-color: $text-muted; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j,down", "scroll_down", "Down", show=False),
        Binding("k,up", "scroll_up", "Up", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home", "scroll_home", "Top", show=False),
        Binding("end", "follow", "Follow", show=False),
        Binding("slash", "search", "Search", show=False),
        Binding("n", "next_match(1)", "Next match", show=False),
        Binding("N", "next_match(-1)", "Previous match", show=False),
        Binding("escape", "clear_search", "Clear search", show=False),
    ]

    @dataclass
    class SearchWanted(Message):
        """``/`` in the pane: open the search box, holding the current search."""

        search: str

    @dataclass
    class OlderWanted(Message):
        """The pane is scrolled to its top and the file has bytes before ``start``."""

        source: str
        start: int

    follow: reactive[bool] = reactive(True)
    """Keep the last line in view (f toggles; scrolling up pauses, End resumes)."""

    search: reactive[str] = reactive("")
    """The text searched for in the lines shown ("" none); matches are highlighted."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(max_lines=MAX_LINES, auto_scroll=True, id=id)
        self.cursor: LogCursor | None = None
        self._splitter = LineSplitter()
        self._partial = False  # the last line is the job's unfinished line
        self._marker = False  # the first line says older bytes exist
        self._older_asked: int | None = None
        self.source = ""
        self.matches: list[Match] = []
        self.current: int | None = None  # index in matches of the one n / N went to
        self._hits: dict[int, list[tuple[int, int, bool]]] = {}  # line -> (start, end, current)

    # ------------------------------------------------------------------ follow

    def watch_follow(self, follow: bool) -> None:
        self.auto_scroll = follow  # Log's own flag, for whoever reads it; _to_end does it here
        self._title()
        if follow:
            self._to_end()

    def _to_end(self) -> None:
        # x_axis=False: a wide line must not move the view sideways. After the refresh, when
        # the layout (a horizontal scrollbar that just appeared) gives the real last row.
        self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.scroll_end(animate=False, x_axis=False)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self.follow and new_value < old_value and new_value < self.max_scroll_y:
            self.follow = False  # the user scrolled up: stay where they are
        if new_value == 0 and new_value < old_value and not self.follow:
            self._want_older()  # the user reached the top (not a clear of the pane)

    def on_resize(self) -> None:
        if self.follow:
            self._to_end()

    def action_follow(self) -> None:
        self.follow = True
        self._to_end()

    def action_scroll_home(self) -> None:
        self.follow = False
        self.scroll_home(animate=False, x_axis=False)
        self._want_older()

    def _title(self) -> None:
        mode = "follow" if self.follow else "paused: f or End follows"
        title = f"log {self.source} ({mode})" if self.source else f"log ({mode})"
        if self.search:
            title += "  " + match_label(self.search, self.current, len(self.matches))
        # Never markup: the job id and the search come from the box and the user.
        self.border_title = box_text(title)

    # ------------------------------------------------------------------ search

    def action_search(self) -> None:
        self.post_message(self.SearchWanted(self.search))

    def action_clear_search(self) -> None:
        if not self.search:
            raise SkipAction()  # esc goes on to the app (it clears the host filter)
        self.search = ""

    def watch_search(self) -> None:
        self.current = None
        self._find()

    def _find(self, at: tuple[int, int] | None = None) -> None:
        """Match the lines again (they changed, or the search did); ``at``: the current
        match's (line, start) after the change, kept current when it is still there."""
        self.matches = find_matches(self._lines, self.search)
        self.current = next((i for i, m in enumerate(self.matches)
                             if (m.line, m.start) == at), None) if at is not None else None
        self._index_hits()

    def _index_hits(self) -> None:
        self._hits = {}
        for i, m in enumerate(self.matches):
            self._hits.setdefault(m.line, []).append((m.start, m.end, i == self.current))
        self._render_line_cache.clear()
        self.refresh()
        self._title()

    def action_next_match(self, step: int) -> None:
        if not self.search:
            return
        top = round(self.scroll_y)
        view = (top, top + self.scrollable_content_region.height - 1)
        self.current = step_match(self.matches, self.current, step, view)
        self._index_hits()
        if self.current is None:
            return
        m = self.matches[self.current]
        self.follow = False  # reading a match: new lines must not carry the view away
        self.scroll_to_region(Region(m.start, m.line, max(1, m.end - m.start), 1),
                              animate=False, immediate=True, center=True)

    def _moved(self, delta: int) -> None:
        """The lines moved ``delta`` rows down (older bytes on top) or up (the ring dropped
        its oldest): matches follow their text."""
        if self.search:
            cur = self.matches[self.current] if self.current is not None else None
            self._find((cur.line + delta, cur.start) if cur is not None else None)

    def _render_line_strip(self, y: int, rich_style: Style) -> Strip:
        hits = self._hits.get(y)
        if not hits:
            return super()._render_line_strip(y, rich_style)
        if y in self._render_line_cache:
            return self._render_line_cache[y]
        line = self._lines[y]
        text = box_text(line, no_wrap=True, limit=None)  # already display_lines
        text.stylize(rich_style)
        for start, end, current in hits:
            text.stylize(CURRENT_STYLE if current else MATCH_STYLE, start, end)
        strip = Strip(text.render(self.app.console), cell_len(line))
        self._render_line_cache[y] = strip
        return strip

    # ------------------------------------------------------------------ content

    def show(self, source: str) -> None:
        """Switch to another job (or none): the pane starts empty for it."""
        if source == self.source:
            return
        self.source = source
        self.cursor = None
        self._restart()
        self._title()

    def _restart(self) -> None:
        self._splitter.reset()
        self._partial = self._marker = False
        self._older_asked = None
        self.clear()
        if self.search:
            self._find()

    def _update_size(self, updates: int, lines: list[str]) -> None:  # type: ignore[override]
        # Log measures the widest new line in a thread worker, through a regex and cell_len
        # per line: 10k lines a chunk held the GIL against the event loop for tens of ms.
        # Lines here are already sanitized, so their width is their length unless non-ASCII.
        if lines:
            width = max(len(line) if line.isascii() else cell_len(line) for line in lines)
            self._update_maximum_width(updates, width)

    def _put(self, at: int, lines: list[str]) -> None:
        """Lines in at index ``at`` as they are: Log.write_lines would split them again on
        every character str.splitlines() knows (U+2028, U+2029), which shifts the partial
        line's index."""
        self._lines[at:at] = lines
        self._render_line_cache.clear()  # cached rows are keyed by index, which moved
        dropped = max(0, len(self._lines) - MAX_LINES)
        if dropped:
            self._prune_max_lines()
            self._marker = False  # the top line dropped: the bytes above it are unknown
        self.virtual_size = Size(self._width, len(self._lines))
        self._update_size(self._updates, lines)
        self._moved((len(lines) if at == 0 else 0) - dropped)
        if dropped and not self.follow:
            # Paused on a line: the ring dropping older lines must not slide the text being
            # read upwards (follow off means the view stays on its lines).
            self.scroll_to(y=max(0, self.scroll_y - dropped), animate=False, immediate=True)
        self.refresh()

    def _marker_line(self, start: int) -> str:
        return f"[… {fmt_bytes(start)} before this: scroll up or Home for more …]"

    def append_chunk(self, chunk: LogChunk) -> int:
        """Write what is new in ``chunk``; return the number of lines written."""
        data, fresh, skipped, self.cursor = advance_log(self.cursor, chunk)
        if fresh:
            self._restart()
        elif not data and not skipped:
            return 0
        lines = []
        if fresh and self.cursor.start > 0:
            lines.append(self._marker_line(self.cursor.start))
            self._marker = True
        if skipped:
            self._splitter.reset()
            lines.append(f"[… {skipped} bytes not fetched …]")
        # A chunk of more lines than the ring holds: only its last MAX_LINES are decoded,
        # sanitized and written, the rest would be pruned unseen (a 50 MB/s flood stays cheap).
        lines += self._splitter.feed(data, keep=MAX_LINES)
        if self._partial:
            # The unfinished line shown last time: its final form is among ``lines`` now,
            # or its newer state is the partial below.
            del self._lines[-1]
            self._partial = False
        partial = self._splitter.partial()
        if partial is not None:
            lines.append(partial)
            self._partial = True
        lines = [line.expandtabs(8) for line in lines]
        # One write for the whole batch: a fast log costs one refresh per snapshot.
        self._put(len(self._lines), lines)
        if self.follow:
            self._to_end()
        return len(lines)

    def prepend_chunk(self, chunk: LogChunk) -> int:
        """Older bytes for the top of the pane (scrolled back); return the lines added."""
        older = prepend_log(self.cursor, chunk) if self._marker else None
        if older is None:
            return 0
        data, self.cursor = older
        text = data[:-1] if data.endswith(b"\n") else data
        lines = LineSplitter().feed(text + b"\n") if text else []
        del self._lines[0]  # the marker; a new one goes on top while older bytes remain
        self._marker = False
        self._moved(-1)
        room = MAX_LINES - len(self._lines)
        if len(lines) >= room:
            lines = lines[len(lines) - room :]  # the ring is full: no further scroll-back
        elif self.cursor.start > 0:
            lines.insert(0, self._marker_line(self.cursor.start))
            self._marker = True
        lines = [line.expandtabs(8) for line in lines]
        self._put(0, lines)
        # The lines the user was reading stay where they were on screen.
        self.scroll_to(y=self.scroll_y + len(lines) - 1, animate=False, immediate=True)
        self._older_asked = None
        return len(lines)

    def no_older(self, why: str) -> None:
        """Older bytes cannot be had (a recording holds only what it recorded): the top line
        says so instead of promising them."""
        if self._marker and self.cursor is not None:
            self._lines[0] = f"[… {fmt_bytes(self.cursor.start)} before this: {why} …]"
            self._marker = False
            self._render_line_cache.clear()
            self.refresh()

    def _want_older(self) -> None:
        cursor = self.cursor
        if not self._marker or cursor is None or self._older_asked == cursor.start:
            return
        self._older_asked = cursor.start
        self.post_message(self.OlderWanted(self.source, cursor.start))
