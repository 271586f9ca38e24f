"""Room tests run with their own state dir, and a bug the room logged fails the test.

The room shows a bug as a toast and keeps running (GpuroomApp._handle_exception) where
Textual would have crashed and failed the test; this fixture keeps such a bug loud: a test
that left anything in internal-errors.log fails with its content, unless it is marked
``expect_internal_error`` and checks the log itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuroom.tui.errors import internal_log_path


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "expect_internal_error: the test makes the room log a bug on purpose")


@pytest.fixture(autouse=True)
def state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
              request: pytest.FixtureRequest) -> Iterator[Path]:
    """A fresh HOME and XDG_STATE_HOME (apart from tmp_path, which tests list); after the
    test, no unexpected bug report in it."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    log = internal_log_path()
    assert log.is_relative_to(home), log
    yield home
    if request.node.get_closest_marker("expect_internal_error") is None and log.exists():
        pytest.fail(f"the room logged a bug:\n{log.read_text()}")
