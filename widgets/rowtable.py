"""A DataTable of keyed rows that repaints only the cells that changed.

The hosts and queue panes are rewritten on every poll; clearing and re-adding 200 rows five
times a second is what made the room stall under a big fleet. When the row keys and columns
are unchanged, only changed cells are updated; otherwise the table is rebuilt and the cursor
stays on the same key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist

from gpuroom.tui.present.text import box_text

Row = tuple[str, tuple[Text, ...]]  # (key, cells)


class RowTable(DataTable[Text]):
    """Rows addressed by key; vi keys j/k move the cursor."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]

    def __init__(self, *, id: str | None = None, zebra_stripes: bool = False) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=zebra_stripes)
        self._labels: tuple[str, ...] = ()
        self._shown: list[Row] = []

    def set_columns(self, labels: Sequence[str]) -> None:
        labels = tuple(labels)
        if labels == self._labels:
            return
        self._labels = labels
        self.clear(columns=True)
        self._shown = []
        for label in labels:
            self.add_column(box_text(label), key=label)

    def set_rows(self, rows: Sequence[Row]) -> None:
        rows = _first_of_each_key(rows)
        if [k for k, _ in rows] == [k for k, _ in self._shown]:
            for (key, cells), (_, old) in zip(rows, self._shown, strict=True):
                for label, cell, before in zip(self._labels, cells, old, strict=True):
                    if cell != before:
                        # A cell that grew (sent… -> running) must widen its column.
                        self.update_cell(key, label, cell, update_width=True)
            self._shown = list(rows)
            return
        current = self.highlighted_key
        self.clear()
        for key, cells in rows:
            self.add_row(*cells, key=key)
        self._shown = list(rows)
        keys = [k for k, _ in rows]
        if current in keys:
            self.move_cursor(row=keys.index(current), animate=False)

    @property
    def highlighted_key(self) -> str | None:
        if not self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        except CellDoesNotExist:  # cursor outside the (just cleared) table
            return None
        return None if key.value is None else str(key.value)


def _first_of_each_key(rows: Sequence[Row]) -> list[Row]:
    """The rows with each key once, the first kept: keys come from the box (job ids), and a
    box that sends one twice (two queues, a forged answer) must not take the table down."""
    seen: set[str] = set()
    out = []
    for key, cells in rows:
        if key not in seen:
            seen.add(key)
            out.append((key, cells))
    return out
