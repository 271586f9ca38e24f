"""The one error base, its text, and the bug log."""

from __future__ import annotations

import ast
import stat
from pathlib import Path

import pytest
from paths import ROOT

from gpuroom.profiles import ProfileError, UnknownProfileError
from gpuroom.tui import errors
from gpuroom.tui.config import ConfigError
from gpuroom.tui.errors import (
    GpuroomError,
    describe,
    internal_log_path,
    log_internal_error,
    one_line,
    report_bug,
    with_fix,
)
from gpuroom.tui.fleet.api import FleetError
from gpuroom.tui.fleet.outputs import NoSuchJob
from gpuroom.tui.fleet.replay import RecordingError
from gpuroom.tui.transport.link import HostKeyError, LinkError, RemoteFileError
from gpuroom.tui.transport.openssh_sftp import SessionUnavailable
from gpuroom.tui.transport.pull import PullError


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    return home


def raised(exc: BaseException) -> BaseException:
    """``exc`` with a real traceback, as a caught exception has."""
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_message_and_fix_read_as_one_text() -> None:
    err = GpuroomError("h100: no answer within 30 s", "check the box is up")
    assert (err.message, err.fix) == ("h100: no answer within 30 s", "check the box is up")
    assert str(err) == "h100: no answer within 30 s. Fix: check the box is up"
    assert str(GpuroomError("just this")) == "just this"
    assert GpuroomError("x", "").fix is None


def test_with_fix_writes_one_clause_and_no_double_stop() -> None:
    assert with_fix("disk full.", "free space") == "disk full. Fix: free space"
    assert with_fix("disk full", None) == "disk full"
    # A message that already carries its (more specific) fix keeps it; never two clauses.
    inner = str(ConfigError("hosts.toml: [hosts.a]: bad", "rename it"))
    assert with_fix(inner, "check the host is UP") == "hosts.toml: [hosts.a]: bad. Fix: rename it"


@pytest.mark.parametrize("exc", [
    LinkError("h", "m"), RemoteFileError("h", "m"), HostKeyError("h", "m"),
    SessionUnavailable("h", "m"), ConfigError("m"), FleetError("m"), NoSuchJob("m"),
    RecordingError("m"), PullError("m"), ProfileError(None, "f", "r", "x"),
    UnknownProfileError("nope", ["runpod"]),
], ids=lambda e: type(e).__name__)
def test_every_gpuroom_error_sits_under_the_base(exc: Exception) -> None:
    assert isinstance(exc, GpuroomError)


def test_existing_constructors_keep_their_meaning() -> None:
    err = LinkError("h100", "cannot connect to 'h100': refused", fix="check the alias")
    assert (err.host, err.reason, err.fix) == ("h100", "cannot connect to 'h100': refused",
                                               "check the alias")
    assert str(err) == "h100: cannot connect to 'h100': refused. Fix: check the alias"
    perr = ProfileError(Path("/p/x.toml"), "clocks.idle", "must be a number", "write 3600")
    assert (perr.path, perr.field, perr.reason, perr.fix) == (
        Path("/p/x.toml"), "clocks.idle", "must be a number", "write 3600")
    assert str(perr) == "/p/x.toml: clocks.idle: must be a number. Fix: write 3600"
    unknown = UnknownProfileError("nope", ["runpod", "slurm"])
    assert unknown.known == ["runpod", "slurm"] and unknown.fix == "use one of: runpod, slurm"
    with pytest.raises(LookupError):  # callers that catch LookupError still catch it
        raise NoSuchJob("h100 has no job 'j9' with a checkpoint dir")


def test_exit_codes_follow_the_cli() -> None:
    for cls in (ConfigError, RecordingError):
        assert cls.exit_code == 2, cls
    assert ProfileError.exit_code == 2
    for cls in (LinkError, FleetError, PullError, NoSuchJob, GpuroomError):
        assert cls.exit_code == 1, cls


@pytest.mark.attack(
    "hostile text",
    "a GpuroomError carrying escapes, newlines and a huge text: one inert bounded line")
def test_one_line_is_inert_single_and_bounded() -> None:
    line = one_line(ValueError("job \x1b]52;c;ZXZpbA==\x07name\n\x1b[31mred\x1b[0m\n\n"))
    assert line == "ValueError: job name | red"
    long = one_line(RuntimeError("x" * 5000))
    assert len(long) == errors.MAX_LINE_CHARS + 1 and long.endswith("…")
    assert one_line(KeyError()) == "KeyError"

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise TypeError("no")

    assert one_line(Unprintable()) == "Unprintable: (its message could not be read)"


