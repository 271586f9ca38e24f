"""A box cannot move, mirror or fail over a job the user did not add from this jump host, nor
choose the command a move carries, nor land a job on the jump host itself (tui/fleet/intent.py,
tui/fleet/move.py, tui/fleet/live.py), over the real test sshd.

Three hosts: `boxa` (the box that lies: its helper's host facts come from a file the test
writes, as any job there can make them, tests/harness/lyinghelper.py), `boxb` (another box on
the same sshd with its own queue) and `local` (this machine, ``local = true``, its queue and
tmux server in the test's dir). Whatever a job on boxa does, nothing it asked for may run on
`local` or on `boxb`; a recorded job moves with the recorded command.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli_w

torch = pytest.importorskip("torch")

from harness.boxenv import python_with_env  # noqa: E402
from harness.lyinghelper import lie, lying_python  # noqa: E402

from gpuroom.tui import config as cfg  # noqa: E402
from gpuroom.tui.cli.main import main  # noqa: E402
from gpuroom.tui.fleet.live import Fleet  # noqa: E402
from gpuroom.tui.fleet.mirror import MirrorOutcome, MirrorState  # noqa: E402
from gpuroom.tui.fleet.move import Lineage  # noqa: E402
from gpuroom.tui.model import LinkState  # noqa: E402

pytestmark = pytest.mark.sshd

WAIT_S = 60.0
WATCH_S = 4.0  # past failover_after_s (1 s) and down_after_s (0.5 s) several polls over
JOB = ["sh", "-c", 'mkdir -p "$GPUROOM_CKPT_DIR" && echo "$SEED" > env.txt && sleep 300']


@dataclass
class Hosts:
    config: Path
    lies: Path  # what boxa's helper says of the box (lyinghelper.lie)
    marker: Path  # a file only a process on the jump host can write


def _own(box: Any, *paths: Path) -> None:
    for p in paths:
        os.lchown(p, box.identity.user.uid, box.identity.user.gid)


@pytest.fixture
def hosts(sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hosts]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    # The jump host's own queue (`local`) and its tmux server live in the test's dir, which
    # the box's user cannot enter: a file there was written on the jump host.
    jump = tmp_path / "jump"
    jump.mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(jump))
    monkeypatch.setenv("GPUROOM_HOME", str(jump / "gpuroom"))
    monkeypatch.setenv("TMUX_TMPDIR", str(jump))
    home = sshd_box.home
    for d in ("wa", "wa/run", "wb", "wb/run"):
        (home / d).mkdir(exist_ok=True)
        _own(sshd_box, home / d)
    lies = home / "wa" / "host-facts.json"
    wrapper_a = lying_python(home / "python-boxa", lies)
    wrapper_b = python_with_env(home / "python-boxb", {"GPUROOM_HOME": str(home / "boxb")})
    _own(sshd_box, wrapper_a, wrapper_b)
    sshd_box.write_ssh_config({"boxa": {}, "boxb": {}})
    config = tmp_path / "hosts.toml"
    config.write_bytes(tomli_w.dumps({
        "settings": {"ssh_config": str(sshd_box.ssh_config), "failover_after_s": 1,
                     "down_after_s": 0.5, "poll_interval_s": 0.2},
        "hosts": {
            "boxa": {"ssh": "boxa", "python": str(wrapper_a), "workdir": str(home / "wa"),
                     "pull_to": str(tmp_path / "home")},
            "boxb": {"ssh": "boxb", "python": str(wrapper_b), "workdir": str(home / "wb")},
            "local": {"local": True},
        }}).encode())
    config.chmod(0o600)
    yield Hosts(config, lies, jump / "ran-on-the-jump-host")
    sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")
    sshd_box.run("sh", "-c", 'pkill -u "$(id -u)" -f "[q]ueue runner"; '
                 'pkill -u "$(id -u)" -f "[s]leep 300"')
    subprocess.run(["tmux", "kill-server"], capture_output=True, check=False, timeout=30)
    _end_processes_under(jump)  # a regression's runner and payload on this machine
    for d in ("wa", "wb", "boxb"):
        shutil.rmtree(home / d, ignore_errors=True)


def _end_processes_under(folder: Path) -> None:
    """SIGKILL each process whose command line names ``folder`` (this test's own dir)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if str(folder).encode() in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return rc, out.out, out.err


def user_adds(capsys: pytest.CaptureFixture[str], hosts: Hosts, *opts: str,
              argv: list[str] = JOB) -> str:
    """`gpuroom queue add boxa` from this jump host: the job is recorded here."""
    rc, out, err = cli(capsys, "--config", str(hosts.config), "queue", "add", "--json",
                       "boxa", f"--cwd={hosts.lies.parent / 'run'}", *opts, "--", *argv)
    assert rc == 0, err
    return str(json.loads(out.strip().splitlines()[-1])["job"])


def box_job_adds(box: Any, hosts: Hosts, env: dict[str, str]) -> None:
    """What a job on boxa can do: call the helper there to add a job of its own, with
    ``env``, whose payload writes the marker (which only the jump host can) and then waits
    like a training run."""
    payload = (f'mkdir -p "$GPUROOM_CKPT_DIR"; id -un > {shlex.quote(str(hosts.marker))}; '
               "sleep 300")
    env_opts = " ".join(f"--env {shlex.quote(f'{k}={v}')}" for k, v in env.items())
    done = box.run("sh", "-c", f"python3 ~/.gpuroom/bin/remote-*.pyz queue add {env_opts} "
                   f"-- sh -c {shlex.quote(payload)}", alias="boxa")
    assert done.returncode == 0 and json.loads(done.stdout)["ok"], done.stdout + done.stderr


def save_ckpt(box: Any, ckpt_dir: Path, step: int) -> Path:
    tmp = ckpt_dir / f".ckpt-{step:012d}.pt.tmp-test"
    torch.save({"step": step, "w": torch.rand(100)}, tmp)
    _own(box, tmp)
    final = ckpt_dir / f"ckpt-{step:012d}.pt"
    os.replace(tmp, final)
    return final


async def running(fleet: Fleet, host: str, pick: Any) -> Any:
    """Poll ``host`` until a job ``pick(job)`` chooses runs with its checkpoint dir made."""
    deadline = time.monotonic() + WAIT_S
    while True:
        view = (await fleet.poll_host(host)).view
        for job in view.jobs if view is not None else ():
            if pick(job) and job.state == "running" and job.ckpt_dir \
                    and Path(job.ckpt_dir).is_dir():
                return job
        assert time.monotonic() < deadline, view
        await asyncio.sleep(0.3)


async def lose_boxa(box: Any, fleet: Fleet) -> None:
    """boxa is lost (its alias leads nowhere, its connection gone) and polled as the fleet's
    loop polls every host, until it has been DOWN past failover_after_s."""
    box.write_ssh_config({"boxa": {"Port": "1"}, "boxb": {}})
    await fleet.link("boxa").close()
    deadline = time.monotonic() + WATCH_S
    while time.monotonic() < deadline:
        for name in ("boxb", "local"):
            await fleet.poll_host(name)
        assert (await fleet.poll_host("boxa")).state is not LinkState.UP
        await asyncio.sleep(0.3)
    assert fleet.state("boxa").state is LinkState.DOWN


async def queue_of(fleet: Fleet, host: str) -> list[Any]:
    state = await fleet.poll_host(host)
    assert state.state is LinkState.UP, state.error
    return list(state.view.jobs) if state.view is not None else []


def a_box_job_asks_for_failover(box: Any, hosts: Hosts, capsys: Any,
                                target: str) -> tuple[list[MirrorOutcome], list[Any]]:
    """A job the user added on boxa adds its own job with GPUROOM_FAILOVER=``target`` and a
    checkpoint, and boxa is lost: what the fleet did, and ``target``'s queue after."""
    # The user's job, whose code turned hostile: it plants a job (below) and ends, so the
    # queue's one slot runs what it planted.
    user_adds(capsys, hosts, argv=["true"])
    return asyncio.run(_planted_then_lost(box, hosts, target))


async def _planted_then_lost(box: Any, hosts: Hosts,
                             target: str) -> tuple[list[MirrorOutcome], list[Any]]:
    heard: list[MirrorOutcome] = []
    fleet = Fleet(cfg.load(hosts.config), mirror=True, on_mirror=heard.append)
    try:
        await fleet.poll_host("boxa")  # the helper is on the box now
        box_job_adds(box, hosts, {"GPUROOM_FAILOVER": target, "GPUROOM_MIRROR": "1"})
        planted = await running(fleet, "boxa", lambda j: "id -un" in j.command)
        save_ckpt(box, Path(planted.ckpt_dir), 10)
        await fleet.poll_host("boxa")
        assert fleet.mirror is not None
        await fleet.mirror.idle()
        assert [o for o in heard if o.job == planted.id] == []  # not the user's: not mirrored
        await lose_boxa(box, fleet)
        await fleet.mirror.idle()
        return heard, await queue_of(fleet, target)
    finally:
        await fleet.close()


@pytest.mark.attack("trust", "a job on the box adds its own job with GPUROOM_FAILOVER naming "
                    "the local host, then the box goes down: its payload on the jump host")
def test_a_job_the_box_added_never_fails_over_onto_the_jump_host(
        sshd_box: Any, hosts: Hosts, capsys: pytest.CaptureFixture[str]) -> None:
    heard, local_jobs = a_box_job_asks_for_failover(sshd_box, hosts, capsys, "local")
    assert [o for o in heard if o.status == "failover"] == [], heard
    assert local_jobs == [] and not hosts.marker.exists()  # nothing ran on this machine
    assert Lineage(MirrorState()).load() == []


@pytest.mark.attack("trust", "a job on the box adds its own job with GPUROOM_FAILOVER naming "
                    "another box, then its box goes down: its command on that box")
def test_a_job_the_box_added_never_fails_over_onto_another_box(
        sshd_box: Any, hosts: Hosts, capsys: pytest.CaptureFixture[str]) -> None:
    heard, boxb_jobs = a_box_job_asks_for_failover(sshd_box, hosts, capsys, "boxb")
    assert [o for o in heard if o.status == "failover"] == [], heard
    assert boxb_jobs == []
    assert Lineage(MirrorState()).load() == []


@pytest.mark.attack("trust", "a box forges a new boot id and an empty checkpoint dir while it "
                    "answers every poll (\"came back wiped\"): a failover on its word alone")
def test_a_forged_reboot_with_no_outage_moves_nothing_and_the_doctor_warns(
        sshd_box: Any, hosts: Hosts, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuroom.tui.rules.doctor import diagnose

    job = user_adds(capsys, hosts, "--failover", "boxb")

    async def body() -> tuple[list[MirrorOutcome], list[Any], Any, list[Any]]:
        heard: list[MirrorOutcome] = []
        fleet = Fleet(cfg.load(hosts.config), mirror=True, on_mirror=heard.append)
        assert fleet.mirror is not None
        try:
            await fleet.poll_host("boxb")
            ckpt_dir = Path((await running(fleet, "boxa", lambda j: j.id == job)).ckpt_dir)
            save_ckpt(sshd_box, ckpt_dir, 30)
            await fleet.poll_host("boxa")
            await fleet.mirror.idle()
            assert [(o.status, o.step) for o in heard] == [("home", 30)], heard
            # The box says it rebooted a moment ago and its checkpoints are gone.
            lie(hosts.lies, boot_id="f0rged-b00t", uptime_s=0.01)
            shutil.rmtree(ckpt_dir)
            for _ in range(3):
                state = await fleet.poll_host("boxa")
                await fleet.mirror.idle()
                assert state.state is LinkState.UP
            state = fleet.state("boxa")
            findings = diagnose(None, state.view, state.state, None, time.time(),
                                host="boxa", moves=state.moved, held=state.held)
            return heard, await queue_of(fleet, "boxb"), state.view, findings
        finally:
            await fleet.close()

    heard, boxb_jobs, view, findings = asyncio.run(body())
    assert [o for o in heard if o.status == "failover"] == [], heard
    assert boxb_jobs == [] and Lineage(MirrorState()).load() == []
    assert view.job(job).state == "running"  # not killed on boxa either
    [warned] = [f for f in findings if "not failed over" in f.title] or [findings]
    assert warned.severity == "warn" and job in warned.title and "ckpt step 30" in warned.title
    assert "gpuroom queue move boxa" in warned.fix


@pytest.mark.attack("trust", "a box rewrites a recorded job's argv and env in its queue "
                    "files before `queue move`: its command on the other box")
def test_a_move_carries_the_recorded_command_not_the_one_the_box_rewrote(
        sshd_box: Any, hosts: Hosts, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(hosts.config)
    job = user_adds(capsys, hosts, "--env", "SEED=7", "--name", "sweep")
    run = sshd_box.home / "wa" / "run"
    deadline = time.monotonic() + WAIT_S
    while not (run / "env.txt").exists():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    # Anything running as the box's user can edit the queue's events: the add now says
    # another command, another env.
    forged = ["sh", "-c", "echo forged > forged.txt; sleep 300"]
    rewritten = 0
    for events in (sshd_box.home / ".gpuroom").rglob("events.jsonl"):
        lines = []
        for line in events.read_text().splitlines():
            ev = json.loads(line)
            if ev.get("ev") == "added" and ev.get("job") == job:
                ev.update(argv=forged, env={"SEED": "666", "EVIL": "1"})
                rewritten += 1
            lines.append(json.dumps(ev))
        events.write_text("\n".join(lines) + "\n")
    assert rewritten == 1
    rc, out, err = cli(capsys, "--config", config, "queue", "show", "--json", "boxa", job)
    assert rc == 0 and json.loads(out.strip().splitlines()[-1])["jobs"][0]["argv"] == forged

    rc, out, err = cli(capsys, "--config", config, "queue", "move", "boxa", job, "--to", "boxb")
    assert rc == 0, (out, err)
    new = out.strip().splitlines()[-1].split(" -> boxb/")[1].split()[0]
    rc, out, err = cli(capsys, "--config", config, "queue", "show", "--json", "boxb", new)
    assert rc == 0, err
    [moved] = json.loads(out.strip().splitlines()[-1])["jobs"]
    assert moved["argv"] == JOB and moved["name"] == "sweep"
    assert moved["cwd"] == str(sshd_box.home / "wb" / "run") and sorted(moved["env"]) == ["SEED"]
    env = sshd_box.home / "wb" / "run" / "env.txt"
    while not (env.exists() and env.read_text()):
        assert time.monotonic() < deadline + WAIT_S
        time.sleep(0.1)
    assert env.read_text() == "7\n"  # the recorded value, not the box's 666
    assert not (sshd_box.home / "wb" / "run" / "forged.txt").exists()
    cli(capsys, "--config", config, "queue", "kill", "boxb", new)


@pytest.mark.attack("trust", "`queue move` and `--failover` onto the local host, which "
                    "hosts.toml never said may receive a job")
def test_the_local_host_is_no_move_target_unless_hosts_toml_says_so(
        sshd_box: Any, hosts: Hosts, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(hosts.config)
    rc, _, err = cli(capsys, "--config", config, "queue", "add", "boxa", "--failover", "local",
                     "--", "true")
    assert rc != 0 and "local" in err and "accept_moves = true" in err, err
    job = user_adds(capsys, hosts)
    rc, out, err = cli(capsys, "--config", config, "queue", "move", "boxa", job, "--to",
                       "local")
    assert rc != 0 and "local = true" in err and "accept_moves = true" in err, (out, err)
    rc, out, _ = cli(capsys, "--config", config, "queue", "show", "--json", "boxa", job)
    # Untouched by the refused move: still waiting or running, never killed (a loaded runner
    # may not have started it yet).
    assert json.loads(out.strip().splitlines()[-1])["jobs"][0]["state"] in ("queued", "running")

    async def local_jobs() -> list[Any]:
        fleet = Fleet(cfg.load(hosts.config))
        try:
            return await queue_of(fleet, "local")
        finally:
            await fleet.close()

    assert asyncio.run(local_jobs()) == [] and not hosts.marker.exists()
