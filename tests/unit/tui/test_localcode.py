"""U42: the box's launch code against the user's own tree, on real temp git repos: the
jump-host reader (tui/transport/localcode.py) and the pure verdict (tui/rules/drift.py)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuroom.tui import config as cfg
from gpuroom.tui.cli.main import main
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.rules.doctor import diagnose_fleet
from gpuroom.tui.rules.drift import LocalCode, code_verdict, script_rel_paths, tree_drift_findings
from gpuroom.tui.rules.watch import FleetWatch
from gpuroom.tui.snapshot import Job, Snapshot
from gpuroom.tui.transport.localcode import read_tree

SCRIPT = b"print('train')\n"


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), "-c", "user.name=t",
                           "-c", "user.email=t@example.invalid", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def make_repo(tree: Path) -> str:
    tree.mkdir()
    git(tree, "init", "-q", ".")
    (tree / "train.py").write_bytes(SCRIPT)
    git(tree, "add", "train.py")
    git(tree, "commit", "-qm", "one")
    return git(tree, "rev-parse", "HEAD")


def raw_job(head: str, dirty: bool = False, state: str = "running") -> dict[str, Any]:
    return {
        "id": "j1", "state": state, "cwd": "/box/proj", "argv": ["python3", "train.py"],
        "attempts": [{"attempt": 1, "code": {
            "scripts": [{"path": "/box/proj/train.py",
                         "sha256": hashlib.sha256(SCRIPT).hexdigest()}],
            "git": {"head": head, "dirty": dirty}}}]}


def box(raw: dict[str, Any]) -> dict[str, Any]:
    return {"queue": {"queues": {"default": {"jobs": [raw]}}}}


def job(head: str, dirty: bool = False) -> Job:
    return Job.read(raw_job(head, dirty))


def test_read_tree_gives_head_dirty_flag_and_hashes(tmp_path: Path) -> None:
    head = make_repo(tmp_path / "proj")
    local = read_tree(tmp_path / "proj", ["train.py", "gone.py", "../escape.py"])
    assert local.head == head and local.dirty is False
    assert local.sha256 == {"train.py": hashlib.sha256(SCRIPT).hexdigest(), "gone.py": None,
                            "../escape.py": None}
    (tmp_path / "proj" / "train.py").write_bytes(b"print('fixed')\n")
    assert read_tree(tmp_path / "proj").dirty is True


def test_a_plain_directory_has_no_head(tmp_path: Path) -> None:
    local = read_tree(tmp_path, [])
    assert local.head is None and local.dirty is None


def test_the_same_tree_matches(tmp_path: Path) -> None:
    head = make_repo(tmp_path / "proj")
    j = job(head)
    same, lines = code_verdict(j, read_tree(tmp_path / "proj", script_rel_paths(j)))
    assert same is True and lines == [f"matches: HEAD {head[:12]}, 1 script(s) identical"]
    snap = Snapshot.read(box(raw_job(head)))
    assert snap.jobs and tree_drift_findings("box", snap, read_tree(tmp_path / "proj",
                                                                    ["train.py"])) == []


def test_a_tree_one_commit_ahead_says_the_fix_is_not_on_the_box(tmp_path: Path) -> None:
    old = make_repo(tmp_path / "proj")
    (tmp_path / "proj" / "train.py").write_bytes(b"print('fixed')\n")
    git(tmp_path / "proj", "commit", "-qam", "the fix")
    new = git(tmp_path / "proj", "rev-parse", "HEAD")
    j = job(old, dirty=True)
    same, lines = code_verdict(j, read_tree(tmp_path / "proj", script_rel_paths(j)))
    assert same is False
    assert lines == [f"the box runs HEAD {old[:12]} (dirty), your tree is at HEAD {new[:12]}: "
                     "the fix you committed is not on the box",
                     "script train.py differs from yours"]
    tree = read_tree(tmp_path / "proj", ["train.py"])
    (finding,) = tree_drift_findings("box", Snapshot.read(box(raw_job(old, True))), tree)
    assert finding.id == "U42" and finding.severity == "warn"
    assert "the fix you committed is not on the box" in finding.seen
    # A finished job is history, not a warning.
    done = Snapshot.read(box(raw_job(old, True, state="succeeded")))
    assert tree_drift_findings("box", done, tree) == []


def test_same_head_but_uncommitted_edits_and_a_missing_script(tmp_path: Path) -> None:
    head = make_repo(tmp_path / "proj")
    j = job(head, dirty=True)
    same, lines = code_verdict(j, LocalCode(str(tmp_path), head, False, {}))
    assert same is False
    assert lines == [f"both are at HEAD {head[:12]} but the box's tree has uncommitted changes",
                     "script train.py is not in your tree"]


def test_no_recorded_facts_is_no_claim() -> None:
    j = Job.read({"id": "j1", "state": "running", "attempts": [{"attempt": 1}]})
    same, _ = code_verdict(j, LocalCode("/t", "a" * 40, False, {}))
    assert same is None


def test_the_room_and_the_doctor_warn_from_the_fleets_read_of_the_tree(tmp_path: Path) -> None:
    old = make_repo(tmp_path / "proj")
    (tmp_path / "proj" / "train.py").write_bytes(b"print('fixed')\n")
    git(tmp_path / "proj", "commit", "-qam", "the fix")
    ahead = read_tree(tmp_path / "proj", ["train.py"])
    for local, expected in ((None, []), (ahead, ["U42"])):
        state = HostState(name="box", state=LinkState.UP, snapshot=box(raw_job(old)),
                          last_try=1.0, last_ok=1.0, local_code=local)
        watch = FleetWatch()
        watch.observe(state, 2.0)  # the room's path
        assert [f.id for f in watch.findings() if f.id == "U42"] == expected
        doctor = diagnose_fleet([state], {}, {}, 2.0)  # the doctor's path
        assert [f.id for f in doctor if f.id == "U42"] == expected


@pytest.mark.attack("bad configuration", "code = 3 in hosts.toml: not a path")
def test_hosts_toml_code_is_read_written_back_and_a_bad_one_is_that_hosts_error(
        tmp_path: Path) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text('[hosts.a]\nssh = "a"\ncode = "~/src/proj"\n[hosts.b]\nssh = "b"\ncode = 3\n')
    hosts = cfg.load(path).hosts
    assert hosts["a"].error is None and hosts["a"].code == "~/src/proj"
    assert hosts["a"].to_toml()["code"] == "~/src/proj"
    assert hosts["b"].error is not None and "code must be" in hosts["b"].error


@pytest.mark.attack("bad answers", "a box records a script path that climbs out of its cwd, "
                    "to make the jump host hash a file outside the user's tree")
def test_a_box_path_out_of_the_cwd_never_reads_outside_the_tree(tmp_path: Path) -> None:
    head = make_repo(tmp_path / "proj")
    (tmp_path / "secret.txt").write_text("not yours to hash")
    raw = raw_job(head)
    raw["attempts"][0]["code"]["scripts"][0]["path"] = "/box/proj/../../../secret.txt"
    j = Job.read(raw)
    assert script_rel_paths(j) == ["secret.txt"]  # its base name, looked for in the tree only
    local = read_tree(tmp_path / "proj", ["../secret.txt", "/abs/secret.txt"])
    assert local.sha256 == {"../secret.txt": None, "/abs/secret.txt": None}
    same, lines = code_verdict(j, read_tree(tmp_path / "proj", script_rel_paths(j)))
    assert same is False and lines == ["script secret.txt is not in your tree"]


def test_verify_with_no_tree_names_both_fixes_before_asking_the_box(
        tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text('[hosts.box]\nssh = "nowhere.invalid"\n')
    path.chmod(0o600)
    assert main(["--config", str(path), "queue", "verify", "box", "j1"]) != 0
    err = capsys.readouterr().err
    assert "no tree to compare the job's code with" in err
    assert "--tree ~/src/proj" in err and 'code = "~/src/proj"' in err
