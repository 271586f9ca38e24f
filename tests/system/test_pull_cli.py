"""`gpuroom pull` / `gpuroom gate` end to end: a real queued job on the test sshd."""

from __future__ import annotations

import argparse
import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from gpuroom.tui.cli.pull import EXIT_NOT_SAFE, add_cli
from gpuroom.tui.cli.queue import add_cli as add_queue_cli
from gpuroom.tui.transport import pull as transfer

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
    config.chmod(0o600)  # as gpuroom writes it: no "others can read it" warning in stderr
    return config


@pytest.fixture
def box_config(sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """hosts.toml naming the test box, with a state dir of the test's own; the queue's tmux
    session is stopped afterwards (and the box started again if the test killed it)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    try:
        yield hosts_toml(sshd_box, tmp_path)
    finally:
        if not sshd_box.alive:
            sshd_box.start()
        sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


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


def test_gate_closed_until_pulled_then_safe(box_config: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    config = box_config
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


# A file name is the box's text too: an escape sequence and a newline in one must not reach
# the terminal through the pull's report, and the file must still arrive under its own name.
EVIL_NAME = "evil\x1b]52;c;ZXZpbA==\x07\x1b[2J\nname.bin"
EVIL_JOB = ("import os;open(os.path.join(os.environ['GPUROOM_CKPT_DIR'],"
            f"{EVIL_NAME!r}),'wb').write(b'y'*77)")


@pytest.mark.attack("hostile text", "pull report of a hostile file name is inert")
def test_pull_report_of_a_hostile_file_name_is_inert(
        box_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = box_config
    jid = run_job_to_the_end(config, EVIL_JOB, capsys)
    for argv in (["pull", "box", "--to", str(tmp_path / "p")], ["gate", "box"]):
        run("--config", str(config), *argv)
        captured = capsys.readouterr()
        for stream in (captured.out, captured.err):
            assert "\x1b" not in stream and "\x07" not in stream, (argv, repr(stream))
        if argv[0] == "pull":
            assert "evilname.bin: " in captured.out, captured.out
    assert (tmp_path / "p" / "box" / jid / EVIL_NAME).read_bytes() == b"y" * 77


BIG_JOB = ("import os;open(os.path.join(os.environ['GPUROOM_CKPT_DIR'],'*.bin'),'wb')"
           ".write(os.urandom(24<<20));open(os.path.join(os.environ['GPUROOM_CKPT_DIR'],"
           "'a.bin'),'wb').write(b'a'*5000)")


@pytest.mark.attack("faults", "the box dies mid-pull (rsync): the error on its own line, "
                              "then a resume")
@pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync not installed")
def test_pull_says_where_files_went_and_an_error_starts_its_own_line(
        box_config: Path, sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    config = box_config
    jid = run_job_to_the_end(config, BIG_JOB, capsys)
    # 1. The box dies mid-pull: the error is a line of its own, not glued to progress.
    monkeypatch.setattr(transfer, "RSYNC_OPTIONS", ("--bwlimit=4m",))
    part = tmp_path / "p" / "box" / jid / "*.bin.part"

    def kill_when_half_way() -> None:
        for _ in range(600):
            if part.exists() and part.stat().st_size > 4 << 20:
                sshd_box.kill_all()
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_when_half_way)
    killer.start()
    rc = run("--config", str(config), "pull", "box", "--to", str(tmp_path / "p"),
             "--method", "rsync")
    killer.join()
    err = capsys.readouterr().err
    assert rc == 1 and not sshd_box.alive, err
    assert "\ngpuroom pull: box: " in err and "ETA" in err, repr(err)
    sshd_box.start()
    # 2. Resumed to the end: it says where the files went and how much really came.
    monkeypatch.setattr(transfer, "RSYNC_OPTIONS", ())
    assert run("--config", str(config), "pull", "box", "--to", str(tmp_path / "p"),
               "--method", "rsync") == 0
    captured = capsys.readouterr()
    dest = tmp_path / "p" / "box" / jid
    assert f"{jid}: 2 file(s) verified in {dest}" in captured.out, captured.out
    assert (dest / "*.bin").stat().st_size == 24 << 20
    assert (dest / "a.bin").read_bytes() == b"a" * 5000
    last = captured.err.rsplit("\r", 1)[-1]
    assert last.startswith(f"{jid} 24MiB/24MiB "), repr(captured.err)


def test_pull_of_only_empty_files_shows_no_zero_progress(
        box_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 17: the progress line read "0/0" when nothing had bytes to move.
    jid = run_job_to_the_end(box_config, "import os;open(os.path.join(os.environ["
                                         "'GPUROOM_CKPT_DIR'],'empty.bin'),'wb').close()", capsys)
    assert run("--config", str(box_config), "pull", "box", "--to", str(tmp_path / "p")) == 0
    captured = capsys.readouterr()
    assert "0B/0B" not in captured.err, repr(captured.err)
    assert f"{jid}: 1 file(s) verified in {tmp_path / 'p' / 'box' / jid} (0B received)" in \
        captured.out, captured.out
