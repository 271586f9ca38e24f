"""SVG screenshots of the control room for the README: ``make screenshots``.

    python -m gpuroom.tui.room.screenshots OUT_DIR [--only NAME ...] [--data DIR]

Each picture is the real ``GpuroomApp`` on a ``StaticFleet`` loaded from a committed scenario
recording (tests/data/scenario-*.json), drawn headless at a fixed terminal size. The clock is
the recording's ``now``, TZ is UTC and the SVG title is fixed, so the same commit always writes
the same bytes: a changed screenshot in a diff is a changed screen.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.room.app import GpuroomApp

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "tests" / "data"


@dataclass(frozen=True)
class Shot:
    """One screenshot: which recording, how big a terminal, which keys before the picture."""

    name: str  # file stem in OUT_DIR
    scenario: str  # tests/data/scenario-<scenario>.json
    size: tuple[int, int]
    title: str  # the SVG window title (export_screenshot would otherwise use the app title)
    keys: tuple[str, ...] = ()
    caption: str = ""  # what the picture shows, for the README


SHOTS: tuple[Shot, ...] = (
    Shot("healthy-200x60", "healthy", (200, 60), "gpuroom: healthy fleet",
         caption="A healthy fleet: hosts, the selected host's queue, GPUs, log and disks."),
    Shot("healthy-80x24", "healthy", (80, 24), "gpuroom: 80x24",
         caption="The same fleet in an 80x24 terminal: panes stack, the key numbers stay."),
    Shot("throttle", "throttle", (160, 45), "gpuroom: throttling GPU",
         caption="A GPU held back by HW slowdown / power brake, with its reasons."),
    Shot("inode", "inode", (160, 45), "gpuroom: inode alarm",
         caption="A disk at 99% of its inodes while df -h still looks fine."),
    Shot("failed", "failed", (160, 45), "gpuroom: failed job",
         caption="A job that failed, its attempts and the tail of its log."),
    Shot("stale", "stale", (160, 45), "gpuroom: STALE host", keys=("j", "enter"),
         caption="A host whose polls stopped answering: last known values, marked STALE."),
    Shot("help", "healthy", (160, 45), "gpuroom: keys", keys=("question_mark",),
         caption="The help screen (?): every key, also reachable from ctrl+p."),
)


def load_app(data_dir: Path, scenario: str) -> tuple[GpuroomApp, StaticFleet]:
    data = json.loads((data_dir / f"scenario-{scenario}.json").read_text())
    fleet = StaticFleet.from_scenario(data)
    now = float(data["now"])
    return GpuroomApp(fleet, clock=lambda: now), fleet


async def render(shot: Shot, data_dir: Path = DEFAULT_DATA) -> str:
    """The SVG of ``shot``."""
    app, fleet = load_app(data_dir, shot.scenario)
    async with app.run_test(size=shot.size) as pilot:
        # One recorded poll handled at a time, so the sparklines hold the whole series
        # (polls fed together would merge into one HostChanged).
        for _ in fleet.play_backlog():
            await pilot.pause()
        await pilot.pause()
        if shot.keys:
            await pilot.press(*shot.keys)
            await pilot.pause()
        svg: str = app.export_screenshot(title=shot.title)
    return svg


def pin_timezone() -> None:
    # Ages are computed from the fixed clock, but clock times on screen use the local zone.
    os.environ["TZ"] = "UTC"
    time.tzset()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpuroom.tui.room.screenshots", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("out", type=Path, help="directory for the SVG files")
    parser.add_argument("--only", nargs="+", choices=[s.name for s in SHOTS], default=None,
                        help="just these screenshots")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="folder with scenario-*.json (default: tests/data)")
    args = parser.parse_args(argv)
    pin_timezone()
    args.out.mkdir(parents=True, exist_ok=True)
    for shot in SHOTS:
        if args.only and shot.name not in args.only:
            continue
        path = args.out / f"{shot.name}.svg"
        path.write_text(asyncio.run(render(shot, args.data)), encoding="utf-8")
        print(f"{path}  {shot.size[0]}x{shot.size[1]}  {shot.caption}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
