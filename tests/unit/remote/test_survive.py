"""remote/survive.py: queue add's warning when checkpoints will not survive a stop (U46)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from gpuroom.remote.queue_events import ckpt_dir_of
from gpuroom.remote.survive import ckpt_warning, node_local_warning


def test_a_checkpoint_dir_outside_every_surviving_mount_is_warned(tmp_path: Path) -> None:
    ckpt = ckpt_dir_of(str(tmp_path / "root"), "default", "j3", None, {})
    assert ckpt == str(tmp_path / "root" / "ckpt" / "default" / "j3")
    said = ckpt_warning(ckpt, ["/workspace"])
    assert said is not None and "not under /workspace" in said
    assert "--durable-dir /workspace/runs" in said


def test_under_a_surviving_mount_by_symlink_or_home_no_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "vol").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "vol")
    ckpt = ckpt_dir_of("/unused", "q", "j1", str(tmp_path / "link" / "runs"), {})
    assert ckpt_warning(ckpt, [str(tmp_path / "vol")]) is None  # its real path is inside
    monkeypatch.setenv("HOME", str(tmp_path))
    via_config = ckpt_dir_of("/unused", "q", "j1", None, {"durable_dir": str(tmp_path / "vol")})
    assert ckpt_warning(via_config, ["~/vol"]) is None
    assert ckpt_warning("/anything", []) is None  # no surviving mount known: no claim


def test_a_slurm_checkpoint_in_the_allocations_tmpdir_is_warned_as_written(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The login node's own TMPDIR is not the allocation's: $TMPDIR is matched as written.
    monkeypatch.setenv("TMPDIR", "/scratch/u/login-tmp")
    shared = ["$HOME", "/scratch/$USER"]
    for ckpt in ("$TMPDIR/ckpt", "${TMPDIR}/run/ckpt", "/dev/shm/ckpt"):
        said = node_local_warning(ckpt, ["$TMPDIR"], shared)
        assert said is not None and "SLURM5" in said and "/scratch/$USER" in said, ckpt
    assert node_local_warning("/scratch/u/login-tmp/ckpt", ["$TMPDIR"], shared) is None
    assert node_local_warning("$TMPDIRS/ckpt", ["$TMPDIR"], shared) is None
    assert node_local_warning("/scratch/u/runs/ckpt", [], shared) is None


def test_an_unset_variable_is_not_resolved_against_the_helpers_own_cwd(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Found by CI, whose clone lived under /tmp: realpath("$TMPDIRS/ckpt") was /tmp/...
    with tempfile.TemporaryDirectory(dir="/tmp") as cwd:
        monkeypatch.chdir(cwd)
        monkeypatch.delenv("TMPDIRS", raising=False)
        said = [node_local_warning("$TMPDIRS/ckpt", ["$TMPDIR"], ["$HOME"]),
                node_local_warning("ckpt", [], ["$HOME"])]
        monkeypatch.undo()
    assert said == [None, None]
    assert node_local_warning("/tmp/ckpt", [], ["$HOME"]) is not None
