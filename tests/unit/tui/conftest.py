"""The jump host's state dir (pulls.json, acks.json, downs.json, mirror.json) is a fresh one
per test: a unit test never reads or writes the user's own."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def own_state_dir(tmp_path_factory: pytest.TempPathFactory,
                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
