"""Slurm, deeper (issue 23), against the real single-node slurmctld/slurmd of tests/harness:
a running job's own GPUs from a probe step inside its allocation (the nvidia-smi replay is in
the helper's environment, which srun hands to the step), a pending job's reason in words
with its expected start, and ``squeue -l`` as the cluster prints it.

The node has 2 CPUs: ``sleeper`` takes one and runs; ``wide`` asks for both and waits.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from harness import gpubox
from harness import slurm as slurm_harness
from paths import FIXTURES

from gpuroom.remote import slurm_telemetry
from gpuroom.remote.slurmparse import parse_squeue
from gpuroom.tui import config as cfg
from gpuroom.tui.cli.main import main
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.present.gpus import gpu_rows
from gpuroom.tui.present.jobs import job_rows
from gpuroom.tui.rules.doctor import diagnose

pytestmark = pytest.mark.sshd

WAIT_S = 30.0
# Shorter than any srun step can answer here (190-370 ms measured on this test cluster): at
# 0.3 s a warm, idle node sometimes answered in time and the cut-off was never seen.
TIGHT_S = 0.05


@pytest.fixture(scope="module")
def cluster() -> Iterator[slurm_harness.SlurmCluster]:
    with slurm_harness.running_cluster() as c:
        yield c


@pytest.fixture(scope="module")
def slurm_host(cluster: slurm_harness.SlurmCluster, sshd_session: Any,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    sshd_session.reset()
    # "tight" is the same box with a probe step allowed TIGHT_S: every step is cut off as if
    # it hung.
    with gpubox.gpu_python(sshd_session, FIXTURES, "gpuroom-slurm2-test") as python, \
            gpubox.gpu_python(sshd_session, FIXTURES, "gpuroom-slurm2-tight",
                              extra_env={"GPUROOM_SLURM_PROBE_TIMEOUT_S": f"{TIGHT_S:g}"}) as tight:
        path = tmp_path_factory.mktemp("slurm2") / "hosts.toml"
        path.write_bytes(tomli_w.dumps({
            "settings": {"ssh_config": str(sshd_session.ssh_config)},
            "hosts": {"box": {"ssh": sshd_session.alias, "profile": "slurm",
                              "python": str(python)},
                      "tight": {"ssh": sshd_session.alias, "profile": "slurm",
                                "python": str(tight)}}}).encode())
        path.chmod(0o600)
        assert main(["--config", str(path), "queue", "config", "box", "--slurm-conf",
                     str(cluster.conf)]) == 0
        yield path
        cluster.cancel_all()
    sshd_session.reset()


def add(capsys: pytest.CaptureFixture[str], config: Path, *argv: str) -> dict[str, Any]:
    rc = main(["--config", str(config), "queue", "add", "--json", *argv])
    out = capsys.readouterr().out.strip().splitlines()
    doc: dict[str, Any] = json.loads(out[-1])
    assert rc == 0 and doc["ok"], doc
    return doc


def _jobs_said(state: HostState) -> list[Any]:
    """What a timed-out wait saw, short: each job's state and its in-allocation probe."""
    view = state.view
    if view is None:
        return [state.state, state.error]
    return [(j.id, j.name, j.state, j.telemetry) for j in view.jobs]


def poll_until(config: Path, ready: Any, timeout: float = WAIT_S,
               host: str = "box") -> HostState:
    """Poll the host through the fleet (the room's path) until ``ready(state)``."""
    fleet = Fleet(cfg.load(config))

    async def run() -> HostState:
        try:
            deadline = time.monotonic() + timeout
            while True:
                state = await fleet.poll_host(host)
                if state.state is LinkState.UP and ready(state):
                    return state
                assert time.monotonic() < deadline, _jobs_said(state)
                await asyncio.sleep(0.5)
        finally:
            await fleet.close()

    return asyncio.run(run())


@pytest.fixture(scope="module")
def sleeper(slurm_host: Path) -> dict[str, Any]:
    rc = main(["--config", str(slurm_host), "queue", "add", "--name", "sleeper", "--time",
               "10", "box", "--", "sleep", "300"])
    assert rc == 0
    return {}


def _running(state: HostState, name: str) -> Any:
    view = state.view
    return next((j for j in view.jobs if j.name == name and j.state == "running"), None) \
        if view is not None else None


