"""A GCP preemptible VM is stopped 24 h after its start, idle or not (U45): a danger clock
from the box's uptime, for hosts.toml ``spot = "gcp-preemptible"`` only."""

from __future__ import annotations

import sys

from paths import DATA

sys.path.insert(0, str(DATA / "doctor"))
import parts as rec

from gpuroom.tui.rules.clock import host_clocks
from gpuroom.tui.snapshot import read_optional as view

T = rec.T0


def _cap(uptime_h: float, spot: str | None) -> list[tuple[str, str]]:
    snap = view(rec.snapshot(T, uptime_s=uptime_h * 3600))
    return [(c.severity, c.text) for c in host_clocks("g", snap, None, T, spot=spot)
            if c.kind == "preemptible_cap"]


def test_the_cap_counts_down_from_boot_and_escalates() -> None:
    ((sev, text),) = _cap(10, "gcp-preemptible")
    assert sev == "info" and "stopped 24 h after its start, in 14.0 h" in text
    assert _cap(23, "gcp-preemptible")[0][0] == "warn"  # an hour left
    assert _cap(23.8, "gcp-preemptible")[0][0] == "critical"


def test_a_spot_vm_or_an_ordinary_host_has_no_cap() -> None:
    assert _cap(23.8, "gcp") == []
    assert _cap(23.8, None) == []
