"""`gpuroom export`: the fleet as Prometheus metrics, from the same polls the room makes.

The Fleet polls as in the room, the monitor sees every poll outcome (the doctor's findings,
the danger clocks; tui/fleet/monitor.py), and each scrape reads them through
tui/present/metrics.py. New critical items go to ``notify_url`` and ``notify_command`` as in
the room, so a headless exporter alerts too.
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
from gpuroom.tui.fleet.monitor import Monitor
from gpuroom.tui.present.metrics import Family, KernelCounts, fleet_families
from gpuroom.tui.room.commands import run_user_command
from gpuroom.tui.rules.alerts import Alert
from gpuroom.tui.transport.metrics_http import FleetCollector, MetricsServer


def _say(line: str) -> None:
    print(f"gpuroom export: {line}", file=sys.stderr, flush=True)


def _said(alert: Alert) -> None:
    _say(alert.line)


def _warn(line: str) -> None:
    _say(f"warning: {line}")


class Exporter:
    """The fleet, its monitor and the alerts of ``gpuroom export``."""

    def __init__(self, config: cfg.Config, clock: Any = time.time) -> None:
        self.settings = config.settings
        self.fleet = Fleet(config)
        self.kernel = KernelCounts()
        self.clock = clock
        s = config.settings
        self.monitor = Monitor(self.fleet, renotify_s=s.renotify_s, notify_url=s.notify_url,
                               notify_command=s.notify_command, clock=clock,
                               tails=self.fleet.log_tail, say=_said, warn=_warn,
                               run_command=run_user_command)

    @property
    def watch(self) -> Any:
        return self.monitor.watch

    def families(self) -> list[Family]:
        now = self.clock()
        hosts = self.fleet.hosts()
        idle = {h.name: self.watch.tracker.idle_for(h.name, now) or 0.0 for h in hosts}
        return fleet_families(hosts, self.monitor.findings(),
                              self.monitor.clocks(hosts, now), now,
                              idle_for=idle, kernel=self.kernel.counts)

    def changed(self, name: str) -> None:
        self.monitor.observe(name)
        self.kernel.observe(self.fleet.state(name))
        findings = self.monitor.findings()
        self.monitor.alert(findings, self.monitor.clocks(), self.monitor.failed(findings))

    async def drain(self) -> None:
        """Wait for the alerts being sent (and the log tails being read)."""
        await self.monitor.settle()

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
            self.monitor.close()
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
