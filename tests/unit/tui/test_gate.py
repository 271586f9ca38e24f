"""The teardown gate's checklist (principle 9): safe only when every item holds."""

from __future__ import annotations

from typing import Any

from gpuroom.tui.rules.gate import evaluate
from gpuroom.tui.snapshot import Snapshot, read_snapshot

SHA_A, SHA_B = "a" * 64, "b" * 64


def snap(*states: str, helper: str = "h" * 64) -> Snapshot:
    jobs = [{"id": str(i + 1), "state": s} for i, s in enumerate(states)]
    return read_snapshot({"queue": {"queues": {"default": {"jobs": jobs,
                                                           "runner": {"alive": False}}}},
                          "helper": {"sha256": helper}})


def outputs() -> dict[str, list[dict[str, Any]] | None]:
    return {"1": [{"path": "model.pt", "kind": "file", "sha256": SHA_A},
                  {"path": "log.txt", "kind": "file", "sha256": SHA_B}],
            "2": []}


def record(verified_by: str = "load", sha: str = SHA_A) -> dict[str, Any]:
    return {"host": "box", "job": "1", "time": 1.0, "verified_by": verified_by,
            "files": [{"path": "model.pt", "sha256": sha, "verified_by": verified_by},
                      {"path": "log.txt", "sha256": SHA_B, "verified_by": "hash"}]}


def failing(result: Any) -> list[str]:
    return [i.name for i in result.items if not i.ok]


def test_safe_when_everything_holds() -> None:
    result = evaluate("box", snap("succeeded", "killed"), [record()], outputs(),
                      expected_helper_sha="h" * 64)
    assert result.safe and failing(result) == []


def test_running_job_or_no_snapshot_closes_the_gate() -> None:
    assert failing(evaluate("box", snap("succeeded", "running"), [record()], outputs())) == [
        "queue finished or stopped"]
    assert not evaluate("box", None, [record()], outputs()).safe


def test_unpulled_job_closes_the_gate() -> None:
    result = evaluate("box", snap("succeeded", "failed"), [], outputs())
    assert not result.safe and "every job's outputs pulled" in failing(result)
    unknown = evaluate("box", snap("succeeded"), [record()], {"1": None})
    assert "could not be listed" in unknown.items[1].detail and not unknown.safe


def test_file_changed_on_box_since_pull_closes_the_gate() -> None:
    result = evaluate("box", snap("succeeded"), [record(sha="c" * 64)], outputs())
    assert failing(result) == ["every pulled file hash-verified"]


def test_hash_only_checkpoint_is_home_and_said_not_load_verified() -> None:
    """An exact copy is home: the gate opens without torch on the jump host, and says what
    was not checked and the one command that adds the check."""
    result = evaluate("box", snap("succeeded"), [record(verified_by="hash")], outputs())
    assert result.safe and failing(result) == []
    detail = result.items[3].detail
    assert "hash-verified, not load-verified: 1/model.pt" in detail
    assert "pip install 'gpuroom[torch]'" in detail


def test_a_failed_load_check_is_said_and_does_not_close_the_gate() -> None:
    failed = record(verified_by="hash")
    failed["files"][0]["load_error"] = "load check refused: holds posix.system"
    result = evaluate("box", snap("succeeded"), [failed], outputs())
    assert result.safe
    assert "1/model.pt (load check refused: holds posix.system)" in result.items[3].detail
    assert "loaded" in evaluate("box", snap("succeeded"), [record()], outputs()).items[3].detail


def test_other_hosts_records_do_not_count_and_helper_drift_shows() -> None:
    other = {**record(), "host": "elsewhere"}
    assert not evaluate("box", snap("succeeded"), [other], outputs()).safe
    drift = evaluate("box", snap("succeeded", helper="x" * 64), [record()], outputs(),
                     expected_helper_sha="h" * 64)
    assert failing(drift) == ["deployed helper matches"]
