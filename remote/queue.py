"""``gpuroom-remote queue ...``: a job queue on the box that finishes on its own.

Subcommands (every one takes ``--root DIR`` (default $GPUROOM_HOME or ~/.gpuroom) and
``--queue NAME`` (default "default"); all but raw ``logs`` print one JSON object on stdout, also
when a file cannot be written (``ok`` false, ``error`` and ``fix``); ``add`` answers ok only
when the job is recorded and a live runner will see it, see ``add_job``):

  add [--name N] [--cwd DIR] [--env K=V]... [--env-stdin] [--secret NAME[=VAR]]...
      [--gpus K] [--retries N] [--vram-mib M]
      [--retry-on-exit] [--after JOB[,JOB]] [--priority N]
      [--output GLOB]... [--durable-dir DIR] [--front] [--no-start]
      [--backend local|slurm] [--time T] [--signal-lead S] [--cpus-per-task N]
      [--partition P] -- ARGV...
  config [--slots N] [--durable-dir DIR] [--idle-exit S] [--kill-grace S]
      [--spot aws|gcp|azure] [--metadata-url URL]
      [--backend local|slurm] [--slurm-conf PATH] [--partition P] [--time T]
      [--signal-lead S] [--cpus-per-task N]
  start                       detach a runner (tmux session gpuroom-<queue>, else setsid)
  runner [--idle-exit S]      the runner itself, in the foreground (exit 3: one already runs)
  ls [--json]                 the folded state
  kill ID [--grace S] [--wait S]
  relaunch ID | remove ID | move ID POSITION   (answered by the runner; bounded wait)
  pause | resume              start no new job / start them again (running ones go on)
  show ID                     one job as ``ls`` has it, with its newest checkpoint
  edit ID [--name N] [--gpus K] [--env K=V]... [--env-stdin] [--unset-env K]... [-- ARGV...]
                              a changed copy as a new job (the old one is kept)
  logs ID [--offset N] [--max-bytes M]         raw log bytes on stdout
  logs ID --lines N | --end E [--max-bytes M] | --json   one log chunk as JSON (the probe's)
  install-reboot-hook         @reboot crontab line that restarts this queue's runner (GEN6)
  _exec ...                   internal: the per-attempt wrapper

``collect(session, request)`` is the probe's ``queue`` section.

A queue whose backend is ``slurm`` (set by ``config --backend slurm`` or per job by ``add
--backend slurm``, which the jump host passes for a host with the ``slurm`` profile) submits
with sbatch instead of running a local runner: see ``queue_slurm``. Its jobs are in the same
events file and come back from ``ls``/the probe as the same records with extra fields.
"""

from __future__ import annotations

import argparse
import base64
import errno
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Set

from . import (
    addcheck,
    drift,
    jobmark,
    preempt,
    queue_slurm,
    secrets,
    selfexit,
    slurm_telemetry,
    survive,
)
from .checkpoint import SAVE_RECORD
from .ckptunits import NOT_UNITS, job_units, newest_unit, step_of
from .procstat import group_cpu_seconds
from .queue_events import (
    ACTIVE_STATES,
    DEFAULT_QUEUE,
    HOST_IN_FIX,
    LIVE_STATES,
    PAUSED_WAIT,
    EventReader,
    EventWriter,
    WriteFailed,
    check_queue_name,
    ckpt_dir_of,
    ckpt_dir_refusal,
    ensure_queue_id,
    fold,
    list_queues,
    queue_dir,
    read_events,
    read_queue_id,
    root_dir,
    user_ckpt_dir,
)
from .queue_runner import (
    EXIT_RUNNER_BUSY,
    RUNNER_LOCK,
    RUNNER_STATUS,
    exec_main,
    flock_held,
    runner_main,
    self_argv,
)
from .safeopen import open_regular

__all__ = ["EXIT_RUNNER_BUSY", "collect", "main", "parse_tmux_ls", "runner_alive"]

LOG_CHUNK_MAX = 64 * 1024  # per job per probe request
LOG_TAIL_DEFAULT = 8 * 1024  # without a cursor
LS_JOB_LIMIT = 200
CKPT_SCAN_LIMIT = 2000  # directory entries looked at per job per probe
SAVE_RECORD_MAX = 64 * 1024  # the Checkpointer's note is a few dozen bytes
RUNNER_START_WAIT_S = 5.0
SURVIVORS_MAX = 20  # processes named per ended job
# The verbs that only read: bounded as a whole, so one stuck on a job's file leaves the box.
READ_VERBS = ("ls", "show", "logs")
READ_VERB_DEADLINE_S = 120.0
REQUEST_WAIT_S = 15.0  # how long relaunch/remove/move wait for the runner's answer
CRON_MARK = "# gpuroom-queue:"


# ---------------------------------------------------------------- tmux

_TMUX_LS_RE = re.compile(
    r"^(?P<name>.+?): (?P<windows>\d+) windows? \(created (?P<created>[^)]*)\)"
    r"(?: \[(?P<width>\d+)x(?P<height>\d+)\])?(?P<rest>.*)$")


def parse_tmux_ls(text: str) -> List[Dict[str, Any]]:
    """Sessions in ``tmux ls`` default output (tmux 2.x with [WxH], 3.x without)."""
    sessions = []
    for line in text.splitlines():
        m = _TMUX_LS_RE.match(line.rstrip())
        if not m:
            continue
        sessions.append({
            "name": m.group("name"),
            "windows": int(m.group("windows")),
            "created": m.group("created"),
            "width": int(m.group("width")) if m.group("width") else None,
            "height": int(m.group("height")) if m.group("height") else None,
            "attached": "(attached)" in m.group("rest"),
        })
    return sessions


def _tmux_base() -> Optional[List[str]]:
    tmux = shutil.which("tmux")
    if not tmux:
        return None
    socket = os.environ.get("GPUROOM_TMUX_SOCKET")
    return [tmux, "-L", socket] if socket else [tmux]


def tmux_env() -> Dict[str, str]:
    """The environment for our tmux calls. Run from inside the user's tmux (gpuroom on the
    local host, in tmux), $TMUX would point tmux at the user's own server: the runner's
    session belongs on the default (or GPUROOM_TMUX_SOCKET) server, as on any box."""
    return {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}


def tmux_session_exists(name: str) -> bool:
    base = _tmux_base()
    if base is None:
        return False
    try:
        proc = subprocess.run([*base, "ls"], check=False, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=5, env=tmux_env())
    except (OSError, subprocess.TimeoutExpired):
        return False
    text = proc.stdout.decode("utf-8", "replace")
    return any(s["name"] == name for s in parse_tmux_ls(text))


# ---------------------------------------------------------------- runner liveness and start

REBOOT_HOOK_MARK = "reboot-hook"


def runner_alive(qdir: str) -> bool:
    """Whether some runner holds the queue's lock."""
    return flock_held(os.path.join(qdir, RUNNER_LOCK))


