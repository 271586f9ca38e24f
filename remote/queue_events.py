"""The queue's only state: an append-only ``events.jsonl`` and the pure fold over it.

Every line is one JSON event ``{"seq", "t", "ev", ...}``. A writer appends under an flock on
the file (so ``seq`` is strictly increasing across the runner and the jump host's request
subcommands), with one ``write()`` on an O_APPEND descriptor and an fsync, so kill -9 or a
power cut leaves at most one torn last line. Readers skip a torn line and report it.

Who writes what (pueue's rule: one owner of job state):
- the jump host's subcommands append REQUESTS: ``added``, ``configured``, ``kill_requested``,
  ``relaunch_requested``, ``remove_requested``, ``reorder_requested``;
- only the runner appends JOB-STATE events: ``launching``, ``started``, ``exited``, ``killed``,
  ``requeued``, ``orphaned_by_reboot``, ``vanished``, ``removed``, ``reordered``,
  ``rejected``, ``unschedulable``, ``dependency_failed``, ``synced``, ``sync_failed``,
  and ``preempt_notice`` (a spot box's cloud said it takes the box: remote/preempt.py).
  Pausing is a setting (``configured`` with ``paused``): the runner reads it and starts
  nothing new while it is true. An event that answers a
  request carries ``req`` = the request's seq; a request no event answers is pending.
"""

from __future__ import annotations

import copy
import errno
import fcntl
import json
import os
import re
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .safeopen import open_regular

Event = Dict[str, Any]
State = Dict[str, Any]

EVENTS_FILE = "events.jsonl"
# The queue's identity: random, written once when the queue dir is made, never rewritten. Job
# ids start again at j1 in a new queue (a new rental behind the same alias, a wiped
# ~/.gpuroom); the jump host keys what it keeps of a job on this id too.
QUEUE_ID_FILE = "queue-id"
QUEUE_ID_RE = re.compile(r"^[0-9a-f]{32}$")
# The box does not know the name the jump host gives it: a fix the helper writes names the
# host as this token, and the jump host puts the name there (tui/snapshot.py for_host).
HOST_IN_FIX = "{host}"
DEFAULT_QUEUE = "default"
# A tmux session name and a directory name at once: no dots, colons or slashes.
QUEUE_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

REQUEST_EVENTS = ("added", "configured", "kill_requested", "relaunch_requested",
                  "remove_requested", "reorder_requested")
# Requests the runner must answer with an event carrying ``req``.
ANSWERED_REQUESTS = ("kill_requested", "relaunch_requested", "remove_requested",
                     "reorder_requested")

# The job-state vocabulary, public: the runner (fold below) and the Slurm fold
# (queue_slurm.fold_slurm) are the only writers of a job's state, so the jump host imports
# these names instead of keeping its own lists (pueue's rule: one owner of job state).
#   queued     waiting for a slot (local), or submitted and PENDING in Slurm
#   launching  the runner has recorded a launch and not yet the process (local jobs only)
#   running    a process exists (local), or Slurm says RUNNING
#   succeeded  exit 0 (local) / COMPLETED with code 0 (Slurm)
#   failed     any other end that nobody asked for: a non-zero exit or a signal, a reboot that
#              orphaned it, a vanished wrapper, unschedulable; Slurm FAILED, TIMEOUT,
#              OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, ...
#   killed     ended on request (queue kill; scancel, Slurm CANCELLED)
#   removed    taken off the queue on request
STATES = ("queued", "launching", "running", "succeeded", "failed", "killed", "removed")
ACTIVE_STATES = ("launching", "running")  # a process exists or is being started
FINAL_STATES = ("succeeded", "failed", "killed", "removed")  # nothing will change it again
LIVE_STATES = ("queued", *ACTIVE_STATES)  # not final: waiting or active
FAILED_STATES = ("failed",)  # ended badly without being asked to
# slots 0 = automatic: one job per GPU on a GPU box, one at a time on a CPU box.
DEFAULT_CONFIG: Dict[str, Any] = {"slots": 0, "durable_dir": None, "idle_exit_s": 60.0,
                                  "kill_grace_s": 30.0, "paused": False, "spot_cloud": None,
                                  "metadata_url": None}
