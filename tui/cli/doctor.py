"""`gpuroom doctor [HOST] [--json]`: poll once, say what is wrong and what the clocks say.

Exit codes: 0 nothing critical, 4 something critical, 3 a host did not answer (a failed poll is
reported as such, never as a dead run: GEN8), 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

import gpuroom.tui.config as cfg
from gpuroom.profiles import Profile
from gpuroom.tui.cli.load import host_config, load_config
from gpuroom.tui.cli.tables import add_row, box_table, print_line, print_table
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.fleet.outputs import PullRecords
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.present.banner import Danger, failed_job_dangers, fleet_dangers
from gpuroom.tui.rules.clock import ClockItem, banner_lines, host_clocks
from gpuroom.tui.rules.doctor import Finding, diagnose
from gpuroom.tui.rules.gate import Record
from gpuroom.tui.rules.watch import cached_profile

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_CRITICAL = 4


async def _poll(config: cfg.Config, only: str | None) -> list[HostState]:
    fleet = Fleet(config)
    try:
        if only is None:
            return await fleet.poll_all()
        return [await fleet.poll_host(only)]
    finally:
        await fleet.close()


def examine(states: list[HostState], now: float, records: Sequence[Record] = ()
            ) -> tuple[list[Finding], list[ClockItem]]:
    """One poll's findings and clocks (no previous snapshot: transitions need the room).
    ``records``: the pull records, which the gate reads too."""
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


def exit_code(states: list[HostState], findings: list[Finding]) -> int:
    if any(s.state is not LinkState.UP for s in states):
        return EXIT_UNREACHABLE
    if any(f.severity == "critical" for f in findings):
        return EXIT_CRITICAL
    return EXIT_OK


def _failed(states: list[HostState], findings: list[Finding], now: float) -> list[Danger]:
    """Failed jobs no finding explains: listed as the room's banner lists them."""
    return failed_job_dangers(states, now, [(f.host, f.title) for f in findings])


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
    import time

    config = load_config(args)
    if args.host is not None:
        host_config(config, args.host)
    states = asyncio.run(_poll(config, args.host))
    now = time.time()
    findings, clocks = examine(states, now, PullRecords().current())
    failed = _failed(states, findings, now)
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
    return exit_code(states, findings)


def add_cli(subparsers: Any) -> None:
    """Register `doctor` on gpuroom's subparsers (the top-level parser owns --config)."""
    p = subparsers.add_parser("doctor", help="poll once; findings by gotcha id (docs/GOTCHAS.md)")
    p.add_argument("host", nargs="?", default=None, help="only this host")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_doctor)
