"""`gpuroom mcp`: a Model Context Protocol server on stdio for coding agents (the server is
tui/cli/mcp_server.py, imported only when the verb runs: the SDK is no cost to other verbs)."""

from __future__ import annotations

import argparse
from typing import Any

from gpuroom.tui.cli.load import load_config


def cmd_mcp(args: argparse.Namespace) -> int:
    load_config(args)  # a broken hosts.toml says so now, on stderr, not at the first tool call
    from gpuroom.tui.cli.mcp_server import build_server

    build_server(args, args.allow_actions).run("stdio")
    return 0


def add_cli(sub: Any) -> None:
    p = sub.add_parser("mcp", help="a Model Context Protocol server on stdio, for coding agents "
                       "(read only unless --allow-actions; never teardown or autostop)")
    p.add_argument("--allow-actions", action="store_true",
                   help="also offer queue_add, job_kill, job_relaunch, pull and wait_for")
    p.set_defaults(func=cmd_mcp)
