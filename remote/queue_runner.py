"""The queue runner (the only writer of job state) and the per-job ``_exec`` wrapper.

Each attempt runs as: runner -> ``queue _exec`` wrapper (own session and process group) ->
the job's argv (same group). The wrapper holds an flock on ``run/<id>.<n>.lock`` for its
whole life and writes ``run/<id>.<n>.exit`` atomically when the job ends, so ANY runner,
not only the wrapper's parent, can tell "still running" (lock held) from "ended, with this
status" (exit file) from "died without a word" (neither), and a pid reused by a stranger can
never pass for the job.

Crash safety (kill -9 of the runner at any instant):
- ``launching`` is recorded (fsynced) BEFORE the wrapper is spawned, ``started`` after;
- a new runner that finds ``launching`` without ``started`` looks at the attempt's files:
  lock held or pid/exit file present -> the attempt did start, it is recorded and adopted;
  nothing -> it takes the lock itself, drops an ``abandoned`` marker the wrapper checks under
  that lock before running anything, and requeues; so an attempt runs at most once.
- a ``started`` job whose runner died is adopted (lock held), finished (exit file) or
  vanished / orphaned_by_reboot (different boot_id), then requeued per its retries.
"""

from __future__ import annotations

import errno
import fcntl
import glob
import json
import math
import os
import queue as queue_mod
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Any, Dict, List, Optional, Tuple

from . import drift, hostinfo, jobmark, preempt, secrets, selfhash, vram
from .queue_events import (
    ACTIVE_STATES,
    DEFAULT_CONFIG,
    DEPENDENCY_FAILED_STATES,
    PAUSED_WAIT,
    PREEMPT_WAIT,
    EventReader,
    EventWriter,
    State,
    WriteFailed,
    ckpt_dir_of,
    current_attempt,
    fold,
    iter_active,
    preempt_over,
    queue_dir,
    user_ckpt_dir,
)

EXIT_RUNNER_BUSY = 3
RUNNER_LOCK = "runner.lock"
RUNNER_STATUS = "runner.json"
POLL_S = 0.2  # bounded sleep between ticks: requests and exits are seen within this
LOCK_RETRY_S = 1.0  # a status probe holds runner.lock (shared) for microseconds
GPU_INVENTORY_TTL_S = 2.0  # NVML is not free; ask at most this often
STATUS_EVERY_S = 2.0
MAX_BACKOFF_S = 5.0  # a failing tick (a full disk) is retried at least this often
KILL_REAP_S = 5.0  # after SIGKILL, how long to wait for the group to be gone


def boot_id() -> str:
    override = os.environ.get("GPUROOM_BOOT_ID")
    if override:
        return override
    try:
        with open(hostinfo.BOOT_ID_PATH) as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def flock_held(path: str) -> bool:
    """Whether another process holds an flock on ``path`` (our probe's hold is shared, brief)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    finally:
        os.close(fd)
    return False


def _proc_stat_field(pid: int, index: int) -> Optional[int]:
    """An integer field of /proc/PID/stat, counted from field 3 (state) as index 0."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses; the fields after the LAST ')' are fixed.
    rest = data[data.rfind(b")") + 2:].split()
    try:
        return int(rest[index])
    except (IndexError, ValueError):
        return None


def proc_starttime(pid: int) -> Optional[int]:
    """Field 22 of /proc/PID/stat (clock ticks since boot): with the pid, a process identity."""
    return _proc_stat_field(pid, 19)


def proc_session(pid: int) -> Optional[int]:
    return _proc_stat_field(pid, 3)


def group_members(pgid: int) -> int:
    """Live (non-zombie) processes in a process group.

    kill(-pgid, 0) is not enough: a zombie counts for it, and in a container whose PID 1
    never reaps, a killed grandchild stays a zombie for good.
    """
    return len(group_pids(pgid))


