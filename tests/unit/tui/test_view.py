"""tui/present/jobs.py: snapshot dicts -> display rows, tolerant of missing and odd fields."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from paths import DATA

from gpuroom.remote import gpu
from gpuroom.tui.model import HostState, LinkState, PendingAction
from gpuroom.tui.present.banner import failed_job_dangers
from gpuroom.tui.present.disks import disk_rows
from gpuroom.tui.present.format import fmt_age
from gpuroom.tui.present.gpus import gpu_absence, gpu_rows, gpu_summary
from gpuroom.tui.present.hosts import host_row, link_text
from gpuroom.tui.present.jobs import (
    job_rows,
    still_pending,
)
from gpuroom.tui.present.log import LogChunk, LogCursor, advance_log, log_chunk
from gpuroom.tui.snapshot import read_optional as view

PROBE: dict[str, Any] = json.loads((DATA / "probe-vm.json").read_text())
NOW = float(PROBE["host"]["time"]) + 30


def scenario_host(name: str, host: str) -> HostState:
    data = json.loads((DATA / f"scenario-{name}.json").read_text())
    h = next(h for h in data["hosts"] if h["name"] == host)
    return HostState(name=h["name"], profile=h["profile"], state=LinkState(h["state"]),
                     error=h["error"], snapshot=h["snapshot"], last_ok=h["last_ok"])


def up(snapshot: dict[str, Any] | None, name: str = "box") -> HostState:
    return HostState(name=name, state=LinkState.UP, snapshot=snapshot, last_ok=NOW - 30)


# ------------------------------------------------------------------ link state


def test_link_text_up_stale_down() -> None:
    h = up(PROBE)
    assert link_text(h, NOW) == "UP"
    h.state = LinkState.STALE
    h.last_ok = NOW - 180
    assert link_text(h, NOW) == "STALE 3m00s"
    # The cell stays short; the reason is in the host's panes (present/hosts.py link_problem).
    h.state, h.error = LinkState.DOWN, "Connection refused"
    assert link_text(h, NOW) == "DOWN 3m00s"
    assert link_text(HostState("never"), NOW) == "DOWN"


# ------------------------------------------------------------------ GPUs


def test_gpu_rows_from_the_throttle_scenario() -> None:
    rows = gpu_rows(view(scenario_host("throttle", "a10-c").snapshot))
    a10, rtx = rows
    assert (a10.sm_mhz, a10.sm_max_mhz, a10.power_w, a10.power_limit_w) == (210, 1695, 21.3, 150)
    assert a10.mem_total_mib == 23028
    # "idle" is a clock-event reason that costs nothing: not shown as throttling.
    assert a10.throttle == ("hw_slowdown", "hw_power_brake_slowdown")
    assert a10.throttle_short == "HwSlow,PwrBrake"
    assert rtx.throttle == ("sw_power_cap",) and rtx.level == "warn"


def test_gpu_rows_read_the_reasons_the_helper_writes() -> None:
    # The helper's own GPU dict (remote/gpu.py, from a csv row of the clock-reason mask) names
    # the field clock_event_reasons; the pane read only older spellings and showed "-".
    row = gpu.parse_query_csv("index, clocks_throttle_reasons.active\n0, 0x0000000000000025\n")[0]
    (shown,) = gpu_rows(view({"gpus": [gpu.gpu_from_query_row(row, 0)]}))
    assert shown.throttle == ("sw_power_cap", "sw_thermal_slowdown")
    assert shown.level == "warn"


def test_gpu_rows_tolerate_missing_and_odd_fields() -> None:
    snap = {"gpus": {"devices": [{"name": "X", "power_w": "55.5", "throttle_reasons": "bad"},
                                 "not a dict", {"index": 3, "mem_used_mib": 512,
                                                "throttle_reasons": {"SW Power Cap": True,
                                                                     "Idle": True}}]}}
    rows = gpu_rows(view(snap))
    assert [r.index for r in rows] == [0, 3]
    assert rows[0].power_w == 55.5 and rows[0].sm_mhz is None and rows[0].throttle == ()
    assert rows[1].mem_used_mib == 512 and rows[1].throttle == ("sw_power_cap",)


def test_gpu_absence_reasons() -> None:
    assert gpu_absence(None) == "no snapshot yet"
    # The real probe of the dev VM (no GPU, no driver) says why in gpu_error.
    assert gpu_absence(view(PROBE)) == PROBE["gpu_error"]
    assert gpu_absence(view({"host": {}})) == "not reported by the probe"
    assert gpu_absence(view({"gpus": []})) == "none found"
    assert gpu_absence(view({"gpus": {"devices": [], "reason": "NVML: driver not loaded"}})) == (
        "NVML: driver not loaded"
    )
    err = {"errors": [{"section": "gpus", "error": "NVMLError: Unknown"}]}
    assert gpu_absence(view(err)) == "NVMLError: Unknown"
    assert gpu_absence(view(scenario_host("healthy", "h100-a").snapshot)) is None


def test_gpu_summary_for_the_hosts_table() -> None:
    rows = gpu_rows(view(scenario_host("healthy", "h100-a").snapshot))
    count, sm, power = gpu_summary(rows)
    assert count == "8x H100 80GB"
    assert sm == "-"  # the H100 capture (a plain nvidia-smi table) prints no clocks
    assert power == f"{259 + 264 + 266 + 268 + 246 + 249 + 263 + 245}/5600"
    # The throttle captures (-q) do: the mean SM clock of its two boards over their max.
    throttled = gpu_summary(gpu_rows(view(scenario_host("throttle", "a10-c").snapshot)))
    assert throttled == ("2x mixed", f"{(210 + 300) // 2}/{(1695 + 2130) // 2}",
                         f"{round(21.3 + 18.31)}/{150 + 215}")
    assert gpu_summary([]) == ("0", "-", "-")


# ------------------------------------------------------------------ disks


def test_disk_rows_from_the_real_probe_dedupe_same_device() -> None:
    rows = disk_rows(view(PROBE))
    # "~" and the cwd are one filesystem on the dev VM: shown once.
    assert len(rows) == 1
    d = rows[0]
    assert d.path == "~"
    disk = PROBE["disks"][0]
    assert d.used_bytes == disk["total_bytes"] - disk["free_bytes"]
    assert d.level == "ok"


def test_inode_alarm_even_when_bytes_look_fine() -> None:
    rows = disk_rows(view(scenario_host("inode", "h100-a").snapshot))
    data = next(r for r in rows if r.path == "/data")
    assert data.bytes_level == "ok"  # 34 % used
    assert data.inodes_level == "crit"  # 99 % (fixtures/df/moby-37077)
    assert data.level == "crit"


@pytest.mark.parametrize(
    ("bytes_pct", "inodes_pct", "bytes_level", "inodes_level"),
    [(84, 79, "ok", "ok"), (85, 80, "warn", "warn"), (94, 89, "warn", "warn"),
     # df rounds Use% up: 94.1 % used is the "95%" df prints, so it is critical.
     (94.1, 89.1, "crit", "crit"), (95, 90, "crit", "crit")],
)
def test_disk_thresholds(bytes_pct: float, inodes_pct: float, bytes_level: str,
                         inodes_level: str) -> None:
    snap = {"disks": [{"path": "/d", "total_bytes": 1000, "free_bytes": 1000 - bytes_pct * 10,
                       "total_inodes": 1000, "free_inodes": 1000 - inodes_pct * 10}]}
    (d,) = disk_rows(view(snap))
    assert (d.bytes_level, d.inodes_level) == (bytes_level, inodes_level)


def test_disk_percentages_are_dfs_with_the_root_reserve() -> None:
    # Issue 17 item 6: ext4 keeps 5 % for root; gpuroom showed (total - avail) / total.
    # df: used = total - bfree; Use% = used / (used + avail), rounded up. The numbers are a
    # 1000-block disk with 400 free of which 50 reserved.
    snap = {"disks": [{"path": "/d", "total_bytes": 1000, "bfree_bytes": 400,
                       "free_bytes": 350, "total_inodes": 100, "ffree_inodes": 61,
                       "free_inodes": 55}]}
    (d,) = disk_rows(view(snap))
    assert (d.used_bytes, d.avail_bytes, d.bytes_pct) == (600, 350, 64)  # 600/950 = 63.2
    assert (d.inodes_used, d.inodes_free, d.inodes_pct) == (39, 61, 39)


def test_disk_error_and_no_inode_accounting() -> None:
    snap = {"disks": [{"path": "/gone", "error": "FileNotFoundError: nope"},
                      {"path": "/btrfs", "total_bytes": 100, "free_bytes": 50,
                       "total_inodes": 0, "free_inodes": 0}]}
    gone, btrfs = disk_rows(view(snap))
    assert gone.error == "not mounted" and gone.level == "ok"  # issue 17 item 14
    assert btrfs.inodes_pct is None and btrfs.bytes_pct == 50


# ------------------------------------------------------------------ the box's text is inert

# An OSC 52 clipboard write, a screen clear, a bidi override and a newline: each one would
# act on the terminal (or reorder what the user reads) if a pane printed it as given.
EVIL = "\x1b]52;c;ZXZpbA==\x07\x1b[2J\u202eevil\nline"


def assert_inert(text: str) -> None:
    assert not any(c in text for c in "\x1b\x07\n\u202e"), repr(text)
    assert "evil" in text and "line" in text, repr(text)


@pytest.mark.attack(
    "hostile text",
    "escape sequences and markup in every string field of a snapshot: inert in every pane's rows")
def test_every_string_the_box_wrote_is_inert_in_the_rows() -> None:
    snap = {
        "gpus": [{"index": 0, "name": f"H100 {EVIL}", "throttle_reasons": [f"hw_{EVIL}"]}],
        "disks": [{"path": f"/mnt/{EVIL}", "error": f"OSError: {EVIL}"}],
        "queue": [{"id": "j1", "name": f"run {EVIL}", "state": "running",
                   "command": f"python {EVIL}"},
                  {"id": "j2", "name": "argv", "state": f"queued{EVIL}", "argv": ["echo", EVIL]}],
    }
    (gpu,) = gpu_rows(view(snap))
    assert_inert(gpu.name)
    assert_inert(gpu.throttle_short)
    (disk,) = disk_rows(view(snap))
    assert_inert(disk.path)
    assert_inert(disk.error or "")
    first, second = job_rows(up(snap), NOW)
    for text in (first.name, second.state, first.command, second.command):
        assert_inert(text)
    no_gpu = view({"gpus": {"devices": [], "reason": f"nvidia-smi: {EVIL}"}})
    assert_inert(gpu_absence(no_gpu) or "")
    assert_inert(host_row(up(snap), NOW).job)


# ------------------------------------------------------------------ jobs, pending actions


def test_job_rows_from_the_healthy_scenario() -> None:
    h = scenario_host("healthy", "h100-a")
    done, running, queued = job_rows(h, NOW)
    assert (running.id, running.state, running.attempt) == ("j3", "running", 2)
    # Ages come from the box clock extrapolated with the injected now: fixed, not wall time.
    # The builder polls 5 s into the second attempt; now is 30 s after that poll.
    assert fmt_age(running.runtime_s) == "35s"
    assert fmt_age(running.ckpt_age_s) == "35s"  # saved by the first attempt
    assert running.command == "python3 train.py --config llama1b.yaml"
    assert (done.exit_code, fmt_age(done.runtime_s)) == (0, "0s")
    assert queued.runtime_s is None and queued.ckpt_age_s is None


def test_job_rows_tolerate_other_queue_shapes() -> None:
    snap = {"queue": [{"job_id": 7, "status": "failed", "returncode": "1", "command": "a b"},
                      42]}
    (row,) = job_rows(up(snap), NOW)
    assert (row.id, row.state, row.exit_code, row.command) == ("7", "failed", 1, "a b")
    assert row.level == "crit"
    assert job_rows(up({"queue": {"jobs": "nope"}}), NOW) == []
    assert job_rows(up(None), NOW) == []


def test_pending_actions_show_until_a_snapshot_confirms_them() -> None:
    h = scenario_host("healthy", "h100-a")
    h.pending = [PendingAction("kill", "j3", NOW), PendingAction("add", "j9", NOW, label="sweep")]
    rows = {r.id: r for r in job_rows(h, NOW)}
    assert rows["j3"].pending == "kill" and rows["j3"].state == "running"
    assert rows["j9"].pending == "add" and rows["j9"].name == "sweep"
    # The same snapshot confirms nothing.
    assert still_pending(PendingAction("kill", "j3", NOW), h.snapshot)
    assert still_pending(PendingAction("add", "j9", NOW, label="sweep"), h.snapshot)
    # A later snapshot where j3 ended and j9 exists confirms both.
    later: dict[str, Any] = json.loads(json.dumps(h.snapshot))
    jobs = later["queue"]["queues"]["default"]["jobs"]
    next(j for j in jobs if j["id"] == "j3")["state"] = "killed"
    jobs.append({"id": "j9", "state": "queued"})
    assert not still_pending(PendingAction("kill", "j3", NOW), later)
    assert not still_pending(PendingAction("add", "j9", NOW, label="sweep"), later)


def test_relaunch_confirmed_by_a_higher_attempt() -> None:
    j5: dict[str, Any] = {"id": "j5", "state": "failed",
                          "attempts": [{"attempt": n, "exit_code": 137} for n in (1, 2, 3)]}
    snap = {"queue": {"queues": {"default": {"jobs": [j5]}}}}
    (row,) = job_rows(up(snap), NOW)
    assert row.attempt == 3 and row.exit_code == 137
    entry = PendingAction("relaunch", "j5", NOW, attempt=3)
    assert still_pending(entry, snap)
    j5["state"] = "running"
    j5["attempts"].append({"attempt": 4, "start": NOW - 60})
    assert not still_pending(entry, snap)
    # Without a known attempt, a live state is the confirmation.
    assert not still_pending(PendingAction("relaunch", "j5", NOW), snap)


# ------------------------------------------------------------------ log bytes


@pytest.mark.attack("bad answers", "a log chunk that is not base64: rejected, not shown")
def test_log_chunk_reads_base64_and_rejects_garbage() -> None:
    h = scenario_host("healthy", "h100-a")
    chunk = log_chunk(view(h.snapshot), "j3")
    assert chunk is not None and chunk.offset == 0 and not chunk.reset
    assert chunk.data.startswith(b"=== gpuroom j3 attempt 1 ")  # the queue's attempt header
    assert log_chunk(view(h.snapshot), "j2") is None  # no log section
    bad = {"queue": {"jobs": [{"id": "x", "log": {"data_b64": "!!not base64!!"}}]}}
    assert log_chunk(view(bad), "x") is None


def chunk(offset: int, data: bytes, *, inode: int = 1, reset: bool = False,
          size: int | None = None) -> LogChunk:
    return LogChunk("j", offset, inode, size if size is not None else offset + len(data),
                    data, reset)


def test_advance_log_shows_each_byte_once() -> None:
    data, fresh, skipped, cur = advance_log(None, chunk(0, b"abc\n"))
    assert (data, fresh, skipped, cur) == (b"abc\n", True, 0, LogCursor("j", 1, 4))
    # The same snapshot handled twice adds nothing.
    assert advance_log(cur, chunk(0, b"abc\n"))[:3] == (b"", False, 0)
    # Overlap: only the new tail.
    data, fresh, _, cur = advance_log(cur, chunk(2, b"c\nde\n"))
    assert (data, fresh, cur.end) == (b"de\n", False, 7)
    # A gap (the helper capped what it sent) is reported, not hidden.
    data, fresh, skipped, cur = advance_log(cur, chunk(20, b"z\n"))
    assert (data, skipped, cur.end) == (b"z\n", 13, 22)


@pytest.mark.parametrize(
    "later",
    [chunk(0, b"new\n", reset=True), chunk(22, b"x\n", inode=2), chunk(0, b"y\n", size=2)],
    ids=["reset-flag", "new-inode", "truncated"],
)
def test_advance_log_restarts_on_rotation(later: LogChunk) -> None:
    cur = LogCursor("j", 1, 22)
    _, fresh, _, new = advance_log(cur, later)
    assert fresh and new.end == later.offset + len(later.data)


# ------------------------------------------------------------------ hosts table, banner


def test_host_row_for_a_host_without_gpu() -> None:
    row = host_row(up(PROBE, "local"), NOW)
    assert (row.state, row.gpus, row.sm_clock, row.job, row.billed, row.findings) == (
        "UP", "no GPU", "-", "-", "-", "-")
    assert row.disk_pct.endswith("%") and row.level == "ok"


def test_host_row_never_polled() -> None:
    row = host_row(HostState("new"), NOW)
    assert row.state == "DOWN" and row.gpus == "-" and row.level == "crit"


def test_a_signalled_end_shows_its_signal() -> None:
    # remote/queue_runner.py records a job killed by a signal as exit_code None and the
    # signal's name; the exit column and the banner line showed nothing for it.
    job = {"id": "j5", "name": "ft", "state": "failed",
           "attempts": [{"attempt": 1, "exit_code": None, "signal": "SIGKILL"}]}
    host = up({"queue": {"queues": {"default": {"jobs": [job]}}}}, "h")
    (row,) = job_rows(host, NOW)
    assert (row.exit_code, row.signal, row.ended_by) == (None, "SIGKILL", "SIGKILL")
    assert [d.text for d in failed_job_dangers([host], NOW)] == [
        "CRITICAL h: job ft failed by SIGKILL"]
    # A new document (the fleet never edits one in place; the view is cached per document).
    exited = {**job, "attempts": [{"attempt": 1, "exit_code": 3, "signal": None}]}
    assert job_rows(up({"queue": {"queues": {"default": {"jobs": [exited]}}}}, "h"),
                    NOW)[0].ended_by == "3"


def test_failed_job_dangers_skip_jobs_a_finding_explains() -> None:
    failed = scenario_host("failed", "h100-a")
    items = failed_job_dangers([failed], NOW)
    assert [d.text for d in items] == ["CRITICAL h100-a: job finetune failed by SIGKILL"]
    assert items[0].level == "crit"
    # The doctor named the job: its line says more, this one is dropped.
    job_id = next(j.id for j in job_rows(failed, NOW) if j.state == "failed")
    explained = [("h100-a", f"job default/{job_id} (finetune) died: cgroup OOM-kill")]
    assert failed_job_dangers([failed], NOW, explained) == []
    # The same title on another host, or another job's id as a prefix, explains nothing.
    assert failed_job_dangers([failed], NOW, [("rtx-b", explained[0][1])]) == items
    assert failed_job_dangers([failed], NOW, [("h100-a", f"job default/{job_id}0 died")]) \
        == items
    assert failed_job_dangers([up(PROBE)], NOW) == []


def test_log_section_round_trip_of_the_scenario_text() -> None:
    h = scenario_host("healthy", "h100-a")
    jobs = h.snapshot["queue"]["queues"]["default"]["jobs"]  # type: ignore[index]
    raw = next(j for j in jobs if j["id"] == "j3")["log_chunk"]["data_b64"]
    # Two attempts, each under the queue's header line: 4 lines, then 8 (a \r redraw is one).
    assert base64.b64decode(raw).count(b"\n") == 1 + 4 + 1 + 8


def test_an_add_the_box_has_not_answered_shows_its_label_and_stays_pending() -> None:
    h = scenario_host("healthy", "h100-a")
    sent = PendingAction("add", None, NOW, label="python sweep.py")
    h.pending = [sent]
    row = job_rows(h, NOW)[-1]
    assert (row.id, row.name, row.state, row.pending) == ("?", "python sweep.py", "sent", "add")
    assert still_pending(sent, h.snapshot)


def test_a_killed_job_shows_the_checkpoint_its_runner_recorded() -> None:
    """The helper sends no checkpoint for an ended job; the runner recorded the newest one
    with the attempt's end, and the ckpt cell shows its age instead of "-"."""
    t = float(PROBE["host"]["time"])
    ckpt = {"path": "/r/ckpt/default/j5/ckpt-000000000400.pt", "size": 9, "mtime": t - 600}
    attempts = [{"attempt": 1, "start": t - 4000, "end": t - 3000, "signal": "SIGKILL"},
                {"attempt": 2, "start": t - 900, "end": t - 300, "signal": "SIGTERM",
                 "end_reason": "killed", "checkpoint": ckpt}]
    job = {"id": "j5", "name": "ft", "state": "killed", "attempts": attempts}
    (row,) = job_rows(up({"host": PROBE["host"],
                          "queue": {"queues": {"default": {"jobs": [job]}}}}), NOW)
    assert row.ckpt_age_s == pytest.approx(630.0) and row.ckpt_text == "10m"  # box now: +30 s
    assert row.runtime_s == pytest.approx(600.0)  # the last attempt's
    bare = {**job, "attempts": [dict(attempts[1], checkpoint=None)]}
    (none,) = job_rows(up({"host": PROBE["host"],
                           "queue": {"queues": {"default": {"jobs": [bare]}}}}), NOW)
    assert none.ckpt_text == "-"
