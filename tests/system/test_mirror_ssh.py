"""Issue 21 item 1 over the test sshd: a running job's new checkpoints come home while it
trains (verified by load), the newest K stay, a box lost mid-pull leaves nothing counted home
and the next poll resumes, `queue add --mirror` opts a job in, and `gpuroom watch` does it with
no screen.

Real queue on the box (the helper's runner), real pulls (SFTP, rsync --bwlimit), real torch.
The test writes the job's checkpoints into its checkpoint dir the way remote/checkpoint.py
commits them (a dot-named temp file renamed into place), so each step lands when the test says.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import tomli_w

torch = pytest.importorskip("torch")

from gpuroom.tui import config as cfg  # noqa: E402
from gpuroom.tui.cli.main import main  # noqa: E402
from gpuroom.tui.fleet.intent import MIRROR_ENV  # noqa: E402
from gpuroom.tui.fleet.live import Fleet  # noqa: E402
from gpuroom.tui.fleet.mirror import MirrorOutcome, mirror_dir  # noqa: E402
from gpuroom.tui.present.jobs import job_rows  # noqa: E402

pytestmark = pytest.mark.sshd

WAIT_S = 60.0
JOB = ["sh", "-c", 'mkdir -p "$GPUROOM_CKPT_DIR" && sleep 300']


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sshd_box: Any) -> Any:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    yield tmp_path
    # The runner lives in the test user's tmux server, outside sshd's tree: end it here.
    sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")
    # The runner may outlive its session; it and the test's jobs must not read the next
    # test's fresh queue.
    sshd_box.run("sh", "-c", 'pkill -u "$(id -u)" -f "[q]ueue runner"; '
                 'pkill -u "$(id -u)" -f "[s]leep 300"')


def write_config(box: Any, tmp: Path, host: dict[str, Any] | None = None,
                 **settings: Any) -> Path:
    p = tmp / "hosts.toml"
    p.write_bytes(tomli_w.dumps({
        "settings": {"ssh_config": str(box.ssh_config), "poll_interval_s": 0.5, **settings},
        "hosts": {"box": {"ssh": box.alias, "pull_to": str(tmp / "home"), **(host or {})}},
    }).encode())
    return p


def save_ckpt(box: Any, ckpt_dir: Path, step: int, numel: int = 1000) -> Path:
    """Commit ``ckpt-<step>.pt`` as the box's user, the way the Checkpointer does."""
    tmp = ckpt_dir / f".ckpt-{step:012d}.pt.tmp-test"
    gen = torch.Generator().manual_seed(step)
    torch.save({"step": step, "w": torch.rand(numel, generator=gen)}, tmp)
    os.lchown(tmp, box.identity.user.uid, box.identity.user.gid)
    final = ckpt_dir / f"ckpt-{step:012d}.pt"
    os.replace(tmp, final)
    return final


async def running_job(fleet: Fleet, jid: str | None = None) -> tuple[str, Path]:
    """Poll until the (given or only) job runs with its checkpoint dir made."""
    deadline = time.monotonic() + WAIT_S
    while True:
        state = await fleet.poll_host("box")
        for job in state.view.jobs if state.view is not None else ():
            if (jid is None or job.id == jid) and job.state == "running" and job.ckpt_dir \
                    and Path(job.ckpt_dir).is_dir():
                return job.id, Path(job.ckpt_dir)
        assert time.monotonic() < deadline, state.error or state.view
        await asyncio.sleep(0.3)


def queue_id(fleet: Fleet, jid: str, host: str = "box") -> str:
    """The identity of the queue ``jid`` was last polled in."""
    view = fleet.state(host).view
    qid = next((j.queue_id for j in view.jobs if j.id == jid), None) if view else None
    assert qid is not None, view
    return qid


async def mirrored(fleet: Fleet) -> None:
    """One poll, and the mirror cycle it started (if any) to its end."""
    await fleet.poll_host("box")
    assert fleet.mirror is not None
    await fleet.mirror.idle()


