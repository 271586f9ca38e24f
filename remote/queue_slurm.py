"""The queue's Slurm backend: on a login node ``sbatch`` is the runner (issue 9).

One queue model: a Slurm job lives in the same ``events.jsonl`` with the same ``jN`` ids and
log path (``logs/jN.log``) as a box job, and ``queue ls``, the probe section and the room show
the same record with extra fields (slurm_id, slurm_state, reason, node, elapsed_s,
time_limit_s, time_left_s, end_time, restarts; expected_start and nodes from squeue's %S
and %D; an array's spec and its tasks). What differs is who runs it:

- ``add`` writes ``slurm/jN.sbatch`` once and submits it with ``sbatch --parsable``;
  ``relaunch`` submits that identical file again (a new attempt, same checkpoint dir);
- Slurm owns the job's lifecycle, so there is no runner process: state is read from
  ``squeue`` while the job is in the queue and, after it leaves, from ``sacct`` (accounting),
  else ``sacct -c`` (the jobcomp file), else ``scontrol show job``; the final verdict is then
  appended as ``slurm_final`` so it survives Slurm forgetting the job (MinJobAge);
- ``kill`` is ``scancel``.

Its events (``slurm_added`` and not ``added``, so a box runner never launches a Slurm job
locally): ``slurm_configured``, ``slurm_added``, ``slurm_submitted``, ``slurm_submit_failed``,
``slurm_final``, ``slurm_removed``.

The batch script runs the job in the background and waits, because bash runs a trap only
between commands: the walltime warning (``--signal=B:USR1@LEAD``, sent to the batch shell
only) is forwarded to the job as SIGUSR1, which gpuroom.remote.checkpoint turns into a flag
checked at a step boundary (SLURM1). A job that then exits 0 is requeued with
``scontrol requeue`` (same job id, ``--open-mode=append`` keeps one log) and resumes from its
checkpoint; ``SRUN_CPUS_PER_TASK`` gives every nested ``srun`` the allocation's CPUs (SLURM3).
Each run of the script leaves ``run/jN.s<slurm id>.r<restart>.json`` (exit code, warned,
requeued), so exit codes are known even where Slurm keeps no accounting.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from .queue_events import (
    ARRAY_TASK_ID_RE,
    LIVE_STATES,
    EventReader,
    EventWriter,
    _last_seq_and_newline,
    _new_job,
    queue_dir,
)
from .queue_runner import import_path
from .slurmparse import parse_sacct, parse_slurm_duration, split_job_id

BACKEND = "slurm"
SLURM_EVENTS = ("slurm_configured", "slurm_added", "slurm_submitted", "slurm_submit_failed",
                "slurm_final", "slurm_removed")
DEFAULT_SIGNAL_LEAD_S = 360  # --signal=B:...@360: the warning lead SLURM2 budgets for
DEFAULT_MAX_REQUEUES = 20  # a job that never finishes must not requeue forever
CMD_TIMEOUT_S = 20.0
KILL_WAIT_S = 60.0  # scancel -> gone from squeue: KillWait (default 30 s) and some slack
RUN_RECORDS_MAX = 200
# %S: the start time; for a pending job the scheduler's expected start, what `squeue --start`
# shows (N/A until the backfill scheduler has one). %D: the job's node count.
SQUEUE_FORMAT = "%i|%T|%r|%N|%M|%l|%L|%S|%D"
SACCT_FIELDS = "JobID,State,ExitCode,Elapsed,NodeList,Timelimit,End"

# Slurm job states -> the queue's states.
PENDING_STATES = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD",
                  "SPECIAL_EXIT"}
RUNNING_STATES = {"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "SIGNALING",
                  "STAGE_OUT", "RESIZING", "STOPPED"}
FAILED_STATES = {"FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                 "DEADLINE"}
FINAL_SLURM_STATES = FAILED_STATES | {"COMPLETED", "CANCELLED"}
# What a final state means (SLURM2, SLURM4, SLURM5 in docs/GOTCHAS.md).
STATE_REASONS = {
    "TIMEOUT": "walltime reached (SIGTERM, then SIGKILL after KillWait)",
    "OUT_OF_MEMORY": "cgroup RAM OOM-kill: a job state, not a traceback (SLURM4)",
    "PREEMPTED": "preempted: requeue territory",
    "NODE_FAIL": "the node failed: requeue territory",
    "BOOT_FAIL": "the node failed to boot",
    "DEADLINE": "the job's deadline passed",
}

_TIME_RE = re.compile(r"^\d+([:-]\d+){0,3}$")
# sbatch --array: indices, ranges with a step, a list of them, then %N (N tasks at a time).
_ARRAY_RE = re.compile(r"^\d+(-\d+(:\d+)?)?(,\d+(-\d+(:\d+)?)?)*(%\d+)?$")
# An array task's gpuroom id: task 3 of array job j5 is j5_3 (its log is logs/j5_3.log).
_SAFE_DIRECTIVE = re.compile(r"^[^\s'\"\\#]+$")
_NAME_BAD = re.compile(r"[^A-Za-z0-9._-]")


class SlurmError(RuntimeError):
    pass


# ---------------------------------------------------------------- config and fold

def slurm_config(events: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The queue's Slurm settings: the last value given for each key wins."""
    config: Dict[str, Any] = {"backend": None, "slurm_conf": None, "partition": None,
                              "time": None, "signal_lead_s": DEFAULT_SIGNAL_LEAD_S,
                              "cpus_per_task": None}
    for ev in events:
        if ev.get("ev") == "slurm_configured":
            for key in config:
                if ev.get(key) is not None:
                    config[key] = ev[key]
    return config


