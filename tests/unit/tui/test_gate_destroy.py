"""Principle 4 at the teardown gate: a destroy wipes the disks that survive only a stop
(RunPod's /workspace volume disk); a job's unpulled checkpoints there are named."""

from __future__ import annotations

from typing import Any

from gpuroom.profiles import load_profile
from gpuroom.tui.rules.gate import evaluate
from gpuroom.tui.rules.survival import WipedMount, destroy_wiped_mounts, teardown_destroys
from gpuroom.tui.snapshot import Snapshot, read_snapshot

SHA = "a" * 64
WORKSPACE = WipedMount("/workspace", "/workspace", True)
PULLED = "every job's outputs pulled"


def snap(ckpt_dir: str) -> Snapshot:
    return read_snapshot({"queue": {"queues": {"default": {"jobs": [
        {"id": "j1", "state": "succeeded", "ckpt_dir": ckpt_dir}]}}}})


def outputs() -> dict[str, list[dict[str, Any]] | None]:
    return {"j1": [{"path": "step_400.pt", "kind": "file", "sha256": SHA}]}


def record(sha: str = SHA) -> dict[str, Any]:
    return {"host": "pod", "job": "j1", "time": 1.0, "verified_by": "load",
            "files": [{"path": "step_400.pt", "sha256": sha, "verified_by": "load"}]}


def item(result: Any) -> Any:
    return next(i for i in result.items if i.name == PULLED)


def test_a_stop_keeps_the_volume_and_any_other_teardown_counts_as_a_destroy() -> None:
    assert teardown_destroys(["runpodctl", "stop", "pod", "abc"]) is False
    assert teardown_destroys(["runpodctl", "remove", "pod", "abc"]) is True
    assert teardown_destroys(["./my-teardown.sh"]) is True  # unknown: at risk
    assert teardown_destroys(None) is True


def test_runpods_volume_disk_is_the_known_mount_a_destroy_wipes() -> None:
    mounts = destroy_wiped_mounts(load_profile("runpod"), None)
    assert mounts == [WORKSPACE]  # the "unknown" container disk and volume: no claim


def test_unpulled_checkpoints_on_a_mount_a_destroy_wipes_are_named() -> None:
    result = evaluate("pod", snap("/workspace/runs/j1"), [], outputs(), wiped=[WORKSPACE])
    got = item(result)
    assert not got.ok and not result.safe
    assert ("the teardown destroys /workspace/runs/j1 of j1 (on /workspace, which survives a "
            "stop, not a destroy)") in got.detail


def test_written_since_the_pull_is_named_too() -> None:
    result = evaluate("pod", snap("/workspace/runs/j1"), [record("c" * 64)], outputs(),
                      wiped=[WORKSPACE])
    assert not item(result).ok and "the teardown destroys /workspace/runs/j1" in item(result).detail


def test_pulled_elsewhere_or_a_stop_says_nothing_of_a_destroy() -> None:
    home = evaluate("pod", snap("/workspace/runs/j1"), [record()], outputs(), wiped=[WORKSPACE])
    assert item(home).ok and "destroys" not in item(home).detail
    other = evaluate("pod", snap("/network/runs/j1"), [], outputs(), wiped=[WORKSPACE])
    assert "destroys" not in item(other).detail  # not pulled, said as before, no destroy claim
    stop = evaluate("pod", snap("/workspace/runs/j1"), [], outputs(), wiped=())
    assert "destroys" not in item(stop).detail
