"""The one way a CLI verb prints a table or a line that holds what a box reported.

Issue 18: a cell given to rich as a ``str`` is read as markup ("[bold]", "[/]" raising), and
a cell that skipped gpuroom.tui.sanitize carries escape sequences (OSC 52 writes the
clipboard) to the terminal. Here every cell and every title is plain text through
``sanitize_line`` and then an inert ``rich.text.Text`` (tui/present/text.py, as in the
room), whatever the verb, so no verb can forget a field. A styled cell is
``(text, style)``: the style is ours, the text still inert.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuroom.tui.present.text import box_text

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

Plain = str | int | float | None
Cell = Plain | tuple[Plain, str]


def inert(value: Cell) -> Text:
    """One cell: "-" for None, else its text made inert (present/text.py box_text, the room's
    own way); ``(text, style)`` keeps our style."""
    style = ""
    if isinstance(value, tuple):
        value, style = value
    return box_text("-" if value is None else value, style, limit=None)  # a verb prints all


def box_table(title: str, columns: Sequence[str]) -> Table:
    """A table whose title and headers are inert text; fill it with ``add_row``."""
    from rich.table import Table

    table = Table(title=inert(title))
    for col in columns:
        table.add_column(inert(col))
    return table


def add_row(table: Table, cells: Sequence[Cell]) -> None:
    table.add_row(*(inert(c) for c in cells))


def print_table(table: Table) -> None:
    from rich.console import Console

    Console().print(table)


def print_line(text: Plain, style: str = "", *, err: bool = False) -> None:
    """One line outside a table (a warning, a headline, an answer), inert like a cell; on
    stderr with ``err`` (a failed action's one line, as README's "When something fails").
    Soft-wrapped: the terminal folds a long line, rich inserts no newline, so a command in
    a fix (a fingerprint, a path) is copied whole."""
    from rich.console import Console

    Console(stderr=err).print(inert((text, style)), soft_wrap=True)
