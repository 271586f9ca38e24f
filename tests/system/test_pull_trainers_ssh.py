"""Pull verification that fits what real trainers write, over the real sshd.

A file is home when its sha256 is the box's (an exact copy: what the teardown gate needs).
The load check is an extra, run where torch is: ``weights_only=True`` plus a short allow-list
(remote/checkpoint.py SAFE_GLOBALS) for numpy's RNG state in HF Trainer's ``rng_state.pth``
and Lightning's ``hyper_parameters``; never a full unpickle of a box's file. Without torch a
file is "hash-verified, not load-verified", said plainly, and the gate still opens.

The files are built as the trainers build them (real torch, numpy and python RNG states), not
copied from them: HF Trainer's ``_save_rng_state`` saves a dict of ``python`` (random.getstate),
``numpy`` (np.random.get_state) and ``cpu`` (torch's RNG state), plus ``cuda`` on a GPU box;
a Lightning ``.ckpt`` holds ``state_dict``, ``optimizer_states``, ``hyper_parameters`` and the
loop and callback states.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_pull_cli import EXIT_NOT_SAFE, hosts_toml, run, run_job_to_the_end
from test_pull_ssh import own

from gpuroom.tui.transport import pull as transfer

pytestmark = pytest.mark.sshd

JOB = "import os;os.makedirs(os.environ['GPUROOM_CKPT_DIR'],exist_ok=True)"


def hf_checkpoint(out: Path) -> None:
    """``checkpoint-4/`` as HF Trainer leaves it on a CPU box (no ``cuda`` key)."""
    import numpy as np
    import torch

    out.mkdir(parents=True)
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    torch.save(model.state_dict(), out / "pytorch_model.bin")
    torch.save(opt.state_dict(), out / "optimizer.pt")
    torch.save({"last_epoch": 4, "_step_count": 5, "base_lrs": [1e-3]}, out / "scheduler.pt")
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    torch.save({"python": random.getstate(), "numpy": np.random.get_state(),
                "cpu": torch.random.get_rng_state()}, out / "rng_state.pth")
    (out / "trainer_state.json").write_text(json.dumps({"global_step": 4}))


def lightning_checkpoint(out: Path) -> None:
    """``checkpoints/last.ckpt`` shaped as Lightning's ``dump_checkpoint`` writes it, with the
    script's argparse Namespace among its hyper-parameters."""
    import torch

    out.mkdir(parents=True)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.save({
        "epoch": 2, "global_step": 60, "pytorch-lightning_version": "2.4.0",
        "state_dict": model.state_dict(),
        "loops": {"fit_loop": {"state_dict": {}, "epoch_progress": {"total": {"ready": 3}}}},
        "callbacks": {"ModelCheckpoint{'monitor': None, 'mode': 'min'}": {
            "best_model_score": None, "best_model_path": "", "dirpath": str(out)}},
        "optimizer_states": [opt.state_dict()],
        "lr_schedulers": [],
        "hparams_name": "kwargs",
        "hyper_parameters": {"lr": 0.1, "hidden": 4,
                             "args": argparse.Namespace(lr=0.1, epochs=3, data="tiny")},
    }, out / "last.ckpt")


