"""Local files the user names (tui/localfile.py, tui/ssh_config.py): hosts.toml, a recording
and the ssh config that are a link to /dev/zero or a FIFO, and ssh configs whose Includes
loop or nest too deep. Each is one error naming the file and its fix, exit 2 where the verb
is about the file; never a hang, a MemoryError or a RecursionError.

The verbs run as the installed command in a child process with its memory and time bounded,
so a reader that would fill memory or block for ever fails the test instead of the machine.
"""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

import pytest
from harness.hostile import GPUROOM, TERMINAL_CONTROLS

from gpuroom.tui import localfile
from gpuroom.tui.localfile import LocalFileError, read_lines, read_regular
from gpuroom.tui.ssh_config import MAX_INCLUDE_DEPTH, SshConfigError, ssh_config_aliases

MEMORY_CAP_BYTES = 3 << 30  # the child's address space: /dev/zero read whole passes it fast
VERB_TIMEOUT_S = 60.0


def _bounded() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP_BYTES, MEMORY_CAP_BYTES))


def run(home: Path, *argv: str) -> tuple[int, str]:
    """``gpuroom ARGV`` with HOME and XDG dirs under ``home``: (exit status, stdout+stderr)."""
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"),
           "XDG_STATE_HOME": str(home / "state"), "XDG_DATA_HOME": str(home / "data")}
    env.pop("SSH_AUTH_SOCK", None)
    try:
        done = subprocess.run([GPUROOM, *argv], capture_output=True, text=True, env=env,
                              timeout=VERB_TIMEOUT_S, preexec_fn=_bounded, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"gpuroom {' '.join(argv)} hung past {VERB_TIMEOUT_S:.0f} s")
    said = done.stdout + done.stderr
    assert done.returncode != 70 and "Traceback" not in said, said
    assert "MemoryError" not in said and "RecursionError" not in said, said
    for c in TERMINAL_CONTROLS:
        assert c not in said, (repr(c), said)
    return done.returncode, said


def special(path: Path, kind: str) -> Path:
    if kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    else:
        os.mkfifo(path, 0o600)
    return path


KINDS = ["link to /dev/zero", "FIFO"]
SAYS = {"link to /dev/zero": "character device", "FIFO": "FIFO"}


@pytest.mark.attack("bad configuration", "hosts.toml that is a link to /dev/zero or a FIFO: "
                    "exit 2 naming the file, not a read until MemoryError or a hang")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("verb", [["status"], ["hosts", "list"]])
def test_a_hosts_file_that_is_not_a_regular_file_is_refused(
        tmp_path: Path, kind: str, verb: list[str]) -> None:
    config = special(tmp_path / "hosts.toml", kind)
    rc, said = run(tmp_path, "--config", str(config), *verb)
    assert rc == 2, said
    assert str(config) in said and SAYS[kind] in said and "Fix:" in said, said


@pytest.mark.attack("bad configuration", "a recording given to `gpuroom replay` that is a link "
                    "to /dev/zero or a FIFO: exit 2 naming the file, no MemoryError or hang")
@pytest.mark.parametrize("kind", KINDS)
def test_a_recording_that_is_not_a_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    recording = special(tmp_path / "run.jsonl", kind)
    rc, said = run(tmp_path, "replay", str(recording))
    assert rc == 2, said
    assert str(recording) in said and SAYS[kind] in said, said


def _hosts(tmp_path: Path, ssh_config: Path | None = None) -> Path:
    config = tmp_path / "hosts.toml"
    settings = f'[settings]\nssh_config = "{ssh_config}"\n\n' if ssh_config else ""
    config.write_text(f'{settings}[hosts.a]\nssh = "127.0.0.1"\n')
    config.chmod(0o600)
    return config


@pytest.mark.attack("bad configuration", "[settings] ssh_config that is a link to /dev/zero or "
                    "a FIFO: the host's error names the file, no MemoryError or hang")
@pytest.mark.parametrize("kind", KINDS)
def test_an_ssh_config_that_is_not_a_regular_file_is_refused(tmp_path: Path,
                                                              kind: str) -> None:
    ssh_config = special(tmp_path / "ssh_config", kind)
    config = _hosts(tmp_path, ssh_config)
    rc, said = run(tmp_path, "--config", str(config), "probe", "a")
    assert rc != 0 and str(ssh_config) in said and SAYS[kind] in said, said
    rc, said = run(tmp_path, "--config", str(config), "hosts", "add", "b", "--ssh", "b")
    assert rc == 2 and str(ssh_config) in said and "Fix:" in said, said