def _runner_info(qdir: str) -> Dict[str, Any]:
    # GEN6: the doctor asks for an @reboot entry where none was installed; the marker is
    # written by install-reboot-hook, so a poll needs no `crontab -l`.
    info: Dict[str, Any] = {"alive": runner_alive(qdir),
                            "reboot_hook": os.path.exists(os.path.join(qdir, REBOOT_HOOK_MARK))}
    try:
        with open(os.path.join(qdir, RUNNER_STATUS)) as f:
            status = json.load(f)
        if isinstance(status, dict):
            info.update({k: status.get(k) for k in ("pid", "boot_id", "started", "heartbeat",
                                                   "blocked", "write_error", "error")})
    except (OSError, ValueError):
        pass
    return info


def start_runner(root: str, queue: str, idle_exit: Optional[float] = None) -> Dict[str, Any]:
    """Detach a runner unless one holds the lock; wait (bounded) until it does."""
    qdir = queue_dir(root, queue)
    os.makedirs(qdir, exist_ok=True)
    if runner_alive(qdir):
        return {"started": False, "running": True, "method": None}
    env_file = os.path.join(qdir, "runner.env.json")
    tmp = f"{env_file}.tmp{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(dict(os.environ), f)
        os.replace(tmp, env_file)
    except OSError:
        if os.path.exists(tmp):
            os.unlink(tmp)  # a full disk leaves no half-written file behind
        raise
    log_file = os.path.join(qdir, "runner.log")
    argv = [*self_argv(), "queue", "runner", "--root", root, "--queue", queue,
            "--env-file", env_file, "--log-file", log_file]
    if idle_exit is not None:
        argv += ["--idle-exit", str(idle_exit)]
    method = None
    session = f"gpuroom-{queue}"
    base = _tmux_base()
    popen = None
    if base is not None:
        # tmux >= 3.0 takes the command as an argv after --: no shell parses it.
        proc = subprocess.run([*base, "new-session", "-d", "-s", session, "--", *argv],
                              check=False, env=tmux_env(),
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
        if proc.returncode == 0:
            method = "tmux"
        else:
            why = proc.stderr.decode("utf-8", "replace").strip()
            sys.stderr.write(f"gpuroom queue: tmux new-session failed ({why}); using setsid\n")
    if method is None:
        # GEN2: own session, no terminal, stdin from /dev/null, output to a file.
        with open(log_file, "ab") as logf:
            popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     close_fds=True, cwd=qdir)
        method = "setsid"
    deadline = time.monotonic() + RUNNER_START_WAIT_S
    while time.monotonic() < deadline:
        if runner_alive(qdir):
            return {"started": True, "running": True, "method": method,
                    "session": session if method == "tmux" else None}
        if popen is not None and popen.poll() is not None:
            break
        time.sleep(0.05)
    return {"started": True, "running": runner_alive(qdir), "method": method,
            "session": session if method == "tmux" else None}


# ---------------------------------------------------------------- views

def job_view(job: Dict[str, Any], qdir: str) -> Dict[str, Any]:
    view = dict(job)
    view["log"] = os.path.join(qdir, job["log"])
    view["env"] = secrets.redact_env(job.get("env"))  # U34: no value in a snapshot or ls
    if job.get("state") in ACTIVE_STATES and job.get("attempts"):
        # A script replaced under a running job (U2): stat only, no hashing at every poll.
        view["code_changed"] = drift.changed(job["attempts"][-1].get("code"))
    return view


def queue_view(root: str, queue: str, limit: Optional[int] = None,
               reader: Optional[EventReader] = None) -> Dict[str, Any]:
    qdir = queue_dir(root, queue)
    if reader is None:
        events, warnings = read_events(qdir)
    else:
        reader.refresh()
        events, warnings = reader.events, reader.all_warnings()
    state = fold(events, queue)
    slurm_jobs, slurm_warnings = queue_slurm.refresh(qdir, list(events))
    warnings = [*warnings, *state["skipped_events"], *slurm_warnings]
    jobs = sorted([*state["jobs"].values(), *slurm_jobs], key=lambda j: j["added_seq"])
    if limit is not None and len(jobs) > limit:
        # Bounded answer, but never hide what is live or waiting.
        keep = {j["id"] for j in jobs[-limit:]}
        jobs = [j for j in jobs if j["id"] in keep or j["state"] in LIVE_STATES]
    runner = _runner_info(qdir)
    views = [job_view(j, qdir) for j in jobs]
    for view in views:
        view["waiting"] = _waiting(view, runner, bool(state["config"].get("paused")))
    return {
        "queue": queue,
        # a queue from before identities gets its own at the first look
        "id": ensure_queue_id(qdir) if os.path.isdir(qdir) else None,
        "dir": qdir,
        "config": state["config"],
        "preempt": state["preempt"],  # the runner's record of a spot notice (remote/preempt.py)
        "runner": runner,
        "jobs": views,
        "order": state["order"],
        "pending_requests": state["pending_requests"],
        "last_seq": state["last_seq"],
        "jobs_total": len(state["jobs"]) + len(slurm_jobs),
        "backend": queue_slurm.slurm_config(events).get("backend") or "local",
        "warnings": warnings,
    }


def _waiting(job: Dict[str, Any], runner: Dict[str, Any], paused: bool) -> Optional[str]:
    """Why a queued box job has not started (issue 17): the runner's reason (a slot, GPUs
    held by a foreign pid, the job ahead), or that no runner is there to start it."""
    if job.get("state") != "queued" or job.get("backend") == queue_slurm.BACKEND:
        return None  # a Slurm job's wait is Slurm's own reason (Dependency, Resources, ...)
    if paused:
        return PAUSED_WAIT  # said with or without a runner: a paused queue's runner may leave
    if not runner.get("alive"):
        return "no runner: the next queue add starts one"
    blocked = runner.get("blocked")
    why = blocked.get(job.get("id")) if isinstance(blocked, dict) else None
    return str(why) if why else None


def tail_start(f: Any, end: int, max_bytes: int, lines: Optional[int] = None) -> int:
    """Where the last ``max_bytes`` (at most ``lines`` lines) before ``end`` of ``f`` begin.

    The start is a line start, so the jump host never shows a line cut in half as if it were
    whole; only a single line longer than ``max_bytes`` is shown from its middle.
    """
    low = max(0, end - max(0, max_bytes))
    # One byte before ``low`` tells whether ``low`` already starts a line.
    before = max(0, low - 1)
    f.seek(before)
    data = f.read(end - before)
    base = before
    if lines is not None:
        pos = len(data) - 1 if data.endswith(b"\n") else len(data)
        for _ in range(max(0, lines)):
            pos = data.rfind(b"\n", low - base, pos)
            if pos < 0:
                break
        if pos >= 0:
            return min(end, base + pos + 1)
    if low == 0:
        return 0
    nl = data.find(b"\n")
    start = base + nl + 1
    return start if nl >= 0 and start < end else low


