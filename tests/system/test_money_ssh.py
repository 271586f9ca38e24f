"""Issue 19 items 1-4 and 8 over the real sshd: what costs money reaches `gpuroom doctor`,
its banner and the room's findings (FleetWatch), from the real helper and a real queue.

The box is the test sshd's user. Its helper runs with the GPU boundary replayed (the fake
nvidia-smi printing real captures, or answering "driver not loaded" as a box without a working
driver does) and the kernel log replayed from a real dmesg capture (tests/fakes/dmesg), set the
way a box finds them: $GPUROOM_NVIDIA_SMI / $GPUROOM_DMESG in the helper's environment. Jobs are
real processes under the real runner; their CPU time is read from /proc by the helper.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import tomllib
from fakes import NVIDIA_SMI
from harness.boxenv import python_with_env
from harness.monitorbox import helper_queue_ls
from paths import ROOT

from gpuroom.tui.cli.main import main
from gpuroom.tui.config import load
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.rules.watch import FleetWatch

FAKE_DMESG = ROOT / "tests" / "fakes" / "dmesg"
# Two RTX 3090s at 1 % and 0 % util (no power column: idle is read from util), and a process
# table with none of the job's processes on them.
IDLE_GPUS = ("query_gpu/2x-rtx3090-driver515-csv-header.txt",
             "nvsmi_table/driver570-rtx5090-no-processes.txt")
XID94 = "dmesg_xid/gpud1174-1160-kmsg-xid144-145-149-94.txt"
XID13 = "dmesg_xid/gpud46-dmesg-ctime-xid13-xid109.txt"
# A box that lists one GPU (a GeForce RTX 2060): put in place of IDLE_GPUS' two RTX 3090s
# between polls, it is what nvidia-smi prints once a card has fallen off the bus.
ONE_GPU = "query_gpu/rtx2060-driver460-csv-header.txt"
# A real table whose processes box lists a compute process on every GPU (7-digit pids).
WITH_PROCESSES = "nvsmi_table/driver535-8xH100-with-processes.txt"
# A desktop's table: Xorg and gnome-shell (type G) on GPU 0, no compute process.
DESKTOP = "nvsmi_table/driver460-gtx1080-with-processes.txt"
WAIT_S = 30.0

Make = Callable[..., Path]


@pytest.fixture
def money_box(sshd_box: Any, fixtures: Path, tmp_path: Path) -> Iterator[Make]:
    """``make(gpus=..., dmesg=..., **host)``: hosts.toml for the test box whose helper sees
    the captures named (``gpus=None``: a box whose driver does not answer)."""
    user = pwd.getpwnam(sshd_box.user)
    root = sshd_box.home / "gpuroom-money-test"

    def make(*, gpus: tuple[str, ...] | None = IDLE_GPUS, dmesg: str | None = None,
             path_dirs: tuple[str, ...] = (), env: dict[str, str] | None = None,
             **host: Any) -> Path:
        shutil.rmtree(root, ignore_errors=True)
        (root / "work").mkdir(parents=True)
        for rel in (*(gpus or ()), *((dmesg,) if dmesg else ())):
            (root / "fixtures" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(fixtures / rel, root / "fixtures" / rel)
        shutil.copy(NVIDIA_SMI, root / "nvidia-smi")
        shutil.copy(FAKE_DMESG, root / "dmesg")
        box_env = {"GPUROOM_NVIDIA_SMI": str(root / "nvidia-smi"),
                   "GPUROOM_FIXTURES": str(root / "fixtures"),
                   "GPUROOM_DMESG": str(root / "dmesg"), "GPUROOM_HOME": str(root / "home"),
                   "PATH": ":".join([*path_dirs, "/usr/local/bin", "/usr/bin", "/bin"]),
                   **(env or {})}
        if gpus:
            box_env["GPUROOM_FAKE_NVSMI"] = ":".join(gpus)
        if dmesg:
            box_env["GPUROOM_FAKE_DMESG_CAPTURE"] = str(root / "fixtures" / dmesg)
        else:
            box_env["GPUROOM_FAKE_DMESG_CAPTURE"] = "/dev/null"
        wrapper = python_with_env(root / "python3", box_env)
        for path in (root, *root.rglob("*")):
            os.chown(path, user.pw_uid, user.pw_gid)
        config = tmp_path / "hosts.toml"
        config.write_bytes(tomli_w.dumps({
            "settings": {"ssh_config": str(sshd_box.ssh_config)},
            "hosts": {"box": {"ssh": sshd_box.alias, "python": str(wrapper), **host}}}).encode())
        config.chmod(0o600)
        return config

    made: list[Path] = []
    try:
        yield lambda **kw: made.append(make(**kw)) or made[-1]
    finally:
        # The runner and its jobs live outside sshd's tree: end each by its id.
        for config in made[-1:]:
            runner, pgids = box_pids(config)
            for pgid in pgids:
                sshd_box.run("kill", "-KILL", "--", f"-{pgid}")
            if runner is not None:
                sshd_box.run("kill", str(runner))
        shutil.rmtree(root, ignore_errors=True)


def box_pids(config: Path) -> tuple[int | None, list[int]]:
    """The live runner's pid and the process groups of the jobs it runs (queue ls)."""
    doc = helper_queue_ls(config)
    runner = doc.get("runner") or {}
    pgids = [j["attempts"][-1]["pid"] for j in doc.get("jobs", [])
             if j["state"] in ("launching", "running") and j.get("attempts")
             and j["attempts"][-1].get("pid")]
    return (runner.get("pid") if runner.get("alive") else None), pgids


