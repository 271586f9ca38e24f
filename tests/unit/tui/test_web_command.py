"""The command `gpuroom web` hands textual-serve (which runs it through a shell) is the room
with the user's config, quoted once."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from gpuroom.tui.cli.main import main
from gpuroom.tui.cli.web import room_command


@pytest.mark.attack("injection", "a config path with $(...), quotes and ; reaches the shell "
                                 "textual-serve starts the room with")
def test_the_config_path_reaches_the_room_as_one_word() -> None:
    path = Path("/tmp/my boxes/$(touch pwned); 'x'\"y\"/hosts.toml")
    assert shlex.split(room_command(path)) == [sys.executable, "-m", "gpuroom.tui.cli.main",
                                               "--config", str(path)]


def test_no_config_file_is_the_room_of_this_machine() -> None:
    assert shlex.split(room_command(None)) == [sys.executable, "-m", "gpuroom.tui.cli.main"]


def test_no_room_at_all_is_a_usage_error(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["--config", str(tmp_path / "none.toml"), "web", "--max-rooms", "0"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--max-rooms 0" in err and "Fix:" in err
