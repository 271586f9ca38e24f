"""remote/drift.py: the scripts a job launched with, and which of them changed since."""

from __future__ import annotations

import os
from pathlib import Path

from gpuroom.remote import drift


def test_only_file_arguments_are_scripts_and_a_change_is_seen(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "conf.yaml").write_text("lr: 1\n")
    argv = ["python3", "-u", "train.py", "--config", "conf.yaml", "--lr", "3", "-c",
            "print('a\x00b')"]
    facts = drift.code_facts(argv, str(tmp_path))
    assert [os.path.basename(s["path"]) for s in facts["scripts"]] == ["train.py", "conf.yaml"]
    assert facts["git"] is None  # not a work tree
    assert drift.changed(facts) == []
    (tmp_path / "train.py").write_text("print(2)\n# longer\n")
    assert drift.changed(facts) == [str(tmp_path / "train.py")]
    (tmp_path / "conf.yaml").unlink()
    assert str(tmp_path / "conf.yaml") in drift.changed(facts)


def test_forged_or_missing_facts_change_nothing() -> None:
    assert drift.changed(None) == []
    assert drift.changed({"scripts": "x"}) == []
    assert drift.changed({"scripts": [{"path": 5}, "y"]}) == []
