"""`gpuroom pull` / `gpuroom gate` end to end: a real queued job on the test sshd."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from gpuroom.tui.cli.pull import EXIT_NOT_SAFE, add_cli
from gpuroom.tui.cli.queue import add_cli as add_queue_cli

pytestmark = pytest.mark.sshd

JOB = "import os;open(os.path.join(os.environ['GPUROOM_CKPT_DIR'],'w.bin'),'wb').write(b'x'*9999)"


def run(*argv: str) -> int:
    # tui/cli/main.py wires add_cli in the integrator's change; build the same parser here.
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    sub = parser.add_subparsers(dest="command")
    add_cli(sub)
    add_queue_cli(sub)
    args = parser.parse_args(list(argv))
    return int(args.func(args))


def hosts_toml(sshd_box: Any, tmp_path: Path) -> Path:
    config = tmp_path / "hosts.toml"
    config.write_bytes(tomli_w.dumps({"settings": {"ssh_config": str(sshd_box.ssh_config)},
                                      "hosts": {"box": {"ssh": sshd_box.alias}}}).encode())
    return config


def run_job_to_the_end(config: Path, code: str, capsys: pytest.CaptureFixture[str]) -> str:
    """Queue ``python3 -c code`` on the box; its id once it has succeeded."""
    assert run("--config", str(config), "queue", "add", "box", "--", "python3", "-c",
               code) == 0
    deadline = time.monotonic() + 60
    while True:
        capsys.readouterr()
        assert run("--config", str(config), "queue", "ls", "box", "--json") == 0
        jobs = json.loads(capsys.readouterr().out)["jobs"]
        if jobs and jobs[0]["state"] in ("succeeded", "failed"):
            break
        assert time.monotonic() < deadline, jobs
        time.sleep(0.3)
    assert jobs[0]["state"] == "succeeded", jobs
    return str(jobs[0]["id"])


def test_gate_closed_until_pulled_then_safe(sshd_box: Any, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    config = hosts_toml(sshd_box, tmp_path)
    try:
        jid = run_job_to_the_end(config, JOB, capsys)
        assert run("--config", str(config), "gate", "box", "--json") == EXIT_NOT_SAFE
        closed = json.loads(capsys.readouterr().out)
        assert next(i["name"] for i in closed["items"] if not i["ok"]) == \
            "every job's outputs pulled"
        assert run("--config", str(config), "pull", "box", "--to", str(tmp_path / "p")) == 0
        capsys.readouterr()
        assert (tmp_path / "p" / "box" / jid / "w.bin").read_bytes() == b"x" * 9999
        assert run("--config", str(config), "gate", "box", "--json") == 0
        assert json.loads(capsys.readouterr().out)["safe"] is True
    finally:
        sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


# A file name is the box's text too: an escape sequence and a newline in one must not reach
# the terminal through the pull's report, and the file must still arrive under its own name.
EVIL_NAME = "evil\x1b]52;c;ZXZpbA==\x07\x1b[2J\nname.bin"
EVIL_JOB = ("import os;open(os.path.join(os.environ['GPUROOM_CKPT_DIR'],"
            f"{EVIL_NAME!r}),'wb').write(b'y'*77)")


def test_pull_report_of_a_hostile_file_name_is_inert(
        sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    config = hosts_toml(sshd_box, tmp_path)
    try:
        jid = run_job_to_the_end(config, EVIL_JOB, capsys)
        for argv in (["pull", "box", "--to", str(tmp_path / "p")], ["gate", "box"]):
            run("--config", str(config), *argv)
            captured = capsys.readouterr()
            for stream in (captured.out, captured.err):
                assert "\x1b" not in stream and "\x07" not in stream, (argv, repr(stream))
            if argv[0] == "pull":
                assert "evilname.bin: " in captured.out, captured.out
        assert (tmp_path / "p" / "box" / jid / EVIL_NAME).read_bytes() == b"y" * 77
    finally:
        sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")
