"""A running Slurm job's own GPUs, disks and cgroup, probed from inside its allocation (issue 23).

On a login node the probe's GPUs are the login node's, not the job's. For each running Slurm
job the poll starts, in the background, one step inside the job's allocation:

    srun --jobid=<id> --overlap --nodes=N --ntasks=N --ntasks-per-node=1 \\
         --job-name=gpuroom-probe python3 -m gpuroom.remote.slurm_telemetry node MOUNTS

which prints one JSON document per node (host, cgroup, disks, GPUs). The step gets all of the
job's GPUs (a step is given every GRES of its job unless it asks otherwise) and its
environment, so an ``nvidia-smi`` on the job's PATH answers. The poll never waits for it: the
answer lands in ``telemetry/<job>.json`` and the next poll reads it.

Bounds: at most one step per job at a time (``telemetry/<job>.step`` names the watcher of the
one in flight), a new one at most every ``MIN_INTERVAL_S``, each watched for
``STEP_TIMEOUT_S``: a step that does not answer by then is cancelled (SIGTERM to srun, then
``scancel`` of any ``gpuroom-probe`` step left in the job) and the hang is said in the job's
telemetry. Where ``--overlap`` is refused (Slurm older than 20.11, or a site's policy) the
queue records it once in ``telemetry/refused`` and stops asking: the job then shows what it
showed before, with that line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from . import queue_slurm
from .queue_runner import _atomic_json as _write_json
from .queue_runner import _read_json, import_path

STEP_NAME = "gpuroom-probe"
STEP_TIMEOUT_S = 15.0  # srun's step launch is ~1 s; a busy slurmd can take several
MIN_INTERVAL_S = 2.0  # at most one probe step per job per poll interval (the fleet's 2 s)
SLURM_CALL_S = 10.0  # the bound on each squeue / scancel the watcher runs
SRUN_LEAVE_S = 5.0  # srun's time to leave after SIGTERM before it is killed
# A watcher older than its step's timeout plus this is hung itself: its own bounded work (two
# squeue listings, a scancel, srun leaving) can take that long on a busy login node, and a
# watcher killed while it still works would never write its answer.
WATCHER_GRACE_S = 3 * SLURM_CALL_S + SRUN_LEAVE_S + 5.0
OUTPUT_MAX_BYTES = 1 << 20  # one JSON document per node; a cap against a runaway step
REFUSED_FILE = "refused"
# A site (or a test) whose steps start slowly, or that wants hangs cut sooner, sets this.
TIMEOUT_ENV = "GPUROOM_SLURM_PROBE_TIMEOUT_S"
# How srun says it will not run an overlapping step: an unknown option (before 20.11) or
# a site's cli_filter / job_submit policy naming the option.
_REFUSAL_MARKS = ("unrecognized option", "invalid option", "unknown option", "not allowed",
                  "not permitted", "denied")


def telemetry_dir(qdir: str) -> str:
    return os.path.join(qdir, "telemetry")


def refusal(rc: int, stderr: str) -> Optional[str]:
    """srun's words when it refuses ``--overlap`` itself; None for any other failure."""
    if rc == 0:
        return None
    for line in stderr.splitlines():
        low = line.lower()
        if "overlap" in low and any(mark in low for mark in _REFUSAL_MARKS):
            return line.strip()[-300:]
    return None


# ---------------------------------------------------------------- the poll's side

def attach(root: str, qdir: str, jobs: List[Dict[str, Any]], *, events: List[Dict[str, Any]],
           request: Dict[str, Any], session_state: Dict[str, Any]) -> None:
    """Give each running Slurm job of one queue its ``telemetry`` (the probe's queue
    section calls this; ``queue ls`` does not, so listing a queue starts no step)."""
    # Not an array: its id names one task, which may have ended while others run.
    running = [j for j in jobs if j.get("backend") == queue_slurm.BACKEND
               and j.get("state") == "running" and j.get("slurm_id") and not j.get("array")]
    if not running:
        return
    env = queue_slurm.command_env(queue_slurm.slurm_config(events))
    path = import_path(root)
    env["PYTHONPATH"] = path + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                else "")
    mounts = [str(m) for m in request.get("mounts") or []]
    for job in running:
        job["telemetry"] = job_telemetry(qdir, job, env=env, mounts=mounts,
                                         session_state=session_state)


