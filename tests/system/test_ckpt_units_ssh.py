"""Checkpoints are what the job writes: three programs shaped like nanoGPT, HF's Trainer and
Lightning, run through the real queue on the test sshd by the box's python3, each
writing its checkpoints its own way under its cwd and never into $GPUROOM_CKPT_DIR.

For each: the job's checkpoint is the right unit with the step its name states (or none), a
tracker's event file or ``training_args.bin`` is never one; the gate refuses "safe" before a
pull and names the units; after ``gpuroom pull`` they are home and the gate passes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_pull_cli import EXIT_NOT_SAFE, hosts_toml, run

from gpuroom.tui.config import HostConfig
from gpuroom.tui.snapshot import Job, load_answer, read_queue_view
from gpuroom.tui.transport.link import HostLink

pytestmark = pytest.mark.sshd

UNITS_ITEM = "every job's checkpoints and outputs home (declared, discovered or gpuroom's)"
SETTLE = "import time; time.sleep(3.5)\n"  # past the "still being written" window

def torch_bytes(obj: Any) -> str:
    """``torch.save`` of ``obj`` as base64: the box's python has no torch (the box user cannot
    read this venv), so the job writes real torch files made here."""
    import base64
    import io

    import torch
    buf = io.BytesIO()
    torch.save(obj, buf)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def nanogpt() -> str:
    """Overwrites out/ckpt.pt in place three times, as nanoGPT's loop does."""
    import torch
    blobs = [torch_bytes({"iter_num": it, "model": {"w": torch.full((4,), float(it))}})
             for it in range(3)]
    return ("import base64, os\nos.makedirs('out', exist_ok=True)\n"
            f"for b in {blobs!r}:\n"
            "    with open('out/ckpt.pt', 'wb') as f:\n"
            "        f.write(base64.b64decode(b))\n") + SETTLE


HF = ("import os\n"
      "for step in (10, 20):\n"
      "    d = 'checkpoint-%d' % step\n"
      "    os.makedirs(d)\n"
      "    for n in ('model.safetensors', 'optimizer.pt', 'trainer_state.json',"
      " 'training_args.bin'):\n"
      "        open(os.path.join(d, n), 'wb').write(os.urandom(2000))\n"
      "os.makedirs('final')\n"
      "open('final/training_args.bin', 'wb').write(b'args')\n") + SETTLE


def lightning() -> str:
    import torch
    blob = torch_bytes({"state_dict": {"w": torch.ones(2)}, "global_step": 5})
    return ("import base64, os\n"
            f"b = base64.b64decode({blob!r})\n"
            "os.makedirs('checkpoints')\n"
            "open('checkpoints/epoch=0-step=5.ckpt', 'wb').write(b)\n"
            "open('checkpoints/last.ckpt', 'wb').write(b)\n"
            "os.makedirs('lightning_logs/version_0')\n"
            "open('lightning_logs/version_0/events.out.tfevents.x', 'wb').write(b'e')\n"
            ) + SETTLE