def command_env(config: Dict[str, Any]) -> Dict[str, str]:
    """The environment every Slurm command (and so the batch job) gets.

    ``slurm_conf`` is for clusters (and the test cluster) whose clients need SLURM_CONF: a
    non-interactive SSH command does not reliably read the login shell's rc files.
    """
    env = dict(os.environ)
    if config.get("slurm_conf"):
        env["SLURM_CONF"] = str(config["slurm_conf"])
    return env


def fold_slurm(events: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Slurm jobs from the events, as the queue's job records (pure)."""
    jobs: Dict[str, Dict[str, Any]] = {}
    for ev in events:
        kind = ev.get("ev")
        if kind == "slurm_added":
            try:
                added = _new_job(ev)
            except (ValueError, TypeError, KeyError):
                continue  # a forged line (jobs run as the helper's user) names no job
            added.update({"backend": BACKEND, "position": None, "slurm_id": None,
                        "slurm_state": None, "node": None, "elapsed_s": None,
                        "time_limit_s": parse_slurm_duration(str(ev.get("time") or "")),
                        "time_left_s": None, "end_time": None, "restarts": 0,
                        "expected_start": None, "nodes": None,
                        "array": ev.get("array"), "tasks": [],
                        "signal_lead_s": ev.get("signal_lead_s"), "time": ev.get("time"),
                        "cpus_per_task": ev.get("cpus_per_task"), "script": ev.get("script"),
                        "ckpt_dir": ev.get("ckpt_dir"), "exit_code": None})
            jobs[added["id"]] = added
            continue
        job = jobs.get(str(ev.get("job")))
        if job is None:
            continue
        if kind == "slurm_submitted":
            job["slurm_id"] = ev.get("slurm_id")
            job["state"], job["reason"], job["slurm_state"] = "queued", None, "PENDING"
            job["exit_code"] = None
            job["attempts"].append({
                "attempt": ev.get("attempt"), "slurm_id": ev.get("slurm_id"),
                "submitted": ev.get("t"), "start": None, "end": None, "exit_code": None,
                "signal": None, "duration": None, "end_reason": None, "runs": [],
                "task": ev.get("task")})  # an array task relaunched alone: its index
        elif kind == "slurm_submit_failed":
            job["state"], job["reason"] = "failed", ev.get("why")
        elif kind == "slurm_final":
            attempt = _attempt_of(job, ev.get("slurm_id"))
            if attempt is None or attempt["end"] is not None:
                continue  # a second observer's record of the same end changes nothing
            attempt.update({"end": ev.get("end") or ev.get("t"),
                            "exit_code": ev.get("exit_code"), "signal": ev.get("signal"),
                            "duration": ev.get("elapsed_s"), "end_reason": ev.get("state")})
            if attempt["start"] is None and ev.get("elapsed_s") is not None:
                attempt["start"] = attempt["end"] - ev["elapsed_s"]
            _apply_final(job, ev.get("state"), ev.get("exit_code"), ev.get("reason"))
            job["node"] = ev.get("node") or job["node"]
            job["elapsed_s"] = ev.get("elapsed_s")
            if ev.get("tasks") is not None:
                job["tasks"] = ev["tasks"]
        elif kind == "slurm_removed":
            job["state"] = "removed"
    return jobs


def _attempt_of(job: Dict[str, Any], slurm_id: Any) -> Optional[Dict[str, Any]]:
    attempts: List[Dict[str, Any]] = job["attempts"]
    for a in attempts:
        if a.get("slurm_id") == slurm_id:
            return a
    return None


def _apply_final(job: Dict[str, Any], state: Any, exit_code: Any, reason: Any) -> None:
    state = str(state or "")
    job["slurm_state"], job["exit_code"] = state, exit_code
    job["time_left_s"], job["end_time"], job["expected_start"] = None, None, None
    if state == "CANCELLED":
        job["state"] = "killed"
    elif state == "COMPLETED" and not exit_code:
        job["state"] = "succeeded"
    else:
        job["state"] = "failed"
    job["reason"] = reason or STATE_REASONS.get(state)


def _run_records(qdir: str, job_id: str, slurm_id: str) -> List[Dict[str, Any]]:
    pattern = os.path.join(qdir, "run", f"{job_id}.s{slurm_id}.r*.json")
    records = []
    for path in sorted(glob.glob(pattern))[:RUN_RECORDS_MAX]:
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict):
            records.append(doc)
    records.sort(key=lambda r: int(r.get("restart") or 0))
    return records


# ---------------------------------------------------------------- Slurm commands

def _run(argv: List[str], env: Dict[str, str],
         timeout: float = CMD_TIMEOUT_S) -> Tuple[int, str, str]:
    exe = shutil.which(argv[0], path=env.get("PATH"))
    if exe is None:
        return 127, "", f"{argv[0]} not found on PATH (is this a Slurm login node?)"
    try:
        proc = subprocess.run([exe, *argv[1:]], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]} took over {timeout:.0f}s"
    return (proc.returncode, proc.stdout.decode("utf-8", "replace"),
            proc.stderr.decode("utf-8", "replace"))


