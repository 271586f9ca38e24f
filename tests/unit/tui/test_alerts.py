"""The one decision behind the bell, notify_command and notify_url: which critical items to
send now (new, changed, or due again after the re-notify interval)."""

from __future__ import annotations

from gpuroom.tui.rules.alerts import AlertGate
from gpuroom.tui.rules.clock import ClockItem
from gpuroom.tui.rules.doctor import Finding

INODES = Finding("U7", "critical", "box", "/data: inodes 100 % used", "df -i", "delete files")
WARN = Finding("U21", "warn", "box", "SM clock low", "", "feed the GPU")


def _idle(host: str, burnt: int) -> ClockItem:
    return ClockItem(host, "idle", "critical", f"idle 3h while billing: ${burnt} burnt", 1e4)


def test_a_critical_item_is_sent_once_with_its_fields_and_never_a_warning() -> None:
    gate = AlertGate(renotify_s=3600)
    first = gate.due([INODES, WARN], [], now=0)
    assert [a.to_json() for a in first] == [{
        "host": "box", "id": "U7", "severity": "critical", "text": "/data: inodes 100 % used",
        "fix": "delete files"}]
    assert first[0].line == "CRITICAL box: /data: inodes 100 % used [U7]"
    assert gate.due([INODES, WARN], [], now=5) == []
    assert gate.due([INODES], [], now=3599) == []


def test_re_sent_after_the_interval_and_when_it_changes() -> None:
    gate = AlertGate(renotify_s=600)
    assert len(gate.due([INODES], [], now=0)) == 1
    assert [a.id for a in gate.due([INODES], [], now=600)] == ["U7"]
    changed = Finding("U7", "critical", "box", INODES.title, "df -i", "move the dataset")
    assert [a.fix for a in gate.due([changed], [], now=601)] == ["move the dataset"]
    assert gate.due([changed], [], now=602) == []


def test_a_clock_whose_text_counts_up_is_not_new_each_poll() -> None:
    gate = AlertGate(renotify_s=3600)
    assert [a.id for a in gate.due([], [_idle("box", 10)], now=0)] == ["clock:idle"]
    assert gate.due([], [_idle("box", 11)], now=5) == []
    assert gate.due([], [_idle("other", 11)], now=5)[0].host == "other"


def test_an_item_that_clears_and_returns_is_new() -> None:
    gate = AlertGate(renotify_s=3600)
    gate.due([INODES], [], now=0)
    assert gate.due([], [], now=5) == []
    assert len(gate.due([INODES], [], now=10)) == 1
