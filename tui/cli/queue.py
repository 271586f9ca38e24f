"""`gpuroom queue ...`: the box's queue from the jump host, through the helper.

Every verb is one helper subcommand with an argv list; the runner on the box stays the only
writer of job state (pueue's model). Job output is untrusted: it reaches a terminal only
after every control sequence is stripped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import gpuroom.tui.config as cfg
from gpuroom.tui.cli.load import load_config
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.present.format import fmt_age, fmt_cut
from gpuroom.tui.present.slurm import queue_backend, slurm_summary
from gpuroom.tui.sanitize import display_line, sanitize_line
from gpuroom.tui.snapshot import read_queue_view
from gpuroom.tui.transport.link import ExecResult, LinkError

LOG_CHUNK_BYTES = 256 << 10
FOLLOW_INTERVAL_S = 1.0
COMMAND_WIDTH = 60  # characters of a command in queue ls; a longer one ends in "…"


def add_cli(sub: Any) -> None:
    queue = sub.add_parser("queue", help="the job queue on a host")
    qsub = queue.add_subparsers(dest="queue_cmd", required=True)
    p = qsub.add_parser("add", help="add a job: gpuroom queue add HOST [opts] -- CMD ARGS...")
    p.add_argument("host")
    p.add_argument("--name")
    p.add_argument("--gpus", type=int, default=None)
    p.add_argument("--retries", type=int, default=0)
    p.add_argument("--vram-mib", type=int, default=None,
                   help="VRAM the job needs per GPU (the doctor warns when it cannot fit: U10)")
    p.add_argument("--cwd")
    p.add_argument("--env", action="append", default=[], metavar="K=V",
                   help="stored and shown on the box: a credential goes in --secret")
    p.add_argument("--secret", action="append", default=[], metavar="NAME[=ENVVAR]",
                   help="export a secret pushed with `gpuroom secret push` at launch")
    p.add_argument("--output", action="append", default=[], metavar="GLOB",
                   help="outputs to copy to the durable dir after success")
    p.add_argument("--durable-dir")
    # Slurm hosts (profile slurm): the job's sbatch options.
    p.add_argument("--time", help="Slurm walltime (--time), e.g. 4:00:00")
    p.add_argument("--signal-lead", type=int,
                   help="seconds before the wall for the checkpoint warning (0: none)")
    p.add_argument("--cpus-per-task", type=int)
    p.add_argument("--partition")
    p.add_argument("argv", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    p.set_defaults(add_parser=p)
    p = qsub.add_parser("config", help="the queue's settings on a host (Slurm: SLURM_CONF, "
                        "partition, default --time and warning lead)")
    p.add_argument("host")
    p.add_argument("--slurm-conf", help="SLURM_CONF for the Slurm commands on the login node")
    p.add_argument("--partition")
    p.add_argument("--time")
    p.add_argument("--signal-lead", type=int)
    p.add_argument("--cpus-per-task", type=int)
    p = qsub.add_parser("ls", help="every job, attempt, exit code and duration")
    p.add_argument("host")
    p.add_argument("--json", action="store_true")
    for verb in ("kill", "relaunch"):
        p = qsub.add_parser(verb)
        p.add_argument("host")
        p.add_argument("job")
    p = qsub.add_parser("logs", help="a job's log (-f to follow)")
    p.add_argument("host")
    p.add_argument("job")
    p.add_argument("-f", "--follow", action="store_true")
    queue.set_defaults(func=cmd_queue)


def _fleet(args: argparse.Namespace) -> tuple[Fleet, str]:
    """The fleet and the host's queue backend (``slurm`` when its profile is slurm)."""
    config = load_config(args)
    hosts = {h.name: h for h in config.effective_hosts()}
    if args.host not in hosts:
        raise cfg.ConfigError(f"no host {args.host!r} in {config.path} "
                              f"(have: {', '.join(hosts)})", f"gpuroom hosts add {args.host}")
    return Fleet(config), queue_backend(hosts[args.host].profile)


def _json_or_fail(host: str, what: str, result: ExecResult) -> dict[str, Any]:
    try:
        doc = json.loads(result.stdout)
    except ValueError:
        raise LinkError(host, f"queue {what} failed ({result.failure()})") from None
    if not isinstance(doc, dict):
        raise LinkError(host, f"queue {what}: unexpected answer")
    return doc


def _write_log(data: bytes, tty: bool) -> None:
    if tty:
        for raw in data.splitlines():
            sys.stdout.write(display_line(raw) + "\n")
        sys.stdout.flush()
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


def _slurm_opts(args: argparse.Namespace) -> list[str]:
    opts = []
    for flag in ("time", "signal_lead", "cpus_per_task", "partition", "slurm_conf"):
        value = getattr(args, flag, None)
        if value is not None:
            opts += ["--" + flag.replace("_", "-"), str(value)]
    return opts


