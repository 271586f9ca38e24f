"""`gpuroom queue ...`: the box's queue from the jump host, through the helper.

Every verb is one helper subcommand with an argv list; the runner on the box stays the only
writer of job state (pueue's model). Job output is untrusted: it reaches a terminal only
after every control sequence is stripped.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gpuroom.tui.config as cfg
from gpuroom.profiles import Profile, ProfileError, load_profile
from gpuroom.remote.preempt import CLOUDS
from gpuroom.remote.queue_events import DEFAULT_QUEUE
from gpuroom.remote.secrets import redact_env
from gpuroom.tui.cli.load import host_config, load_config, unknown_host
from gpuroom.tui.cli.tables import Cell, add_row, box_table, print_line, print_table
from gpuroom.tui.errors import GpuroomError, with_fix
from gpuroom.tui.fleet.intent import (
    Intent,
    accept_moves_fix,
    check_job_id,
    move_target_refusal,
)
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.fleet.mirror import MirrorState
from gpuroom.tui.fleet.move import Lineage
from gpuroom.tui.present.format import fmt_age, fmt_cut
from gpuroom.tui.present.jobdetail import detail_lines
from gpuroom.tui.present.slurm import queue_backend, slurm_summary
from gpuroom.tui.rules.drift import code_verdict, script_rel_paths
from gpuroom.tui.rules.placement import Candidate, choose_host
from gpuroom.tui.rules.survival import stop_only_paths, stop_surviving_paths
from gpuroom.tui.sanitize import LineSplitter, display_line
from gpuroom.tui.snapshot import (
    LogChunk,
    for_host,
    load_answer,
    queue_identity,
    read_log_doc,
    read_queue_view,
)
from gpuroom.tui.transport.link import ExecResult, LinkError
from gpuroom.tui.transport.link import env_on_stdin as link_env_on_stdin
from gpuroom.tui.transport.localcode import read_tree

LOG_CHUNK_BYTES = 256 << 10
LOG_TAIL_BYTES = 1 << 20  # the most `logs -n N` reads back from the end
FOLLOW_INTERVAL_S = 1.0
COMMAND_WIDTH = 60  # characters of a command in queue ls; a longer one ends in "…"
ANY_HOST = "any"  # queue add --host any: the host with the asked GPUs free (or a list a,b)


def add_cli(sub: Any) -> None:
    queue = sub.add_parser("queue", help="the job queue on a host")
    qsub = queue.add_subparsers(dest="queue_cmd", required=True)
    p = qsub.add_parser("add", help="add a job: gpuroom queue add HOST [opts] -- CMD ARGS... "
                        "(HOST 'any' or a,b: the host with the asked GPUs and VRAM free now)")
    p.add_argument("host", help="a configured host, 'any', or a comma-separated list")
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
    p.add_argument("--ckpt", action="append", default=[], metavar="PATH|GLOB",
                   help="the program's own checkpoints (a file or a dir each), relative to "
                        "the cwd; default: found under the cwd by name")
    p.add_argument("--durable-dir")
    p.add_argument("--fix-crlf", action="store_true",
                   help="convert script arguments with Windows CRLF line ends (U26) to LF")
    p.add_argument("--retry-on-exit", action="store_true",
                   help="retry a non-zero exit too (default: only deaths by a signal)")
    p.add_argument("--after", metavar="JOB[,JOB]",
                   help="start only after these jobs succeeded; one failing fails this job")
    p.add_argument("--priority", type=int, help="higher starts first among queued jobs")
    p.add_argument("--mirror", action="store_true",
                   help="pull each new checkpoint home while it runs (the room and `gpuroom "
                        "watch` do it; on by default for spot hosts)")
    p.add_argument("--failover", metavar="HOST2[,HOST3]",
                   help="mirror it, and move it to the first of these that is UP once its "
                        "host is DOWN for [settings] failover_after_s (the room or `gpuroom "
                        "watch` must run)")
    # Slurm hosts (profile slurm): the job's sbatch options.
    p.add_argument("--time", help="Slurm walltime (--time), e.g. 4:00:00")
    p.add_argument("--signal-lead", type=int,
                   help="seconds before the wall for the checkpoint warning (0: none)")
    p.add_argument("--cpus-per-task", type=int)
    p.add_argument("--partition")
    p.add_argument("--array", help="Slurm job array: 0-9%%2 runs tasks 0..9, two at a time; "
                   "task 3 is then job jN_3 for logs and kill")
    p.add_argument("--json", action="store_true", help="print the box's answer as JSON")
    p.add_argument("argv", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    p.set_defaults(add_parser=p)
    p = qsub.add_parser("config", help="the queue's settings on a host (Slurm: SLURM_CONF, "
                        "partition, default --time and warning lead)")
    p.add_argument("host")
    p.add_argument("--slots", type=int,
                   help="jobs at once (0: one per GPU on a GPU box, 1 on a CPU box)")
    p.add_argument("--idle-exit", type=float, help="idle seconds before the runner leaves")
    p.add_argument("--kill-grace", type=float, help="seconds from SIGTERM to SIGKILL on kill")
    p.add_argument("--spot", choices=CLOUDS, help="a spot box of this cloud: its preemption "
                   "notice sends SIGUSR1 to every running job (the Checkpointer saves)")
    p.add_argument("--metadata-url", help="the cloud's metadata endpoint (default: its own)")
    p.add_argument("--slurm-conf", help="SLURM_CONF for the Slurm commands on the login node")
    p.add_argument("--partition")
    p.add_argument("--time")
    p.add_argument("--signal-lead", type=int)
    p.add_argument("--cpus-per-task", type=int)
    p.add_argument("--json", action="store_true", help="print the box's answer as JSON")
    p = qsub.add_parser("ls", help="every job, attempt, exit code and duration, and why a "
                        "queued job waits")
    p.add_argument("host")
    p.add_argument("--json", action="store_true")
    for verb, what in (("kill", "kill a job (SIGTERM, then SIGKILL after the grace)"),
                       ("relaunch", "run a finished job again as a new attempt"),
                       ("rm", "remove a queued job (a running one must be killed first)"),
                       ("show", "one job in full: argv, env keys, attempts, checkpoint, log")):
        p = qsub.add_parser(verb, help=what)
        p.add_argument("host")
        p.add_argument("job")
        p.add_argument("--json", action="store_true", help="print the box's answer as JSON")
    p = qsub.add_parser("verify", help="does the box run your code? the job's launch git HEAD, "
                        "dirty flag and script sha256s against your own tree (U42)")
    p.add_argument("host")
    p.add_argument("job")
    p.add_argument("--tree", help="your tree of the job's cwd (default: the host's `code` in "
                   "hosts.toml)")
    p = qsub.add_parser("mv", help="move a queued job to a position (0: next to start)")
    p.add_argument("host")
    p.add_argument("job")
    p.add_argument("--to", type=int, required=True, metavar="POS")
    p.add_argument("--json", action="store_true", help="print the box's answer as JSON")
    for verb, what in (("pause", "start no new job on the host (running ones go on)"),
                       ("resume", "start queued jobs again")):
        p = qsub.add_parser(verb, help=what)
        p.add_argument("host")
        p.add_argument("--json", action="store_true", help="print the box's answer as JSON")
    p = qsub.add_parser("edit", help="add a changed copy of a job (argv, env, GPUs) as a new "
                        "job; the old one is kept: gpuroom queue edit HOST JOB [opts] [-- CMD]")
    p.add_argument("host")
    p.add_argument("job")
    p.add_argument("--name")
    p.add_argument("--gpus", type=int)
    p.add_argument("--env", action="append", default=[], metavar="K=V")
    p.add_argument("--unset-env", action="append", default=[], metavar="K")
    p.add_argument("--json", action="store_true", help="print the box's answer as JSON")
    p.add_argument("argv", nargs=argparse.REMAINDER, help="[-- CMD ARGS...] a new command")
    p.set_defaults(add_parser=p)
    p = qsub.add_parser("start", help="start the queue's runner if it is dead (a killed tmux, a "
                        "reboot with no @reboot entry); a no-op while one runs")
    p.add_argument("host")
    p.add_argument("--queue", default=DEFAULT_QUEUE, help="the queue (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the box's answer as JSON")
    p = qsub.add_parser("boot-hook", help="install an @reboot crontab entry that starts the "
                        "queue's runner after a reboot (GEN6)")
    p.add_argument("host")
    p.add_argument("--json", action="store_true", help="print the box's answer as JSON")
    p = qsub.add_parser("logs", help="a job's log (-f to follow)")
    p.add_argument("host")
    p.add_argument("job")
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument("-n", "--lines", type=int, default=None, metavar="N",
                   help="only the last N lines (like tail -n)")
    from gpuroom.tui.cli.move import add_cli as add_move_cli

    add_move_cli(qsub)
    queue.set_defaults(func=cmd_queue)


def _fleet(args: argparse.Namespace) -> tuple[Fleet, str]:
    """The fleet and the host's queue backend (``slurm`` when its profile is slurm)."""
    config = load_config(args)
    return Fleet(config), queue_backend(host_config(config, args.host).profile)


