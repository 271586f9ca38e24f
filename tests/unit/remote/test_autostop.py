"""The box's autostop watchdog (remote/autostop.py): armed only with the user's own argv,
a destroying verb refused without --allow-destroy, and a decision that fires only when the
box has done nothing for the armed time, in the boot it was armed in, with nothing at risk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuroom.remote import autostop

NOW = 1_800_000_000.0
BOOT = "b0b0b0b0-0000-4000-8000-000000000000"


def _cfg(**over: Any) -> dict[str, Any]:
    cfg = {"idle_s": 2700.0, "argv": ["runpodctl", "stop", "pod", "abc"],
           "armed_at": NOW - 3 * 3600, "boot_id": BOOT, "postponed_until": None}
    cfg.update(over)
    return cfg


def _doc(idle_since: float | None = NOW - 3600, jobs: list[dict[str, Any]] = (),  # type: ignore[assignment]
         boot: str = BOOT, busy: str | None = None) -> dict[str, Any]:
    return {"host": {"boot_id": boot},
            "idle": {"idle_since": idle_since, "now": NOW, "busy": busy, "basis": "job_end"},
            "queue": {"queues": {"default": {"jobs": list(jobs)}}}}


@pytest.mark.parametrize("argv", [
    ["runpodctl", "remove", "pod", "abc"], ["vastai", "destroy", "instance", "7"],
    ["aws", "ec2", "terminate-instances", "--instance-ids", "i-1"],
    ["gcloud", "compute", "instances", "delete", "vm"], ["/usr/local/bin/runpodctl", "terminate"]])
@pytest.mark.attack("bad configuration", "autostop armed with a verb that destroys the box")
def test_a_destroying_verb_is_refused_without_allow_destroy(tmp_path: Path,
                                                             argv: list[str]) -> None:
    with pytest.raises(autostop.Refused) as info:
        autostop.arm(str(tmp_path), 2700.0, argv, allow_destroy=False, by="test")
    assert "--allow-destroy" in str(info.value)
    assert not (tmp_path / autostop.CONFIG_FILE).exists()
    armed = autostop.arm(str(tmp_path), 2700.0, argv, allow_destroy=True, by="test")
    assert armed["argv"] == argv and armed["allow_destroy"] is True


def test_a_stop_verb_is_armed_and_recorded_with_who_armed_it(tmp_path: Path) -> None:
    argv = ["sudo", "shutdown", "-h", "now"]
    autostop.arm(str(tmp_path), 60.0, argv, allow_destroy=False, by="alice@laptop")
    cfg = json.loads((tmp_path / autostop.CONFIG_FILE).read_text())
    assert cfg["argv"] == argv and cfg["idle_s"] == 60.0
    assert (tmp_path / autostop.CONFIG_FILE).stat().st_mode & 0o777 == 0o600
    events = [json.loads(line) for line in (tmp_path / autostop.EVENTS_FILE).read_text()
              .splitlines()]
    assert events[-1]["ev"] == "armed" and events[-1]["by"] == "alice@laptop"


def test_an_empty_or_shell_string_command_is_refused(tmp_path: Path) -> None:
    with pytest.raises(autostop.Refused):
        autostop.arm(str(tmp_path), 60.0, [], allow_destroy=False, by="t")
    with pytest.raises(autostop.Refused):
        autostop.arm(str(tmp_path), 0.0, ["shutdown"], allow_destroy=False, by="t")


def test_fires_only_after_the_idle_time_counted_from_arming_or_idle() -> None:
    assert autostop.decide(_cfg(), _doc(), NOW) == (True, "idle 1.0 h of 0.8 h")
    fire, why = autostop.decide(_cfg(), _doc(idle_since=NOW - 600), NOW)
    assert not fire and "idle 0.2 h of 0.8 h" in why
    # Armed after the box went idle: the armed time counts from the arming.
    assert not autostop.decide(_cfg(armed_at=NOW - 60), _doc(), NOW)[0]


@pytest.mark.parametrize(("doc", "reason"), [
    (_doc(jobs=[{"id": "j1", "state": "queued"}]), "queued or running"),
    (_doc(jobs=[{"id": "j1", "state": "running"}], idle_since=None, busy="job"),
     "queued or running"),
    (_doc(idle_since=None, busy="foreign"), "foreign"),
    (_doc(boot="another-boot"), "rebooted"),
    (_doc(jobs=[{"id": "j1", "state": "succeeded", "outputs": ["*.pt"],
                 "sync": {"state": "pending"}}]), "not synced"),
    (_doc(jobs=[{"id": "j1", "state": "succeeded", "outputs": ["*.pt"]}]), "not synced"),
])
def test_it_never_fires_while_work_or_unsynced_outputs_remain(doc: dict[str, Any],
                                                              reason: str) -> None:
    fire, why = autostop.decide(_cfg(), doc, NOW)
    assert not fire and reason in why


def test_a_postponed_or_disarmed_watchdog_does_not_fire(tmp_path: Path) -> None:
    assert not autostop.decide(_cfg(postponed_until=NOW + 60), _doc(), NOW)[0]
    autostop.arm(str(tmp_path), 60.0, ["shutdown"], allow_destroy=False, by="t")
    autostop.disarm(str(tmp_path), by="t")
    assert autostop.load(str(tmp_path)) is None
