"""Property-based fuzzing of the one snapshot reader (tui/snapshot.py) and every presenter of
tui/present/ with what a lying box can answer (tests/harness/hostile_docs.py): the reader
never raises but the documented ValueError of ``load_answer``, no presenter raises, and no
text meant for a terminal carries an escape, a C1 control or a bidi override."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from harness.hostile_docs import examples, hostile_snapshots, raw_answers
from harness.hostile_text import terminal_controls
from hypothesis import given, settings

from gpuroom.tui.model import HostState, LinkState, PendingAction
from gpuroom.tui.present.banner import banner_line, failed_job_dangers, fleet_dangers
from gpuroom.tui.present.box import BoxHistory
from gpuroom.tui.present.detail import host_detail, job_detail
from gpuroom.tui.present.disks import disk_rows
from gpuroom.tui.present.gpus import gpu_absence, gpu_processes, gpu_rows, gpu_summary
from gpuroom.tui.present.hosts import failed_sections_text, host_row, link_problem
from gpuroom.tui.present.jobdetail import detail_lines, detail_title
from gpuroom.tui.present.jobs import job_rows, running_job, still_pending
from gpuroom.tui.present.log import chunk_of, log_chunk
from gpuroom.tui.present.slurm import expected_start_text, slurm_summary, task_summary
from gpuroom.tui.snapshot import load_answer, read_snapshot, snapshot_problems

NOW = 1_795_294_600.0
FUZZ = settings(max_examples=examples(60), deadline=None)


def texts(obj: Any, depth: int = 0) -> Iterator[str]:
    """Every string inside what a presenter returned (rows, views, tuples of them)."""
    if depth > 20:
        return
    if isinstance(obj, str):
        yield obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from texts(getattr(obj, f.name), depth + 1)
    elif isinstance(obj, list | tuple | set | frozenset):
        for item in obj:
            yield from texts(item, depth + 1)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from texts(k, depth + 1)
            yield from texts(v, depth + 1)


def host_of(doc: dict[str, Any], state: LinkState = LinkState.UP) -> HostState:
    return HostState(name="box", state=state, snapshot=doc, last_ok=NOW - 5, last_try=NOW - 5,
                     error="[/]\x1b]52;c;eA==\x07 refused" if state is not LinkState.UP
                     else None, price_per_hour=2.5,
                     pending=[PendingAction("kill", "j1", NOW),
                              PendingAction("add", None, NOW, "[/]")])


def presented(h: HostState) -> list[Any]:
    """What every presenter makes of the host: the panes, `i`, the job detail, the banner."""
    snap = h.view
    history = BoxHistory()
    history.observe(h.name, snap)
    history.observe(h.name, snap)
    box = history.view(h.name, snap)
    rows = job_rows(h, NOW)
    gpus = gpu_rows(snap)
    out: list[Any] = [
        rows, gpus, gpu_summary(gpus), gpu_absence(snap), gpu_processes(snap), disk_rows(snap),
        host_row(h, NOW, findings=("critical", "warn"), box=box), box.parts(), box.cell(),
        box.sparklines(), host_detail(h, NOW), link_problem(h, NOW), failed_sections_text(snap),
        running_job(snap), [job_detail(h, r) for r in rows],
        fleet_dangers(["CRITICAL box: [/]"], failed_job_dangers([h], NOW, [])),
        still_pending(PendingAction("kill", "j1", NOW), h.snapshot),
    ]
    for job in snap.jobs if snap is not None else ():
        out += [detail_title(job), detail_lines(job, NOW, "moved [/]"), slurm_summary(job),
                expected_start_text(job, NOW), [task_summary(t) for t in job.tasks]]
        # The log's bytes are keyed by the raw id and made display lines by the pane's
        # LineSplitter (tui/sanitize.py): read here, not checked as display text.
        for chunk in (log_chunk(snap, job.id), chunk_of(job.id, job.log_chunk)):
            assert chunk is None or isinstance(chunk.data, bytes)
    out += [banner_line(t, 40) for t in texts(out)][:50]
    return out


@pytest.mark.attack("trust", "generated hostile snapshots (markup, escapes, paths, huge, "
                    "negative and non-finite numbers, wrong types, deep nesting, duplicate "
                    "keys) through the snapshot reader and every presenter")
@FUZZ
@given(raw=raw_answers())
def test_the_reader_and_every_presenter_take_any_answer(raw: str) -> None:
    try:
        doc = load_answer(raw)
    except ValueError:
        return  # the reader's contract: an answer it cannot parse is refused, said so
    json.dumps(doc, allow_nan=False)  # what status --json and probe print back is JSON
    snapshot_problems(doc, 1)
    snap = read_snapshot(doc)
    assert snap is not None
    for state in (LinkState.UP, LinkState.STALE):
        shown = presented(host_of(doc if isinstance(doc, dict) else {}, state))
        bad = {(n, t[:80]) for n, part in enumerate(shown) for t in texts(part)
               if terminal_controls(t)}
        assert not bad  # (which output of presented(), the text)


@FUZZ
@given(doc=hostile_snapshots())
def test_box_history_takes_any_pair_of_snapshots(doc: dict[str, Any]) -> None:
    history = BoxHistory()
    for d in (doc, {**doc, "host": {"time": NOW}}, doc):
        snap = read_snapshot(d)
        history.observe("box", snap)
        view = history.view("box", snap)
        assert not terminal_controls(" ".join((*view.parts(), view.cell(), *view.sparklines())))