def failover_targets(args: argparse.Namespace) -> tuple[str, ...]:
    """--failover's hosts, each one of hosts.toml's, not the job's own host, and one that may
    receive a moved job (this machine only with accept_moves = true)."""
    names = [n.strip() for n in str(args.failover).split(",") if n.strip()]
    hosts = {h.name: h for h in load_config(args).effective_hosts()}
    bad = [n for n in names if n not in hosts or n == args.host]
    if not names or bad:
        raise cfg.ConfigError(f"--failover {args.failover}: not another host of hosts.toml: "
                              f"{', '.join(bad) or 'none given'}",
                              f"name other hosts (have: {', '.join(sorted(hosts))})")
    for name in names:
        why = move_target_refusal(hosts[name])
        if why is not None:
            raise cfg.ConfigError(f"--failover {args.failover}: {why}", accept_moves_fix(name))
    return tuple(names)


def _host(args: argparse.Namespace) -> cfg.HostConfig | None:
    return {h.name: h for h in load_config(args).effective_hosts()}.get(args.host)


def _profile(host: cfg.HostConfig | None) -> Profile | None:
    """The host's platform profile (None when it names none or it does not load)."""
    try:
        return load_profile(host.profile) if host is not None else None
    except ProfileError:
        return None


def json_or_fail(host: str, what: str, result: ExecResult) -> dict[str, Any]:
    try:
        doc = load_answer(result.stdout)
    except ValueError:
        raise LinkError(host, f"queue {what} failed ({result.failure()})") from None
    if not isinstance(doc, dict):
        raise LinkError(host, f"queue {what}: unexpected answer")
    for key in ("error", "fix", "warning", "info"):  # the lines a person reads
        if isinstance(doc.get(key), str):
            doc[key] = for_host(doc[key], host)
    return doc