CONFIG_TYPES: Dict[str, Tuple[Any, str]] = {
    "slots": (int, "an integer"), "durable_dir": (str, "a string"),
    "idle_exit_s": ((int, float), "a number"), "kill_grace_s": ((int, float), "a number"),
    "paused": (bool, "true or false"),
    # A spot box's cloud (aws | gcp | azure) and its metadata endpoint (remote/preempt.py).
    "spot_cloud": (str, "a string"), "metadata_url": (str, "a string")}
# A cloud's preemption notice as the runner recorded it (remote/preempt.py).
PREEMPT_FIELDS: Dict[str, Tuple[Any, str]] = {
    "cloud": (str, "a string"), "action": (str, "a string"), "at": ((int, float), "a number"),
    "t": ((int, float), "a number"), "boot_id": (str, "a string"),
    "signalled": (int, "an integer")}
# What a queued job of a paused queue says it waits for (``queue ls``, the room).
PAUSED_WAIT = "paused (gpuroom queue resume starts jobs again)"
# What a queued job of a spot box under a preemption notice says it waits for (U45).
PREEMPT_WAIT = "preemption notice: not starting"
# A box still up this long after the time its notice gave was not taken (a hibernated spot
# box resumed, a notice withdrawn): the notice is over.
PREEMPT_OVER_S = 10 * 60.0


def preempt_over(at: Optional[float], t: Optional[float], now: float) -> bool:
    """Whether a notice the cloud gave for ``at`` (seen at ``t``) is over at ``now``."""
    when = at if at is not None else t
    return when is not None and now > when + PREEMPT_OVER_S
# The states of a dependency (``add --after``) that fail the jobs waiting for it.
DEPENDENCY_FAILED_STATES = ("failed", "killed", "removed")


def root_dir(root: Optional[str] = None) -> str:
    return os.path.abspath(os.path.expanduser(
        root or os.environ.get("GPUROOM_HOME") or "~/.gpuroom"))


def check_queue_name(name: str) -> str:
    if not QUEUE_NAME_RE.match(name):
        raise ValueError(f"queue name {name!r}: use letters, digits, '_' or '-' (at most 64)")
    return name


def queue_dir(root: str, name: str) -> str:
    return os.path.join(root, "queues", check_queue_name(name))


def read_queue_id(qdir: str) -> Optional[str]:
    """The queue's identity, or None when it has none (a queue dir from before identities,
    or a file that is not one)."""
    try:
        with open_regular(os.path.join(qdir, QUEUE_ID_FILE)) as f:
            text = f.read(64).decode("ascii", "replace").strip()
    except (OSError, ValueError):
        return None
    return text if QUEUE_ID_RE.fullmatch(text) else None