def job_argv(args: argparse.Namespace) -> list[str]:
    """The job's command of `queue add`; options written after HOST (`add HOST --name x --
    cmd`), which REMAINDER swallowed, are parsed into ``args`` as this verb's options."""
    argv = list(args.argv)
    if argv[:1] and argv[0] != "--" and argv[0].startswith("-") and "--" in argv:
        cut = argv.index("--")
        args.add_parser.parse_args([*argv[:cut], args.host], namespace=args)
        argv = argv[cut:]
    return argv[1:] if argv[:1] == ["--"] else argv


async def _run(args: argparse.Namespace) -> int:
    fleet, backend = _fleet(args)
    link = fleet.link(args.host)
    try:
        if args.queue_cmd == "add":
            argv = job_argv(args)
            if not argv:
                print("gpuroom queue add: give the command after --", file=sys.stderr)
                return 2
            opts = ["--retries", str(args.retries)]
            if args.gpus is not None:
                opts += ["--gpus", str(args.gpus)]
            if args.vram_mib is not None:
                opts += ["--vram-mib", str(args.vram_mib)]
            for flag in ("name", "cwd", "durable_dir"):
                value = getattr(args, flag)
                if value:
                    opts += ["--" + flag.replace("_", "-"), value]
            for item in args.env:
                opts += ["--env", item]
            for item in args.secret:
                opts += ["--secret", item]
            for item in args.output:
                opts += ["--output", item]
            opts += ["--backend", backend, *_slurm_opts(args)]
            doc = _json_or_fail(args.host, "add",
                                await link.helper("queue", "add", *opts, "--", *argv))
            print(json.dumps(doc))
            return 0 if doc.get("ok") else 1
        if args.queue_cmd == "config":
            opts = ["--backend", backend, *_slurm_opts(args)]
            doc = _json_or_fail(args.host, "config", await link.helper("queue", "config", *opts))
            print(json.dumps(doc))
            return 0 if doc.get("ok") else 1
        if args.queue_cmd == "ls":
            doc = _json_or_fail(args.host, "ls", await link.helper("queue", "ls"))
            if args.json:
                print(json.dumps(doc))
            else:
                _print_jobs(doc)
            return 0
        if args.queue_cmd in ("kill", "relaunch"):
            doc = _json_or_fail(args.host, args.queue_cmd,
                                await link.helper("queue", args.queue_cmd, args.job,
                                                  timeout_s=180.0))
            print(json.dumps(doc))
            return 0 if doc.get("ok") else 1
        if args.queue_cmd == "logs":
            return await _logs(link, args)
        return 2
    finally:
        await fleet.close()


async def _logs(link: Any, args: argparse.Namespace) -> int:
    offset = 0
    tty = sys.stdout.isatty()
    deadline_idle = None
    while True:
        result = await link.helper("queue", "logs", args.job, "--offset", str(offset),
                                   "--max-bytes", str(LOG_CHUNK_BYTES))
        if result.rc != 0:
            print(f"gpuroom: {args.host}: queue logs failed ({result.failure()})",
                  file=sys.stderr)
            return 1
        if result.stdout:
            _write_log(result.stdout, tty)
            offset += len(result.stdout)
            deadline_idle = None
            if len(result.stdout) >= LOG_CHUNK_BYTES:
                continue  # more is waiting: read on before sleeping
        if not args.follow:
            return 0
        deadline_idle = deadline_idle or time.monotonic()
        await asyncio.sleep(FOLLOW_INTERVAL_S)


def _print_jobs(doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    view = read_queue_view(doc)
    table = Table(title=sanitize_line(f"queue {view.name}"))
    slurm = any(job.slurm_id for job in view.jobs)
    for col in ("id", "name", "state", "attempts", "exit", "duration", "command"):
        table.add_column(col)
    if slurm:
        table.add_column("slurm")
    for job in view.jobs:
        last = job.last_attempt
        exit_text = "-"
        if last is not None and last.exit_code is not None:
            exit_text = str(last.exit_code)
        elif last is not None and last.signal:
            exit_text = f"sig {last.signal}"
        duration = last.duration if last is not None else None
        # Text() keeps job-provided strings from being read as rich markup.
        cells: list[Text | str] = [Text(sanitize_line(job.id)),
                 Text(sanitize_line(job.name or "")),
                 Text(sanitize_line(job.state)), str(len(job.attempts)), exit_text,
                 fmt_age(duration),
                 Text(fmt_cut(display_line(job.command.encode()), COMMAND_WIDTH))]
        if slurm:
            cells.append(Text(display_line(slurm_summary(job).encode())))
        table.add_row(*cells)
    console = Console()
    console.print(table)
    # A line of the events file the queue skipped is a job or a full disk at work: said.
    for warning in view.warnings:
        console.print(Text(f"warning: {sanitize_line(warning)}", style="yellow"))


def cmd_queue(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))
