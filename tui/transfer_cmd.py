"""`gpuroom pull HOST [JOB]` and `gpuroom gate HOST`: outputs home, then the teardown gate.

The gate never stops anything: exit 0 says "safe to stop paying", 5 says what is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import platformdirs

from . import config as cfg
from .fleet import Fleet
from .gate import GateResult, evaluate, snapshot_jobs
from .link import HostLink, LinkError
from .transfer import Progress, PullError, load_records, pull, take_manifest

EXIT_NOT_SAFE = 5
PROGRESS_EVERY_S = 0.5


def add_cli(sub: Any) -> None:
    p = sub.add_parser("pull", help="pull a job's checkpoint dir (default: every job's)")
    p.add_argument("host")
    p.add_argument("job", nargs="?", default=None)
    p.add_argument("--to", metavar="DIR", help="local root (default: the host's pull_to)")
    p.set_defaults(func=cmd_pull)
    p = sub.add_parser("gate", help="teardown gate: is it safe to stop paying for HOST?")
    p.add_argument("host")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_gate)


def _fleet(args: argparse.Namespace) -> tuple[Fleet, cfg.HostConfig]:
    config = cfg.load(Path(args.config) if getattr(args, "config", None) else None)
    hosts = {h.name: h for h in config.effective_hosts()}
    if args.host not in hosts:
        raise cfg.ConfigError(f"no host {args.host!r} in {config.path} "
                              f"(have: {', '.join(hosts)}). Fix: gpuroom hosts add {args.host}")
    return Fleet(config), hosts[args.host]


async def queue_jobs(link: HostLink) -> list[dict[str, Any]]:
    result = await link.helper("queue", "ls")
    try:
        doc = json.loads(result.stdout)
    except ValueError:
        raise LinkError(link.name, f"queue ls failed (exit {result.rc}): "
                        f"{result.stderr.decode(errors='replace').strip()[-300:]}") from None
    return [j for j in doc.get("jobs") or [] if isinstance(j, dict)]


def _printer() -> Any:
    last = [0.0]

    def show(p: Progress) -> None:
        now = time.monotonic()
        if now - last[0] < PROGRESS_EVERY_S and p.done < p.total:
            return
        last[0] = now
        eta = f"{p.eta_s:.0f}s" if p.eta_s is not None else "?"
        print(f"\r{p.done >> 20}/{p.total >> 20} MiB  {p.rate_bps / (1 << 20):.1f} MiB/s  "
              f"ETA {eta}   ", end="", file=sys.stderr, flush=True)

    return show


async def _pull(args: argparse.Namespace) -> int:
    fleet, host = _fleet(args)
    link = fleet.link(args.host)
    root = Path(args.to or host.pull_to or
                Path(platformdirs.user_data_dir("gpuroom")) / "pulls").expanduser()
    failed = 0
    try:
        jobs = [j for j in await queue_jobs(link)
                if j.get("ckpt_dir") and (args.job is None or str(j.get("id")) == args.job)]
        if args.job is not None and not jobs:
            print(f"gpuroom pull: {args.host} has no job {args.job!r} with a checkpoint dir",
                  file=sys.stderr)
            return 1
        for job in jobs:
            jid = str(job["id"])
            result = await pull(link, str(job["ckpt_dir"]), root / args.host / jid, job=jid,
                                on_progress=_printer())
            print(file=sys.stderr)
            if not result.files and (result.manifest_reason or "").startswith("not a dir"):
                print(f"{jid}: nothing to pull ({result.manifest_reason})")
                continue
            for f in result.files:
                print(f"{jid}/{f.path}: {f.status}"
                      f"{' by ' + f.verified_by if f.verified_by else ''}"
                      f"{': ' + f.detail if f.detail else ''}")
            if result.note:
                print(f"{jid}: {result.note}")
            if not result.manifest_complete:
                print(f"{jid}: manifest cut ({result.manifest_reason}): pull again")
            failed += not result.ok
    except (LinkError, PullError) as exc:
        print(f"gpuroom pull: {exc}", file=sys.stderr)
        return 1
    finally:
        await fleet.close()
    return 1 if failed else 0


async def check_gate(link: HostLink) -> GateResult:
    """I/O for the gate: one snapshot, the job list, each job's manifest, the records."""
    snapshot = await link.poll({})
    jobs = await queue_jobs(link)
    outputs: dict[str, list[dict[str, Any]] | None] = {}
    for job in jobs:
        if not job.get("ckpt_dir"):
            continue
        doc = await take_manifest(link, str(job["ckpt_dir"]))
        if doc.get("complete"):
            outputs[str(job["id"])] = doc["files"]
        elif str(doc.get("reason") or "").startswith("not a directory"):
            outputs[str(job["id"])] = []  # the job never wrote a checkpoint dir
        else:
            outputs[str(job["id"])] = None
    if not snapshot_jobs(snapshot) and jobs:
        # The probe's queue view is bounded; fall back to the full list for finality.
        snapshot = {**snapshot, "queue": {"queues": {"default": {"jobs": jobs}}}}
    return evaluate(link.name, snapshot, load_records(), outputs,
                    expected_helper_sha=link.archive.sha256)


async def _gate(args: argparse.Namespace) -> int:
    fleet, _host = _fleet(args)
    try:
        result = await check_gate(fleet.link(args.host))
    except (LinkError, PullError) as exc:
        print(f"gpuroom gate: {exc}", file=sys.stderr)
        return 1
    finally:
        await fleet.close()
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        for item in result.items:
            print(f"[{'x' if item.ok else ' '}] {item.name}: {item.detail}")
        print(f"{args.host}: " + ("safe to stop" if result.safe else "NOT safe to stop"))
    return 0 if result.safe else EXIT_NOT_SAFE


def cmd_pull(args: argparse.Namespace) -> int:
    return asyncio.run(_pull(args))


def cmd_gate(args: argparse.Namespace) -> int:
    return asyncio.run(_gate(args))
