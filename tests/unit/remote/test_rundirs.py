"""remote/rundirs.py: TensorBoard and wandb run dirs a job wrote under its cwd (U20, P9)."""

from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from gpuroom.remote import rundirs

STARTED = 1_700_000_000.0


def _write(path: Path, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    os.utime(path, (mtime, mtime))


def test_run_dirs_written_after_the_start_are_found_and_older_ones_are_not(
        tmp_path: Path) -> None:
    _write(tmp_path / "runs" / "exp1" / "events.out.tfevents.1.box", STARTED + 60)
    _write(tmp_path / "runs" / "exp1" / "events.out.tfevents.2.box", STARTED + 90)
    _write(tmp_path / "runs" / "old" / "events.out.tfevents.0.box", STARTED - 3600)
    _write(tmp_path / "wandb" / "offline-run-20250101_000000-abc" / "run-abc.wandb",
           STARTED + 30)
    _write(tmp_path / "wandb" / "run-20250101_000000-def" / "files" / "output.log",
           STARTED + 40)
    _write(tmp_path / "wandb" / "offline-run-20240101_000000-old" / "run-old.wandb",
           STARTED - 10)
    _write(tmp_path / "data" / "train.bin", STARTED + 5)  # not a tracker's file
    doc = rundirs.scan(str(tmp_path), STARTED)
    got = {d["path"]: d["kind"] for d in doc["dirs"]}
    assert got == {"runs/exp1": "tensorboard",
                   "wandb/offline-run-20250101_000000-abc": "wandb-offline",
                   "wandb/run-20250101_000000-def": "wandb"}
    tb = next(d for d in doc["dirs"] if d["path"] == "runs/exp1")
    assert tb["files"] == 2 and tb["newest"] == STARTED + 90
    assert doc["truncated"] is False


def test_skipped_dirs_and_a_cut_walk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / ".venv" / "lib" / "events.out.tfevents.9.box", STARTED + 1)
    _write(tmp_path / "node_modules" / "events.out.tfevents.9.box", STARTED + 1)
    assert rundirs.scan(str(tmp_path), STARTED)["dirs"] == []
    for n in range(30):
        _write(tmp_path / "many" / f"f{n}", STARTED)
    assert rundirs.scan(str(tmp_path), STARTED)["truncated"] is False
    monkeypatch.setattr(rundirs, "MAX_ENTRIES", 10)
    assert rundirs.scan(str(tmp_path), STARTED)["truncated"] is True


def test_main_answers_every_dir_asked_and_a_missing_one_says_so(tmp_path: Path) -> None:
    _write(tmp_path / "a" / "tb" / "events.out.tfevents.1.box", STARTED + 1)
    out = io.StringIO()
    with redirect_stdout(out):
        rc = rundirs.main(["--", str(tmp_path / "a"), str(STARTED),
                           str(tmp_path / "gone"), str(STARTED)])
    doc = json.loads(out.getvalue())
    assert rc == 0 and doc["ok"] and not doc["cut"]
    first, second = doc["scans"]
    assert first["cwd"] == str(tmp_path / "a") and first["dirs"][0]["path"] == "tb"
    assert second["missing"] is True and second["dirs"] == []
