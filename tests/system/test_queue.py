"""The box-side queue end to end: real runner processes, real tmux, real signals."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.queuebox import CLI, Box, alive, queue_box, wait_until

from gpuroom.remote.queue import parse_tmux_ls


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    yield from queue_box(tmp_path)


def test_output_reaches_the_log_while_the_job_runs(box: Box) -> None:
    job = box.add(sys.executable, "-c",
                  "import time\nfor i in range(40):\n    print('tick', i)\n    time.sleep(0.1)")
    log = box.qdir / "logs" / f"{job}.log"
    # Unbuffered (U43): the first tick is in the file long before the job ends.
    wait_until(lambda: log.exists() and b"tick 1\n" in log.read_bytes(), 10, "tick 1 in log")
    assert box.job(job)["state"] == "running"
    out = box.run("logs", job, "--offset", "0").stdout
    assert out.startswith(b"=== gpuroom j") and b"tick 1\n" in out
    box.run("kill", job, "--grace", "1")


def test_kill_takes_the_whole_tree_and_returns_normally(box: Box) -> None:
    # The grandchild ignores SIGTERM, so only the SIGKILL after the grace can end it.
    script = ("import subprocess, os, time\n"
              "p = subprocess.Popen(['sh', '-c', 'trap \"\" TERM; exec sleep 60'])\n"
              "open('tree.pids', 'w').write('%d %d' % (os.getpid(), p.pid))\n"
              "time.sleep(60)\n")
    job = box.add(sys.executable, "-c", script)
    pids_file = box.work / "tree.pids"
    wait_until(lambda: pids_file.exists() and pids_file.read_text().count(" ") == 1, 10,
               "the job's pids")
    child, grandchild = (int(x) for x in pids_file.read_text().split())
    assert alive(child) and alive(grandchild)
    started = time.monotonic()
    proc = box.run("kill", job, "--grace", "1", check=False)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["ok"] is True and answer["result"] == "killed"
    assert answer["event"]["sent"] == "SIGKILL"
    assert not alive(child) and not alive(grandchild)
    assert took < 10
    final = box.job(job)
    assert final["state"] == "killed" and final["attempts"][0]["end_reason"] == "killed"


def test_relaunch_reruns_a_byte_identical_argv(box: Box) -> None:
    weird = ["it's \"quoted\"", "$HOME $(id) `x`", "a; rm -rf /nope", "two\nlines",
             "naïve ☃ 漢字", "", "--flag=-1", "back\\slash"]
    dump = ("import os, sys\n"
            "with open('argv.bin', 'ab') as f:\n"
            "    f.write(b'\\0'.join(os.fsencode(a) for a in sys.argv[1:]) + b'\\n--\\n')\n")
    job = box.add(sys.executable, "-c", dump, *weird)
    box.wait_state(job, ("succeeded",))
    answer = box.json("relaunch", job)
    assert answer["result"] == "requeued"
    wait_until(lambda: len(box.job(job)["attempts"]) == 2
               and box.job(job)["state"] == "succeeded", 15, "second attempt done")
    record = b"\0".join(a.encode("utf-8") for a in weird) + b"\n--\n"
    assert (box.work / "argv.bin").read_bytes() == record * 2
    assert box.job(job)["argv"][3:] == weird


def test_relaunch_of_a_running_job_is_refused(box: Box) -> None:
    job = box.add("sleep", "30")
    box.wait_state(job, ("running",))
    proc = box.run("relaunch", job, check=False)
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["result"] == "rejected"
    box.run("kill", job, "--grace", "1")


@pytest.mark.attack("faults", "runner kill9 mid job leaves an exact record")
@pytest.mark.parametrize("finish_while_dead", [False, True])
def test_runner_kill9_mid_job_leaves_an_exact_record(box: Box, finish_while_dead: bool) -> None:
    job = box.add("sh", "-c", "echo ran >> runs.txt; sleep 1.5; echo done")
    box.wait_state(job, ("running",))
    box.kill_runner_9()
    if finish_while_dead:
        wait_until(lambda: list((box.qdir / "run").glob(f"{job}.1.exit")), 10, "exit file")
    box.json("start")
    final = box.wait_state(job, ("succeeded", "failed"))
    assert final["state"] == "succeeded"
    kinds = [e["ev"] for e in box.events(job)]
    assert kinds == ["added", "launching", "started", "exited"]
    assert len(final["attempts"]) == 1 and final["attempts"][0]["exit_code"] == 0
    assert (box.work / "runs.txt").read_text() == "ran\n"
    log = (box.qdir / "logs" / f"{job}.log").read_bytes()
    # One attempt started and one ended, each said once on its own line.
    assert log.count(f"=== gpuroom {job} attempt ".encode()) == 1
    assert re.search(rb"\ndone\n=== gpuroom: attempt 1 ended: exit 0 after [\d.]+ s ===\n$", log)


@pytest.mark.attack("faults", "runner death inside a launch runs the job exactly once")
@pytest.mark.parametrize("point", ["after_launching", "after_spawn"])
def test_runner_death_inside_a_launch_runs_the_job_exactly_once(box: Box, point: str) -> None:
    crash_env = dict(box.env, GPUROOM_QUEUE_CRASH_AT=point)
    job = box.add("sh", "-c", "echo ran >> runs.txt; sleep 0.3", env=crash_env)
    wait_until(lambda: not box.ls()["runner"]["alive"]
               and any(e["ev"] == "launching" for e in box.events(job)), 10, "the crash")
    box.json("start")
    final = box.wait_state(job, ("succeeded",))
    wait_until((box.work / "runs.txt").exists, 5, "the job's run")
    time.sleep(0.5)  # an abandoned wrapper, had it run, would have written by now
    assert (box.work / "runs.txt").read_text() == "ran\n"
    kinds = [e["ev"] for e in box.events(job)]
    if point == "after_launching":
        assert kinds == ["added", "launching", "requeued", "launching", "started", "exited"]
        assert [a["end_reason"] for a in final["attempts"]] == ["launch_interrupted", "exited"]
    else:
        assert kinds == ["added", "launching", "started", "exited"]
        assert box.events(job)[2]["recovered"] is True


@pytest.mark.attack("faults", "simulated reboot requeues orphaned jobs")
def test_simulated_reboot_requeues_orphaned_jobs(box: Box) -> None:
    env_a = dict(box.env, GPUROOM_BOOT_ID="boot-A")
    job = box.add("sh", "-c", "if [ -e again ]; then echo second; exit 0; fi; touch again; "
                  "sleep 30", opts=("--retries", "1"), env=env_a)
    first = box.wait_state(job, ("running",))
    pid = first["attempts"][0]["pid"]
    # "running" is recorded when the wrapper starts the shell, which may not have run its
    # first command yet: killed before `touch again`, the retry would sleep 30 s too (a CI
    # run under load timed out here).
    wait_until((box.work / "again").exists, 10, "the first attempt's marker")
    # A reboot takes the runner and the job with it, and no exit status is written.
    box.kill_runner_9()
    os.killpg(pid, 9)
    wait_until(lambda: not alive(pid), 5, "job gone")
    box.json("start", env=dict(box.env, GPUROOM_BOOT_ID="boot-B"))
    final = box.wait_state(job, ("succeeded",))
    kinds = [e["ev"] for e in box.events(job)]
    assert kinds == ["added", "launching", "started", "orphaned_by_reboot", "requeued",
                     "launching", "started", "exited"]
    orphan = next(e for e in box.events(job) if e["ev"] == "orphaned_by_reboot")
    assert orphan["old_boot_id"] == "boot-A" and orphan["boot_id"] == "boot-B"
    assert [a["boot_id"] for a in final["attempts"]] == ["boot-A", "boot-B"]
    assert [a["end_reason"] for a in final["attempts"]] == ["orphaned_by_reboot", "exited"]


def test_dead_wrapper_under_the_same_boot_is_vanished_and_not_retried_without_retries(
        box: Box) -> None:
    job = box.add("sleep", "30")
    pid = box.wait_state(job, ("running",))["attempts"][0]["pid"]
    box.kill_runner_9()
    os.killpg(pid, 9)
    wait_until(lambda: not alive(pid), 5, "job gone")
    box.json("start")
    final = box.wait_state(job, ("failed",))
    assert final["attempts"][0]["end_reason"] == "vanished"
    assert "without an exit status" in final["reason"]


@pytest.mark.attack("faults", "torn last line still loads")
def test_torn_last_line_still_loads(box: Box) -> None:
    job = box.add("true")
    box.wait_state(job, ("succeeded",))
    events = box.qdir / "events.jsonl"
    with open(events, "ab") as f:
        f.write(b'{"seq": 99, "ev": "added", "argv": ["tru')
    doc = box.ls()
    assert any("torn last line" in w for w in doc["warnings"])
    assert box.job(job)["state"] == "succeeded"
    # The next writer starts on a fresh line, so only the torn line is lost.
    job2 = box.add("true")
    box.wait_state(job2, ("succeeded",))
    doc = box.ls()
    assert [j["id"] for j in doc["jobs"]] == [job, job2]
    assert len(doc["warnings"]) == 1 and "unreadable" in doc["warnings"][0]


@pytest.mark.attack("faults", "two runners at once one wins")
def test_two_runners_at_once_one_wins(box: Box) -> None:
    box.add("true", opts=("--no-start",))
    args = [*CLI, "runner", "--idle-exit", "1"]
    procs = [subprocess.Popen(args, env=box.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(2)]
    box.children.extend(procs)
    results = []
    for p in procs:
        _out, err = p.communicate(timeout=20)
        results.append((p.returncode, err.decode()))
    codes = sorted(rc for rc, _ in results)
    assert codes == [0, 3]
    loser = next(err for rc, err in results if rc == 3)
    assert "already has a runner" in loser


def test_retries_on_signal_death_but_not_on_exit_code(box: Box) -> None:
    flaky = box.add("sh", "-c", "if [ ! -e once ]; then touch once; kill -9 $$; fi; exit 0",
                    opts=("--retries", "2"))
    final = box.wait_state(flaky, ("succeeded",), timeout=20)
    assert [(a["signal"], a["exit_code"]) for a in final["attempts"]] == [("SIGKILL", None),
                                                                         (None, 0)]
    assert final["retries_used"] == 1
    failing = box.add("sh", "-c", "exit 3", opts=("--retries", "2"))
    final = box.wait_state(failing, ("failed",))
    time.sleep(0.5)
    final = box.job(failing)
    assert final["state"] == "failed" and len(final["attempts"]) == 1
    retried = box.add("sh", "-c", "exit 3", opts=("--retries", "1", "--retry-on-exit"))
    wait_until(lambda: len(box.job(retried)["attempts"]) == 2
               and box.job(retried)["state"] == "failed", 15, "two failed attempts")


def test_job_environment_caps_threads_to_the_cgroup_quota(box: Box, tmp_path: Path) -> None:
    cg = tmp_path / "cgroup"
    cg.mkdir()
    (cg / "cgroup.controllers").write_text("cpu memory\n")
    (cg / "cpu.max").write_text("250000 100000\n")  # 2.5 vCPUs -> 2 threads
    env = dict(box.env, GPUROOM_CGROUP_ROOT=str(cg))
    box.json("config", "--slots", "2", env=env)
    show = ("import json, os\n"
            "keys = ['OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'PYTHONUNBUFFERED', 'GPUROOM_JOB_ID',"
            " 'GPUROOM_CKPT_DIR', 'CUDA_VISIBLE_DEVICES', 'MINE']\n"
            "import gpuroom.remote.queue_events\n"
            "open(os.environ['GPUROOM_JOB_ID'] + '.env', 'w').write("
            "json.dumps({k: os.environ.get(k) for k in keys}))\n")
    # The box's plain python3, not the venv: PYTHONPATH alone must make gpuroom importable.
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    capped = box.add(python, "-c", show, opts=("--env", "MINE=x=y"), env=env)
    own = box.add(python, "-c", show, opts=("--env", "OMP_NUM_THREADS=7", "--gpus", "0"),
                  env=env)
    for job in (capped, own):
        box.wait_state(job, ("succeeded",))
    got = json.loads((box.work / f"{capped}.env").read_text())
    assert got == {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "PYTHONUNBUFFERED": "1",
                   "GPUROOM_JOB_ID": capped,
                   "GPUROOM_CKPT_DIR": str(box.root / "ckpt" / "default" / capped),
                   "CUDA_VISIBLE_DEVICES": None, "MINE": "x=y"}
    got = json.loads((box.work / f"{own}.env").read_text())
    assert got["OMP_NUM_THREADS"] == "7" and got["MKL_NUM_THREADS"] == "2"
    assert got["CUDA_VISIBLE_DEVICES"] == ""  # asked for 0 GPUs: sees none


def test_checked_sync_records_synced_only_after_verifying(box: Box, tmp_path: Path) -> None:
    durable = tmp_path / "durable"
    job = box.add("sh", "-c",
                  "mkdir -p out && printf weights > out/model.bin && echo x > out/a.txt",
                  opts=("--output", "out/*.bin", "--durable-dir", str(durable)))
    final = wait_until(lambda: (box.job(job).get("sync") or {}).get("state") in
                       ("synced", "failed") and box.job(job), 15, "sync outcome")
    assert final["sync"]["state"] == "synced", final["sync"]
    assert (durable / "out" / "model.bin").read_bytes() == b"weights"
    assert not (durable / "out" / "a.txt").exists()
    import hashlib

    files = final["sync"]["files"]
    assert files == [{"path": "out/model.bin", "size": 7,
                      "sha256": hashlib.sha256(b"weights").hexdigest()}]
    assert final["attempts"][0]["exit_code"] == 0


@pytest.mark.attack("faults", "sync failure is recorded not hidden")
def test_sync_failure_is_recorded_not_hidden(box: Box, tmp_path: Path) -> None:
    blocked = tmp_path / "durable-is-a-file"
    blocked.write_text("not a directory")  # mkdir under it fails, like an inode-full disk
    missing = box.add("true", opts=("--output", "nothing/*.pt", "--durable-dir",
                                    str(tmp_path / "d2")))
    unwritable = box.add("sh", "-c", "echo w > w.bin",
                         opts=("--output", "w.bin", "--durable-dir", str(blocked)))
    for job, needle in ((missing, "matched nothing"), (unwritable, "Error")):
        final = wait_until(lambda j=job: (box.job(j).get("sync") or {}).get("state") in
                           ("synced", "failed") and box.job(j), 15, "sync outcome")
        assert final["sync"]["state"] == "failed"
        assert needle in final["sync"]["reason"]
        assert final["state"] == "succeeded"  # the run itself was fine; the copy was not
    kinds = [e["ev"] for e in box.events(unwritable)]
    assert "sync_failed" in kinds and "synced" not in kinds


def test_start_detaches_with_tmux_when_present(box: Box) -> None:
    box.add("sleep", "30", opts=("--no-start",))
    doc = box.json("start")
    assert doc["method"] == "tmux" and doc["session"] == "gpuroom-default"
    ls = subprocess.run(["tmux", "-L", box.socket, "ls"], env=box.env, capture_output=True,
                        text=True, check=True, timeout=10).stdout
    names = [s["name"] for s in parse_tmux_ls(ls)]
    assert "gpuroom-default" in names
    assert box.ls()["runner"]["alive"] is True
    box.run("kill", "j2", "--grace", "1")


def test_start_falls_back_to_setsid_without_tmux(box: Box, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "sleep", "true"):
        os.symlink(shutil.which(tool) or f"/bin/{tool}", bin_dir / tool)
    env = dict(box.env, PATH=str(bin_dir))
    job = box.add("sleep", "30", env=env)
    pid = box.wait_runner()
    # Own session (setsid): a dropped SSH channel's SIGHUP cannot reach it (GEN2).
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    assert int(stat[stat.rfind(b")") + 2:].split()[3]) == pid
    assert subprocess.run(["tmux", "-L", box.socket, "ls"], env=box.env, capture_output=True,
                          check=False, timeout=10).returncode != 0
    assert Path(f"/proc/{pid}/fd/0").resolve() == Path("/dev/null")
    box.run("kill", job, "--grace", "1")


@pytest.mark.attack("faults", "kill with a dead runner starts one that adopts and kills")
def test_kill_with_a_dead_runner_starts_one_that_adopts_and_kills(box: Box) -> None:
    job = box.add("sleep", "30")
    pid = box.wait_state(job, ("running",))["attempts"][0]["pid"]
    box.kill_runner_9()
    assert alive(pid)
    answer = box.json("kill", job, "--grace", "1")
    assert answer["result"] == "killed"
    wait_until(lambda: not alive(pid), 5, "wrapper gone")
    kinds = [e["ev"] for e in box.events(job)]
    assert kinds == ["added", "launching", "started", "kill_requested", "killed"]


def test_gpu_slots_skip_a_card_a_foreign_process_holds(box: Box, tmp_path: Path) -> None:
    inventory = tmp_path / "gpus.json"
    # GPU 1 is held by pid 1: not one of the queue's jobs (GEN7).
    inventory.write_text(json.dumps({"gpus": [
        {"index": 0, "processes": []}, {"index": 1, "processes": [{"pid": 1}]}]}))
    env = dict(box.env, GPUROOM_GPUS_JSON=str(inventory))
    box.json("config", "--slots", "2", env=env)
    show = "echo $CUDA_VISIBLE_DEVICES > $GPUROOM_JOB_ID.cuda; sleep 0.5"
    first = box.add("sh", "-c", show, env=env, opts=("--no-start",))
    second = box.add("sh", "-c", show, env=env, opts=("--no-start",))
    big = box.add("true", env=env, opts=("--gpus", "3", "--no-start"))
    box.json("start", env=env)
    a = box.wait_state(first, ("succeeded",))
    b = box.wait_state(second, ("succeeded",))
    assert (box.work / f"{first}.cuda").read_text() == "0\n"
    assert (box.work / f"{second}.cuda").read_text() == "0\n"
    # One free card, two slots: the second waited for the first.
    assert b["attempts"][0]["start"] >= a["attempts"][0]["end"]
    too_big = box.wait_state(big, ("failed",))
    assert "needs 3 GPUs" in too_big["reason"]


def test_reboot_hook_needs_crontab_and_is_idempotent(box: Box, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = dict(box.env, PATH=str(bin_dir))
    proc = box.run("install-reboot-hook", env=env, check=False)
    assert proc.returncode == 2
    assert "crontab is not installed" in json.loads(proc.stdout)["error"]
    # cron itself is not installed here; a stand-in keeps the table in a file.
    table = tmp_path / "crontab.txt"
    table.write_text("MAILTO=\"\"\n0 * * * * echo keep\n")
    fake = bin_dir / "crontab"
    cat = shutil.which("cat") or "/bin/cat"
    fake.write_text(f"#!/bin/sh\nif [ \"$1\" = -l ]; then {cat} {table}; "
                    f"else {cat} > {table}; fi\n")
    fake.chmod(0o755)
    first = box.json("install-reboot-hook", env=env)
    second = box.json("install-reboot-hook", env=env)
    assert first["changed"] is True and second["changed"] is False
    lines = table.read_text().splitlines()
    assert lines[:2] == ["MAILTO=\"\"", "0 * * * * echo keep"]
    assert len(lines) == 3 and lines[2].startswith("@reboot ")
    assert " queue start --root " in lines[2] and "--queue default" in lines[2]


def test_vram_ask_is_recorded_for_the_doctor(box: Box) -> None:
    from gpuroom.tui.rules.doctor import job_findings
    from gpuroom.tui.snapshot import read_snapshot

    # A GPU job is added only where the runner sees a card (issue 19: U31).
    inventory = box.work / "gpus.json"
    inventory.write_text(json.dumps({"gpus": [{"index": 0, "processes": []}]}))
    env = dict(box.env, GPUROOM_GPUS_JSON=str(inventory))
    doc = box.json("add", "--no-start", "--vram-mib", "40000", "--gpus", "1", "--", "true",
                   env=env)
    jobs = box.json("ls")["jobs"]
    job = next(j for j in jobs if j["id"] == doc["job"])
    assert job["vram_mib"] == 40000 and job["state"] == "queued"
    # The same record in a snapshot beside a nearly full 80 GB card: U10.
    full = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "mem_used_mib": 70000.0,
            "mem_total_mib": 81559.0}
    snap = {"gpus": [full], "queue": {"queues": {"default": {"jobs": [job]}}}}
    assert [f.id for f in job_findings("box", None, read_snapshot(snap))] == ["U10"]


def test_runner_session_stays_off_the_users_own_tmux(box: Box, tmp_path: Path) -> None:
    # gpuroom run inside the user's tmux (the local host): $TMUX names the user's server.
    # The runner belongs on the default server (TMUX_TMPDIR here), never in the user's.
    user_sock = tmp_path / "user-tmux.sock"
    tmux = shutil.which("tmux")
    assert tmux is not None
    subprocess.run([tmux, "-S", str(user_sock), "-f", "/dev/null", "new-session", "-d",
                    "-s", "mine", "sleep", "60"], check=True, timeout=10)
    env = dict(box.env)
    env.pop("GPUROOM_TMUX_SOCKET")
    env["TMUX"] = f"{user_sock},1,0"
    try:
        doc = box.json("add", "--", "sleep", "5", env=env)
        assert doc["runner"]["method"] == "tmux"
        user = subprocess.run([tmux, "-S", str(user_sock), "ls", "-F", "#{session_name}"],
                              capture_output=True, text=True, timeout=10,
                              check=True).stdout.split()
        plain = {k: v for k, v in env.items() if k != "TMUX"}
        default = subprocess.run([tmux, "ls", "-F", "#{session_name}"], env=plain,
                                 capture_output=True, text=True, timeout=10,
                                 check=True).stdout.split()
        assert user == ["mine"]
        assert "gpuroom-default" in default
    finally:
        subprocess.run([tmux, "-S", str(user_sock), "kill-server"], timeout=10, check=False)
        plain = {k: v for k, v in env.items() if k != "TMUX"}
        subprocess.run([tmux, "kill-server"], env=plain, timeout=10, check=False,
                       capture_output=True)


def test_display_processes_hold_no_gpu_and_a_waiting_job_says_why(
        box: Box, tmp_path: Path, fixtures: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 17 item 9. GPU 0 as the real capture shows it: Xorg and gnome-shell (type G) on
    # it, which is no run to collide with; GPU 1 held by a foreign compute process (GEN7).
    from gpuroom.remote.gpu import parse_nvsmi_table
    from gpuroom.tui.cli.queue import _print_jobs

    text = (fixtures / "nvsmi_table" / "driver460-gtx1080-with-processes.txt").read_text()
    capture = parse_nvsmi_table(text.split("\n---\n", 1)[-1])
    display = [p for p in capture["processes"] if p["gpu"] == 0]
    assert {p["type"] for p in display} == {"G"}
    inventory = tmp_path / "gpus.json"
    inventory.write_text(json.dumps({"gpus": [
        {"index": 0, "processes": display},
        {"index": 1, "processes": [{"pid": 1, "type": "C"}]}]}))
    env = dict(box.env, GPUROOM_GPUS_JSON=str(inventory))
    box.json("config", "--slots", "2", "--idle-exit", "30", env=env)
    first = box.add("sleep", "30", env=env, opts=("--no-start",))
    second = box.add("true", env=env, opts=("--no-start",))
    third = box.add("true", env=env, opts=("--no-start",))
    assert box.job(first)["waiting"].startswith("no runner")
    box.json("start", env=env)
    assert box.wait_state(first, ("running",))["attempts"][0]["gpus"] == [0]

    def reasons() -> list[str] | None:
        jobs = {j["id"]: j for j in box.ls()["jobs"]}
        got = [jobs[second]["waiting"], jobs[third]["waiting"]]
        return got if all(got) else None

    assert wait_until(reasons, 10, "wait reasons") == [
        "GPU 1 held by pid 1 (GEN7); wants 1 GPU(s), 0 free", f"waiting behind {second}"]
    monkeypatch.setenv("COLUMNS", "200")  # rich's width: one line per row
    _print_jobs(box.ls())
    out = capsys.readouterr().out
    assert "waits for" in out and "held by pid 1" in out
    box.json("config", "--slots", "1", env=env)
    slot = [f"waiting for a slot (1 of 1 in use: {first})"] * 2
    wait_until(lambda: reasons() == slot, 10, "the reasons of one slot")
    box.run("kill", first, "--grace", "1")


@pytest.mark.parametrize(("opts", "said"), [((), "not set"), (("--gpus", "0"),
                                                                "none (GPUs hidden)")])
def test_the_attempt_header_says_what_cuda_the_job_got_in_words(
        box: Box, opts: tuple[str, ...], said: str) -> None:
    """A job on this GPU-less machine had "cuda=None" in its log's header (Python's word),
    one given no GPU had "cuda=" (an empty value that reads as a cut line)."""
    job = box.add("true", opts=opts)
    box.wait_state(job, ("succeeded",))
    header = (box.qdir / "logs" / f"{job}.log").read_text().splitlines()[0]
    assert header.startswith(f"=== gpuroom {job} attempt 1 "), header
    assert header.endswith(f" cuda={said} ==="), header
