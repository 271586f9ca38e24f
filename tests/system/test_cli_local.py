"""What `queue show` and `secret push/ls/rm` print, end to end on the local link: the real
helper, its real queue runner (in this test's own tmux server) and its secrets directory,
under this test's own HOME.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuroom.tui.cli.main import main

WAIT_S = 30.0


@pytest.fixture
def local_box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    socket = f"gpuroom-cli-{tmp_path.name}"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GPUROOM_HOME", str(tmp_path / "gpuroom"))
    monkeypatch.setenv("GPUROOM_TMUX_SOCKET", socket)
    monkeypatch.delenv("TMUX", raising=False)
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "hosts.toml"
    config.write_text("[hosts.local]\nlocal = true\n")
    config.chmod(0o600)
    try:
        yield config
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], check=False,
                       capture_output=True)


def _run(capsys: pytest.CaptureFixture[str], config: Path, *argv: str) -> str:
    rc = main(["--config", str(config), *argv])
    out = capsys.readouterr().out
    assert rc == 0, out
    return out


def _push(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], config: Path,
          name: str, *extra: str) -> str:
    monkeypatch.setenv("POLISH_TOKEN", "tok-abc123")
    return _run(capsys, config, "secret", "push", "local", name, "--from-env", "POLISH_TOKEN",
                *extra)


def test_queue_show_names_the_jobs_secrets_and_an_attempt_fits_80_columns(
        local_box: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """queue show said "env: none" for a job given a secret, and its attempt line wrapped
    at 80 columns after a dangling "0s, "."""
    _push(monkeypatch, capsys, local_box, "HF")
    _run(capsys, local_box, "queue", "add", "local", "--secret", "HF=HF_TOKEN", "--env", "A=1",
         "--gpus", "0", "--", "true")
    deadline = time.monotonic() + WAIT_S
    monkeypatch.setenv("COLUMNS", "80")
    while True:
        out = _run(capsys, local_box, "queue", "show", "local", "j1")
        if "job j1: succeeded" in out or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    lines = out.splitlines()
    assert lines[0] == "job j1: succeeded", out
    assert "env: A, HF_TOKEN (secret HF) (values hidden)" in lines, out
    assert "tok-abc123" not in out
    (attempt,) = [line for line in lines if line.startswith("  attempt 1: ")]
    assert attempt.endswith(", exit 0, GPUs none"), out
    assert not any(line.rstrip().endswith(",") for line in lines), out


def test_secret_verbs_print_words_and_a_table_and_json_on_asking(
        local_box: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    out = _push(monkeypatch, capsys, local_box, "WANDB")
    assert out.startswith("local: secret WANDB stored (10 bytes, mode 0600) at "), out
    assert "{" not in out and "tok-abc123" not in out
    out = _run(capsys, local_box, "secret", "ls", "local")
    assert "{" not in out and "tok-abc123" not in out
    (row,) = [line for line in out.splitlines() if "WANDB" in line]
    assert row.split("│")[1:4] == [" WANDB ", " 10    ", " 0600 "], out
    doc = json.loads(_run(capsys, local_box, "secret", "ls", "local", "--json"))
    assert [s["name"] for s in doc["secrets"]] == ["WANDB"]
    assert _run(capsys, local_box, "secret", "rm", "local", "WANDB") == \
        "local: secret WANDB removed\n"
    assert _run(capsys, local_box, "secret", "ls", "local").startswith("local: no secrets in ")


def test_queue_add_any_on_a_cpu_fleet_says_only_gpus_0_helps(
        local_box: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(local_box), "queue", "add", "any", "--", "true"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "no host has 1 GPU(s): the most any has is 0" in err, err
    assert "Fix: run it on the CPU: the same command with --gpus 0" in err, err
    assert "wait" not in err


def test_watch_says_at_start_what_it_watches(
        local_box: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`gpuroom watch` printed nothing until its first outcome: a watch that seemed idle."""
    local_box.write_text("[settings]\npoll_interval_s = 2\n[hosts.local]\nlocal = true\n"
                         "[hosts.other]\nlocal = true\nmirror = true\n")
    assert main(["--config", str(local_box), "watch", "--duration", "3"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("gpuroom watch: local (mirror off), other (mirror on); polled every 2s, "
                      "--failover jobs moved after 600s down; for 3s"), err


def test_queue_verify_of_a_job_the_box_does_not_have_is_its_answer_not_a_crash(
        local_box: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The box's refusal went through the --json branch of a verb that has no --json."""
    rc = main(["--config", str(local_box), "queue", "verify", "local", "j99", "--tree",
               str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1 and "internal error" not in err and "j99" in err, err