def _ssh_dir(tmp_path: Path) -> Path:
    ssh = tmp_path / ".ssh"
    ssh.mkdir(mode=0o700)
    return ssh


@pytest.mark.attack("bad configuration", "an ~/.ssh/config that Includes itself, or two files "
                    "that Include each other: an error naming the file and line, before "
                    "asyncssh recurses into RecursionError")
@pytest.mark.parametrize("shape", ["itself", "each other"])
def test_an_include_loop_is_an_error_naming_the_file_and_line(tmp_path: Path,
                                                              shape: str) -> None:
    ssh = _ssh_dir(tmp_path)
    if shape == "itself":
        (ssh / "config").write_text("Host a\n  User me\nInclude config\n")
        where = f"{ssh / 'config'} line 3"
    else:
        (ssh / "config").write_text("Include other\nHost a\n")
        (ssh / "other").write_text("# back again\nInclude ~/.ssh/config\n")
        where = f"{ssh / 'other'} line 2"
    config = _hosts(tmp_path)
    rc, said = run(tmp_path, "--config", str(config), "probe", "a")
    assert rc != 0 and where in said and "loop" in said, said
    rc, said = run(tmp_path, "--config", str(config), "hosts", "import")
    assert rc == 2 and where in said and "Fix:" in said, said


@pytest.mark.attack("bad configuration", "ssh config Includes nested 40 deep: an error at ssh's "
                    "limit of 16 naming the file and line")
def test_includes_nested_past_ssh_limit_are_an_error(tmp_path: Path) -> None:
    ssh = _ssh_dir(tmp_path)
    for n in range(40):
        (ssh / f"c{n}").write_text(f"Include c{n + 1}\nHost h{n}\n")
    (ssh / "c40").write_text("Host last\n")
    (ssh / "config").write_text("Include c0\n")
    config = _hosts(tmp_path)
    rc, said = run(tmp_path, "--config", str(config), "hosts", "import")
    assert rc == 2 and "nest over 16" in said and "line 1" in said, said
    rc, said = run(tmp_path, "--config", str(config), "probe", "a")
    assert rc != 0 and "nest over 16" in said, said


def test_includes_at_ssh_limit_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    ssh = _ssh_dir(tmp_path)
    for n in range(MAX_INCLUDE_DEPTH):
        (ssh / f"c{n}").write_text(f"Include c{n + 1}\n")
    (ssh / f"c{MAX_INCLUDE_DEPTH}").write_text("Host deepest\n")
    (ssh / "config").write_text("Include c0\nHost top\n")
    # config is depth 0, c0 depth 1, ... c15 depth 16: ssh reads that deep and no deeper.
    with pytest.raises(SshConfigError):
        ssh_config_aliases(ssh / "config")
    (ssh / "config").write_text("Include c1\nHost top\n")
    assert ssh_config_aliases(ssh / "config") == ["deepest", "top"]


def test_the_same_file_included_twice_is_no_loop(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    ssh = _ssh_dir(tmp_path)
    (ssh / "common").write_text("Host shared\n")
    (ssh / "config").write_text("Include common\nHost a\nInclude common\nHost b\n")
    assert ssh_config_aliases(ssh / "config") == ["shared", "a", "b"]


def test_a_regular_file_is_read_whole_and_a_bigger_one_refused(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_regular(path, "the file", cap=100) == b"x" * 100
    with pytest.raises(LocalFileError, match="over"):
        read_regular(path, "the file", cap=99)
    link = tmp_path / "link"
    link.symlink_to(path)  # the user's own link to a regular file is fine
    assert read_regular(link, "the file") == b"x" * 100
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "missing", "the file")


def test_lines_are_streamed_and_a_line_over_the_cap_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rec"
    path.write_bytes(b"a\n" + b"b" * 10 + b"\nc")
    assert list(read_lines(path, "it", line_cap=10, total_cap=100)) == [b"a", b"b" * 10, b"c"]
    with pytest.raises(LocalFileError, match="line 2"):
        list(read_lines(path, "it", line_cap=9, total_cap=100))
    with pytest.raises(LocalFileError, match="over"):
        list(read_lines(path, "it", line_cap=10, total_cap=12))
    assert localfile.CONFIG_MAX_BYTES >= 1 << 20
