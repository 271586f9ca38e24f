"""Issue 21 item 2 over the test sshd: `gpuroom queue move box JOB --to boxb`.

Two hosts on the one loopback sshd: `box` keeps its queue in ~/.gpuroom, `boxb` (its own ssh
alias) in ~/boxb through a `python` wrapper that sets GPUROOM_HOME, and each has its own
workdir, so the move's path mapping is real. The job on box is killed, its newest checkpoint
comes home verified, lands in the new job's checkpoint dir on boxb before that job starts
(the job lists the dir at its start to prove it), and both queues say where it went.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import tomllib

torch = pytest.importorskip("torch")

from harness.lyinghelper import lie, lying_python  # noqa: E402

from gpuroom.tui.cli.main import main  # noqa: E402

pytestmark = pytest.mark.sshd

WAIT_S = 60.0
# At its start the job lists its checkpoint dir into seen.txt in its cwd, then trains (sleeps).
JOB = ["sh", "-c", 'mkdir -p "$GPUROOM_CKPT_DIR" && ls "$GPUROOM_CKPT_DIR" > seen.txt '
       '&& echo "$DATA $SEED" > env.txt && sleep 300']


def _own(box: Any, *paths: Path) -> None:
    for p in paths:
        os.lchown(p, box.identity.user.uid, box.identity.user.gid)


@pytest.fixture
def two_hosts(sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("COLUMNS", "200")  # queue ls's table unwrapped
    home = sshd_box.home
    for d in ("wa", "wa/run", "wb", "wb/run"):
        (home / d).mkdir(exist_ok=True)
        _own(sshd_box, home / d)
    wrapper = home / "python-boxb"
    wrapper.write_text('#!/bin/sh\nGPUROOM_HOME="$HOME/boxb" exec python3 "$@"\n')
    wrapper.chmod(0o755)
    _own(sshd_box, wrapper)
    sshd_box.write_ssh_config({"boxb": {}})
    config = tmp_path / "hosts.toml"
    config.write_bytes(tomli_w.dumps({
        "settings": {"ssh_config": str(sshd_box.ssh_config)},
        "hosts": {
            "box": {"ssh": sshd_box.alias, "workdir": str(home / "wa"),
                    "pull_to": str(tmp_path / "home")},
            "boxb": {"ssh": "boxb", "python": str(wrapper), "workdir": str(home / "wb")},
            "gone": {"ssh": "gone"},
        }}).encode())
    yield config
    sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")
    # Both roots' runners and their jobs (boxb's runner is not in tmux: the session name
    # was taken), so none of them reads the next test's fresh queue.
    sshd_box.run("sh", "-c", 'pkill -u "$(id -u)" -f "[q]ueue runner"; '
                 'pkill -u "$(id -u)" -f "[s]leep 300"')
    for d in ("wa", "wb", "boxb"):
        shutil.rmtree(home / d, ignore_errors=True)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return rc, out.out, out.err


def show(capsys: pytest.CaptureFixture[str], config: Path, host: str,
         job: str) -> dict[str, Any]:
    """The box's own record of the job (env values and all), as the helper answers."""
    rc, out, err = cli(capsys, "--config", str(config), "queue", "show", "--json", host, job)
    assert rc == 0, err
    doc: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return doc