async def test_new_checkpoints_come_home_verified_and_the_newest_k_stay(
        sshd_box: Any, dirs: Path) -> None:
    config = cfg.load(write_config(sshd_box, dirs, {"mirror": True}, mirror_keep=2))
    heard: list[MirrorOutcome] = []
    fleet = Fleet(config, mirror=True, on_mirror=heard.append)
    try:
        jid, ckpt_dir = await running_job(fleet, await _add(fleet, JOB))
        host = config.hosts["box"]
        local = mirror_dir(host, jid, queue_id(fleet, jid))
        first = save_ckpt(sshd_box, ckpt_dir, 10)
        await mirrored(fleet)
        assert [(o.status, o.step) for o in heard] == [("home", 10)], heard
        assert "verified by load" in heard[0].line
        assert (local / first.name).read_bytes() == first.read_bytes()
        home = fleet.mirror.homes("box")[jid] if fleet.mirror else None
        assert home is not None and home.step == 10 and home.verified_by == "load"

        await mirrored(fleet)  # nothing new on the box: no second transfer
        assert len(heard) == 1

        save_ckpt(sshd_box, ckpt_dir, 20)
        newest = save_ckpt(sshd_box, ckpt_dir, 30)
        await mirrored(fleet)  # two steps since the last poll: only the newest travels
        save_ckpt(sshd_box, ckpt_dir, 40)
        await mirrored(fleet)
        assert [(o.status, o.step) for o in heard] == [("home", 10), ("home", 30),
                                                        ("home", 40)]
        assert sorted(p.name for p in local.iterdir()) == [newest.name, "ckpt-000000000040.pt"]
        # The queue pane reads it from the host's state.
        state = await fleet.poll_host("box")
        [row] = [r for r in job_rows(state, time.time()) if r.id == jid]
        assert row.home_step == 40 and row.home_text.startswith("ckpt step 40 home, ")
        # `gpuroom pull`'s records (the gate's) are not the mirror's to rewrite.
        assert not (dirs / "state" / "gpuroom" / "pulls.json").exists()
    finally:
        await fleet.close()


async def _add(fleet: Fleet, argv: list[str]) -> str:
    """Add a job on the box from this jump host (as the room's `a` does): only a job added
    from here, and so recorded here, is mirrored (tui/fleet/intent.py)."""
    return await fleet.queue_add("box", argv)


