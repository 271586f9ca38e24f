"""`gpuroom export`: the fleet as Prometheus metrics, from the same polls the room makes.

The Fleet polls as in the room, the watch sees every poll outcome (the doctor's findings,
the danger clocks), and each scrape reads them through tui/present/metrics.py. New critical
items go to ``notify_url`` and ``notify_command`` as in the room (tui/rules/alerts.py), so a
headless exporter alerts too.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from gpuroom.tui import config as cfg
from gpuroom.tui.cli.listen import ListenError, add_listen_args, parse_listen, remote_notice
from gpuroom.tui.cli.load import load_config
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.present.metrics import Family, KernelCounts, fleet_families
from gpuroom.tui.room.commands import run_user_command
from gpuroom.tui.rules.alerts import Alert
from gpuroom.tui.rules.watch import FleetWatch
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.transport.metrics_http import FleetCollector, MetricsServer
from gpuroom.tui.transport.notify_http import NotifyError, UrlNotifier

NOTIFY_TIMEOUT_S = 30.0


def _say(line: str) -> None:
    print(f"gpuroom export: {line}", file=sys.stderr, flush=True)


class Exporter:
    """The fleet, its watch and the alerts of ``gpuroom export``."""

    def __init__(self, config: cfg.Config, clock: Any = time.time) -> None:
        self.settings = config.settings
        self.fleet = Fleet(config)
        self.watch = FleetWatch(config.settings.renotify_s)
        self.kernel = KernelCounts()
        self.clock = clock
        self._tasks: set[asyncio.Task[None]] = set()
        url = config.settings.notify_url
        self.notifier = UrlNotifier(url) if url else None

    def families(self) -> list[Family]:
        now = self.clock()
        hosts = self.fleet.hosts()
        idle = {h.name: self.watch.tracker.idle_for(h.name, now) or 0.0 for h in hosts}
        return fleet_families(hosts, self.watch.findings(), self.watch.clocks(hosts, now), now,
                              idle_for=idle, kernel=self.kernel.counts)

    def changed(self, name: str) -> None:
        now = self.clock()
        h = self.fleet.state(name)
        self.watch.observe(h, now)
        self.kernel.observe(h)
        hosts = self.fleet.hosts()
        for alert in self.watch.new_criticals(self.watch.findings(),
                                              self.watch.clocks(hosts, now), now):
            _say(alert.line)
            # Each channel on its own: one that fails or hangs never holds back another.
            if self.notifier is not None:
                self._spawn(self._post(self.notifier, alert))
            if self.settings.notify_command:
                self._spawn(self._run_command(self.settings.notify_command, alert))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for the alerts being sent."""
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _post(self, notifier: UrlNotifier, alert: Alert) -> None:
        try:
            await notifier.send(alert.to_json())
        except NotifyError as exc:
            _say(f"warning: {exc}")

    async def _run_command(self, command: list[str], alert: Alert) -> None:
        argv = [*command, alert.line]
        try:
            rc, out = await run_user_command(argv, NOTIFY_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as exc:
            _say(f"warning: notify_command {argv[0]} failed: {exc!r}. Fix: check "
                 "[settings] notify_command in hosts.toml")
            return
        if rc:
            _say(f"warning: notify_command {argv[0]} exited {rc}: "
                 f"{sanitize_line(out.decode(errors='replace'))[-200:]}")

    async def serve(self, host: str, port: int, duration: float | None) -> None:
        collector = FleetCollector(asyncio.get_running_loop(), self.families)
        try:
            server = await asyncio.to_thread(MetricsServer, host, port, collector)
        except OSError as exc:
            raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                              "pick another port with --listen, or stop what holds it") from None
        notice = remote_notice(host)
        if notice:
            _say(notice)
        print(f"gpuroom export: serving {server.url} for {len(self.fleet.hosts())} host(s)",
              flush=True)
        try:
            await asyncio.wait_for(self.fleet.run(self.changed), duration)
        except (asyncio.TimeoutError, TimeoutError):
            pass
        finally:
            await asyncio.to_thread(server.close)
            for task in list(self._tasks):
                task.cancel()
            await self.fleet.close()


def cmd_export(args: argparse.Namespace) -> int:
    host, port = parse_listen(args.listen, allow_remote=args.allow_remote)
    config = load_config(args)
    asyncio.run(Exporter(config).serve(host, port, args.duration))
    return 0


def add_cli(sub: Any) -> None:
    p = sub.add_parser("export", help="serve the fleet as Prometheus metrics (docs/METRICS.md)")
    add_listen_args(p, "127.0.0.1:9108", "/metrics")
    p.add_argument("--duration", type=float, default=None, metavar="S",
                   help="stop after S seconds (default: until ctrl+c)")
    p.set_defaults(func=cmd_export)