def _alive(pid: int, procs: Dict[str, Any], key: str) -> bool:
    proc = procs.get(key)
    if proc is not None and proc.pid == pid:
        return proc.poll() is None  # reaps it: a serve session's child is never a zombie
    from .checkpoint import _pid_alive  # here: a probe without a step in flight skips it

    if not _pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return True
    # Not a recycled pid. Empty: a process between fork and exec (or a zombie) cannot be
    # told apart; it counts as alive, so at worst it is waited out to the timeout.
    return not cmdline or b"slurm_telemetry" in cmdline


def job_telemetry(qdir: str, job: Dict[str, Any], *, env: Dict[str, str], mounts: List[str],
                  session_state: Dict[str, Any],
                  now: Optional[float] = None) -> Dict[str, Any]:
    """The job's last in-allocation probe, starting the next one when it is due."""
    now = time.time() if now is None else now
    tdir = telemetry_dir(qdir)
    os.makedirs(tdir, exist_ok=True)
    slurm_id = str(job["slurm_id"])
    refused = _read_json(os.path.join(tdir, REFUSED_FILE))
    if refused is not None:
        return {"t": refused.get("t"), "nodes": [], "refused": True,
                "error": refused.get("error")}
    result_path = os.path.join(tdir, f"{job['id']}.json")
    result = _read_json(result_path)
    if result is not None and str(result.get("slurm_id")) != slurm_id:
        result = None  # a previous attempt's
    procs: Dict[str, Any] = session_state.setdefault("slurm_telemetry", {})
    step_path = os.path.join(tdir, f"{job['id']}.step")
    step = _read_json(step_path)
    note = None
    if step is not None:
        pid = int(step.get("pid") or 0)
        age = now - float(step.get("started") or 0)
        if pid and _alive(pid, procs, job["id"]):
            if age <= float(step.get("timeout") or STEP_TIMEOUT_S) + WATCHER_GRACE_S:
                return _view(result)
            _kill_group(pid)  # the watcher itself hangs: it will not clean up, so we do
            note = f"the probe's watcher hung for {age:.0f}s: killed"
        procs.pop(job["id"], None)
        os.unlink(step_path)
    last = float(result.get("t") or 0) if result is not None else 0.0
    if now - last >= MIN_INTERVAL_S:
        spec = {"slurm_id": slurm_id, "nodes": int(job.get("nodes") or 1), "mounts": mounts,
                "out": result_path, "step": step_path, "started": now,
                "timeout": _timeout(),
                "refused": os.path.join(tdir, REFUSED_FILE)}
        _start(qdir, job, env, spec, procs)
    view = _view(result)
    if note:
        view["error"] = note
    return view


def _view(result: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    if result is None:
        return {"t": None, "nodes": [], "refused": False, "error": None}
    return {"t": result.get("t"), "nodes": result.get("nodes") or [], "refused": False,
            "error": result.get("error")}


def _kill_group(pid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return


def _start(qdir: str, job: Dict[str, Any], env: Dict[str, str], spec: Dict[str, Any],
           procs: Dict[str, Any]) -> None:
    argv = [sys.executable or "python3", "-m", "gpuroom.remote.slurm_telemetry", "watch",
            json.dumps(spec)]
    # Its own session: the poll (a one-shot probe) may exit first; the watcher outlives it
    # and is killed as a group if it hangs.
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True, cwd=qdir)
    procs[job["id"]] = proc
    _write_json(str(spec["step"]), {"pid": proc.pid, "started": spec["started"],
                                    "timeout": spec["timeout"], "slurm_id": spec["slurm_id"]})


def _timeout() -> float:
    try:
        value = float(os.environ.get(TIMEOUT_ENV) or STEP_TIMEOUT_S)
    except ValueError:
        return STEP_TIMEOUT_S
    return value if value > 0 else STEP_TIMEOUT_S


# ---------------------------------------------------------------- the watcher

def srun_argv(slurm_id: str, nodes: int, mounts: List[str]) -> List[str]:
    n = max(1, int(nodes))
    return ["srun", f"--jobid={slurm_id}", "--overlap", f"--nodes={n}", f"--ntasks={n}",
            "--ntasks-per-node=1", f"--job-name={STEP_NAME}", "--quiet",
            "--kill-on-bad-exit=1", sys.executable or "python3", "-m",
            "gpuroom.remote.slurm_telemetry", "node", json.dumps(mounts)]


def _run(argv: List[str], timeout: float) -> Tuple[int, str, str]:
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout, check=False)
    except FileNotFoundError:
        return 127, "", f"{argv[0]} not found on PATH"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]} took over {timeout:.0f}s"
    return (proc.returncode, proc.stdout.decode("utf-8", "replace"),
            proc.stderr.decode("utf-8", "replace"))


