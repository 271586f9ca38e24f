"""A clone with nothing beside it passes its tests: every input the suite reads lives in the
repository (tests/fixtures carries the real captures), never in a sibling folder of the clone
(seen: 73 unit tests failed from a clone not beside shared/, their module-level
parametrisation reading a path outside the repository)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import FIXTURES, ROOT, TESTS


def _tracked_and_new(root: Path) -> list[str]:
    """The files a clone would hold: tracked ones and the untracked ones git does not ignore."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                          "--exclude-standard"], capture_output=True, check=True, timeout=60)
    return [p for p in out.stdout.decode().split("\0") if p and (root / p).is_file()]


def test_the_fixtures_are_the_repositorys_own() -> None:
    assert FIXTURES == TESTS / "fixtures" or "GPUROOM_FIXTURES" in os.environ
    captures = [p for p in FIXTURES.rglob("*.txt")]
    assert len(captures) > 40
    assert (FIXTURES / "INDEX.md").is_file()


def test_no_capture_was_edited_from_its_source() -> None:
    """Where the steering copy of the captures sits beside the clone, every capture the
    repository carries is byte-for-byte the same (a capture is never edited to fit a parser)."""
    source = ROOT.parent / "shared" / "fixtures"
    if not source.is_dir():
        pytest.skip("no shared/fixtures beside the clone to compare with")
    ours = [p for p in (TESTS / "fixtures").rglob("*") if p.is_file()]
    differ = [str(p.relative_to(TESTS / "fixtures")) for p in ours
              if (source / p.relative_to(TESTS / "fixtures")).is_file()
              and (source / p.relative_to(TESTS / "fixtures")).read_bytes() != p.read_bytes()]
    assert differ == []


@pytest.mark.slow
def test_the_suite_collects_from_a_clone_with_nothing_beside_it(tmp_path: Path) -> None:
    """Copy the repository alone into an empty folder, collect every test there (a path that
    reaches outside the clone fails collection: module-level parametrisation), and run the
    tests whose fakes replay the captures (a fake looking beside the clone fails them)."""
    clone = tmp_path / "alone" / "gpuroom"
    for rel in _tracked_and_new(ROOT):
        dest = clone / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest)
    assert not (clone.parent / "shared").exists() and not (clone / "shared").exists()
    env = {k: v for k, v in os.environ.items() if k != "GPUROOM_FIXTURES"}
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "tests"], check=False, cwd=clone,
                          env=env,
                          capture_output=True, text=True, timeout=300)
    tail = (done.stdout + done.stderr)[-3000:]
    assert done.returncode == 0, tail
    assert " error" not in tail.splitlines()[-1], tail
    assert "tests collected" in tail, tail
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "tests/unit/remote/test_gpu_probe.py",
                          "tests/unit/remote/test_gpu_parsers.py"], check=False, cwd=clone,
                         env=env, capture_output=True, text=True, timeout=300)
    tail = (ran.stdout + ran.stderr)[-3000:]
    assert ran.returncode == 0 and " passed" in tail and "skipped" not in tail, tail
