"""`gpuroom secret push|ls|rm HOST ...`: a credential to the box through the helper's stdin.

U34, T4: the value is read here from stdin (a prompt without echo on a
terminal) or from an environment variable named by ``--from-env``, and reaches the box only
as the helper's stdin; it is on no command line on either side, in no event, snapshot or
recording. ``queue add --secret NAME[=ENVVAR]`` exports it when the job launches.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import shlex
import sys
import time
from typing import Any

import gpuroom.tui.config as cfg
from gpuroom.profiles import ProfileError, load_profile
from gpuroom.remote.secrets import MAX_SECRET_BYTES, SecretError, check_name
from gpuroom.tui.cli.load import host_config, load_config
from gpuroom.tui.cli.tables import add_row, box_table, print_line, print_table
from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.present.format import fmt_age
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.snapshot import load_answer
from gpuroom.tui.transport.link import LinkError


class SecretInputError(GpuroomError):
    exit_code = 2


def add_cli(sub: Any) -> None:
    secret = sub.add_parser("secret", help="credentials on a host, sent through stdin")
    ssub = secret.add_subparsers(dest="secret_cmd", required=True)
    p = ssub.add_parser("push", help="read the value from stdin (or --from-env VAR) and store "
                        "it 0600 on the host's per-instance disk")
    p.add_argument("host")
    p.add_argument("name", help="the secret's name (a shell variable name)")
    p.add_argument("--from-env", metavar="VAR", help="take the value from this env variable")
    p = ssub.add_parser("ls", help="the secrets on a host (names and sizes, no values)")
    p.add_argument("host")
    p = ssub.add_parser("rm")
    p.add_argument("host")
    p.add_argument("name")
    for p in ssub.choices.values():
        p.add_argument("--json", action="store_true", help="the helper's answer as JSON")
    secret.set_defaults(func=cmd_secret)


def read_value(args: argparse.Namespace) -> bytes:
    if args.from_env:
        value = os.environ.get(args.from_env)
        if not value:
            raise SecretInputError(f"--from-env {args.from_env}: the variable is not set",
                                   f"export {args.from_env}=... first, or pipe the value in")
        data = value.encode("utf-8")
    elif sys.stdin is not None and sys.stdin.isatty():
        data = getpass.getpass(f"value of {args.name} (not echoed): ").encode("utf-8")
    else:
        data = sys.stdin.buffer.read(MAX_SECRET_BYTES + 2)
    if len(data) > MAX_SECRET_BYTES:
        raise SecretInputError(f"the value is over {MAX_SECRET_BYTES} bytes",
                               "push one credential, not a whole file (U34)")
    if not data.strip():
        raise SecretInputError("the value is empty",
                               f"printf '%s' \"$TOKEN\" | gpuroom secret push "
                               f"{shlex.quote(args.host)} {args.name}")
    return data


def durable_paths(host: cfg.HostConfig) -> list[str]:
    """The profile's mounts that outlive the box (survive a destroy): a secret there reaches
    the next tenant (T4). The box's own disk survives a stop only and is the right place."""
    try:
        profile = load_profile(host.profile)
    except ProfileError:
        return []
    return [m.path for m in profile.mounts if m.path != "unknown" and m.survives_destroy is True]


async def _run(args: argparse.Namespace) -> int:
    config = load_config(args)
    host = host_config(config, args.host)
    if args.secret_cmd in ("push", "rm"):
        try:
            check_name(args.name)
        except SecretError as exc:
            raise SecretInputError(str(exc), "use a name like WANDB_API_KEY") from None
    stdin = read_value(args) if args.secret_cmd == "push" else None
    fleet = Fleet(config)
    try:
        link = fleet.link(args.host)
        if args.secret_cmd == "push":
            extra = [f"--not-under={p}" for p in durable_paths(host)]
            result = await link.helper("secret", "push", *extra, "--", args.name, stdin=stdin)
        elif args.secret_cmd == "ls":
            result = await link.helper("secret", "ls")
        else:
            result = await link.helper("secret", "rm", "--", args.name)
    finally:
        await fleet.close()
    try:
        doc = load_answer(result.stdout)
    except ValueError:
        raise LinkError(args.host, f"secret {args.secret_cmd} failed ({result.failure()})") \
            from None
    if not isinstance(doc, dict):
        raise LinkError(args.host, f"secret {args.secret_cmd}: unexpected answer")
    if not doc.get("ok"):
        print(f"gpuroom: {args.host}: {sanitize_line(str(doc.get('error')))}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(doc))
    else:
        _print_answer(args, doc)
    return 0


def _print_answer(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    """The helper's answer in words (names, sizes and modes are the box's: made inert)."""
    host = args.host
    if args.secret_cmd == "push":
        print_line(f"{host}: secret {args.name} stored ({doc.get('bytes')} bytes, mode "
                   f"{doc.get('mode')}) at {doc.get('path')}; a job gets it with "
                   f"queue add {host} --secret {args.name}")
    elif args.secret_cmd == "rm":
        print_line(f"{host}: secret {args.name} "
                   + ("removed" if doc.get("removed") else "was not there"))
    else:
        items = [i for i in doc.get("secrets") or [] if isinstance(i, dict)]
        if not items:
            print_line(f"{host}: no secrets in {doc.get('dir')}")
            return
        table = box_table(f"secrets on {host}", ("name", "bytes", "mode", "age"))
        now = time.time()
        for i in items:
            mtime = i.get("mtime")
            age = fmt_age(now - mtime) if isinstance(mtime, (int, float)) else None
            add_row(table, (i.get("name"), i.get("bytes"), i.get("mode"), age))
        print_table(table)
        print_line(f"in {doc.get('dir')} on {host}; values are never shown")


def cmd_secret(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))
