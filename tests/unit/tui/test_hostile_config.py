"""Bad configuration through the real verbs (issue 18): a hosts.toml that is not text, not a
file, full of control characters or enormous, and settings naming files that are not there.
Each is one line on stderr naming the file and the fix, exit 2 (or the bad host alone fails),
never a traceback; nothing a config holds reaches the terminal as a control sequence.

No box is reached: every host here fails before connecting, or is never polled.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.hostile import TERMINAL_CONTROLS, hosts_toml

from gpuroom.tui.cli.main import main

FORBIDDEN = TERMINAL_CONTROLS
VERBS = (["status"], ["status", "--json"], ["hosts", "list"], ["doctor"], ["queue", "ls", "a"],
         ["gate", "a"])


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def run_all(config: Path, capsys: pytest.CaptureFixture[str]
            ) -> dict[str, tuple[int, str, str]]:
    said = {}
    for verb in VERBS:
        rc = main(["--config", str(config), *verb])
        out, err = capsys.readouterr()
        said[" ".join(verb)] = (rc, out, err)
        assert rc != 70 and "Traceback" not in out + err and "internal error" not in err, (
            verb, out, err)
        for c in FORBIDDEN:
            assert c not in out + err, (verb, repr(c), out, err)
    return said


def private(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


@pytest.mark.attack("bad configuration", "a hosts.toml that is binary, not UTF-8, a folder, "
                    "empty-named or 20 MB of junk: exit 2 from every verb, naming the file")
@pytest.mark.parametrize("kind", ["binary", "latin-1", "folder", "huge"])
def test_an_unreadable_hosts_file_is_one_config_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    config = tmp_path / "hosts.toml"
    if kind == "folder":
        config.mkdir()
    elif kind == "binary":
        private(config, b"\x00\x01\x02\xff\xfe\x1b]52;c;ZXZpbA==\x07")
    elif kind == "latin-1":
        private(config, '[hosts.caf\xe9]\nssh = "b\xe9"\n'.encode("latin-1"))
    else:
        private(config, b"# " + b"\x1b[2J" * 5_000_000 + b"\n[hosts.a\n")
    for verb, (rc, _, err) in run_all(config, capsys).items():
        assert rc == 2, (verb, rc, err)
        assert str(config) in err and "Fix:" in err, (verb, err)
        assert len(err) < 2000, (verb, len(err))  # one bounded line, not the file echoed


EVIL = "x\x1b]52;c;ZXZpbA==\x07\x1b[2J\x9b\u202e[/]y"


def evil_config(tmp_path: Path) -> Path:
    return hosts_toml(tmp_path / "hosts.toml", {
        "a": {"ssh": EVIL},
        EVIL: {"ssh": EVIL, "profile": EVIL, "mounts": [EVIL]},
    })


def run_one(config: Path, verb: list[str], capsys: pytest.CaptureFixture[str]
            ) -> tuple[int, str]:
    rc = main(["--config", str(config), *verb])
    out, err = capsys.readouterr()
    return rc, out + err


@pytest.mark.attack("bad configuration", "a host alias holding OSC 52, CSI 2J, BEL, C1, bidi "
                    "and [/]: status --json, queue ls and gate refuse it inert, by name")
@pytest.mark.parametrize("verb", [["status", "--json"], ["queue", "ls", "a"], ["gate", "a"]])
def test_control_characters_in_an_alias_are_refused_inert(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: list[str]) -> None:
    rc, said = run_one(evil_config(tmp_path), verb, capsys)
    assert rc not in (0, 70) and "Traceback" not in said and "internal error" not in said, said
    assert "[hosts.a]" in said or "contains characters" in said, said
    for c in FORBIDDEN:
        assert c not in said, (repr(c), said)


@pytest.mark.attack("bad configuration", "a host name in hosts.toml holding OSC 52, CSI 2J, "
                    "BEL, C1, bidi and [/], printed by status and doctor: inert, no markup error")
@pytest.mark.parametrize("verb", [["status"], ["doctor"]])
def test_control_characters_in_a_host_name_are_printed_inert(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: list[str]) -> None:
    rc, said = run_one(evil_config(tmp_path), verb, capsys)
    assert rc != 70 and "Traceback" not in said and "internal error" not in said, said
    for c in FORBIDDEN:
        assert c not in said, (repr(c), said)


@pytest.mark.attack("bad configuration", "the same host name and alias printed by hosts list")
def test_hosts_list_prints_a_hostile_host_name_inert(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, said = run_one(evil_config(tmp_path), ["hosts", "list"], capsys)
    assert rc != 70 and "Traceback" not in said, said
    for c in FORBIDDEN:
        assert c not in said, (repr(c), said)


@pytest.mark.attack("bad configuration", "[settings] ssh_config naming a file that does not "
                    "exist, and an unknown profile: the host fails alone, naming the file")
def test_settings_naming_missing_files_fail_the_host_not_the_verb(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such-ssh-config"
    # Loopback only: where no sshd listens on port 22, the connect is refused at once.
    config = hosts_toml(tmp_path / "hosts.toml", {
        "a": {"ssh": "127.0.0.1"},
        "b": {"ssh": "127.0.0.1", "profile": "no-such-profile"},
    }, missing)
    said = run_all(config, capsys)
    rc, out, err = said["status"]
    assert rc != 0 and "a" in out + err, (out, err)
