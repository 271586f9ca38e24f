"""P then T in the room against the real box over the test sshd (the Pilot tests of P and T
without a box are in tests/room/test_room_ops.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from harness.room import finish, job_reaches, open_gate
from textual.widgets import Input

from gpuroom.tui import config as cfg
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.room.app import GpuroomApp

JOB = "import os;open(os.path.join(os.environ['GPUROOM_CKPT_DIR'],'w.bin'),'wb').write(b'y'*4096)"


@pytest.mark.sshd
async def test_P_then_T_against_the_real_box(sshd_box: Any, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    marker = tmp_path / "torn-down"
    path = tmp_path / "hosts.toml"
    path.write_bytes(tomli_w.dumps({
        "settings": {"ssh_config": str(sshd_box.ssh_config), "poll_interval_s": 0.5},
        "hosts": {"box": {"ssh": sshd_box.alias, "pull_to": str(tmp_path / "pulls"),
                          "teardown_command": ["touch", str(marker)]}}}).encode())
    fleet = Fleet(cfg.load(path))
    app = GpuroomApp(fleet)
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            jid = await fleet.queue_add("box", ["python3", "-c", JOB])
            await job_reaches(app, pilot, jid, "succeeded")
            assert not (await open_gate(app, pilot)).result.safe
            await pilot.press("escape")
            await pilot.press("P")
            await finish(app, "pull")
            assert (tmp_path / "pulls" / "box" / jid / "w.bin").read_bytes() == b"y" * 4096
            gate = await open_gate(app, pilot)
            assert gate.result.safe, json.dumps(gate.result.to_json())
            app.screen.query_one("#confirm", Input).value = "box"
            await pilot.press("enter")
            await pilot.pause()
            await finish(app, "teardown")
            assert marker.exists()
    finally:
        sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")


