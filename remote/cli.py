"""``gpuroom-remote``: the helper's subcommands. Every remote action is one of these.

The jump host calls them with an argv list quoted once (gpuroom.tui.transport.link); no shell
pipelines travel over SSH.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Dict, List, Optional

from . import __version__, selfexit, selfhash

# How long a one-shot verb may live on the box, whatever it is stuck on; the jump side gave
# up long before. Verbs not listed bound themselves (manifest, queue's read verbs, serve per
# request) or are meant to run long (the queue's runner and job wrapper).
ONE_SHOT_DEADLINE_S = {"probe": 60.0, "version": 30.0, "du": 900.0, "rundirs": 300.0,
                       "secret": 120.0, "preempt": 120.0}


def _cmd_probe(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuroom-remote probe")
    parser.add_argument("--mount", action="append", default=[], help="extra path to statvfs")
    parser.add_argument("--request", default=None, help="the same JSON args serve takes")
    args = parser.parse_args(argv)
    from .probe import ProbeSession

    request = json.loads(args.request) if args.request else {}
    request.setdefault("mounts", [])
    request["mounts"] = list(request["mounts"]) + args.mount
    session = ProbeSession()
    try:
        doc = session.snapshot(request)
    finally:
        session.close()
    sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
    return 0


def _cmd_serve(argv: List[str]) -> int:
    from .serve import serve

    return serve()


def _cmd_version(argv: List[str]) -> int:
    sys.stdout.write(json.dumps({"version": __version__, "sha256": selfhash.own_sha256()}) + "\n")
    return 0


def _lazy(module: str, func: str = "main") -> Callable[[List[str]], int]:
    """Subcommands whose modules are heavy or optional load only when called."""

    def run(argv: List[str]) -> int:
        mod = __import__("gpuroom.remote." + module, fromlist=[func])
        return int(getattr(mod, func)(argv) or 0)

    return run


COMMANDS: Dict[str, Callable[[List[str]], int]] = {
    "probe": _cmd_probe,
    "serve": _cmd_serve,
    "version": _cmd_version,
    "queue": _lazy("queue"),
    "du": _lazy("diskuse"),
    "manifest": _lazy("manifest"),
    "secret": _lazy("secrets"),
    "rundirs": _lazy("rundirs"),
    "preempt": _lazy("preempt"),
    "autostop": _lazy("autostop"),
}


def main(argv: Optional[List[str]] = None) -> int:
    if argv is None:  # started as a program (the zipapp, python -m): its own deadlines apply
        selfexit.enable()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write("usage: gpuroom-remote {{{}}} ...\n".format(",".join(sorted(COMMANDS))))
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    command = COMMANDS.get(name)
    if command is None:
        known = ", ".join(sorted(COMMANDS))
        sys.stderr.write(f"gpuroom-remote: unknown command {name!r} (known: {known})\n")
        return 2
    if name in ONE_SHOT_DEADLINE_S:
        selfexit.exit_after(ONE_SHOT_DEADLINE_S[name])
    return command(rest)
