"""`gpuroom doctor [HOST] [--json] [--ack HOST/JOB]`: poll once, say what is wrong and what
the clocks say, through the monitor the room and `watch` use (tui/fleet/monitor.py): each
ended job's log tail is read for the log rules, and acknowledged deaths are left out.

Exit codes, for cron: 0 nothing urgent, 1 warnings, 2 something critical (a host that did not
answer is a warning: a failed poll is never a dead run, GEN8). A usage error (an unknown
host, a bad --ack) also exits 2 and says so on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

import gpuroom.tui.config as cfg
from gpuroom.profiles import Profile
from gpuroom.tui.cli.load import host_config, load_config
from gpuroom.tui.cli.tables import add_row, box_table, print_line, print_table
from gpuroom.tui.fleet.acks import AckError, parse_target
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.fleet.monitor import Monitor
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.present.banner import Danger, failed_job_dangers, fleet_dangers
from gpuroom.tui.rules.clock import ClockItem, banner_lines, host_clocks
from gpuroom.tui.rules.doctor import Finding, diagnose
from gpuroom.tui.rules.gate import Record
from gpuroom.tui.rules.watch import cached_profile

EXIT_OK = 0
EXIT_WARN = 1
EXIT_CRITICAL = 2
EXIT_USAGE = 2
EPILOG = ("exit status: 0 nothing urgent, 1 warnings (a host that did not answer is one), "
          "2 something critical (or a usage error, said on stderr). A job's death stays "
          "critical until acknowledged: --ack HOST/JOB, or clearing the room's findings (f).")


async def _examine(config: cfg.Config, only: str | None
                   ) -> tuple[list[HostState], list[Finding], list[ClockItem], list[Danger]]:
    """One poll of every host (or ``only``) through the monitor; its tail reads awaited."""
    fleet = Fleet(config)
    monitor = Monitor(fleet, tails=fleet.log_tail)
    try:
        states = await fleet.poll_all() if only is None else [await fleet.poll_host(only)]
        for s in states:
            monitor.observe(s.name)
        await monitor.settle()
        now = time.time()
        findings = monitor.findings()
        return states, findings, monitor.clocks(now=now), monitor.failed(findings, now)
    finally:
        monitor.close()
        await fleet.close()


def examine(states: list[HostState], now: float, records: Sequence[Record] = ()
            ) -> tuple[list[Finding], list[ClockItem]]:
    """Findings and clocks of states already polled, with no log tails or acknowledgements:
    for a caller holding its own states (the MCP server, the fuzz tests). The verb itself
    goes through the monitor (``_examine``)."""
    cache: dict[str, Profile | None] = {}
    findings: list[Finding] = []
    clocks: list[ClockItem] = []
    for s in states:
        profile = cached_profile(s.profile, cache)
        findings += diagnose(None, s.view, s.state, profile, now,
                             host=s.name, error=s.error, last_ok=s.last_ok,
                             price_per_hour=s.price_per_hour, stall_after_s=s.stall_after_s,
                             mtbf_s=s.mtbf_s, cpu_training_after_s=s.cpu_training_after_s,
                             local=s.local_code,
                             moves=s.moved, held=s.held, host_key=s.host_key)
        if s.state is LinkState.UP:
            clocks += host_clocks(s.name, s.view, profile, now,
                                  price_per_hour=s.price_per_hour, records=records, spot=s.spot)
    return findings, clocks


async def _ack(config: cfg.Config, target: str) -> str:
    host, job = parse_target(target)
    if host not in {h.name for h in config.effective_hosts()}:
        raise AckError(f"--ack {target!r}: no host {host!r} in {config.path}",
                       "gpuroom hosts list")
    fleet = Fleet(config)
    try:
        state = await fleet.poll_host(host)
        if state.view is None:
            raise AckError(f"{host} did not answer ({state.error}): its job {job} cannot be "
                           "checked", f"gpuroom doctor {host}, then --ack again")
        attempt = Monitor(fleet).ack(host, job)
    finally:
        await fleet.close()
    return f"acknowledged {host}/{job}" + (f" attempt {attempt}" if attempt else "")


def _failed(states: list[HostState], findings: list[Finding], now: float) -> list[Danger]:
    """Failed jobs no finding explains, as the room's banner lists them (with ``examine``)."""
    return failed_job_dangers(states, now, [(f.host, f.title) for f in findings])