class RunsCode:
    """A pickle global the allow-list does not name: unpickled in full, it would run a command
    on the jump host (here, one that leaves a file)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture
def box_config(sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    try:
        yield hosts_toml(sshd_box, tmp_path)
    finally:
        sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


def job_ckpt_dir(config: Path, jid: str, capsys: pytest.CaptureFixture[str]) -> Path:
    capsys.readouterr()
    assert run("--config", str(config), "queue", "ls", "box", "--json") == 0
    [job] = [j for j in json.loads(capsys.readouterr().out)["jobs"] if j["id"] == jid]
    return Path(job["ckpt_dir"])


def trainers_job(config: Path, sshd_box: Any, capsys: pytest.CaptureFixture[str]) -> str:
    """A finished job whose checkpoint dir holds an HF and a Lightning checkpoint."""
    jid = run_job_to_the_end(config, JOB, capsys)
    ckpt = job_ckpt_dir(config, jid, capsys)
    hf_checkpoint(ckpt / "checkpoint-4")
    lightning_checkpoint(ckpt / "checkpoints")
    own(sshd_box, ckpt)
    return jid


def gate(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    rc = run("--config", str(config), "gate", "box", "--json")
    return rc, json.loads(capsys.readouterr().out)


def test_hf_and_lightning_checkpoints_load_verify_and_open_the_gate(
        box_config: Path, sshd_box: Any, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    jid = trainers_job(box_config, sshd_box, capsys)
    assert gate(box_config, capsys)[0] == EXIT_NOT_SAFE
    assert run("--config", str(box_config), "pull", "box", "--to", str(tmp_path / "p")) == 0
    said = capsys.readouterr().out
    for name in ("checkpoint-4/rng_state.pth", "checkpoint-4/optimizer.pt",
                 "checkpoint-4/pytorch_model.bin", "checkpoints/last.ckpt"):
        if name.endswith((".pt", ".pth", ".ckpt")):
            assert f"{jid}/{name}: verified by load" in said, said
    assert "load test failed" not in said and "--trust" not in said
    rc, result = gate(box_config, capsys)
    assert rc == 0 and result["safe"] is True, result
    [load] = [i for i in result["items"] if i["name"].startswith("checkpoints load")]
    assert load["ok"] and "loaded" in load["detail"], load


def test_without_torch_the_files_are_hash_verified_and_the_gate_opens(
        box_config: Path, sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`make run` installs no torch on the jump host: the exact copies are home all the
    same, and both the pull and the gate say what was not checked and how to check it."""
    monkeypatch.setattr(transfer, "torch_available", lambda: False)
    trainers_job(box_config, sshd_box, capsys)
    assert run("--config", str(box_config), "pull", "box", "--to", str(tmp_path / "p")) == 0
    said = capsys.readouterr().out
    assert "hash-verified, not load-verified" in said, said
    assert "pip install 'gpuroom[torch]'" in said, said
    rc, result = gate(box_config, capsys)
    assert rc == 0 and result["safe"] is True, result
    [load] = [i for i in result["items"] if i["name"].startswith("checkpoints load")]
    assert "hash-verified, not load-verified" in load["detail"], load
    assert "pip install 'gpuroom[torch]'" in load["detail"], load


@pytest.mark.attack("trust", "a pulled checkpoint whose pickle calls os.system: the load "
                             "check refuses it by name and never runs it on the jump host")
def test_a_pickle_that_runs_code_is_refused_by_the_load_check_and_never_run(
        box_config: Path, sshd_box: Any, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    marker = tmp_path / "ran-on-the-jump-host"
    jid = run_job_to_the_end(box_config, JOB, capsys)
    ckpt = job_ckpt_dir(box_config, jid, capsys)
    torch.save({"w": torch.ones(3), "x": RunsCode(marker)}, ckpt / "model.pt")
    own(sshd_box, ckpt)
    assert run("--config", str(box_config), "pull", "box", "--to", str(tmp_path / "p")) == 0
    said = capsys.readouterr().out
    assert not marker.exists()
    assert f"{jid}/model.pt: verified by hash" in said, said
    # os.system pickles as posix.system on Linux: the global is named as the file names it.
    assert "load check refused" in said and "posix.system" in said, said
    assert "--trust" not in said and "weights_only=False" not in said
    rc, result = gate(box_config, capsys)  # an exact copy is home: the gate needs nothing more
    assert rc == 0, result
    [load] = [i for i in result["items"] if i["name"].startswith("checkpoints load")]
    assert "model.pt" in load["detail"] and "refused" in load["detail"], result
    assert not marker.exists()
