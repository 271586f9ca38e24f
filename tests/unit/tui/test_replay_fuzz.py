"""Property-based fuzzing of the recording reader (tui/fleet/replay.py load_recording): a
recording is a file anyone could have handed the user, its lines the box's words besides.
Whatever its lines hold, `gpuroom replay` gets records or a RecordingError naming the line,
never another exception."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from harness.hostile_docs import examples, hostile_snapshots, hostile_values
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuroom.tui.fleet.replay import RecordingError, ReplayFleet, load_recording

FIELDS = ("t", "host", "profile", "state", "error", "snapshot", "price_per_hour", "rented_at")
lines = st.fixed_dictionaries(
    {"t": st.one_of(st.floats(1e9, 2e9), hostile_values),
     "host": st.one_of(st.sampled_from(("h100-a", "[/]b")), hostile_values),
     "state": st.one_of(st.sampled_from(("up", "stale", "down")), hostile_values),
     "snapshot": st.one_of(hostile_snapshots(), hostile_values)},
    optional={k: hostile_values for k in FIELDS[4:] if k != "snapshot"},
)


@pytest.mark.attack("trust", "generated recordings (huge, non-finite and mistyped times, "
                    "hosts and states, hostile snapshots) through `gpuroom replay`'s reader")
@settings(max_examples=examples(40), deadline=None)
@given(docs=st.lists(lines, min_size=1, max_size=4))
@example(docs=[{"t": 10 ** 400, "host": "h", "state": "down", "snapshot": None}])
def test_a_recording_reads_or_is_refused_by_line(tmp_path_factory: pytest.TempPathFactory,
                                                 docs: list[dict[str, Any]]) -> None:
    path: Path = tmp_path_factory.mktemp("rec") / "r.jsonl"
    path.write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    try:
        records = load_recording(path)
    except RecordingError as exc:
        assert f"{path}:" in str(exc) or "no records" in str(exc)
        return
    ReplayFleet(records, speed=0)
