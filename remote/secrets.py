"""``gpuroom-remote secret ...``: credentials that arrive on stdin and leave as a job's env.

U34, T4: a value on a command line is in every ``ps`` of the box and in
the jump host's shell history; a value in ``queue add --env`` is in events.jsonl, every
snapshot and every recording. Here the value flows pipe -> 0600 file on the box's
per-instance disk, and the runner reads that file when it launches a job that names it.

  push NAME [--not-under PATH]...   the value is stdin (one trailing newline dropped)
  ls                                names, sizes and times; never a value
  rm NAME

Every subcommand prints one JSON object that never holds a value.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

from .queue_events import HOST_IN_FIX, root_dir

MAX_SECRET_BYTES = 64 * 1024
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
REDACTED = "<redacted>"
# Env values the doctor reads (U40's thread caps) and that are no credential: shown as they are.
PUBLIC_ENV = frozenset({"OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
                        "PYTHONUNBUFFERED",
                        # gpuroom's own flags (queue add --mirror, --failover HOSTS), which
                        # the jump host's fleet reads from the probe (tui/fleet/mirror.py)
                        "GPUROOM_MIRROR", "GPUROOM_FAILOVER"})
# A file system here is shared across instances or outlives the box (T4: never there).
SHARED_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "ceph", "beegfs",
             "glusterfs", "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.juicefs",
             "fuse.rclone", "fuse.goofys", "fuse.blobfuse", "fuse.mountpoint-s3", "9p")


class SecretError(Exception):
    def __init__(self, message: str, fix: Optional[str] = None) -> None:
        super().__init__(message)
        self.fix = fix


def secrets_dir(root: Optional[str] = None) -> str:
    override = os.environ.get("GPUROOM_SECRETS_DIR")
    return os.path.abspath(os.path.expanduser(override)) if override else \
        os.path.join(root_dir(root), "secrets")


def check_name(name: str) -> str:
    if not NAME_RE.match(name or ""):
        raise SecretError(f"secret name {name!r} is not a shell variable name "
                          "(letters, digits, _; not starting with a digit; at most 64)")
    return name


def _mount_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> Tuple[str, str]:
    """(mount point, fs type) of the longest mount point that contains ``path``."""
    best = ("/", "")
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return best
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or not rest:
            continue
        point = fields[4].replace("\\040", " ")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            best = (point, rest[0])
    return best


def check_location(directory: str, not_under: Iterable[str],
                   mountinfo: str = "/proc/self/mountinfo") -> None:
    """Refuse a durable or shared place for a credential (T4)."""
    real = os.path.realpath(directory)
    for durable in not_under:
        d = os.path.realpath(os.path.expandvars(os.path.expanduser(durable)))
        if real == d or real.startswith(d.rstrip("/") + "/"):
            raise SecretError(f"{directory} is on the durable mount {durable}; a credential "
                              "there outlives the box and reaches every co-tenant. Fix: set "
                              "GPUROOM_SECRETS_DIR to a path on the per-instance disk")
    point, fstype = _mount_of(real, mountinfo)
    if fstype in SHARED_FS:
        raise SecretError(f"{directory} is on a shared {fstype} file system ({point}). Fix: "
                          "set GPUROOM_SECRETS_DIR to a path on the per-instance disk")


def _existing_parent(path: str) -> str:
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def push(name: str, value: bytes, *, root: Optional[str] = None,
         not_under: Iterable[str] = ()) -> Dict[str, Any]:
    check_name(name)
    if len(value) > MAX_SECRET_BYTES:
        raise SecretError(f"secret over {MAX_SECRET_BYTES} bytes")
    if value.endswith(b"\n"):
        value = value[:-1]  # `printf '%s\n' "$TOKEN" |` and `echo` add one
    if not value:
        raise SecretError("empty value on stdin; pipe the value in (or --from-env VAR)")
    directory = secrets_dir(root)
    check_location(_existing_parent(directory), not_under)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    check_location(directory, not_under)
    path = os.path.join(directory, name)
    tmp = f"{path}.tmp{os.getpid()}"
    # O_EXCL with mode 0600: the file is never readable by another user, not even briefly.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(value)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return {"ok": True, "name": name, "path": path, "bytes": len(value), "mode": "0600"}


def secret_path(name: str, root: Optional[str] = None) -> str:
    return os.path.join(secrets_dir(root), check_name(name))


def parse_spec(spec: str) -> Tuple[str, str]:
    """``NAME[=ENVVAR]`` of ``queue add --secret``: (secret name, the job's variable)."""
    name, _, var = spec.partition("=")
    return check_name(name), check_name(var or name)


def job_secrets(specs: List[str], root: Optional[str] = None) -> List[Dict[str, str]]:
    """What ``queue add --secret`` stores in the event: names and paths, never a value.
    A secret not pushed yet is refused now, not at launch."""
    out = []
    for spec in specs:
        name, var = parse_spec(spec)
        path = secret_path(name, root)
        if not os.path.isfile(path):
            raise SecretError(f"no secret {name!r} on this box ({path})",
                              f"gpuroom secret push {HOST_IN_FIX} {name} < file "
                              "(or --from-env VAR)")
        out.append({"name": name, "env": var, "path": path})
    return out


def secret_env(job: Dict[str, Any]) -> Tuple[Dict[str, str], List[str]]:
    """The env a job's ``secrets`` give it at launch, and one line per secret that is gone."""
    env: Dict[str, str] = {}
    missing = []
    for item in job.get("secrets") or []:
        try:
            with open(str(item["path"]), "rb") as f:
                env[str(item["env"])] = f.read(MAX_SECRET_BYTES).decode("utf-8", "replace")
        except (OSError, KeyError, TypeError) as exc:
            # A log line, read as the box wrote it: no jump host fills in the host's name.
            missing.append(f"secret {item.get('name')!r} unreadable ({type(exc).__name__}); "
                           "push it again from the jump host: gpuroom secret push, this "
                           f"host's name, {item.get('name')}")
    return env, missing


def redact_env(env: Any) -> Dict[str, str]:
    """A job's env as every view shows it: names, and values only where they are no secret."""
    if not isinstance(env, dict):
        return {}
    return {str(k): (str(v) if k in PUBLIC_ENV else REDACTED) for k, v in env.items()}


def listing(root: Optional[str] = None) -> Dict[str, Any]:
    directory = secrets_dir(root)
    items = []
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        names = []
    for name in names:
        if not NAME_RE.match(name):
            continue
        st = os.stat(os.path.join(directory, name))
        items.append({"name": name, "bytes": st.st_size, "mtime": st.st_mtime,
                      "mode": oct(st.st_mode & 0o777)[2:].rjust(4, "0")})
    return {"ok": True, "dir": directory, "secrets": items}


def _emit(doc: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(doc, separators=(",", ":"), sort_keys=True) + "\n")
    sys.stdout.flush()


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuroom-remote secret")
    parser.add_argument("--root", default=None)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("push")
    p.add_argument("name")
    p.add_argument("--not-under", action="append", default=[], metavar="PATH",
                   help="a durable mount the secret must not be written under")
    sub.add_parser("ls")
    p = sub.add_parser("rm")
    p.add_argument("name")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        if args.cmd == "push":
            value = sys.stdin.buffer.read(MAX_SECRET_BYTES + 2)
            doc = push(args.name, value, root=args.root, not_under=args.not_under)
        elif args.cmd == "ls":
            doc = listing(args.root)
        else:
            path = secret_path(args.name, args.root)
            try:
                os.unlink(path)
                doc = {"ok": True, "name": args.name, "removed": True}
            except FileNotFoundError:
                doc = {"ok": True, "name": args.name, "removed": False}
    except (SecretError, OSError) as exc:
        _emit({"ok": False, "error": str(exc)})
        return 1
    doc["ms"] = round((time.monotonic() - started) * 1000.0, 3)
    _emit(doc)
    return 0
