"""remote/ckptunits.py: a job's own checkpoints under its cwd, declared or discovered, each a
file or a directory; a unit still being written is never taken for a checkpoint."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gpuroom.remote import ckptunits
from gpuroom.remote.ckptunits import job_units, newest_unit, step_of


def _write(path: Path, data: bytes = b"x", age_s: float = 60.0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    t = time.time() - age_s
    os.utime(path, (t, t))


@pytest.mark.parametrize(("name", "step"), [
    ("checkpoint-20", 20), ("epoch=0-step=5.ckpt", 5), ("ckpt-000000000400.pt", 400),
    ("iter_1800.pt", 1800), ("last.ckpt", None), ("ckpt.pt", None)])
def test_the_step_is_what_the_name_states_or_unknown(name: str, step: int | None) -> None:
    assert step_of(name) == step


def test_discovered_units_skip_trackers_side_files_and_old_ones(tmp_path: Path) -> None:
    started = time.time() - 120
    _write(tmp_path / "old.pt", age_s=600)  # from before the job: not its checkpoint
    _write(tmp_path / "out" / "ckpt.pt", age_s=30)
    for n in ("model.safetensors", "training_args.bin"):
        _write(tmp_path / "checkpoint-20" / n, age_s=20)
    _write(tmp_path / "final" / "training_args.bin", age_s=10)
    _write(tmp_path / "runs" / "events.out.tfevents.1.box", age_s=5)
    _write(tmp_path / "train.log", age_s=5)
    found = job_units(str(tmp_path), started, [])
    assert found is not None and found["source"] == "discovered"
    assert [(u["path"], u["kind"], u["step"]) for u in found["units"]] == [
        ("out/ckpt.pt", "file", None), ("checkpoint-20", "dir", 20)]
    assert found["units"][1]["files"] == ["checkpoint-20/model.safetensors",
                                          "checkpoint-20/training_args.bin"]
    newest = newest_unit(found)
    assert newest is not None and newest["path"] == str(tmp_path / "checkpoint-20")


def test_a_unit_being_written_is_never_the_checkpoint(tmp_path: Path) -> None:
    _write(tmp_path / "checkpoints" / "epoch=0-step=5.ckpt", age_s=30)
    _write(tmp_path / "checkpoints" / "last.ckpt", age_s=0)  # just now: maybe half a file
    _write(tmp_path / "checkpoint-30" / "model.safetensors", age_s=30)
    _write(tmp_path / "checkpoint-30" / "optimizer.pt", age_s=0)  # the dir is still filling
    found = job_units(str(tmp_path), time.time() - 120, [])
    assert found is not None
    assert [u["path"] for u in found["units"]] == ["checkpoints/epoch=0-step=5.ckpt"]
    assert found["writing"] == ["checkpoint-30", "checkpoints/last.ckpt"]


def test_a_file_growing_between_two_stats_is_being_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    unit = tmp_path / "ckpt.pt"
    _write(unit, age_s=10)
    real_sleep = time.sleep

    def grow(seconds: float) -> None:  # the program appends while gpuroom looks
        with open(unit, "ab") as f:
            f.write(b"more")
        t = time.time() - 10
        os.utime(unit, (t, t))
        real_sleep(seconds)

    monkeypatch.setattr(ckptunits.time, "sleep", grow)
    found = job_units(str(tmp_path), time.time() - 120, [])
    assert found is not None and found["units"] == [] and found["writing"] == ["ckpt.pt"]


def test_declared_globs_name_units_whatever_their_age(tmp_path: Path) -> None:
    _write(tmp_path / "weights" / "a.bin", age_s=9999)
    _write(tmp_path / "stray.pt", age_s=10)
    found = job_units(str(tmp_path), time.time(), ["weights"])
    assert found is not None and found["source"] == "declared"
    assert [(u["path"], u["kind"]) for u in found["units"]] == [("weights", "dir")]


def test_the_walk_is_bounded_and_says_it_was_cut(tmp_path: Path) -> None:
    for i in range(30):
        _write(tmp_path / f"d{i}" / "x.txt")
    found = job_units(str(tmp_path), 0.0, [], max_entries=10)
    assert found is not None and found["cut"]