def read_log_chunk(path: str, cursor: Optional[Dict[str, Any]],
                   max_bytes: int = LOG_CHUNK_MAX) -> Dict[str, Any]:
    """Log bytes for the jump host's cursor; ``reset`` when the file was replaced/cut.

    The cursor is ``{"offset", "inode"}`` (what follows), ``{"tail": N}`` (the last N bytes,
    capped at ``max_bytes``: a job the user just selected), ``{"tail": N, "end": E}`` (the N
    bytes before offset E: scrolling back) or None (the last ``LOG_TAIL_DEFAULT`` bytes).
    Every tail starts at a line start.
    """
    try:
        f = open_regular(path)  # a job may make its log a FIFO: never wait on it
    except FileNotFoundError:
        return {"offset": 0, "next_offset": 0, "inode": None, "size": 0, "data_b64": "",
                "reset": bool(cursor), "missing": True, "mtime": None}
    with f:
        st = os.fstat(f.fileno())
        reset = False
        end = st.st_size
        if cursor is None:
            start = tail_start(f, end, LOG_TAIL_DEFAULT)
        elif cursor.get("tail") is not None:
            if cursor.get("end") is not None:
                end = max(0, min(end, int(cursor["end"])))
            lines = cursor.get("lines")
            start = tail_start(f, end, min(int(cursor["tail"]), max_bytes),
                               None if lines is None else int(lines))
        else:
            start = int(cursor.get("offset") or 0)
            if cursor.get("inode") not in (None, st.st_ino) or st.st_size < start:
                reset, start = True, 0
        f.seek(start)
        data = f.read(min(max_bytes, max(0, end - start)))
    return {"offset": start, "next_offset": start + len(data), "inode": st.st_ino,
            "size": st.st_size, "data_b64": base64.b64encode(data).decode("ascii"),
            "reset": reset, "mtime": st.st_mtime}  # a stall is a log that stopped (item 1)


def newest_checkpoint(ckpt_dir: Optional[str]) -> Optional[Dict[str, Any]]:
    """Liveness by artifact (U43): the newest file under the job's checkpoint dir."""
    if not ckpt_dir or not os.path.isdir(ckpt_dir):
        return None
    best: Optional[Dict[str, Any]] = None
    seen = 0
    for dirpath, _dirs, names in os.walk(ckpt_dir):
        for name in names:
            seen += 1
            if seen > CKPT_SCAN_LIMIT:
                return best
            if name.startswith(SAVE_RECORD) or NOT_UNITS.match(name):
                continue  # the Checkpointer's note, a tracker's event file: never a checkpoint
            path = os.path.join(dirpath, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            if best is None or st.st_mtime > best["mtime"]:
                best = {"path": path, "size": st.st_size, "mtime": st.st_mtime,
                        "step": step_of(name), "source": "gpuroom's", "kind": "file"}
    if best is not None:
        best["save_s"] = save_seconds(ckpt_dir)
    return best


def job_started(job: Dict[str, Any]) -> Optional[float]:
    """When the job's first attempt started: discovered units are those written since."""
    starts = [a.get("start") for a in job.get("attempts") or [] if isinstance(a, dict)]
    known = [float(t) for t in starts if isinstance(t, (int, float))]
    return min(known) if known else None


def units_of(job: Dict[str, Any], files: bool = True) -> Optional[Dict[str, Any]]:
    """The job's declared or discovered checkpoint units (remote/ckptunits.py)."""
    if job.get("backend") == "slurm":
        return None  # its cwd is on the cluster's disks, walked by nobody here
    return job_units(job.get("cwd"), job_started(job), list(job.get("ckpts") or []),
                     outputs=list(job.get("outputs") or []), files=files)


def job_checkpoint(job: Dict[str, Any], found: Optional[Dict[str, Any]] = None
                   ) -> Optional[Dict[str, Any]]:
    """The job's newest checkpoint: its own program's units when it has any (or declared
    some), else the newest file gpuroom's Checkpointer dir holds."""
    found = units_of(job) if found is None else found
    if found is not None and (found["units"] or found["source"] == "declared"):
        return newest_unit(found)
    return newest_checkpoint(job.get("ckpt_dir"))


def save_seconds(ckpt_dir: str) -> Optional[float]:
    """How long the Checkpointer's last save into ``ckpt_dir`` took (C), if it recorded it."""
    try:
        with open_regular(os.path.join(ckpt_dir, SAVE_RECORD)) as f:
            record = json.loads(f.read(SAVE_RECORD_MAX))
    except (OSError, ValueError):
        return None
    value = record.get("save_s") if isinstance(record, dict) else None
    return float(value) if isinstance(value, (int, float)) and value >= 0 else None


def finished_checkpoint(cache: Dict[str, Any], ckpt_dir: Optional[str]) -> Optional[Dict[str, Any]]:
    """The newest checkpoint of a job that succeeded (the jump host's "not pulled yet" clock
    needs to know it wrote one). Such a dir rarely changes, so it is walked again only when
    its own mtime does: a poll costs one stat per finished job, not a walk."""
    if not ckpt_dir:
        return None
    try:
        st = os.stat(ckpt_dir)
    except OSError:
        return None
    key = [st.st_ino, st.st_mtime_ns]
    hit = cache.get(ckpt_dir)
    if hit is None or hit[0] != key:
        hit = [key, newest_checkpoint(ckpt_dir)]
    cache[ckpt_dir] = hit
    return hit[1]  # type: ignore[no-any-return]


FINISHED_UNITS_TTL_S = 60.0  # a finished job's cwd is walked again at most this often


def _finished_units(state: Dict[str, Any], key: str, job: Dict[str, Any]) -> bool:
    """Set a succeeded job's units and newest one from a walk at most FINISHED_UNITS_TTL_S
    old (a poll every few seconds must not walk every finished job's cwd); False when it
    has none, so gpuroom's own dir is looked at instead."""
    cache = state.setdefault("finished_units", {})
    hit = cache.get(key)
    now = time.monotonic()
    if hit is None or now - hit[0] > FINISHED_UNITS_TTL_S:
        hit = (now, units_of(job))
        cache[key] = hit
    found = hit[1]
    if not found or not (found["units"] or found["source"] == "declared"):
        return False
    job["ckpt_units"] = found
    job["checkpoint"] = newest_unit(found)
    return True


def _pgid(job: Dict[str, Any]) -> Optional[int]:
    """The attempt's pid, which leads the job's own process group (queue_runner)."""
    attempts = job.get("attempts") or []
    pid = attempts[-1].get("pid") if attempts and isinstance(attempts[-1], dict) else None
    return pid if isinstance(pid, int) and not job.get("backend") == "slurm" else None


def running_pgids(jobs: List[Dict[str, Any]]) -> List[int]:
    return [p for p in (_pgid(j) for j in jobs if j.get("state") in ACTIVE_STATES) if p]


def collect(session: Any, request: Dict[str, Any]) -> Dict[str, Any]:
    """The probe's ``queue`` section: every queue, bounded, with log bytes per cursor."""
    root = root_dir(request.get("queue_root"))
    cursors = request.get("logs") or {}
    readers = session.state.setdefault("queue_readers", {})
    out: Dict[str, Any] = {"root": root, "queues": {}}
    # Rebuilt every probe from the dirs still listed, so it never outgrows the job list.
    old_ckpts = session.state.get("finished_checkpoints") or {}
    ckpts: Dict[str, Any] = {}
    seen: Set[str] = set()
    for name in list_queues(root):
        qdir = queue_dir(root, name)
        if name not in readers:
            readers[name] = EventReader(qdir)
        view = queue_view(root, name, LS_JOB_LIMIT, readers[name])
        cpu = group_cpu_seconds(running_pgids(view["jobs"]))
        for job in view["jobs"]:
            key = name + "/" + job["id"]
            seen.add(key)
            # One job's broken log or checkpoint dir is that job's error, never the
            # section's (which would blind the jump host to every other job).
            try:
                if job["state"] in ACTIVE_STATES or key in cursors:
                    job["log_chunk"] = read_log_chunk(job["log"], cursors.get(key))
            except OSError as exc:
                job["probe_error"] = f"log: {exc}"
            try:
                if job["state"] in ACTIVE_STATES:
                    job["ckpt_units"] = units_of(job)
                    job["checkpoint"] = job_checkpoint(job, job["ckpt_units"])
                    job["cpu_s"] = cpu.get(_pgid(job) or 0)
                elif job["state"] == "succeeded" and _finished_units(session.state, key, job):
                    pass  # its own program's checkpoints: the danger clock's "not pulled"
                elif job["state"] == "succeeded" and job.get("ckpt_dir"):
                    ckpt_dir = str(job["ckpt_dir"])
                    if ckpt_dir in old_ckpts:
                        ckpts[ckpt_dir] = old_ckpts[ckpt_dir]
                    job["checkpoint"] = finished_checkpoint(ckpts, ckpt_dir)
            except OSError as exc:
                job["probe_error"] = f"checkpoint dir: {exc}"
        slurm_telemetry.attach(root, qdir, view["jobs"], events=readers[name].events,
                               request=request, session_state=session.state)
        out["queues"][name] = view
    session.state["finished_checkpoints"] = ckpts
    units = session.state.get("finished_units") or {}
    for gone in [k for k in units if k not in seen]:
        del units[gone]  # removed jobs' walks are not kept for ever
    _attach_survivors(out["queues"])
    return {"queue": out}


def _attach_survivors(views: Dict[str, Any]) -> None:
    """Each ended job's processes still alive (a daemon that left its group): one /proc
    scan for every queue, only when some ended attempt carries a mark."""
    ended: Dict[str, Dict[str, Any]] = {}
    for view in views.values():
        for job in view["jobs"]:
            attempts = job.get("attempts") or []
            last = attempts[-1] if attempts and isinstance(attempts[-1], dict) else {}
            mark = last.get("mark")
            if job.get("state") not in ACTIVE_STATES and isinstance(mark, str) and mark:
                ended[mark] = job
    if not ended:
        return
    for mark, pids in jobmark.find(ended).items():
        ended[mark]["survivors"] = [{"pid": pid, "command": jobmark.command(pid)}
                                    for pid in sorted(pids)[:SURVIVORS_MAX]]


# ---------------------------------------------------------------- subcommands
ENV_STDIN_MAX = 1 << 20  # a job's whole environment, as JSON


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", default=None, help="default: $GPUROOM_HOME or ~/.gpuroom")
    parser.add_argument("--queue", default=DEFAULT_QUEUE)


def _emit(doc: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(doc, separators=(",", ":"), sort_keys=True) + "\n")
    sys.stdout.flush()


def _parse_env(items: List[str]) -> Dict[str, str]:
    env: Dict[str, str] = {}
    for item in items:
        if "=" not in item or item.startswith("="):
            raise SystemExit(f"gpuroom queue: --env wants KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        env[key] = value
    return env


def env_from_stdin(stream: Any) -> Dict[str, str]:
    """``--env-stdin``: the job's environment as one JSON object of strings on stdin.

    U34: an ``--env`` value on the helper's command line is in every ``ps`` of the box, so
    the jump host sends the values here; the event file keeps them (0600 under ~/.gpuroom)
    and every view redacts them."""
    raw = stream.read(ENV_STDIN_MAX + 1)
    if len(raw) > ENV_STDIN_MAX:
        raise SystemExit(f"gpuroom queue: --env-stdin over {ENV_STDIN_MAX} bytes")
    try:
        env = json.loads(raw.decode("utf-8")) if raw.strip() else {}
    except ValueError:
        raise SystemExit("gpuroom queue: --env-stdin wants one JSON object on stdin") from None
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and k and "=" not in k and isinstance(v, str)
            for k, v in env.items()):
        raise SystemExit("gpuroom queue: --env-stdin wants a JSON object of KEY: string")
    return env


def _job_env(args: argparse.Namespace) -> Dict[str, str]:
    env = _parse_env(args.env)
    if args.env_stdin:
        env.update(env_from_stdin(sys.stdin.buffer))
    return env


def _append_request(root: str, queue: str, ev: str, **fields: Any) -> Dict[str, Any]:
    writer = EventWriter(queue_dir(root, queue))
    try:
        return writer.append(ev, **fields)
    finally:
        writer.close()


def _wait_answer(root: str, queue: str, req_seq: int, timeout: float) -> Optional[Dict[str, Any]]:
    """The runner's event answering request ``req_seq``, or None at the deadline."""
    reader = EventReader(queue_dir(root, queue))
    deadline = time.monotonic() + timeout
    while True:
        reader.refresh()
        for ev in reader.events:
            if ev.get("req") == req_seq or req_seq in (ev.get("reqs") or []):
                return ev
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)


