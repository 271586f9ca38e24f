"""Autostop: an opt-in watchdog on the box that runs the user's own stop command once the
box has done nothing for the armed time, and keeps watching while the jump host sleeps.

Nothing fires unless the user armed it with the command in their own words (an argv, never a
shell string), and a command whose words destroy the box (terminate, destroy, delete, ...)
is refused unless armed with --allow-destroy. It fires only when, checked on the box: no job
is queued or running, the probe's idle section (remote/idle.py) says idle (no foreign GPU
process, GPUs at rest) for the armed time counted from the later of the idle start and the
arming, the box is still in the boot it was armed in (a reboot mid-count disarms the count),
every succeeded job's declared outputs are synced to the durable dir, and it is not
postponed. It fires once, then disarms; every arming, disarming and firing is a line of
``autostop-events.jsonl`` (who armed it, when it fired, what the command said).

Subcommands: ``arm --idle S [--allow-destroy] [--by WHO] -- ARGV...``, ``disarm``,
``postpone S``, ``status``, ``watch`` (the detached loop ``arm`` starts).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from .queue_events import LIVE_STATES, root_dir

CONFIG_FILE = "autostop.json"
EVENTS_FILE = "autostop-events.jsonl"
WATCH_EVERY_S = 30.0
COMMAND_TIMEOUT_S = 300.0
OUTPUT_MAX = 2000  # bytes of the stop command's output kept in its event
# Words that name a verb ending the box and its disk rather than stopping it: RunPod's
# remove/terminate, vast.ai's destroy, AWS's terminate-instances, GCP's delete, a release.
DESTROY_WORDS = frozenset({"terminate", "terminate-instances", "terminate-instance", "destroy",
                           "delete", "delete-instance", "remove", "rm", "release"})


class Refused(ValueError):
    """An arming the watchdog will not take: the message says why and what to do."""


def _path(root: str, name: str) -> str:
    return os.path.join(root, name)


def _boot_id() -> Optional[str]:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _write_private(path: str, doc: Dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def record(root: str, ev: str, **fields: Any) -> None:
    os.makedirs(root, exist_ok=True)
    line = json.dumps({"t": round(time.time(), 3), "ev": ev, **fields}) + "\n"
    fd = os.open(_path(root, EVENTS_FILE), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a") as f:
        f.write(line)


def is_destroy(argv: List[str]) -> bool:
    return any(os.path.basename(a).lower() in DESTROY_WORDS for a in argv)


def load(root: str) -> Optional[Dict[str, Any]]:
    try:
        with open(_path(root, CONFIG_FILE), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("argv") else None


def arm(root: str, idle_s: float, argv: List[str], *, allow_destroy: bool, by: str,
        boot_id: Optional[str] = None) -> Dict[str, Any]:
    if not argv or not all(isinstance(a, str) and a for a in argv):
        raise Refused("autostop needs the stop command as words after --, e.g. "
                      "-- sudo shutdown -h now")
    if not idle_s > 0:
        raise Refused(f"autostop --idle {idle_s}: give a positive number of seconds")
    if is_destroy(argv) and not allow_destroy:
        raise Refused(f"autostop command {' '.join(argv)!r} destroys the box (a word of it "
                      "terminates, destroys, deletes, removes or releases): arm it with "
                      "--allow-destroy after pulling every checkpoint home, or use the "
                      "platform's stop verb")
    cfg = {"idle_s": float(idle_s), "argv": list(argv), "allow_destroy": bool(allow_destroy),
           "armed_at": time.time(), "boot_id": boot_id or _boot_id(), "by": by,
           "postponed_until": None}
    _write_private(_path(root, CONFIG_FILE), cfg)
    record(root, "armed", by=by, idle_s=cfg["idle_s"], argv=cfg["argv"],
           allow_destroy=cfg["allow_destroy"])
    return cfg


def disarm(root: str, by: str, why: str = "asked") -> bool:
    try:
        os.unlink(_path(root, CONFIG_FILE))
    except FileNotFoundError:
        return False
    record(root, "disarmed", by=by, why=why)
    return True


def _number(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def _dict(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _jobs(doc: Dict[str, Any]) -> List[Dict[str, Any]]:
    queue = doc.get("queue")
    queues = queue.get("queues") if isinstance(queue, dict) else None
    out: List[Dict[str, Any]] = []
    for view in (queues.values() if isinstance(queues, dict) else ()):
        jobs = view.get("jobs") if isinstance(view, dict) else None
        out += [j for j in (jobs if isinstance(jobs, list) else []) if isinstance(j, dict)]
    return out


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h"


def decide(cfg: Dict[str, Any], doc: Dict[str, Any], now: float) -> Tuple[bool, str]:
    """Whether to run the stop command now, and why (or why not)."""
    host = _dict(doc.get("host"))
    if cfg.get("boot_id") and host.get("boot_id") != cfg.get("boot_id"):
        return False, "the box rebooted since it was armed: arm it again"
    postponed = _number(cfg.get("postponed_until"))
    if postponed is not None and now < postponed:
        return False, f"postponed for {_hours(postponed - now)}"
    jobs = _jobs(doc)
    live = [j for j in jobs if j.get("state") in LIVE_STATES]
    if live:
        return False, f"{len(live)} job(s) queued or running"
    unsynced = [str(j.get("id")) for j in jobs if j.get("state") == "succeeded"
                and j.get("outputs") and _dict(j.get("sync")).get("state") != "synced"]
    if unsynced:
        return False, f"outputs not synced for {', '.join(unsynced[:4])}"
    idle = _dict(doc.get("idle"))
    busy = idle.get("busy")
    if busy:
        return False, f"busy ({busy})"
    since = _number(idle.get("idle_since"))
    if since is None:
        return False, "since when the box is idle is unknown"
    since = max(since, _number(cfg.get("armed_at")) or since)
    idle_s = _number(cfg.get("idle_s")) or float("inf")
    if now - since < idle_s:
        return False, f"idle {_hours(now - since)} of {_hours(idle_s)}"
    return True, f"idle {_hours(now - since)} of {_hours(idle_s)}"


def tick(root: str, session: Any, now: Optional[float] = None) -> Optional[Tuple[bool, str]]:
    """One check: probe the box, decide, and fire once. None when not armed."""
    from .probe import ProbeSession

    cfg = load(root)
    if cfg is None:
        return None
    session = session or ProbeSession()
    doc = session.snapshot({"queue_root": root})
    now = time.time() if now is None else now
    fire, why = decide(cfg, doc, now)
    if not fire:
        if "rebooted" in why:
            disarm(root, by="watchdog", why=why)
        return fire, why
    disarm(root, by="watchdog", why="fired")  # once: a failing command is not retried
    try:
        proc = subprocess.run(cfg["argv"], stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=COMMAND_TIMEOUT_S, check=False)
        rc: Optional[int] = proc.returncode
        out = (proc.stdout + proc.stderr)[-OUTPUT_MAX:].decode("utf-8", "replace")
    except (OSError, subprocess.TimeoutExpired) as exc:
        rc, out = None, f"{type(exc).__name__}: {exc}"
    record(root, "fired", why=why, argv=cfg["argv"], rc=rc, output=out)
    return fire, why


def watch(root: str, every_s: float = WATCH_EVERY_S) -> int:
    """The detached loop: check every ``every_s`` until disarmed (or fired)."""
    from .probe import ProbeSession

    session = ProbeSession()
    try:
        while True:
            if tick(root, session) is None:
                return 0
            cfg = load(root) or {}
            # A short idle time is checked more often: it fires within a tenth of it late.
            time.sleep(min(every_s, max(0.5, (_number(cfg.get("idle_s")) or every_s) / 10)))
    finally:
        session.close()


def _start_watch(root: str, every_s: float) -> None:
    from .queue_runner import self_argv

    log = _path(root, "autostop.log")
    with open(log, "ab") as logf:
        # Its own session, no terminal, stdin from /dev/null: it outlives the SSH session.
        subprocess.Popen([*self_argv(), "autostop", "watch", "--root", root,
                          "--every", str(every_s)], stdin=subprocess.DEVNULL, stdout=logf,
                         stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuroom-remote autostop")
    sub = parser.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("arm")
    a.add_argument("--idle", type=float, required=True, help="seconds idle before it fires")
    a.add_argument("--allow-destroy", action="store_true")
    a.add_argument("--by", default=os.environ.get("USER", "?"))
    a.add_argument("--every", type=float, default=WATCH_EVERY_S)
    a.add_argument("argv", nargs=argparse.REMAINDER)
    for name in ("disarm", "status", "watch", "postpone"):
        p = sub.add_parser(name)
        if name == "postpone":
            p.add_argument("seconds", type=float)
        if name == "watch":
            p.add_argument("--every", type=float, default=WATCH_EVERY_S)
    for p in sub.choices.values():
        p.add_argument("--root", default=None)
    args = parser.parse_args(argv)
    root = root_dir(args.root)
    if args.cmd == "arm":
        words = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        try:
            cfg = arm(root, args.idle, words, allow_destroy=args.allow_destroy, by=args.by)
        except Refused as exc:
            sys.stdout.write(json.dumps({"ok": False, "error": str(exc)}) + "\n")
            return 2
        _start_watch(root, args.every)
        sys.stdout.write(json.dumps({"ok": True, "armed": cfg}) + "\n")
        return 0
    if args.cmd == "watch":
        return watch(root, args.every)
    if args.cmd == "disarm":
        sys.stdout.write(json.dumps({"ok": True, "disarmed": disarm(root, by="user")}) + "\n")
        return 0
    current = load(root)
    if args.cmd == "postpone" and current is not None:
        current["postponed_until"] = time.time() + args.seconds
        _write_private(_path(root, CONFIG_FILE), current)
        record(root, "postponed", seconds=args.seconds)
    sys.stdout.write(json.dumps({"ok": True, "armed": current}) + "\n")
    return 0
