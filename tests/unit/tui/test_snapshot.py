"""tui/snapshot.py: the one reader of the helper's snapshot (issue 16, item 1)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from paths import DATA, ROOT

from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.snapshot import (
    Snapshot,
    integer,
    number,
    read_optional,
    read_queue_view,
    read_snapshot,
    schema_keys,
    text,
)

PROBE: dict[str, Any] = json.loads((DATA / "probe-vm.json").read_text())
SLURM_LINES = [json.loads(raw) for raw in (DATA / "slurm" / "session.jsonl").read_text()
               .splitlines()]


# ------------------------------------------------------------------ the number rule


@pytest.mark.parametrize(("value", "expected"), [
    (3, 3.0), (2.5, 2.5), (0, 0.0), ("55.5", 55.5), (" 7 ", 7.0),
    (True, None), (False, None), (None, None), ("[N/A]", None), ("", None),
    (float("nan"), None), (float("inf"), None), ("inf", None), ([1], None), ({"a": 1}, None),
    (10 ** 400, None),  # json reads an integer of any length; float() of it overflows
])
def test_one_number_rule(value: Any, expected: float | None) -> None:
    assert number(value) == expected
    assert integer(value) == (None if expected is None else int(expected))


def test_text_takes_strings_and_numbers_never_bools_or_containers() -> None:
    assert [text(v) for v in ("a", 7, 1.5, True, None, [1], {})] == [
        "a", "7", "1.5", None, None, None, None]


# ------------------------------------------------------------------ never raises


def _leaves(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(doc, dict):
        return [p for k, v in doc.items() for p in _leaves(v, (*path, k))] or [path]
    if isinstance(doc, list):
        return [p for i, v in enumerate(doc) for p in _leaves(v, (*path, i))] or [path]
    return [path]


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    doc = copy.deepcopy(doc)
    if not path:
        return value
    target = doc
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return doc


WRONG = (None, True, "x", -1, 1e308, float("nan"), [], {}, [None], {"k": None})


@pytest.mark.attack(
    "bad answers",
    "every leaf of a real snapshot replaced by a wrong type: read without a crash")
def test_every_leaf_of_a_real_probe_and_a_slurm_poll_may_be_wrong() -> None:
    docs = [PROBE, SLURM_LINES[len(SLURM_LINES) // 2]["snapshot"]]
    checked = 0
    for doc in docs:
        for path in _leaves(doc):
            for wrong in WRONG:
                read_snapshot(_set(doc, path, wrong))
                checked += 1
    assert checked > 1000
    for top in (None, 1, "x", [], [1, 2]):
        snap = read_snapshot(top)
        assert snap.jobs == () and snap.gpus == () and snap.host.time is None


@pytest.mark.attack("bad answers", "a wrongly typed field reads as empty, not as a guessed value")
def test_a_wrong_type_reads_as_empty_not_as_a_guess() -> None:
    raw = copy.deepcopy(PROBE)
    raw["host"]["time"] = "later"
    raw["host"]["cpu_count"] = True
    raw["disks"] = {"not": "a list"}
    snap = read_snapshot(raw)
    assert snap.host.time is None and snap.host.cpu_count is None and snap.disks == ()
    assert snap.host.hostname == PROBE["host"]["hostname"]


# ------------------------------------------------------------------ what it reads


def test_a_real_slurm_poll_reads_jobs_attempts_and_runs() -> None:
    raw = SLURM_LINES[-1]["snapshot"]
    snap = read_snapshot(raw)
    by_name = {j.name: j for j in snap.jobs}
    stale = by_name["stale"]
    raw_stale = next(j for j in raw["queue"]["queues"]["default"]["jobs"]
                     if j["name"] == "stale")
    assert stale.key == f"default/{raw_stale['id']}"
    assert (stale.state, stale.slurm_state, stale.is_slurm) == ("failed", "TIMEOUT", True)
    assert stale.last_attempt is not None and stale.last_attempt is stale.attempts[-1]
    assert stale.runs[-1].warned and not stale.runs[-1].requeue  # the script writes 1 / 0
    assert stale.time_limit_s == raw_stale["time_limit_s"]
    assert dict(snap.iter_jobs())[stale.key] is stale
    assert snap.job(raw_stale["id"]) is stale and snap.job("nope") is None


def test_old_spellings_and_shapes_map_to_the_current_ones() -> None:
    old = {"gpus": {"devices": [{"index": 1, "clock_reasons": ["sw_power_cap"],
                                 "util_gpu": "40"}], "reason": "partial"},
           "queue": [{"job_id": 7, "status": "failed", "returncode": "1", "command": "a b",
                      "log": {"data_b64": "aGk="}}]}
    snap = read_snapshot(old)
    (gpu,) = snap.gpus
    assert (gpu.index, gpu.clock_event_reasons, gpu.util_gpu_pct) == (1, ("sw_power_cap",), 40)
    assert snap.gpu_error == "partial"
    (job,) = snap.jobs
    assert (job.key, job.state, job.exit_code, job.command) == ("default/7", "failed", 1, "a b")
    assert job.log_chunk is not None and job.log_chunk.data == b"hi"
    pre535 = read_snapshot({"gpus": [{"throttle_reasons": {"HW Slowdown": True, "Idle": False}}]})
    assert pre535.gpus[0].clock_event_reasons == ("hw_slowdown",)
    # The current key wins over an old spelling when both are there.
    both = read_snapshot({"gpus": [{"clock_event_reasons": ["idle"], "clock_reasons": ["x"]}]})
    assert both.gpus[0].clock_event_reasons == ("idle",)


def test_a_job_without_an_id_is_not_read() -> None:
    snap = read_snapshot({"queue": {"queues": {"q": {"jobs": [{"state": "running"}, 3,
                                                             {"id": "j1"}]}}}})
    assert [j.key for j in snap.jobs] == ["q/j1"]


def test_the_schema_keys_are_unique_and_name_the_probe_fields() -> None:
    paths = [p for p, _ in schema_keys(Snapshot)]
    assert len(paths) == len(set(paths))
    assert "gpus[].clock_event_reasons" in paths
    assert "queue.queues{}.jobs[].log_chunk.next_offset" in paths
    assert "queue.queues{}.jobs[].attempts[].runs[].warned" in paths


# ------------------------------------------------------------------ parsed once


def test_host_state_parses_each_snapshot_once() -> None:
    h = HostState("box", state=LinkState.UP, snapshot=PROBE)
    first = h.view
    assert first is not None and h.view is first
    h.snapshot = copy.deepcopy(PROBE)
    assert h.view is not first and h.view == first
    h.snapshot = None
    assert h.view is None and read_optional(None) is None


# ------------------------------------------------------------------ `queue ls --json`


def test_queue_ls_json_of_the_real_helper_reads_as_the_same_job_view(tmp_path: Path) -> None:
    env = {**os.environ, "GPUROOM_HOME": str(tmp_path)}

    def helper(*args: str) -> dict[str, Any]:
        done = subprocess.run([sys.executable, "-m", "gpuroom.remote", "queue", *args],
                              env=env, capture_output=True, text=True, timeout=60, check=True)
        doc: dict[str, Any] = json.loads(done.stdout)
        return doc

    added = helper("add", "--no-start", "--name", "train", "--vram-mib", "512", "--",
                   "python", "-c", "print('a b')")
    view = read_queue_view(helper("ls", "--json"))
    (job,) = view.jobs
    assert (view.name, job.id, job.key) == ("default", added["job"], f"default/{added['job']}")
    assert (job.name, job.state, job.vram_mib) == ("train", "queued", 512)
    assert job.command == "python -c 'print('\"'\"'a b'\"'\"')'"


# ------------------------------------------------------------------ layering


def test_rules_and_present_load_no_transport() -> None:
    """The doctor imported the fleet, which imports the SSH link: loading a pure rule loaded
    asyncssh. Checked in a fresh interpreter, where nothing else has imported it yet."""
    code = (
        "import sys\n"
        "import gpuroom.tui.snapshot, gpuroom.tui.rules.doctor, gpuroom.tui.rules.clock\n"
        "import gpuroom.tui.rules.gate, gpuroom.tui.rules.watch, gpuroom.tui.present.jobs\n"
        "bad = sorted(m for m in sys.modules if m == 'asyncssh' or\n"
        "             m.startswith(('gpuroom.tui.fleet', 'gpuroom.tui.transport')))\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True, cwd=ROOT)
    assert done.stdout.strip() == ""


@pytest.mark.attack("bad answers", "NaN where a number belongs: no number")
def test_nan_in_a_recording_is_no_number() -> None:
    # json.loads accepts NaN; a pane must not draw "nan%".
    snap = read_snapshot(json.loads('{"gpus": [{"power_w": NaN, "temp_c": Infinity}]}'))
    assert snap.gpus[0].power_w is None and snap.gpus[0].temp_c is None