def _cmd_add(argv: List[str]) -> int:
    if "--" not in argv:
        sys.stderr.write("gpuroom queue add: put the job's argv after --\n")
        return 2
    cut = argv.index("--")
    cmd = argv[cut + 1:]
    parser = argparse.ArgumentParser(prog="gpuroom-remote queue add")
    _common(parser)
    parser.add_argument("--name", default=None)
    parser.add_argument("--cwd", default=None, help="default: the current directory")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--env-stdin", action="store_true",
                        help="read more env as a JSON object on stdin (off the command line)")
    parser.add_argument("--secret", action="append", default=[], metavar="NAME[=ENVVAR]",
                        help="export a pushed secret (gpuroom-remote secret push) at launch")
    parser.add_argument("--gpus", type=int, default=None,
                        help="GPUs for the job (default 1 on a GPU box; 0 hides all GPUs)")
    parser.add_argument("--retries", type=int, default=0)
    parser.add_argument("--vram-mib", type=int, default=None,
                        help="VRAM the job needs per GPU; the doctor warns when it cannot fit")
    parser.add_argument("--retry-on-exit", action="store_true",
                        help="also retry non-zero exit codes (default: signals/vanish only)")
    parser.add_argument("--after", default=None, metavar="JOB[,JOB]",
                        help="start only after these jobs succeeded; one failing fails this")
    parser.add_argument("--priority", type=int, default=0,
                        help="higher runs first among the queued jobs (default 0)")
    parser.add_argument("--output", action="append", default=[], metavar="GLOB")
    parser.add_argument("--ckpt", action="append", default=[], metavar="PATH|GLOB",
                        help="the program's own checkpoints, relative to the cwd (a file or "
                             "a directory each); default: found under the cwd by name")
    parser.add_argument("--durable-dir", default=None)
    parser.add_argument("--spot", default=None, choices=preempt.CLOUDS,
                        help="the box is a spot box of this cloud (hosts.toml spot): the "
                             "runner watches for its preemption notice")
    parser.add_argument("--stop-only", action="append", default=[], metavar="PATH",
                        help="a mount that survives a stop but not a destroy: say so once")
    parser.add_argument("--survives", action="append", default=[], metavar="PATH",
                        help="a mount that survives a stop (the profile's): warn when the "
                             "checkpoints go elsewhere")
    parser.add_argument("--node-local", action="append", default=[], metavar="PATH",
                        help="a mount a stop wipes (the profile's, e.g. Slurm's $TMPDIR): "
                             "warn when a Slurm job's checkpoints go there (SLURM5)")
    parser.add_argument("--front", action="store_true")
    parser.add_argument("--no-start", action="store_true", help="do not start a runner")
    parser.add_argument("--idle-exit", type=float, default=None,
                        help="idle seconds before a runner started here exits")
    parser.add_argument("--fix-crlf", action="store_true",
                        help="convert script arguments with CRLF line ends (U26) to LF")
    _slurm_options(parser)
    parser.add_argument("--array", default=None,
                        help="Slurm job array, e.g. 0-9%%2 (tasks 0..9, two at a time)")
    args = parser.parse_args(argv[:cut])
    if not cmd:
        sys.stderr.write("gpuroom queue add: empty command\n")
        return 2
    root, queue = root_dir(args.root), check_queue_name(args.queue)
    cwd = os.path.abspath(os.path.expanduser(args.cwd)) if args.cwd else os.getcwd()
    refused = _add_refusal(args, cmd, cwd)
    if refused is not None:
        _emit({"ok": False, "recorded": False, "queue": queue, **refused})
        return 2
    env = _job_env(args)
    slurm = args.backend == queue_slurm.BACKEND or (
        args.backend is None and queue_slurm.is_default(root, queue))
    # Slurm's batch script is a shell that expands it ($TMPDIR); the local runner is not.
    bad_dir = None if slurm else ckpt_dir_refusal(env)
    if bad_dir is not None:
        _emit({"ok": False, "recorded": False, "queue": queue, **bad_dir})
        return 2
    try:
        if slurm and args.secret:
            raise secrets.SecretError("--secret is for the local queue: a Slurm job runs on a "
                                      "compute node that cannot read the login node's disk")
        job_secrets = secrets.job_secrets(args.secret, args.root)
    except secrets.SecretError as exc:
        _emit({"ok": False, "recorded": False, "queue": queue, "error": str(exc),
               **({"fix": exc.fix} if exc.fix else {})})
        return 1
    if slurm:
        if args.after or args.priority:
            # Slurm orders and chains its own jobs; a box-queue field it would ignore is
            # refused rather than dropped without a word.
            _emit({"ok": False, "recorded": False, "queue": queue,
                   "error": "--after and --priority order the box's own queue; Slurm does "
                            "not read them",
                   "fix": "leave them out on a Slurm host (Slurm orders its queue itself)"})
            return 1
        try:
            doc = queue_slurm.add(root, queue, argv=cmd, cwd=cwd, env=env,
                                  name=args.name, gpus=args.gpus, durable_dir=args.durable_dir,
                                  time_limit=args.time, signal_lead_s=args.signal_lead,
                                  cpus_per_task=args.cpus_per_task, partition=args.partition,
                                  array=args.array)
        except queue_slurm.SlurmError as exc:
            return queue_slurm.emit_error(exc)
        # The batch script exports GPUROOM_CKPT_DIR, then the job's --env (which may set it).
        ckpt_dir = env.get("GPUROOM_CKPT_DIR") or ckpt_dir_of(
            root, queue, str(doc.get("job")), args.durable_dir, {})
        warning = survive.node_local_warning(ckpt_dir, args.node_local, args.survives)
        if warning and doc.get("ok"):
            doc["warning"] = warning
        _emit(doc)
        return 0 if doc.get("ok") else 1
    try:
        after = _known_jobs(root, queue, args.after)
    except ValueError as exc:
        _emit({"ok": False, "recorded": False, "queue": queue, "error": str(exc),
               "fix": f"gpuroom queue ls {HOST_IN_FIX} lists the jobs"})
        return 1
    fields = dict(name=args.name, argv=cmd, cwd=cwd, env=env, gpus=args.gpus,
                  retries=args.retries, retry_on_exit=args.retry_on_exit, outputs=args.output,
                  durable_dir=args.durable_dir, front=args.front, vram_mib=args.vram_mib,
                  after=after, priority=args.priority, secrets=job_secrets)
    if args.ckpt:
        fields["ckpts"] = list(args.ckpt)
    if args.spot and fold(read_events(queue_dir(root, queue))[0], queue)["config"].get(
            "spot_cloud") != args.spot:
        _append_request(root, queue, "configured", spot_cloud=args.spot)
    doc = add_job(root, queue, fields, start=not args.no_start, idle_exit=args.idle_exit)
    if doc.get("recorded"):
        config = fold(read_events(queue_dir(root, queue))[0], queue)["config"]
        ckpt_dir = user_ckpt_dir(env, cwd) or ckpt_dir_of(
            root, queue, str(doc["job"]), args.durable_dir, config)
        places = survive.ckpt_places(cwd, args.ckpt, ckpt_dir)
        doc["checkpoints"] = survive.places_line(places)
        # Undeclared, the cwd is only searched: its mount is the job's choice, not a claim
        # that checkpoints go there, so only $GPUROOM_CKPT_DIR (or --ckpt) is judged.
        judged = places if args.ckpt else places[1:]
        warnings = [w for w in (survive.ckpt_warning(path, args.survives, label)
                                for label, path in judged) if w]
        if warnings:
            doc["warning"] = "; ".join(warnings)
        notes = [n for n in (survive.destroy_note(path, args.stop_only, label)
                             for label, path in judged) if n]
        if notes:
            doc["info"] = "; ".join(notes)
    _emit(doc)
    return 0 if doc["ok"] else 1


