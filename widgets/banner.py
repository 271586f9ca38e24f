"""Danger banner: the 1-3 most urgent things across the whole fleet."""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text
from textual.geometry import Size
from textual.reactive import reactive
from textual.widget import Widget

from gpuroom.tui.present.banner import Danger, banner_line
from gpuroom.tui.present.text import plain

MAX_LINES = 3


class DangerBanner(Widget):
    """Most urgent items first; says "+N more" rather than growing past three lines."""

    DEFAULT_CSS = """
    DangerBanner { height: auto; max-height: 3; padding: 0 1; }
    DangerBanner.-crit { background: $error 30%; }
    DangerBanner.-warn { background: $warning 20%; }
    """

    items: reactive[tuple[Danger, ...]] = reactive((), layout=True)
    """Everything urgent, most urgent first (tui.view.dangers)."""

    def watch_items(self, items: tuple[Danger, ...]) -> None:
        levels = {d.level for d in items}
        self.set_class("crit" in levels, "-crit")
        self.set_class("crit" not in levels and "warn" in levels, "-warn")

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        # One line per shown item, whatever width the text was measured at: a line measured
        # before the banner knew its width came out as two, leaving a blank one under it.
        return max(1, min(len(self.items), MAX_LINES))

    def render(self) -> RenderableType:
        items = self.items
        if not items:
            return Text("fleet OK: nothing urgent", style="green")
        shown = list(items[:MAX_LINES])
        extra = len(items) - len(shown)
        width = self.content_size.width or 80
        text = Text(no_wrap=True, overflow="crop")
        for n, d in enumerate(shown):
            if n:
                text.append("\n")
            mark, style = ("!!", "bold red") if d.level == "crit" else ("! ", "bold yellow")
            more = f"   (+{extra} more)" if extra and n == len(shown) - 1 else ""
            text.append(f"{mark} ", style=style)
            # One screen line per item: a wrapped one pushed "+N more" off the banner.
            text.append(plain(banner_line(d.text, width - len(mark) - 1 - len(more))))
            text.append(more, style="dim")
        return text
