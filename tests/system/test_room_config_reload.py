"""The room re-reads hosts.toml when the file changes (tui/fleet/live.py reload_config): a host
added is polled, one removed leaves the hosts pane, and a file that does not validate is a
toast with its error while the old config stays. Two local hosts: the real helper, no SSH."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from textual.pilot import Pilot

from gpuroom.tui import config as cfg
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.model import LinkState
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.widgets.hosts import HostsTable

WAIT_S = 30.0


def _write(path: Path, text: str) -> None:
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    # The change is seen by its mtime: never the same one again, however fast the test.
    os.utime(path, ns=(before + 10**9, before + 10**9))


async def _until(pilot: Pilot[object], what: str, ok: object) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ok():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        await pilot.pause(0.2)


async def test_an_edited_hosts_toml_takes_effect_and_a_bad_one_is_said_and_ignored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("GPUROOM_HOME", str(tmp_path / "gpuroom"))
    path = tmp_path / "hosts.toml"
    _write(path, "[settings]\npoll_interval_s = 0.5\n[hosts.a]\nlocal = true\n")
    path.chmod(0o600)
    fleet = Fleet(cfg.load(path))
    app = GpuroomApp(fleet)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        table = app.query_one(HostsTable)
        await _until(pilot, "a polled", lambda: fleet.state("a").state is LinkState.UP)

        _write(path, "[settings]\npoll_interval_s = 0.5\n[hosts.b]\nlocal = true\n"
                     "price_per_hour = 1.5\n")
        await _until(pilot, "b in the room", lambda: [h.name for h in table.hosts] == ["b"])
        await _until(pilot, "b polled", lambda: fleet.state("b").state is LinkState.UP)
        notes = [str(n.message) for n in app._notifications]
        assert "hosts.toml re-read: added b; removed a" in notes, notes
        assert fleet.state("b").price_per_hour == 1.5

        _write(path, "[hosts.b]\nlocal = true\nprice_per_hr = 3\n")
        await _until(pilot, "the refusal said", lambda: any(
            "not applied" in str(n.message) for n in app._notifications))
        (note,) = [str(n.message) for n in app._notifications if "not applied" in str(n.message)]
        assert f"{path}: [hosts.b] line 3: unknown key price_per_hr, did you mean " \
               "price_per_hour" in note, note
        assert [h.name for h in table.hosts] == ["b"] and fleet.state("b").price_per_hour == 1.5