def _known_jobs(root: str, queue: str, spec: Optional[str]) -> List[str]:
    """The ``--after`` ids, each a job of this queue (ValueError names the one that is not)."""
    if not spec:
        return []
    ids = [part.strip() for part in spec.split(",") if part.strip()]
    jobs = fold(read_events(queue_dir(root, queue))[0], queue)["jobs"]
    for job in ids:
        if job not in jobs:
            raise ValueError(f"--after {job}: no such job in queue {queue}")
    return ids


def _not_recorded(queue: str, exc: OSError) -> Dict[str, Any]:
    why = exc.describe() if isinstance(exc, WriteFailed) else (
        f"{type(exc).__name__}: {exc}; nothing was recorded")
    return {"ok": False, "recorded": False, "queue": queue, "error": why,
            "fix": "free space on the box's filesystem (df -h; df -i), then add the job again"
            if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "see the error, then add again"}


def add_job(root: str, queue: str, fields: Dict[str, Any], *, start: bool = True,
            idle_exit: Optional[float] = None) -> Dict[str, Any]:
    """Record a job, and answer ok only when a live runner will see it (issue 18).

    Either the job is recorded and ok (a runner holds the lock while the event is written,
    or one was started after it), or it is not recorded and the answer says why and the fix.
    The one answer in between, recorded but no runner could start, says so (``recorded``) so
    that nobody adds it twice.
    """
    qdir = queue_dir(root, queue)
    runner: Dict[str, Any] = {}
    try:
        if start:
            # A runner first: starting one needs a file (runner.env.json), which a full disk
            # or inode table refuses before anything of the job is written.
            runner = start_runner(root, queue, idle_exit)
            if not runner.get("running"):
                return {"ok": False, "recorded": False, "queue": queue, "runner": runner,
                        "error": "no queue runner could be started, so the job was not added",
                        "fix": f"read {os.path.join(qdir, 'runner.log')} on the box"}
        writer = EventWriter(qdir)
    except OSError as exc:
        return _not_recorded(queue, exc)
    try:
        writer.lock()
        try:
            ev = writer.append_locked("added", {**fields, "job": writer.next_job_id_locked()})
            # Under the events lock a runner cannot decide to leave (Runner.try_exit takes
            # it too): one that holds its lock now will read this event.
            seen = runner_alive(qdir)
        finally:
            writer.unlock()
    except OSError as exc:
        return _not_recorded(queue, exc)
    finally:
        writer.close()
    doc: Dict[str, Any] = {"ok": True, "recorded": True, "queue": queue, "job": ev["job"],
                           "queue_id": read_queue_id(qdir), "seq": ev["seq"]}
    if start and not seen:
        try:
            runner = start_runner(root, queue, idle_exit)
        except OSError as exc:
            runner = {"running": False, "error": f"{type(exc).__name__}: {exc}"}
        if not runner.get("running"):
            doc.update(ok=False, error=f"job {ev['job']} is recorded but no runner is running "
                       "to start it (do not add it again)",
                       fix=f"start its runner: gpuroom queue start {HOST_IN_FIX}; its log is "
                       f"{os.path.join(qdir, 'runner.log')} on the box")
    if start:
        doc["runner"] = runner
    return doc


