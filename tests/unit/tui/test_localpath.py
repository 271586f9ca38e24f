"""tui/localpath.py: every name a box gives becomes a local path only through this guard."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpuroom.remote.queue_events import ARRAY_TASK_ID_RE, JOB_ID_RE, is_job_id
from gpuroom.tui.localpath import UnsafePath, job_dir, open_append, safe_local_path, shown

# Path-like pieces a forger reaches for, mixed with plain names.
PIECES = st.sampled_from(["..", ".", "", "/", "//", "\\", "\x00", "j1", "a", "~", "$HOME",
                          "ckpt.pt", "\n", " ", "é", "x" * 300, "j1_2", "/root", "sub"])
FORGED = st.lists(st.one_of(PIECES, st.text(max_size=12)), max_size=8).map("".join)


@pytest.mark.parametrize("job", ["j1", "j42", "j999999999999999999", "j5_0", "j5_12"])
def test_the_helpers_own_ids_are_job_ids(job: str) -> None:
    assert is_job_id(job)


@pytest.mark.parametrize("job", ["../../../../..", "/root/x", "j1/../../x", "j0", "j01", "j",
                                 "j1\n", "j1_", "j1_2_3", "J1", "j1 ", "..", "", "j١",
                                 "j1_2\n", "j1/x", "j" + "9" * 19, None, 7])
def test_anything_else_is_not_a_job_id(job: object) -> None:
    assert not is_job_id(job)


def test_one_grammar_on_both_sides() -> None:
    """The box mints with JOB_ID_RE (and Slurm's array tasks with ARRAY_TASK_ID_RE); the jump
    host accepts exactly those."""
    assert JOB_ID_RE.match("j7") and ARRAY_TASK_ID_RE.match("j7_3")
    assert not JOB_ID_RE.match("j7\n") and not ARRAY_TASK_ID_RE.match("j7_3\n")


@pytest.mark.parametrize("job", ["../../../../..", "/root/x", "j1/../../x", "j1\n", "x"])
def test_a_forged_job_id_is_refused_naming_host_and_job(tmp_path: Path, job: str) -> None:
    with pytest.raises(UnsafePath) as caught:
        job_dir(tmp_path / "pulls", "gpubox", job)
    said = str(caught.value)
    assert said.startswith(f"gpubox: job id {shown(job)} refused: "), said
    assert caught.value.fix and "gpubox" in caught.value.fix
    assert not (tmp_path / "pulls").exists()  # refusing creates nothing


def test_a_symlink_under_the_root_leading_out_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "pulls"
    (root / "gpubox").mkdir(parents=True)
    (root / "gpubox" / "j1").symlink_to(tmp_path)
    with pytest.raises(UnsafePath, match="gpubox: job 'j1' refused: a symlink under"):
        job_dir(root, "gpubox", "j1")
    assert job_dir(root, "gpubox", "j2") == root.resolve() / "gpubox" / "j2"


def test_a_user_symlinked_root_is_the_users_choice(tmp_path: Path) -> None:
    """pull_to itself may be a symlink (another disk): only what is below it is judged."""
    (tmp_path / "disk").mkdir()
    (tmp_path / "pulls").symlink_to(tmp_path / "disk")
    assert job_dir(tmp_path / "pulls", "box", "j3") == tmp_path / "disk" / "box" / "j3"


@pytest.mark.parametrize("rel", ["../x", "a/../../x", "/etc/passwd", "", "a//b", "./a", "a/.",
                                 "..", ".", "a\\..\\b", "a\x00b", "x" * 256, "a/" + "y" * 256])
def test_manifest_paths_that_would_not_stay_a_plain_place_are_refused(tmp_path: Path,
                                                                      rel: str) -> None:
    assert safe_local_path(tmp_path, rel) is None


def test_a_nested_manifest_path_lands_under_its_root(tmp_path: Path) -> None:
    assert safe_local_path(tmp_path, "sub/ckpt-000000000001.pt") == \
        tmp_path.resolve() / "sub" / "ckpt-000000000001.pt"
    assert safe_local_path(tmp_path, "x" * 255) == tmp_path.resolve() / ("x" * 255)


def test_open_append_never_writes_through_a_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("mine\n")
    (tmp_path / "w.bin.part").symlink_to(victim)
    with pytest.raises(OSError):
        open_append(tmp_path / "w.bin.part")
    assert victim.read_text() == "mine\n"
    with open_append(tmp_path / "fresh.part") as f:
        f.write(b"ok")
    with open_append(tmp_path / "fresh.part") as f:
        f.write(b"!")
    assert (tmp_path / "fresh.part").read_bytes() == b"ok!"


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rel=FORGED)
@example(rel="../" * 8 + "etc/passwd")
@example(rel="sub/../../x")
def test_no_manifest_path_leaves_its_root(tmp_path: Path, rel: str) -> None:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    (root / "out").unlink(missing_ok=True)
    (root / "out").symlink_to(tmp_path)  # a way out, if anything followed it
    target = safe_local_path(root, rel)
    if target is not None:
        base = root.resolve()
        assert base in target.parents
        assert os.path.realpath(target) == str(target)
        assert all(p not in ("", ".", "..") for p in rel.split("/"))


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(job=FORGED)
def test_no_job_dir_leaves_its_root(tmp_path: Path, job: str) -> None:
    root = tmp_path / "pulls"
    try:
        where = job_dir(root, "box", job)
    except UnsafePath as exc:
        assert exc.host == "box" and exc.name == job
        return
    assert is_job_id(job)
    assert where == root.resolve() / "box" / job