def ensure_queue_id(qdir: str) -> Optional[str]:
    """The queue's identity, made now if it has none: a new file linked into place, so two
    helpers making it at once agree on the first one. None when the dir cannot take it."""
    have = read_queue_id(qdir)
    if have is not None:
        return have
    new = os.urandom(16).hex()
    tmp = os.path.join(qdir, f".{QUEUE_ID_FILE}.tmp-{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, (new + "\n").encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, os.path.join(qdir, QUEUE_ID_FILE))
        except FileExistsError:
            pass  # another helper made it first: its id is the queue's
        finally:
            os.unlink(tmp)
    except OSError:
        return None
    return read_queue_id(qdir)


def list_queues(root: str) -> List[str]:
    base = os.path.join(root, "queues")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    return [n for n in names if QUEUE_NAME_RE.match(n)
            and os.path.isfile(os.path.join(base, n, EVENTS_FILE))]


def _last_seq_and_newline(fd: int) -> Tuple[int, bool]:
    """Seq of the last complete event, and whether the file ends in a newline.

    Reads backwards in growing windows so a long history costs one small read.
    """
    size = os.fstat(fd).st_size
    if size == 0:
        return 0, True
    ends_clean = os.pread(fd, 1, size - 1) == b"\n"
    window = 8192
    while True:
        start = max(0, size - window)
        chunk = os.pread(fd, size - start, start)
        lines = chunk.split(b"\n")
        if start > 0:
            lines = lines[1:]  # the first piece may be a partial line
        for raw in reversed(lines):
            try:
                ev = json.loads(raw.decode("utf-8"))
            except ValueError:
                continue
            if isinstance(ev, dict) and isinstance(ev.get("seq"), int):
                return int(ev["seq"]), ends_clean
        if start == 0:
            return 0, ends_clean
        window *= 8


class WriteFailed(OSError):
    """An event that could not be written, and is not in the file (it was cut back)."""

    def __init__(self, path: str, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), path)
        self.cause = cause

    def describe(self) -> str:
        """What failed and the fix, in one line."""
        name = errno.errorcode.get(self.errno or 0, "error")
        what = f"cannot write {self.filename}: {self.strerror} ({name})"
        if self.errno == errno.ENOSPC:
            return (f"{what}; the filesystem is full (no space, or no inodes left: df -h; "
                    f"df -i). Free space there and try again; nothing was recorded")
        if self.errno == errno.EDQUOT:
            return f"{what}; your disk quota is used up. Free space and try again"
        return f"{what}; nothing was recorded"


# Events that create a job, and so take the next job id (box jobs and Slurm jobs share ids).
JOB_CREATING_EVENTS = ("added", "slurm_added")
# The one grammar of a job id, for the box that mints them and for the jump host, which turns
# them into local directory names (tui/localpath.py): ``jN``, and ``jN_M`` for task M of a
# Slurm array job. ``\Z``, not ``$``: "j1\n" is not j1.
JOB_ID_RE = re.compile(r"^j[1-9][0-9]{0,17}\Z")
ARRAY_TASK_ID_RE = re.compile(r"^(j[1-9][0-9]{0,17})_([0-9]{1,9})\Z")


def is_job_id(text: object) -> bool:
    """Whether ``text`` is an id this helper can give a job: ``jN`` or an array task ``jN_M``."""
    return isinstance(text, str) and bool(JOB_ID_RE.match(text) or
                                          ARRAY_TASK_ID_RE.match(text))


def event_job_id(ev: Event) -> str:
    """The id of the job an ``added``/``slurm_added`` event creates: its ``job`` field, or, for
    an event written before ids were numbered on their own, ``j<seq>``."""
    job = ev.get("job")
    if job is None:
        return "j" + str(int(ev["seq"]))
    if not isinstance(job, str) or not JOB_ID_RE.match(job):
        raise ValueError(f"job id {str(job)[:40]!r} is not j<number>")
    return job


def _last_job_number(fd: int) -> int:
    """The number of the newest job in the file (0 when there is none).

    Job ids count jobs (j1, j2, j3), not events: before, an id was the seq of its ``added``
    event, and every job's launching/started/exited events made the ids jump j1 -> j5 -> j9.
    Reads backwards in growing windows, as ``_last_seq_and_newline`` does.
    """
    size = os.fstat(fd).st_size
    window = 8192
    while size > 0:
        start = max(0, size - window)
        lines = os.pread(fd, size - start, start).split(b"\n")
        if start > 0:
            lines = lines[1:]
        for raw in reversed(lines):
            if b"added" not in raw:
                continue
            try:
                ev = json.loads(raw.decode("utf-8"))
                if ev.get("ev") in JOB_CREATING_EVENTS:
                    return int(event_job_id(ev)[1:])
            except (ValueError, TypeError, KeyError, AttributeError):
                continue  # a torn or forged line names no job: look further back
        if start == 0:
            break
        window *= 8
    return 0


