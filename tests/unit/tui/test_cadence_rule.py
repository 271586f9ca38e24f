"""Issue 19 item 7: the checkpoint cadence, on the Checkpointer's recorded save time (C) and
the box's MTBF, with spot-resilience section 2's worked example (C = 30 s, MTBF = 3 h: about
805 s, 400 iterations at 2 s each).

Snapshots are the committed recordings of the real helper (tests/data/doctor/parts.py); a
checkpoint's ``save_s`` is written by the helper since issue 19 (checked over sshd by
tests/system/test_snapshot_schema.py and by the Checkpointer test below), so it is set here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from paths import DATA

sys.path.insert(0, str(DATA / "doctor"))
import parts as rec

from gpuroom.profiles import load_profile
from gpuroom.remote.checkpoint import steps_between_checkpoints, young_daly_interval
from gpuroom.tui.model import LinkState
from gpuroom.tui.rules.doctor import diagnose
from gpuroom.tui.snapshot import read_optional as view

T = rec.T0
MTBF_3H = 3 * 3600.0
RUNPOD = load_profile("runpod")  # spot_available = true: a box that can vanish
GENERIC = load_profile("generic-ssh")


def _job(age_s: float | None, save_s: float | None = 30.0, ran_s: float = 7200.0
         ) -> dict[str, Any]:
    if age_s is None:
        j = rec.job(start=T - ran_s)
        j["checkpoint"] = None
        return j
    j = rec.job(start=T - ran_s, ckpt={"path": "/w/ckpt/ckpt-000000000400.pt", "size": 2.0,
                                       "mtime": T - age_s})
    j["checkpoint"]["save_s"] = save_s
    return j


def cadence(age_s: float | None, profile: Any = GENERIC, mtbf_s: float | None = MTBF_3H,
            **kw: Any) -> list[Any]:
    snap = rec.snapshot(T, gpus=[rec.h100(0)], jobs=[_job(age_s, **kw)])
    return [f for f in diagnose(None, view(snap), LinkState.UP, profile, T, host="h",
                                mtbf_s=mtbf_s) if f.id == "principle 8"]


def test_the_worked_example() -> None:
    assert young_daly_interval(MTBF_3H, 30.0) == pytest.approx(805, abs=0.5)
    assert steps_between_checkpoints(MTBF_3H, 30.0, 2.0) == 402  # rounded down from 402.5
    # A checkpoint 400 iterations (800 s) old is on time; 820 s old is late.
    assert cadence(800.0) == []
    (late,) = cadence(820.0)
    assert late.severity == "warn" and "13 min" in late.seen and "MTBF 3.0 h" in late.seen
    assert "save 30 s" in late.seen


def test_no_cadence_without_c_or_mtbf() -> None:
    assert cadence(3000.0, save_s=None) == []  # a job that saves without the Checkpointer
    assert cadence(3000.0, mtbf_s=None) == []  # generic box, no mtbf_hours: not a spot box


def test_an_hour_without_any_checkpoint_on_a_box_that_can_vanish() -> None:
    (none,) = cadence(None, profile=RUNPOD, mtbf_s=None)
    assert none.severity == "critical" and "no checkpoint after 2.0 h" in none.title
    assert cadence(None, profile=RUNPOD, mtbf_s=None, ran_s=1800.0) == []
    assert cadence(None, profile=GENERIC, mtbf_s=None) == []  # a box that stays


def test_hosts_toml_mtbf_hours_overrides_the_profile(tmp_path: Path) -> None:
    from gpuroom.tui.config import load

    path = tmp_path / "hosts.toml"
    path.write_text('[hosts.a]\nssh = "a"\nmtbf_hours = 3\n[hosts.b]\nssh = "b"\n'
                    'mtbf_hours = -1\n')
    hosts = load(path).hosts
    assert hosts["a"].mtbf_s == MTBF_3H and hosts["a"].error is None
    assert hosts["b"].error is not None and "mtbf_hours must be" in hosts["b"].error
