"""tui/rules/survival.py: a spot notice is critical in the boot that saw it, history after."""

from __future__ import annotations

from typing import Any

from gpuroom.tui.rules.survival import preempt_findings
from gpuroom.tui.snapshot import read_snapshot

NOTICE = {"cloud": "gcp", "action": "preempt", "at": 1030.0, "t": 1000.0, "boot_id": "b1",
          "signalled": 2}


def snap(boot: str, notice: dict[str, Any] | None) -> Any:
    return read_snapshot({"host": {"boot_id": boot},
                          "queue": {"queues": {"default": {"jobs": [], "preempt": notice}}}})


def test_a_notice_of_this_boot_is_critical_with_the_seconds_left() -> None:
    (finding,) = preempt_findings("spot1", snap("b1", NOTICE), now=1010.0)
    assert (finding.id, finding.severity) == ("U45", "critical")
    assert finding.title == "gcp preemption notice: the box goes in 20 s"
    assert "SIGUSR1 sent to 2 running job(s) of queue default" in finding.seen
    assert "gpuroom pull" in finding.fix


def test_no_notice_or_one_of_an_earlier_boot_says_nothing() -> None:
    assert preempt_findings("spot1", snap("b1", None), now=1010.0) == []
    assert preempt_findings("spot1", snap("b2", NOTICE), now=1010.0) == []


def test_a_hostile_cloud_name_reaches_the_finding_inert() -> None:
    evil = {**NOTICE, "cloud": "aws\x1b]52;c;ZXZpbA==\x07"}
    (finding,) = preempt_findings("spot1", snap("b1", evil), now=1010.0)
    assert "\x1b" not in finding.title and "\x07" not in finding.title