@pytest.fixture
def box_config(sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    try:
        yield hosts_toml(sshd_box, tmp_path)
    finally:
        sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


def add_and_finish(sshd_box: Any, config: Path, cwd: str, code: str,
                   capsys: pytest.CaptureFixture[str], *opts: str) -> str:
    """Queue ``code`` in ``cwd`` on the box (its python3); its id once it has succeeded."""
    assert sshd_box.run("rm", "-rf", cwd).returncode == 0  # the box's home outlives a test
    assert sshd_box.run("mkdir", "-p", cwd).returncode == 0
    capsys.readouterr()
    assert run("--config", str(config), "queue", "add", "box", "--cwd", cwd, *opts, "--",
               "python3", "-c", code) == 0
    added = capsys.readouterr()
    assert "$GPUROOM_CKPT_DIR is" in added.err or "--ckpt" in added.err, added.err
    deadline = time.monotonic() + 90
    while True:
        assert run("--config", str(config), "queue", "ls", "box", "--json") == 0
        jobs = json.loads(capsys.readouterr().out)["jobs"]
        if jobs and jobs[-1]["state"] in ("succeeded", "failed"):
            break
        assert time.monotonic() < deadline, jobs
        time.sleep(0.3)
    assert jobs[-1]["state"] == "succeeded", jobs
    return str(jobs[-1]["id"])


def shown(sshd_box: Any, jid: str) -> Job:
    """The job as ``queue show`` answers over the real link: its newest checkpoint."""
    async def ask() -> Job:
        link = HostLink(HostConfig(name="box", ssh=sshd_box.alias),
                        ssh_config=sshd_box.ssh_config)
        try:
            result = await link.helper("queue", "show", jid)
        finally:
            await link.close()
        return read_queue_view(load_answer(result.stdout)).jobs[0]
    return asyncio.run(ask())


def gate(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    rc = run("--config", str(config), "gate", "box", "--json")
    doc = json.loads(capsys.readouterr().out)
    return rc, {i["name"]: i for i in doc["items"]}


def pull_then_gate(config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                   jid: str, units: list[str]) -> Path:
    rc, items = gate(config, capsys)
    item = items[UNITS_ITEM]
    assert rc == EXIT_NOT_SAFE and not item["ok"], items
    for unit in units:
        assert f"{unit} (discovered" in item["detail"] and "NOT home" in item["detail"], item
    assert run("--config", str(config), "pull", "box", "--to", str(tmp_path / "p")) == 0
    capsys.readouterr()
    return tmp_path / "p" / "box" / jid / "cwd"


def test_nanogpt_style_ckpt_overwritten_in_place(
        sshd_box: Any, box_config: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    cwd = f"{sshd_box.home}/nano"
    jid = add_and_finish(sshd_box, box_config, cwd, nanogpt(), capsys)
    ckpt = shown(sshd_box, jid).checkpoint
    assert ckpt is not None and ckpt.path == f"{cwd}/out/ckpt.pt", ckpt
    assert (ckpt.source, ckpt.kind, ckpt.step) == ("discovered", "file", None)
    home = pull_then_gate(box_config, tmp_path, capsys, jid, ["out/ckpt.pt"])
    import torch
    got = torch.load(home / "out" / "ckpt.pt", weights_only=True)
    assert got["iter_num"] == 2  # the last overwrite, whole
    rc, items = gate(box_config, capsys)
    assert rc == 0 and items[UNITS_ITEM]["ok"], items
    assert "out/ckpt.pt (discovered, step ?) home" in items[UNITS_ITEM]["detail"]


def test_hf_style_checkpoint_dirs(sshd_box: Any, box_config: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    cwd = f"{sshd_box.home}/hf"
    jid = add_and_finish(sshd_box, box_config, cwd, HF, capsys)
    job = shown(sshd_box, jid)
    ckpt = job.checkpoint
    # Not final/training_args.bin, written last: a unit is a checkpoint-N dir, whole.
    assert ckpt is not None and ckpt.path == f"{cwd}/checkpoint-20", ckpt
    assert (ckpt.source, ckpt.kind, ckpt.step) == ("discovered", "dir", 20)
    home = pull_then_gate(box_config, tmp_path, capsys, jid, ["checkpoint-10", "checkpoint-20"])
    for step in (10, 20):
        assert sorted(p.name for p in (home / f"checkpoint-{step}").iterdir()) == [
            "model.safetensors", "optimizer.pt", "trainer_state.json", "training_args.bin"]
    rc, items = gate(box_config, capsys)
    assert rc == 0 and items[UNITS_ITEM]["ok"], items
    assert "checkpoint-20 (discovered, step 20) home" in items[UNITS_ITEM]["detail"]


def test_lightning_style_ckpts_beside_tensorboard(
        sshd_box: Any, box_config: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    cwd = f"{sshd_box.home}/pl"
    jid = add_and_finish(sshd_box, box_config, cwd, lightning(), capsys)
    job = shown(sshd_box, jid)
    ckpt = job.checkpoint
    # The event file is the newest file in the cwd; it is a tracker's, never a checkpoint.
    assert ckpt is not None and ckpt.path == f"{cwd}/checkpoints/last.ckpt", ckpt
    assert (ckpt.source, ckpt.step) == ("discovered", None)
    assert job.ckpt_units is not None
    assert [(u.path, u.step) for u in job.ckpt_units.units] == [
        ("checkpoints/epoch=0-step=5.ckpt", 5), ("checkpoints/last.ckpt", None)]
    home = pull_then_gate(box_config, tmp_path, capsys, jid,
                          ["checkpoints/epoch=0-step=5.ckpt", "checkpoints/last.ckpt"])
    assert (home / "checkpoints" / "last.ckpt").is_file()
    rc, items = gate(box_config, capsys)
    assert items[UNITS_ITEM]["ok"], items
    # The tracker's run dir is the rundirs item's (copy it home and remove it, as it says).
    assert not items["tracker run dirs (TensorBoard, offline wandb) copied off the box"]["ok"]
    assert sshd_box.run("rm", "-r", f"{cwd}/lightning_logs").returncode == 0
    rc, items = gate(box_config, capsys)
    assert rc == 0, items


def test_a_job_with_no_checkpoint_seen_is_not_safe(
        sshd_box: Any, box_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jid = add_and_finish(sshd_box, box_config, f"{sshd_box.home}/none",
                         "open('notes.txt', 'w').write('x')", capsys)
    rc, items = gate(box_config, capsys)
    assert rc == EXIT_NOT_SAFE and not items[UNITS_ITEM]["ok"], items
    assert f"{jid}: no checkpoint seen" in items[UNITS_ITEM]["detail"]


def test_declared_ckpt_and_the_users_ckpt_dir_are_honoured(
        sshd_box: Any, box_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cwd = f"{sshd_box.home}/decl"
    code = ("import os\nos.makedirs(os.environ['GPUROOM_CKPT_DIR'], exist_ok=True)\n"
            "open(os.path.join(os.environ['GPUROOM_CKPT_DIR'], 'model.pt'), 'wb').write(b'm')\n"
            "open('weights.bin', 'wb').write(b'w')\n") + SETTLE
    jid = add_and_finish(sshd_box, box_config, cwd, code, capsys,
                         "--ckpt", "weights.bin", "--env", "GPUROOM_CKPT_DIR=mine")
    job = shown(sshd_box, jid)
    assert job.ckpt_dir == f"{cwd}/mine"  # the user's, not gpuroom's own dir
    assert job.checkpoint is not None and job.checkpoint.path == f"{cwd}/weights.bin"
    assert job.checkpoint.source == "declared"
    # A value the queue would have to expand is refused, never silently replaced.
    capsys.readouterr()
    assert run("--config", str(box_config), "queue", "add", "box", "--env",
               "GPUROOM_CKPT_DIR=$SCRATCH/x", "--", "true") != 0
    err = capsys.readouterr().err
    assert "GPUROOM_CKPT_DIR" in err and "literal path" in err, err