def squeue_rows(ids: List[str], env: Dict[str, str]) -> Dict[str, Dict[str, Any]]:
    """Jobs still in Slurm's queue (pending, running, completing), by Slurm id."""
    if not ids:
        return {}
    # --array: every array task on its own row ("123_4"), pending ones too.
    rc, out, err = _run(["squeue", "--noheader", "--array", "--jobs=" + ",".join(ids),
                         "--format=" + SQUEUE_FORMAT], env)
    if rc != 0:
        if "Invalid job id" in err:
            return {}  # every id has left the controller's memory
        raise SlurmError(f"squeue failed (exit {rc}): {err.strip()[-300:]}")
    header = SQUEUE_FORMAT.replace("%", "")
    rows = parse_sacct(header + "\n" + out) if out.strip() else []
    return {str(r["i"]): r for r in rows if r.get("i")}


def _exit_pair(text: Optional[str]) -> Tuple[Optional[int], Optional[str]]:
    """Slurm's "code:signal" -> (exit code, signal name or None)."""
    if not text or ":" not in text:
        return None, None
    code, _, sig = text.partition(":")
    try:
        code_i, sig_i = int(code), int(sig)
    except ValueError:
        return None, None
    name = None
    if sig_i:
        try:
            name = signal.Signals(sig_i).name
        except ValueError:
            name = str(sig_i)
    return code_i, name