class LogWriter:
    """A job's log bytes to stdout. On a terminal every line is inert display text, and the
    line the job is still writing (a progress bar redrawn with "\\r") shows as it looks now,
    redrawn in place; elsewhere (a pipe, a file) the bytes go out as the box has them."""

    CLEAR_LINE = "\r\x1b[K"  # ours, not the box's: back to column 0, erase the line

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self._splitter = LineSplitter()
        self._partial = False

    def write(self, data: bytes) -> None:
        if not self.tty:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            return
        out = [self.CLEAR_LINE] if self._partial else []
        out += [line + "\n" for line in self._splitter.feed(data)]
        partial = self._splitter.partial()
        self._partial = partial is not None
        if partial is not None:
            out.append(partial)
        sys.stdout.write("".join(out))
        sys.stdout.flush()

    def close(self) -> None:
        """End the unfinished line, so the shell prompt starts on its own."""
        if self._partial:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self._partial = False


def _slurm_opts(args: argparse.Namespace) -> list[str]:
    opts = []
    for flag in ("time", "signal_lead", "cpus_per_task", "partition", "slurm_conf", "array"):
        value = getattr(args, flag, None)
        if value is not None:
            opts += ["--" + flag.replace("_", "-"), str(value)]
    return opts


def job_argv(args: argparse.Namespace) -> list[str]:
    """The job's command of `queue add`; options written after HOST (`add HOST --name x --
    cmd`), which REMAINDER swallowed, are parsed into ``args`` as this verb's options."""
    argv = list(args.argv)
    # `edit HOST JOB --env K=V` (no new command): every word is an option of the verb.
    needs_cut = args.queue_cmd != "edit"
    if argv[:1] and argv[0] != "--" and argv[0].startswith("-") and (
            "--" in argv or not needs_cut):
        cut = argv.index("--") if "--" in argv else len(argv)
        positionals = [args.host, *([args.job] if args.queue_cmd == "edit" else [])]
        args.add_parser.parse_args([*argv[:cut], *positionals], namespace=args)
        argv = argv[cut:]
        args.argv = argv  # parsed once: a second call must not append --env twice
    return argv[1:] if argv[:1] == ["--"] else argv