def group_pids(pgid: int) -> List[int]:
    """The live (non-zombie) pids of a process group."""
    pids: List[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        rest = data[data.rfind(b")") + 2:].split()
        if len(rest) > 2 and rest[2] == str(pgid).encode() and rest[0] not in (b"Z", b"X"):
            pids.append(int(name))
    return pids


def _ignore_signal(signum: int, frame: Any) -> None:
    return None


def self_argv() -> List[str]:
    """How to run this helper again: the zipapp on the box, ``-m`` from a source tree.

    The zipapp isolated (-I), as the jump host starts it: no user site, PYTHONPATH or other
    PYTHON* variable of the box's user runs inside the runner. The runner's own environment
    is not trimmed: it is what every job it launches gets, and a job needs the user's."""
    python = sys.executable or "python3"
    pyz = selfhash.archive_path()
    if pyz:
        return [python, "-I", pyz]
    return [python, "-m", "gpuroom.remote"]


def import_path(root: str) -> str:
    """A PYTHONPATH entry under which ``gpuroom.remote.checkpoint`` imports for a job."""
    pyz = selfhash.archive_path()
    if pyz:
        return pyz
    pkg = os.path.dirname(os.path.abspath(__file__))
    parent = os.path.dirname(pkg)
    if os.path.basename(pkg) == "remote" and os.path.basename(parent) == "gpuroom":
        return os.path.dirname(parent)
    # Editable install maps the folder ``remote/`` to gpuroom.remote: give jobs a real
    # gpuroom/remote path through a symlink, replaced atomically.
    lib = os.path.join(root, "lib")
    link = os.path.join(lib, "gpuroom", "remote")
    if os.path.realpath(link) != os.path.realpath(pkg):
        os.makedirs(os.path.dirname(link), exist_ok=True)
        tmp = f"{link}.tmp{os.getpid()}"
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(pkg, tmp)
        os.replace(tmp, link)
    return lib


def cpu_thread_cap() -> Optional[int]:
    """Threads per job from the cgroup CPU quota (U40), None when there is no quota."""
    root = os.environ.get("GPUROOM_CGROUP_ROOT") or hostinfo.CGROUP_ROOT
    quota: Optional[float] = hostinfo.cgroup_facts(root).get("cpu_quota_vcpus")
    if not quota:
        return None
    return max(1, math.floor(quota))


def build_job_env(base: Dict[str, str], job: Dict[str, Any], *, cuda: Optional[str],
                  ckpt_dir: str, pythonpath: str, threads: Optional[int]) -> Dict[str, str]:
    env = dict(base)
    for var in ("TMUX", "TMUX_PANE"):
        env.pop(var, None)  # a job is not inside the runner's tmux pane in any useful sense
    env["PYTHONUNBUFFERED"] = "1"  # U43: a detached log must not look frozen
    user = {str(k): str(v) for k, v in (job.get("env") or {}).items()}
    if threads is not None:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            if var not in user:
                env[var] = str(threads)
    env.update(user)
    env["GPUROOM_JOB_ID"] = job["id"]
    env["GPUROOM_CKPT_DIR"] = ckpt_dir
    if cuda is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = pythonpath + (os.pathsep + existing if existing else "")
    return env


# ---------------------------------------------------------------- GPU inventory (GEN7)

_NVIDIA_NODE_RE = re.compile(r"^/dev/nvidia(\d+)$")


class _Session:
    """Enough of probe.ProbeSession for a section module's collect()."""

    def __init__(self) -> None:
        self.state: Dict[str, Any] = {}


def _gpu_doc(session: _Session) -> Dict[str, Any]:
    fake = os.environ.get("GPUROOM_GPUS_JSON")
    if fake:
        # Test hook at the hardware boundary: a recorded inventory instead of NVML.
        with open(fake) as f:
            return dict(json.load(f))
    import importlib

    doc: Dict[str, Any] = {}
    for module in ("gpu", "vram"):
        try:
            mod = importlib.import_module("gpuroom.remote." + module)
        except ImportError:
            continue
        doc.update(mod.collect(session, {}))
    return doc


def gpu_inventory(session: _Session) -> Tuple[List[int], Dict[int, List[int]]]:
    """(GPU indices, {index: pids of processes holding it}); ([], {}) when there are none."""
    doc = _gpu_doc(session)
    indices: List[int] = []
    holders: Dict[int, List[int]] = {}
    for pos, gpu in enumerate(doc.get("gpus") or []):
        if not isinstance(gpu, dict):
            continue
        idx = int(gpu.get("index", pos))
        indices.append(idx)
        # A display process (type G: Xorg, gnome-shell) shares every card of a desktop box;
        # it is not a run a job would collide with (GEN7).
        holders[idx] = [int(p["pid"]) for p in gpu.get("processes") or []
                        if isinstance(p, dict) and p.get("pid") is not None
                        and not vram.display_only(p.get("type"))]
    for holder in doc.get("vram_holders") or []:
        # U11: a process holding /dev/nvidiaN that NVML does not list. Only a numbered node
        # names a card; one holding just nvidiactl/nvidia-uvm cannot be placed.
        if not isinstance(holder, dict) or holder.get("pid") is None:
            continue
        for device in holder.get("devices") or []:
            m = _NVIDIA_NODE_RE.match(str(device))
            if m and int(m.group(1)) in holders:
                holders[int(m.group(1))].append(int(holder["pid"]))
    return indices, holders


# ---------------------------------------------------------------- checked sync (U33)

def sha256_of(path: str) -> str:
    return selfhash.sha256_file(path)


def checked_sync(cwd: str, patterns: List[str], dest_root: str) -> Dict[str, Any]:
    """Copy outputs under ``dest_root`` mirroring their path under ``cwd``; verify each copy.

    Returns {"ok": True, "files": [...]} or {"ok": False, "why": ...}; never raises.
    """
    files: List[Dict[str, Any]] = []
    try:
        sources: List[str] = []
        for pattern in patterns:
            matches = sorted(glob.glob(os.path.join(glob.escape(cwd), pattern), recursive=True))
            if not matches:
                return {"ok": False, "why": f"output {pattern!r} matched nothing in {cwd}"}
            for m in matches:
                if os.path.isdir(m):
                    for dirpath, _dirs, names in os.walk(m):
                        sources.extend(os.path.join(dirpath, n) for n in sorted(names))
                else:
                    sources.append(m)
        for src in sources:
            rel = os.path.relpath(src, cwd)
            if rel.startswith(".." + os.sep) or rel == "..":
                return {"ok": False, "why": f"output {src} is outside the job's cwd"}
            dst = os.path.join(dest_root, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            tmp = f"{dst}.gpuroom-tmp{os.getpid()}"
            with open(src, "rb") as fin, open(tmp, "wb") as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
                fout.flush()
                os.fsync(fout.fileno())
            os.replace(tmp, dst)
            want_size, got_size = os.path.getsize(src), os.path.getsize(dst)
            want_sha, got_sha = sha256_of(src), sha256_of(dst)
            if want_size != got_size or want_sha != got_sha:
                return {"ok": False, "why": f"verify failed for {rel}: size {got_size}/{want_size} "
                        f"sha256 {got_sha[:12]}/{want_sha[:12]}"}
            files.append({"path": rel, "size": got_size, "sha256": got_sha})
    except OSError as exc:
        return {"ok": False, "why": f"{type(exc).__name__}: {exc}"}
    return {"ok": True, "files": files}


# ---------------------------------------------------------------- files of one attempt

def _atomic_json(path: str, doc: Dict[str, Any]) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            json.dump(doc, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        # A full disk: no empty temporary file left behind to eat an inode per try.
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _read_json(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


class AttemptFiles:
    def __init__(self, qdir: str, job_id: str, attempt: int) -> None:
        base = os.path.join(qdir, "run", f"{job_id}.{attempt}")
        self.lock = base + ".lock"
        self.pid = base + ".pid"
        self.exit = base + ".exit"
        self.abandoned = base + ".abandoned"

    def lock_held(self) -> bool:
        """True while the attempt's wrapper lives (it holds the flock until it exits)."""
        return flock_held(self.lock)


def exec_main(argv: List[str]) -> int:
    """``queue _exec``: run one attempt of a job and leave its exit status in a file."""
    import argparse

    if "--" not in argv:
        sys.stderr.write("gpuroom queue _exec: missing -- before the job's argv\n")
        return 2
    cut = argv.index("--")
    parser = argparse.ArgumentParser(prog="gpuroom-remote queue _exec")
    parser.add_argument("--files", required=True, help="run/<id>.<attempt> path prefix")
    parser.add_argument("--cwd", required=True)
    args = parser.parse_args(argv[:cut])
    cmd = argv[cut + 1:]
    lock_fd = os.open(args.files + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock_fd, fcntl.LOCK_EX)  # held until this process exits
    if os.path.exists(args.files + ".abandoned"):
        return 0  # a newer runner gave this launch up before we got here: never run it
    try:
        _atomic_json(args.files + ".pid", {"pid": os.getpid(), "starttime":
                                          proc_starttime(os.getpid()), "t": time.time()})
    except OSError as exc:
        # A full disk. The runner that spawned us knows our pid (and records it), and the
        # lock we hold says we run: the job runs, rather than fail as if it had (exit 1).
        _say(f"gpuroom: cannot write {args.files}.pid ({exc}); running the job anyway")

    def ignore(signum: int, frame: Any) -> None:
        return None  # the group signal reaches the job itself; we stay to record its status

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, ignore)
    started = time.time()
    try:
        os.chdir(args.cwd)
        child = subprocess.Popen(cmd)
    except OSError as exc:
        code = 127 if exc.errno == errno.ENOENT else 126
        sys.stderr.write(f"gpuroom: cannot run {cmd[:1]!r} in {args.cwd}: {exc}\n")
        sys.stderr.flush()
        _atomic_json(args.files + ".exit", {"exit_code": code, "signal": None,
                                           "end": time.time(), "duration": 0.0})
        return code
    cgroup_root = os.environ.get("GPUROOM_CGROUP_ROOT") or hostinfo.CGROUP_ROOT
    cgroup = hostinfo.memory_cgroup_of(child.pid, cgroup_root)
    ooms_before = hostinfo.oom_kill_count(cgroup) if cgroup else None
    rc = child.wait()
    end = time.time()
    ooms_after = hostinfo.oom_kill_count(cgroup) if cgroup else None
    status = {"exit_code": rc if rc >= 0 else None,
              "signal": signal_name(-rc) if rc < 0 else None,
              "end": end, "duration": round(end - started, 3), "child_pid": child.pid,
              "cgroup": cgroup,
              "oom_kills": ooms_after - ooms_before
              if ooms_after is not None and ooms_before is not None else None}
    try:
        _atomic_json(args.files + ".exit", status)
    except OSError as exc:
        # A full disk: the runner, our parent, reads the job's code from our own exit status.
        _say(f"gpuroom: cannot record the exit status ({exc})")
    return rc if rc >= 0 else 128 - rc


def _say(line: str) -> None:
    """One line to the job's log, which may be on the full disk itself."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except OSError:
        pass


def _own_line(log_path: str, text: str) -> str:
    """``text`` with a newline before it when the log does not end in one: a progress bar's
    last frame ends in a carriage return, and our line must not be glued to it."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return text
            f.seek(-1, os.SEEK_END)
            return text if f.read(1) == b"\n" else "\n" + text
    except OSError:
        return text


def note_attempt_end(log_path: str, n: int, how: str, duration: Optional[float]) -> None:
    """``=== gpuroom: attempt N ended: exit 1 after 12.3 s ===`` on its own line of the log."""
    after = f" after {duration:.1f} s" if isinstance(duration, (int, float)) else ""
    try:
        with open(log_path, "ab") as f:
            f.write(_own_line(log_path, f"=== gpuroom: attempt {n} ended: {how}{after} ===\n")
                    .encode())
    except OSError:
        pass  # a full disk: the event file still records the end


ERROR_TAIL_BYTES = 16384  # the log's end read for its last error line
ERROR_LINE_CHARS = 300
# A job's last words when it dies: Python's exception line, a tool's "error:"/"fatal:", the
# shell's "Killed" (the room's log pane knows the same shapes: tui/present/log.py).
_ERROR_LINE = re.compile(r"^\s*(?:[A-Za-z_][\w.]*(?:Error|Exception)\b|(?:error|fatal)\b"
                         r"|Killed$|Segmentation fault)", re.IGNORECASE)


def last_error_in(log_path: str) -> Optional[str]:
    """The last error line of the attempt that just ended, from the end of its log; None when
    there is none (the attempt's header is as far back as it looks)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - ERROR_TAIL_BYTES))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    for line in reversed(re.split(r"[\r\n]+", tail)):
        if line.startswith("=== gpuroom "):
            return None
        if _ERROR_LINE.match(line):
            return line.strip()[:ERROR_LINE_CHARS]
    return None


def end_words(code: Any, sig: Any) -> str:
    return f"signal {sig}" if sig else f"exit {code}"


def newest_of(job: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The newest checkpoint as an attempt ends: what the next attempt should resume from."""
    from .queue import newest_checkpoint  # queue imports this module: resolved at call time

    try:
        return newest_checkpoint(job.get("ckpt_dir"))
    except OSError:
        return None


# ---------------------------------------------------------------- the runner

PID_SAMPLE_EVERY_S = 5.0
SEEN_PIDS_MAX = 64  # an event stays small; a job forking thousands is matched by its cgroup


class Active:
    """A job attempt this runner watches: its own child, or adopted from a dead runner."""

    def __init__(self, job_id: str, attempt: int, pid: int, files: AttemptFiles, *,
                 popen: Optional[subprocess.Popen], start: float,  # type: ignore[type-arg]
                 gpus: List[int], starttime: Optional[int]) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.pid = pid
        self.files = files
        self.popen = popen
        self.start = start
        self.gpus = gpus
        self.starttime = starttime
        self.kill_reqs: List[int] = []
        self.kill_deadline: Optional[float] = None
        self.kill_sent: Optional[str] = None
        self.kill_reap_deadline: Optional[float] = None
        self.mark: Optional[str] = None  # jobmark: its processes, in its group or not
        # The group's processes seen while it ran: the kernel's OOM line names the one it
        # killed (often a data-loader worker), never the wrapper whose pid the attempt has.
        self.seen_pids: List[int] = []
        self.pids_sampled = 0.0

    def sample_pids(self, now: float) -> None:
        if now - self.pids_sampled < PID_SAMPLE_EVERY_S or len(self.seen_pids) >= SEEN_PIDS_MAX:
            return
        self.pids_sampled = now
        for pid in group_pids(self.pid):
            if pid != self.pid and pid not in self.seen_pids \
                    and len(self.seen_pids) < SEEN_PIDS_MAX:
                self.seen_pids.append(pid)

    def wrapper_ended(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is not None
        return not self.files.lock_held()

    def group_alive(self) -> bool:
        return group_members(self.pid) > 0 or bool(jobmark.find([self.mark or ""]))

    def signal_group(self, sig: int) -> None:
        if self.popen is None and not self.wrapper_ended() and \
                self.starttime is not None and proc_starttime(self.pid) != self.starttime:
            return  # the pid is someone else's now: never signal a stranger's group
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass
        # What left the group (setsid, a double fork) still carries the attempt's mark.
        jobmark.signal_marked(self.mark, sig)


class Runner:
    def __init__(self, root: str, queue: str, idle_exit_s: Optional[float] = None,
                 poll_s: float = POLL_S) -> None:
        self.root = root
        self.queue = queue
        self.qdir = queue_dir(root, queue)
        for sub in ("run", "logs"):
            os.makedirs(os.path.join(self.qdir, sub), exist_ok=True)
        self.idle_exit_override = idle_exit_s
        self.poll_s = poll_s
        self.writer = EventWriter(self.qdir)
        self.reader = EventReader(self.qdir)
        self.state: State = fold([], queue)
        self.boot_id = boot_id()
        self.active: Dict[str, Active] = {}
        self.lock_fd = -1
        self.gpu_session = _Session()
        self.gpu_cache: Optional[Tuple[float, List[int], Dict[int, List[int]]]] = None
        self.syncing: Dict[str, threading.Thread] = {}
        self.sync_results: queue_mod.Queue[Tuple[str, Dict[str, Any]]] = queue_mod.Queue()
        self.blocked: Dict[str, str] = {}
        # The last tick's failure, until a tick succeeds; whether it was a full disk (quota).
        self.failure: Optional[str] = None
        self.failure_is_disk = False
        self.last_status = 0.0
        self.started_at = time.time()
        self.preempt_checked = 0.0
        self.preempt_error: Optional[str] = None

    # ----- plumbing
    def log(self, msg: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        try:
            sys.stderr.write(f"{stamp} runner[{os.getpid()}] {msg}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass  # runner.log on a full disk: the status file says what matters

    def refresh(self) -> None:
        self.reader.refresh()
        self.state = fold(self.reader.events, self.queue)

    def emit(self, ev: str, **fields: Any) -> None:
        self.writer.append(ev, **fields)
        self.refresh()

    def crash_point(self, name: str) -> None:
        # Fault injection for the tests of "kill -9 at any instant".
        if os.environ.get("GPUROOM_QUEUE_CRASH_AT") == name:
            os._exit(137)

    def acquire(self) -> bool:
        path = os.path.join(self.qdir, RUNNER_LOCK)
        self.lock_fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + LOCK_RETRY_S
        while True:
            try:
                fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.05)
        os.ftruncate(self.lock_fd, 0)
        os.pwrite(self.lock_fd, f"{os.getpid()}\n".encode(), 0)
        return True

    def holder_pid(self) -> Optional[int]:
        try:
            with open(os.path.join(self.qdir, RUNNER_LOCK)) as f:
                return int(f.read().strip() or "0") or None
        except (OSError, ValueError):
            return None

    def config(self, key: str) -> Any:
        return self.state["config"].get(key, DEFAULT_CONFIG[key])

    def idle_exit_s(self) -> float:
        if self.idle_exit_override is not None:
            return self.idle_exit_override
        return float(self.config("idle_exit_s"))

    def write_status(self, force: bool = False) -> None:
        now = time.time()
        if not force and now - self.last_status < STATUS_EVERY_S:
            return
        self.last_status = now
        doc = {"pid": os.getpid(), "boot_id": self.boot_id, "started": self.started_at,
               "heartbeat": now, "blocked": dict(self.blocked), "active": sorted(self.active),
               # A full disk is the doctor's U7; anything else, said as the runner's error.
               "write_error": self.failure if self.failure_is_disk else None,
               "error": None if self.failure_is_disk else self.failure}
        path = os.path.join(self.qdir, RUNNER_STATUS)
        try:
            _atomic_json(path, doc)
        except OSError as exc:
            if not _disk_full(exc):
                raise
            # A full disk or inode table refuses the temporary file; the status is how the
            # user learns of it, so it is rewritten in place, in the blocks it already has.
            doc["write_error"] = doc["write_error"] or _describe(exc)
            _rewrite_in_place(path, doc)

    # ----- recovery (GEN6)
    def recover(self) -> None:
        for job in list(iter_active(self.state)):
            attempt = current_attempt(job)
            if attempt is None or job["id"] in self.active:
                continue
            self.recover_one(job, attempt)

    def recover_one(self, job: Dict[str, Any], attempt: Dict[str, Any]) -> None:
        n = int(attempt["attempt"])
        files = AttemptFiles(self.qdir, job["id"], n)
        if attempt.get("boot_id") not in (None, self.boot_id):
            old_boot = attempt.get("boot_id")
            self.emit("orphaned_by_reboot", job=job["id"], attempt=n,
                      old_boot_id=old_boot, boot_id=self.boot_id,
                      why=f"box rebooted (boot_id {old_boot} -> {self.boot_id}) while it ran")
            self.maybe_retry(job["id"], "orphaned by reboot", signal_death=True)
            return
        if job["state"] == "launching":
            pidinfo = _read_json(files.pid)
            if files.lock_held() and pidinfo is None:
                # The wrapper holds the lock but has not written its pid yet: give it a moment.
                deadline = time.monotonic() + 2.0
                while pidinfo is None and time.monotonic() < deadline:
                    time.sleep(0.05)
                    pidinfo = _read_json(files.pid)
            if pidinfo is None and not os.path.exists(files.exit):
                if self.abandon(files):
                    self.emit("requeued", job=job["id"], reason="launch_interrupted",
                              abandoned_attempt=n, front=True, retry=False)
                    return
                pidinfo = _read_json(files.pid)
            if pidinfo is None:
                pidinfo = {"pid": None, "starttime": None, "t": None}
            self.emit("started", job=job["id"], attempt=n, pid=pidinfo.get("pid"),
                      pgid=pidinfo.get("pid"), starttime=pidinfo.get("starttime"),
                      boot_id=self.boot_id, recovered=True)
            job = self.state["jobs"][job["id"]]
            attempt = current_attempt(job) or attempt
        pid = attempt.get("pid")
        start = attempt.get("start") or time.time()
        if files.lock_held() and pid:
            self.log(f"adopting {job['id']} attempt {n} (pid {pid})")
            self.active[job["id"]] = Active(job["id"], n, int(pid), files, popen=None,
                                            start=start, gpus=list(attempt.get("gpus") or []),
                                            starttime=attempt.get("starttime"))
            mark = attempt.get("mark")
            self.active[job["id"]].mark = mark if isinstance(mark, str) else None
            return
        status = _read_json(files.exit)
        if status is not None:
            self.record_exit(job["id"], n, status, start)
            return
        now_start = proc_starttime(int(pid)) if pid else None
        if now_start is not None and now_start != attempt.get("starttime"):
            why = f"pid {pid} now belongs to another process (start time differs)"
        else:
            why = f"wrapper pid {pid} gone without an exit status (kill -9, OOM?)"
        self.emit("vanished", job=job["id"], attempt=n, why=why)
        self.maybe_retry(job["id"], "vanished", signal_death=True)

    def abandon(self, files: AttemptFiles) -> bool:
        """Claim an attempt no wrapper has started; False if a wrapper got there first."""
        fd = os.open(files.lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False
            if os.path.exists(files.pid) or os.path.exists(files.exit):
                return False
            with open(files.abandoned, "w") as f:
                f.write(f"{os.getpid()}\n")
                f.flush()
                os.fsync(f.fileno())
            return True
        finally:
            os.close(fd)

    # ----- exits and retries
    def log_path(self, job_id: str) -> str:
        return os.path.join(self.qdir, "logs", f"{job_id}.log")

    def record_exit(self, job_id: str, n: int, status: Dict[str, Any], start: float,
                    seen_pids: Optional[List[int]] = None) -> None:
        job = self.state["jobs"][job_id]
        end = status.get("end") or time.time()
        code, sig = status.get("exit_code"), status.get("signal")
        sync = code == 0 and not sig and self.sync_dest(job) is not None
        ooms = status.get("oom_kills")
        error = last_error_in(self.log_path(job_id)) if code != 0 or sig else None
        note_attempt_end(self.log_path(job_id), n, end_words(code, sig)
                         + (", OOM-killed in its cgroup" if isinstance(ooms, int) and ooms > 0
                            else ""), round(end - start, 3))
        self.emit("exited", job=job_id, attempt=n, exit_code=code, signal=sig,
                  duration=round(end - start, 3), sync=sync, child_pid=status.get("child_pid"),
                  pids=list(seen_pids or []), cgroup=status.get("cgroup"), oom_kills=ooms,
                  checkpoint=newest_of(job), error_line=error)
        if isinstance(ooms, int) and ooms > 0:
            # The identical command on the identical box is killed again: no retry.
            self.log(f"{job_id} attempt {n}: OOM-killed in its cgroup; not retried")
            return
        if sig:
            self.maybe_retry(job_id, f"died by {sig}", signal_death=True)
        elif code != 0:
            self.maybe_retry(job_id, f"exit code {code}", signal_death=False)

    def maybe_retry(self, job_id: str, why: str, signal_death: bool) -> None:
        job = self.state["jobs"][job_id]
        if not signal_death and not job["retry_on_exit"]:
            return
        if job["retries_used"] >= job["retries"]:
            return
        self.emit("requeued", job=job_id, reason=f"retry: {why}", retry=True, front=True)

    def sync_dest(self, job: Dict[str, Any]) -> Optional[str]:
        dest = job.get("durable_dir") or self.config("durable_dir")
        if not dest or not job.get("outputs") or not job.get("cwd"):
            return None
        if os.path.realpath(dest) == os.path.realpath(job["cwd"]):
            return None
        return str(dest)

    # ----- requests from the jump host
    def handle_requests(self) -> None:
        for req in list(self.state["pending_requests"]):
            seq, kind, job_id = req["seq"], req["ev"], str(req.get("job"))
            job = self.state["jobs"].get(job_id)
            if job is None:
                self.emit("rejected", req=seq, job=job_id, why=f"no job {job_id}")
                continue
            st = job["state"]
            if kind == "kill_requested":
                if st == "queued":
                    self.emit("killed", req=seq, job=job_id, attempt=None, was="queued")
                elif st in ACTIVE_STATES:
                    act = self.active.get(job_id)
                    if act is None or seq in act.kill_reqs:
                        continue  # answered when the group is gone
                    grace = req.get("grace")
                    grace = float(self.config("kill_grace_s") if grace is None else grace)
                    act.kill_reqs.append(seq)
                    if act.kill_deadline is None:
                        self.log(f"kill {job_id}: SIGTERM to group {act.pid}, grace {grace:.1f}s")
                        act.kill_deadline = time.monotonic() + grace
                        act.kill_sent = "SIGTERM"
                        act.signal_group(signal.SIGTERM)
                else:
                    self.emit("rejected", req=seq, job=job_id, why=f"job is {st}")
            elif kind == "relaunch_requested":
                if st in ACTIVE_STATES:
                    self.emit("rejected", req=seq, job=job_id, why=f"job is {st}; kill it first")
                elif st == "removed":
                    self.emit("rejected", req=seq, job=job_id, why="job was removed")
                else:
                    self.emit("requeued", req=seq, job=job_id, reason="relaunch", front=True,
                              retry=False)
            elif kind == "remove_requested":
                if st in ACTIVE_STATES:
                    self.emit("rejected", req=seq, job=job_id, why=f"job is {st}; kill it first")
                else:
                    self.emit("removed", req=seq, job=job_id)
            elif kind == "reorder_requested":
                if st != "queued":
                    self.emit("rejected", req=seq, job=job_id, why=f"job is {st}")
                else:
                    self.emit("reordered", req=seq, job=job_id,
                              position=int(req.get("position") or 0))

    # ----- watching running attempts
    def check_active(self) -> None:
        for job_id, act in list(self.active.items()):
            try:
                self.check_one(job_id, act)
            except Exception:
                # Its end could not be recorded (a full disk): watched again next tick, unless
                # the end did reach the file before what failed (a retry's requeue).
                self.refresh()
                job = self.state["jobs"].get(job_id)
                last = current_attempt(job) if job is not None else None
                if last is not None and last.get("attempt") == act.attempt \
                        and last.get("end") is None:
                    self.active[job_id] = act
                raise

    def check_one(self, job_id: str, act: Active) -> None:
        """One watched attempt: signals of a kill in progress, its end recorded."""
        ended = act.wrapper_ended()
        if act.kill_deadline is not None:
            if not ended or act.group_alive():
                now = time.monotonic()
                if act.kill_sent == "SIGTERM" and now >= act.kill_deadline:
                    self.log(f"kill {job_id}: grace over, SIGKILL to group {act.pid}")
                    act.kill_sent = "SIGKILL"
                    act.kill_reap_deadline = now + KILL_REAP_S
                    act.signal_group(signal.SIGKILL)
                if act.kill_reap_deadline is None or now < act.kill_reap_deadline:
                    return
            kill_status = _read_json(act.files.exit) or {}
            if not kill_status and act.popen is not None and act.popen.returncode is not None:
                kill_status = _status_from_returncode(act.popen.returncode)
            del self.active[job_id]
            note_attempt_end(self.log_path(job_id), act.attempt,
                             "killed on request (" + end_words(kill_status.get("exit_code"),
                                                               kill_status.get("signal")) + ")",
                             round(time.time() - act.start, 3))
            self.emit("killed", req=act.kill_reqs[0], reqs=act.kill_reqs[1:], job=job_id,
                      attempt=act.attempt, sent=act.kill_sent,
                      exit_code=kill_status.get("exit_code"),
                      signal=kill_status.get("signal"),
                      duration=round(time.time() - act.start, 3),
                      checkpoint=newest_of(self.state["jobs"][job_id]))
            return
        if not ended:
            act.sample_pids(time.monotonic())
            return
        del self.active[job_id]
        status = _read_json(act.files.exit)
        if status is None and act.popen is not None:
            # The wrapper itself died by a signal before writing the status.
            status = _status_from_returncode(act.popen.returncode or 0)
            status["end"] = time.time()
        if status is None:
            self.emit("vanished", job=job_id, attempt=act.attempt,
                      why="wrapper ended without an exit status")
            self.maybe_retry(job_id, "vanished", signal_death=True)
            return
        self.record_exit(job_id, act.attempt, status, act.start, act.seen_pids)

    # ----- spot notices (U45)
    def preempt_notice_seen(self) -> Optional[Dict[str, Any]]:
        """The notice recorded in this boot, if any."""
        seen = self.state.get("preempt")
        return seen if isinstance(seen, dict) and seen.get("boot_id") == self.boot_id else None

    def preempt_notice_stands(self) -> bool:
        """This boot's notice, not yet over: the box goes within the cloud's grace."""
        seen = self.preempt_notice_seen()
        return seen is not None and not preempt_over(seen.get("at"), seen.get("t"), time.time())

    def check_preemption(self) -> None:
        """On a spot box with jobs running or waiting, ask the cloud at most every EVERY_S
        (asked before launch_ready in a tick, so a waiting job is not started unasked); a
        notice is recorded once per boot and each job's group gets SIGUSR1 (its Checkpointer
        saves)."""
        cloud = self.config("spot_cloud")
        now = time.time()
        if not cloud or not (self.active or self.state["order"]) \
                or now - self.preempt_checked < preempt.EVERY_S:
            return
        self.preempt_checked = now
        if self.preempt_notice_seen() is not None:
            return  # told and signalled already; the box goes down in seconds
        got = preempt.check(cloud, self.config("metadata_url"))
        if got["error"] != self.preempt_error:
            self.preempt_error = got["error"]
            self.log(f"preemption check: {got['error'] or 'answers again'}")
        if not got["notice"]:
            return
        for active in self.active.values():
            active.signal_group(signal.SIGUSR1)
        self.emit("preempt_notice", cloud=cloud, action=got["action"], at=got["at"], t=now,
                  boot_id=self.boot_id, signalled=len(self.active))
        self.log(f"{cloud} preemption notice ({got['action']}, {got['seconds_left']} s left): "
                 f"SIGUSR1 to {len(self.active)} job(s)")

    # ----- syncs
    def handle_syncs(self) -> None:
        while True:
            try:
                job_id, result = self.sync_results.get_nowait()
            except queue_mod.Empty:
                break
            self.syncing.pop(job_id, None)
            job = self.state["jobs"].get(job_id)
            dest = self.sync_dest(job) if job else None
            if result.get("ok"):
                self.emit("synced", job=job_id, dest=dest, files=result.get("files"))
            else:
                self.emit("sync_failed", job=job_id, dest=dest, why=result.get("why"))
        for job in self.state["jobs"].values():
            sync = job.get("sync")
            if not sync or sync.get("state") != "pending" or job["id"] in self.syncing:
                continue
            dest = self.sync_dest(job)
            if dest is None:
                self.emit("sync_failed", job=job["id"], dest=None,
                          why="no durable dir or outputs any more")
                continue
            self.syncing[job["id"]] = _start_sync(job, dest, self.sync_results)

    # ----- launching
    def inventory(self) -> Tuple[List[int], Dict[int, List[int]]]:
        now = time.monotonic()
        if self.gpu_cache is None or now - self.gpu_cache[0] > GPU_INVENTORY_TTL_S:
            try:
                indices, holders = gpu_inventory(self.gpu_session)
            except Exception as exc:  # a broken GPU stack means "no GPU info", not a dead queue
                self.log(f"GPU inventory failed, scheduling as CPU-only: {exc}")
                indices, holders = [], {}
            self.gpu_cache = (now, indices, holders)
        return self.gpu_cache[1], self.gpu_cache[2]

    def our_sessions(self) -> Dict[int, str]:
        return {act.pid: job_id for job_id, act in self.active.items()}

    def launch_ready(self) -> None:
        """Launch what can run; every queued job left waiting gets its reason in
        ``self.blocked`` (runner.json), which ``queue ls`` and the room show (issue 17)."""
        self.blocked = {}
        order = self.dependencies_met(list(self.state["order"]))
        if self.config("paused"):
            for job_id in order:
                self.blocked[job_id] = PAUSED_WAIT
            return
        if self.preempt_notice_stands():
            # U45: the box goes within the notice's grace (2 min on AWS, 30 s on GCP and
            # Azure); a job started now pays its setup and loses it with the box. Jobs stay
            # queued in the event log and start after the next boot (a new boot id).
            for job_id in order:
                self.blocked[job_id] = PREEMPT_WAIT
            return
        slots = self.slots()
        for pos, job_id in enumerate(order):
            if len(self.active) >= slots:
                running = ", ".join(sorted(self.active))
                for later in order[pos:]:
                    self.blocked[later] = f"waiting for a slot ({slots} of {slots} in use: " \
                        f"{running})"
                return
            job = self.state["jobs"][job_id]
            want = job.get("gpus")
            indices, holders = self.inventory() if (want is None or want > 0) else ([], {})
            if not indices:
                if want:
                    self.emit("unschedulable", job=job_id,
                              why=f"needs {want} GPU(s); this box has none")
                    continue
                self.launch(job, [], "" if want == 0 else None)
                continue
            need = 1 if want is None else int(want)
            if need > len(indices):
                self.emit("unschedulable", job=job_id,
                          why=f"needs {need} GPUs; this box has {len(indices)}")
                continue
            ours = self.our_sessions()
            busy = {g for act in self.active.values() for g in act.gpus}
            free = []
            held = []
            for idx in indices:
                if idx in busy:
                    continue
                foreign = [p for p in holders.get(idx, []) if proc_session(p) not in ours]
                if foreign:
                    pids = ",".join(str(p) for p in foreign[:4])
                    held.append(f"GPU {idx} held by pid {pids} (GEN7)")
                    continue
                free.append(idx)
            if len(free) < need:
                # Head of line waits: a later job never overtakes a job that needs more GPUs.
                # What the user acts on first: the pid holding the card.
                why = f"wants {need} GPU(s), {len(free)} free"
                self.blocked[job_id] = f"{'; '.join(held)}; {why}" if held else \
                    f"waiting for GPUs: {why}"
                for later in order[pos + 1:]:
                    self.blocked[later] = f"waiting behind {job_id}"
                return
            pick = free[:need]
            self.launch(job, pick, ",".join(str(g) for g in pick))

    def slots(self) -> int:
        """Jobs at once: the configured number, else one per GPU (1 on a CPU box)."""
        configured = int(self.config("slots") or 0)
        if configured > 0:
            return configured
        return max(1, len(self.inventory()[0]))

    def dependencies_met(self, order: List[str]) -> List[str]:
        """The queued jobs whose ``after`` jobs all succeeded, in order. One that waits says
        for which job; one whose dependency failed, was killed or removed fails with that
        reason (pueue's rule), and so do the jobs waiting for it, tick by tick."""
        ready = []
        for job_id in order:
            job = self.state["jobs"][job_id]
            waiting: List[str] = []
            failed: Optional[str] = None
            for dep in job.get("after") or []:
                other = self.state["jobs"].get(dep)
                if other is None:
                    failed = f"dependency {dep} does not exist"
                elif other["state"] in DEPENDENCY_FAILED_STATES:
                    failed = f"dependency {dep} {other['state']}"
                elif other["state"] != "succeeded":
                    waiting.append(dep)
                if failed:
                    break
            if failed:
                self.emit("dependency_failed", job=job_id, why=failed)
            elif waiting:
                self.blocked[job_id] = f"waiting for {', '.join(waiting)} (dependency)"
            else:
                ready.append(job_id)
        return ready

    def launch(self, job: Dict[str, Any], gpus: List[int], cuda: Optional[str]) -> None:
        job_id = job["id"]
        n = len(job["attempts"]) + 1
        ckpt_dir = user_ckpt_dir(job.get("env") or {}, job.get("cwd")) or ckpt_dir_of(
            self.root, self.queue, job_id, job.get("durable_dir"), self.state["config"])
        slot = len(self.active)
        # What code it runs (U42): hashed now, compared by the probe while it runs (U2).
        code = drift.code_facts(job["argv"], job.get("cwd") or os.path.expanduser("~"))
        mark = jobmark.new_mark(self.queue, job_id, n)  # finds its processes outside its group
        self.emit("launching", job=job_id, attempt=n, boot_id=self.boot_id, slot=slot,
                  gpus=gpus, ckpt_dir=ckpt_dir, code=code, mark=mark)
        self.crash_point("after_launching")
        files = AttemptFiles(self.qdir, job_id, n)
        log_path = self.log_path(job_id)
        try:
            os.makedirs(ckpt_dir, exist_ok=True)
        except OSError as exc:
            self.log(f"cannot create {ckpt_dir}: {exc}")
        env = build_job_env(dict(os.environ), job, cuda=cuda, ckpt_dir=ckpt_dir,
                            pythonpath=import_path(self.root), threads=cpu_thread_cap())
        from_secrets, missing = secrets.secret_env(job)  # read now: never in an event (U34)
        env.update(from_secrets)
        env[jobmark.MARK_VAR] = mark  # last: a job's --env cannot unset or forge it
        argv = [*self_argv(), "queue", "_exec", "--files", files.lock[:-len(".lock")],
                "--cwd", job.get("cwd") or os.path.expanduser("~"), "--", *job["argv"]]
        with open(log_path, "ab") as logf:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            # None: left as the runner has it (no GPU here); "": every GPU hidden (--gpus 0).
            shown = "not set" if cuda is None else cuda or "none (GPUs hidden)"
            marker = f"=== gpuroom {job_id} attempt {n} {stamp} cuda={shown} ===\n"
            marker += "".join(f"gpuroom: {line}\n" for line in missing)
            logf.write(_own_line(log_path, marker).encode())
            logf.flush()
            popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf,
                                     stderr=subprocess.STDOUT, env=env, cwd=self.qdir,
                                     start_new_session=True, close_fds=True)
        self.crash_point("after_spawn")
        starttime = proc_starttime(popen.pid)
        self.emit("started", job=job_id, attempt=n, pid=popen.pid, pgid=popen.pid,
                  starttime=starttime, boot_id=self.boot_id, slot=slot, gpus=gpus)
        self.log(f"started {job_id} attempt {n} pid {popen.pid}")
        self.active[job_id] = Active(job_id, n, popen.pid, files, popen=popen,
                                     start=time.time(), gpus=gpus, starttime=starttime)
        self.active[job_id].mark = mark

    # ----- main loop
    def has_work(self) -> bool:
        # A paused queue's waiting jobs are no work: its runner may leave when idle, and
        # `queue resume` starts one again.
        waiting = self.state["order"] and not self.config("paused")
        return bool(self.active or waiting or self.state["pending_requests"]
                    or self.syncing or any(
                        (j.get("sync") or {}).get("state") == "pending"
                        for j in self.state["jobs"].values()))

    def still_ours(self) -> bool:
        """Whether the queue's lock and events file at their paths are still the files this
        runner holds. A queue directory deleted and made again (by hand, or a box's reset)
        would otherwise leave this runner reading the new queue by path while it writes into
        the deleted file: a second runner, launching every job a second time, unrecorded."""
        try:
            lock = os.stat(os.path.join(self.qdir, RUNNER_LOCK)).st_ino
            events = os.stat(self.writer.path).st_ino
        except FileNotFoundError:
            return False
        except OSError:
            return True  # in doubt, stay: leaving strands the queue until the next add
        return lock == os.fstat(self.lock_fd).st_ino and events == os.fstat(self.writer.fd).st_ino

    def tick(self) -> None:
        if self.failure is not None:
            # A write failed mid-tick (an event cut back): what it left half-recorded (a
            # launch without its "started", an exit not recorded) is picked up the way a new
            # runner picks up after a crash, for the jobs this runner does not watch.
            self.refresh()
            self.recover()
        self.refresh()
        self.handle_requests()
        self.check_active()
        self.check_preemption()
        self.handle_syncs()
        self.launch_ready()
        self.write_status(force=self.failure is not None)

    def run(self) -> int:
        self.refresh()
        self.log(f"runner for queue {self.queue} (boot {self.boot_id}) up")
        self.recover()
        idle_since: Optional[float] = None
        backoff = self.poll_s
        while True:
            if not self.still_ours():
                self.log(f"{self.qdir} was replaced: this runner is not its runner any more; "
                         "exiting (jobs it started keep running)")
                return 0
            try:
                self.tick()
                if self.failure is not None:
                    self.log("ticks work again")
                    self.failure, self.failure_is_disk = None, False
                    self.write_status(force=True)
                backoff = self.poll_s
            except Exception as exc:  # the runner is the queue: it never dies
                # (issue 18) A full disk, or anything a job wrote into the queue's files that
                # got past the fold: said in runner.json and the log, retried with a backoff.
                why = _describe(exc)
                if why != self.failure:
                    self.log(f"tick failed, retrying with a backoff: {why}")
                self.failure = why
                self.failure_is_disk = _disk_full(exc)
                backoff = min(MAX_BACKOFF_S, backoff * 2)
                try:
                    self.write_status(force=True)
                except Exception:  # nothing more to tell it with
                    pass
                time.sleep(backoff)
                continue
            if self.has_work():
                idle_since = None
            else:
                now = time.monotonic()
                idle_since = idle_since if idle_since is not None else now
                if now - idle_since >= self.idle_exit_s() and self.try_exit():
                    return 0
            time.sleep(self.poll_s)

    def try_exit(self) -> bool:
        """Leave only if no request slipped in: decided under the events file's lock.

        A client appends under that lock and checks for a runner after it, so either we see
        its event here, or it sees runner.lock free and starts a new runner.
        """
        self.writer.lock()
        try:
            self.refresh()
            if self.has_work():
                return False
            self.log(f"queue idle for {self.idle_exit_s():.1f}s: exiting")
            try:
                self.write_status(force=True)
            except OSError:
                pass  # leaving anyway: the lock, not this file, says whether a runner lives
            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)
            return True
        finally:
            self.writer.unlock()


def signal_name(number: int) -> str:
    """"SIGKILL"; the number itself for a signal Python has no name for (SIGRTMIN+2 is 36,
    and ``signal.Signals(36)`` raises, which took the wrapper down with the job's status)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, WriteFailed):
        return exc.describe()
    if _disk_full(exc):
        assert isinstance(exc, OSError)
        return (f"{exc.filename or 'a queue file'}: {exc.strerror} "
                f"({errno.errorcode.get(exc.errno or 0, '')}); free space (df -h; df -i)")
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def _rewrite_in_place(path: str, doc: Dict[str, Any]) -> None:
    data = json.dumps(doc).encode("utf-8")
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def _status_from_returncode(rc: int) -> Dict[str, Any]:
    if rc < 0:
        return {"exit_code": None, "signal": signal_name(-rc)}
    return {"exit_code": rc, "signal": None}


def _start_sync(job: Dict[str, Any], dest: str,
                results: queue_mod.Queue[Tuple[str, Dict[str, Any]]]) -> threading.Thread:
    # A copy of gigabytes must not freeze kill handling: it runs beside the loop, and only
    # the loop writes the outcome (one writer of job state).
    def work() -> None:
        results.put((job["id"], checked_sync(job["cwd"], job["outputs"], dest)))

    thread = threading.Thread(target=work, name="sync-" + job["id"], daemon=True)
    thread.start()
    return thread


def runner_main(root: str, queue: str, *, idle_exit_s: Optional[float],
                env_file: Optional[str], log_file: Optional[str],
                out: Optional[IO[str]] = None) -> int:
    runner = Runner(root, queue, idle_exit_s)
    if not runner.acquire():
        (out or sys.stderr).write(
            f"gpuroom queue runner: queue {queue!r} already has a runner "
            f"(pid {runner.holder_pid()}); exiting\n")
        return EXIT_RUNNER_BUSY
    if env_file:
        snapshot = _read_json(env_file)
        if snapshot:
            # tmux gives its server's environment, not the caller's: restore the caller's.
            os.environ.clear()
            os.environ.update({str(k): str(v) for k, v in snapshot.items()})
    if log_file:
        fd = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    # A closing tmux pane or SSH must not stop the runner. A handler, not SIG_IGN: an
    # ignored signal would be inherited through exec by every job.
    signal.signal(signal.SIGHUP, _ignore_signal)
    return runner.run()