def cancel_probe_steps(slurm_id: str) -> List[str]:
    """scancel every ``gpuroom-probe`` step still listed in the job: a hung one's leftovers."""
    rc, out, _ = _run(["squeue", "--steps", "--noheader", f"--jobs={slurm_id}",
                       "--format=%i|%j"], SLURM_CALL_S)
    if rc != 0:
        return []
    steps = [line.split("|")[0] for line in out.splitlines()
             if line.split("|")[-1].strip() == STEP_NAME]
    for step in steps:
        _run(["scancel", "--quiet", step], SLURM_CALL_S)
    return steps


def parse_nodes(stdout: str) -> List[Dict[str, Any]]:
    """One JSON document per line of the step's output (one line per node)."""
    nodes = []
    for raw in stdout.splitlines():
        line = raw.strip()
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            nodes.append(doc)
    return nodes


def watch(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Run the probe step, bounded; write its result where the poll reads it."""
    slurm_id = str(spec["slurm_id"])
    timeout = float(spec.get("timeout") or STEP_TIMEOUT_S)
    leftovers = cancel_probe_steps(slurm_id)  # one step at a time, even after a crash
    started = time.time()
    argv = srun_argv(slurm_id, int(spec.get("nodes") or 1), list(spec.get("mounts") or []))
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    except OSError as exc:
        doc = {"t": time.time(), "slurm_id": slurm_id, "nodes": [],
               "error": f"srun could not start: {exc}"}
        _write_json(str(spec["out"]), doc)
        return doc
    error = None
    try:
        out_b, err_b = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()  # srun forwards SIGTERM to the step and leaves
        try:
            out_b, err_b = proc.communicate(timeout=SRUN_LEAVE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out_b, err_b = proc.communicate()
        cancel_probe_steps(slurm_id)
        error = f"the probe step did not answer in {timeout:g}s: cancelled"
    out = out_b[:OUTPUT_MAX_BYTES].decode("utf-8", "replace")
    err = err_b[-4000:].decode("utf-8", "replace")
    refused = refusal(proc.returncode, err)
    if refused is not None:
        doc = {"t": time.time(), "error": f"srun --overlap refused: {refused}"}
        _write_json(str(spec["refused"]), doc)
        return doc
    nodes = parse_nodes(out)
    if error is None and (proc.returncode != 0 or not nodes):
        tail = err.strip().splitlines()[-1:] or ["no output"]
        error = f"srun exit {proc.returncode}: {tail[0][-300:]}"
    if leftovers and error is None:
        error = f"cancelled a hung probe step ({', '.join(leftovers)})"
    doc = {"t": time.time(), "slurm_id": slurm_id, "nodes": nodes, "error": error,
           "ms": round((time.time() - started) * 1000.0, 1)}
    _write_json(str(spec["out"]), doc)
    return doc


# ---------------------------------------------------------------- inside the step

def node_probe(mounts: List[str]) -> Dict[str, Any]:
    """What the room shows of a box, for the node this step runs on."""
    from . import gpu, hostinfo
    from .probe import ProbeSession

    session = ProbeSession()
    try:
        doc: Dict[str, Any] = {"host": hostinfo.host_facts(), "cgroup": hostinfo.cgroup_facts(),
                               "disks": hostinfo.disks(mounts)}
        try:
            doc.update(gpu.collect(session, {}))
        except Exception as exc:  # no GPU answer must not lose the node's other facts
            doc.update({"gpus": [], "gpu_error": f"{type(exc).__name__}: {exc}"})
        return doc
    finally:
        session.close()


def main(argv: List[str]) -> int:
    if len(argv) == 2 and argv[0] == "node":
        mounts = json.loads(argv[1])
        sys.stdout.write(json.dumps(node_probe([str(m) for m in mounts]),
                                    separators=(",", ":")) + "\n")
        return 0
    if len(argv) == 2 and argv[0] == "watch":
        watch(json.loads(argv[1]))
        return 0
    sys.stderr.write("usage: python -m gpuroom.remote.slurm_telemetry node|watch JSON\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
