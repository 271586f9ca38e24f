"""`gpuroom pull HOST [JOB]` and `gpuroom gate HOST`: outputs home, then the teardown gate.

The gate never stops anything: exit 0 says "safe to stop paying", 5 says what is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import gpuroom.tui.config as cfg
from gpuroom.tui.cli.load import load_config, unknown_host
from gpuroom.tui.errors import GpuroomError, describe
from gpuroom.tui.fleet.live import Fleet, watched_mounts
from gpuroom.tui.fleet.outputs import check_gate, pull_jobs, pull_root, result_lines
from gpuroom.tui.present.format import fmt_progress
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.transport.link import LinkError, RemoteFileError
from gpuroom.tui.transport.pull import METHODS, Progress

EXIT_FAILED = 1
EXIT_UNREACHABLE = 3  # as every verb says it (gpuroom --help)
EXIT_NOT_SAFE = 5
GATE_EXITS = ("exit status: 0 safe to stop paying; 5 not safe (the list says what is "
              "missing); 3 the host did not answer; 1 the check failed; 2 usage or config")
PROGRESS_EVERY_S = 0.5


def add_cli(sub: Any) -> None:
    p = sub.add_parser("pull", help="pull a job's checkpoint dir (default: every job's)")
    p.add_argument("host")
    p.add_argument("job", nargs="?", default=None)
    p.add_argument("--to", metavar="DIR", help="local root (default: the host's pull_to)")
    p.add_argument("--method", choices=METHODS, default="auto",
                   help="auto: big files through ssh's own SFTP (openssh), the rest through "
                        "SFTP on gpuroom's link (sftp); rsync only when asked, or when ssh "
                        "cannot open its session (measured: bench/pull.py)")
    p.set_defaults(func=cmd_pull)
    p = sub.add_parser("gate", help="teardown gate: is it safe to stop paying for HOST?",
                       epilog=GATE_EXITS)
    p.add_argument("host")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_gate)


def _fleet(args: argparse.Namespace) -> tuple[Fleet, cfg.HostConfig]:
    config = load_config(args)
    hosts = {h.name: h for h in config.effective_hosts()}
    if args.host not in hosts:
        raise unknown_host(config, args.host)
    return Fleet(config), hosts[args.host]


class _ProgressLine:
    """One progress line on stderr, rewritten in place; ``end`` closes it, so whatever is
    printed next (an error, the report) starts a line of its own."""

    def __init__(self) -> None:
        self._last = 0.0
        self._open = False

    def show(self, jid: str, p: Progress) -> None:
        now = time.monotonic()
        if not p.total or (now - self._last < PROGRESS_EVERY_S and p.done < p.total):
            return  # nothing to move (only empty files) is said by the report, not "0B/0B"
        self._last = now
        self._open = True
        print(f"\r{sanitize_line(jid)} {fmt_progress(p.done, p.total, p.rate_bps, p.eta_s)}   ",
              end="", file=sys.stderr, flush=True)

    def end(self) -> None:
        if self._open:
            self._open = False
            print(file=sys.stderr, flush=True)


async def _pull(args: argparse.Namespace) -> int:
    fleet, host = _fleet(args)
    link = fleet.link(args.host)
    line = _ProgressLine()
    root = pull_root(host, args.to)
    try:
        results = await pull_jobs(link, root, args.job, on_progress=line.show,
                                  method=args.method)
    except GpuroomError as exc:  # no such job, the link, the manifest
        line.end()
        print(f"gpuroom pull: {describe(exc)}", file=sys.stderr)
        return 1
    finally:
        line.end()
        await fleet.close()
    if not results:
        print(f"{args.host}: no job has a checkpoint dir to pull; nothing written under {root}")
    for jid, result in results:
        for text in result_lines(jid, result):
            print(text)
    return 1 if any(not r.ok for _, r in results) else 0


async def _gate(args: argparse.Namespace) -> int:
    fleet, host = _fleet(args)
    try:
        result = await check_gate(fleet.link(args.host), watched_mounts(host))
    except GpuroomError as exc:
        print(f"gpuroom gate: {describe(exc)}", file=sys.stderr)
        # Not knowing is not "not safe": an unreachable box says 3, like status and doctor.
        unreachable = isinstance(exc, LinkError) and not isinstance(exc, RemoteFileError)
        return EXIT_UNREACHABLE if unreachable else EXIT_FAILED
    finally:
        await fleet.close()
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        for item in result.items:
            print(f"[{'x' if item.ok else ' '}] {item.name}: {sanitize_line(item.detail)}")
        print(f"{args.host}: " + ("safe to stop" if result.safe else "NOT safe to stop"))
    return 0 if result.safe else EXIT_NOT_SAFE


def cmd_pull(args: argparse.Namespace) -> int:
    return asyncio.run(_pull(args))


def cmd_gate(args: argparse.Namespace) -> int:
    return asyncio.run(_gate(args))
