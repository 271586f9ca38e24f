"""GPU pane, nvidia-smi dmon-like: power, temp, util, clocks vs max, throttle, history."""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from gpuroom.tui.present.format import fmt_cut, fmt_whole, sparkline
from gpuroom.tui.present.gpus import GpuRow, GpuView

WIDE = 100  # columns from which VRAM and the history sparklines fit beside the numbers
# Below this the memory clock gives way, so the throttle reasons (U23) keep their room.
MEM_CLOCK_FROM = 72
THROTTLE_MIN = 8  # "throttle": the column's header


def problem_text(lines: tuple[str, ...]) -> Text:
    """A host's link problem (present/hosts.py LinkProblem.lines): the headline in red, the
    cause, the fix in yellow; each line wraps, none is cut."""
    text = Text()
    for n, line in enumerate(lines):
        style = "bold red" if n == 0 else "yellow" if line.startswith("Fix: ") else ""
        text.append(("\n" if n else "") + line, style=style)
    return text


def _clock(cur: float | None, top: float | None) -> Text:
    text = Text(f"{fmt_whole(cur)}/{fmt_whole(top)}")
    # U21/U23: an SM clock far below max while busy is the throttling/starvation tell.
    if cur is not None and top and cur < 0.7 * top:
        text.stylize("yellow")
    return text


class GpuPanel(Widget):
    """Per-GPU dmon-like rows; "no GPU (reason)" when the box has none."""

    DEFAULT_CSS = """
    GpuPanel { height: 1fr; border-title-color: $text-muted; }
    """

    view: reactive[GpuView | None] = reactive(None)
    """The selected host's GPUs with their recent SM clock and power history."""

    def watch_view(self, view: GpuView | None) -> None:
        self.border_title = Text(f"gpu {view.host}" if view else "gpu")

    def render(self) -> RenderableType:
        view = self.view
        if view is None:
            return Text("no host selected", style="dim")
        if view.problem:
            block = problem_text(view.problem)
            if not view.rows:
                return block
            return Group(block, self._table(view))
        if not view.rows:
            return Text(f"no GPU ({view.absence})", style="dim")
        return self._table(view)

    def _table(self, view: GpuView) -> Table:
        wide = self.size.width >= WIDE
        mem_clock = self.size.width >= MEM_CLOCK_FROM
        table = Table(box=None, padding=(0, 1), pad_edge=False, expand=False)
        columns = [("#", 1), ("pwr/lim W", 9), ("temp", 4), ("sm%", 3), ("mem%", 4),
                   ("sm MHz", 9)]
        if mem_clock:
            columns.append(("mem MHz", 9))
        for name, width in columns:
            table.add_column(name, justify="right", no_wrap=True, min_width=width)
        if wide:
            table.add_column("vram GiB", justify="right", no_wrap=True)
            table.add_column("sm hist", no_wrap=True)
            table.add_column("pwr hist", no_wrap=True)
        rows: list[list[Text | str]] = []
        for i, g in enumerate(view.rows):
            cells: list[Text | str] = [
                str(g.index),
                f"{fmt_whole(g.power_w)}/{fmt_whole(g.power_limit_w)}",
                fmt_whole(g.temp_c, "C"),
                fmt_whole(g.util_gpu),
                fmt_whole(g.util_mem),
                _clock(g.sm_mhz, g.sm_max_mhz),
            ]
            if mem_clock:
                cells.append(_clock(g.mem_mhz, g.mem_max_mhz))
            if wide:
                cells.append(_vram(g))
                cells.append(_hist(view.sm_history, i, g.sm_max_mhz))
                cells.append(_hist(view.power_history, i, g.power_limit_w))
            rows.append(cells)
        # The throttle list gets what the other columns leave of the pane, and its cut ends
        # in "…" inside the pane (rich crops a no_wrap cell that does not fit without a mark).
        used = sum(max([cell_len(str(c.header)), c.min_width or 0,
                        *(_width(row[n]) for row in rows)]) + 2
                   for n, c in enumerate(table.columns))
        room = max(THROTTLE_MIN, self.size.width - used) if self.size.width else None
        table.add_column("throttle", no_wrap=True, min_width=THROTTLE_MIN)
        for cells, g in zip(rows, view.rows, strict=True):
            table.add_row(*cells, _throttle(g, room))
        return table


def _width(cell: Text | str) -> int:
    return cell.cell_len if isinstance(cell, Text) else cell_len(cell)


def _hist(history: tuple[tuple[float | None, ...], ...], i: int, top: float | None) -> Text:
    values = history[i] if i < len(history) else ()
    return Text(sparkline(values, top), style="cyan")


def _vram(g: GpuRow) -> str:
    if g.mem_used_mib is None or g.mem_total_mib is None:
        return "-"
    return f"{fmt_whole(g.mem_used_mib / 1024)}/{fmt_whole(g.mem_total_mib / 1024)}"


def _throttle(g: GpuRow, room: int | None) -> Text:
    if not g.throttle:
        return Text("-", style="dim")
    text = g.throttle_short
    return Text(fmt_cut(text, room) if room else text, style="bold yellow")
