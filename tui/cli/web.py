"""`gpuroom web`: the same room in a browser, served by textual-serve.

textual-serve starts one room per browser tab (``gpuroom`` with this config, as a process of
its own) and relays its screen over a websocket. Whoever drives that socket has the room's
keys (kill, teardown, a job on the local host), so the server (tui/transport/web_serve.py)
serves only the URL it prints, with its token, to pages it served itself, under its own
address, and at most ``--max-rooms`` rooms at once. Loopback unless ``--allow-remote``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from gpuroom.tui.cli.listen import ListenError, add_listen_args, parse_listen, remote_notice
from gpuroom.tui.cli.load import load_config
from gpuroom.tui.transport.web_serve import DEFAULT_MAX_ROOMS, serve_room


def room_command(config_path: Path | None) -> str:
    """The command textual-serve runs per tab, quoted once (it hands it to a shell). With no
    config file the room shows this machine, as ``gpuroom`` does."""
    config = ["--config", str(config_path)] if config_path is not None else []
    return shlex.join([sys.executable, "-m", "gpuroom.tui.cli.main", *config])


def cmd_web(args: argparse.Namespace) -> int:
    if args.max_rooms < 1:
        raise ListenError(f"--max-rooms {args.max_rooms}: at least one room is needed",
                          "e.g. gpuroom web --max-rooms 4")
    host, port = parse_listen(args.listen, allow_remote=args.allow_remote)
    config = load_config(args)  # a bad config is said here, not in each tab
    notice = remote_notice(host, "only the printed URL's token opens the room")
    if notice:
        print(f"gpuroom web: {notice}", file=sys.stderr, flush=True)
    hosts = len(config.effective_hosts())

    def ready(url: str) -> None:
        print(f"gpuroom web: serving the room at {url} ({hosts} host(s)); open this URL, "
              "its token is the key to the room", flush=True)

    command = room_command(config.path if config.path.exists() else None)
    try:
        serve_room(command, host, port, max_rooms=args.max_rooms, ready=ready)
    except OSError as exc:
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                          "pick another port with --listen, or stop what holds it") from None
    return 0


def add_cli(sub: Any) -> None:
    p = sub.add_parser("web", help="serve the room in a browser (textual-serve)")
    add_listen_args(p, "127.0.0.1:8000", "the room", "the printed URL's token is the key")
    p.add_argument("--max-rooms", type=int, default=DEFAULT_MAX_ROOMS, metavar="N",
                   help=f"rooms (browser tabs) open at once, each a process (default "
                        f"{DEFAULT_MAX_ROOMS}); one more is refused")
    p.set_defaults(func=cmd_web)
