"""Regression: the GPU pane's throttle column from what the real helper writes.

The probe writes ``clock_event_reasons``; the pane read only ``clock_reasons`` and
``throttle_reasons`` (the spelling of the committed scenario files), so on a real box the
column was always "-" while the scenario snapshot tests stayed green. Here the real probe
(ProbeSession, every collector) runs with the NVML boundary replayed from two real
``nvidia-smi -q`` captures, and the pane's rows must show what those captures list as active.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import capture
from fakes.nvml import A10, RTX2080, FakeNvml

from gpuroom.remote import gpu
from gpuroom.remote.probe import ProbeSession
from gpuroom.tui.present.gpus import gpu_rows
from gpuroom.tui.snapshot import read_snapshot


def test_throttle_column_shows_the_active_reasons_of_a_real_probe(
        monkeypatch: pytest.MonkeyPatch, fixtures: Path) -> None:
    monkeypatch.setattr(gpu, "_load_nvml", lambda: (FakeNvml(), None))
    session = ProbeSession()
    try:
        snap = session.snapshot({})
    finally:
        session.close()
    assert [e["section"] for e in snap["errors"]] == []
    # The replay answers what each capture lists as Active (idle included: it costs nothing).
    for rel, reported in zip((A10, RTX2080), snap["gpus"], strict=True):
        (parsed,) = gpu.parse_clock_reasons(capture(rel))
        assert reported["clock_event_reasons"] == parsed["active"]
    a10, rtx = gpu_rows(read_snapshot(snap))
    assert a10.throttle == ("hw_slowdown", "hw_power_brake_slowdown")
    assert a10.throttle_short == "HwSlow,PwrBrake" and a10.level == "warn"
    assert rtx.throttle == ("sw_power_cap",)
    assert rtx.throttle_short == "SwPwrCap" and rtx.level == "warn"
