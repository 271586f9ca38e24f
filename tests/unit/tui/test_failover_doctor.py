"""The doctor explains every automatic move (issue 21 item 3): a failover's record, read
through the model, becomes a finding on the host it left; enter's job detail shows the same
lineage the `i` detail does."""

from __future__ import annotations

from pathlib import Path

from gpuroom.tui.fleet.mirror import MirrorState
from gpuroom.tui.fleet.move import Lineage
from gpuroom.tui.model import HostState, LinkState, Move
from gpuroom.tui.present.jobdetail import detail_lines, detail_rows
from gpuroom.tui.rules.doctor import diagnose
from gpuroom.tui.rules.moves import move_findings
from gpuroom.tui.snapshot import read_queue_view

T0 = 1_795_000_000.0  # 2026-11-18 ...


def _auto(fenced_at: float | None = None, fence: bool = True) -> Move:
    return Move("a", "j7", "b", "j3", 40, T0, fence=fence, auto=True, down_s=600.0,
                fenced_at=fenced_at)


def test_a_failover_waiting_for_its_fence_is_a_warning_naming_both_hosts() -> None:
    [f] = move_findings("a", [_auto()], T0 + 60)
    assert f.severity == "warn" and f.host == "a" and f.id == "GEN8"
    assert "j7 moved from a to b/j3 after a was down 10 min" in f.title
    assert "a's copy not fenced yet" in f.title
    assert "ckpt step 40" in f.seen


def test_a_fenced_failover_is_info_with_the_fence_time() -> None:
    fenced = T0 + 3600 + 125
    [f] = move_findings("a", [_auto(fenced_at=fenced, fence=False)], fenced + 1)
    assert f.severity == "info"
    stamp = __import__("time").strftime("%H:%M", __import__("time").gmtime(fenced))
    assert f.title.endswith(f"a's copy fenced at {stamp} UTC")


def test_manual_moves_other_hosts_and_old_moves_say_nothing() -> None:
    manual = Move("a", "j7", "b", "j3", 40, T0)
    assert move_findings("a", [manual], T0 + 1) == []
    assert move_findings("b", [_auto()], T0 + 1) == []  # said once, on the host it left
    assert move_findings("a", [_auto(fenced_at=T0 + 5, fence=False)], T0 + 2 * 86400) == []
    # An old move whose copy is still not fenced keeps being said: it may still bill.
    assert len(move_findings("a", [_auto()], T0 + 2 * 86400)) == 1


def test_box_words_in_a_move_are_inert() -> None:
    evil = Move("a", "j7\x1b[2J", "b", "j3\x07", None, T0, fence=True, auto=True,
                down_s=700.0)
    [f] = move_findings("a", [evil], T0 + 1)
    assert "\x1b" not in f.title and "\x07" not in f.title


def test_the_doctor_says_the_move_while_the_host_is_down() -> None:
    host = HostState(name="a", state=LinkState.DOWN, last_ok=T0 - 700, moved=[_auto()])
    found = diagnose(None, None, host.state, None, T0 + 5, host="a", last_ok=host.last_ok,
                     moves=host.moved)
    assert {f.id for f in found} == {"GEN8"} and len(found) == 2
    assert any("moved from a to b/j3" in f.title for f in found)


def test_fencing_records_when(tmp_path: Path) -> None:
    lineage = Lineage(MirrorState(tmp_path / "mirror.json"))
    lineage.add(_auto())
    [move] = lineage.fences("a")
    lineage.fenced(move, at=T0 + 99)
    [after] = lineage.load()
    assert after.fence is False and after.fenced_at == T0 + 99 and after.auto
    assert lineage.involving("a") == [after] and lineage.involving("c") == []


def test_enter_job_detail_shows_the_lineage_the_i_detail_shows() -> None:
    view = read_queue_view({"queue": "default", "jobs": [
        {"id": "j3", "state": "running", "argv": ["python3", "t.py"]}]})
    rows = detail_rows(view.jobs[0], T0, lineage="from a/j7")
    assert ("moved", "from a/j7") in rows
    assert "moved: from a/j7" in detail_lines(view.jobs[0], T0, lineage="from a/j7")
    assert not any(label == "moved" for label, _ in detail_rows(view.jobs[0], T0))


def test_a_failover_of_a_box_that_came_back_wiped_says_what_was_seen() -> None:
    wiped = Move("a", "j7", "b", "j3", 40, T0, auto=True, fenced_at=T0,
                 why="a came back wiped (a new boot, and ckpt step 40 is gone)")
    [f] = move_findings("a", [wiped], T0 + 1)
    assert f.severity == "info"
    assert f.title.startswith("j7 moved from a to b/j3 after a came back wiped (a new boot")
