"""`gpuroom`: the room (no subcommand) and headless verbs for scripts.

Exit codes: 0 success (every host answered), 3 some host did not answer, 2 usage or config
error, 1 an action failed on the box, 70 gpuroom itself failed (a bug: one line on stderr,
the traceback in internal-errors.log under the user's state dir), 141 the reader of stdout went
away (`gpuroom status --json | head`): quiet, as a shell reports a writer its pipe left.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import select
import sys
import time
from pathlib import Path
from typing import Any

import gpuroom.tui.config as cfg
from gpuroom.profiles import ProfileError, list_profiles, load_profile
from gpuroom.tui.cli.load import host_config, load_config, unknown_host
from gpuroom.tui.cli.tables import add_row, box_table, print_line, print_table
from gpuroom.tui.errors import EXIT_INTERNAL, GpuroomError, bugs_reported, describe
from gpuroom.tui.fleet.live import Fleet, Recorder
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.present.box import BoxHistory, BoxView
from gpuroom.tui.present.disks import disk_rows
from gpuroom.tui.present.format import fmt_cut, fmt_hours, fmt_pct
from gpuroom.tui.present.gpus import gpu_absence, gpu_processes
from gpuroom.tui.present.hosts import failed_sections, failed_sections_text
from gpuroom.tui.rules.plausible import plausible_uptime
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.snapshot import Snapshot
from gpuroom.tui.ssh_config import ssh_config_aliases

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE: what `yes | head` reports for yes
# The status table's error cell: a glimpse. The whole error follows the table on a line of
# its own, so a fingerprint or the command in its fix is never cut or folded by the table.
ERROR_CELL = 48
SECTIONS_CELL = 160  # an UP host's failed sections (U44)
HUMAN_CPU_INTERVAL_S = 1.0  # probe --human polls twice this far apart to measure CPU use


def _state_json(state: HostState) -> dict[str, Any]:
    up = state.state is LinkState.UP
    return {"name": state.name, "state": state.state.value, "error": state.error,
            # The sections the helper could not collect (U44): UP, but partly blind.
            "section_errors": [{"section": name, "error": error} for name, error
                               in failed_sections(state.view if up else None)],
            "snapshot": state.snapshot if up else None}


def worst_disk(snapshot: Snapshot | None) -> tuple[float | None, float | None]:
    """Worst bytes % and inode % over the snapshot's disks, as the disk pane computes them."""
    rows = disk_rows(snapshot)
    bytes_pcts = [r.bytes_pct for r in rows if r.bytes_pct is not None]
    inode_pcts = [r.inodes_pct for r in rows if r.inodes_pct is not None]
    return (max(bytes_pcts) if bytes_pcts else None, max(inode_pcts) if inode_pcts else None)


def _print_table(states: list[HostState]) -> None:
    table = box_table("gpuroom status", ("host", "state", "hostname", "uptime", "GPUs", "disk",
                                         "inodes", "error"))
    for s in states:
        snap = s.view
        b, i = worst_disk(snap)
        # A negative or absurd uptime is the doctor's finding, not a number to print.
        uptime = plausible_uptime(snap, time.time()) if snap is not None else None
        hostname = snap.host.hostname if snap is not None else None
        add_row(table, (
            s.name,
            s.state.value.upper(),
            hostname or "-",
            fmt_hours(uptime) if uptime else "-",
            str(len(snap.gpus)) if snap is not None else "-",
            fmt_pct(b),
            fmt_pct(i),
            # An UP host names the sections its helper failed to collect (U44).
            fmt_cut(sanitize_line(s.error), ERROR_CELL) + " (below)" if s.error
            else fmt_cut(failed_sections_text(snap), SECTIONS_CELL),
        ))
    print_table(table)
    for s in states:
        if s.error:
            print_line(s.error)  # whole, soft-wrapped: copied as one line


async def _status(config: cfg.Config) -> list[HostState]:
    fleet = Fleet(config)
    try:
        return await fleet.poll_all()
    finally:
        await fleet.close()


def cmd_status(args: argparse.Namespace) -> int:
    config = load_config(args)
    states = asyncio.run(_status(config))
    if args.json:
        json.dump({"hosts": [_state_json(s) for s in states]}, sys.stdout)
        sys.stdout.write("\n")
    else:
        _print_table(states)
    return EXIT_OK if all(s.state is LinkState.UP for s in states) else EXIT_UNREACHABLE


