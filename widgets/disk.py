"""Disk pane: ``df -h`` and ``df -i`` side by side for each watched mount (U7)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from gpuroom.tui.present.disks import DiskRow
from gpuroom.tui.present.format import fmt_bytes, fmt_count, fmt_pct
from gpuroom.tui.present.levels import Level
from gpuroom.tui.present.text import box_text
from gpuroom.widgets.gpu import problem_text

BAR_WIDTH = 8
LEVEL_COLOR: dict[Level, str] = {"ok": "green", "warn": "yellow", "crit": "bold red"}
WIDE = 60  # columns from which sizes and counts fit beside the bars


def bar(pct: float | None, level: Level, width: int = BAR_WIDTH) -> Text:
    """A filled bar whose colour says the level (yellow/red), not just its length."""
    if pct is None:
        return box_text("·" * width, "dim")
    filled = min(width, max(0, round(pct / 100 * width)))
    text = box_text("█" * filled, LEVEL_COLOR[level])
    text.append("░" * (width - filled), style="dim")
    return text


class DiskPanel(Widget):
    """Bytes and inodes of each watched filesystem, coloured by the worse threshold."""

    DEFAULT_CSS = """
    DiskPanel { height: 1fr; border-title-color: $text-muted; }
    """

    disks: reactive[tuple[DiskRow, ...]] = reactive(())
    """Watched mounts of the selected host."""

    problem: reactive[tuple[str, ...]] = reactive(())
    """A STALE or DOWN host's link problem (LinkProblem.lines): its headline says the numbers
    are old; with no numbers at all, the whole of it."""

    def render(self) -> RenderableType:
        if self.problem and not self.disks:
            return problem_text(self.problem)
        table = self._table()
        if self.problem:
            return Group(problem_text(self.problem[:1]), table)
        return table

    def _table(self) -> RenderableType:
        if not self.disks:
            return Text("no disks reported", style="dim")
        wide = self.size.width >= WIDE
        table = Table(box=None, padding=(0, 1), pad_edge=False)
        table.add_column("mount", no_wrap=True, overflow="ellipsis", max_width=24)
        if wide:
            table.add_column("size", justify="right")
            table.add_column("avail", justify="right")
        table.add_column("use%", justify="right")
        table.add_column("bytes", no_wrap=True)
        if wide:
            # "itot" beside "ifree" and "iuse%": a sixth letter no longer fits once sizes
            # carry their unit (252GiB, not 252G).
            table.add_column("itot", justify="right")
            table.add_column("ifree", justify="right")
        table.add_column("iuse%", justify="right")
        table.add_column("inodes", no_wrap=True)
        failed = [d for d in self.disks if d.error]
        for d in self.disks:
            if d.error:
                continue
            cells: list[Text] = [box_text(d.path)]  # box text: never markup
            if wide:
                cells += [box_text(fmt_bytes(d.size_bytes)), box_text(fmt_bytes(d.avail_bytes))]
            cells += [
                box_text(fmt_pct(d.bytes_pct), LEVEL_COLOR[d.bytes_level]),
                bar(d.bytes_pct, d.bytes_level),
            ]
            if wide:
                cells += [box_text(fmt_count(d.inodes_total)), box_text(fmt_count(d.inodes_free))]
            cells += [
                box_text(fmt_pct(d.inodes_pct), LEVEL_COLOR[d.inodes_level]),
                bar(d.inodes_pct, d.inodes_level),
            ]
            table.add_row(*cells)
        if not failed:
            return table
        # A path that could not be read is one line of its own ("/workspace: not mounted"),
        # never a cell: a long error in a narrow column wrapped and broke the table.
        lines = [box_text(f"{d.path}: {d.error}", "red", no_wrap=True, overflow="ellipsis")
                 for d in failed]
        return Group(table, *lines) if len(failed) < len(self.disks) else Group(*lines)
