"""`gpuroom watch`: the fleet with no screen, for a jump host where no terminal stays open.

It polls every host like the room does and alerts as the room does: each poll outcome goes
through the one monitor (tui/fleet/monitor.py: doctor, clocks, each ended job's log tail,
new critical items), every critical item is printed as one line and sent to
``notify_command`` and ``notify_url`` under the same renotify rules. It also mirrors running
jobs' checkpoints home (tui/fleet/mirror.py), moves --failover jobs off a host DOWN for
failover_after_s and fences their old copies (tui/fleet/live.py), printing one line per
outcome; a failed mirror, a failover and a fence are also POSTed to ``notify_url``. Stop it
with ctrl+c (or ``--duration``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from typing import Any

from gpuroom.tui.cli.load import load_config
from gpuroom.tui.config import Config
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.fleet.mirror import MirrorOutcome, mirror_default
from gpuroom.tui.fleet.monitor import Monitor
from gpuroom.tui.room.commands import run_user_command
from gpuroom.tui.rules.alerts import Alert
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.transport.notify_http import NotifyError, UrlNotifier

EXIT_OK = 0
SETTLE_S = 30.0  # how long alerts still being sent may take once watch stops
FIXES = {
    "failed": "check the host's link and disk; the mirror retries at the next poll",
    "failover": "nothing to do: the job goes on on the new host; the old copy is killed when "
                "its host answers again (stop paying for it: gpuroom gate)",
    "fenced": "nothing to do: it runs on the host it was moved to",
}


def add_cli(sub: Any) -> None:
    p = sub.add_parser("watch", help="poll, alert on every critical item and mirror "
                                     "checkpoints home, with no screen")
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


def _say(alert: Alert) -> None:
    print(alert.line, flush=True)  # already inert: the banner's own line


def _warn(line: str) -> None:
    print(f"gpuroom watch: {sanitize_line(line)}", file=sys.stderr, flush=True)


async def _watch(args: argparse.Namespace) -> None:
    config = load_config(args)
    settings = config.settings
    notifier = UrlNotifier(settings.notify_url) if settings.notify_url else None
    sends: set[asyncio.Task[None]] = set()

    async def notify(outcome: MirrorOutcome) -> None:
        assert notifier is not None
        try:
            fix = FIXES.get(outcome.status, FIXES["failed"])
            await notifier.send({"host": outcome.host, "id": f"mirror:{outcome.job}",
                                 "severity": "warn", "text": sanitize_line(outcome.line),
                                 "fix": fix})
        except NotifyError as exc:
            _warn(str(exc))

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
    monitor = Monitor(fleet, renotify_s=settings.renotify_s, notify_url=settings.notify_url,
                      notify_command=settings.notify_command, tails=fleet.log_tail,
                      say=_say, warn=_warn, run_command=run_user_command)

    def changed(host: str) -> None:
        monitor.observe(host)
        findings = monitor.findings()
        monitor.alert(findings, monitor.clocks(), monitor.failed(findings))

    runner = asyncio.ensure_future(fleet.run(changed))
    try:
        await asyncio.wait([runner], timeout=args.duration)
    finally:
        runner.cancel()
        await asyncio.gather(runner, *sends, return_exceptions=True)
        # Alerts under way are delivered (each channel has its own deadline) before leaving.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(monitor.settle(), SETTLE_S)
        monitor.close()
        await fleet.close()


def cmd_watch(args: argparse.Namespace) -> int:
    try:
        asyncio.run(_watch(args))
    except KeyboardInterrupt:
        pass
    return EXIT_OK
