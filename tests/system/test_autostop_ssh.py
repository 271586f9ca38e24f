"""The autostop watchdog over the real sshd: armed through the helper with the user's own
argv, it runs that command on the box after the idle time with the jump host gone (the link
closed), once; a destroying verb without --allow-destroy is refused at arming."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.monitorbox import queue_box

from gpuroom.tui.cli.main import main
from gpuroom.tui.config import load
from gpuroom.tui.fleet.live import Fleet

WAIT_S = 30.0


@pytest.fixture
def box(sshd_box: Any, fixtures: Path, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    with queue_box(sshd_box, fixtures, tmp_path) as config:
        work = Path(load(config).hosts["box"].python).parent
        record = work / "stopped.json"
        script = work / "fake-stop"
        script.write_text("#!/usr/bin/python3\nimport json, sys\n"
                          f"open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
        script.chmod(0o755)
        user = pwd.getpwnam(sshd_box.user)
        os.chown(script, user.pw_uid, user.pw_gid)
        try:
            yield config, script
        finally:
            asyncio.run(_helper(config, "disarm"))


async def _helper(config: Path, *args: str) -> tuple[int, dict[str, Any]]:
    fleet = Fleet(load(config))
    try:
        result = await fleet.link("box").helper("autostop", *args, timeout_s=60.0)
        assert result.stdout, result.failure()
        return result.rc, json.loads(result.stdout)
    finally:
        await fleet.close()  # the jump host is gone: nothing of it stays connected


@pytest.mark.sshd
def test_the_watchdog_runs_the_stop_command_after_the_idle_time_with_nobody_connected(
        box: tuple[Path, Path]) -> None:
    config, script = box
    record = script.parent / "stopped.json"
    armed_at = time.time()
    rc, doc = asyncio.run(_helper(config, "arm", "--idle", "3", "--every", "0.5", "--by",
                                  "tester", "--", str(script), "stop", "pod", "p-1"))
    assert rc == 0 and doc["ok"], doc
    deadline = time.monotonic() + WAIT_S
    while not record.exists():
        assert time.monotonic() < deadline, "the watchdog never ran the stop command"
        time.sleep(0.3)
    fired_after = time.time() - armed_at
    assert json.loads(record.read_text()) == ["stop", "pod", "p-1"]
    assert fired_after >= 3.0
    home = Path(load(config).hosts["box"].python).parent / "home"
    events = [json.loads(x) for x in (home / "autostop-events.jsonl").read_text().splitlines()]
    assert [e["ev"] for e in events][:1] == ["armed"] and events[0]["by"] == "tester"
    assert any(e["ev"] == "fired" and e["rc"] == 0 for e in events)
    # Fired once: it disarmed itself.
    assert asyncio.run(_helper(config, "status"))[1]["armed"] is None


@pytest.mark.sshd
@pytest.mark.attack("bad configuration", "autostop armed over ssh with a verb that destroys")
def test_a_destroying_verb_is_refused_at_arming(box: tuple[Path, Path]) -> None:
    config, script = box
    rc, doc = asyncio.run(_helper(config, "arm", "--idle", "3", "--", str(script),
                                  "terminate", "pod"))
    assert rc == 2 and not doc["ok"] and "--allow-destroy" in doc["error"]
    assert asyncio.run(_helper(config, "status"))[1]["armed"] is None


@pytest.mark.sshd
def test_gpuroom_autostop_arms_it_and_the_box_stops_itself(
        box: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    config, script = box
    record = script.parent / "stopped.json"
    assert main(["--config", str(config), "autostop", "box", "--after", "3s", "--",
                 str(script), "shutdown", "-h", "now"]) == 0
    assert "autostop armed" in capsys.readouterr().out
    deadline = time.monotonic() + WAIT_S
    while not record.exists():
        assert time.monotonic() < deadline, "the watchdog never ran the stop command"
        time.sleep(0.3)
    assert json.loads(record.read_text()) == ["shutdown", "-h", "now"]


@pytest.mark.sshd
def test_gpuroom_autostop_refuses_a_destroying_verb(
        box: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    config, script = box
    assert main(["--config", str(config), "autostop", "box", "--after", "45m", "--",
                 str(script), "remove", "pod"]) == 2
    assert "--allow-destroy" in " ".join(capsys.readouterr().err.split())
    assert main(["--config", str(config), "autostop", "box"]) == 0
    assert "not armed" in capsys.readouterr().out
