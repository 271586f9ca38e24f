"""`gpuroom watch`: the fleet with no screen, for a jump host where no terminal stays open.

It polls every host like the room does, mirrors running jobs' checkpoints home
(tui/fleet/mirror.py), moves --failover jobs off a host DOWN for failover_after_s and fences
their old copies (tui/fleet/live.py), printing one line per outcome; a failed mirror, a
failover and a fence are also POSTed to ``notify_url`` when the settings give one. Stop it
with ctrl+c (or ``--duration``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from gpuroom.tui.cli.load import load_config
from gpuroom.tui.config import Config
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.fleet.mirror import MirrorOutcome, mirror_default
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.transport.notify_http import NotifyError, UrlNotifier

EXIT_OK = 0
FIXES = {
    "failed": "check the host's link and disk; the mirror retries at the next poll",
    "failover": "nothing to do: the job goes on on the new host; the old copy is killed when "
                "its host answers again (stop paying for it: gpuroom gate)",
    "fenced": "nothing to do: it runs on the host it was moved to",
}


def add_cli(sub: Any) -> None:
    p = sub.add_parser("watch", help="poll and mirror checkpoints home with no screen")
    p.add_argument("--duration", type=float, default=None, metavar="S",
                   help="stop after S seconds (default: until ctrl+c)")
    p.set_defaults(func=cmd_watch)


def start_line(config: Config, duration: float | None) -> str:
    """What the watch watches, said once at start: until its first outcome it prints
    nothing, which read as a watch that does nothing."""
    hosts = ", ".join(f"{h.name} (mirror {'on' if mirror_default(h) else 'off'})"
                      for h in config.effective_hosts())
    s = config.settings
    until = f"for {duration:g}s" if duration is not None else "until ctrl+c"
    notify = "; alerts to notify_url" if s.notify_url else ""
    return sanitize_line(f"gpuroom watch: {hosts}; polled every {s.poll_interval_s:g}s, "
                         f"--failover jobs moved after {s.failover_after_s:g}s down{notify}; "
                         f"{until}")


async def _watch(args: argparse.Namespace) -> None:
    config = load_config(args)
    notifier = UrlNotifier(config.settings.notify_url) if config.settings.notify_url else None
    sends: set[asyncio.Task[None]] = set()

    async def notify(outcome: MirrorOutcome) -> None:
        assert notifier is not None
        try:
            fix = FIXES.get(outcome.status, FIXES["failed"])
            await notifier.send({"host": outcome.host, "id": f"mirror:{outcome.job}",
                                 "severity": "warn", "text": sanitize_line(outcome.line),
                                 "fix": fix})
        except NotifyError as exc:
            print(f"gpuroom watch: {sanitize_line(str(exc))}", file=sys.stderr, flush=True)

    def said(outcome: MirrorOutcome) -> None:
        # busy: the process pulling it says so itself
        if outcome.status not in ("current", "nothing", "busy"):
            # Names and reasons may quote the box: one inert line each.
            print(sanitize_line(outcome.line), flush=True)
        if outcome.status in ("failed", "failover", "fenced") and notifier is not None:
            task = asyncio.ensure_future(notify(outcome))
            sends.add(task)
            task.add_done_callback(sends.discard)

    print(start_line(config, args.duration), file=sys.stderr, flush=True)
    fleet = Fleet(config, mirror=True, on_mirror=said)
    runner = asyncio.ensure_future(fleet.run(lambda _host: None))
    try:
        await asyncio.wait([runner], timeout=args.duration)
    finally:
        runner.cancel()
        await asyncio.gather(runner, *sends, return_exceptions=True)
        await fleet.close()


def cmd_watch(args: argparse.Namespace) -> int:
    try:
        asyncio.run(_watch(args))
    except KeyboardInterrupt:
        pass
    return EXIT_OK