def _many_hosts(host: str) -> bool:
    return host == ANY_HOST or "," in host


async def _place(args: argparse.Namespace) -> int | None:
    """``add --host any`` (or a list): poll the hosts, pick the one with the asked GPUs and
    VRAM free (tui/rules/placement.py), say which and why; None when one was picked."""
    config = load_config(args)
    hosts = [h.name for h in config.effective_hosts()]
    wanted = hosts if args.host == ANY_HOST else [h.strip() for h in args.host.split(",")
                                                   if h.strip()]
    unknown = [h for h in wanted if h not in hosts]
    if unknown:
        raise unknown_host(config, unknown[0])
    fleet = Fleet(config)
    try:
        states = await asyncio.gather(*(fleet.poll_host(h) for h in wanted))
    finally:
        await fleet.close()
    gpus = 1 if args.gpus is None else args.gpus
    placed = choose_host([Candidate(s.name, s.state, s.view, s.error) for s in states],
                         gpus, args.vram_mib)
    for line in placed.seen:
        print_line(f"  {line}", "dim", err=True)
    if placed.host is None:
        if placed.most_gpus == 0:  # a CPU fleet: no wait brings a GPU
            fix = "run it on the CPU: the same command with --gpus 0"
        elif placed.most_gpus is not None:
            fix = f"ask for at most --gpus {placed.most_gpus}, or add a bigger host"
        else:
            fix = "wait, ask for fewer GPUs or less VRAM, or name a host"
        print_line(with_fix(f"gpuroom queue add: {placed.why}", fix), "red", err=True)
        return 1
    print_line(placed.why, err=bool(args.json))
    args.host = placed.host
    return None


class EnvError(GpuroomError):
    exit_code = 2


def env_on_stdin(items: list[str]) -> tuple[list[str], bytes | None]:
    """``--env K=V`` items as the helper's options and stdin (link.env_on_stdin)."""
    return link_env_on_stdin(parse_env(items))


def parse_env(items: list[str]) -> dict[str, str]:
    """``--env K=V`` items as a dict, or EnvError naming the bad one by its place."""
    env: dict[str, str] = {}
    for n, item in enumerate(items, 1):
        key, sep, value = item.partition("=")
        if not sep or not key:
            # The item is not echoed: it may be a bare token typed where KEY=VALUE belonged.
            raise EnvError(f"--env number {n} is not KEY=VALUE (no '=' or no name)",
                           "write --env NAME=value (a credential: gpuroom secret push)")
        env[key] = value
    return env


