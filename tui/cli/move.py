"""`gpuroom queue move HOST JOB --to HOST2` (tui/fleet/move.py does the work)."""

from __future__ import annotations

import argparse
from typing import Any

from gpuroom.tui.cli.load import load_config
from gpuroom.tui.cli.tables import print_line
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.fleet.move import move_job


def add_cli(qsub: Any) -> None:
    p = qsub.add_parser("move", help="go on on another host: kill the job, push its newest "
                        "verified checkpoint there, add the identical command")
    p.add_argument("host")
    p.add_argument("job")
    p.add_argument("--to", required=True, metavar="HOST2")


async def run_move(args: argparse.Namespace) -> int:
    config = load_config(args)
    fleet = Fleet(config)
    try:
        src, dst = fleet.link(args.host), fleet.link(args.to)
        if src.name == dst.name:
            print_line(f"gpuroom queue move: {args.job} is on {args.host} already", "red",
                       err=True)
            return 2
        move = await move_job(src, dst, args.job, settings=config.settings,
                              say=lambda line: print_line(line, "dim"))
    finally:
        await fleet.close()
    print_line(move.line)
    return 0
