"""`gpuroom web`: the same room in a browser, served by textual-serve.

textual-serve starts one room per browser tab (``gpuroom`` with this config, as a process of
its own) and relays its screen over a websocket. Loopback unless ``--allow-remote``: whoever
reaches the page has the room's keys (kill, teardown).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from gpuroom.tui.cli.listen import add_listen_args, parse_listen, remote_notice
from gpuroom.tui.cli.load import load_config
from gpuroom.tui.transport.web_serve import serve_room


def room_command(config_path: Path | None) -> str:
    """The command textual-serve runs per tab, quoted once (it hands it to a shell). With no
    config file the room shows this machine, as ``gpuroom`` does."""
    config = ["--config", str(config_path)] if config_path is not None else []
    return shlex.join([sys.executable, "-m", "gpuroom.tui.cli.main", *config])


def cmd_web(args: argparse.Namespace) -> int:
    host, port = parse_listen(args.listen, allow_remote=args.allow_remote)
    config = load_config(args)  # a bad config is said here, not in each tab
    notice = remote_notice(host)
    if notice:
        print(f"gpuroom web: {notice}", file=sys.stderr, flush=True)
    url_host = f"[{host}]" if ":" in host else host
    url = f"http://{url_host}:{port}"
    print(f"gpuroom web: serving the room at {url} ({len(config.effective_hosts())} host(s))",
          flush=True)
    command = room_command(config.path if config.path.exists() else None)
    serve_room(command, host, port, url)
    return 0


def add_cli(sub: Any) -> None:
    p = sub.add_parser("web", help="serve the room in a browser (textual-serve)")
    add_listen_args(p, "127.0.0.1:8000", "the room")
    p.set_defaults(func=cmd_web)
