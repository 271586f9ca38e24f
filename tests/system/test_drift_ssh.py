"""Issue 19 item 9 against the real sshd box: the runner records a job's script (sha256) and
its cwd's git HEAD and dirty flag at launch; `queue ls --json` and `queue show` carry them;
the doctor is quiet while the script is as launched and warns (U2) once it is rewritten."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.hostile import hosts_toml

from gpuroom.tui.cli.main import main
from gpuroom.tui.snapshot import Snapshot, keys_seen, schema_keys

pytestmark = pytest.mark.sshd

WAIT_S = 60.0
SCRIPT = "import time\nfor _ in range(600):\n    time.sleep(0.1)\n"


@pytest.fixture
def repo(sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("COLUMNS", "400")
    work = sshd_box.home / "drift-repo"
    setup = (f"rm -rf {work} && mkdir -p {work} && cd {work} && git init -q . && "
             f"printf '%s' '{SCRIPT}' > train.py && git add train.py && "
             "git -c user.name=t -c user.email=t@example.invalid commit -qm one")
    done = sshd_box.run("sh", "-c", setup)
    assert done.returncode == 0, done.stderr
    yield work
    sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


@pytest.fixture
def box_config(sshd_box: Any, tmp_path: Path) -> Path:
    return hosts_toml(tmp_path / "hosts.toml", {"box": {"ssh": sshd_box.alias}},
                      sshd_box.ssh_config)


def cli(capsys: pytest.CaptureFixture[str], config: Path, *argv: str) -> Any:
    assert main(["--config", str(config), *argv]) == 0
    return capsys.readouterr().out


def job_of(capsys: pytest.CaptureFixture[str], config: Path, job: str) -> dict[str, Any]:
    doc = json.loads(cli(capsys, config, "queue", "ls", "box", "--json"))
    return next(j for j in doc["jobs"] if j["id"] == job)


def u2(capsys: pytest.CaptureFixture[str], config: Path) -> list[dict[str, Any]]:
    rc = main(["--config", str(config), "doctor", "--json"])
    doc = json.loads(capsys.readouterr().out)
    found = [f for f in doc["findings"] if f["id"] == "U2"]
    # doctor's exit status says the worst severity: 1 for a warning such as U2, else 0
    assert rc == (1 if any(f["severity"] == "warn" for f in doc["findings"]) else 0), doc
    return found


def add(capsys: pytest.CaptureFixture[str], config: Path, repo: Path) -> str:
    out = cli(capsys, config, "queue", "add", "box", "--json", "--gpus", "0", "--cwd",
              str(repo), "--", "python3", "train.py")
    job = json.loads(out.strip().splitlines()[-1])["job"]
    deadline = time.monotonic() + WAIT_S
    while job_of(capsys, config, job)["state"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.3)
    return str(job)


def test_launch_code_is_recorded_and_a_rewritten_script_is_a_warning(
        repo: Path, box_config: Path, sshd_box: Any, capsys: pytest.CaptureFixture[str]) -> None:
    head = sshd_box.run("git", "-C", str(repo), "rev-parse", "HEAD").stdout.strip()
    job = add(capsys, box_config, repo)
    code = job_of(capsys, box_config, job)["attempts"][-1]["code"]
    assert code["scripts"][0]["path"] == str(repo / "train.py")
    assert code["scripts"][0]["sha256"] == hashlib.sha256(SCRIPT.encode()).hexdigest()
    assert code["git"] == {"head": head, "dirty": False}
    assert u2(capsys, box_config) == []  # as launched: quiet
    shown = cli(capsys, box_config, "queue", "show", "box", job)
    assert f"git: HEAD {head[:12]}, clean" in shown and "changed since launch" not in shown

    # The script is rewritten under the running job.
    sshd_box.run("sh", "-c", f"echo 'print(2)' >> {repo / 'train.py'}")
    (finding,) = u2(capsys, box_config)
    assert finding["severity"] == "warn" and "its script changed while it runs" in finding["title"]
    assert str(repo / "train.py") in finding["seen"]
    assert "changed since launch" in cli(capsys, box_config, "queue", "show", "box", job)
    # The poll carries every key tui/snapshot.py reads of the launch facts.
    snap = json.loads(cli(capsys, box_config, "probe", "box", "--compact"))
    wanted = {p for p, k in schema_keys(Snapshot) if k.origin == "code"}
    assert wanted and wanted <= keys_seen(Snapshot, [snap]), wanted - keys_seen(Snapshot, [snap])
    cli(capsys, box_config, "queue", "kill", "box", job)

    # A job launched from the changed tree says so: the tracked file differs from HEAD.
    again = add(capsys, box_config, repo)
    assert job_of(capsys, box_config, again)["attempts"][-1]["code"]["git"]["dirty"] is True
    cli(capsys, box_config, "queue", "kill", "box", again)
