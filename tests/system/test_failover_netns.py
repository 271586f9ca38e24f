"""Issue 21 item 4: a run survives losing its box. Two real OpenSSH sshd, each alone in its
network namespace (tests/harness/netns.py TwoBoxTopology, behind the 10.213/16 unreachable
safety route). examples/train_resumable.py runs on box a with --failover boxb; the fleet
mirrors its checkpoints home; a's sshd is killed, its link taken down and everything on it
stopped; after failover_after_s the fleet moves the job to b from the newest mirrored step;
b's final model equals an uninterrupted run's bit for bit (CPU); a comes back, its copy is
fenced (killed), and nothing ran twice. Real torch, real queue, real pulls and pushes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w

torch = pytest.importorskip("torch")
from harness import netns  # noqa: E402
from harness.boxenv import job_python, python_with_env  # noqa: E402
from harness.sshd import ClientIdentity  # noqa: E402
from harness.torchtree import assert_tree_equal  # noqa: E402
from paths import ROOT  # noqa: E402

from gpuroom.tui import config as cfg  # noqa: E402
from gpuroom.tui.cli.main import main  # noqa: E402
from gpuroom.tui.fleet.live import Fleet  # noqa: E402
from gpuroom.tui.fleet.mirror import MirrorOutcome  # noqa: E402

pytestmark = pytest.mark.sshd

EXAMPLE = ROOT / "examples" / "train_resumable.py"
# Small and short, for `make test`: ~6 s of training with a save every 5 steps.
STEPS = 60
SAVE_EVERY = 5
STEP_SLEEP_S = 0.1
CUT_AFTER_STEP = 15  # the mirror has brought at least this step home when a is lost
WAIT_S = 120.0


@pytest.fixture
def two_boxes(ssh_identity: ClientIdentity) -> Iterator[netns.TwoBoxTopology]:
    reason = netns.missing_requirements()
    if reason is not None:
        pytest.skip(reason)
    try:
        with netns.two_box_topology(ssh_identity) as topo:
            yield topo
    except netns.NetnsUnavailable as exc:
        pytest.skip(str(exc))


def _box_dirs(topo: netns.TwoBoxTopology, tmp_path: Path) -> Path:
    """hosts.toml for boxa and boxb: each its own GPUROOM_HOME and tmux socket dir, so each
    box's runner and jobs start inside its own namespace."""
    user = topo.identity.user
    hosts: dict[str, Any] = {}
    for box in netns.TwoBoxTopology.BOXES:
        root = user.home / f"failover-{box}"
        for d in (root, root / "tmux"):
            d.mkdir(exist_ok=True)
            os.chown(d, user.uid, user.gid)
        (root / "tmux").chmod(0o700)
        wrapper = python_with_env(root / "python3", {"GPUROOM_HOME": str(root / "home"),
                                                     "TMUX_TMPDIR": str(root / "tmux")})
        os.chown(wrapper, user.uid, user.gid)
        hosts[topo.alias(box)] = {"ssh": topo.alias(box), "python": str(wrapper),
                                  "pull_to": str(tmp_path / "home")}
    config = tmp_path / "hosts.toml"
    config.write_bytes(tomli_w.dumps({
        "settings": {"ssh_config": str(topo.ssh_config), "failover_after_s": 2.0,
                     "down_after_s": 1.0},
        "hosts": hosts}).encode())
    return config


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    rc = main(list(argv))
    out = capsys.readouterr()
    assert rc == 0 and "Traceback" not in out.err, out.err
    return out.out


def _job(capsys: pytest.CaptureFixture[str], config: Path, host: str,
         job: str) -> dict[str, Any]:
    out = _cli(capsys, "--config", str(config), "queue", "show", "--json", host, job)
    doc: dict[str, Any] = json.loads(out.strip().splitlines()[-1])["jobs"][0]
    return doc


def _wait_state(capsys: pytest.CaptureFixture[str], config: Path, host: str, job: str,
                states: tuple[str, ...]) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while True:
        doc = _job(capsys, config, host, job)
        if doc["state"] in states:
            return doc
        assert time.monotonic() < deadline, doc
        time.sleep(0.3)


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _straight_run(tmp_path: Path) -> dict[str, Any]:
    """The reference: the same command with no interruption, here."""
    ckpt_dir = tmp_path / "straight"
    env = {k: v for k, v in os.environ.items() if k != "GPUROOM_CKPT_DIR"}
    subprocess.run([sys.executable, str(EXAMPLE), "--ckpt-dir", str(ckpt_dir), "--steps",
                    str(STEPS), "--save-every", str(SAVE_EVERY)], env=env, check=True,
                   capture_output=True, timeout=120)
    final: dict[str, Any] = torch.load(ckpt_dir / f"ckpt-{STEPS:012d}.pt", weights_only=True)
    return final


