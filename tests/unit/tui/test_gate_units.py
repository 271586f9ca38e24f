"""tui/rules/gate.py's per-job item for the program's own checkpoints and --output files:
each named with "home" or "NOT home"; nothing seen, a unit still being written, a cut search
and an output synced only onto a mount the teardown wipes are never counted as safe."""

from __future__ import annotations

from typing import Any

from gpuroom.tui.rules.gate import JobUnits, evaluate, units_key

ITEM = "every job's checkpoints and outputs home (declared, discovered or gpuroom's)"
SHA = "ab" * 32


def _entry(path: str) -> dict[str, Any]:
    return {"path": path, "kind": "file", "size": 3, "sha256": SHA}


def _record(*paths: str, job: str = "j1") -> dict[str, Any]:
    return {"host": "h", "job": units_key(job), "dir": "/w", "time": 100.0,
            "files": [{"path": p, "size": 3, "sha256": SHA, "verified_by": "hash"}
                      for p in paths]}


def _item(units: dict[str, JobUnits], records: list[dict[str, Any]],
          own: dict[str, list[dict[str, Any]] | None] | None = None) -> Any:
    result = evaluate("h", None, records, own or {}, units=units)
    return next(i for i in result.items if i.name == ITEM)


HF = JobUnits("discovered", (("checkpoint-10", 10, ("checkpoint-10/a", "checkpoint-10/b")),),
              (), [_entry("checkpoint-10/a"), _entry("checkpoint-10/b")])


def test_a_dir_unit_is_home_only_when_every_file_is() -> None:
    item = _item({"j1": HF}, [_record("checkpoint-10/a")])
    assert not item.ok and "checkpoint-10 (discovered, step 10) NOT home" in item.detail
    item = _item({"j1": HF}, [_record("checkpoint-10/a", "checkpoint-10/b")])
    assert item.ok and "checkpoint-10 (discovered, step 10) home" in item.detail


def test_nothing_seen_is_said_and_not_safe_unless_gpuroom_has_its_files() -> None:
    empty = JobUnits("discovered", (), (), [])
    item = _item({"j2": empty}, [])
    assert not item.ok and "j2: no checkpoint seen" in item.detail
    item = _item({"j2": empty}, [], {"j2": [_entry("ckpt-1.pt")]})
    assert item.ok and "gpuroom's" in item.detail


def test_still_being_written_or_a_cut_search_is_not_safe() -> None:
    writing = JobUnits("discovered", HF.units, (), HF.entries, writing=("checkpoint-20",))
    item = _item({"j1": writing}, [_record("checkpoint-10/a", "checkpoint-10/b")])
    assert not item.ok and "checkpoint-20 still being written" in item.detail
    cut = JobUnits("discovered", HF.units, (), HF.entries, cut="the walk ran out of time")
    assert not _item({"j1": cut}, [_record("checkpoint-10/a", "checkpoint-10/b")]).ok


def test_an_output_synced_onto_a_wiped_mount_is_not_home_until_pulled() -> None:
    wiped = JobUnits("discovered", (), ("model.bin",), [_entry("model.bin")], outputs_kept=False)
    item = _item({"j1": wiped}, [])
    assert not item.ok and "--output model.bin NOT home" in item.detail
    assert _item({"j1": wiped}, [_record("model.bin")]).ok
    kept = JobUnits("discovered", (), ("model.bin",), [_entry("model.bin")], outputs_kept=True)
    assert _item({"j1": kept}, []).ok


def test_units_that_could_not_be_listed_are_not_safe() -> None:
    item = _item({"j1": JobUnits("declared", HF.units, (), None)}, [])
    assert not item.ok and "could not be listed" in item.detail