def _print_probe(state: HostState, box: BoxView) -> None:
    """``probe --human``: the box's CPU and memory, then every GPU process, marked as the GPU
    pane marks it (job, display, foreign, zombie U11)."""
    print_line(f"{state.name}: " + "  ".join(box.parts()))
    absence = gpu_absence(state.view)
    if absence is not None:
        print_line(f"no GPU ({absence})")
        return
    table = box_table(f"GPU processes on {state.name}",
                      ("gpu", "pid", "user", "type", "MiB", "what", "command"))
    for p in gpu_processes(state.view):
        add_row(table, (p.gpu, p.pid, p.user, p.type, p.vram,
                        (p.mark_text, {"foreign": "yellow", "zombie": "red"}.get(p.mark, "")),
                        p.command))
    print_table(table)


def cmd_probe(args: argparse.Namespace) -> int:
    config = load_config(args)
    host_config(config, args.name)

    history = BoxHistory()

    async def one() -> HostState:
        fleet = Fleet(config)
        try:
            state = await fleet.poll_host(args.name)
            if args.human and state.state is LinkState.UP:
                # CPU use is CPU time over an interval: a second poll gives the rate.
                history.observe(args.name, state.view)
                await asyncio.sleep(HUMAN_CPU_INTERVAL_S)
                state = await fleet.poll_host(args.name)
            return state
        finally:
            await fleet.close()

    state = asyncio.run(one())
    if state.state is not LinkState.UP:
        print(f"gpuroom: {state.error}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if args.human:
        history.observe(args.name, state.view)
        _print_probe(state, history.view(args.name, state.view))
        return EXIT_OK
    json.dump(state.snapshot, sys.stdout, indent=None if args.compact else 2)
    sys.stdout.write("\n")
    return EXIT_OK


def _say_dangers(profile_name: str) -> None:
    """The profile's dangers to know up front (principle 10), when the host is added."""
    try:
        dangers = load_profile(profile_name).surface.dangers
    except ProfileError:
        return  # "local": no platform, nothing to surface
    if dangers:
        print(f"profile {profile_name}: know this up front (gpuroom profiles show "
              f"{profile_name}):")
        for line in dangers:
            print(f"  ! {line}")


def cmd_hosts(args: argparse.Namespace) -> int:
    config = load_config(args, creating=args.hosts_cmd in ("add", "import"))
    if args.hosts_cmd == "list":
        if not config.hosts:
            print(f"no hosts in {config.path}; gpuroom shows the local machine")
        for h in config.hosts.values():
            # Names, aliases and errors are whatever the file holds: each field inert, the
            # tabs between them ours.
            where = "local" if h.local else f"ssh {h.ssh}"
            fields = [h.name, where, f"profile={h.profile}"]
            if h.error:
                fields.append(f"ERROR: {h.error}")
            print("\t".join(sanitize_line(f) for f in fields))
        return EXIT_OK
    if args.hosts_cmd == "add":
        alias = args.ssh or args.name
        problem = cfg.check_alias(alias)
        if problem:
            print(f"gpuroom: {problem}", file=sys.stderr)
            return EXIT_USAGE
        known = list_profiles()
        if args.profile not in known:
            print(f"gpuroom: unknown profile {args.profile!r}. Fix: use one of "
                  f"{', '.join(known)} (gpuroom profiles lists them)", file=sys.stderr)
            return EXIT_USAGE
        ssh_config = config.ssh_config_path()
        if alias not in ssh_config_aliases(ssh_config):
            # ssh would take it as a plain host name: fine for a DNS name, a typo otherwise.
            print(f"gpuroom: warning: {alias!r} is not a Host in {ssh_config}; ssh will look it "
                  f"up as a host name. Fix: add 'Host {alias}' with its HostName, User and "
                  f"Port to {ssh_config}", file=sys.stderr)
        if args.name in config.hosts:
            print(f"gpuroom: host {args.name!r} already in {config.path}; "
                  f"remove it first (gpuroom hosts remove {args.name})", file=sys.stderr)
            return EXIT_USAGE
        config.hosts[args.name] = cfg.HostConfig(name=args.name, ssh=alias, profile=args.profile,
                                                 price_per_hour=args.price)
        print(f"added {args.name} (ssh {alias}, profile {args.profile}) to {config.path}"
              f"{_backed_up(cfg.save(config))}")
        _say_dangers(args.profile)
        return EXIT_OK
    if args.hosts_cmd in ("remove", "rm"):
        if config.hosts.pop(args.name, None) is None:
            raise unknown_host(config, args.name, adding=False)
        print(f"removed {args.name} from {config.path}{_backed_up(cfg.save(config))}")
        return EXIT_OK
    if args.hosts_cmd == "import":
        ssh_config = Path(args.ssh_config).expanduser() if args.ssh_config else \
            config.ssh_config_path()
        if not ssh_config.is_file():
            raise cfg.ConfigError(f"no ssh config to import from: {ssh_config} does not exist",
                                  "write your boxes there as 'Host NAME' blocks (HostName, "
                                  "User, Port), or give --ssh-config PATH")
        added = []
        for alias in ssh_config_aliases(ssh_config):
            if alias in config.hosts or cfg.check_alias(alias):
                continue
            config.hosts[alias] = cfg.HostConfig(name=alias, ssh=alias)
            added.append(alias)
        backup = cfg.save(config) if added else None
        print(f"imported {len(added)} host(s) from {ssh_config}: {', '.join(added) or '-'}"
              f"{_backed_up(backup)}")
        return EXIT_OK
    return EXIT_USAGE


def _backed_up(backup: Path | None) -> str:
    return f" (the previous file is kept as {backup})" if backup is not None else ""


def cmd_room(args: argparse.Namespace) -> int:
    config = load_config(args)
    recorder = Recorder(Path(args.record)) if args.record else None
    fleet = Fleet(config, recorder=recorder, restart_runners=True, mirror=True)
    from gpuroom.tui.room.app import GpuroomApp

    app = GpuroomApp(fleet, bell=config.settings.bell,
                     notify_command=config.settings.notify_command,
                     notify_url=config.settings.notify_url,
                     renotify_s=config.settings.renotify_s, warnings=config.warnings)
    app.run()
    return app.return_code or EXIT_OK  # non-zero when the room ended on an error


def cmd_record(args: argparse.Namespace) -> int:
    """Poll like the room does, with no screen, appending every outcome to FILE."""
    config = load_config(args)
    if args.interval is not None:
        config.settings.poll_interval_s = args.interval
    path = Path(args.file)
    fleet = Fleet(config, recorder=Recorder(path), restart_runners=True)
    polls = [0]
    total = args.polls * len(fleet.hosts()) if args.polls else None

    async def record() -> None:
        done = asyncio.Event()

        def changed(_host: str) -> None:
            polls[0] += 1
            if total is not None and polls[0] >= total:
                done.set()

        runner = asyncio.create_task(fleet.run(changed))
        try:
            waiter = asyncio.create_task(done.wait())
            await asyncio.wait([runner, waiter], timeout=args.duration,
                               return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
        finally:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
            await fleet.close()

    try:
        asyncio.run(record())
    except KeyboardInterrupt:
        pass
    print(f"recorded {polls[0]} poll(s) of {len(fleet.hosts())} host(s) to {path}",
          file=sys.stderr)
    return EXIT_OK


def cmd_replay(args: argparse.Namespace) -> int:
    from gpuroom.tui.fleet.replay import RecordingError, ReplayFleet, load_recording

    if args.speed < 0:
        print("gpuroom replay: --speed must be >= 0 (0 = as fast as the screen takes it)",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        records = load_recording(Path(args.file))
    except RecordingError as exc:
        print(f"gpuroom replay: {exc}", file=sys.stderr)
        return EXIT_USAGE
    fleet = ReplayFleet(records, speed=args.speed)
    from gpuroom.tui.room.app import GpuroomApp

    app = GpuroomApp(fleet, clock=fleet.now, replay=f"{args.file} at {args.speed:g}x")
    app.run()
    return app.return_code or EXIT_OK  # non-zero when the room ended on an error


def _version() -> str:
    """The installed distribution's version (pyproject.toml's, one source of truth)."""
    try:
        return importlib.metadata.version("gpuroom")
    except importlib.metadata.PackageNotFoundError:  # run from a tree that is not installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuroom", description=__doc__)
    parser.add_argument("--version", action="version", version=f"gpuroom {_version()}")
    parser.add_argument("--config", metavar="PATH",
                        help=f"hosts.toml to use (default {cfg.default_config_path()})")
    parser.add_argument("--record", metavar="FILE",
                        help="append every snapshot the room sees to FILE (JSON lines)")
    sub = parser.add_subparsers(dest="command")

    p = sub.add_parser("status", help="poll every host once")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("probe", help="print one host's raw snapshot")
    p.add_argument("name")
    p.add_argument("--compact", action="store_true")
    p.add_argument("--human", action="store_true",
                   help="CPU, memory and GPU processes as tables instead of the raw JSON")
    p.set_defaults(func=cmd_probe)

    hosts = sub.add_parser("hosts", help="manage hosts.toml")
    hsub = hosts.add_subparsers(dest="hosts_cmd", required=True)
    hsub.add_parser("list")
    p = hsub.add_parser("add")
    p.add_argument("name")
    p.add_argument("--ssh", help="ssh config alias (default: NAME)")
    p.add_argument("--profile", default=cfg.DEFAULT_PROFILE)
    p.add_argument("--price", type=float, default=None, help="price per hour")
    p = hsub.add_parser("remove", aliases=["rm"], help="remove a host (its comments and the "
                        "others' stay; the previous file is kept as hosts.toml.bak)")
    p.add_argument("name")
    p = hsub.add_parser("import")
    p.add_argument("--ssh-config", help="ssh config to read (default ~/.ssh/config)")
    hosts.set_defaults(func=cmd_hosts)

    p = sub.add_parser("record", help="poll with no screen, appending every snapshot to FILE")
    p.add_argument("file", metavar="FILE", help="JSON lines, appended (replay it with replay)")
    p.add_argument("--interval", type=float, default=None, metavar="S",
                   help="seconds between polls of a host (default: the config's)")
    p.add_argument("--polls", type=int, default=None, metavar="N",
                   help="stop after N polls of every host")
    p.add_argument("--duration", type=float, default=None, metavar="S",
                   help="stop after S seconds (default: until ctrl+c)")
    p.set_defaults(func=cmd_record)

    p = sub.add_parser("replay", help="open the room on a recording, with no network")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--speed", type=float, default=1.0, metavar="X",
                   help="X times real time (default 1; 0 = as fast as the screen takes it)")
    p.set_defaults(func=cmd_replay)

    from gpuroom.tui.cli.queue import add_cli as add_queue_cli

    add_queue_cli(sub)
    from gpuroom.profiles.cli import add_cli as add_profiles_cli

    add_profiles_cli(sub)
    from gpuroom.tui.cli.doctor import add_cli as add_doctor_cli

    add_doctor_cli(sub)
    from gpuroom.tui.cli.pull import add_cli as add_transfer_cli

    add_transfer_cli(sub)
    from gpuroom.tui.cli.push import add_cli as add_push_cli

    add_push_cli(sub)
    from gpuroom.tui.cli.secret import add_cli as add_secret_cli

    add_secret_cli(sub)
    from gpuroom.tui.cli.export import add_cli as add_export_cli

    add_export_cli(sub)
    from gpuroom.tui.cli.web import add_cli as add_web_cli

    add_web_cli(sub)
    from gpuroom.tui.cli.watch import add_cli as add_watch_cli

    add_watch_cli(sub)
    from gpuroom.tui.cli.mcp import add_cli as add_mcp_cli

    add_mcp_cli(sub)

    from gpuroom.tui.cli.autostop import add_cli as add_autostop_cli

    add_autostop_cli(sub)
    return parser


def stdout_closed() -> bool:
    """Has the reader of our stdout gone? A pipe's write end with no reader polls POLLERR."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def quiet_stdout() -> None:
    """Point stdout at /dev/null: the interpreter's last flush of what is still buffered
    would meet the closed pipe again and print its own complaint."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", cmd_room)
    try:
        with bugs_reported():
            status = int(func(args))
            sys.stdout.flush()  # a closed pipe shows here, not at exit as a stray message
            return status
    except BrokenPipeError as exc:
        if not stdout_closed():  # a child's pipe (an ssh the verb fed): a failure to see
            print(f"gpuroom: {describe(exc, context=f'gpuroom {args.command}')}",
                  file=sys.stderr)
            return EXIT_INTERNAL
        quiet_stdout()
        return EXIT_PIPE_CLOSED
    except GpuroomError as exc:  # config and usage 2, the rest 1 (each class's exit_code)
        print(f"gpuroom: {describe(exc)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug: its traceback goes to the log, never to the terminal
        verb = f"gpuroom {args.command or 'room'}"
        print(f"gpuroom: {describe(exc, context=verb)}", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