def test_a_running_jobs_gpus_come_from_inside_its_allocation_to_the_room(
        slurm_host: Path, sleeper: dict[str, Any], cluster: slurm_harness.SlurmCluster) -> None:
    def has_gpus(state: HostState) -> bool:
        job = _running(state, "sleeper")
        return bool(job and job.telemetry and job.telemetry.nodes
                    and job.telemetry.nodes[0].gpus)

    state = poll_until(slurm_host, has_gpus)
    assert state.view is not None
    job = _running(state, "sleeper")
    (node,) = job.telemetry.nodes
    assert node.host.hostname == cluster.node and job.telemetry.error is None
    # The replay's two RTX 3090s, as the step saw them, in the room's GPU pane after the
    # login node's own (the replay answers the helper there too).
    rows = gpu_rows(state.view)
    assert [r.name for r in rows][-2:] == [f"{cluster.node} {job.id}: NVIDIA GeForce RTX 3090"] * 2
    assert all(r.mem_total_mib for r in rows[-2:])
    assert node.disks and node.cgroup is not None  # the slurm profile's mounts, on the node
    # The doctor reads the node as a box: its findings are the node's, named with it.
    found = diagnose(None, state.view, LinkState.UP, None, time.time(), host="box")
    assert all(not f.host.startswith("box/") or f.host == f"box/{cluster.node}" for f in found)
    # One probe step at a time: none of ours is left once the answer is in.
    steps = cluster.run("squeue", "--steps", "--noheader", "--format=%i|%j").stdout
    assert steps.count("gpuroom-probe") <= 1, steps


