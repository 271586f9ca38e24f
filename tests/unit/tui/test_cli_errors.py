"""What a CLI verb's failure looks like: a GpuroomError as one line with its status; a bug as
one line, its traceback in the state dir's log, status 70. Never a traceback on stderr."""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import gpuroom.tui.cli.main as cli
from gpuroom.profiles import UnknownProfileError
from gpuroom.tui.config import ConfigError
from gpuroom.tui.errors import EXIT_INTERNAL, internal_log_path
from gpuroom.tui.transport.link import LinkError
from gpuroom.tui.transport.pull import PullError


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    return home


def _verb_raising(exc: BaseException) -> object:
    def verb(_args: argparse.Namespace) -> int:
        raise exc

    return verb


@pytest.mark.parametrize(("exc", "status", "line"), [
    (ConfigError("hosts.toml: [settings] bell: must be true or false", "e.g. bell = true"), 2,
     "gpuroom: hosts.toml: [settings] bell: must be true or false. Fix: e.g. bell = true"),
    (LinkError("h100", "no answer within 30 s", fix="check the box"), 1,
     "gpuroom: h100: no answer within 30 s. Fix: check the box"),
    (PullError("h100: manifest of /ck: unexpected answer"), 1,
     "gpuroom: h100: manifest of /ck: unexpected answer"),
    (UnknownProfileError("nope", ["runpod"]), 2,
     "gpuroom: profile 'nope': no such profile. Fix: use one of: runpod"),
], ids=["config", "link", "pull", "profile"])
def test_a_gpuroom_error_is_one_line_and_its_status(
        exc: Exception, status: int, line: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli, "cmd_status", _verb_raising(exc))
    assert cli.main(["status"]) == status
    out, err = capsys.readouterr()
    assert (out, err) == ("", line + "\n")
    assert not internal_log_path().exists()  # the user's problem, not a bug


def test_a_bug_in_a_verb_is_logged_and_shown_as_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli, "cmd_status", _verb_raising(TypeError("'NoneType' is not iterable")))
    assert cli.main(["status"]) == EXIT_INTERNAL
    out, err = capsys.readouterr()
    log = internal_log_path()
    assert out == ""
    assert err == ("gpuroom: internal error: TypeError: 'NoneType' is not iterable; details in "
                   f"{log}\n")
    text = log.read_text()
    assert "gpuroom status" in text and "Traceback (most recent call last)" in text
    assert "in verb" in text and text.rstrip().endswith("TypeError: 'NoneType' is not iterable")


def test_a_real_config_error_is_one_line_with_one_fix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "hosts.toml"
    config.write_text("[settings]\nbell = 3\n")
    assert cli.main(["--config", str(config), "status"]) == 2
    err = capsys.readouterr().err
    assert err == (f"gpuroom: {config}: [settings] bell: must be true or false. Fix: e.g. "
                   "bell = true\n")


def test_a_bug_in_a_thread_is_logged_not_printed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def verb(_args: argparse.Namespace) -> int:
        worker = threading.Thread(target=lambda: 1 / 0, name="copier")
        worker.start()
        worker.join()
        return 0

    monkeypatch.setattr(cli, "cmd_status", verb)
    before = threading.excepthook
    assert cli.main(["status"]) == 0
    err = capsys.readouterr().err
    assert err == ("gpuroom: internal error: ZeroDivisionError: division by zero; details in "
                   f"{internal_log_path()}\n")
    assert "thread copier" in internal_log_path().read_text()
    assert threading.excepthook is before  # put back after the verb


def test_a_task_exception_nobody_retrieved_is_logged_not_printed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    async def orphan() -> None:
        raise OSError("lost")

    async def run() -> None:
        loop = asyncio.get_running_loop()
        task = loop.create_task(orphan())
        await asyncio.sleep(0.01)
        del task  # asyncio logs "Task exception was never retrieved" when it is collected

    def verb(_args: argparse.Namespace) -> int:
        asyncio.run(run())
        return 0

    monkeypatch.setattr(cli, "cmd_status", verb)
    assert cli.main(["status"]) == 0
    err = capsys.readouterr().err
    assert err == ("gpuroom: internal error: OSError: lost; details in "
                   f"{internal_log_path()}\n")
    text = internal_log_path().read_text()
    assert "Task exception was never retrieved" in text and "in orphan" in text