def _final_from_rows(rows: List[Dict[str, Any]], source: str) -> Dict[str, Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    for row in rows:
        if row.get("step"):
            continue  # .batch / .extern steps: the allocation's own row is the verdict
        state = (row.get("State") or "").split(" ")[0]
        if state not in FINAL_SLURM_STATES:
            continue  # jobcomp logs a requeue as PENDING; a later row has the end
        code, sig = _exit_pair(row.get("ExitCode"))
        out[str(row["job_id"])] = {
            "state": state, "exit_code": code, "signal": sig, "source": source,
            "elapsed_s": parse_slurm_duration(row.get("Elapsed") or ""),
            "node": row.get("NodeList") if row.get("NodeList") not in ("None assigned", "(null)")
            else None}
    return out


def _scontrol_final(slurm_id: str, env: Dict[str, str]) -> Optional[Dict[str, Any]]:
    rc, out, _ = _run(["scontrol", "show", "job", "--oneliner", slurm_id], env)
    if rc != 0:
        return None
    fields = dict(tok.split("=", 1) for tok in out.split() if "=" in tok)
    state = fields.get("JobState", "")
    if state not in FINAL_SLURM_STATES:
        return None
    code, sig = _exit_pair(fields.get("ExitCode"))
    node = fields.get("NodeList")
    return {"state": state, "exit_code": code, "signal": sig, "source": "scontrol",
            "elapsed_s": parse_slurm_duration(fields.get("RunTime", "")),
            "node": None if node in (None, "(null)") else node}


def final_states(ids: List[str], env: Dict[str, str]) -> Dict[str, Dict[str, Any]]:
    """How jobs that left the queue ended: sacct, else sacct -c, else scontrol show job."""
    found: Dict[str, Dict[str, Any]] = {}
    if not ids:
        return found
    base = ["sacct", "--parsable2", "--jobs=" + ",".join(ids), "--format=" + SACCT_FIELDS]
    rc, out, _ = _run([*base, "--allocations"], env)
    if rc == 0 and out.strip():
        found.update(_final_from_rows(parse_sacct(out), "sacct"))
    missing = [i for i in ids if i not in found]
    if missing:
        # Without slurmdbd: the jobcomp file (JobCompType=jobcomp/filetxt), one row per end.
        rc, out, _ = _run(["sacct", "--completion", "--parsable2",
                           "--jobs=" + ",".join(missing), "--format=" + SACCT_FIELDS], env)
        if rc == 0 and out.strip():
            found.update(_final_from_rows(parse_sacct(out), "jobcomp"))
    for slurm_id in [i for i in ids if i not in found]:
        doc = _scontrol_final(slurm_id, env)
        if doc is not None:
            found[slurm_id] = doc
    return found


# ---------------------------------------------------------------- the live view

def refresh(qdir: str, events: List[Dict[str, Any]],
            cache: Optional[Dict[str, Any]] = None) -> Tuple[List[Dict[str, Any]], List[str]]:
    """Slurm job records with Slurm's current word on each; records finals it learns."""
    jobs = fold_slurm(events)
    if not jobs:
        return [], []
    config = slurm_config(events)
    env = command_env(config)
    warnings: List[str] = []
    now = time.time()
    open_jobs = {str(j["slurm_id"]): j for j in jobs.values()
                 if j["slurm_id"] and j["state"] in LIVE_STATES}
    live: Dict[str, Dict[str, Any]] = {}
    ended: Dict[str, Dict[str, Any]] = {}
    arrays = {i for i, j in open_jobs.items() if j.get("array")}
    # An array's tasks relaunched alone live under their own array ids: ask for those too.
    ids = set(open_jobs) | {a for i in arrays for a in array_ids(open_jobs[i])}
    try:
        live = squeue_rows(sorted(ids), env)
        gone = [i for i in sorted(open_jobs) if i not in live and i not in arrays]
        ended = final_states(gone, env)
        for slurm_id in sorted(arrays):
            ended.update(_array_refresh(open_jobs[slurm_id], live, env, now))
    except SlurmError as exc:
        warnings.append(str(exc))
    finals = []
    for slurm_id, job in open_jobs.items():
        row = live.get(slurm_id)
        attempt = job["attempts"][-1] if job["attempts"] else None
        if slurm_id in arrays:
            if slurm_id in ended:
                finals.append((job, attempt, ended[slurm_id]))
        elif row is not None:
            _apply_live(job, attempt, row, now)
        elif slurm_id in ended:
            finals.append((job, attempt, ended[slurm_id]))
        elif not warnings:
            job["reason"] = "not in squeue, sacct or scontrol (yet)"
    for job in jobs.values():
        _attach_runs(qdir, job)
    if finals:
        writer = EventWriter(qdir)
        try:
            for job, attempt, doc in finals:
                runs = (attempt or {}).get("runs") or []
                code = doc.get("exit_code")
                if runs and runs[-1].get("exit_code") is not None and doc["state"] != "CANCELLED":
                    code = runs[-1]["exit_code"]  # the job's own code, as the script saw it
                extra = {"tasks": doc["tasks"]} if doc.get("tasks") is not None else {}
                ev = writer.append("slurm_final", job=job["id"], slurm_id=job["slurm_id"],
                                   state=doc["state"], exit_code=code, signal=doc.get("signal"),
                                   elapsed_s=doc.get("elapsed_s"), node=doc.get("node"),
                                   source=doc.get("source"), end=time.time(), **extra)
                events.append(ev)
        finally:
            writer.close()
        return refresh_records(qdir, events, jobs), warnings
    return list(jobs.values()), warnings


def refresh_records(qdir: str, events: List[Dict[str, Any]],
                    live_jobs: Dict[str, Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Re-fold after finals were recorded, keeping the live fields of jobs still open."""
    jobs = fold_slurm(events)
    for job_id, job in jobs.items():
        before = live_jobs.get(job_id)
        if before is not None and job["state"] in LIVE_STATES:
            jobs[job_id] = before
        _attach_runs(qdir, jobs[job_id])
    return list(jobs.values())


def _attach_runs(qdir: str, job: Dict[str, Any]) -> None:
    """Each attempt's script runs (one per requeue) and the current attempt's restarts."""
    for attempt in job["attempts"]:
        if attempt.get("slurm_id"):
            attempt["runs"] = _run_records(qdir, job["id"], str(attempt["slurm_id"]))
    if job["attempts"]:
        runs = job["attempts"][-1].get("runs") or []
        job["restarts"] = max([int(r.get("restart") or 0) for r in runs] or [0])


def _apply_live(job: Dict[str, Any], attempt: Optional[Dict[str, Any]], row: Dict[str, Any],
                now: float) -> None:
    state = str(row.get("T") or "")
    job["slurm_state"] = state
    reason = row.get("r")
    job["reason"] = None if reason in (None, "None") else reason
    job["node"] = row.get("N")
    nodes = row.get("D") or ""
    job["nodes"] = int(nodes) if nodes.isdigit() else None
    job["elapsed_s"] = parse_slurm_duration(row.get("M") or "")
    limit = parse_slurm_duration(row.get("l") or "")
    job["time_limit_s"] = limit if limit is not None else job["time_limit_s"]
    left = parse_slurm_duration(row.get("L") or "")
    if state in RUNNING_STATES:
        job["state"] = "running"
        job["time_left_s"] = left
        job["end_time"] = now + left if left is not None else None
        if attempt is not None and job["elapsed_s"] is not None:
            attempt["start"] = now - job["elapsed_s"]
    else:
        job["state"] = "queued"
        job["time_left_s"], job["end_time"] = None, None
    job["expected_start"] = (_squeue_time(row.get("S") or "")
                             if job["state"] == "queued" else None)


def _squeue_time(text: str) -> Optional[float]:
    """squeue's "2026-11-24T12:30:00" (the login node's local time) -> epoch; None for N/A,
    Unknown or anything else."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


# ---------------------------------------------------------------- job arrays

def _task(job: Dict[str, Any], task_slurm_id: str) -> Dict[str, Any]:
    index = task_slurm_id.rpartition("_")[2]
    task_id = f"{job['id']}_{index}"
    return {"id": task_id, "task": index, "slurm_id": task_slurm_id, "state": "queued",
            "slurm_state": None, "reason": None, "node": None, "nodes": None,
            "elapsed_s": None, "exit_code": None, "expected_start": None,
            "time_limit_s": job.get("time_limit_s"), "time_left_s": None, "end_time": None,
            "log": os.path.join("logs", f"{task_id}.log")}


def _array_tasks_scontrol(slurm_id: str, env: Dict[str, str]) -> Dict[str, Dict[str, str]]:
    """Every task the controller still remembers of array ``slurm_id`` (ended ones too),
    by "123_4", as scontrol's fields."""
    rc, out, _ = _run(["scontrol", "show", "job", "--oneliner", slurm_id], env)
    if rc != 0:
        return {}
    tasks = {}
    for line in out.splitlines():
        fields = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        index = fields.get("ArrayTaskId", "")
        if fields.get("ArrayJobId") == slurm_id and index.isdigit():
            tasks[f"{slurm_id}_{index}"] = fields
    return tasks


def array_ids(job: Dict[str, Any]) -> List[str]:
    """The Slurm array ids holding the job's current tasks, oldest first: the last whole-array
    submission and every task relaunched alone after it."""
    ids: List[str] = []
    for attempt in job["attempts"]:
        if not attempt.get("slurm_id"):
            continue
        if attempt.get("task") is None:
            ids = []
        ids.append(str(attempt["slurm_id"]))
    return ids


def _array_refresh(job: Dict[str, Any], live: Dict[str, Dict[str, Any]], env: Dict[str, str],
                   now: float) -> Dict[str, Dict[str, Any]]:
    """Fill an array job's ``tasks`` (live ones from squeue, ended ones from scontrol, a task
    relaunched alone from its own array) and its state; when no task is left in the queue,
    its final verdict by the job's current Slurm id."""
    slurm_id = str(job["slurm_id"])
    by_index: Dict[str, Dict[str, Any]] = {str(t.get("task")): t for t in job["tasks"]}
    rows: Dict[str, Dict[str, Any]] = {}
    for array_id in array_ids(job):
        prefix = array_id + "_"
        mine = {k: r for k, r in live.items() if k.startswith(prefix)
                and k[len(prefix):].isdigit()}
        rows.update(mine)
        known = _array_tasks_scontrol(array_id, env)
        for task_id in sorted(set(mine) | set(known)):
            by_index[task_id.rpartition("_")[2]] = _task_now(job, task_id, mine, known, now)
    tasks = [by_index[i] for i in sorted(by_index, key=lambda i: int(i) if i.isdigit() else -1)]
    _array_state(job, tasks)
    states = [t["state"] for t in tasks]
    if not tasks:
        # Gone from squeue and forgotten by the controller (MinJobAge): accounting or the
        # jobcomp file has the array's own end, without its tasks.
        return final_states([slurm_id], env)
    if rows or any(s in LIVE_STATES for s in states):
        return {}
    return {slurm_id: _array_final(tasks)}


def _task_now(job: Dict[str, Any], task_id: str, rows: Dict[str, Dict[str, Any]],
              known: Dict[str, Dict[str, str]], now: float) -> Dict[str, Any]:
    """One task as squeue (while queued or running) or scontrol (after) says."""
    task = _task(job, task_id)
    if task_id in rows:
        _apply_live(task, None, rows[task_id], now)
        return task
    fields = known[task_id]
    state = fields.get("JobState", "")
    code, sig = _exit_pair(fields.get("ExitCode"))
    if state in FINAL_SLURM_STATES:
        _apply_final(task, state, code, None)
    else:
        task["slurm_state"], task["state"] = state or None, "queued"
    node = fields.get("NodeList")
    task["node"] = None if node in (None, "(null)") else node
    task["elapsed_s"] = parse_slurm_duration(fields.get("RunTime", ""))
    task["signal"] = sig
    return task


def _array_state(job: Dict[str, Any], tasks: List[Dict[str, Any]]) -> None:
    """The array's row from its tasks: running while one runs, else queued while one waits."""
    job["tasks"] = tasks
    states = [t["state"] for t in tasks]
    if "running" in states:
        job["state"], job["slurm_state"] = "running", "RUNNING"
    elif "queued" in states or not tasks:
        job["state"], job["slurm_state"] = "queued", "PENDING"
    running = [t for t in tasks if t["state"] == "running"]
    job["node"] = ",".join(sorted({str(t["node"]) for t in running if t["node"]})) or None
    pending = [t for t in tasks if t["state"] == "queued"]
    job["reason"] = pending[0]["reason"] if pending and not running else None
    job["expected_start"] = min([t["expected_start"] for t in pending
                                 if t["expected_start"] is not None] or [None]) \
        if pending and not running else None


def _array_final(tasks: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One verdict for the whole array: COMPLETED when every task completed with exit 0,
    CANCELLED when one was cancelled, else the first failed task's state and code."""
    slurm_states = [t["slurm_state"] for t in tasks]
    bad = [t for t in tasks if t["slurm_state"] != "COMPLETED" or t["exit_code"]]
    if not bad:
        state, code = "COMPLETED", 0
    elif "CANCELLED" in slurm_states:
        state, code = "CANCELLED", None
    else:
        state, code = bad[0]["slurm_state"] or "FAILED", bad[0]["exit_code"]
    return {"state": state, "exit_code": code, "signal": None, "source": "scontrol",
            "elapsed_s": max([t["elapsed_s"] or 0 for t in tasks] or [0]),
            "node": None, "tasks": tasks}


def task_of(root: str, queue: str, job_id: str) -> Optional[Tuple[Dict[str, Any], str]]:
    """("j5_3") -> (array job j5's record, task "3"); None for anything else."""
    m = ARRAY_TASK_ID_RE.match(job_id)
    if m is None:
        return None
    job = find_job(root, queue, m.group(1))
    if job is None or not job.get("array"):
        return None
    return job, m.group(2)


# ---------------------------------------------------------------- the batch script

def _directive_value(what: str, value: str) -> str:
    if not _SAFE_DIRECTIVE.match(value):
        raise SlurmError(f"{what} {value!r} cannot go into an #SBATCH line (whitespace, quotes "
                         f"or '#'); choose another path")
    return value


def render_script(job_id: str, queue: str, *, argv: List[str], cwd: str, env: Dict[str, str],
                  log: str, runs_dir: str, ckpt_dir: str, pythonpath: str,
                  name: Optional[str], time_limit: Optional[str], signal_lead_s: int,
                  cpus_per_task: Optional[int], gpus: Optional[int],
                  partition: Optional[str], max_requeues: int = DEFAULT_MAX_REQUEUES,
                  array: Optional[str] = None) -> str:
    """The sbatch script of one job; every shell word is quoted on its own (shlex.quote)."""
    q = shlex.quote
    job_name = _NAME_BAD.sub("_", name or job_id)[:64] or job_id
    lines = ["#!/bin/bash", f"#SBATCH --job-name={job_name}",
             f"#SBATCH --output={_directive_value('log path', log)}",
             "#SBATCH --open-mode=append", "#SBATCH --requeue"]
    if signal_lead_s > 0:
        lines.append(f"#SBATCH --signal=B:USR1@{int(signal_lead_s)}")
    if time_limit:
        lines.append(f"#SBATCH --time={time_limit}")
    if cpus_per_task:
        lines.append(f"#SBATCH --cpus-per-task={int(cpus_per_task)}")
    if gpus:
        lines.append(f"#SBATCH --gres=gpu:{int(gpus)}")
    if partition:
        lines.append(f"#SBATCH --partition={_directive_value('partition', partition)}")
    if array:
        if not _ARRAY_RE.match(array):
            raise SlurmError(f"--array {array!r}: use Slurm's forms (0-9, 1,3,5, 0-15:4, "
                             f"with %N to run N at a time)")
        lines.append(f"#SBATCH --array={array}")
    lines += [
        f"# Written by gpuroom for queue {queue} job {job_id}; `queue relaunch` submits this",
        "# file again unchanged. The warning signal reaches only this shell: it is forwarded",
        "# to the job, which saves at a step boundary (SLURM1); a job that exits 0 after the",
        "# warning is requeued (same Slurm id) and resumes from its checkpoint.",
        "set -u",
        "export PYTHONUNBUFFERED=1",
        f"export GPUROOM_JOB_ID={q(job_id)}",
        f"export GPUROOM_CKPT_DIR={q(ckpt_dir)}",
        "# SLURM3: since 22.05 srun does not read SLURM_CPUS_PER_TASK; this reaches every srun.",
        'if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then',
        '  export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"',
        "fi",
    ]
    if array:
        lines += [  # each task its own ids: j5_3 and its log logs/j5_3.log (%a in --output)
            'if [ -n "${SLURM_ARRAY_TASK_ID:-}" ]; then',
            f'  export GPUROOM_JOB_ID={q(job_id)}"_$SLURM_ARRAY_TASK_ID"',
            "fi",
        ]
    for key, value in sorted(env.items()):
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise SlurmError(f"environment name {key!r} is not a shell variable name")
        lines.append(f"export {key}={q(value)}")
    # As on a box: gpuroom.remote.checkpoint imports first, the job's own PYTHONPATH after.
    lines.append(f'export PYTHONPATH={q(pythonpath)}"${{PYTHONPATH:+:$PYTHONPATH}}"')
    record = os.path.join(runs_dir, job_id)
    lines += [
        'restart="${SLURM_RESTART_COUNT:-0}"',
        "started=$(date +%s)",
        'echo "=== gpuroom ${GPUROOM_JOB_ID} slurm ${SLURM_JOB_ID} run ${restart} '
        '$(date +%Y-%m-%dT%H:%M:%S%z) node $(hostname) ==="',
        f"cd -- {q(cwd)} || exit 111",
        "warned=0",
        "child=",
        "forward() {",
        "  warned=1",
        '  echo "=== gpuroom: walltime warning (SIGUSR1): forwarded to the job ==="',
        '  if [ -n "$child" ]; then kill -USR1 "$child" 2>/dev/null; fi',
        "}",
        "trap forward USR1",
        # At the wall or on scancel Slurm signals every process; this shell stays to record.
        "trap 'if [ -n \"$child\" ]; then kill -TERM \"$child\" 2>/dev/null; fi' TERM",
        " ".join(q(a) for a in argv) + " &",
        "child=$!",
        "while :; do",
        '  wait "$child"; rc=$?',
        '  kill -0 "$child" 2>/dev/null || break  # wait was cut short by a trapped signal',
        "done",
        "requeue=0",
        f'if [ "$warned" = 1 ] && [ "$rc" = 0 ] && [ "$restart" -lt {int(max_requeues)} ]; then',
        "  requeue=1",
        "fi",
        f'rec={q(record)}".s${{SLURM_JOB_ID}}.r${{restart}}.json"',
        "printf '{\"slurm_id\":\"%s\",\"restart\":%s,\"start\":%s,\"end\":%s,"
        "\"exit_code\":%s,\"warned\":%s,\"requeue\":%s}\\n' \"$SLURM_JOB_ID\" \"$restart\" "
        "\"$started\" \"$(date +%s)\" \"$rc\" \"$warned\" \"$requeue\" > \"$rec.tmp\" "
        "&& mv -f \"$rec.tmp\" \"$rec\"",
        'if [ "$requeue" = 1 ]; then',
        '  echo "=== gpuroom: stopped at the warning, exit 0: scontrol requeue $SLURM_JOB_ID ==="',
        '  scontrol requeue "$SLURM_JOB_ID" && exit 0',
        '  echo "=== gpuroom: scontrol requeue failed: the job ends here ==="',
        "fi",
        'exit "$rc"',
    ]
    return "\n".join(lines) + "\n"


def _write_atomic(path: str, text: str, mode: int) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _submit(qdir: str, job: Dict[str, Any], env: Dict[str, str], writer: EventWriter,
            task: Optional[str] = None) -> Dict[str, Any]:
    """sbatch the job's script; ``task``: only that index of its array (the command line's
    --array overrides the script's)."""
    script = os.path.join(qdir, str(job["script"]))
    only = [f"--array={task}"] if task is not None else []
    rc, out, err = _run(["sbatch", "--parsable", *only, script], env)
    slurm_id = out.strip().split(";")[0] if rc == 0 else ""
    if rc != 0 or not slurm_id.isdigit():
        why = f"sbatch failed (exit {rc}): {(err or out).strip()[-300:]}"
        writer.append("slurm_submit_failed", job=job["id"], why=why)
        return {"ok": False, "job": job["id"], "error": why}
    attempt = len(job["attempts"]) + 1
    writer.append("slurm_submitted", job=job["id"], attempt=attempt, slurm_id=slurm_id,
                  **({"task": task} if task is not None else {}))
    return {"ok": True, "job": job["id"], "slurm_id": slurm_id, "attempt": attempt}


def _read(qdir: str) -> List[Dict[str, Any]]:
    reader = EventReader(qdir)
    reader.refresh()
    return reader.events


def add(root: str, queue: str, *, argv: List[str], cwd: str, env: Dict[str, str],
        name: Optional[str], gpus: Optional[int], durable_dir: Optional[str],
        time_limit: Optional[str], signal_lead_s: Optional[int],
        cpus_per_task: Optional[int], partition: Optional[str],
        array: Optional[str] = None) -> Dict[str, Any]:
    qdir = queue_dir(root, queue)
    if array is not None and not _ARRAY_RE.match(array):
        raise SlurmError(f"--array {array!r}: use Slurm's forms (0-9, 1,3,5, 0-15:4, with %N "
                         f"to run N at a time)")
    config = slurm_config(_read(qdir)) if os.path.exists(qdir) else slurm_config([])
    time_limit = time_limit or config.get("time")
    if time_limit and not _TIME_RE.match(time_limit):
        raise SlurmError(f"--time {time_limit!r}: use Slurm's forms (M, M:S, H:M:S, D-H:M:S)")
    lead = int(config["signal_lead_s"] if signal_lead_s is None else signal_lead_s)
    limit_s = parse_slurm_duration(time_limit) if time_limit else None
    if limit_s is not None and lead >= limit_s:
        raise SlurmError(f"--signal-lead {lead}s is not shorter than --time {time_limit}: the "
                         f"warning would come at the start")
    cpus = cpus_per_task if cpus_per_task is not None else config.get("cpus_per_task")
    partition = partition or config.get("partition")
    for sub in ("logs", "run", "slurm"):
        os.makedirs(os.path.join(qdir, sub), exist_ok=True)
    writer = EventWriter(qdir)
    try:
        # The id is the next job number, as for box jobs: reserve it, then write the script.
        writer.lock()
        try:
            seq = _last_seq_and_newline(writer.fd)[0] + 1
            job_id = writer.next_job_id_locked()
            dest_base = durable_dir or root
            ckpt_dir = os.path.join(dest_base, "ckpt", queue, job_id)
            script_rel = os.path.join("slurm", f"{job_id}.sbatch")
            # An array's tasks each write their own log: %a is the task index.
            log_name = f"{job_id}_%a.log" if array else f"{job_id}.log"
            text = render_script(
                job_id, queue, argv=argv, cwd=cwd, env=env, array=array,
                log=os.path.join(qdir, "logs", log_name),
                runs_dir=os.path.join(qdir, "run"), ckpt_dir=ckpt_dir,
                pythonpath=import_path(root), name=name, time_limit=time_limit,
                signal_lead_s=lead, cpus_per_task=cpus, gpus=gpus, partition=partition)
            _write_atomic(os.path.join(qdir, script_rel), text, 0o700)
            os.makedirs(ckpt_dir, exist_ok=True)
            ev = writer.append_locked("slurm_added", {
                "name": name, "argv": argv, "cwd": cwd, "env": env, "gpus": gpus,
                "durable_dir": durable_dir, "time": time_limit, "signal_lead_s": lead,
                "cpus_per_task": cpus, "partition": partition, "script": script_rel,
                "ckpt_dir": ckpt_dir, "job": job_id, "array": array})
        finally:
            writer.unlock()
        assert ev["seq"] == seq
        job = fold_slurm([ev])[job_id]
        result = _submit(qdir, job, command_env(config), writer)
    finally:
        writer.close()
    result.update({"queue": queue, "seq": seq, "backend": BACKEND})
    return result


def find_job(root: str, queue: str, job_id: str) -> Optional[Dict[str, Any]]:
    """The Slurm job ``job_id``; for an array task ("j5_3") its array job's record."""
    qdir = queue_dir(root, queue)
    if not os.path.isfile(os.path.join(qdir, "events.jsonl")):
        return None
    jobs = fold_slurm(_read(qdir))
    m = ARRAY_TASK_ID_RE.match(job_id)
    if m is not None and (jobs.get(m.group(1)) or {}).get("array"):
        return jobs[m.group(1)]
    return jobs.get(job_id)


def kill(root: str, queue: str, job_id: str, wait_s: float = KILL_WAIT_S) -> Dict[str, Any]:
    """scancel, then wait (bounded) until Slurm has let the job go and record how it ended."""
    qdir = queue_dir(root, queue)
    events = _read(qdir)
    task = task_of(root, queue, job_id)
    if task is not None:
        return _kill_task(qdir, queue, task[0], task[1], wait_s)
    job = fold_slurm(events).get(job_id)
    base = {"queue": queue, "job": job_id}
    if job is None or not job["slurm_id"]:
        return {**base, "ok": False, "error": f"no submitted Slurm job {job_id}"}
    if job["state"] not in LIVE_STATES:
        return {**base, "ok": True, "result": "rejected", "why": f"job is {job['state']}"}
    return _scancel_and_wait(qdir, base, str(job["slurm_id"]), job_id, wait_s)


def _scancel_and_wait(qdir: str, base: Dict[str, Any], slurm_id: str, job_id: str,
                      wait_s: float) -> Dict[str, Any]:
    """scancel ``slurm_id``, then wait (bounded) until the record ``job_id`` (a job, or an
    array task "j5_3") is no longer live, and say how it ended."""
    env = command_env(slurm_config(_read(qdir)))
    rc, _, err = _run(["scancel", slurm_id], env)
    if rc != 0:
        return {**base, "ok": False, "slurm_id": slurm_id,
                "error": f"scancel failed (exit {rc}): {err.strip()[-300:]}"}
    deadline = time.monotonic() + wait_s
    while True:
        jobs, _warnings = refresh(qdir, _read(qdir))
        records = [*jobs, *[t for j in jobs for t in j.get("tasks") or []]]
        now_job = next((j for j in records if j["id"] == job_id), None)
        if now_job is not None and now_job["state"] not in LIVE_STATES:
            return {**base, "ok": True, "result": "killed", "slurm_id": slurm_id,
                    "state": now_job["state"], "slurm_state": now_job["slurm_state"]}
        if time.monotonic() >= deadline:
            return {**base, "ok": False, "slurm_id": slurm_id,
                    "error": f"scancel sent; Slurm still lists {slurm_id} after {wait_s:.0f}s"}
        time.sleep(0.5)


def _kill_task(qdir: str, queue: str, job: Dict[str, Any], index: str,
               wait_s: float) -> Dict[str, Any]:
    """scancel one array task (``123_4``), then wait (bounded) until Slurm has let it go."""
    task_id = f"{job['id']}_{index}"
    base = {"queue": queue, "job": task_id}
    if not job["slurm_id"] or job["state"] not in LIVE_STATES:
        return {**base, "ok": True, "result": "rejected", "why": f"job is {job['state']}"}
    jobs, _warnings = refresh(qdir, _read(qdir))
    now_job = next((j for j in jobs if j["id"] == job["id"]), job)
    task = next((t for t in now_job.get("tasks") or [] if t["id"] == task_id), None)
    if task is None or task["state"] not in LIVE_STATES:
        return {**base, "ok": True, "result": "rejected",
                "why": f"task is {task['state'] if task else 'not known to Slurm'}"}
    return _scancel_and_wait(qdir, base, str(task["slurm_id"]), task_id, wait_s)


def relaunch(root: str, queue: str, job_id: str) -> Dict[str, Any]:
    """Submit the job's identical script again: a new attempt, the same checkpoint dir (an
    array: every task again, under a new array id)."""
    found = task_of(root, queue, job_id)
    # "j5_3": task 3 alone, under a new array id that takes the task's place in the row.
    array_job, index = (found[0]["id"], found[1]) if found is not None else (job_id, None)
    qdir = queue_dir(root, queue)
    events = _read(qdir)
    jobs, _ = refresh(qdir, events)
    job = next((j for j in jobs if j["id"] == array_job), None)
    target = job if index is None else next(
        (t for t in (job or {}).get("tasks") or [] if t["task"] == index), None)
    base = {"queue": queue, "job": job_id}
    if job is None or target is None:
        return {**base, "ok": False, "error": f"no Slurm job {job_id}"}
    if target["state"] in LIVE_STATES:
        return {**base, "ok": False, "result": "rejected",
                "error": f"{'job' if index is None else 'task'} is {target['state']}; "
                         f"kill it first"}
    writer = EventWriter(qdir)
    try:
        doc = _submit(qdir, job, command_env(slurm_config(events)), writer, task=index)
    finally:
        writer.close()
    doc.update(base)
    doc["result"] = "requeued" if doc["ok"] else "rejected"
    return doc


def configure(root: str, queue: str, **fields: Any) -> Dict[str, Any]:
    writer = EventWriter(queue_dir(root, queue))
    try:
        ev = writer.append("slurm_configured", **{k: v for k, v in fields.items()
                                                  if v is not None})
    finally:
        writer.close()
    return ev


def is_default(root: str, queue: str) -> bool:
    """Whether ``queue add`` without --backend means Slurm for this queue."""
    qdir = queue_dir(root, queue)
    if not os.path.isfile(os.path.join(qdir, "events.jsonl")):
        return False
    return slurm_config(_read(qdir)).get("backend") == BACKEND


def emit_error(exc: Exception) -> int:
    sys.stdout.write(json.dumps({"ok": False, "error": str(exc)}) + "\n")
    return 2


__all__ = ["BACKEND", "SlurmError", "add", "configure", "final_states", "find_job",
           "fold_slurm", "is_default", "kill", "refresh", "relaunch", "render_script",
           "slurm_config", "split_job_id", "squeue_rows"]