def test_gpuroom_probe_carries_the_jobs_node(
        slurm_host: Path, sleeper: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        assert main(["--config", str(slurm_host), "probe", "box", "--compact"]) == 0
        doc = json.loads(capsys.readouterr().out)
        jobs = doc["queue"]["queues"]["default"]["jobs"]
        tele = next((j.get("telemetry") for j in jobs if j["name"] == "sleeper"), None)
        if tele and tele["nodes"]:
            break
        assert time.monotonic() < deadline, tele
        time.sleep(0.5)
    assert tele["nodes"][0]["gpus"][0]["name"] == "NVIDIA GeForce RTX 3090"
    assert tele["nodes"][0]["cgroup"] is not None and tele["refused"] is False


def test_a_pending_job_says_why_it_waits_and_when_it_should_start(
        slurm_host: Path, sleeper: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    doc = add(capsys, slurm_host, "--name", "wide", "--cpus-per-task", "2", "--time", "10",
              "box", "--", "sleep", "30")

    def waits_with_start(state: HostState) -> bool:
        view = state.view
        job = view.job(doc["job"]) if view is not None else None
        return bool(job and job.state == "queued" and job.reason == "Resources"
                    and job.expected_start)

    state = poll_until(slurm_host, waits_with_start)
    assert state.view is not None
    job = state.view.job(doc["job"])
    found = [f for f in diagnose(None, state.view, LinkState.UP, None, time.time(), host="box")
             if f.id == "SLURM6"]
    assert [f.title for f in found] == [f"job default/{doc['job']} (wide) waits: Resources"]
    assert "the nodes, GPUs or memory it asked for are all in use" in found[0].seen
    assert "expected to start" in found[0].seen and found[0].severity == "info"
    # sleeper's 10-minute limit is what the backfill scheduler plans around.
    assert job.expected_start is not None and job.expected_start > time.time()
    row = next(r for r in job_rows(state, time.time()) if r.id == doc["job"])
    assert "(Resources) starts " in row.slurm
    main(["--config", str(slurm_host), "queue", "kill", "box", doc["job"]])


def test_squeue_long_listing_of_the_cluster_parses(
        slurm_host: Path, sleeper: dict[str, Any], cluster: slurm_harness.SlurmCluster) -> None:
    out = cluster.run("squeue", "-l").stdout
    assert out.splitlines()[0].split()[-1].isdigit()  # the date line, year last
    rows = parse_squeue(out)
    assert rows and all(r["JOBID"] and r["JOBID"].isdigit() for r in rows), out
    assert {r["STATE"] for r in rows} <= {"RUNNING", "PENDING", "COMPLETING"}


@pytest.mark.attack("faults", "a probe step inside a Slurm job does not answer in time")
def test_a_step_that_does_not_answer_in_time_is_cancelled_and_said(
        slurm_host: Path, sleeper: dict[str, Any], cluster: slurm_harness.SlurmCluster) -> None:
    # Last in the module: "tight" shares the box's queue, so its cut-off answers replace
    # sleeper's last good one.
    def cut_off(state: HostState) -> bool:
        job = _running(state, "sleeper")
        return bool(job and job.telemetry and job.telemetry.error
                    and f"did not answer in {TIGHT_S:g}s: cancelled" in job.telemetry.error)

    # "box"'s last watcher (15 s step timeout) may still hold the job's step file: "tight"
    # starts its own only once that one has ended or is judged hung (timeout + grace), which
    # on a loaded 2-core CI machine is most of WAIT_S before "tight" has even begun.
    poll_until(slurm_host, cut_off, host="tight", timeout=WAIT_S + slurm_telemetry.STEP_TIMEOUT_S
               + slurm_telemetry.WATCHER_GRACE_S)
    deadline = time.monotonic() + 30  # KillWait=5 and slurmd's own pace on a loaded box
    while True:  # no probe step of ours outlives its watcher (KillWait bounds a slow end)
        steps = cluster.run("squeue", "--steps", "--noheader", "--format=%i|%j").stdout
        if "gpuroom-probe" not in steps:
            break
        assert time.monotonic() < deadline, steps
        time.sleep(0.5)


def ls(capsys: pytest.CaptureFixture[str], config: Path) -> dict[str, dict[str, Any]]:
    assert main(["--config", str(config), "queue", "ls", "box", "--json"]) == 0
    return {j["id"]: j for j in json.loads(capsys.readouterr().out)["jobs"]}


def test_an_array_of_four_runs_two_at_a_time_and_shows_each_task(
        slurm_host: Path, sleeper: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    # Free the node's second CPU, so only the array's %2 limits it.
    for job in ls(capsys, slurm_host).values():
        if job["state"] in ("running", "queued"):
            main(["--config", str(slurm_host), "queue", "kill", "box", job["id"]])
    capsys.readouterr()
    doc = add(capsys, slurm_host, "--name", "sweep", "--array", "0-3%2", "--time", "10",
              "box", "--", "sh", "-c", 'echo "task $SLURM_ARRAY_TASK_ID of $GPUROOM_JOB_ID"; '
              'if [ "$SLURM_ARRAY_TASK_ID" = 3 ]; then sleep 120; else sleep 2; fi')
    jid = doc["job"]
    most, limited, rows = 0, False, []
    deadline = time.monotonic() + 60
    while True:
        job = ls(capsys, slurm_host)[jid]
        tasks = {t["id"]: t for t in job["tasks"]}
        running = [t for t in tasks.values() if t["state"] == "running"]
        most = max(most, len(running))
        limited = limited or (len(running) == 2 and any(
            t["reason"] == "JobArrayTaskLimit" for t in tasks.values()))
        if tasks.get(f"{jid}_3", {}).get("state") == "running":
            rows = job_rows(poll_until(slurm_host, lambda s: True), time.time())
            break
        assert time.monotonic() < deadline, job
        time.sleep(0.3)
    assert most == 2 and limited, job  # %2: never more than two at once, the rest held
    assert job["state"] == "running" and job["array"] == "0-3%2"
    # The room: the array's row, then one row per task, each with its Slurm id and state.
    mine = [r for r in rows if r.id == jid or r.id.startswith(jid + "_")]
    assert [r.id for r in mine] == [jid, *(f"{jid}_{i}" for i in range(4))]
    assert mine[0].slurm.startswith(f"{doc['slurm_id']} RUNNING") and \
        "array 0-3%2: " in mine[0].slurm
    assert mine[4].slurm.startswith(f"{doc['slurm_id']}_3 RUNNING")
    # Kill one task; the others have ended on their own.
    assert main(["--config", str(slurm_host), "queue", "kill", "box", f"{jid}_3"]) == 0
    capsys.readouterr()
    deadline = time.monotonic() + WAIT_S
    while (job := ls(capsys, slurm_host)[jid])["state"] in ("running", "queued"):
        assert time.monotonic() < deadline, job
        time.sleep(0.3)
    assert [(t["id"], t["state"]) for t in job["tasks"]] == [
        (f"{jid}_0", "succeeded"), (f"{jid}_1", "succeeded"), (f"{jid}_2", "succeeded"),
        (f"{jid}_3", "killed")]
    assert job["state"] == "killed" and job["slurm_state"] == "CANCELLED"
    # Each task has its own log (%a in the batch script's --output).
    assert main(["--config", str(slurm_host), "queue", "logs", "box", f"{jid}_2"]) == 0
    log = capsys.readouterr().out.splitlines()
    assert log[0].startswith(f"=== gpuroom {jid}_2 slurm ") and log[1:] == [f"task 2 of {jid}_2"]
    # Relaunch one task alone: a new Slurm array holding task 0 takes its place in the row.
    assert main(["--config", str(slurm_host), "queue", "relaunch", "box", f"{jid}_0"]) == 0
    capsys.readouterr()
    deadline = time.monotonic() + WAIT_S
    while True:
        job = ls(capsys, slurm_host)[jid]
        task0 = job["tasks"][0]
        if task0["slurm_id"] != f"{doc['slurm_id']}_0" and job["state"] not in (
                "running", "queued"):
            break
        assert time.monotonic() < deadline, job
        time.sleep(0.3)
    assert (task0["id"], task0["state"]) == (f"{jid}_0", "succeeded")
    assert [(t["id"], t["state"]) for t in job["tasks"][1:]] == [
        (f"{jid}_1", "succeeded"), (f"{jid}_2", "succeeded"), (f"{jid}_3", "killed")]
    assert len(job["attempts"]) == 2 and job["slurm_id"] == task0["slurm_id"].split("_")[0]


def test_killing_an_array_cancels_every_task(
        slurm_host: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = add(capsys, slurm_host, "--name", "pair", "--array", "0-1", "--time", "10", "box",
              "--", "sleep", "120")
    deadline = time.monotonic() + WAIT_S
    while ls(capsys, slurm_host)[doc["job"]]["state"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.3)
    assert main(["--config", str(slurm_host), "queue", "kill", "box", doc["job"]]) == 0
    capsys.readouterr()
    job = ls(capsys, slurm_host)[doc["job"]]
    assert job["state"] == "killed" and job["slurm_state"] == "CANCELLED"
    assert {t["state"] for t in job["tasks"]} == {"killed"} and len(job["tasks"]) == 2
