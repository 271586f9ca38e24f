"""Record ``session.jsonl``: real probe snapshots of a Slurm login node, one every ~2 s.

    sudo .venv/bin/python tests/data/slurm/record_session.py   # as root, as CI runs Slurm

Starts the single-node test cluster of tests/harness/slurm.py, submits four jobs through the
real queue CLI (``python -m gpuroom.remote queue add`` with the Slurm backend) and probes with
``gpuroom.remote.probe.ProbeSession`` (the very collector ``serve`` runs on a box), carrying
the log cursors forward as tui/fleet/live.py does. Lines are in the format the fleet's
Recorder writes, so ``gpuroom replay tests/data/slurm/session.jsonl`` plays the session in the room.

The jobs (the node has 2 CPUs, so the last two wait at first):
- ``resumable``: examples/train_resumable.py, 1-minute walltime, 50 s warning: it saves at
  the warning, exits 0, the batch script requeues it (same Slurm id) and it finishes;
- ``stale``: writes one checkpoint, ignores SIGUSR1 and sleeps: Slurm ends it at the wall
  (TIMEOUT), and its checkpoint is older than its 20 s warning lead well before that;
- ``wide``: asks for both CPUs, so it is PENDING (Resources / Priority) while the others run;
- ``fails``: exits 7 (FAILED).
Not reproducible on this cluster (no cgroup memory limits, no preemption): OUT_OF_MEMORY,
PREEMPTED and NODE_FAIL; tests/test_doctor_slurm.py derives them from the recorded TIMEOUT
record by changing its slurm_state, which is all Slurm changes between those ends.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from harness.slurm import SlurmCluster, missing_requirements  # noqa: E402

from gpuroom.remote.probe import ProbeSession  # noqa: E402

HOST = "login"
POLL_S = 2.0
MAX_S = 240.0
FINAL = ("succeeded", "failed", "killed", "removed")


def remote(home: str, *argv: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "gpuroom.remote", "queue", *argv],
                          env={**os.environ, "GPUROOM_HOME": home}, capture_output=True,
                          text=True, timeout=60, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"queue {argv[0]} failed: {proc.stdout} {proc.stderr}")
    doc: dict[str, Any] = json.loads(lines[-1])
    return doc


def recorder_line(snap: dict[str, Any]) -> str:
    """One line as tui/fleet/live.py's Recorder writes it, for host ``login``."""
    return json.dumps({"t": time.time(), "host": HOST, "profile": "slurm", "state": "up",
                       "error": None, "snapshot": snap, "price_per_hour": None,
                       "rented_at": None}, separators=(",", ":"), sort_keys=True)


def jobs_of(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    queues = (snapshot.get("queue") or {}).get("queues") or {}
    return [j for view in queues.values() for j in (view or {}).get("jobs") or []]


def main() -> int:
    reason = missing_requirements()
    if reason is not None:
        print(reason, file=sys.stderr)
        return 2
    home = tempfile.mkdtemp(prefix="gpuroom-slurm-rec-")
    cluster = SlurmCluster.create()
    out = HERE / "session.jsonl"
    try:
        cluster.start()
        remote(home, "config", "--backend", "slurm", "--slurm-conf", str(cluster.conf))
        py = sys.executable
        remote(home, "add", "--name", "resumable", "--time", "1", "--signal-lead", "50",
               "--cwd", str(ROOT), "--", py, str(ROOT / "examples" / "train_resumable.py"),
               "--steps", "300", "--save-every", "25", "--sleep-per-step", "0.1")
        remote(home, "add", "--name", "stale", "--time", "1", "--signal-lead", "20", "--",
               "sh", "-c", "trap '' USR1; echo saved; echo w > \"$GPUROOM_CKPT_DIR/ckpt-0.pt\";"
               " sleep 300")
        remote(home, "add", "--name", "wide", "--cpus-per-task", "2", "--time", "1",
               "--signal-lead", "0", "--", "sleep", "5")
        remote(home, "add", "--name", "fails", "--", "sh", "-c", "echo about to fail; exit 7")
        session = ProbeSession()
        request: dict[str, Any] = {"queue_root": home, "mounts": []}
        deadline = time.monotonic() + MAX_S
        with out.open("w", encoding="utf-8") as f:
            while True:
                snap = session.snapshot(request)
                f.write(recorder_line(snap) + "\n")
                f.flush()
                logs = {}
                for job in jobs_of(snap):
                    chunk = job.get("log_chunk")
                    if isinstance(chunk, dict) and chunk.get("next_offset") is not None:
                        logs[f"default/{job['id']}"] = {"offset": chunk["next_offset"],
                                                        "inode": chunk.get("inode")}
                request["logs"] = logs
                states = [j.get("state") for j in jobs_of(snap)]
                print(time.strftime("%H:%M:%S"),
                      [(j["name"], j["state"], j.get("slurm_state"), j.get("reason"))
                       for j in jobs_of(snap)], flush=True)
                if states and all(s in FINAL for s in states):
                    break
                if time.monotonic() >= deadline:
                    print("gave up waiting for every job to end", file=sys.stderr)
                    return 1
                time.sleep(POLL_S)
        session.close()
    finally:
        cluster.close()
        shutil.rmtree(home, ignore_errors=True)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
