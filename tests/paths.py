"""Where the tests' inputs live, defined once so no test hard-codes a path of this machine.

ROOT      the repository
DATA      tests/data: scenarios and recordings made by the real helper
FIXTURES  the shared real captures (``$GPUROOM_FIXTURES`` overrides; else ``shared/fixtures``
          inside the repo or beside it). The ``fixtures`` fixture in conftest.py skips a test
          when it is absent; module-level parametrisation reads the constant.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
DATA = TESTS / "data"


def _fixtures_dir() -> Path:
    override = os.environ.get("GPUROOM_FIXTURES")
    if override:
        return Path(override)
    for candidate in (ROOT / "shared" / "fixtures", ROOT.parent / "shared" / "fixtures"):
        if candidate.is_dir():
            return candidate
    return ROOT.parent / "shared" / "fixtures"


FIXTURES = _fixtures_dir()
