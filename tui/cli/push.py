"""`gpuroom push HOST SRC [DEST]`: your code onto a box, resumable and checked by sha256 there
(tui/transport/codepush.py). DEST defaults to the host's ``workdir``, else ``~/<SRC's name>``."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from gpuroom.tui.cli.load import host_config, load_config
from gpuroom.tui.cli.tables import print_line
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.present.format import fmt_bytes
from gpuroom.tui.transport.codepush import check_dest, default_dest, push_tree


def add_cli(sub: Any) -> None:
    p = sub.add_parser("push", help="copy your code to a host (what git would commit; "
                       "resumable; each file's sha256 checked on the box)")
    p.add_argument("host")
    p.add_argument("src", help="your code's directory here")
    p.add_argument("dest", nargs="?", default=None,
                   help="the directory on the box (default: the host's workdir, else "
                        "~/<SRC's name>)")
    p.set_defaults(func=cmd_push)


def cmd_push(args: argparse.Namespace) -> int:
    config = load_config(args)
    host = host_config(config, args.host)
    src = Path(args.src).expanduser()
    dest = check_dest(args.dest if args.dest is not None else default_dest(src, host.workdir))

    async def run() -> int:
        fleet = Fleet(config)
        try:
            result = await push_tree(fleet.link(args.host), src, dest)
        finally:
            await fleet.close()
        sent = (f"sent {result.sent_files} file(s), {fmt_bytes(result.sent_bytes)}"
                if result.sent_files else "nothing to send: the box had every file")
        print_line(f"{args.host}: pushed {result.files} file(s) of {src} ({result.selection}) "
                   f"to {dest}: {sent}; {result.verified} checked by sha256 on the box")
        return 0

    return asyncio.run(run())
