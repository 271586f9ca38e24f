"""`gpuroom secret ls/push` read the helper's answer through the one bounded loader
(tui/snapshot.py load_answer), over the real sshd: an answer nested 200,000 deep is a host
error, not a RecursionError."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness.hostile import hosts_toml

from gpuroom.tui.cli.main import main

pytestmark = pytest.mark.sshd

# A stand-in interpreter whose `secret` subcommand answers ~/sub-answer; the rest is real.
FAKE_SECRET = """#!/bin/sh
case "$3" in secret) cat >/dev/null; cat "$HOME/sub-answer"; exit 0;; esac
exec python3 "$@"
"""


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.mark.attack("bad answers", "secret ls and secret push given an answer nested 200,000 "
                    "deep: a host error naming the host, not an internal error")
@pytest.mark.parametrize("verb", [["ls", "box"], ["push", "box", "TOKEN", "--from-env", "TOK"]])
def test_a_deeply_nested_secret_answer_is_a_host_error(
        sshd_box: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, verb: list[str]) -> None:
    fake = sshd_box.home / "python-secret"
    fake.write_text(FAKE_SECRET)
    fake.chmod(0o755)
    (sshd_box.home / "sub-answer").write_bytes(b"[" * 200_000 + b"]" * 200_000)
    monkeypatch.setenv("TOK", "not-a-real-token")
    config = hosts_toml(tmp_path / "hosts.toml",
                        {"box": {"ssh": sshd_box.alias, "python": str(fake)}},
                        sshd_box.ssh_config)
    rc = main(["--config", str(config), "secret", *verb])
    out, err = capsys.readouterr()
    assert rc not in (0, 70) and "internal error" not in err, (rc, out, err)
    assert "box" in err and "secret" in err, err