async def _run(args: argparse.Namespace) -> int:
    if args.queue_cmd == "move":
        from gpuroom.tui.cli.move import run_move

        return await run_move(args)
    if args.queue_cmd == "add" and _many_hosts(args.host):
        job_argv(args)  # options written after HOST (--gpus, --vram-mib) count for the choice
        refused = await _place(args)
        if refused is not None:
            return refused
    fleet, backend = _fleet(args)
    link = fleet.link(args.host)
    try:
        if args.queue_cmd == "add":
            argv = job_argv(args)
            if not argv:
                print("gpuroom queue add: give the command after --", file=sys.stderr)
                return 2
            doc = await add_job(link, args, argv, backend)
            if doc.get("warning") and not args.json:
                print_line(f"{args.host}: warning: {doc['warning']}", "yellow", err=True)
            if doc.get("info") and not args.json:
                print_line(f"{args.host}: info: {doc['info']}", err=True)
            if isinstance(doc.get("checkpoints"), str) and not args.json:
                print_line(f"{args.host}: checkpoints: {doc['checkpoints']}", err=True)
            return _answer(args, doc)
        if args.queue_cmd == "start":
            doc = json_or_fail(args.host, "start", await link.helper(
                "queue", "start", f"--queue={args.queue}"))
            if args.json or not doc.get("ok"):
                return _answer(args, doc)
            how = "started" if doc.get("started") else "already running"
            print_line(f"{args.host}: queue {doc.get('queue') or args.queue}: runner running "
                       f"({how})")
            return 0
        if args.queue_cmd == "boot-hook":
            doc = json_or_fail(args.host, "boot-hook",
                                await link.helper("queue", "install-reboot-hook"))
            if args.json or not doc.get("ok"):
                return _answer(args, doc)
            print_line(f"{args.host}: @reboot entry "
                       + ("installed" if doc.get("changed") else "already there") + ": "
                       + str(doc.get("line") or ""))
            return 0
        if args.queue_cmd == "config":
            opts = ["--backend", backend, *_slurm_opts(args)]
            for flag in ("slots", "idle_exit", "kill_grace", "spot", "metadata_url"):
                value = getattr(args, flag)
                if value is not None:
                    opts.append(f"--{flag.replace('_', '-')}={value}")
            doc = json_or_fail(args.host, "config", await link.helper("queue", "config", *opts))
            return _answer(args, doc)
        if args.queue_cmd == "ls":
            doc = json_or_fail(args.host, "ls", await link.helper("queue", "ls"))
            if args.json:
                print(json.dumps(doc))
            else:
                _print_jobs(doc, Lineage(MirrorState()).for_host(args.host))
            return 0
        if args.queue_cmd in ("kill", "relaunch", "rm", "mv"):
            extra = [str(args.to)] if args.queue_cmd == "mv" else []
            return _answer(args, await job_verb(link, args.host, args.queue_cmd, args.job,
                                                *extra))
        if args.queue_cmd in ("pause", "resume"):
            doc = json_or_fail(args.host, args.queue_cmd,
                                await link.helper("queue", args.queue_cmd))
            return _answer(args, doc)
        if args.queue_cmd == "edit":
            argv = job_argv(args)
            # "--opt=value": a value starting with "-" stays a value on the box.
            opts = [*([f"--name={args.name}"] if args.name else []),
                    *([f"--gpus={args.gpus}"] if args.gpus is not None else [])]
            env_opts, env_stdin = env_on_stdin(args.env)
            opts += env_opts
            opts += [f"--unset-env={item}" for item in args.unset_env]
            doc = json_or_fail(args.host, "edit", await link.helper(
                "queue", "edit", args.job, *opts, *(["--", *argv] if argv else []),
                stdin=env_stdin))
            return _answer(args, doc)
        if args.queue_cmd == "verify":
            tree = _tree(args)  # before the box is asked: nothing to compare is the user's fix
            doc = json_or_fail(args.host, "show",
                                await link.helper("queue", "show", "--", args.job))
            return _verify(args, doc, tree)
        if args.queue_cmd == "show":
            doc = json_or_fail(args.host, "show",
                                await link.helper("queue", "show", "--", args.job))
            return _show(args, doc)
        if args.queue_cmd == "logs":
            return await _logs(link, args)
        return 2
    finally:
        await fleet.close()


