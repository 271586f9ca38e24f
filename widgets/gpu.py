"""GPU pane, nvidia-smi dmon-like: power, temp, util, clocks vs max, throttle, history."""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from gpuroom.tui.present.box import BoxView
from gpuroom.tui.present.format import fmt_cut, fmt_whole, sparkline
from gpuroom.tui.present.gpus import GpuRow, GpuView, ProcRow
from gpuroom.tui.present.levels import Level
from gpuroom.tui.present.text import box_text, plain

WIDE = 100  # columns from which VRAM and the history sparklines fit beside the numbers
# Below this the memory clock gives way, so the throttle reasons (U23) keep their room.
MEM_CLOCK_FROM = 72
THROTTLE_MIN = 8  # "throttle": the column's header
LEVEL_STYLE: dict[Level, str] = {"ok": "", "warn": "bold yellow", "crit": "bold red"}
MARK_STYLE = {"job": "green", "display": "dim", "foreign": "bold yellow", "zombie": "bold red"}
COMMAND_MIN = 8


def problem_text(lines: tuple[str, ...]) -> Text:
    """A host's link problem (present/hosts.py LinkProblem.lines): the headline in red, the
    cause, the fix in yellow; each line wraps, none is cut."""
    text = Text()
    for n, line in enumerate(lines):
        style = "bold red" if n == 0 else "yellow" if line.startswith("Fix: ") else ""
        text.append(("\n" if n else "") + plain(line), style=style)
    return text


def _clock(cur: float | None, top: float | None) -> Text:
    text = box_text(f"{fmt_whole(cur)}/{fmt_whole(top)}")
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
    show_processes: reactive[bool] = reactive(False)
    """Key p: the whole pane lists the GPU processes instead of the GPU rows."""

    def watch_view(self, view: GpuView | None) -> None:
        self._titles(view)

    def watch_show_processes(self, _: bool) -> None:
        self._titles(self.view)

    def _titles(self, view: GpuView | None) -> None:
        if view is None:
            self.border_title = box_text("gpu")
            return
        count = len(view.processes)
        # The section under the GPU rows may be cut on a many-GPU box: say how to see it all.
        if self.show_processes:
            title = f"gpu processes {view.host} (p: GPU rows)"
        else:
            title = f"gpu {view.host}" + (f" (p: {count} processes)" if count else "")
        self.border_title = box_text(title)

    def render(self) -> RenderableType:
        view = self.view
        if view is None:
            return Text("no host selected", style="dim")
        parts: list[RenderableType] = []
        if view.problem:
            parts.append(problem_text(view.problem))
        elif not view.rows:
            parts.append(box_text(f"no GPU ({view.absence})", "dim"))
        if view.box is not None and not view.problem:
            parts.append(self._box_line(view.box))
        if view.rows and not self.show_processes:
            parts.append(self._table(view))
        if view.processes:
            parts.append(self._processes(view.processes))
        return parts[0] if len(parts) == 1 else Group(*parts)

    def _box_line(self, box: BoxView) -> Text:
        """One line: the job cgroup's CPU and memory against quota and limit, load per vCPU,
        and their history when the pane is wide."""
        cpu, mem, load = box.parts()
        cpu_hist, mem_hist = box.sparklines()
        wide = self.size.width >= WIDE
        # One line, cut with "…" at a narrow pane's edge, never wrapped over the GPU rows.
        text = Text("box ", style="bold", no_wrap=True, overflow="ellipsis")
        text.append(cpu + (" quota" if box.quota and wide else ""),
                    style=LEVEL_STYLE[box.cpu_level])
        if wide:
            text.append(" " + cpu_hist, style="cyan")
        text.append("  ")
        text.append(mem, style=LEVEL_STYLE[box.mem_level])
        if wide:
            text.append(" " + mem_hist, style="cyan")
        text.append("  " + load)
        return text

    def _processes(self, procs: tuple[ProcRow, ...]) -> Table:
        """nvitop's process list: who holds each GPU, and what gpuroom makes of it."""
        table = Table(box=None, padding=(0, 1), pad_edge=False, expand=False)
        for name in ("gpu", "pid", "user", "type", "MiB", "what"):
            table.add_column(box_text(name), justify="right" if name in ("pid", "MiB") else "left",
                             no_wrap=True)
        rows = [[p.gpu, p.pid, fmt_cut(p.user, 10), p.type, p.vram, p.mark_text]
                for p in procs]
        used = sum(max([cell_len(str(c.header)), *(cell_len(r[n]) for r in rows)]) + 2
                   for n, c in enumerate(table.columns))
        room = max(COMMAND_MIN, self.size.width - used) if self.size.width else None
        table.add_column("command", no_wrap=True, min_width=COMMAND_MIN)
        # Every cell is the box's text (a process named "train.py [/]" is no markup).
        for cells, p in zip(rows, procs, strict=True):
            table.add_row(*(box_text(c) for c in cells[:5]),
                          box_text(cells[5], MARK_STYLE[p.mark]),
                          box_text(fmt_cut(p.command, room) if room else p.command))
        return table

    def _table(self, view: GpuView) -> Table:
        wide = self.size.width >= WIDE
        mem_clock = self.size.width >= MEM_CLOCK_FROM
        table = Table(box=None, padding=(0, 1), pad_edge=False, expand=False)
        columns = [("#", 1), ("pwr/lim W", 9), ("temp", 4), ("sm%", 3), ("mem%", 4),
                   ("sm MHz", 9)]
        if mem_clock:
            columns.append(("mem MHz", 9))
        for name, width in columns:
            table.add_column(box_text(name), justify="right", no_wrap=True, min_width=width)
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
            table.add_row(*(box_text(c) if isinstance(c, str) else c for c in cells),
                          _throttle(g, room))
        return table


def _width(cell: Text | str) -> int:
    return cell.cell_len if isinstance(cell, Text) else cell_len(cell)


def _hist(history: tuple[tuple[float | None, ...], ...], i: int, top: float | None) -> Text:
    values = history[i] if i < len(history) else ()
    return box_text(sparkline(values, top), "cyan")


def _vram(g: GpuRow) -> str:
    if g.mem_used_mib is None or g.mem_total_mib is None:
        return "-"
    return f"{fmt_whole(g.mem_used_mib / 1024)}/{fmt_whole(g.mem_total_mib / 1024)}"


def _throttle(g: GpuRow, room: int | None) -> Text:
    if not g.throttle:
        return Text("-", style="dim")
    text = g.throttle_short
    return box_text(fmt_cut(text, room) if room else text, "bold yellow")
