"""U42 against the real sshd box: the job's launch code (the runner's git HEAD, dirty flag and
script sha256) against the user's own tree on the jump host. `queue verify` and the doctor
(hosts.toml `code`) are quiet while the trees match and say so once the user's tree is a
commit ahead: the fix committed at home is not on the box."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.hostile import hosts_toml

from gpuroom.tui.cli.main import main

pytestmark = pytest.mark.sshd

WAIT_S = 60.0
SCRIPT = "import time\nfor _ in range(600):\n    time.sleep(0.1)\n"
# Fixed names and dates: the box's repo and the user's are the same commit, byte for byte.
GIT_ENV = ("GIT_AUTHOR_DATE='2026-11-24T12:00:00Z' GIT_COMMITTER_DATE='2026-11-24T12:00:00Z' "
           "git -c user.name=t -c user.email=t@example.invalid")


def make_repo(run: Any, work: Path) -> str:
    setup = (f"rm -rf {work} && mkdir -p {work} && cd {work} && git init -q . && "
             f"printf '%s' '{SCRIPT}' > train.py && git add train.py && "
             f"{GIT_ENV} commit -qm one && git rev-parse HEAD")
    done = run("sh", "-c", setup)
    assert done.returncode == 0, done.stderr
    return str(done.stdout.strip())


def local_run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


@pytest.fixture
def trees(sshd_box: Any, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    box_repo, mine = sshd_box.home / "codetree-repo", tmp_path / "mine"
    box_head = make_repo(sshd_box.run, box_repo)
    assert make_repo(local_run, mine) == box_head  # the precondition: the same commit
    yield box_repo, mine
    sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


def run_cli(capsys: pytest.CaptureFixture[str], config: Path, *argv: str) -> tuple[int, str]:
    rc = main(["--config", str(config), *argv])
    return rc, capsys.readouterr().out


def u42(capsys: pytest.CaptureFixture[str], config: Path) -> list[dict[str, Any]]:
    _, out = run_cli(capsys, config, "doctor", "--json")
    return [f for f in json.loads(out)["findings"] if f["id"] == "U42"]


def test_verify_and_the_doctor_compare_the_box_with_your_tree(
        trees: tuple[Path, Path], sshd_box: Any, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    box_repo, mine = trees
    config = hosts_toml(tmp_path / "hosts.toml",
                        {"box": {"ssh": sshd_box.alias, "code": str(mine)}}, sshd_box.ssh_config)
    rc, out = run_cli(capsys, config, "queue", "add", "box", "--json", "--gpus", "0", "--cwd",
                      str(box_repo), "--", "python3", "train.py")
    assert rc == 0
    job = json.loads(out.strip().splitlines()[-1])["job"]
    deadline = time.monotonic() + WAIT_S
    while True:
        _, out = run_cli(capsys, config, "queue", "ls", "box", "--json")
        if next(j for j in json.loads(out)["jobs"] if j["id"] == job)["state"] == "running":
            break
        assert time.monotonic() < deadline
        time.sleep(0.3)

    # The same commit and the same script: quiet.
    rc, out = run_cli(capsys, config, "queue", "verify", "box", job)
    assert rc == 0 and "matches: HEAD" in out and "1 script(s) identical" in out, out
    assert u42(capsys, config) == []

    # The user commits a fix at home and never pulls it on the box.
    (mine / "train.py").write_text(SCRIPT + "print('the fix')\n")
    fixed = local_run("sh", "-c", f"cd {mine} && {GIT_ENV} commit -qam fix && git rev-parse HEAD")
    assert fixed.returncode == 0, fixed.stderr
    rc, out = run_cli(capsys, config, "queue", "verify", "box", job)
    assert rc == 1, out
    assert f"your tree is at HEAD {fixed.stdout.strip()[:12]}" in out
    assert "the fix you committed is not on the box" in out
    assert "script train.py differs from yours" in out
    (finding,) = u42(capsys, config)
    assert finding["severity"] == "warn" and "does not run your code" in finding["title"]
    # --tree names another tree: the box's own commit again, so it matches.
    again = tmp_path / "again"
    make_repo(local_run, again)
    rc, out = run_cli(capsys, config, "queue", "verify", "box", job, "--tree", str(again))
    assert rc == 0 and "matches" in out
    run_cli(capsys, config, "queue", "kill", "box", job)