async def add_job(link: Any, args: argparse.Namespace, argv: list[str],
                  backend: str) -> dict[str, Any]:
    """`queue add`'s work, for every client of it (this verb, `gpuroom mcp`): the helper's
    options from ``args`` (the add parser's namespace), the box's answer, and the intent
    recorded here once the box took the job."""
    opts = ["--retries", str(args.retries)]
    if args.gpus is not None:
        opts += ["--gpus", str(args.gpus)]
    if args.vram_mib is not None:
        opts += ["--vram-mib", str(args.vram_mib)]
    for flag in ("name", "cwd", "durable_dir"):
        value = getattr(args, flag)
        if value:  # "--opt=value": a value starting with "-" stays a value on the box
            opts.append(f"--{flag.replace('_', '-')}={value}")
    # What the user asked, recorded here once the box answers (tui/fleet/intent.py):
    # what the mirror, a move and a failover act on; the box's copy is only shown.
    intent = Intent(host=args.host, job="", argv=tuple(argv), added_at=time.time(),
                    cwd=args.cwd, env=parse_env(args.env), name=args.name,
                    gpus=args.gpus, vram_mib=args.vram_mib, retries=args.retries,
                    retry_on_exit=args.retry_on_exit, outputs=tuple(args.output),
                    ckpts=tuple(args.ckpt),
                    durable_dir=args.durable_dir, priority=args.priority,
                    mirror=bool(args.mirror),
                    failover=failover_targets(args) if args.failover else ())
    env_opts, env_stdin = link_env_on_stdin(intent.box_env())
    opts += env_opts
    opts += [f"--secret={item}" for item in args.secret]
    opts += [f"--output={item}" for item in args.output]
    opts += [f"--ckpt={item}" for item in args.ckpt]
    if args.retry_on_exit:
        opts.append("--retry-on-exit")
    if args.after:
        opts += ["--after", args.after]
    if args.priority is not None:
        opts += ["--priority", str(args.priority)]
    if args.fix_crlf:
        opts.append("--fix-crlf")
    opts += ["--backend", backend, *_slurm_opts(args)]
    host = _host(args)
    for path in stop_surviving_paths(_profile(host)):
        opts.append(f"--survives={path}")
    for path in stop_only_paths(_profile(host)):
        opts.append(f"--stop-only={path}")
    for path in stop_surviving_paths(_profile(host), survives=False):
        opts.append(f"--node-local={path}")
    if host is not None and host.spot:
        opts.append(f"--spot={host.spot}")
    doc = json_or_fail(args.host, "add", await link.helper(
        "queue", "add", *opts, "--", *argv, stdin=env_stdin))
    if doc.get("ok"):
        MirrorState().intents.record(dataclasses.replace(
            intent, job=check_job_id(args.host, doc.get("job")),
            queue_id=queue_identity(doc.get("queue_id"))))
    return doc


async def job_verb(link: Any, host: str, verb: str, job: str, *extra: str) -> dict[str, Any]:
    """kill, relaunch, rm or mv of one job, for every client: the box's answer."""
    helper_verb = {"rm": "remove", "mv": "move"}.get(verb, verb)
    return json_or_fail(host, verb, await link.helper("queue", helper_verb, "--", job, *extra,
                                                       timeout_s=180.0))


class _LogsFailed(LinkError):
    """The helper refused the log read (no such job, no log yet)."""


async def log_chunk(link: Any, host: str, job: str, *, lines: int | None = None,
                    offset: int | None = None,
                    max_bytes: int = LOG_TAIL_BYTES) -> tuple[LogChunk, bytes]:
    """A job's log: its last ``lines`` lines, or the bytes from ``offset`` on, at most
    ``max_bytes`` (untrusted bytes: the caller makes them inert)."""
    where = ["--offset", str(max(0, offset))] if offset is not None and lines is None \
        else ["--lines", str(max(0, lines or 0))]
    result = await link.helper("queue", "logs", *where, "--max-bytes", str(max_bytes),
                               "--json", "--", job)
    if result.rc != 0:
        raise _LogsFailed(host, f"queue logs failed ({result.failure()})")
    chunk = read_log_doc(json_or_fail(host, "logs", result))
    data = chunk.data
    if data is None or chunk.next_offset is None:
        raise LinkError(host, "queue logs answered a chunk without its bytes")
    return chunk, data


def _answer(args: argparse.Namespace, doc: dict[str, Any]) -> int:
    """The box's answer to add/config/kill/relaunch: JSON with --json, else one line."""
    if getattr(args, "json", False):  # verify has no --json: its refusal is a line too
        print(json.dumps(doc))
    else:
        ok = bool(doc.get("ok"))
        print_line(answer_text(args.queue_cmd, args.host, doc), "" if ok else "red", err=not ok)
    return 0 if doc.get("ok") else 1


