"""tui/rules/survival.py: a spot notice is critical in the boot that saw it, history after
(U45); checkpoints off the mounts that survive a stop are a warning (U46)."""

from __future__ import annotations

from typing import Any

from gpuroom.profiles import load_profile
from gpuroom.tui.rules.survival import ckpt_survival_findings, preempt_findings
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


def test_a_notice_long_past_its_time_with_the_box_up_is_over() -> None:
    # 1030 + 10 min: a box still answering then was not taken (resumed, or withdrawn).
    assert preempt_findings("spot1", snap("b1", NOTICE), now=1030.0 + 599) != []
    assert preempt_findings("spot1", snap("b1", NOTICE), now=1030.0 + 601) == []


def test_a_hostile_cloud_name_reaches_the_finding_inert() -> None:
    evil = {**NOTICE, "cloud": "aws\x1b]52;c;ZXZpbA==\x07"}
    (finding,) = preempt_findings("spot1", snap("b1", evil), now=1010.0)
    assert "\x1b" not in finding.title and "\x07" not in finding.title


# ----- U46: checkpoints on a disk a stop wipes


def running(ckpt_dir: str, state: str = "running") -> dict[str, Any]:
    return {"id": "j1", "state": state, "ckpt_dir": ckpt_dir}


def on_box(jobs: list[dict[str, Any]], disks: list[dict[str, Any]] | None = None) -> Any:
    return read_snapshot({"disks": disks or [],
                          "queue": {"queues": {"default": {"jobs": jobs}}}})


def test_runpod_checkpoints_on_the_container_disk_are_a_warning() -> None:
    runpod = load_profile("runpod")
    (finding,) = ckpt_survival_findings(
        "pod", on_box([running("/root/.gpuroom/ckpt/default/j1")]), runpod)
    assert (finding.id, finding.severity) == ("U46", "warn")
    assert "/root/.gpuroom/ckpt/default/j1 is under none of /workspace" in finding.seen
    assert "--durable-dir /workspace/runs" in finding.fix


def test_checkpoints_under_the_surviving_mount_or_no_claim_say_nothing() -> None:
    runpod = load_profile("runpod")
    assert ckpt_survival_findings(
        "pod", on_box([running("/workspace/runs/ckpt/default/j1")]), runpod) == []
    assert ckpt_survival_findings(  # a finished job's checkpoints are the pull's business
        "pod", on_box([running("/root/x", "succeeded")]), runpod) == []
    assert ckpt_survival_findings(  # generic box: its disk survives a stop
        "box", on_box([running("/root/x")]), load_profile("generic-ssh")) == []
    assert ckpt_survival_findings(  # Slurm's $HOME is not resolved by the probe: no claim
        "hpc", on_box([running("/tmp/x")]), load_profile("slurm")) == []
    assert ckpt_survival_findings("box", on_box([running("/root/x")]), None) == []


def test_a_home_relative_mount_is_matched_as_the_probe_resolved_it() -> None:
    autodl = load_profile("autodl")  # /root survives a stop there
    assert ckpt_survival_findings("a", on_box([running("/root/.gpuroom/ckpt/j1")]), autodl) == []
    assert len(ckpt_survival_findings("a", on_box([running("/tmp/ckpt/j1")]), autodl)) == 1