class EventWriter:
    """Appends events to one queue's file; every caller on the box goes through here."""

    def __init__(self, qdir: str) -> None:
        os.makedirs(qdir, exist_ok=True)
        ensure_queue_id(qdir)
        self.path = os.path.join(qdir, EVENTS_FILE)
        self.fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def lock(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def unlock(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)

    def append_locked(self, ev: str, fields: Dict[str, Any]) -> Event:
        """Append while the caller already holds ``lock()``."""
        last, ends_clean = _last_seq_and_newline(self.fd)
        event: Event = {"seq": last + 1, "t": round(time.time(), 6), "ev": ev}
        event.update(fields)
        line = json.dumps(event, separators=(",", ":"), sort_keys=True) + "\n"
        data = line.encode("utf-8")
        if not ends_clean:
            # A torn line from a killed writer: start ours on a fresh line so only the torn
            # one is lost, not ours glued onto it.
            data = b"\n" + data
        size = os.fstat(self.fd).st_size
        try:
            written = os.write(self.fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, f"short write ({written} of {len(data)} bytes)")
            os.fsync(self.fd)
        except OSError as exc:
            # All or nothing (issue 18): a full disk (or quota) can take part of the line, or
            # all of it with the error only at fsync. Cut the file back to what it was, so an
            # event is either whole and reported written, or absent and reported failed:
            # never recorded behind an error the user answers by doing it again.
            try:
                os.ftruncate(self.fd, size)
            except OSError:
                pass
            raise WriteFailed(self.path, exc) from None
        return event

    def append(self, ev: str, **fields: Any) -> Event:
        self.lock()
        try:
            return self.append_locked(ev, fields)
        finally:
            self.unlock()

    def next_job_id_locked(self) -> str:
        """The id the next job gets; the caller holds ``lock()`` until its event is written."""
        job_id = "j" + str(_last_job_number(self.fd) + 1)
        if not JOB_ID_RE.match(job_id):
            # Only a forged line can number a job this high; a job the fold would skip must
            # not be added and answered ok.
            raise ValueError(f"the newest job id in {self.path} is out of range; "
                             f"nothing was added (was the file edited?)")
        return job_id

    def append_job(self, ev: str, **fields: Any) -> Event:
        """Append an event that creates a job (``added``), with the next job id in ``job``."""
        self.lock()
        try:
            return self.append_locked(ev, {**fields, "job": self.next_job_id_locked()})
        finally:
            self.unlock()


def parse_lines(data: bytes) -> Tuple[List[Event], List[str]]:
    """Events in ``data`` (complete lines only) and one warning per unreadable line."""
    events: List[Event] = []
    warnings: List[str] = []
    for n, raw in enumerate(data.split(b"\n")):
        if not raw.strip():
            continue
        try:
            ev = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # a line nested thousands deep
            warnings.append(f"line {n + 1} unreadable ({exc}): {raw[:80]!r}")
            continue
        if not isinstance(ev, dict) or not isinstance(ev.get("seq"), int):
            warnings.append(f"line {n + 1} is not an event: {raw[:80]!r}")
            continue
        events.append(ev)
    return events, warnings


class EventReader:
    """Incremental reader: keeps the offset, so a runner tick reads only new bytes."""

    def __init__(self, qdir: str) -> None:
        self.path = os.path.join(qdir, EVENTS_FILE)
        self.offset = 0
        self.inode: Optional[int] = None
        self.events: List[Event] = []
        self.warnings: List[str] = []
        self.torn_tail = False

    def refresh(self) -> bool:
        """Read what was appended; True when there were new events."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        if self.inode is not None and (st.st_ino != self.inode or st.st_size < self.offset):
            # Replaced or truncated behind our back: start over rather than guess.
            self.offset, self.events, self.warnings = 0, [], []
        self.inode = st.st_ino
        if st.st_size == self.offset:
            return False
        with open_regular(self.path) as f:  # a FIFO in its place must not hang the probe
            f.seek(self.offset)
            data = f.read(st.st_size - self.offset)
        cut = data.rfind(b"\n")
        complete, tail = (data[:cut + 1], data[cut + 1:]) if cut >= 0 else (b"", data)
        self.offset += len(complete)
        events, warnings = parse_lines(complete)
        self.events.extend(events)
        self.warnings.extend(warnings)
        # An unterminated tail is either a write in flight or a torn line left by a killed
        # writer; it is reported, and re-read next time in case it was the former.
        self.torn_tail = bool(tail.strip())
        return bool(events)

    def all_warnings(self) -> List[str]:
        out = list(self.warnings)
        if self.torn_tail:
            out.append(f"torn last line at byte {self.offset} of {self.path} (ignored)")
        return out


def read_events(qdir: str) -> Tuple[List[Event], List[str]]:
    reader = EventReader(qdir)
    reader.refresh()
    return reader.events, reader.all_warnings()


# ----- typed reads of event fields: a job on the box can write this file (it runs as the
# helper's user), so a field of the wrong type is a ValueError here, and the fold skips the
# event naming it, instead of the runner or the jump host tripping over it later.

# "SIGKILL", "SIGRTMIN+3"; or a bare number for one Python cannot name (a Slurm record)
SIGNAL_NAME_RE = re.compile(r"^(?:SIG[A-Z0-9+-]{1,12}|[0-9]{1,3})$")


def _field(ev: Event, key: str, kinds: Any, what: str) -> Any:
    value = ev.get(key)
    if value is None:
        return None
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise ValueError(f"{key} must be {what}")
    if not isinstance(value, kinds):
        raise ValueError(f"{key} must be {what}, not {type(value).__name__}")
    return value


def _strings(ev: Event, key: str) -> List[str]:
    value = ev.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key} must be a list of strings")
    return list(value)


def _string_map(ev: Event, key: str) -> Dict[str, str]:
    value = ev.get(key) or {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"{key} must be an object of strings")
    return {str(k): v for k, v in value.items()}


def ckpt_dir_of(root: str, queue: str, job_id: str, durable_dir: Optional[str],
                config: Dict[str, Any]) -> str:
    """Where a job's checkpoints go: under its --durable-dir, else the queue's, else the root
    (the runner launches with it; queue add warns when it will not survive a stop: U46)."""
    base = durable_dir or config.get("durable_dir") or root
    return os.path.join(base, "ckpt", queue, job_id)


def user_ckpt_dir(env: Dict[str, str], cwd: Optional[str]) -> Optional[str]:
    """``GPUROOM_CKPT_DIR`` as the job's own --env sets it (relative to its cwd): honoured,
    never replaced by gpuroom's own dir."""
    value = env.get("GPUROOM_CKPT_DIR")
    if not value:
        return None
    return os.path.normpath(os.path.join(cwd or os.path.expanduser("~"),
                                         os.path.expanduser(value)))


def ckpt_dir_refusal(env: Dict[str, str]) -> Optional[Dict[str, str]]:
    """A GPUROOM_CKPT_DIR the runner could not honour as written: said, never replaced."""
    if "GPUROOM_CKPT_DIR" not in env:
        return None
    value = env["GPUROOM_CKPT_DIR"]
    if not value.strip() or "$" in value or "\n" in value:
        return {"error": f"--env GPUROOM_CKPT_DIR={value!r} cannot be used: the queue does not "
                         "expand variables and an empty path names no directory",
                "fix": "give a literal path: --env GPUROOM_CKPT_DIR=/abs/dir (or one relative "
                       "to the job's cwd), or leave it out to use gpuroom's own dir"}
    return None


def _secret_refs(ev: Event) -> List[Dict[str, str]]:
    """``secrets``: a list of {name, env, path} strings, each a pushed secret's file."""
    value = ev.get("secrets") or []
    if not isinstance(value, list) or not all(
            isinstance(v, dict) and all(isinstance(v.get(k), str) for k in ("name", "env", "path"))
            for v in value):
        raise ValueError("secrets must be a list of {name, env, path} strings")
    return [{k: v[k] for k in ("name", "env", "path")} for v in value]


def exit_fields(ev: Event) -> Dict[str, Any]:
    """``exit_code`` (an int or absent) and ``signal`` (a short name, SIGKILL) of an end event;
    anything else raises ValueError (issue 18: they carried OSC 52 to the user's terminal)."""
    out: Dict[str, Any] = {}
    if "exit_code" in ev:
        out["exit_code"] = _field(ev, "exit_code", int, "an integer")
    if "signal" in ev:
        sig = _field(ev, "signal", str, "a signal name")
        if sig is not None and not SIGNAL_NAME_RE.match(sig):
            raise ValueError(f"signal {sig[:20]!r} is not a signal name")
        out["signal"] = sig
    return out


def job_ids(ev: Event, key: str) -> List[str]:
    """A list of job ids (``after``): each one j<number>, else ValueError."""
    ids = _strings(ev, key)
    for job in ids:
        if not JOB_ID_RE.match(job):
            raise ValueError(f"{key}: {job[:40]!r} is not a job id (j<number>)")
    return ids


def _new_job(ev: Event) -> Dict[str, Any]:
    job_id = event_job_id(ev)
    argv = _strings(ev, "argv")
    after = job_ids(ev, "after")
    priority = int(_field(ev, "priority", int, "an integer") or 0)
    edited_from = _field(ev, "edited_from", str, "a job id")
    return {
        "id": job_id,
        "name": _field(ev, "name", str, "a string") or job_id,
        "argv": argv,
        "cwd": _field(ev, "cwd", str, "a string"),
        "env": _string_map(ev, "env"),
        "secrets": _secret_refs(ev),  # names and paths, never values (U34)
        "gpus": _field(ev, "gpus", int, "an integer"),
        "vram_mib": _field(ev, "vram_mib", (int, float), "a number"),
        "retries": int(_field(ev, "retries", int, "an integer") or 0),
        "retry_on_exit": bool(ev.get("retry_on_exit")),
        "outputs": _strings(ev, "outputs"),
        "ckpts": _strings(ev, "ckpts"),  # --ckpt: the program's own checkpoint paths
        "durable_dir": _field(ev, "durable_dir", str, "a string"),
        "after": after,
        "priority": priority,
        "edited_from": edited_from,
        "added": ev.get("t"),
        "added_seq": ev["seq"],
        "state": "queued",
        "reason": None,
        "retries_used": 0,
        "attempts": [],
        "log": f"logs/{job_id}.log",
        "sync": None,
        "kill_pending": False,
        "ckpt_dir": None,
    }


def _attempt(job: Dict[str, Any], n: Any) -> Optional[Dict[str, Any]]:
    attempts: List[Dict[str, Any]] = job["attempts"]
    for a in attempts:
        if a["attempt"] == n:
            return a
    return None


def _end_attempt(job: Dict[str, Any], ev: Event, reason: str) -> None:
    a = _attempt(job, ev.get("attempt"))
    if a is None or a["end"] is not None:
        return
    ended = exit_fields(ev)  # typed before anything of the attempt changes
    ckpt = _field(ev, "checkpoint", dict, "an object")
    if ckpt is not None:
        ckpt = {"path": _field(ckpt, "path", str, "a string"),
                "mtime": _field(ckpt, "mtime", (int, float), "a number"),
                "size": _field(ckpt, "size", int, "an integer"),
                "save_s": _field(ckpt, "save_s", (int, float), "a number")}
        a["checkpoint"] = ckpt
    a["end"] = ev.get("t")
    a["end_reason"] = reason
    a.update(ended)
    if a["start"] is not None and a["end"] is not None:
        a["duration"] = round(a["end"] - a["start"], 3)
    if "duration" in ev:
        a["duration"] = ev["duration"]


def _record_processes(job: Dict[str, Any], ev: Event) -> Optional[int]:
    """What the runner saw of an ended attempt's processes (the training process under the
    wrapper, the group's pids, its memory cgroup and that cgroup's OOM kills), typed; the
    OOM kills counted, or None."""
    a = _attempt(job, ev.get("attempt"))
    if a is None:
        return None
    pids = _field(ev, "pids", list, "a list")
    if pids is not None and not all(isinstance(p, int) and not isinstance(p, bool)
                                    for p in pids):
        raise ValueError("pids is not a list of integers")
    ooms = _field(ev, "oom_kills", int, "an integer")
    a.update({"child_pid": _field(ev, "child_pid", int, "an integer"), "pids": pids,
              "cgroup": _field(ev, "cgroup", str, "a string"), "oom_kills": ooms,
              "error_line": _field(ev, "error_line", str, "a string")})
    return ooms if isinstance(ooms, int) and ooms > 0 else None


def fold(events: List[Event], queue: str = DEFAULT_QUEUE) -> State:
    """The queue's state from its events; pure, so the runner and ``ls`` always agree."""
    jobs: Dict[str, Dict[str, Any]] = {}
    order: List[str] = []
    config = dict(DEFAULT_CONFIG)
    preempt_notice: Optional[Dict[str, Any]] = None
    answered = set()
    requests: Dict[int, Event] = {}
    last_seq = 0
    skipped: List[str] = []

    def place(job_id: str, front: bool) -> None:
        if job_id in order:
            order.remove(job_id)
        if front:
            order.insert(0, job_id)
        else:
            order.append(job_id)

    def place_by_priority(job_id: str) -> None:
        # pueue's rule: a higher priority goes ahead of every queued job with a lower one,
        # and behind those with the same or higher (first come, first served among equals).
        prio = jobs[job_id]["priority"]
        at = len(order)
        for pos, other in enumerate(order):
            if jobs[other]["priority"] < prio:
                at = pos
                break
        order.insert(at, job_id)

    for ev in events:
        seq = ev["seq"]
        if seq <= last_seq:
            continue  # a duplicate or out-of-order line can never rewrite history
        last_seq = seq
        kind = ev.get("ev")
        # A job on the box can write this file (it runs as the helper's user): an event that
        # cannot be applied is skipped with a warning naming it, rather than stop the fold
        # and with it the runner and `queue ls`. (No copy of the job is kept to roll back:
        # the runner folds its whole history every tick; the typed reads come first.)
        try:
            if "req" in ev:
                answered.add(ev["req"])
            for extra in ev.get("reqs") or []:
                answered.add(extra)
            if kind == "added":
                added = _new_job(ev)
                if added["id"] in jobs:
                    raise ValueError(f"job {added['id']} exists already")
                jobs[added["id"]] = added
                if ev.get("front"):
                    place(added["id"], True)
                else:
                    place_by_priority(added["id"])
                continue
            if kind == "configured":
                update = {k: _field(ev, k, CONFIG_TYPES[k][0], CONFIG_TYPES[k][1])
                          for k in DEFAULT_CONFIG}
                config.update({k: v for k, v in update.items() if v is not None})
                continue
            if kind in ANSWERED_REQUESTS:
                _field(ev, "grace", (int, float), "a number")
                _field(ev, "position", int, "an integer")
                requests[seq] = ev
                continue
            if kind == "preempt_notice":
                preempt_notice = {k: _field(ev, k, kinds, what) for k, (kinds, what) in
                                  PREEMPT_FIELDS.items()}
                continue
            found = jobs.get(str(ev.get("job")))
            if found is None:
                continue
            job = found
            if kind == "launching":
                if job["id"] in order:
                    order.remove(job["id"])
                job["state"] = "launching"
                job["reason"] = None
                job["ckpt_dir"] = ev.get("ckpt_dir")
                job["attempts"].append({
                    "attempt": ev.get("attempt"), "boot_id": ev.get("boot_id"),
                    "start": None, "end": None, "exit_code": None, "signal": None,
                    "duration": None, "end_reason": None, "pid": None, "pgid": None,
                    "child_pid": None, "pids": None, "cgroup": None, "oom_kills": None,
                    "checkpoint": None, "error_line": None,
                    "slot": ev.get("slot"), "gpus": ev.get("gpus"), "starttime": None,
                    "code": _field(ev, "code", dict, "an object"),  # remote/drift.py
                    "mark": _field(ev, "mark", str, "a string"),  # remote/jobmark.py
                })
            elif kind == "started":
                a = _attempt(job, ev.get("attempt"))
                if a is not None:
                    a.update({"start": ev.get("t"), "pid": ev.get("pid"), "pgid": ev.get("pgid"),
                              "starttime": ev.get("starttime"), "boot_id": ev.get("boot_id")})
                job["state"] = "running"
            elif kind == "exited":
                ended = exit_fields(ev)
                ooms = _record_processes(job, ev)  # typed before the attempt ends
                _end_attempt(job, ev, "exited")
                code = ended.get("exit_code")
                job["state"] = "succeeded" if code == 0 and not ended.get("signal") else "failed"
                if ooms:
                    job["reason"] = (f"OOM-killed in its own cgroup (oom_kill +{ooms}); not "
                                     "retried: the same command would be killed again")
                job["kill_pending"] = False
                if ev.get("sync"):
                    job["sync"] = {"state": "pending"}
            elif kind == "killed":
                _end_attempt(job, ev, "killed")
                if job["id"] in order:
                    order.remove(job["id"])
                job["state"] = "killed"
                job["kill_pending"] = False
            elif kind in ("orphaned_by_reboot", "vanished"):
                _end_attempt(job, ev, kind)
                job["state"] = "failed"
                job["reason"] = ev.get("why") or kind
            elif kind in ("unschedulable", "dependency_failed"):
                if job["id"] in order:
                    order.remove(job["id"])
                job["state"] = "failed"
                job["reason"] = ev.get("why")
            elif kind == "requeued":
                if ev.get("abandoned_attempt") is not None:
                    _end_attempt(job, {"attempt": ev["abandoned_attempt"], "t": ev.get("t")},
                                 "launch_interrupted")
                if ev.get("retry"):
                    job["retries_used"] += 1
                if ev.get("reason") == "relaunch":
                    job["retries_used"] = 0
                job["state"] = "queued"
                job["reason"] = ev.get("reason")
                job["sync"] = None
                place(job["id"], bool(ev.get("front", True)))
            elif kind == "removed":
                if job["id"] in order:
                    order.remove(job["id"])
                job["state"] = "removed"
            elif kind == "reordered":
                pos = int(ev.get("position", 0))  # before the move: a bad one moves nothing
                if job["id"] in order:
                    order.remove(job["id"])
                    order.insert(max(0, min(pos, len(order))), job["id"])
            elif kind == "synced":
                job["sync"] = {"state": "synced", "t": ev.get("t"), "dest": ev.get("dest"),
                               "files": ev.get("files")}
            elif kind == "sync_failed":
                job["sync"] = {"state": "failed", "t": ev.get("t"), "dest": ev.get("dest"),
                               "reason": ev.get("why")}
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
            skipped.append(f"event seq {seq} ({str(kind)[:40]}) skipped: "
                           f"{type(exc).__name__}: {str(exc)[:120]}")

    pending = [requests[s] for s in sorted(requests) if s not in answered]
    for req in pending:
        target = jobs.get(str(req.get("job")))
        if target is not None and req["ev"] == "kill_requested":
            target["kill_pending"] = True
    for pos, job_id in enumerate(order):
        jobs[job_id]["position"] = pos
    for job in jobs.values():
        job.setdefault("position", None)
    return {
        "queue": queue,
        "config": config,
        "preempt": preempt_notice,
        "jobs": jobs,
        "order": list(order),
        "pending_requests": copy.deepcopy(pending),
        "last_seq": last_seq,
        "skipped_events": skipped,
    }


def iter_active(state: State) -> Iterator[Dict[str, Any]]:
    for job in state["jobs"].values():
        if job["state"] in ACTIVE_STATES:
            yield job


def current_attempt(job: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    return job["attempts"][-1] if job["attempts"] else None
