"""Issue 18's attacks against queue control (issue 20): forged events with the new fields
(after, priority, paused, edited_from) and hostile text in a dependency's reason, read by
the fold and printed by `gpuroom queue ls` / `queue show`. A job runs as the helper's user, so
it can append to events.jsonl: what it writes is skipped with a warning or shown inert."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from gpuroom.remote.queue import queue_view
from gpuroom.remote.queue_events import EventWriter, queue_dir
from gpuroom.tui.cli.queue import _print_jobs, _show

OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"
CLEAR = "\x1b[2J"
MARKUP = "[bold red]FAKE[/bold red]"


def events(root: Path, *evs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    writer = EventWriter(queue_dir(str(root), "default"))
    try:
        for ev, fields in evs:
            writer.append(ev, **fields)
    finally:
        writer.close()
    return queue_view(str(root), "default")


@pytest.mark.attack("bad answers", "forged added events whose after names no job id "
                    "('$(reboot)'), whose priority is a string, whose edited_from is a list")
def test_forged_queue_control_fields_skip_the_event_with_a_warning(tmp_path: Path) -> None:
    view = events(tmp_path,
                  ("added", {"job": "j1", "argv": ["true"], "after": ["j9", "$(reboot)"]}),
                  ("added", {"job": "j2", "argv": ["true"], "priority": "high"}),
                  ("added", {"job": "j3", "argv": ["true"], "edited_from": ["j1"]}),
                  ("added", {"job": "j4", "argv": ["true"], "after": "j1"}),
                  ("added", {"job": "j5", "argv": ["true"], "after": ["j4"], "priority": 2}))
    assert [j["id"] for j in view["jobs"]] == ["j5"]
    skipped = " ".join(view["warnings"])
    for seq in ("seq 1", "seq 2", "seq 3", "seq 4"):
        assert f"event {seq} (added) skipped" in skipped
    assert "is not a job id" in skipped and "priority must be an integer" in skipped


@pytest.mark.attack("bad answers", "a forged configured event setting paused to the string "
                    "'no' and slots to a float")
def test_a_forged_pause_setting_changes_nothing(tmp_path: Path) -> None:
    view = events(tmp_path, ("configured", {"paused": True}),
                  ("configured", {"paused": "no"}), ("configured", {"slots": 2.5}))
    assert view["config"]["paused"] is True and view["config"]["slots"] == 0
    assert len([w for w in view["warnings"] if "(configured) skipped" in w]) == 2


@pytest.mark.attack("hostile text", "a forged dependency_failed event whose reason carries "
                    "OSC 52, CSI 2J and Rich markup, read by queue ls and queue show")
def test_a_dependency_reason_reaches_the_terminal_inert(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    evil = f"dependency {OSC52}{CLEAR}{MARKUP} failed"
    view = events(tmp_path, ("added", {"job": "j1", "argv": ["true"], "name": MARKUP}),
                  ("dependency_failed", {"job": "j1", "why": evil}))
    assert view["jobs"][0]["reason"] == evil  # kept as the box wrote it, made inert on output
    _print_jobs(view)
    view["ok"] = True
    args = argparse.Namespace(json=False, host="box", job="j1", queue_cmd="show")
    assert _show(args, view) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert MARKUP in out  # printed as the words it is, never as a style
    assert f"reason: dependency {MARKUP} failed" in out.splitlines()
    assert f"job j1 ({MARKUP}): failed" in out.splitlines()