def test_a_bug_report_holds_the_traceback_in_a_private_file(state_home: Path) -> None:
    line = report_bug(raised(RuntimeError("boom")), context="gpuroom status")
    path = internal_log_path()
    assert path == state_home / "state" / "gpuroom" / "internal-errors.log"
    assert line == f"internal error: RuntimeError: boom; details in {path}"
    text = path.read_text()
    assert "gpuroom status" in text
    assert "Traceback (most recent call last)" in text and "in raised" in text
    assert text.rstrip().endswith("RuntimeError: boom")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_the_log_is_made_private_even_if_it_was_not(state_home: Path) -> None:
    path = internal_log_path()
    path.parent.mkdir(parents=True)
    path.write_text("older report\n")
    path.chmod(0o644)
    log_internal_error(raised(RuntimeError("again")))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().startswith("older report\n")  # appended, not replaced


def test_the_log_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(errors, "MAX_LOG_BYTES", 4000)
    for n in range(40):
        log_internal_error(raised(RuntimeError(f"report {n}")))
    path = internal_log_path()
    older = path.with_name(path.name + ".1")
    assert path.stat().st_size <= 4000 and older.stat().st_size <= 4000
    assert "report 39" in path.read_text()
    assert stat.S_IMODE(older.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "internal-errors.log", "internal-errors.log.1"]


def test_one_huge_report_keeps_its_tail() -> None:
    log_internal_error(raised(RuntimeError("head " + "y" * (errors.MAX_REPORT_CHARS * 2))))
    text = internal_log_path().read_text()
    assert len(text) < errors.MAX_REPORT_CHARS + 1000
    assert "characters cut]" in text and text.rstrip().endswith("y")


@pytest.mark.attack(
    "hostile text",
    "escape sequences in an internal error: the error log file stays inert")
def test_the_log_never_carries_escape_sequences() -> None:
    log_internal_error(raised(ValueError("name \x1b]0;owned\x07 \x1b[2J end")))
    text = internal_log_path().read_text()
    assert "\x1b" not in text and "\x07" not in text
    assert "ValueError: name   end" in text


def test_an_unwritable_state_dir_still_gives_one_line(state_home: Path) -> None:
    (state_home / "state").write_text("a file where the state dir should be")
    line = report_bug(raised(RuntimeError("boom")))
    assert line.startswith("internal error: RuntimeError: boom; its details could not be "
                           f"written to {internal_log_path()} (")
    assert "Traceback" not in line


def test_describe_shows_a_gpuroom_error_and_logs_only_bugs() -> None:
    assert describe(LinkError("h", "gone\nreally", fix="retry")) == "h: gone | really. Fix: retry"
    assert not internal_log_path().exists()
    assert describe(raised(AttributeError("x"))).startswith("internal error: AttributeError: x;")
    assert internal_log_path().exists()


def _error_classes() -> set[str]:
    seen: set[str] = set()
    todo: list[type[BaseException]] = [GpuroomError]
    while todo:
        cls = todo.pop()
        seen.add(cls.__name__)
        todo += cls.__subclasses__()
    return seen


def test_no_error_is_raised_with_a_fix_inside_its_message() -> None:
    """The fix is its own argument, so the room and CLI can show one "Fix:" clause: a raise
    that writes "Fix:" into the message is how toasts came to carry two."""
    names = _error_classes()
    assert {"LinkError", "ConfigError", "ProfileError", "RecordingError"} <= names
    offenders = []
    for folder in ("tui", "profiles"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name not in names:
                    continue
                message = node.args[1] if name in ("LinkError", "RemoteFileError",
                                                   "HostKeyError", "SessionUnavailable") \
                    else node.args[0] if node.args else None
                texts = [n.value for n in ast.walk(message) if isinstance(n, ast.Constant)
                         and isinstance(n.value, str)] if message is not None else []
                if any("Fix:" in t for t in texts):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


async def test_a_local_disk_error_while_pulling_is_the_users_not_a_bug(tmp_path: Path) -> None:
    # Regression: an OSError from this machine's disk left pull() raw, so the room and the CLI
    # would report a full or unwritable pull target as an internal error.
    from gpuroom.tui.config import HostConfig
    from gpuroom.tui.transport.link import HostLink
    from gpuroom.tui.transport.pull import pull

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    link = HostLink(HostConfig(name="local", local=True))
    try:
        with pytest.raises(PullError) as err:
            await pull(link, "/nowhere", blocker / "ck", method="sftp")
    finally:
        await link.close()
    assert err.value.message.startswith(f"local: pulling into {blocker / 'ck'} failed: ")
    assert err.value.fix is not None and "df -h" in err.value.fix
    assert isinstance(err.value.__cause__, OSError)


@pytest.mark.parametrize("module", [
    "gpuroom.tui.errors", "gpuroom.profiles", "gpuroom.tui.config", "gpuroom.tui.fleet.replay",
    "gpuroom.tui.transport.link", "gpuroom.tui.fleet.outputs",
])
def test_each_error_module_imports_first_in_a_fresh_process(module: str) -> None:
    """profiles/ and tui/ both import the base: no order of first imports may hit a cycle."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
