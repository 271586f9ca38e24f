"""Pure parts of the queue: tmux ls parsing on real captures, the fold, log cursors, collect."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest
from paths import FIXTURES

from gpuroom.remote.queue import collect, parse_tmux_ls, read_log_chunk
from gpuroom.remote.queue_events import EventWriter, fold, queue_dir, read_events

TMUX = FIXTURES / "tmux"

EXPECTED: dict[str, list[dict[str, Any]]] = {
    "tmux-1177-ls-default-format.txt": [
        {"name": "asession", "windows": 1, "created": "Wed Nov 29 23:19:28 2017",
         "width": 138, "height": 52, "attached": False},
        {"name": "another", "windows": 1, "created": "Wed Nov 29 23:13:08 2017",
         "width": 138, "height": 52, "attached": False},
        {"name": "1more", "windows": 1, "created": "Wed Nov 29 23:50:39 2017",
         "width": 138, "height": 52, "attached": False},
    ],
    "tmux-list-sessions-attached-commented.txt": [
        {"name": "0", "windows": 1, "created": "Wed Jul  3 12:18:26 2019",
         "width": 118, "height": 58, "attached": True},
    ],
}


def _capture(path: Path) -> str:
    """The capture below its provenance header (lines up to ``---``)."""
    text = path.read_text()
    return text.split("\n---\n", 1)[1] if "\n---\n" in text else text


def test_every_tmux_fixture_has_expectations() -> None:
    assert sorted(p.name for p in TMUX.iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parse_tmux_ls_on_real_captures(name: str) -> None:
    assert parse_tmux_ls(_capture(TMUX / name)) == EXPECTED[name]


def test_parse_tmux_ls_tmux3_without_size_and_names_with_colons() -> None:
    text = ("gpuroom-default: 1 windows (created Sat Nov 21 20:56:44 2026)\n"
            "a: b: 2 windows (created Sat Nov 21 20:56:44 2026) (attached)\n"
            "no server running on /tmp/tmux-0/default\n")
    got = parse_tmux_ls(text)
    assert [(s["name"], s["windows"], s["width"], s["attached"]) for s in got] == [
        ("gpuroom-default", 1, None, False), ("a: b", 2, None, True)]


def _events(tmp_path: Path, *items: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    writer = EventWriter(str(tmp_path))
    try:
        for ev, fields in items:
            writer.append(ev, **fields)
    finally:
        writer.close()
    return read_events(str(tmp_path))[0]


def test_fold_is_pure_and_tracks_requests(tmp_path: Path) -> None:
    events = _events(
        tmp_path,
        ("added", {"argv": ["a"], "cwd": "/"}),
        ("added", {"argv": ["b"], "cwd": "/", "retries": 1}),
        ("launching", {"job": "j1", "attempt": 1, "boot_id": "B"}),
        ("started", {"job": "j1", "attempt": 1, "pid": 10, "pgid": 10, "boot_id": "B"}),
        ("kill_requested", {"job": "j1", "grace": 1}),
        ("reorder_requested", {"job": "j2", "position": 0}),
    )
    before = json.dumps(events)
    state = fold(events)
    assert json.dumps(events) == before  # the fold never mutates its input
    assert fold(events) == state
    j1, j2 = state["jobs"]["j1"], state["jobs"]["j2"]
    assert j1["state"] == "running" and j1["kill_pending"] is True
    assert j1["attempts"][0]["pid"] == 10 and j1["attempts"][0]["end"] is None
    assert j2["state"] == "queued" and state["order"] == ["j2"]
    assert [r["ev"] for r in state["pending_requests"]] == ["kill_requested",
                                                           "reorder_requested"]
    more = _events(
        tmp_path,
        ("killed", {"job": "j1", "attempt": 1, "req": 5, "signal": "SIGTERM"}),
        ("rejected", {"job": "j2", "req": 6, "why": "x"}),
    )
    state = fold(more)
    assert state["pending_requests"] == []
    assert state["jobs"]["j1"]["state"] == "killed"
    assert state["jobs"]["j1"]["attempts"][0]["end_reason"] == "killed"
    assert [e["seq"] for e in more] == list(range(1, 9))


def test_fold_ignores_replayed_seqs(tmp_path: Path) -> None:
    events = _events(tmp_path, ("added", {"argv": ["a"]}), ("removed", {"job": "j1"}))
    replayed = [*events, dict(events[0], ev="added")]
    assert fold(replayed) == fold(events)


def test_log_chunk_follows_a_cursor_and_resets_on_truncation(tmp_path: Path) -> None:
    log = tmp_path / "j1.log"
    log.write_bytes(b"x" * 10000)
    first = read_log_chunk(str(log), None)
    assert first["offset"] == 10000 - 8192 and first["next_offset"] == 10000
    assert first["reset"] is False
    with open(log, "ab") as f:
        f.write(b"new\n")
    cursor = {"offset": first["next_offset"], "inode": first["inode"]}
    second = read_log_chunk(str(log), cursor)
    assert base64.b64decode(second["data_b64"]) == b"new\n" and second["reset"] is False
    log.write_bytes(b"short\n")  # truncated in place: same inode, smaller than the cursor
    third = read_log_chunk(str(log), {"offset": second["next_offset"], "inode": first["inode"]})
    assert third["reset"] is True and base64.b64decode(third["data_b64"]) == b"short\n"
    os.replace(str(tmp_path / "j1.log"), str(tmp_path / "old.log"))
    log.write_bytes(b"rotated\n" * 20000)  # a new file: new inode, reads from 0, capped
    fourth = read_log_chunk(str(log), {"offset": 3, "inode": first["inode"]})
    assert fourth["reset"] is True and fourth["offset"] == 0
    assert len(base64.b64decode(fourth["data_b64"])) == 64 * 1024


class _Session:
    def __init__(self) -> None:
        self.state: dict[str, Any] = {}


def test_collect_reports_queues_logs_and_checkpoints(tmp_path: Path) -> None:
    qdir = tmp_path / "queues" / "default"
    ckpt = tmp_path / "ckpt" / "default" / "j1"
    ckpt.mkdir(parents=True)
    (ckpt / "step-1.pt").write_bytes(b"1")
    (ckpt / "step-2.pt").write_bytes(b"22")
    os.utime(ckpt / "step-1.pt", (1, 1))
    _events(qdir,
            ("added", {"argv": ["train"], "cwd": "/"}),
            ("added", {"argv": ["eval"], "cwd": "/"}),
            ("launching", {"job": "j1", "attempt": 1, "boot_id": "B", "ckpt_dir": str(ckpt)}),
            ("started", {"job": "j1", "attempt": 1, "pid": 1, "pgid": 1, "boot_id": "B"}))
    (qdir / "logs").mkdir()
    (qdir / "logs" / "j1.log").write_bytes(b"epoch 1\n")
    (qdir / "logs" / "j2.log").write_bytes(b"old\n")
    session = _Session()
    doc = collect(session, {"queue_root": str(tmp_path),
                            "logs": {"default/j2": {"offset": 0, "inode": None}}})
    q = doc["queue"]["queues"]["default"]
    assert q["runner"]["alive"] is False and q["order"] == ["j2"]
    j1, j2 = q["jobs"]
    assert base64.b64decode(j1["log_chunk"]["data_b64"]) == b"epoch 1\n"
    assert j1["checkpoint"]["path"] == str(ckpt / "step-2.pt")
    assert j1["checkpoint"]["size"] == 2
    # A job with a cursor gets its bytes even when it is not running (its last lines).
    assert base64.b64decode(j2["log_chunk"]["data_b64"]) == b"old\n"
    assert "checkpoint" not in j2
    # The second call reuses the session's incremental reader.
    assert collect(session, {"queue_root": str(tmp_path)})["queue"]["queues"]["default"][
        "last_seq"] == 4


@pytest.mark.parametrize(("cli", "name", "retries", "argv"), [
    (["queue", "add", "box", "--name", "x", "--retries", "2", "--", "python", "-c", "pass"],
     "x", 2, ["python", "-c", "pass"]),
    (["queue", "add", "--name", "x", "box", "--", "python", "--lr", "3"],
     "x", 0, ["python", "--lr", "3"]),
    (["queue", "add", "box", "--", "torchrun", "--nproc", "2", "--", "t.py"],
     None, 0, ["torchrun", "--nproc", "2", "--", "t.py"]),
    (["queue", "add", "box", "python", "t.py", "--", "x"], None, 0, ["python", "t.py", "--", "x"]),
])
def test_queue_add_options_after_host_are_options(cli: list[str], name: str | None,
                                                  retries: int, argv: list[str]) -> None:
    from gpuroom.tui.cli.main import build_parser
    from gpuroom.tui.cli.queue import job_argv

    args = build_parser().parse_args(cli)
    assert job_argv(args) == argv
    assert (args.name, args.retries) == (name, retries)


@pytest.mark.attack("faults", "a wrongly typed event is skipped with a warning not raised")
def test_a_wrongly_typed_event_is_skipped_with_a_warning_not_raised(tmp_path: Path) -> None:
    # Issue 18 item 2: {"ev": "added", ..., "retries": "x"} made the fold raise, so queue ls
    # exited 1 and the runner died; a job on the box can write this file.
    events = _events(
        tmp_path,
        ("added", {"argv": ["a"], "cwd": "/"}),
        ("added", {"argv": ["b"], "cwd": "/", "retries": "x"}),
        ("reordered", {"job": "j1", "position": "first"}),
        ("added", {"argv": ["c"], "cwd": "/"}),
        ("rejected", {"job": "j1", "req": ["not", "hashable"]}),
    )
    state = fold(events)
    assert sorted(state["jobs"]) == ["j1", "j4"]
    assert state["order"] == ["j1", "j4"]  # the bad reorder moved nothing
    skipped = state["skipped_events"]
    assert len(skipped) == 3
    assert skipped[0].startswith("event seq 2 (added) skipped: ValueError: ")
    assert skipped[1].startswith("event seq 3 (reordered) skipped: ValueError: ")
    assert skipped[2].startswith("event seq 5 (rejected) skipped: TypeError: ")


def test_queue_ls_reports_the_skipped_event(tmp_path: Path) -> None:
    from gpuroom.remote.queue import queue_view

    qdir = Path(queue_dir(str(tmp_path), "default"))
    qdir.mkdir(parents=True)
    _events(qdir, ("added", {"argv": ["a"], "cwd": "/"}),
            ("added", {"argv": ["b"], "cwd": "/", "retries": "x"}))
    view = queue_view(str(tmp_path), "default")
    assert [j["id"] for j in view["jobs"]] == ["j1"]
    assert any(w.startswith("event seq 2 (added) skipped") for w in view["warnings"])


def test_queue_ls_prints_the_skipped_event(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from gpuroom.remote.queue import queue_view
    from gpuroom.tui.cli.queue import _print_jobs

    qdir = Path(queue_dir(str(tmp_path), "default"))
    qdir.mkdir(parents=True)
    _events(qdir, ("added", {"argv": ["a"], "cwd": "/"}),
            ("added", {"argv": ["b"], "cwd": "/", "retries": "x\x1b[2J"}))
    _print_jobs(queue_view(str(tmp_path), "default"))
    out = capsys.readouterr().out
    assert "warning: event seq 2 (added) skipped: ValueError" in out
    assert "\x1b[2J" not in out


def test_job_ids_count_jobs_not_events(tmp_path: Path) -> None:
    # Issue 17 item 16: an id was the seq of its `added` event, so each job's launching,
    # started and exited events made the ids jump j1 -> j5 -> j9.
    from gpuroom.remote.queue import add_job

    ids = []
    for n in range(3):
        doc = add_job(str(tmp_path), "default", {"argv": ["true"], "cwd": "/"}, start=False)
        assert doc["ok"] is True and doc["recorded"] is True
        ids.append(doc["job"])
        qdir = queue_dir(str(tmp_path), "default")
        _events(Path(qdir), ("launching", {"job": doc["job"], "attempt": 1}),
                ("started", {"job": doc["job"], "attempt": 1, "pid": 1}),
                ("exited", {"job": doc["job"], "attempt": 1, "exit_code": n}))
    assert ids == ["j1", "j2", "j3"]
    state = fold(read_events(queue_dir(str(tmp_path), "default"))[0])
    assert [(j["id"], j["state"]) for j in state["jobs"].values()] == [
        ("j1", "succeeded"), ("j2", "failed"), ("j3", "failed")]


def test_job_ids_go_on_after_a_queue_numbered_by_seq(tmp_path: Path) -> None:
    from gpuroom.remote.queue import add_job

    # A queue written before: ids were seqs (j1, j5); the next job must not reuse either.
    qdir = Path(queue_dir(str(tmp_path), "default"))
    qdir.mkdir(parents=True)
    _events(qdir, ("added", {"argv": ["a"]}), ("launching", {"job": "j1", "attempt": 1}),
            ("started", {"job": "j1", "attempt": 1}), ("exited", {"job": "j1", "attempt": 1}),
            ("added", {"argv": ["b"]}))
    doc = add_job(str(tmp_path), "default", {"argv": ["c"], "cwd": "/"}, start=False)
    assert doc["job"] == "j6"
    state = fold(read_events(str(qdir))[0])
    assert sorted(state["jobs"]) == ["j1", "j5", "j6"]


@pytest.mark.attack("faults", "a forged added event reusing an id is skipped")
def test_a_forged_added_event_reusing_an_id_is_skipped(tmp_path: Path) -> None:
    events = _events(tmp_path, ("added", {"argv": ["a"], "job": "j1"}),
                     ("added", {"argv": ["evil"], "job": "j1"}),
                     ("added", {"argv": ["b"], "job": "jx"}))
    state = fold(events)
    assert [j["argv"] for j in state["jobs"].values()] == [["a"]]
    assert [s.split(":")[0] for s in state["skipped_events"]] == [
        "event seq 2 (added) skipped", "event seq 3 (added) skipped"]


def test_exit_fields_are_an_int_and_a_signal_name_or_the_event_is_skipped(tmp_path: Path) -> None:
    from gpuroom.remote.queue_runner import signal_name

    # Issue 18 item 1: these fields carried OSC 52 to the terminal; a signal Python cannot
    # name (a real-time one) is its number, not a crash of the wrapper.
    assert (signal_name(9), signal_name(36)) == ("SIGKILL", "36")
    run = {"job": "j1", "attempt": 1}
    events = _events(
        tmp_path, ("added", {"argv": ["a"], "job": "j1"}), ("launching", run),
        ("started", {**run, "pid": 5}),
        ("exited", {**run, "exit_code": "\x1b]52;c;eA==\x07", "signal": None}),
        ("exited", {**run, "exit_code": None, "signal": "[b]SIG\x1b[2J"}),
        ("exited", {**run, "exit_code": True}),
        ("exited", {**run, "exit_code": None, "signal": "36"}))
    state = fold(events)
    assert [s.split(":")[0] for s in state["skipped_events"]] == [
        f"event seq {n} (exited) skipped" for n in (4, 5, 6)]
    [attempt] = state["jobs"]["j1"]["attempts"]
    assert (attempt["exit_code"], attempt["signal"], state["jobs"]["j1"]["state"]) == (
        None, "36", "failed")


def test_a_forged_huge_job_id_refuses_the_add_instead_of_adding_a_job_never_run(
        tmp_path: Path) -> None:
    from gpuroom.remote.queue import add_job

    qdir = Path(queue_dir(str(tmp_path), "default"))
    qdir.mkdir(parents=True)
    _events(qdir, ("added", {"argv": ["a"], "job": "j" + "9" * 18}))
    before = (qdir / "events.jsonl").read_bytes()
    with pytest.raises(ValueError, match="out of range; nothing was added"):
        add_job(str(tmp_path), "default", {"argv": ["b"], "cwd": "/"}, start=False)
    assert (qdir / "events.jsonl").read_bytes() == before