@pytest.mark.attack("faults", "the box vanishes mid-pull: no half checkpoint counted home")
async def test_a_box_lost_mid_pull_leaves_nothing_counted_home_and_the_next_poll_resumes(
        sshd_box: Any, dirs: Path) -> None:
    # rsync --bwlimit (the mirror's cap) stretches a 24 MiB pull to a few seconds.
    config = cfg.load(write_config(sshd_box, dirs, {"mirror": True},
                                   mirror_bwlimit_kbps=6000))
    heard: list[MirrorOutcome] = []
    fleet = Fleet(config, mirror=True, on_mirror=heard.append)
    try:
        jid, ckpt_dir = await running_job(fleet, await _add(fleet, JOB))
        local = mirror_dir(config.hosts["box"], jid, queue_id(fleet, jid))
        save_ckpt(sshd_box, ckpt_dir, 1)
        await mirrored(fleet)
        assert [(o.status, o.step) for o in heard] == [("home", 1)], heard
        big = save_ckpt(sshd_box, ckpt_dir, 2, numel=6 << 20)  # 24 MiB
        size = big.stat().st_size
        await fleet.poll_host("box")  # starts the cycle; the pull runs in the background
        part = local / (big.name + ".part")
        deadline = time.monotonic() + WAIT_S
        while not (part.exists() and part.stat().st_size > size // 8):
            assert time.monotonic() < deadline, heard
            await asyncio.sleep(0.05)
        sshd_box.kill_all()  # the box is gone with every session, mid-file
        assert fleet.mirror is not None
        await fleet.mirror.idle()
        assert heard[-1].status == "failed" and heard[-1].step is None, heard
        assert fleet.mirror.homes("box")[jid].step == 1  # the half file is not home
        assert not (local / big.name).exists()
        kept = part.stat().st_size
        assert 0 < kept < size

        sshd_box.start()  # back (a box restarted with its disk); the job never stopped
        deadline = time.monotonic() + WAIT_S
        while fleet.mirror.homes("box")[jid].step != 2:
            assert time.monotonic() < deadline, heard
            await mirrored(fleet)
        assert heard[-1].status == "home" and "verified by load" in heard[-1].line
        # Resumed: the kept bytes did not travel again (rsync's own protocol adds a few KiB).
        assert heard[-1].received < size - kept + (64 << 10)
        assert (local / big.name).read_bytes() == big.read_bytes()
        assert not part.exists()
    finally:
        await fleet.close()


def test_queue_add_mirror_opts_one_job_in_on_a_host_that_does_not_mirror(
        sshd_box: Any, dirs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(sshd_box, dirs)  # generic-ssh, no mirror setting: off by default
    assert main(["--config", str(path), "queue", "add", "--json", "box", "--", *JOB]) == 0
    plain = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["job"]
    assert main(["--config", str(path), "queue", "add", "--json", "--mirror", "box", "--",
                 *JOB]) == 0
    asked = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["job"]

    async def body() -> list[MirrorOutcome]:
        config = cfg.load(path)
        heard: list[MirrorOutcome] = []
        fleet = Fleet(config, mirror=True, on_mirror=heard.append)
        try:
            _, first_dir = await running_job(fleet, plain)
            save_ckpt(sshd_box, first_dir, 5)
            await mirrored(fleet)
            assert heard == []  # not asked, not a spot host: stays on the box
            await _kill(fleet, plain)
            _, ckpt_dir = await running_job(fleet, asked)
            state = await fleet.poll_host("box")
            assert state.view is not None
            [job] = [j for j in state.view.jobs if j.id == asked]
            assert job.env.get(MIRROR_ENV) == "1"
            save_ckpt(sshd_box, ckpt_dir, 7)
            await mirrored(fleet)
            return heard
        finally:
            await fleet.close()

    heard = asyncio.run(body())
    assert [(o.job, o.status, o.step) for o in heard] == [(asked, "home", 7)]


def test_gpuroom_watch_mirrors_with_no_screen_and_stops_on_ctrl_c(
        sshd_box: Any, dirs: Path) -> None:
    path = write_config(sshd_box, dirs, {"mirror": True})

    async def start() -> tuple[str, Path, str]:
        fleet = Fleet(cfg.load(path))
        try:
            jid, ckpt_dir = await running_job(fleet, await _add(fleet, JOB))
            qid = queue_id(fleet, jid)
        finally:
            await fleet.close()
        save_ckpt(sshd_box, ckpt_dir, 3)
        return jid, ckpt_dir, qid

    jid, ckpt_dir, qid = asyncio.run(start())
    proc = subprocess.Popen([sys.executable, "-m", "gpuroom.tui.cli.main", "--config",
                             str(path), "watch"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:  # readline blocks; the watch's lines end it
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if "home" in line:
                break
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert lines and lines[-1].startswith(f"box/{jid}: ckpt step 3 home (verified by load"), \
        (lines, proc.stderr)
    assert proc.returncode == 0 and "Traceback" not in err, err
    home = mirror_dir(cfg.load(path).hosts["box"], jid, qid) / "ckpt-000000000003.pt"
    assert home.read_bytes() == (ckpt_dir / home.name).read_bytes()


async def _kill(fleet: Fleet, jid: str) -> None:
    from gpuroom.tui.transport.link import HostLink

    link = HostLink(fleet.config.hosts["box"], ssh_config=fleet.config.ssh_config_path())
    try:
        await link.helper("queue", "kill", "--", jid, timeout_s=60.0)
    finally:
        await link.close()
