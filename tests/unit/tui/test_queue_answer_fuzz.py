"""Property-based fuzzing of the queue's event documents and of the jump host's reading of
the queue's answers: a job on the box can append anything to events.jsonl (it runs as the
helper's user), so remote/queue_events.py parse_lines and fold take any bytes without raising
(an event that cannot apply is skipped with a warning), and whatever state they fold, read
back on the jump host (tui/snapshot.py read_queue_view, read_queue_spec, read_log_doc,
read_rundirs) and shown as queue rows, is inert text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from harness.hostile_docs import examples, hostile_values
from harness.hostile_text import terminal_controls
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_snapshot_fuzz import texts

from gpuroom.remote.queue_events import fold, parse_lines
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.present.jobdetail import detail_lines
from gpuroom.tui.present.jobs import job_rows
from gpuroom.tui.snapshot import (
    read_log_doc,
    read_queue_spec,
    read_queue_view,
    read_rundirs,
    with_jobs,
)

NOW = 1_795_294_600.0
KINDS = ("added", "configured", "preempt_notice", "launching", "started", "exited", "killed",
         "orphaned_by_reboot", "vanished", "unschedulable", "dependency_failed", "requeued",
         "removed", "reordered", "synced", "sync_failed", "kill_requested",
         "relaunch_requested", "remove_requested", "reorder_requested")
FIELDS = ("job", "argv", "name", "cwd", "env", "secrets", "gpus", "vram_mib", "retries",
          "outputs", "durable_dir", "after", "priority", "edited_from", "t", "attempt",
          "boot_id", "pid", "pgid", "exit_code", "signal", "why", "reason", "position",
          "front", "retry", "abandoned_attempt", "req", "reqs", "code", "ckpt_dir", "sync",
          "slots", "kill_grace_s", "durable_dir", "cloud", "action", "at", "dest", "files")

events = st.fixed_dictionaries(
    {"seq": st.integers(-2, 40), "ev": st.one_of(st.sampled_from(KINDS), hostile_values),
     "job": st.one_of(st.sampled_from(("j1", "j2", "j3")), hostile_values)},
    optional={name: hostile_values for name in FIELDS[1:]},
)


@st.composite
def event_files(draw: st.DrawFn) -> bytes:
    """An events.jsonl a job rewrote: good-looking events with hostile fields, and lines of
    garbage, torn JSON, deep nesting and non-objects between them."""
    lines = []
    for ev in draw(st.lists(events, max_size=25)):
        line = json.dumps(ev).encode()
        lines.append(draw(st.sampled_from((line, line[: len(line) // 2], b"[" * 5000, b"7",
                                           b"\xff\xfe", line))))
    return b"\n".join(lines)


@pytest.mark.attack("trust", "generated events.jsonl lines (hostile fields, wrong types, torn "
                    "and deeply nested lines) through the queue's fold and the jump host's "
                    "reading of the queue's answer")
@settings(max_examples=examples(80), deadline=None)
@given(data=event_files())
@example(data=b'{"seq": 1, "ev": "added", "job": "j1"}\n' + b"[" * 100_000)
def test_the_fold_and_the_queue_answer_take_any_events(data: bytes) -> None:
    evs, warnings = parse_lines(data)
    state = fold(evs)
    answer = json.loads(json.dumps({"queue": "default", "jobs": list(state["jobs"].values()),
                                    "warnings": warnings + state["skipped_events"]},
                                   default=str))
    view = read_queue_view(answer)
    host = HostState(name="box", state=LinkState.UP, snapshot={"queue": {"queues": {
        "default": answer}}}, last_ok=NOW, last_try=NOW)
    shown: list[Any] = [job_rows(host, NOW)]
    shown += [detail_lines(j, NOW) for j in view.jobs]
    assert [t for t in texts(shown) if terminal_controls(t)] == []
    assert with_jobs(host.view, view.jobs).jobs == host.view.jobs  # type: ignore[union-attr]


@settings(max_examples=examples(60), deadline=None)
@given(doc=hostile_values)
def test_every_queue_answer_reader_takes_any_document(doc: Any) -> None:
    for read in (read_queue_view, read_queue_spec, read_log_doc, read_rundirs):
        read(doc)
        read({"jobs": [doc], "scans": [doc], "data_b64": doc, "queue": doc})