def test_no_traceback_reaches_a_real_terminal(tmp_path: Path, state_home: Path) -> None:
    """The installed entry point in a real process: stderr carries the line and nothing else."""
    script = ("import sys\n"
              "import gpuroom.tui.cli.main as cli\n"
              "def verb(args):\n"
              "    return {}['missing']\n"
              "cli.cmd_probe = verb\n"
              "sys.exit(cli.main(['probe', 'h100']))\n")
    env = {**os.environ, "HOME": str(state_home),
           "XDG_STATE_HOME": str(state_home / ".local" / "state")}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=60, check=False)
    log = state_home / ".local" / "state" / "gpuroom" / "internal-errors.log"
    assert proc.returncode == EXIT_INTERNAL
    assert proc.stdout == ""
    assert proc.stderr == f"gpuroom: internal error: KeyError: 'missing'; details in {log}\n"
    assert "gpuroom probe" in log.read_text() and "KeyError: 'missing'" in log.read_text()


def test_an_unwritable_config_or_recording_is_the_users_error_not_a_bug(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Regression: both were raw OSErrors, which a verb would now report as internal errors.
    config = tmp_path / "hosts.toml"
    (tmp_path / "hosts.toml.tmp").mkdir()  # where save() writes before it renames
    assert cli.main(["--config", str(config), "hosts", "add", "box"]) == 2
    # The last line (before it, a warning that the temp HOME has no ssh config naming 'box').
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith(f"gpuroom: {config}: writing: Is a directory. Fix: check the ")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    config.write_text("")  # a --config that names no file is an error of its own
    config.chmod(0o600)
    assert cli.main(["--config", str(config), "record", str(blocker / "r.jsonl"),
                     "--polls", "1"]) == 2
    err = capsys.readouterr().err
    assert err == (f"gpuroom: {blocker / 'r.jsonl'}: cannot record to it (Not a directory). "
                   "Fix: give a file in a directory you can write\n")
    assert not internal_log_path().exists()


def test_an_exception_in_del_is_logged_not_printed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    class Leaky:
        def __del__(self) -> None:
            raise RuntimeError("closed twice")

    def verb(_args: argparse.Namespace) -> int:
        Leaky()  # collected at once: Python reports what __del__ raised as "unraisable"
        return 0

    monkeypatch.setattr(cli, "cmd_status", verb)
    before = sys.unraisablehook
    assert cli.main(["status"]) == 0
    err = capsys.readouterr().err
    assert err == ("gpuroom: internal error: RuntimeError: closed twice; details in "
                   f"{internal_log_path()}\n")
    assert "Leaky.__del__" in internal_log_path().read_text()
    assert sys.unraisablehook is before


@pytest.mark.parametrize("verb", [["queue", "ls"], ["pull"], ["gate"], ["secret", "ls"],
                                  ["probe"], ["doctor"]],
                         ids=["queue", "pull", "gate", "secret", "probe", "doctor"])
def test_local_after_adding_a_host_says_the_line_that_brings_it_back(
        tmp_path: Path, verb: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Once hosts.toml names a box, `local` is no longer shown; `hosts add local` would make
    an ssh host named local. The fix is the hosts.toml line that works, and it does."""
    config = tmp_path / "hosts.toml"
    config.write_text('[hosts.box]\nssh = "box"\n')
    config.chmod(0o600)
    assert cli.main(["--config", str(config), *verb, "local"]) == 2
    err = capsys.readouterr().err
    assert "Fix: add [hosts.local] with local = true to " in err, err
    assert "hosts add local" not in err
    config.write_text('[hosts.box]\nssh = "box"\n\n[hosts.local]\nlocal = true\n')
    assert cli.main(["--config", str(config), "hosts", "list"]) == 0
    assert "local\tlocal\t" in capsys.readouterr().out


def test_an_unknown_host_says_the_command_that_adds_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "hosts.toml"
    config.write_text('[hosts.box]\nssh = "box"\n')
    config.chmod(0o600)
    assert cli.main(["--config", str(config), "pull", "h100"]) == 2
    assert "Fix: gpuroom hosts add h100" in capsys.readouterr().err


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.metadata

    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"gpuroom {importlib.metadata.version('gpuroom')}\n"