@pytest.mark.attack("faults", "the box is lost mid-run (sshd killed, link down, nothing on "
                    "it runs): the job fails over to the other box and ends bit-exact")
def test_a_lost_box_fails_over_from_the_mirror_and_ends_bit_exact(
        two_boxes: netns.TwoBoxTopology, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    topo = two_boxes
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    config = _box_dirs(topo, tmp_path)
    python, site = job_python(topo)
    out = _cli(capsys, "--config", str(config), "queue", "add", "--json", "--failover", "boxb",
               "--env", f"PYTHONPATH={site}", "--cwd", str(ROOT), "boxa", "--", python,
               str(EXAMPLE), "--steps", str(STEPS), "--save-every", str(SAVE_EVERY),
               "--sleep-per-step", str(STEP_SLEEP_S))
    job = str(json.loads(out.strip().splitlines()[-1])["job"])

    async def body() -> tuple[list[MirrorOutcome], dict[str, float]]:
        heard: list[MirrorOutcome] = []
        times: dict[str, float] = {}
        fleet = Fleet(cfg.load(config), mirror=True, on_mirror=heard.append)
        assert fleet.mirror is not None
        try:
            deadline = time.monotonic() + WAIT_S
            await fleet.poll_host("boxb")
            while True:  # a trains; the mirror brings its checkpoints home
                await fleet.poll_host("boxa")
                await fleet.mirror.idle()
                home = fleet.mirror.homes("boxa").get(job)
                if home is not None and home.step >= CUT_AFTER_STEP:
                    break
                assert time.monotonic() < deadline, heard
                await asyncio.sleep(0.2)
            # a is lost: sshd and sessions killed, link down, its runner and job stopped.
            topo.cut("a")
            frozen = topo.pids("a")
            _signal_all(frozen, signal.SIGSTOP)
            times["lost"] = time.monotonic()
            while not any(o.status == "failover" for o in heard):
                assert time.monotonic() < deadline, heard
                await fleet.poll_host("boxb")
                await fleet.poll_host("boxa")
                await asyncio.sleep(0.2)
            times["moved"] = time.monotonic()
            print(f"cut at step {fleet.mirror.homes('boxa')[job].step} home; "
                  f"moved after {times['moved'] - times['lost']:.1f} s", flush=True)
            # a is back, its runner and job too: the first good poll fences the copy (the
            # runner kills it) before it can finish.
            topo.restore("a")
            _signal_all(frozen, signal.SIGCONT)
            while not any(o.status == "fenced" for o in heard):
                assert time.monotonic() < deadline, heard
                await fleet.poll_host("boxa")
                await asyncio.sleep(0.2)
        finally:
            await fleet.close()
        return heard, times

    try:
        heard, times = asyncio.run(body())
    finally:
        _signal_all(topo.pids("a"), signal.SIGCONT)  # never leave a stopped tree behind
    [failover] = [o for o in heard if o.status == "failover"]
    assert failover.step is not None and failover.step >= CUT_AFTER_STEP
    new_job = failover.line.split("-> boxb/")[1].split()[0]
    done = _wait_state(capsys, config, "boxb", new_job, ("succeeded", "failed"))
    assert done["state"] == "succeeded", done
    log = Path(done["log"]).read_text()
    assert f"resumed from step {failover.step}" in log, log[-2000:]
    final = torch.load(Path(done["ckpt_dir"]) / f"ckpt-{STEPS:012d}.pt", weights_only=True)
    straight = _straight_run(tmp_path)
    for section in ("model", "optimizer", "scheduler", "sampler"):
        assert_tree_equal(straight[section], final[section], section)
    assert torch.equal(straight["rng"]["torch"], final["rng"]["torch"])
    assert straight["rng"]["python"] == final["rng"]["python"]
    # Nothing ran twice: a's copy was killed by the fence, never finished.
    old = _wait_state(capsys, config, "boxa", job, ("killed", "succeeded", "failed"))
    assert old["state"] == "killed", old
    print(f"failover: lost -> moved {times['moved'] - times['lost']:.1f} s "
          f"(failover_after_s 2), from mirrored step {failover.step}")
