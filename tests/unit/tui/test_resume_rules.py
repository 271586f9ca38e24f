"""A new attempt that restarts below the previous attempt's newest checkpoint (the nanoGPT
relaunch that overwrote iter 2800 with iter 1800): a warning naming both steps."""

from __future__ import annotations

import copy
import sys
from typing import Any

from paths import DATA

sys.path.insert(0, str(DATA / "doctor"))
import parts as rec

from gpuroom.tui.model import LinkState
from gpuroom.tui.rules.doctor import diagnose
from gpuroom.tui.snapshot import read_optional as view

T = rec.T0
CKPT_DIR = "/tmp/gpuroom-data/link-drop/gpuroom/ckpt/default/j1"


def _ckpt(step: int, mtime: float) -> dict[str, Any]:
    return {"path": f"{CKPT_DIR}/ckpt-{step:012d}.pt", "size": 1 << 20, "mtime": mtime}


def _second_attempt(first_newest: dict[str, Any] | None, now: dict[str, Any]) -> dict[str, Any]:
    """Attempt 1 ended with ``first_newest`` as its newest checkpoint (the runner records it
    at the attempt's end); attempt 2 runs since T - 100 and its newest is ``now``."""
    j = rec.job(ckpt=now)
    first = j["attempts"][-1]
    for key in rec.ATTEMPT_END_KEYS:
        first.setdefault(key, None)
    rec.vary(first, end=T - 120, exit_code=None, signal="SIGKILL", end_reason="exited")
    first["checkpoint"] = first_newest
    second = copy.deepcopy(first)
    rec.vary(second, attempt=2, start=T - 100, end=None, signal=None, end_reason=None,
             pid=first["pid"] + 7, checkpoint=None)
    j["attempts"].append(second)
    return j


def _restarts(job: dict[str, Any]) -> list[Any]:
    snap = rec.snapshot(T, gpus=[rec.h100(0)], jobs=[job])
    return [f for f in diagnose(view(snap), view(snap), LinkState.UP, None, T, host="h")
            if f.id == "principle 8" and "restarted" in f.title]


def test_an_attempt_that_restarts_below_the_previous_newest_step_is_a_warning() -> None:
    (found,) = _restarts(_second_attempt(_ckpt(2800, T - 130), _ckpt(1800, T - 10)))
    assert found.severity == "warn"
    assert "attempt 2 restarted below attempt 1" in found.title
    assert "step 1800" in found.seen and "step 2800" in found.seen
    assert "ckpt-000000002800.pt" in found.seen


def test_a_resume_at_or_above_the_previous_step_is_quiet() -> None:
    assert _restarts(_second_attempt(_ckpt(2800, T - 130), _ckpt(3000, T - 10))) == []
    # The newest checkpoint is still attempt 1's own: attempt 2 has written none yet.
    assert _restarts(_second_attempt(_ckpt(2800, T - 130), _ckpt(2800, T - 130))) == []
    # Nothing recorded of attempt 1, or a name without a step: nothing to compare.
    assert _restarts(_second_attempt(None, _ckpt(1800, T - 10))) == []
    unnamed = dict(_ckpt(1800, T - 10), path=f"{CKPT_DIR}/ckpt.pt")
    assert _restarts(_second_attempt(_ckpt(2800, T - 130), unnamed)) == []
