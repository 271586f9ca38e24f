"""Since when the box has done no work, as the helper answers it from its own records and
its own clock (remote/idle.py): the first poll after a night already knows the night."""

from __future__ import annotations

from typing import Any

from gpuroom.remote import idle
from gpuroom.remote.probe import ProbeSession

NOW = 1_800_000_000.0
HOUR = 3600.0


def _doc(jobs: list[dict[str, Any]] = (), gpus: list[dict[str, Any]] = (),  # type: ignore[assignment]
         uptime: float = 30 * 24 * HOUR) -> dict[str, Any]:
    return {"host": {"uptime_s": uptime, "time": NOW},
            "gpus": list(gpus),
            "queue": {"queues": {"default": {"jobs": list(jobs)}}}}


def _ended(jid: str, end: float, state: str = "succeeded") -> dict[str, Any]:
    return {"id": jid, "state": state,
            "attempts": [{"attempt": 1, "pid": 100, "start": end - 60, "end": end}]}


def _running(jid: str, pid: int) -> dict[str, Any]:
    return {"id": jid, "state": "running",
            "attempts": [{"attempt": 1, "pid": pid, "start": NOW - 60, "end": None}]}


IDLE_GPU = {"index": 0, "power_w": 60.0, "power_limit_w": 700.0, "util_gpu_pct": 0.0,
            "processes": []}


def _answer(doc: dict[str, Any], session: ProbeSession | None = None) -> dict[str, Any]:
    out = idle.derive(session or ProbeSession(), doc, now=NOW)
    assert set(out) == {"idle"}
    answer: dict[str, Any] = out["idle"]
    assert answer["now"] == NOW  # the box's own clock, so the span is the box's
    return answer


def test_the_newest_attempt_end_is_when_the_box_went_idle() -> None:
    got = _answer(_doc([_ended("j1", NOW - 12 * HOUR), _ended("j2", NOW - 10 * HOUR, "failed")],
                       [IDLE_GPU]))
    assert got["idle_since"] == NOW - 10 * HOUR
    assert got["basis"] == "job_end" and got["busy"] is None


def test_a_reboot_after_the_last_job_counts_from_the_boot() -> None:
    got = _answer(_doc([_ended("j1", NOW - 12 * HOUR)], uptime=3 * HOUR))
    assert got["idle_since"] == NOW - 3 * HOUR and got["basis"] == "boot"


def test_a_box_that_never_ran_a_job_is_idle_since_its_boot() -> None:
    got = _answer({"host": {"uptime_s": 5 * HOUR, "time": NOW}, "gpus": []})
    assert got["idle_since"] == NOW - 5 * HOUR and got["basis"] == "boot"


def test_a_running_job_means_busy() -> None:
    got = _answer(_doc([_ended("j1", NOW - HOUR), _running("j2", 4242)], [IDLE_GPU]))
    assert got["idle_since"] is None and got["busy"] == "job"


def test_a_foreign_compute_process_on_a_gpu_means_busy_even_at_idle_power() -> None:
    gpu = {**IDLE_GPU, "processes": [{"pid": 999, "type": "C", "name": "python"}]}
    got = _answer(_doc([_ended("j1", NOW - HOUR)], [gpu]))
    assert got["idle_since"] is None and got["busy"] == "foreign"


def test_a_desktop_display_process_is_not_work() -> None:
    gpu = {**IDLE_GPU, "processes": [{"pid": 7, "type": "G", "name": "Xorg"}]}
    got = _answer(_doc([_ended("j1", NOW - HOUR)], [gpu]))
    assert got["idle_since"] == NOW - HOUR


def test_a_gpu_drawing_power_with_no_process_listed_means_busy() -> None:
    gpu = {**IDLE_GPU, "power_w": 500.0, "util_gpu_pct": 97.0}
    got = _answer(_doc([_ended("j1", NOW - HOUR)], [gpu]))
    assert got["idle_since"] is None and got["busy"] == "gpu"


def test_gpu_work_the_session_saw_moves_the_idle_start_past_the_last_job() -> None:
    session = ProbeSession()
    busy = {**IDLE_GPU, "processes": [{"pid": 999, "type": "C", "name": "python"}]}
    seen_busy = idle.derive(session, _doc([_ended("j1", NOW - 5 * HOUR)], [busy]),
                            now=NOW - HOUR)
    assert seen_busy["idle"]["idle_since"] is None
    got = _answer(_doc([_ended("j1", NOW - 5 * HOUR)], [IDLE_GPU]), session)
    assert got["idle_since"] == NOW - HOUR and got["basis"] == "gpu"


def test_forged_or_missing_fields_never_raise() -> None:
    got = _answer({"host": {"uptime_s": "x"}, "gpus": "nope",
                   "queue": {"queues": {"default": {"jobs": [{"attempts": [{"end": "late"}]},
                                                             "junk"]}}}})
    assert got["idle_since"] is None and got["basis"] is None


def test_the_probe_answers_the_idle_section() -> None:
    session = ProbeSession()
    try:
        doc = session.snapshot({})
    finally:
        session.close()
    assert "idle" in doc and not [e for e in doc["errors"] if e["section"] == "idle"]
    assert doc["idle"]["now"] >= doc["host"]["time"]
