"""The jump host's record of what the user added (tui/fleet/intent.py): private, atomic, keyed
by host and job id; the failover targets and the "came back wiped" evidence the fleet takes
from it and from its own polls (tui/fleet/live.py), and the hosts.toml key that lets the
local host receive a moved job."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from gpuroom.tui import config as cfg
from gpuroom.tui.config import HostConfig
from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.fleet.intent import (
    FAILOVER_ENV,
    MIRROR_ENV,
    Intent,
    IntentBook,
    move_target_refusal,
)
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.model import HeldFailover
from gpuroom.tui.rules.moves import held_findings
from gpuroom.tui.snapshot import read_snapshot

T0 = 1_795_000_000.0
Q = "0123456789abcdef" * 2  # a queue identity as the helper makes one


def _ids(book: IntentBook, host: str) -> list[str]:
    return sorted(i.job for i in book.host(host))


def _intent(host: str = "a", job: str = "j1", **kw: object) -> Intent:
    return Intent(host=host, job=job, argv=("python3", "train.py"), added_at=T0,
                  **{"queue_id": Q, **kw})  # type: ignore[arg-type]


def test_the_record_is_private_keyed_by_host_and_job_and_survives_a_reread(
        tmp_path: Path) -> None:
    book = IntentBook(tmp_path / "intents.json")
    assert book.get("a", "j1", Q) is None and _ids(book, "a") == []
    book.record(_intent(env={"TOKEN": "s3cret"}, failover=("b", "c"), mirror=True))
    book.record(_intent(job="j2"))
    book.record(_intent(host="b", job="j1", moved_from="a/j2"))
    assert stat.S_IMODE(book.path.stat().st_mode) == 0o600  # env values may be tokens
    again = IntentBook(book.path)
    got = again.get("a", "j1", Q)
    assert got is not None and got.env == {"TOKEN": "s3cret"} and got.failover == ("b", "c")
    assert got.argv == ("python3", "train.py") and got.wants_mirror
    assert _ids(again, "a") == ["j1", "j2"]
    assert again.get("b", "j1", Q) is not None and again.get("b", "j1", Q).moved_from == "a/j2"
    assert not list(tmp_path.glob(".intents.json.tmp-*"))  # written by rename


def test_the_box_sees_the_wishes_but_they_are_read_only_from_the_record() -> None:
    assert _intent(env={"SEED": "7"}, failover=("b",)).box_env() == {
        "SEED": "7", MIRROR_ENV: "1", FAILOVER_ENV: "b"}
    assert _intent(env={"SEED": "7"}).box_env() == {"SEED": "7"}


@pytest.mark.attack("trust", "a box answers `queue add` with a job id that is a path or "
                    "markup: recorded under it")
def test_a_job_id_the_box_made_up_is_not_recorded(tmp_path: Path) -> None:
    book = IntentBook(tmp_path / "intents.json")
    for bad in ("../../etc", "/etc/passwd", "j1/../../x", "", "[red]j1", "j1\x1b[2J", None, 7):
        with pytest.raises(GpuroomError) as err:
            book.record(_intent(job=bad))  # type: ignore[arg-type]
        assert "a" in err.value.message and "\x1b" not in err.value.message
    assert _ids(book, "a") == []
    book.record(_intent(job="j12_3"))  # an array task
    assert book.get("a", "j12_3", Q) is not None


def test_entries_of_another_shape_are_skipped_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "intents.json"
    good = _intent().to_json()
    path.write_text(json.dumps({"version": 1, "jobs": [
        good, {"host": "a", "job": "j2"}, {**good, "job": "j3", "argv": "rm -rf /"},
        {**good, "job": "j4", "env": {"K": 1}}, "junk"]}))
    assert _ids(IntentBook(path), "a") == ["j1"]
    path.write_text("{not json")
    assert _ids(IntentBook(path), "a") == []


def test_local_receives_moves_only_when_hosts_toml_says_so(tmp_path: Path) -> None:
    p = tmp_path / "hosts.toml"
    p.write_text('[hosts.local]\nlocal = true\n[hosts.here]\nlocal = true\naccept_moves = true\n'
                 '[hosts.b]\nssh = "b"\n[hosts.c]\nssh = "c"\naccept_moves = "yes"\n')
    hosts = cfg.load(p).hosts
    assert move_target_refusal(hosts["local"]) is not None
    assert "local = true" in (move_target_refusal(hosts["local"]) or "")
    assert move_target_refusal(hosts["here"]) is None
    assert move_target_refusal(hosts["b"]) is None
    assert hosts["here"].to_toml()["accept_moves"] is True
    assert "accept_moves" not in hosts["local"].to_toml()
    assert "accept_moves must be true or false" in (hosts["c"].error or "")
    assert move_target_refusal(HostConfig(name="local", local=True)) is not None  # no config


def _fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    p = tmp_path / "hosts.toml"
    p.write_text('[hosts.a]\nssh = "a"\n[hosts.b]\nssh = "b"\n[hosts.local]\nlocal = true\n'
                 '[hosts.here]\nlocal = true\naccept_moves = true\n')
    return Fleet(cfg.load(p), mirror=True)


def test_failover_targets_are_the_recorded_ones_less_the_local_host(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = _fleet(tmp_path, monkeypatch)
    assert fleet._failover_targets("a", None) == []  # a job the box merely reports
    wish = _intent(failover=("local", "nosuch", "a", "b", "here"))
    assert fleet._failover_targets("a", wish) == ["b", "here"]


def _view(boot: str, uptime_s: float) -> object:
    return read_snapshot({"host": {"boot_id": boot, "uptime_s": uptime_s}})


def test_a_reboot_counts_only_when_this_process_saw_the_host_gone_for_longer_than_its_uptime(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = _fleet(tmp_path, monkeypatch)
    fleet._note_boot("a", _view("b1", 9000.0), T0)  # type: ignore[arg-type]
    # A new boot on the box's word, with no failed poll in between: not witnessed.
    fleet._note_boot("a", _view("b2", 1.0), T0 + 60)  # type: ignore[arg-type]
    assert "a" not in fleet._witnessed_boot
    # Polls failed, but the box claims an uptime longer than the outage: not witnessed.
    fleet._unreachable.add("a")
    fleet._note_boot("a", _view("b3", 500.0), T0 + 120)  # type: ignore[arg-type]
    assert "a" not in fleet._witnessed_boot
    # Polls failed, and the new boot is younger than the time since the last good poll.
    fleet._unreachable.add("a")
    fleet._note_boot("a", _view("b4", 30.0), T0 + 300)  # type: ignore[arg-type]
    assert fleet._witnessed_boot["a"] == "b4"


def test_a_failover_held_back_is_a_warning_with_the_move_to_make_by_hand() -> None:
    [f] = held_findings("a", [HeldFailover("j7", 40, "f0rged", T0)])
    assert f.severity == "warn" and f.host == "a"
    assert "j7" in f.title and "ckpt step 40" in f.title and "not failed over" in f.title
    assert "gpuroom queue move a j7 --to" in f.fix
