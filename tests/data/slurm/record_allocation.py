"""Record ``allocation.jsonl``: real probe snapshots of a Slurm login node for issue 23.

    sudo .venv/bin/python tests/data/slurm/record_allocation.py   # as root, as CI runs Slurm

Starts the test cluster of tests/harness/slurm.py with the nvidia-smi replay in the helper's
environment (srun hands it to the job's step, as on a cluster the job's GPUs answer there),
submits through the real queue CLI and probes with ``gpuroom.remote.probe.ProbeSession``
(the collector ``serve`` runs) until every new key has been written:

- ``sleeper`` runs: its in-allocation probe (``telemetry``: the node's host, cgroup, disks,
  a watched path that does not exist, the replay's GPUs and processes);
- ``wide`` asks for both CPUs: PENDING on Resources with the backfill's expected start;
- ``sweep``, ``--array 0-3%2``: its tasks, pending behind the others.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from fakes import NVIDIA_SMI  # noqa: E402
from harness.gpubox import SMI_CAPTURES  # noqa: E402
from harness.slurm import SlurmCluster, missing_requirements  # noqa: E402
from paths import FIXTURES  # noqa: E402
from record_session import jobs_of, recorder_line, remote  # noqa: E402

from gpuroom.remote.probe import ProbeSession  # noqa: E402

POLL_S = 1.0
MAX_S = 60.0


def complete(snap: dict[str, Any]) -> bool:
    jobs = {j["name"]: j for j in jobs_of(snap)}
    tele = (jobs.get("sleeper") or {}).get("telemetry") or {}
    return bool(tele.get("nodes") and tele["nodes"][0].get("gpus")
                and (jobs.get("wide") or {}).get("expected_start")
                and (jobs.get("sweep") or {}).get("tasks"))


def main() -> int:
    reason = missing_requirements()
    if reason is not None:
        print(reason, file=sys.stderr)
        return 2
    os.environ.update({"GPUROOM_NVIDIA_SMI": str(NVIDIA_SMI),
                       "GPUROOM_FAKE_NVSMI": ":".join(SMI_CAPTURES),
                       "GPUROOM_FIXTURES": str(FIXTURES)})
    home = tempfile.mkdtemp(prefix="gpuroom-slurm-rec-")
    cluster = SlurmCluster.create()
    out = HERE / "allocation.jsonl"
    lines = []
    try:
        cluster.start()
        remote(home, "config", "--backend", "slurm", "--slurm-conf", str(cluster.conf))
        remote(home, "add", "--name", "sleeper", "--time", "10", "--", "sleep", "300")
        remote(home, "add", "--name", "wide", "--cpus-per-task", "2", "--time", "10", "--",
               "sleep", "5")
        remote(home, "add", "--name", "sweep", "--array", "0-3%2", "--time", "10", "--",
               "sleep", "5")
        session = ProbeSession()
        request: dict[str, Any] = {"queue_root": home, "mounts": ["/nonexistent-mount"]}
        deadline = time.monotonic() + MAX_S
        while True:
            snap = session.snapshot(request)
            lines.append(recorder_line(snap))
            print(time.strftime("%H:%M:%S"),
                  [(j["name"], j["state"], j.get("reason"), bool(j.get("telemetry")))
                   for j in jobs_of(snap)], flush=True)
            if complete(snap):
                break
            if time.monotonic() >= deadline:
                print("gave up waiting for the keys", file=sys.stderr)
                return 1
            time.sleep(POLL_S)
        session.close()
    finally:
        cluster.close()
        shutil.rmtree(home, ignore_errors=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