def exit_code(findings: Iterable[Finding], clocks: Iterable[ClockItem],
              failed: Iterable[Danger]) -> int:
    levels = {f.severity for f in findings} | {c.severity for c in clocks}
    if "critical" in levels or any(True for _ in failed):
        return EXIT_CRITICAL
    return EXIT_WARN if "warn" in levels else EXIT_OK


def _print(findings: list[Finding], clocks: list[ClockItem], failed: list[Danger]) -> None:
    # Every item is a row below; the room's banner lines above them said each one twice.
    # Remote text (kernel lines, a process's own name in them, error messages) is in every
    # column: tables.py makes each cell inert.
    table = box_table("gpuroom doctor (ids: docs/GOTCHAS.md)",
                      ("sev", "host", "id", "finding", "seen", "fix"))
    for f in findings:
        add_row(table, (f.severity, f.host, f.id, f.title, f.seen, f.fix))
    for d in failed:
        # "CRITICAL HOST: job ..." without the two words the sev and host columns say.
        add_row(table, ("critical", d.host, "job", d.text.split(": ", 1)[-1], "-",
                        d.fix))
    if not findings and not failed:
        add_row(table, ("ok", "-", "-", "nothing wrong seen", "-", "-"))
    print_table(table)
    if clocks:
        ctable = box_table("danger clocks", ("sev", "host", "clock", "text"))
        for c in clocks:
            add_row(ctable, (c.severity, c.host, c.kind, c.text))
        print_table(ctable)
    _print_counts(findings, clocks, failed)


def _print_counts(findings: list[Finding], clocks: list[ClockItem], failed: list[Danger]) -> None:
    """One closing line: how many items of each severity the tables above hold."""
    severities = [f.severity for f in findings] + [c.severity for c in clocks] + \
        ["critical"] * len(failed)
    crit, warn = severities.count("critical"), severities.count("warn")
    if crit or warn:
        print_line(f"{crit} critical, {warn} warn", "bold red" if crit else "yellow")


def cmd_doctor(args: argparse.Namespace) -> int:
    config = load_config(args)
    if args.ack is not None:
        print(asyncio.run(_ack(config, args.ack)))
        return EXIT_OK
    if args.host is not None:
        host_config(config, args.host)
    states, findings, clocks, failed = asyncio.run(_examine(config, args.host))
    if args.json:
        doc: dict[str, Any] = {
            "hosts": [{"name": s.name, "state": s.state.value, "error": s.error}
                      for s in states],
            "findings": [f.to_dict() for f in findings],
            "clocks": [c.to_dict() for c in clocks],
            "failed_jobs": [{"host": d.host, "text": d.text} for d in failed],
            "banner": [d.text for d in fleet_dangers(banner_lines(findings, clocks, limit=None),
                                                      failed)[:3]],
        }
        json.dump(doc, sys.stdout)
        sys.stdout.write("\n")
    else:
        _print(findings, clocks, failed)
    return exit_code(findings, clocks, failed)


def add_cli(subparsers: Any) -> None:
    """Register `doctor` on gpuroom's subparsers (the top-level parser owns --config)."""
    p = subparsers.add_parser(
        "doctor", help="poll once; findings by gotcha id (docs/GOTCHAS.md); exit 0/1/2",
        description="poll once; say what is wrong and what the danger clocks say",
        epilog=EPILOG)
    p.add_argument("host", nargs="?", default=None, help="only this host")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--ack", metavar="HOST/JOB", default=None,
                   help="acknowledge a job's death (recorded on this machine, shared with the "
                        "room's clear): it is no longer critical")
    p.set_defaults(func=cmd_doctor)
