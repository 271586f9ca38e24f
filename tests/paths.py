"""Where the tests' inputs live, defined once so no test hard-codes a path of this machine.

ROOT      the repository
DATA      tests/data: scenarios and recordings made by the real helper
FIXTURES  tests/fixtures: the repository's own copy of the real captures, each with its source
          (tests/fixtures/INDEX.md), so a clone with nothing beside it passes. Only a fake run
          as another user on a test box is pointed elsewhere (``$GPUROOM_FIXTURES``, set by
          the harness to its copy there).
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
DATA = TESTS / "data"


def _fixtures_dir() -> Path:
    override = os.environ.get("GPUROOM_FIXTURES")
    return Path(override) if override else TESTS / "fixtures"


FIXTURES = _fixtures_dir()
