"""The in-allocation probe's bookkeeping (remote/slurm_telemetry.py) and the pure parts of job
arrays (remote/queue_slurm.py) that need no Slurm: how a
refusal of --overlap is recognised and remembered, how a step's output is read, and what a
refused queue shows. The step itself runs against the real cluster in
tests/system/test_slurm_allocation.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpuroom.remote import slurm_telemetry as tele
from gpuroom.tui.present.gpus import gpu_absence
from gpuroom.tui.snapshot import read_snapshot

JOB = {"id": "j3", "slurm_id": "41", "state": "running", "backend": "slurm", "nodes": 1}


def test_overlap_refusals_are_told_from_other_failures() -> None:
    # Slurm 20.02's srun, which has no --overlap (getopt's words), and a site's cli_filter.
    assert tele.refusal(1, "srun: unrecognized option '--overlap'\nTry \"srun --help\"\n") \
        == "srun: unrecognized option '--overlap'"
    assert tele.refusal(1, "srun: error: cli_filter: --overlap is not allowed on this "
                           "cluster") is not None
    # A busy or vanished job is a failure to retry, not a refusal.
    assert tele.refusal(1, "srun: error: Unable to create step for job 41: Job/step already "
                           "completing or completed") is None
    assert tele.refusal(0, "srun: unrecognized option '--overlap'") is None


def test_the_steps_output_is_one_document_per_node() -> None:
    out = '{"host":{"hostname":"n1"}}\nsrun: warning: noise\n{"host":{"hostname":"n2"}}\n{bad\n'
    assert [n["host"]["hostname"] for n in tele.parse_nodes(out)] == ["n1", "n2"]


def test_srun_asks_for_one_task_per_node_inside_the_job() -> None:
    argv = tele.srun_argv("41", 2, ["/scratch"])
    assert argv[:7] == ["srun", "--jobid=41", "--overlap", "--nodes=2", "--ntasks=2",
                        "--ntasks-per-node=1", "--job-name=gpuroom-probe"]
    assert argv[-2:] == ["node", json.dumps(["/scratch"])]


def test_a_refused_queue_says_so_and_starts_no_step(tmp_path: Path) -> None:
    tdir = Path(tele.telemetry_dir(str(tmp_path)))
    tdir.mkdir()
    (tdir / tele.REFUSED_FILE).write_text(json.dumps(
        {"t": 1.0, "error": "srun --overlap refused: srun: unrecognized option '--overlap'"}))
    view = tele.job_telemetry(str(tmp_path), dict(JOB), env={}, mounts=[], session_state={})
    assert view["refused"] is True and view["nodes"] == []
    assert sorted(p.name for p in tdir.iterdir()) == [tele.REFUSED_FILE]  # no step, no watcher
    # The room's GPU pane says why the job's GPUs are missing, in the pane's one line.
    snap = read_snapshot({"gpus": [], "gpu_error": "no nvidia-smi on PATH", "queue": {
        "queues": {"default": {"jobs": [{**JOB, "telemetry": view}]}}}})
    assert gpu_absence(snap) == ("no nvidia-smi on PATH; in-job probe: srun --overlap refused: "
                                 "srun: unrecognized option '--overlap'")


def test_a_previous_attempts_answer_is_not_this_attempts(tmp_path: Path) -> None:
    tdir = Path(tele.telemetry_dir(str(tmp_path)))
    tdir.mkdir()
    (tdir / "j3.json").write_text(json.dumps({"t": 1.0, "slurm_id": "40", "nodes": [{}]}))
    # A watcher in flight (a sleeping child named like one) keeps the poll from starting
    # another, so the test starts nothing.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)",
                              "slurm_telemetry"])
    try:
        (tdir / "j3.step").write_text(json.dumps({"pid": child.pid, "started": 10.0,
                                                  "timeout": 5.0}))
        view = tele.job_telemetry(str(tmp_path), dict(JOB), env={}, mounts=[],
                                  session_state={}, now=11.0)
        assert view["nodes"] == [] and (tdir / "j3.step").exists()
    finally:
        child.kill()
        child.wait(timeout=10)


def _ended(child: subprocess.Popen[bytes]) -> bool:
    """Killed: reaped by us, or (when another test's SIGCHLD handler reaped it first) gone
    from /proc, or a zombie there."""
    try:
        if child.poll() is not None:
            return child.returncode in (-signal.SIGTERM, -signal.SIGKILL, 0)
    except ChildProcessError:
        return True
    try:
        with open(f"/proc/{child.pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_hung_watcher_is_killed_and_said(tmp_path: Path) -> None:
    tdir = Path(tele.telemetry_dir(str(tmp_path)))
    tdir.mkdir()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)",
                              "slurm_telemetry"], start_new_session=True)
    try:
        (tdir / "j3.step").write_text(json.dumps({"pid": child.pid, "started": 0.0,
                                                  "timeout": 5.0}))
        # Past its timeout and grace: killed as a group. Starting the next step needs
        # python -m gpuroom.remote... on PATH, which is this interpreter: it runs, finds no
        # srun under the empty env and records that.
        view = tele.job_telemetry(str(tmp_path), dict(JOB), env={}, mounts=[],
                                  session_state={}, now=100.0)
        for _ in range(100):  # bounded: 10 s
            if _ended(child):
                break
            time.sleep(0.1)
        assert _ended(child), view
        assert view["error"].startswith("the probe's watcher hung for 100s: killed")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)


# ------------------------------------------------------------------ arrays (pure parts)

def _t(index: str, slurm_state: str, code: int | None = 0) -> dict[str, object]:
    return {"task": index, "slurm_state": slurm_state, "exit_code": code, "elapsed_s": 3}


def test_an_arrays_verdict_is_one_for_all_its_tasks() -> None:
    from gpuroom.remote.queue_slurm import _apply_final, _array_final

    assert _array_final([_t("0", "COMPLETED"), _t("1", "COMPLETED")])["state"] == "COMPLETED"
    assert _array_final([_t("0", "COMPLETED"), _t("1", "CANCELLED", None)])["state"] == \
        "CANCELLED"
    failed = _array_final([_t("0", "COMPLETED"), _t("1", "FAILED", 7), _t("2", "TIMEOUT", 0)])
    assert (failed["state"], failed["exit_code"]) == ("FAILED", 7)
    # A task whose script exited 3 under COMPLETED carries its code: the queue reads
    # COMPLETED with a non-zero code as failed (_apply_final).
    odd = _array_final([_t("0", "COMPLETED"), _t("1", "COMPLETED", 3)])
    assert (odd["state"], odd["exit_code"]) == ("COMPLETED", 3)
    job: dict[str, object] = {}
    _apply_final(job, odd["state"], odd["exit_code"], None)
    assert job["state"] == "failed"


def test_an_arrays_tasks_live_under_the_ids_since_its_last_whole_submission() -> None:
    from gpuroom.remote.queue_slurm import array_ids

    job = {"attempts": [{"slurm_id": "10", "task": None}, {"slurm_id": "14", "task": "3"},
                        {"slurm_id": "20", "task": None}, {"slurm_id": "21", "task": "0"},
                        {"slurm_id": None, "task": "1"}]}
    assert array_ids(job) == ["20", "21"]
