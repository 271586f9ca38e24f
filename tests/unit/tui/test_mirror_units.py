"""The mirror's pure parts (issue 21 item 1): who is mirrored, which files count as committed
checkpoints, what stays home, how the queue pane says it, and the hosts.toml keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuroom.tui import config as cfg
from gpuroom.tui.config import HostConfig
from gpuroom.tui.fleet.intent import MIRROR_ENV, Intent
from gpuroom.tui.fleet.mirror import (
    MirrorState,
    committed,
    mirror_default,
    prune,
    wants_mirror,
)
from gpuroom.tui.model import HostState, MirrorHome
from gpuroom.tui.present.detail import job_detail
from gpuroom.tui.present.jobs import job_rows
from gpuroom.tui.snapshot import Job

NOW = 1_800_000_000.0


Q = "0123456789abcdef" * 2  # a queue identity as the helper makes one


def _home(step: int, *, box_mtime: float | None = NOW - 180) -> MirrorHome:
    return MirrorHome(host="box", job="default/j1", step=step, file=f"ckpt-{step:012d}.pt",
                      local_path=f"/x/ckpt-{step:012d}.pt", sha256="ab" * 32,
                      verified_by="load", box_mtime=box_mtime, home_at=NOW - 60, queue_id=Q)


def test_spot_profiles_mirror_by_default_a_host_setting_wins() -> None:
    assert mirror_default(HostConfig(name="a", ssh="a", profile="vastai")) is True
    assert mirror_default(HostConfig(name="a", ssh="a", profile="runpod")) is True
    assert mirror_default(HostConfig(name="a", ssh="a", profile="generic-ssh")) is False
    assert mirror_default(HostConfig(name="a", ssh="a", profile="vastai", mirror=False)) is False
    assert mirror_default(HostConfig(name="a", ssh="a", mirror=True)) is True
    # hosts.toml spot = "aws" (a spot instance on a generic-ssh profile): it can vanish too
    assert mirror_default(HostConfig(name="a", ssh="a", spot="aws")) is True
    # A profile that cannot be read: no mirror (the doctor reports the profile).
    assert mirror_default(HostConfig(name="a", ssh="a", profile="no-such-profile")) is False


def _intent(job: str, *, mirror: bool = False, failover: tuple[str, ...] = ()) -> Intent:
    return Intent(host="a", job=job, argv=("python3",), added_at=NOW, mirror=mirror,
                  failover=failover)


def test_a_job_asks_for_the_mirror_through_its_record_on_the_jump_host() -> None:
    plain = HostConfig(name="a", ssh="a")
    asked = Job.read({"id": "default/j1", "ckpt_dir": "/c", "env": {MIRROR_ENV: "1"}})
    not_asked = Job.read({"id": "default/j2", "ckpt_dir": "/c", "env": {}})
    no_dir = Job.read({"id": "default/j3", "env": {MIRROR_ENV: "1"}})
    assert wants_mirror(plain, asked, _intent("default/j1", mirror=True))
    assert wants_mirror(plain, not_asked, _intent("default/j2", failover=("b",)))
    assert not wants_mirror(plain, not_asked, _intent("default/j2"))
    assert not wants_mirror(plain, no_dir, _intent("default/j3", mirror=True))
    assert wants_mirror(HostConfig(name="a", ssh="a", mirror=True), not_asked,
                        _intent("default/j2"))
    # The box's word alone (its env says GPUROOM_MIRROR=1) is no record of the user's wish,
    # on any host: a job the box merely reports is never mirrored.
    assert not wants_mirror(plain, asked, None)
    assert not wants_mirror(HostConfig(name="a", ssh="a", mirror=True), not_asked, None)


def test_only_committed_checkpoints_at_the_top_of_the_dir_count() -> None:
    files = [
        {"path": "ckpt-000000000020.pt", "kind": "file"},
        {"path": ".ckpt-000000000030.pt.tmp-123", "kind": "file"},  # a save in progress
        {"path": "ckpt-000000000010.pt", "kind": "file"},
        {"path": "sub/ckpt-000000000090.pt", "kind": "file"},
        {"path": "ckpt-000000000099.pt", "kind": "symlink"},
        {"path": "notes.txt", "kind": "file"},
    ]
    assert [s for s, _ in committed(files)] == [10, 20]


def test_prune_keeps_the_newest_k_and_drops_stale_parts(tmp_path: Path) -> None:
    for step in (1, 2, 3, 4):
        (tmp_path / f"ckpt-{step:012d}.pt").write_bytes(b"x")
    (tmp_path / "ckpt-000000000002.pt.part").write_bytes(b"half")  # older: never resumed
    (tmp_path / "ckpt-000000000005.pt.part").write_bytes(b"half")  # newer: the next resume
    (tmp_path / "notes.txt").write_text("mine")
    removed = prune(tmp_path, 2)
    assert sorted(removed) == ["ckpt-000000000001.pt", "ckpt-000000000002.pt",
                               "ckpt-000000000002.pt.part"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-000000000003.pt", "ckpt-000000000004.pt", "ckpt-000000000005.pt.part",
        "notes.txt"]


def test_state_keeps_the_newest_home_and_skips_entries_of_another_shape(tmp_path: Path) -> None:
    state = MirrorState(tmp_path / "mirror.json")
    assert state.home("box", Q, "default/j1") is None
    state.put(_home(10))
    state.put(_home(20))
    home = state.home("box", Q, "default/j1")
    assert home is not None and home.step == 20 and state.home("other", Q, "default/j1") is None
    assert state.home("box", None, "default/j1") is None  # a queue with no identity owns none
    assert state.pulls.parent == tmp_path and state.pulls.name != "pulls.json"
    text = (tmp_path / "mirror.json").read_text()
    (tmp_path / "mirror.json").write_text(text.replace('"step"', '"stepp"'))
    # not a crash: the next verified pull writes it anew
    assert state.home("box", Q, "default/j1") is None
    (tmp_path / "mirror.json").write_text("{not json")
    assert state.load() == {}


def _host(home: MirrorHome | None) -> HostState:
    raw = {"time": NOW, "queue": {"jobs": [{
        "id": "default/j1", "state": "running", "argv": ["python3", "train.py"],
        "ckpt_dir": "/c", "attempts": [{"start": NOW - 600}],
        "checkpoint": {"path": "/c/ckpt-000000000030.pt", "mtime": NOW - 30, "size": 1}}]}}
    state = HostState(name="box", snapshot=raw, last_ok=NOW)
    if home is not None:
        state.mirrored = {home.job: home}
    return state


def test_the_queue_pane_says_which_step_is_home_and_how_old() -> None:
    [row] = job_rows(_host(_home(20)), NOW)
    assert row.home_text == "ckpt step 20 home, 3m"  # its age on the box's clock
    assert row.ckpt_text.endswith("(ckpt step 20 home, 3m)")
    assert ("mirror", "ckpt step 20 home, 3m") in job_detail(_host(_home(20)), row)
    [bare] = job_rows(_host(None), NOW)
    assert bare.home_text == "" and "home" not in bare.ckpt_text
    assert all(label != "mirror" for label, _ in job_detail(_host(None), bare))


def test_hosts_toml_mirror_keys(tmp_path: Path) -> None:
    p = tmp_path / "hosts.toml"
    p.write_text('[settings]\nmirror_keep = 3\nmirror_bwlimit_kbps = 20000\n'
                 '[hosts.a]\nssh = "a"\nmirror = true\n[hosts.b]\nssh = "b"\n')
    config = cfg.load(p)
    assert config.settings.mirror_keep == 3 and config.settings.mirror_bwlimit_kbps == 20000
    assert config.hosts["a"].mirror is True and config.hosts["b"].mirror is None
    assert config.hosts["a"].to_toml()["mirror"] is True
    assert "mirror" not in config.hosts["b"].to_toml()


@pytest.mark.attack("bad configuration", "mirror settings of the wrong type: named and fixed")
def test_bad_mirror_keys_are_named(tmp_path: Path) -> None:
    p = tmp_path / "hosts.toml"
    p.write_text('[hosts.a]\nssh = "a"\nmirror = "yes"\n')
    assert "mirror must be true or false" in (cfg.load(p).hosts["a"].error or "")
    p.write_text("[settings]\nmirror_keep = 0\n")
    with pytest.raises(cfg.ConfigError) as err:
        cfg.load(p)
    assert "mirror_keep" in str(err.value) and "Fix:" in str(err.value)


@pytest.mark.attack("injection", "a box's job id that climbs out of the mirror's dir")
async def test_a_job_id_that_would_land_outside_the_mirror_dir_is_refused(
        tmp_path: Path) -> None:
    from gpuroom.tui.config import Settings
    from gpuroom.tui.errors import GpuroomError
    from gpuroom.tui.fleet.mirror import Mirror, MirrorOutcome, mirror_dir
    from gpuroom.tui.snapshot import read_snapshot

    host = HostConfig(name="box", ssh="box", mirror=True, pull_to=str(tmp_path / "home"))
    assert mirror_dir(host, "j1", Q) == (tmp_path / "home" / "mirror" / Q / "box" /
                                         "j1").resolve()
    # Only an id the helper mints names a folder: a "/" in one is never a subfolder.
    for bad in ("../../../etc", "/etc", "j1/../../x", "", "a\x00b", "default/j1"):
        with pytest.raises(GpuroomError) as err:
            mirror_dir(host, bad, Q)
        assert "box" in err.value.message and "\x00" not in err.value.message
    heard: list[MirrorOutcome] = []
    state = MirrorState(tmp_path / "m.json")
    # A record of that id (the jump host's own `queue add` refuses such an id; an intents.json
    # written by hand or by an older gpuroom may hold one): the mirror's own guard still holds.
    forged = "../../../../tmp/x"
    state.intents.path.write_text(json.dumps({"version": 1, "jobs": [
        Intent(host="box", job=forged, argv=("python3",), added_at=NOW, mirror=True,
               queue_id=Q).to_json()]}))
    assert state.intents.get("box", forged, Q) is not None
    mirror = Mirror({"box": host}, {}, Settings(), state=state, on_outcome=heard.append)
    view = read_snapshot({"queue": {"id": Q, "jobs": [{
        "id": forged, "state": "running", "ckpt_dir": "/c",
        "checkpoint": {"path": "/c/ckpt-000000000001.pt", "mtime": 1.0, "size": 1}}]}})
    mirror.observe("box", view)
    mirror.observe("box", view)
    assert mirror._tasks == {}  # no pull started
    assert [(o.status, o.detail.startswith("box: job id '../../../../tmp/x' refused: not a "
                                           "job id")) for o in heard] == [("failed", True)]  # once