def wait_for(ready: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _work(config: Path) -> Path:
    return Path(load(config).hosts["box"].python).parent / "work"


def doctor(config: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    main(["--config", str(config), "doctor", "--json"])
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def ids(doc: dict[str, Any], fid: str) -> list[dict[str, Any]]:
    return [f for f in doc["findings"] if f["id"] == fid]


def queue(config: Path, capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """``gpuroom queue VERB HOST ... --json``: the box's answer."""
    verb, host, *rest = args
    assert main(["--config", str(config), "queue", verb, host, "--json", *rest]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out.splitlines()[-1])
    return doc


def _one_line(text: str) -> str:
    """A failed verb's line as printed (the console wraps it at the terminal width)."""
    return " ".join(text.split())


def running(config: Path, job: str, states: tuple[str, ...] = ("running",)) -> None:
    """Poll until ``job`` is in one of ``states`` (running: with some log written)."""
    async def poll() -> None:
        fleet = Fleet(load(config))
        try:
            deadline = time.monotonic() + WAIT_S
            while True:
                view = (await fleet.poll_host("box")).view
                j = view.job(job) if view is not None else None
                if j is not None and j.state in states and (
                        j.state != "running" or (j.log_chunk is not None and j.log_chunk.size)):
                    return
                assert time.monotonic() < deadline, j
                await asyncio.sleep(0.3)
        finally:
            await fleet.close()
    asyncio.run(poll())


def sleeping_job(config: Path, capsys: pytest.CaptureFixture[str], gpus: str) -> str:
    """A job asking for ``gpus`` that prints one line and sleeps (its pid the attempt's,
    exec'd), once it runs."""
    job: str = queue(config, capsys, "add", "box", "--gpus", gpus, "--",
                     "sh", "-c", "echo up; exec sleep 120")["job"]
    running(config, job)
    return job


async def watch_polls(config: Path, n: int, gap_s: float, *,
                      restart_runners: bool = False) -> tuple[FleetWatch, Fleet]:
    """``n`` polls of the box fed to the room's FleetWatch, as the room does."""
    fleet = Fleet(load(config), restart_runners=restart_runners)
    watch = FleetWatch()
    try:
        for i in range(n):
            if i:
                await asyncio.sleep(gap_s)
            state = await fleet.poll_host("box")
            watch.observe(state, time.time())
    finally:
        await fleet.close()
    return watch, fleet


# --------------------------------------------------------------------------- item 1: stall

@pytest.mark.sshd
def test_a_hung_job_on_idle_gpus_is_a_stall_in_the_doctor_and_its_banner(
        money_box: Make, capsys: pytest.CaptureFixture[str]) -> None:
    config = money_box(stall_after_min=0.02, price_per_hour=2.0)  # 1.2 s
    job = sleeping_job(config, capsys, "0")
    time.sleep(4.0)  # three thresholds with no write: critical
    doc = doctor(config, capsys)
    (stall,) = ids(doc, "U16")
    assert stall["severity"] == "critical" and f"job {job}" in stall["title"]
    assert "burnt since it stalled" in stall["seen"]
    assert any("stalled while billing" in line for line in doc["banner"])


@pytest.mark.sshd
def test_a_job_that_still_writes_its_log_is_not_stalled(
        money_box: Make, capsys: pytest.CaptureFixture[str]) -> None:
    config = money_box(stall_after_min=0.02)
    job = queue(config, capsys, "add", "box", "--gpus", "0", "--",
                "sh", "-c", "while :; do echo eval; sleep 0.2; done")["job"]
    running(config, job)
    time.sleep(2.0)
    assert ids(doctor(config, capsys), "U16") == []


@pytest.mark.sshd
def test_a_busy_cpu_job_is_not_stalled_a_sleeping_one_is(
        money_box: Make, capsys: pytest.CaptureFixture[str]) -> None:
    # No GPU on this box: only the CPU seconds of the job's process group can tell.
    config = money_box(gpus=None, stall_after_min=0.02)
    busy = queue(config, capsys, "add", "box", "--gpus", "0", "--",
                 "sh", "-c", "echo go; while :; do :; done")["job"]
    running(config, busy)
    time.sleep(2.0)
    watch, _ = asyncio.run(watch_polls(config, 2, 1.0))
    assert [f for f in watch.findings("box") if f.id == "U16"] == []
    queue(config, capsys, "kill", "box", busy)
    idle = queue(config, capsys, "add", "box", "--gpus", "0", "--",
                 "sh", "-c", "echo go; exec sleep 120")["job"]
    running(config, idle)
    time.sleep(2.0)
    watch, _ = asyncio.run(watch_polls(config, 2, 1.0))
    (stall,) = [f for f in watch.findings("box") if f.id == "U16"]
    assert f"job {idle}" in stall.title and "CPU 0.0" in stall.seen


# --------------------------------------------------------------------------- item 2: U31

@pytest.mark.sshd
def test_a_gpu_rental_whose_driver_does_not_answer_is_critical_and_refuses_gpu_jobs(
        money_box: Make, capsys: pytest.CaptureFixture[str]) -> None:
    config = money_box(gpus=None, profile="runpod")
    (u31,) = ids(doctor(config, capsys), "U31")
    assert u31["severity"] == "critical" and "couldn't communicate with the NVIDIA" in u31["seen"]
    code = main(["--config", str(config), "queue", "add", "box", "--gpus", "1", "--",
                 "python3", "train.py"])
    err = _one_line(capsys.readouterr().err)
    assert code == 1 and "asks for 1 GPU(s) but this box has none" in err
    assert "couldn't communicate with the NVIDIA driver" in err and "--gpus 0" in err


@pytest.mark.sshd
def test_a_box_with_gpus_takes_a_gpu_job_and_is_no_u31(
        money_box: Make, capsys: pytest.CaptureFixture[str]) -> None:
    config = money_box(profile="runpod")
    assert ids(doctor(config, capsys), "U31") == []
    assert queue(config, capsys, "add", "box", "--gpus", "1", "--", "true")["ok"] is True


def _without(config: Path, key: str) -> Path:
    """A copy of ``config`` whose box lacks ``key`` (its default applies)."""
    doc = tomllib.loads(config.read_text())
    del doc["hosts"]["box"][key]
    other = config.with_name("hosts-default.toml")
    other.write_bytes(tomli_w.dumps(doc).encode())
    other.chmod(0o600)
    return other


@pytest.mark.sshd
def test_a_gpu_job_with_no_process_on_its_gpu_trains_on_the_cpu_over_sshd(
        money_box: Make, capsys: pytest.CaptureFixture[str]) -> None:
    # The replay's process table lists nothing: the job never reaches its GPU.
    config = money_box(cpu_training_after_min=0.02, price_per_hour=2.0)  # 1.2 s
    job = sleeping_job(config, capsys, "1")
    time.sleep(2.0)
    doc = doctor(config, capsys)
    (u31,) = ids(doc, "U31")
    assert u31["severity"] == "critical" and f"job {job}" in u31["title"]
    assert "trains on the CPU" in u31["title"] and "and at idle power" in u31["seen"]
    assert "torch.cuda.is_available()" in u31["fix"]
    assert any("trains on the CPU" in line for line in doc["banner"])
    # The same box with the default window (5 min): two seconds in, nothing is said yet.
    assert ids(doctor(_without(config, "cpu_training_after_min"), capsys), "U31") == []


@pytest.mark.sshd
def test_a_desktops_xorg_on_the_gpu_does_not_hide_cpu_training(
        money_box: Make, capsys: pytest.CaptureFixture[str]) -> None:
    # The real table of a desktop: Xorg and gnome-shell (type G) on GPU 0, nothing else.
    config = money_box(gpus=(IDLE_GPUS[0], DESKTOP), cpu_training_after_min=0.02)
    job = sleeping_job(config, capsys, "1")
    (listed,) = queue(config, capsys, "ls", "box")["jobs"]
    assert listed["attempts"][-1]["gpus"] == [0]  # display processes hold no GPU (GEN7)
    time.sleep(2.0)
    (u31,) = ids(doctor(config, capsys), "U31")
    assert u31["severity"] == "critical" and f"job {job}" in u31["title"]
    assert "no compute process on GPU 0" in u31["seen"]


@pytest.mark.sshd
def test_a_gpu_job_whose_process_is_in_the_replays_list_is_not_on_the_cpu(
        money_box: Make, fixtures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = money_box(cpu_training_after_min=0.02)
    job = sleeping_job(config, capsys, "1")
    (listed,) = queue(config, capsys, "ls", "box")["jobs"]
    assert listed["id"] == job
    attempt = listed["attempts"][-1]
    (gpu,) = attempt["gpus"]
    # The table nvidia-smi prints from now on: the real 8x H100 capture, its process on the
    # job's GPU given the job's pid (exec'd sleep: the attempt's pid), as the driver lists it.
    text = (fixtures / WITH_PROCESSES).read_text(encoding="utf-8")
    row = re.compile(rf"^(\|\s+{gpu}\s+N/A\s+N/A\s+)(\d+)", re.MULTILINE)
    text, n = row.subn(lambda m: m.group(1) + str(attempt["pid"]).rjust(len(m.group(2))), text)
    assert n == 1
    table = _work(config).parent / "fixtures" / IDLE_GPUS[1]
    table.write_text(text, encoding="utf-8")
    time.sleep(2.0)
    doc = doctor(config, capsys)
    assert ids(doc, "U31") == []
    assert not any("trains on the CPU" in line for line in doc["banner"])


# --------------------------------------------------------------------------- item 3: U22

@pytest.mark.sshd
def test_a_dead_gpu_xid_in_the_kernel_log_is_critical_with_no_job(
        money_box: Make, capsys: pytest.CaptureFixture[str]) -> None:
    doc = doctor(money_box(dmesg=XID94), capsys)
    (dead,) = ids(doc, "U22")
    assert dead["severity"] == "critical" and "Xid 94" in dead["title"]
    assert "re-rent" in dead["fix"] and any("dead or dying" in x for x in doc["banner"])


@pytest.mark.sshd
def test_an_application_xid_is_not_a_dead_gpu(
        money_box: Make, capsys: pytest.CaptureFixture[str]) -> None:
    assert ids(doctor(money_box(dmesg=XID13), capsys), "U22") == []


@pytest.mark.sshd
def test_a_gpu_gone_between_polls_is_a_dead_gpu_and_a_steady_count_is_not(
        money_box: Make, fixtures: Path) -> None:
    config = money_box()
    watch, _ = asyncio.run(watch_polls(config, 2, 0.5))
    assert [f for f in watch.findings("box") if f.id == "U22"] == []  # two GPUs, twice
    # The same path the helper's nvidia-smi reads, now with one GPU listed: a card gone.
    listed = _work(config).parent / "fixtures" / IDLE_GPUS[0]

    async def polls() -> FleetWatch:
        fleet = Fleet(load(config))
        watch = FleetWatch()
        try:
            watch.observe(await fleet.poll_host("box"), time.time())
            listed.write_bytes((fixtures / ONE_GPU).read_bytes())
            watch.observe(await fleet.poll_host("box"), time.time())
        finally:
            await fleet.close()
        return watch

    (gone,) = [f for f in asyncio.run(polls()).findings("box") if f.id == "U22"]
    assert gone.severity == "critical" and "1 GPU(s) gone" in gone.title
    assert "1 GPU(s) now, 2 earlier in this boot" in gone.seen and "re-rent" in gone.fix


def _death_after_one_poll(config: Path, sshd_box: Any, capsys: pytest.CaptureFixture[str],
                          capture: Path | None) -> list[Any]:
    """A running job is polled once, the kernel log then empties (``capture``: the file the
    box's dmesg replays), the job's process group is killed as the kernel would, and the
    room's FleetWatch polls on until the queue records the death: its findings."""
    job = queue(config, capsys, "add", "box", "--gpus", "0", "--",
                "sh", "-c", "echo up; exec sleep 120")["job"]
    running(config, job)

    async def polls() -> FleetWatch:
        fleet = Fleet(load(config))
        watch = FleetWatch()
        try:
            watch.observe(await fleet.poll_host("box"), time.time())
            if capture is not None:
                capture.write_bytes(b"")  # the next polls read no kernel line at all
            _runner, pgids = await asyncio.to_thread(box_pids, config)
            for pgid in pgids:
                sshd_box.run("kill", "-KILL", "--", f"-{pgid}")
            deadline = time.monotonic() + WAIT_S
            while True:
                await asyncio.sleep(0.5)
                state = await fleet.poll_host("box")
                watch.observe(state, time.time())
                j = state.view.job(job) if state.view is not None else None
                if j is not None and j.state not in ("launching", "running"):
                    return watch
                assert time.monotonic() < deadline, j
        finally:
            await fleet.close()

    return list(asyncio.run(polls()).findings("box"))


@pytest.mark.sshd
def test_an_xid_one_poll_before_a_death_still_explains_it_over_sshd(
        money_box: Make, capsys: pytest.CaptureFixture[str], sshd_box: Any) -> None:
    config = money_box(dmesg=XID94)
    capture = _work(config).parent / "fixtures" / XID94
    found = _death_after_one_poll(config, sshd_box, capsys, capture)
    died = [f for f in found if f.id == "U22" and "died" in f.title]
    assert died and "Xid 94" in died[0].title, [(f.id, f.title) for f in found]


@pytest.mark.sshd
def test_a_death_with_no_xid_in_the_window_is_not_blamed_on_the_gpu(
        money_box: Make, capsys: pytest.CaptureFixture[str], sshd_box: Any) -> None:
    found = _death_after_one_poll(money_box(), sshd_box, capsys, None)
    assert [f for f in found if f.id == "U22"] == [], [(f.id, f.title) for f in found]
    (u3,) = [f for f in found if f.id == "U3"]  # the ladder walked past the kernel log
    assert "SIGKILL" in u3.title and "no reboot, OOM or Xid seen" in u3.seen


# --------------------------------------------------------------------------- item 4: GEN6

@pytest.mark.sshd
def test_a_running_attempt_of_another_boot_is_said_at_every_poll(
        money_box: Make, capsys: pytest.CaptureFixture[str]) -> None:
    # The runner records the attempt under this boot id; the box reports its real one.
    config = money_box(env={"GPUROOM_BOOT_ID": "0123abcd-0000-4000-8000-000000000000"})
    job = queue(config, capsys, "add", "box", "--gpus", "0", "--",
                "sh", "-c", "echo up; exec sleep 120")["job"]
    running(config, job)
    for _ in range(2):  # not only on the poll that saw a transition
        (gen6,) = [f for f in ids(doctor(config, capsys), "GEN6")
                   if f["severity"] == "critical"]
        assert "the box rebooted" in gen6["title"] and "0123abcd" in gen6["seen"]


@pytest.mark.sshd
def test_the_room_starts_a_dead_runner_and_the_finding_clears(
        money_box: Make, capsys: pytest.CaptureFixture[str], sshd_box: Any) -> None:
    config = money_box()
    job = queue(config, capsys, "add", "box", "--gpus", "0", "--", "sh", "-c", "echo ok")["job"]
    # Wait for it, then kill the runner's tmux session and queue one more: a dead runner.
    running(config, job, ("running", "succeeded"))
    runner, _jobs = box_pids(config)
    assert runner is not None
    sshd_box.run("kill", str(runner))  # as a reboot or an OOM kill would end it
    wait_for(lambda: box_pids(config)[0] is None, "the runner to die")
    fleet = Fleet(load(config))

    async def add_without_runner() -> str:
        try:
            result = await fleet.link("box").helper("queue", "add", "--no-start", "--gpus", "0",
                                                    "--", "sh", "-c", "echo second")
            return str(json.loads(result.stdout)["job"])
        finally:
            await fleet.close()

    second = asyncio.run(add_without_runner())
    # A look-only poll (status, doctor) says the runner is dead and leaves it so.
    watch, _ = asyncio.run(watch_polls(config, 1, 0.0))
    (dead,) = [f for f in watch.findings("box") if "runner is dead" in f.title]
    assert dead.severity == "warn" and second in dead.seen
    # The room's poll starts it; the job then runs and the finding is gone.
    watch, _ = asyncio.run(watch_polls(config, 1, 0.0, restart_runners=True))
    running(config, second, ("running", "succeeded"))
    watch, _ = asyncio.run(watch_polls(config, 1, 0.0))
    assert [f for f in watch.findings("box") if "runner is dead" in f.title] == []


@pytest.mark.sshd
def test_boot_hook_installs_the_reboot_entry_the_doctor_asks_for(
        money_box: Make, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        sshd_box: Any) -> None:
    # cron is not installed here; a stand-in crontab on the box's PATH keeps the table.
    bin_dir = sshd_box.home / "gpuroom-money-bin"
    shutil.rmtree(bin_dir, ignore_errors=True)
    bin_dir.mkdir()
    table = bin_dir / "crontab.txt"
    fake = bin_dir / "crontab"
    fake.write_text(f"#!/bin/sh\nif [ \"$1\" = -l ]; then cat {table} 2>/dev/null || exit 1; "
                    f"else cat > {table}; fi\n")
    fake.chmod(0o755)
    user = pwd.getpwnam(sshd_box.user)
    for path in (bin_dir, fake):
        os.chown(path, user.pw_uid, user.pw_gid)
    try:
        config = money_box(path_dirs=(str(bin_dir),))
        queue(config, capsys, "add", "box", "--gpus", "0", "--", "true")
        hooks = [f for f in ids(doctor(config, capsys), "GEN6") if "@reboot" in f["title"]]
        assert len(hooks) == 1 and hooks[0]["severity"] == "info"
        assert main(["--config", str(config), "queue", "boot-hook", "box"]) == 0
        assert "@reboot entry installed" in capsys.readouterr().out
        assert "@reboot " in table.read_text() and " queue start " in table.read_text()
        assert [f for f in ids(doctor(config, capsys), "GEN6") if "@reboot" in f["title"]] == []
    finally:
        shutil.rmtree(bin_dir, ignore_errors=True)


@pytest.mark.sshd
def test_boot_hook_without_cron_is_an_error_with_its_fix(
        money_box: Make, capsys: pytest.CaptureFixture[str]) -> None:
    config = money_box()
    assert main(["--config", str(config), "queue", "boot-hook", "box"]) == 1
    err = _one_line(capsys.readouterr().err)
    assert "crontab is not installed" in err and "Traceback" not in err


# --------------------------------------------------------------------------- item 8: CRLF

@pytest.mark.sshd
@pytest.mark.attack("bad configuration", "a job script with Windows CRLF line ends is added: "
                    "queue add refuses it with the sed fix, --fix-crlf converts it")
def test_a_crlf_script_is_refused_at_add_and_converted_on_request(
        money_box: Make, capsys: pytest.CaptureFixture[str], sshd_box: Any) -> None:
    config = money_box()
    work = _work(config)
    script = work / "run.sh"
    script.write_bytes(b"#!/bin/sh\r\necho crlf-ok\r\n")
    user = pwd.getpwnam(sshd_box.user)
    os.chown(script, user.pw_uid, user.pw_gid)
    code = main(["--config", str(config), "queue", "add", "box", "--gpus", "0", "--cwd",
                 str(work), "--", "sh", "run.sh"])
    err = _one_line(capsys.readouterr().err)
    assert code == 1 and "CRLF line ends" in err and "sed -i" in err
    assert script.read_bytes() == b"#!/bin/sh\r\necho crlf-ok\r\n"  # refused: untouched
    queue(config, capsys, "add", "box", "--gpus", "0", "--fix-crlf", "--cwd", str(work),
          "--", "sh", "run.sh")
    assert script.read_bytes() == b"#!/bin/sh\necho crlf-ok\n"


@pytest.mark.sshd
def test_bash_choking_on_a_carriage_return_is_a_finding_from_the_log(
        money_box: Make, capsys: pytest.CaptureFixture[str]) -> None:
    config = money_box()
    job = queue(config, capsys, "add", "box", "--gpus", "0", "--",
                "bash", "-c", "echo hi\r\n\r\nsleep 120")["job"]
    running(config, job)
    doc = doctor(config, capsys)
    (crlf,) = ids(doc, "U26")
    assert f"job {job}" in crlf["title"] and "command not found" in crlf["seen"]


@pytest.mark.sshd
def test_cuda_oom_an_old_driver_and_a_keyless_tracker_are_findings_from_the_log(
        money_box: Make, capsys: pytest.CaptureFixture[str]) -> None:
    config = money_box()
    lines = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
             "RuntimeError: CUDA error: no kernel image is available for execution on the "
             "device",
             "wandb: ERROR api_key not configured (no-tty). call wandb.login(key=[your_api_key])")
    job = queue(config, capsys, "add", "box", "--gpus", "0", "--", "sh", "-c",
                "printf '%s\\n' \"$@\"; exec sleep 120", "sh", *lines)["job"]
    running(config, job)
    doc = doctor(config, capsys)
    for fid, severity, words in (("U10", "critical", "CUDA out of memory"),
                                 ("U28", "critical", "no kernel image"),
                                 ("U35", "warn", "api_key not configured")):
        (f,) = ids(doc, fid)
        assert f["severity"] == severity and f"job {job}" in f["title"] and words in f["seen"]
    assert any("CUDA out of memory" in line for line in doc["banner"])


@pytest.mark.sshd
def test_a_clean_training_log_is_no_log_finding(
        money_box: Make, capsys: pytest.CaptureFixture[str]) -> None:
    config = money_box()
    job = queue(config, capsys, "add", "box", "--gpus", "0", "--", "sh", "-c",
                "echo 'step 10 loss 0.93'; echo 'saved ckpt-10.pt'; exec sleep 120")["job"]
    running(config, job)
    found = {f["id"] for f in doctor(config, capsys)["findings"]}
    assert not found & {"U10", "U28", "U35", "U26"}, found


# --------------------------------------------------------------------------- U43 at poll rate

def test_u43_a_silent_log_beside_new_checkpoints_at_the_rooms_poll_rate(
        money_box: Make, capsys: pytest.CaptureFixture[str]) -> None:
    """A job whose progress never reaches its log (a terminal-only progress bar) while it
    writes checkpoints: the room's polls 1 s apart see U43. The log's silence is its own age:
    its mtime is set back past the threshold instead of waiting two minutes."""
    config = money_box()
    saves = ("echo up; i=0; while :; do i=$((i+1)); "
             "printf x > \"$GPUROOM_CKPT_DIR/ckpt-$(printf %012d $i).pt\"; sleep 0.3; done")
    job: str = queue(config, capsys, "add", "box", "--", "sh", "-c", saves)["job"]
    running(config, job)
    watch, _ = asyncio.run(watch_polls(config, 2, 1.0))
    assert [f for f in watch.findings("box") if f.id == "U43"] == []  # its log just moved
    log = _work(config).parent / "home" / "queues" / "default" / "logs" / f"{job}.log"
    quiet_since = time.time() - 300
    os.utime(log, (quiet_since, quiet_since))
    watch, _ = asyncio.run(watch_polls(config, 2, 1.0))
    (u43,) = [f for f in watch.findings("box") if f.id == "U43"]
    assert f"job default/{job}" in u43.title and "checkpoint advancing" in u43.title
    assert "log unchanged for 5 min" in u43.seen and "checkpoint was written" in u43.seen
    queue(config, capsys, "kill", "box", job)
