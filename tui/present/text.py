"""The one way text reaches Rich or Textual: as an inert ``rich.text.Text``, never markup.

A string handed to Rich or Textual as ``str`` is read as markup almost everywhere (a Table
cell, a DataTable cell or column label, ``Static.update``, a border title, a toast): a GPU
process named ``python train.py [/]`` raised MarkupError and closed the room, and
``[reverse]…`` restyled a pane. ``Text`` is never parsed, and what it holds is first made one
inert, bounded line (gpuroom.tui.sanitize), so no escape sequence reaches the terminal either.
Every pane, screen and CLI table builds box text with ``box_text``; a style is always ours.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuroom.tui.sanitize import MAX_DISPLAY_CHARS, sanitize_line, truncate_display

if TYPE_CHECKING:
    from rich.console import OverflowMethod
    from rich.text import Text


def plain(value: object, limit: int | None = MAX_DISPLAY_CHARS) -> str:
    """``value`` as one inert line: "" for None; escapes, controls and bidi overrides gone;
    past ``limit`` characters cut, saying how much (None: whole, for a screen that exists to
    show all of it)."""
    line = "" if value is None else sanitize_line(str(value))
    return line if limit is None else truncate_display(line, limit)


def box_text(value: object, style: str = "", *, no_wrap: bool | None = None,
             overflow: OverflowMethod | None = None,
             limit: int | None = MAX_DISPLAY_CHARS) -> Text:
    """``value`` as a Rich ``Text`` that is never read as markup (``plain``'s line), styled
    with ``style``."""
    from rich.text import Text  # lazily: the headless verbs import present/ without rich

    return Text(plain(value, limit), style=style, no_wrap=no_wrap, overflow=overflow)


def box_lines(lines: object, style: str = "") -> Text:
    """Several lines (a multi-line message, an error with its fix), each one ``plain``."""
    from rich.text import Text

    return Text("\n".join(plain(line) for line in str(lines).split("\n")), style=style)