def wait_job(capsys: pytest.CaptureFixture[str], config: Path, host: str, job: str,
             state: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while True:
        doc = show(capsys, config, host, job)
        [j] = doc["jobs"]
        if j["state"] == state:
            return doc
        assert time.monotonic() < deadline, j
        time.sleep(0.3)


def start_job(capsys: pytest.CaptureFixture[str], config: Path, host: str,
              *opts: str) -> tuple[str, Path]:
    """`queue add` JOB on ``host``; its id and checkpoint dir once it runs."""
    rc, out, err = cli(capsys, "--config", str(config), "queue", "add", "--json", host, *opts,
                       "--", *JOB)
    assert rc == 0, err
    job = str(json.loads(out.strip().splitlines()[-1])["job"])
    ckpt_dir = Path(wait_job(capsys, config, host, job, "running")["jobs"][0]["ckpt_dir"])
    deadline = time.monotonic() + WAIT_S
    while not ckpt_dir.is_dir():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    cwd = next((o.split("=", 1)[1] for o in opts if o.startswith("--cwd=")), None)
    # "running" is recorded as the process starts: wait until its listing of the checkpoint
    # dir is done (env.txt follows it), so the test's checkpoints land after it.
    while cwd is not None and not (Path(cwd) / "env.txt").exists():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return job, ckpt_dir


def save_ckpt(box: Any, ckpt_dir: Path, step: int) -> Path:
    tmp = ckpt_dir / f".ckpt-{step:012d}.pt.tmp-test"
    torch.save({"step": step, "w": torch.rand(1000, generator=torch.Generator().manual_seed(
        step))}, tmp)
    _own(box, tmp)
    final = ckpt_dir / f"ckpt-{step:012d}.pt"
    os.replace(tmp, final)
    return final


def test_move_kills_on_a_pushes_the_newest_checkpoint_and_adds_the_identical_job_on_b(
        sshd_box: Any, two_hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home, config = sshd_box.home, str(two_hosts)
    job, ckpt_dir = start_job(capsys, two_hosts, "box", f"--cwd={home / 'wa' / 'run'}",
                              "--env", f"DATA={home / 'wa' / 'd'}", "--env", "SEED=7",
                              "--name", "sweep")
    save_ckpt(sshd_box, ckpt_dir, 10)
    newest = save_ckpt(sshd_box, ckpt_dir, 20)

    rc, out, err = cli(capsys, "--config", config, "queue", "move", "box", job, "--to", "boxb")
    assert rc == 0, (out, err)
    last = out.strip().splitlines()[-1]
    assert last.startswith(f"box/{job} -> boxb/") and last.endswith("(from ckpt step 20)"), out
    new = last.split(" -> boxb/")[1].split()[0]

    old = show(capsys, two_hosts, "box", job)["jobs"][0]
    assert old["state"] == "killed"
    moved = wait_job(capsys, two_hosts, "boxb", new, "running")
    assert moved["dir"].startswith(str(home / "boxb"))  # boxb's own queue, not box's
    [j] = moved["jobs"]
    assert j["argv"] == JOB and j["name"] == "sweep"
    assert j["cwd"] == str(home / "wb" / "run")  # box's workdir mapped to boxb's
    assert sorted(j["env"]) == ["DATA", "SEED"]  # values: the job itself says them below
    arrived = Path(j["ckpt_dir"]) / newest.name
    assert arrived.read_bytes() == newest.read_bytes()
    # The checkpoint was in place before the job started: its first act listed it.
    seen = home / "wb" / "run" / "seen.txt"
    deadline = time.monotonic() + WAIT_S
    while not (seen.exists() and seen.read_text()):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert seen.read_text().split() == [newest.name]
    env = home / "wb" / "run" / "env.txt"
    while not (env.exists() and env.read_text()):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert env.read_text() == f"{home / 'wb' / 'd'} 7\n"  # DATA mapped, SEED as it was
    assert (home / "wa" / "run" / "seen.txt").read_text() == ""  # A started from nothing
    # Both queues say where it went, and the queue on boxb was resumed.
    rc, out, _ = cli(capsys, "--config", config, "queue", "ls", "box")
    assert rc == 0 and f"moved to boxb/{new}" in out, out
    rc, out, _ = cli(capsys, "--config", config, "queue", "ls", "boxb")
    assert rc == 0 and f"from box/{job}" in out
    cli(capsys, "--config", config, "queue", "kill", "boxb", new)


@pytest.mark.attack("faults", "queue move from a host that cannot be reached")
def test_move_from_an_unreachable_host_says_so_and_adds_nothing(
        sshd_box: Any, two_hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sshd_box.write_ssh_config({"boxb": {}, "gone": {"Port": "1"}})
    rc, out, err = cli(capsys, "--config", str(two_hosts), "queue", "move", "gone", "j1",
                       "--to", "boxb")
    assert rc != 0
    assert "gone cannot be reached" in err and "only on that box" in err, err
    rc, out, _ = cli(capsys, "--config", str(two_hosts), "queue", "ls", "--json", "boxb")
    assert rc == 0 and json.loads(out.strip().splitlines()[-1])["jobs"] == []
    # Nor is a job killed for a move whose new host cannot be reached.
    job, _ = start_job(capsys, two_hosts, "boxb")
    rc, out, err = cli(capsys, "--config", str(two_hosts), "queue", "move", "boxb", job,
                       "--to", "gone")
    assert rc != 0 and "gone" in err, err
    assert show(capsys, two_hosts, "boxb", job)["jobs"][0]["state"] == "running"
    cli(capsys, "--config", str(two_hosts), "queue", "kill", "boxb", job)


@pytest.mark.attack("faults", "queue move while the box cannot be reached, then it comes back")
def test_move_from_an_unreachable_box_uses_the_mirror_and_fences_the_old_copy_later(
        sshd_box: Any, two_hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    from gpuroom.tui import config as cfg
    from gpuroom.tui.fleet.live import Fleet
    from gpuroom.tui.fleet.mirror import MirrorOutcome, MirrorState
    from gpuroom.tui.fleet.move import Lineage

    home = sshd_box.home
    doc = tomllib.loads(two_hosts.read_text())
    doc["hosts"]["boxa"] = {**doc["hosts"].pop("box"), "ssh": "boxa", "mirror": True}
    two_hosts.write_bytes(tomli_w.dumps(doc).encode())
    sshd_box.write_ssh_config({"boxa": {}, "boxb": {}})
    config = str(two_hosts)
    job, ckpt_dir = start_job(capsys, two_hosts, "boxa", f"--cwd={home / 'wa' / 'run'}")
    newest = save_ckpt(sshd_box, ckpt_dir, 10)

    async def mirror_once() -> list[MirrorOutcome]:
        heard: list[MirrorOutcome] = []
        fleet = Fleet(cfg.load(two_hosts), mirror=True, on_mirror=heard.append)
        try:
            await fleet.poll_host("boxa")
            assert fleet.mirror is not None
            await fleet.mirror.idle()
        finally:
            await fleet.close()
        return heard

    assert [(o.status, o.step) for o in asyncio.run(mirror_once())] == [("home", 10)]

    # boxa's link is gone (its alias now leads nowhere); the box itself goes on running j1.
    sshd_box.write_ssh_config({"boxa": {"Port": "1"}, "boxb": {}})
    rc, out, err = cli(capsys, "--config", config, "queue", "move", "boxa", job, "--to", "boxb")
    assert rc == 0, (out, err)
    assert "boxa cannot be reached" in out and "killed when boxa answers again" in out
    last = out.strip().splitlines()[-1]
    assert last.endswith("(from ckpt step 10)"), out
    new = last.split(" -> boxb/")[1].split()[0]
    moved = wait_job(capsys, two_hosts, "boxb", new, "running")["jobs"][0]
    assert moved["argv"] == JOB and moved["cwd"] == str(home / "wb" / "run")
    assert (Path(moved["ckpt_dir"]) / newest.name).read_bytes() == newest.read_bytes()
    assert Lineage(MirrorState()).fences("boxa")  # the old copy still runs: not yet fenced

    # boxa answers again: the next poll of a mirroring fleet (room, watch) kills its copy.
    sshd_box.write_ssh_config({"boxa": {}, "boxb": {}})
    heard = [o for o in asyncio.run(mirror_once()) if o.status != "current"]
    assert [(o.job, o.status) for o in heard] == [(job, "fenced")], heard
    assert f"runs as boxb/{new}" in heard[0].line
    wait_job(capsys, two_hosts, "boxa", job, "killed")
    asyncio.run(mirror_once())  # it is seen ended: the fence is done
    assert Lineage(MirrorState()).fences("boxa") == []
    rc, out, _ = cli(capsys, "--config", config, "queue", "ls", "boxa")
    assert f"moved to boxb/{new}" in out
    cli(capsys, "--config", config, "queue", "kill", "boxb", new)


def _doctor(state: Any) -> list[Any]:
    from gpuroom.tui.rules.doctor import diagnose

    return diagnose(None, state.view, state.state, None, time.time(), host=state.name,
                    last_ok=state.last_ok, moves=state.moved)


@pytest.mark.attack("faults", "a --failover job's box stays down: moved, then fenced on return")
def test_a_failover_job_moves_itself_when_its_host_stays_down_and_is_fenced_when_back(
        sshd_box: Any, two_hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    from gpuroom.tui import config as cfg
    from gpuroom.tui.fleet.live import Fleet
    from gpuroom.tui.fleet.mirror import MirrorOutcome, MirrorState
    from gpuroom.tui.fleet.move import Lineage
    from gpuroom.tui.model import LinkState

    home = sshd_box.home
    doc = tomllib.loads(two_hosts.read_text())
    doc["hosts"]["boxa"] = {**doc["hosts"].pop("box"), "ssh": "boxa"}  # mirror: not set
    doc["settings"].update(failover_after_s=1, down_after_s=0.5, poll_interval_s=0.2)
    two_hosts.write_bytes(tomli_w.dumps(doc).encode())
    sshd_box.write_ssh_config({"boxa": {}, "boxb": {}})
    rc, _, err = cli(capsys, "--config", str(two_hosts), "queue", "add", "boxa",
                     "--failover", "nosuch", "--", "true")
    assert rc != 0 and "nosuch" in err and "Fix:" in err  # a host hosts.toml lacks: refused
    job, ckpt_dir = start_job(capsys, two_hosts, "boxa", f"--cwd={home / 'wa' / 'run'}",
                              "--failover", "boxb")
    newest = save_ckpt(sshd_box, ckpt_dir, 30)

    async def body() -> list[MirrorOutcome]:
        heard: list[MirrorOutcome] = []
        fleet = Fleet(cfg.load(two_hosts), mirror=True, on_mirror=heard.append)
        try:
            await fleet.poll_host("boxb")
            await fleet.poll_host("boxa")  # --failover implies the mirror: step 30 home
            assert fleet.mirror is not None
            await fleet.mirror.idle()
            assert [(o.status, o.step) for o in heard] == [("home", 30)], heard
            # boxa is lost: its alias leads nowhere and every session is cut.
            sshd_box.write_ssh_config({"boxa": {"Port": "1"}, "boxb": {}})
            sshd_box.kill_all()
            sshd_box.start()
            sshd_box.write_ssh_config({"boxa": {"Port": "1"}, "boxb": {}})
            deadline = time.monotonic() + WAIT_S
            while not any(o.status == "failover" for o in heard):
                assert time.monotonic() < deadline, heard
                await fleet.poll_host("boxb")  # as the fleet's loop polls every host
                state = await fleet.poll_host("boxa")
                assert state.state is not LinkState.UP
                await asyncio.sleep(0.3)
            # The doctor explains the move, from the records the model holds, while boxa
            # is still down: not fenced yet.
            [said] = [f for f in _doctor(fleet.state("boxa")) if "moved" in f.title]
            assert said.severity == "warn" and "not fenced yet" in said.title
            assert "moved from boxa to boxb/" in said.title, said
            assert fleet.state("boxb").moves  # its queue says "from boxa/j..." at once
            # back: the next good poll kills the old copy
            sshd_box.write_ssh_config({"boxa": {}, "boxb": {}})
            while not any(o.status == "fenced" for o in heard):
                assert time.monotonic() < deadline, heard
                await fleet.poll_host("boxa")
                await asyncio.sleep(0.3)
            while not any("fenced at" in f.title for f in _doctor(fleet.state("boxa"))):
                assert time.monotonic() < deadline
                await fleet.poll_host("boxa")  # a poll that shows the old copy ended
                await asyncio.sleep(0.3)
        finally:
            await fleet.close()
        return heard

    heard = asyncio.run(body())
    [failover] = [o for o in heard if o.status == "failover"]
    assert failover.job == job and failover.step == 30 and "boxa DOWN" in failover.line
    [move] = Lineage(MirrorState()).load()
    assert (move.src_host, move.src_job, move.dst_host, move.step) == ("boxa", job, "boxb", 30)
    moved = wait_job(capsys, two_hosts, "boxb", move.dst_job, "running")["jobs"][0]
    assert (Path(moved["ckpt_dir"]) / newest.name).read_bytes() == newest.read_bytes()
    wait_job(capsys, two_hosts, "boxa", job, "killed")  # fenced: it never runs twice
    # `gpuroom doctor` says it too, from the same records.
    _rc, out, _ = cli(capsys, "--config", str(two_hosts), "doctor", "boxa", "--json")
    titles = [f["title"] for f in json.loads(out)["findings"]]
    assert any(f"{job} moved from boxa to boxb/{move.dst_job} after boxa was down" in t
               and "boxa's copy fenced at" in t for t in titles), titles
    cli(capsys, "--config", str(two_hosts), "queue", "kill", "boxb", move.dst_job)


@pytest.mark.attack("faults", "a --failover job's box comes back wiped (new boot, its "
                    "checkpoints gone): resumed elsewhere from the mirror, not from scratch")
def test_a_failover_job_whose_box_came_back_wiped_resumes_on_the_target_not_from_scratch(
        sshd_box: Any, two_hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    from gpuroom.tui import config as cfg
    from gpuroom.tui.fleet.live import Fleet
    from gpuroom.tui.fleet.mirror import MirrorOutcome, MirrorState
    from gpuroom.tui.fleet.move import Lineage
    from gpuroom.tui.model import LinkState

    home = sshd_box.home
    # A reboot (GEN6), which a test cannot do to the machine it runs on: the runner records
    # its attempts under the old boot id, and boxa's helper reports that boot until the box
    # is lost, then a new boot with a short uptime (tests/harness/lyinghelper.py).
    lies = home / "wa" / "host-facts.json"
    wrapper = lying_python(home / "python-boxa", lies,
                           {"GPUROOM_BOOT_ID": "0ldb00t-before-the-wipe"})
    _own(sshd_box, wrapper)
    lie(lies, boot_id="0ldb00t-before-the-wipe")
    doc = tomllib.loads(two_hosts.read_text())
    doc["hosts"]["boxa"] = {**doc["hosts"].pop("box"), "ssh": "boxa", "python": str(wrapper)}
    two_hosts.write_bytes(tomli_w.dumps(doc).encode())
    sshd_box.write_ssh_config({"boxa": {}, "boxb": {}})
    job, ckpt_dir = start_job(capsys, two_hosts, "boxa", f"--cwd={home / 'wa' / 'run'}",
                              "--failover", "boxb")
    newest = save_ckpt(sshd_box, ckpt_dir, 30)
    kept = newest.read_bytes()

    async def body() -> list[MirrorOutcome]:
        heard: list[MirrorOutcome] = []
        fleet = Fleet(cfg.load(two_hosts), mirror=True, on_mirror=heard.append)
        try:
            await fleet.poll_host("boxb")
            await fleet.poll_host("boxa")
            assert fleet.mirror is not None
            await fleet.mirror.idle()
            assert [(o.status, o.step) for o in heard] == [("home", 30)], heard
            # boxa is lost for a poll and comes back under a new boot: the fleet saw it gone.
            sshd_box.write_ssh_config({"boxa": {"Port": "1"}, "boxb": {}})
            await fleet.link("boxa").close()  # its connection lost with the box
            assert (await fleet.poll_host("boxa")).state is not LinkState.UP
            lie(lies, boot_id="n3wb00t-after-the-wipe", uptime_s=0.01)
            sshd_box.write_ssh_config({"boxa": {}, "boxb": {}})
            # While the checkpoint dir holds what came home, another boot alone moves nothing.
            assert (await fleet.poll_host("boxa")).state is LinkState.UP
            assert [o.status for o in heard] == ["home"], heard
            # The box is back wiped: its checkpoint dir is gone.
            shutil.rmtree(ckpt_dir)
            await fleet.poll_host("boxa")
            await fleet.mirror.idle()
            return heard
        finally:
            await fleet.close()

    heard = asyncio.run(body())
    [failover] = [o for o in heard if o.status == "failover"]
    assert failover.job == job and failover.step == 30 and "wiped" in failover.line, heard
    [move] = Lineage(MirrorState()).load()
    assert (move.src_host, move.src_job, move.dst_host, move.step) == ("boxa", job, "boxb", 30)
    assert move.auto and not move.fence and move.fenced_at is not None  # killed before
    moved = wait_job(capsys, two_hosts, "boxb", move.dst_job, "running")["jobs"][0]
    assert (Path(moved["ckpt_dir"]) / newest.name).read_bytes() == kept  # not from scratch
    wait_job(capsys, two_hosts, "boxa", job, "killed")  # and not again on boxa
    _rc, out, _ = cli(capsys, "--config", str(two_hosts), "doctor", "boxa", "--json")
    titles = [f["title"] for f in json.loads(out)["findings"]]
    assert any(f"{job} moved from boxa to boxb/{move.dst_job} after boxa came back wiped" in t
               for t in titles), titles
    cli(capsys, "--config", str(two_hosts), "queue", "kill", "boxb", move.dst_job)
