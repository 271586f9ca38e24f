"""A verb whose reader went away (`gpuroom status --json | head`): the installed command, its
stdout a real pipe whose read end is closed before it writes. It ends quietly with 141, the
status a shell reports for a writer its pipe's reader left (128 + SIGPIPE), writes nothing to
stderr and files no bug report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuroom.tui.cli.main import EXIT_PIPE_CLOSED

GPUROOM = str(Path(sys.executable).with_name("gpuroom"))
VERB_TIMEOUT_S = 120.0


def run_into_closed_pipe(tmp_path: Path, *argv: str) -> tuple[int, str]:
    """``gpuroom ARGV`` with stdout a pipe nobody reads any more: (status, stderr)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(home / "state"),
           "XDG_CONFIG_HOME": str(home / "config")}  # no hosts.toml: the local machine
    read_end, write_end = os.pipe()
    os.close(read_end)  # `head` read what it wanted and left before the first write
    try:
        proc = subprocess.run([GPUROOM, *argv], stdout=write_end, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, env=env, text=True,
                              timeout=VERB_TIMEOUT_S, check=False)
    finally:
        os.close(write_end)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("argv", [("status", "--json"), ("profiles", "show", "runpod"),
                                  ("probe", "local")],
                         ids=["status", "profiles", "probe"])
def test_a_closed_pipe_ends_the_verb_quietly(tmp_path: Path, argv: tuple[str, ...]) -> None:
    status, err = run_into_closed_pipe(tmp_path, *argv)
    assert (status, err) == (EXIT_PIPE_CLOSED, "")
    assert not list((tmp_path / "home").rglob("internal-errors.log*"))


def test_a_broken_pipe_that_is_not_stdout_is_still_a_bug(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Only the user's own stdout going away is quiet: a child's pipe breaking (an ssh the
    verb was feeding) is a failure that must be seen."""
    import gpuroom.tui.cli.main as cli
    from gpuroom.tui.errors import EXIT_INTERNAL, internal_log_path

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))

    def verb(_args: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "cmd_status", verb)
    assert cli.main(["status"]) == EXIT_INTERNAL
    assert "BrokenPipeError" in capsys.readouterr().err
    assert internal_log_path().exists()
