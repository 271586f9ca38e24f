"""Issue 17 item 14: a watched mount that is not there is one line in the disk pane
("/workspace: not mounted"), a finding names what the profile expected there, and the
profile's mounts are watched without listing them in hosts.toml."""

from __future__ import annotations

import copy
import json
import os
import time
from pathlib import Path
from typing import Any

from harness.room import screen_text
from paths import DATA

from gpuroom.profiles import load_profile
from gpuroom.remote.hostinfo import disk_facts
from gpuroom.tui.config import HostConfig
from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.fleet.live import watched_mounts
from gpuroom.tui.present.disks import disk_rows
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.tui.rules.doctor import missing_mount_findings
from gpuroom.tui.snapshot import read_snapshot

os.environ["TZ"] = "UTC"
time.tzset()


def absent_workspace(tmp_path: Path) -> dict[str, Any]:
    """What the real helper says for a watched path that does not exist, asked as
    /workspace (the profile's path) whatever this machine has there."""
    return {**disk_facts(str(tmp_path / "workspace")), "path": "/workspace"}


def runpod_scenario(tmp_path: Path) -> tuple[dict[str, Any], float]:
    data = json.loads((DATA / "scenario-healthy.json").read_text())
    host = copy.deepcopy(data["hosts"][0])
    host["profile"] = "runpod"
    host["snapshot"]["disks"].append(absent_workspace(tmp_path))
    return {"hosts": [host]}, float(data["now"])


def test_a_missing_path_reads_not_mounted(tmp_path: Path) -> None:
    rows = disk_rows(read_snapshot({"disks": [absent_workspace(tmp_path)]}))
    assert [(r.path, r.error) for r in rows] == [("/workspace", "not mounted")]
    # Any other failure keeps its own words.
    denied = {"path": "/root", "error": "PermissionError: Permission denied"}
    assert disk_rows(read_snapshot({"disks": [denied]}))[0].error == (
        "PermissionError: Permission denied")


def test_the_doctor_names_the_profiles_expectation(tmp_path: Path) -> None:
    snap = read_snapshot({"disks": [absent_workspace(tmp_path)]})
    [finding] = missing_mount_findings("pod", snap, load_profile("runpod"))
    assert finding.title == ("/workspace: not mounted, but the RunPod profile expects its "
                             "volume disk there")
    assert "survives a stop only" in finding.seen
    assert "hosts.toml" in finding.fix
    assert missing_mount_findings("pod", snap, None) == []


def test_the_profiles_mounts_are_watched_without_listing_them() -> None:
    assert watched_mounts(HostConfig("pod", ssh="pod", profile="runpod")) == ["/workspace"]
    # The user's own come first; "$USER" and "unknown" paths are not statvfs-able as given.
    assert watched_mounts(HostConfig("s", ssh="s", profile="slurm", mounts=["/data"])) == [
        "/data"]
    assert watched_mounts(HostConfig("k", ssh="k", profile="kaggle")) == [
        "/kaggle/working", "/kaggle/temp"]


async def test_disk_pane_shows_one_line_at_80x24(tmp_path: Path) -> None:
    data, now = runpod_scenario(tmp_path)
    app = GpuroomApp(StaticFleet.from_scenario(data), clock=lambda: now)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = screen_text(app)
        banner, *panes = [ln for ln in screen.splitlines() if "/workspace" in ln]
        assert "WARN h100-a: /workspace: not mounted, but the RunPod profile" in banner
        assert len(panes) == 1 and panes[0].rstrip().endswith("/workspace: not mounted"), screen
        assert "FileNotFoundError" not in screen
        # The readable mount keeps its row, bars and all.
        assert any(ln.rstrip().endswith("░") and "72%" in ln for ln in screen.splitlines()
                   if " ~ " in ln), screen