def answer_text(verb: str, host: str, doc: dict[str, Any]) -> str:
    """One line for a person (issue 17): what happened to which job, or what failed and
    the fix. Box text in it is made inert by the printer (tables.print_line)."""
    job = str(doc.get("job") or "")
    queue = str(doc.get("queue") or "default")
    if doc.get("result") == "rejected":
        why = (doc.get("event") or {}).get("why") or doc.get("why") or doc.get("error") \
            or "nothing to do"
        done = {"rm": "removed", "mv": "moved", "kill": "killed"}.get(verb, verb + "ed")
        return f"{host}: {job} not {done}: {why}"
    if not doc.get("ok"):
        why = str(doc.get("error") or (doc.get("event") or {}).get("why")
                  or doc.get("why") or doc.get("result") or "the box said no")
        fix = doc.get("fix")
        what = f"{verb} {job}".strip()
        return with_fix(f"{host}: {what} failed: {why}", str(fix) if fix else None)
    if verb == "add":
        where = f"Slurm job {doc['slurm_id']}" if doc.get("slurm_id") else f"queue {queue}"
        return f"{host}: added {job} to {where}"
    if verb == "config":
        return f"{host}: queue {queue} configured"
    if verb in ("pause", "resume"):
        if verb == "pause":
            return f"{host}: queue {queue} paused: no new job starts; running ones go on"
        return f"{host}: queue {queue} resumed: queued jobs start again"
    if verb == "edit":
        return f"{host}: added {job}, an edited copy of {doc.get('edited_from')} (which is kept)"
    if verb == "rm":
        return f"{host}: {job} removed from the queue"
    if verb == "mv":
        return f"{host}: {job} moved to position {(doc.get('event') or {}).get('position')}"
    result = str(doc.get("result") or "")
    event = doc.get("event") or {}
    if verb == "kill":
        how = event.get("sent") or event.get("was")
        return f"{host}: {job} killed" + (f" ({how})" if how else "")
    return f"{host}: {job} {result or 'requeued'}: the same command runs as a new attempt"


def _show(args: argparse.Namespace, doc: dict[str, Any]) -> int:
    """``queue show``: the job's lines (tui/present/jobdetail.py), or its JSON with every env
    value replaced, since a value may be a token (secrets never leave as text)."""
    if not doc.get("ok"):
        return _answer(args, doc)
    jobs = doc.get("jobs")
    if args.json:
        for job in jobs if isinstance(jobs, list) else []:
            if isinstance(job, dict) and isinstance(job.get("env"), dict):
                job["env"] = redact_env(job["env"])  # the box did; an old helper may not
        print(json.dumps(doc))
        return 0
    view = read_queue_view(doc)
    if not view.jobs:
        print_line(f"{args.host}: no job {args.job} in the answer", "red", err=True)
        return 1
    lineage = Lineage(MirrorState()).for_host(args.host).get(view.jobs[0].id, "")
    for line in detail_lines(view.jobs[0], time.time(), lineage):
        print_line(line)
    return 0


def _tree(args: argparse.Namespace) -> str:
    """``queue verify``'s tree: --tree, else the host's ``code`` in hosts.toml."""
    host = _host(args)
    tree = args.tree or (host.code if host is not None else None)
    if not tree:
        raise GpuroomError(f"{args.host}: no tree to compare the job's code with",
                           f"gpuroom queue verify {args.host} {args.job} --tree ~/src/proj, or "
                           f"code = \"~/src/proj\" under [hosts.{args.host}] in hosts.toml")
    return str(tree)


def _verify(args: argparse.Namespace, doc: dict[str, Any], tree: str) -> int:
    """``queue verify``: 0 when the box runs the code of the user's tree, 1 when it differs
    (one line per difference), 2 when there is nothing to compare with."""
    if not doc.get("ok"):
        return _answer(args, doc)
    view = read_queue_view(doc)
    if not view.jobs:
        print_line(f"{args.host}: no job {args.job} in the answer", "red", err=True)
        return 1
    job = view.jobs[0]
    same, lines = code_verdict(job, read_tree(Path(tree), script_rel_paths(job)))
    for line in lines:
        print_line(f"{args.host}: {job.id}: {line}", "" if same else "yellow")
    return 2 if same is None else 0 if same else 1


