"""The gpuroom CLI run in-process, its last line of stdout read as JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuroom.tui.cli.main import main


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    rc = main(list(argv))
    out = capsys.readouterr().out.strip().splitlines()
    return rc, json.loads(out[-1]) if out else {}
