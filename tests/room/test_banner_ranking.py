"""The banner never hides a critical item behind warnings (issue 17 item 5): every source is
ranked together before the cut, and "+N more" counts everything not shown."""

from __future__ import annotations

from textual.app import App, ComposeResult

from gpuroom.tui.present.banner import Danger, fleet_dangers
from gpuroom.tui.rules.clock import banner_lines
from gpuroom.tui.rules.doctor import Finding
from gpuroom.widgets.banner import DangerBanner

WARNINGS = [Finding("U7", "warn", f"box{n}", f"inodes {80 + n}% on /data", "", "")
            for n in range(4)]
FAILED = Danger("crit", "box9", "CRITICAL box9: job train failed by SIGKILL")


def test_a_failed_job_ranks_above_four_doctor_warnings() -> None:
    items = fleet_dangers(banner_lines(WARNINGS, [], limit=None), [FAILED])
    assert len(items) == 5
    assert items[0] == FAILED
    assert [d.level for d in items[1:]] == ["warn"] * 4
    # The old cut: three doctor lines first, the failed job fourth and off the banner.
    assert len(banner_lines(WARNINGS, [])) == 3


def test_criticals_keep_their_own_order_ahead_of_warnings() -> None:
    crit = Finding("U22", "critical", "box1", "GPU fell off the bus", "", "")
    items = fleet_dangers(banner_lines([*WARNINGS, crit], [], limit=None), [FAILED])
    assert [d.level for d in items] == ["crit", "crit", "warn", "warn", "warn", "warn"]
    assert items[0].text.startswith("CRITICAL box1: GPU fell off the bus")
    assert items[1] == FAILED


class _BannerApp(App[None]):
    def __init__(self, items: tuple[Danger, ...]) -> None:
        super().__init__()
        self._items = items

    def compose(self) -> ComposeResult:
        yield DangerBanner()

    def on_mount(self) -> None:
        self.query_one(DangerBanner).items = self._items


async def test_the_banner_shows_the_critical_and_counts_every_hidden_item() -> None:
    app = _BannerApp(fleet_dangers(banner_lines(WARNINGS, [], limit=None), [FAILED]))
    async with app.run_test(size=(120, 10)) as pilot:
        await pilot.pause()
        shown = str(app.query_one(DangerBanner).render())
        assert shown.splitlines()[0] == "!! CRITICAL box9: job train failed by SIGKILL"
        assert "(+2 more)" in shown
        assert app.query_one(DangerBanner).has_class("-crit")
