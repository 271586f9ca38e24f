"""`gpuroom autostop HOST --after 45m -- STOP COMMAND...`: arm the box's own watchdog
(remote/autostop.py), which runs that command on the box once it has done nothing for the
time given, while this machine sleeps. ``--disarm`` and ``--postpone 30m`` act on it; with
neither, it says whether it is armed. A command that destroys the box (terminate, destroy,
delete, ...) is refused unless ``--allow-destroy`` (pull every checkpoint home first).

Per platform, the stop verb in the user's own words: a bare box ``sudo shutdown -h now``;
RunPod from inside the pod ``runpodctl stop pod $RUNPOD_POD_ID`` (give the id itself).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import re
import socket
from typing import Any

from gpuroom.tui.cli.load import load_config
from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.snapshot import load_answer

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smh]?)$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


class AutostopError(GpuroomError):
    exit_code = 2


def parse_duration(text: str) -> float:
    """``45m``, ``2h``, ``90s`` or plain seconds."""
    m = _DURATION.match(text.strip())
    if m is None or float(m.group(1)) <= 0:
        raise AutostopError(f"{text!r} is not a duration", "write it as 45m, 2h or 90s")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def _options_then_command(args: argparse.Namespace) -> list[str]:
    """The stop command; options written after HOST, which REMAINDER swallowed (``autostop
    HOST --after 45m -- cmd``), are parsed into ``args`` first (as `queue add` does)."""
    words = list(args.argv)
    cut = words.index("--") if "--" in words else len(words)
    if cut:
        args.autostop_parser.parse_args([*words[:cut], args.host], namespace=args)
    args.argv = []
    return words[cut + 1:]


async def _call(args: argparse.Namespace) -> dict[str, Any]:
    command = _options_then_command(args)
    config = load_config(args)
    if args.host not in {h.name for h in config.effective_hosts()}:
        raise AutostopError(f"no host {args.host!r} in {config.path}", "gpuroom hosts list")
    if args.disarm:
        verb = ["disarm"]
    elif args.postpone is not None:
        verb = ["postpone", str(parse_duration(args.postpone))]
    elif args.after is not None:
        argv = command
        if not argv:
            raise AutostopError("--after needs the stop command after --",
                                f"gpuroom autostop {args.host} --after 45m -- sudo shutdown "
                                "-h now")
        verb = ["arm", "--idle", str(parse_duration(args.after)),
                "--by", f"{getpass.getuser()}@{socket.gethostname()}",
                *(["--allow-destroy"] if args.allow_destroy else []), "--", *argv]
    else:
        verb = ["status"]
    fleet = Fleet(config)
    try:
        result = await fleet.link(args.host).helper("autostop", *verb, timeout_s=60.0)
    finally:
        await fleet.close()
    try:
        doc = load_answer(result.stdout)  # the one bounded reader of a box's answer
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise AutostopError(f"{args.host}: autostop answered no JSON ({result.failure()})",
                            f"gpuroom probe {args.host} (is the helper current?)")
    if not doc.get("ok"):
        raise AutostopError(f"{args.host}: {sanitize_line(str(doc.get('error')))}",
                            "use the platform's stop verb, or --allow-destroy after pulling "
                            "every checkpoint home")
    return doc


def cmd_autostop(args: argparse.Namespace) -> int:
    doc = asyncio.run(_call(args))
    armed = doc.get("armed")
    if "disarmed" in doc:
        print(f"{args.host}: autostop " + ("disarmed" if doc["disarmed"] else "was not armed"))
    elif isinstance(armed, dict):
        words = " ".join(str(a) for a in armed.get("argv") or [])
        print(sanitize_line(f"{args.host}: autostop armed: `{words}` after "
                            f"{float(armed.get('idle_s') or 0) / 60:.0f} min idle (armed by "
                            f"{armed.get('by')})"))
    else:
        print(f"{args.host}: autostop not armed")
    return 0


def add_cli(sub: Any) -> None:
    p = sub.add_parser("autostop", help="arm the box's own idle watchdog that runs your stop "
                                        "command (opt-in)")
    p.add_argument("host")
    p.add_argument("--after", metavar="DURATION", help="idle this long (45m, 2h): then stop")
    p.add_argument("--allow-destroy", action="store_true",
                   help="accept a command that destroys the box and its disk")
    p.add_argument("--disarm", action="store_true")
    p.add_argument("--postpone", metavar="DURATION")
    p.add_argument("argv", nargs=argparse.REMAINDER, help="-- the stop command, as words")
    p.set_defaults(func=cmd_autostop, autostop_parser=p)


__all__ = ["add_cli", "parse_duration"]