def _add_refusal(args: argparse.Namespace, cmd: List[str], cwd: str) -> Optional[Dict[str, str]]:
    """Issue 19: a CRLF script (U26) and, off Slurm, GPUs asked of a GPU-less box (U31)."""
    crlf = addcheck.crlf_scripts(cmd, cwd)
    if crlf and not args.fix_crlf:
        return addcheck.crlf_refusal(crlf)
    for path in crlf:
        addcheck.fix_crlf(path)
    if args.backend == queue_slurm.BACKEND or (
            args.backend is None and queue_slurm.is_default(root_dir(args.root), args.queue)):
        return None  # the GPUs are the compute node's, not the login node's
    return addcheck.gpu_refusal(args.gpus)


def _slurm_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", choices=["local", queue_slurm.BACKEND], default=None,
                        help="slurm: submit with sbatch (default: the queue's configured one)")
    parser.add_argument("--time", default=None, help="Slurm --time (walltime)")
    parser.add_argument("--signal-lead", type=int, default=None,
                        help="seconds before the wall for the warning signal (0: none)")
    parser.add_argument("--cpus-per-task", type=int, default=None)
    parser.add_argument("--partition", default=None)


def _cmd_config(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuroom-remote queue config")
    _common(parser)
    parser.add_argument("--slots", type=int, default=None, help="jobs at once (1 = serial)")
    parser.add_argument("--durable-dir", default=None)
    parser.add_argument("--idle-exit", type=float, default=None)
    parser.add_argument("--kill-grace", type=float, default=None)
    parser.add_argument("--spot", default=None, choices=preempt.CLOUDS,
                        help="a spot box of this cloud: the runner watches for its notice")
    parser.add_argument("--metadata-url", default=None,
                        help="the cloud's metadata endpoint (default: the cloud's own)")
    _slurm_options(parser)
    parser.add_argument("--slurm-conf", default=None,
                        help="SLURM_CONF for every Slurm command of this queue")
    args = parser.parse_args(argv)
    root, queue = root_dir(args.root), check_queue_name(args.queue)
    slurm = {"backend": args.backend, "slurm_conf": args.slurm_conf,
             "partition": args.partition, "time": args.time,
             "signal_lead_s": args.signal_lead, "cpus_per_task": args.cpus_per_task}
    if any(v is not None for v in slurm.values()):
        queue_slurm.configure(root, queue, **slurm)
    ev = _append_request(root, queue, "configured", slots=args.slots,
                         durable_dir=args.durable_dir, idle_exit_s=args.idle_exit,
                         kill_grace_s=args.kill_grace, spot_cloud=args.spot,
                         metadata_url=args.metadata_url)
    _emit({"ok": True, "queue": queue, "seq": ev["seq"]})
    return 0


def _cmd_start(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuroom-remote queue start")
    _common(parser)
    parser.add_argument("--idle-exit", type=float, default=None)
    args = parser.parse_args(argv)
    root, queue = root_dir(args.root), check_queue_name(args.queue)
    doc = start_runner(root, queue, args.idle_exit)
    doc.update({"ok": bool(doc.get("running")), "queue": queue})
    _emit(doc)
    return 0 if doc["ok"] else 1


def _cmd_runner(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuroom-remote queue runner")
    _common(parser)
    parser.add_argument("--idle-exit", type=float, default=None)
    parser.add_argument("--env-file", default=None)
    parser.add_argument("--log-file", default=None)
    args = parser.parse_args(argv)
    root, queue = root_dir(args.root), check_queue_name(args.queue)
    return runner_main(root, queue, idle_exit_s=args.idle_exit, env_file=args.env_file,
                       log_file=args.log_file)


def _cmd_ls(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuroom-remote queue ls")
    _common(parser)
    parser.add_argument("--json", action="store_true", help="(the output is always JSON)")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--units", action="store_true",
                        help="each job's checkpoint units, declared or discovered (the gate)")
    args = parser.parse_args(argv)
    root, queue = root_dir(args.root), check_queue_name(args.queue)
    view = queue_view(root, queue, args.limit)
    if args.units:
        for job in view["jobs"]:
            try:
                job["ckpt_units"] = units_of(job)
            except OSError as exc:
                job["probe_error"] = f"checkpoint units: {exc}"
    _emit(view)
    return 0


def _request_and_wait(root: str, queue: str, ev: str, job: str, *, timeout: float,
                      ok_events: List[str], **fields: Any) -> int:
    qdir = queue_dir(root, queue)
    if not os.path.isfile(os.path.join(qdir, "events.jsonl")):
        _emit({"ok": False, "queue": queue, "job": job, "error": f"no queue {queue!r}"})
        return 1
    req = _append_request(root, queue, ev, job=job, **fields)
    # A request needs a runner to answer it; a job may still run under a dead runner, and
    # the new runner adopts it before answering (so a kill still reaches it).
    runner = start_runner(root, queue)
    answer = _wait_answer(root, queue, req["seq"], timeout)
    if answer is None:
        _emit({"ok": False, "queue": queue, "job": job, "req": req["seq"], "runner": runner,
               "error": f"no answer from the runner within {timeout:.0f}s (request stays pending)"})
        return 1
    ok = answer["ev"] in ok_events
    doc = {"ok": ok, "queue": queue, "job": job, "req": req["seq"], "result": answer["ev"],
           "event": answer}
    if answer["ev"] == "killed" and answer.get("attempt") is not None:
        _report_survivors(doc, qdir, queue, job, answer)
        ok = bool(doc["ok"])
    _emit(doc)
    return 0 if ok or (answer["ev"] == "rejected" and ev == "kill_requested") else 1


def _report_survivors(doc: Dict[str, Any], qdir: str, queue: str, job: str,
                      answer: Dict[str, Any]) -> None:
    """A kill that left processes of the attempt alive (they ignored SIGKILL's reach: a
    daemon that hid its mark, one stuck in the kernel) is not a clean kill: say which."""
    state = fold(read_events(qdir)[0], queue)
    attempts = (state["jobs"].get(job) or {}).get("attempts") or []
    mark = next((a.get("mark") for a in attempts
                 if a.get("attempt") == answer.get("attempt")), None)
    left = jobmark.survivors(mark if isinstance(mark, str) else None)
    if not left:
        return
    doc["survivors"] = left
    doc["ok"] = False
    named = ", ".join(f"pid {p['pid']} ({p['command']})" for p in left[:8])
    doc["error"] = (f"{job} was killed ({answer.get('sent') or 'signalled'}) but "
                    f"{len(left)} process(es) it started are still alive: {named}")
    doc["fix"] = "on the box: kill -9 " + " ".join(str(p["pid"]) for p in left)


def _cmd_kill(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuroom-remote queue kill")
    _common(parser)
    parser.add_argument("job")
    parser.add_argument("--grace", type=float, default=None,
                        help="seconds between SIGTERM and SIGKILL (default 30 or the config)")
    parser.add_argument("--wait", type=float, default=None,
                        help="how long to wait for the runner's record (default grace + 20)")
    args = parser.parse_args(argv)
    root, queue = root_dir(args.root), check_queue_name(args.queue)
    if queue_slurm.find_job(root, queue, args.job) is not None:
        doc = queue_slurm.kill(root, queue, args.job,
                               queue_slurm.KILL_WAIT_S if args.wait is None else args.wait)
        _emit(doc)
        return 0 if doc.get("ok") else 1
    wait = args.wait if args.wait is not None else (args.grace or 30.0) + 20.0
    return _request_and_wait(root, queue, "kill_requested", args.job, timeout=wait,
                             ok_events=["killed"], grace=args.grace)


def _simple_request(kind: str, ok_events: List[str]) -> Any:
    def run(argv: List[str]) -> int:
        parser = argparse.ArgumentParser(prog=f"gpuroom-remote queue {kind}")
        _common(parser)
        parser.add_argument("job")
        if kind == "move":
            parser.add_argument("position", type=int, help="0 = next to run")
        parser.add_argument("--wait", type=float, default=REQUEST_WAIT_S)
        args = parser.parse_args(argv)
        root, queue = root_dir(args.root), check_queue_name(args.queue)
        if queue_slurm.find_job(root, queue, args.job) is not None:
            return _slurm_request(kind, root, queue, args.job)
        fields = {"position": args.position} if kind == "move" else {}
        ev = {"relaunch": "relaunch_requested", "remove": "remove_requested",
              "move": "reorder_requested"}[kind]
        return _request_and_wait(root, queue, ev, args.job, timeout=args.wait,
                                 ok_events=ok_events, **fields)

    return run


def _slurm_request(kind: str, root: str, queue: str, job: str) -> int:
    if kind == "relaunch":
        doc = queue_slurm.relaunch(root, queue, job)
    elif kind == "remove":
        found = queue_slurm.find_job(root, queue, job) or {}
        if found.get("state") in LIVE_STATES:
            doc = {"ok": False, "queue": queue, "job": job, "result": "rejected",
                   "error": f"job is {found.get('state')}; kill it first"}
        else:
            _append_request(root, queue, "slurm_removed", job=job)
            doc = {"ok": True, "queue": queue, "job": job, "result": "removed"}
    else:
        doc = {"ok": False, "queue": queue, "job": job, "result": "rejected",
               "error": "Slurm orders its own queue (priority, fairshare): move does not apply"}
    _emit(doc)
    return 0 if doc.get("ok") else 1


def _pause(paused: bool) -> Any:
    def run(argv: List[str]) -> int:
        verb = "pause" if paused else "resume"
        parser = argparse.ArgumentParser(prog=f"gpuroom-remote queue {verb}")
        _common(parser)
        args = parser.parse_args(argv)
        root, queue = root_dir(args.root), check_queue_name(args.queue)
        # A setting the runner reads every tick: running jobs go on, no new one starts.
        ev = _append_request(root, queue, "configured", paused=paused)
        doc: Dict[str, Any] = {"ok": True, "queue": queue, "seq": ev["seq"], "paused": paused}
        if not paused:
            state = fold(read_events(queue_dir(root, queue))[0], queue)
            if state["order"]:
                doc["runner"] = start_runner(root, queue)  # queued jobs need one to start
        _emit(doc)
        return 0

    return run


def _cmd_show(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuroom-remote queue show")
    _common(parser)
    parser.add_argument("--with-env", action="store_true",
                        help="env values too: for the jump host's `queue move`, which re-adds "
                             "the job elsewhere (never printed there)")
    parser.add_argument("job")
    args = parser.parse_args(argv)
    root, queue = root_dir(args.root), check_queue_name(args.queue)
    view = queue_view(root, queue)
    found = [j for j in view["jobs"] if j["id"] == args.job]
    if not found:
        _emit({"ok": False, "queue": queue, "job": args.job,
               "error": f"no job {args.job} in queue {queue}",
               "fix": f"gpuroom queue ls {HOST_IN_FIX} lists the jobs"})
        return 1
    job = found[0]
    job["ckpt_units"] = units_of(job)
    job["checkpoint"] = job_checkpoint(job, job["ckpt_units"])
    if args.with_env:  # the values the jump host sent with queue add, back over the link
        events, _ = read_events(queue_dir(root, queue))
        raw = fold(events, queue)["jobs"].get(args.job) or {}
        job["env"] = dict(raw.get("env") or {})
    view["jobs"] = [job]
    view["ok"] = True
    _emit(view)
    return 0


def _cmd_edit(argv: List[str]) -> int:
    """A copy of a job with a changed argv, env or GPUs, added as a new job; the old one is
    left as it is (its history stays), so a queued old one is removed with ``remove``."""
    # The job id is always the first word, taken literally: an id like "-h" is not an option.
    job_id, argv = (argv[0], argv[1:]) if argv else ("", [])
    cut = argv.index("--") if "--" in argv else len(argv)
    cmd = argv[cut + 1:]
    parser = argparse.ArgumentParser(prog="gpuroom-remote queue edit")
    _common(parser)
    parser.add_argument("--name", default=None)
    parser.add_argument("--gpus", type=int, default=None)
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--env-stdin", action="store_true",
                        help="read more env as a JSON object on stdin (off the command line)")
    parser.add_argument("--unset-env", action="append", default=[], metavar="KEY")
    parser.add_argument("--no-start", action="store_true")
    args = parser.parse_args(argv[:cut])
    if not job_id:
        parser.error("the job id is missing")
    root, queue = root_dir(args.root), check_queue_name(args.queue)
    old = fold(read_events(queue_dir(root, queue))[0], queue)["jobs"].get(job_id)
    if old is None:
        _emit({"ok": False, "queue": queue, "job": job_id,
               "error": f"no job {job_id} in queue {queue}",
               "fix": f"gpuroom queue ls {HOST_IN_FIX} lists the jobs"})
        return 1
    env = {k: v for k, v in old["env"].items() if k not in args.unset_env}
    env.update(_job_env(args))
    fields = {k: old[k] for k in ("argv", "cwd", "gpus", "vram_mib", "retries", "retry_on_exit",
                                  "outputs", "durable_dir", "after", "priority",
                                  "secrets")}
    fields.update(name=args.name or (old["name"] if old["name"] != old["id"] else None),
                  env=env, edited_from=old["id"])
    if cmd:
        fields["argv"] = cmd
    if args.gpus is not None:
        fields["gpus"] = args.gpus
    doc = add_job(root, queue, fields, start=not args.no_start)
    doc["edited_from"] = old["id"]
    _emit(doc)
    return 0 if doc["ok"] else 1


def _cmd_logs(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuroom-remote queue logs")
    _common(parser)
    parser.add_argument("job")
    parser.add_argument("--offset", type=int, default=0,
                        help="byte offset; negative counts from the end")
    parser.add_argument("--max-bytes", type=int, default=1 << 20)
    parser.add_argument("--lines", type=int, default=None,
                        help="the last N lines (at most --max-bytes), as --json")
    parser.add_argument("--end", type=int, default=None,
                        help="the --max-bytes before this offset, from a line start, as --json")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object: offset, next_offset, inode, size, data_b64")
    args = parser.parse_args(argv)
    root, queue = root_dir(args.root), check_queue_name(args.queue)
    if not re.match(r"^j\d+(_\d+)?$", args.job):  # j5_3: task 3 of array job j5
        sys.stderr.write(f"gpuroom queue logs: bad job id {args.job!r}\n")
        return 2
    path = os.path.join(queue_dir(root, queue), "logs", f"{args.job}.log")
    if not os.path.exists(path):
        sys.stderr.write(f"gpuroom queue logs: no log for {args.job} in queue {queue}\n")
        return 1
    if args.json or args.lines is not None or args.end is not None:
        # The same reader as the probe's log chunks: one shape for the jump host to read.
        cursor: Optional[Dict[str, Any]] = {"offset": args.offset}
        if args.lines is not None or args.end is not None:
            cursor = {"tail": args.max_bytes, "end": args.end, "lines": args.lines}
        try:
            _emit(read_log_chunk(path, cursor, max(0, args.max_bytes)))
        except OSError as exc:
            sys.stderr.write(f"gpuroom queue logs: {exc}\n")
            return 1
        return 0
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            start = args.offset if args.offset >= 0 else max(0, size + args.offset)
            f.seek(start)
            data = f.read(max(0, args.max_bytes))
    except FileNotFoundError:
        sys.stderr.write(f"gpuroom queue logs: no log for {args.job} in queue {queue}\n")
        return 1
    except OSError as exc:
        sys.stderr.write(f"gpuroom queue logs: {exc}\n")
        return 1
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return 0


def _cmd_install_reboot_hook(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuroom-remote queue install-reboot-hook")
    _common(parser)
    args = parser.parse_args(argv)
    root, queue = root_dir(args.root), check_queue_name(args.queue)
    crontab = shutil.which("crontab")
    if not crontab:
        _emit({"ok": False, "queue": queue,
               "error": "crontab is not installed on this box; install cron or start the "
                        "queue by hand after a reboot (queue start)"})
        return 2
    current = subprocess.run([crontab, "-l"], check=False, stdin=subprocess.DEVNULL,
                             capture_output=True, timeout=10)
    # "no crontab for USER" is exit 1 with nothing to keep.
    lines = current.stdout.decode("utf-8", "replace").splitlines() if current.returncode == 0 \
        else []
    mark = f"{CRON_MARK}{root}:{queue}"
    # cron hands the line to /bin/sh: every word is quoted on its own.
    words = [*self_argv(), "queue", "start", "--root", root, "--queue", queue]
    command = " ".join(shlex.quote(w) for w in words)
    entry = f"@reboot {command} >/dev/null 2>&1 {mark}"
    kept = [ln for ln in lines if not ln.endswith(mark)]
    changed = [*kept, entry] != lines
    if changed:
        text = "\n".join([*kept, entry]) + "\n"
        proc = subprocess.run([crontab, "-"], check=False, input=text.encode("utf-8"),
                              capture_output=True, timeout=10)
        if proc.returncode != 0:
            why = proc.stderr.decode("utf-8", "replace").strip()
            _emit({"ok": False, "queue": queue, "error": f"crontab - failed: {why}"})
            return 1
    qdir = queue_dir(root, queue)
    os.makedirs(qdir, exist_ok=True)
    with open(os.path.join(qdir, REBOOT_HOOK_MARK), "w") as f:
        f.write(entry + "\n")
    _emit({"ok": True, "queue": queue, "changed": changed, "line": entry})
    return 0


COMMANDS = {
    "add": _cmd_add,
    "config": _cmd_config,
    "start": _cmd_start,
    "runner": _cmd_runner,
    "ls": _cmd_ls,
    "kill": _cmd_kill,
    "relaunch": _simple_request("relaunch", ["requeued"]),
    "remove": _simple_request("remove", ["removed"]),
    "move": _simple_request("move", ["reordered"]),
    "pause": _pause(True),
    "resume": _pause(False),
    "show": _cmd_show,
    "edit": _cmd_edit,
    "logs": _cmd_logs,
    "install-reboot-hook": _cmd_install_reboot_hook,
    "_exec": exec_main,
}


def main(argv: List[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        public = ",".join(c for c in COMMANDS if not c.startswith("_"))
        sys.stdout.write("usage: gpuroom-remote queue {" + public + "} ...\n")
        return 0 if argv else 2
    command = COMMANDS.get(argv[0])
    if command is None:
        sys.stderr.write(f"gpuroom queue: unknown subcommand {argv[0]!r}\n")
        return 2
    if argv[0] in READ_VERBS:
        selfexit.exit_after(READ_VERB_DEADLINE_S)
    try:
        return int(command(argv[1:]) or 0)
    except ValueError as exc:
        sys.stderr.write(f"gpuroom queue {argv[0]}: {exc}\n")
        return 2
    except OSError as exc:
        # A request or a setting that could not be written (a full disk): said, not a
        # traceback; WriteFailed means the file was cut back, so nothing half-written stays.
        why = exc.describe() if isinstance(exc, WriteFailed) else f"{type(exc).__name__}: {exc}"
        _emit({"ok": False, "recorded": False, "error": why,
               "fix": "free space on the box's filesystem (df -h; df -i), then try again"
               if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "see the error"})
        return 1