async def _logs(link: Any, args: argparse.Namespace) -> int:
    out = LogWriter(sys.stdout.isatty())
    try:
        return await _write_logs(link, args, out)
    finally:
        out.close()


async def _write_logs(link: Any, args: argparse.Namespace, out: LogWriter) -> int:
    offset = 0
    if args.lines is not None:
        # The last N lines (from a line start, at most LOG_TAIL_BYTES); with -f, then what
        # follows. Without -f that is all: lines written while the answer travelled would
        # make it more than N.
        try:
            chunk, data = await log_chunk(link, args.host, args.job, lines=args.lines)
        except _LogsFailed as exc:
            print(f"gpuroom: {exc}", file=sys.stderr)
            return 1
        assert chunk.next_offset is not None  # log_chunk checked it
        out.write(data)
        if not args.follow:
            return 0
        offset = chunk.next_offset
    while True:
        result = await link.helper("queue", "logs", "--offset", str(offset),
                                   "--max-bytes", str(LOG_CHUNK_BYTES), "--", args.job)
        if result.rc != 0:
            print(f"gpuroom: {args.host}: queue logs failed ({result.failure()})",
                  file=sys.stderr)
            return 1
        if result.stdout:
            out.write(result.stdout)
            offset += len(result.stdout)
            if len(result.stdout) >= LOG_CHUNK_BYTES:
                continue  # more is waiting: read on before sleeping
        if not args.follow:
            return 0
        await asyncio.sleep(FOLLOW_INTERVAL_S)


def _print_jobs(doc: dict[str, Any], moves: Mapping[str, str] | None = None) -> None:
    """``moves``: the lineage of `queue move` (job id: "moved to B/j3", "from A/j7")."""
    view = read_queue_view(doc)
    moves = {j.id: moves[j.id] for j in view.jobs if moves and j.id in moves}
    slurm = any(job.slurm_id for job in view.jobs)
    waiting = any(job.waiting for job in view.jobs)
    # Priority and dependencies get their columns once any job has one (issue 20).
    prio = any(job.priority for job in view.jobs)
    after = any(job.after for job in view.jobs)
    columns = ["id", "name", "state", *(["prio"] if prio else []), "attempts", "exit",
               "duration", "command"]
    extra = [*(["moved"] if moves else []), *(["after"] if after else []),
             *(["waits for"] if waiting else []),
             *(["slurm"] if slurm else [])]
    table = box_table(f"queue {view.name}", [*columns, *extra])
    for job in view.jobs:
        last = job.last_attempt
        exit_text = "-"
        if last is not None and last.exit_code is not None:
            exit_text = str(last.exit_code)
        elif last is not None and last.signal:
            exit_text = f"sig {last.signal}"
        duration = last.duration if last is not None else None
        cells: list[Cell] = [job.id, job.name or "", job.state,
                             *([job.priority or 0] if prio else []), len(job.attempts),
                             exit_text, fmt_age(duration),
                             fmt_cut(display_line(job.command.encode()), COMMAND_WIDTH)]
        if moves:
            cells.append(moves.get(job.id, ""))
        if after:
            cells.append(",".join(job.after))
        if waiting:
            cells.append(job.waiting or "")
        if slurm:
            cells.append(display_line(slurm_summary(job).encode()))
        add_row(table, cells)
    print_table(table)
    runner = view.runner
    if runner is not None and runner.write_error:
        print_line(f"the runner cannot write: {runner.write_error}", "bold red")
    if runner is not None and runner.error:
        print_line(f"the runner keeps failing (it retries): {runner.error}", "bold red")
    # A line of the events file the queue skipped is a job or a full disk at work: said.
    for warning in view.warnings:
        print_line(f"warning: {warning}", "yellow")


def cmd_queue(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))
