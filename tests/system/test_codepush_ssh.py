"""`gpuroom push HOST SRC [DEST]` against the real sshd box (tui/transport/codepush.py): what
git would commit arrives, nothing .gitignore excludes does, each file's sha256 is checked on
the box, a repeat sends nothing, and `queue verify` (U42) then finds the box runs your code."""

from __future__ import annotations

import hashlib
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
TRACKED = {"train.py": SCRIPT, "sub/data.txt": "x\n", "name with space.py": "print(2)\n",
           ".gitignore": "*.log\nbig/\n"}


def _git(tree: Path, *argv: str) -> None:
    subprocess.run(["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t.invalid",
                    *argv], check=True, capture_output=True)


@pytest.fixture
def proj(tmp_path: Path, sshd_box: Any) -> Iterator[Path]:
    tree = tmp_path / "proj"
    for rel, text in TRACKED.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    _git(tree, "init", "-q")
    _git(tree, "add", "-A")
    _git(tree, "commit", "-qm", "one")
    (tree / "run.log").write_text("ignored\n")  # what .gitignore excludes never leaves
    (tree / "big").mkdir()
    (tree / "big" / "weights.bin").write_bytes(b"\0" * 4096)
    sshd_box.run("rm", "-rf", "proj", "elsewhere")
    yield tree
    sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


def _on_box(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file()}


def _cli(capsys: pytest.CaptureFixture[str], config: Path, *argv: str) -> tuple[int, str]:
    rc = main(["--config", str(config), *argv])
    captured = capsys.readouterr()
    return rc, " ".join((captured.out + captured.err).split())


def test_push_copies_what_git_would_commit_checks_it_and_a_repeat_sends_nothing(
        proj: Path, sshd_box: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    config = hosts_toml(tmp_path / "hosts.toml", {"box": {"ssh": sshd_box.alias}},
                        sshd_box.ssh_config)
    rc, out = _cli(capsys, config, "push", "box", str(proj))  # DEST: ~/proj
    assert rc == 0, out
    assert out == (f"box: pushed 4 file(s) of {proj} (git ls-files) to ~/proj: sent 4 file(s), "
                   f"{out.split('sent 4 file(s), ')[1].split(';')[0]}; 4 checked by sha256 on "
                   "the box"), out
    want = {rel: hashlib.sha256(text.encode()).hexdigest() for rel, text in TRACKED.items()}
    assert _on_box(sshd_box.home / "proj") == want

    rc, out = _cli(capsys, config, "push", "box", str(proj))
    assert rc == 0 and "nothing to send: the box had every file; 4 checked by sha256" in out, out

    (proj / "train.py").write_text(SCRIPT + "print('the fix')\n")
    rc, out = _cli(capsys, config, "push", "box", str(proj), "elsewhere/proj")
    assert rc == 0 and "to elsewhere/proj: sent 4 file(s)" in out, out
    rc, out = _cli(capsys, config, "push", "box", str(proj))
    assert rc == 0 and "sent 1 file(s)" in out, out
    assert _on_box(sshd_box.home / "proj")["train.py"] == \
        hashlib.sha256((proj / "train.py").read_bytes()).hexdigest()


def test_after_a_push_queue_verify_finds_the_box_runs_your_code(
        proj: Path, sshd_box: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    config = hosts_toml(tmp_path / "hosts.toml",
                        {"box": {"ssh": sshd_box.alias, "workdir": str(sshd_box.home / "proj")}},
                        sshd_box.ssh_config)
    rc, out = _cli(capsys, config, "push", "box", str(proj))  # DEST: the host's workdir
    assert rc == 0 and f"to {sshd_box.home / 'proj'}:" in out, out
    rc = main(["--config", str(config), "queue", "add", "box", "--json", "--gpus", "0",
               "--cwd", str(sshd_box.home / "proj"), "--", "python3", "train.py"])
    assert rc == 0
    job = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["job"]
    deadline = time.monotonic() + WAIT_S
    while True:
        main(["--config", str(config), "queue", "ls", "box", "--json"])
        jobs = json.loads(capsys.readouterr().out)["jobs"]
        if next(j for j in jobs if j["id"] == job)["state"] == "running":
            break
        assert time.monotonic() < deadline
        time.sleep(0.3)
    rc, out = _cli(capsys, config, "queue", "verify", "box", job, "--tree", str(proj))
    assert rc == 0 and "matches: 1 script(s) identical" in out, out
    main(["--config", str(config), "queue", "kill", "box", job])


@pytest.mark.parametrize("dest", ["/", "", "//"])
def test_push_refuses_a_dest_that_can_only_be_a_slip(
        proj: Path, sshd_box: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        dest: str) -> None:
    config = hosts_toml(tmp_path / "hosts.toml", {"box": {"ssh": sshd_box.alias}},
                        sshd_box.ssh_config)
    rc, out = _cli(capsys, config, "push", "box", str(proj), dest)
    assert rc == 2 and f"refusing to push to {dest!r}" in out and "Fix: name the box's" in out
