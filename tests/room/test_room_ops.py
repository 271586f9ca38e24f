"""The doctor, the danger clock, pull (P) and the teardown gate (T) inside the room.

Replays drive the doctor's recordings through the same app (no network); P and T run once
against a recording fleet for the screens and once against the real test sshd end to end.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from harness.room import finish, open_gate
from paths import DATA
from textual.widgets import Input

from gpuroom.tui.fleet.acks import Acks
from gpuroom.tui.fleet.replay import ReplayFleet, load_recording
from gpuroom.tui.room.app import GpuroomApp
from gpuroom.tui.room.findings_screen import FindingsScreen
from gpuroom.tui.room.gate_screen import GateScreen
from gpuroom.tui.rules.gate import GateItem, GateResult
from gpuroom.tui.transport.pull import FileResult, Progress, PullResult
from gpuroom.widgets.banner import DangerBanner
from gpuroom.widgets.hosts import HostsTable
from gpuroom.widgets.queue import QueueTable

DOCTOR = DATA / "doctor"


async def replayed(app: GpuroomApp, fleet: ReplayFleet, pilot: Any) -> None:
    await asyncio.wait_for(fleet.finished.wait(), 20)
    await pilot.pause()


def banner_texts(app: GpuroomApp) -> list[str]:
    return [d.text for d in app.query_one(DangerBanner).items]


@pytest.mark.parametrize(("name", "line"), [
    ("cgroup_oom", "CRITICAL h100-a: job default/j1 (train) died: cgroup OOM-kill [U9]"),
    ("reboot", "CRITICAL h100-a: job default/j1 (train) died: the box rebooted [GEN6]"),
    ("xid79", "CRITICAL h100-a: job default/j1 (train) died: GPU fell off the bus, the GPU is "
              "dead [U22]"),
    ("inode_full", "CRITICAL h100-a: /data: inodes 100 % used [U7]"),
    ("throttle", "WARN a10-c: GPU 0 (NVIDIA A10) is throttling [U23]"),
])
async def test_replayed_recording_puts_the_doctors_line_in_the_banner(name: str, line: str
                                                                      ) -> None:
    fleet = ReplayFleet(load_recording(DOCTOR / f"{name}.jsonl"), speed=0)
    app = GpuroomApp(fleet, clock=fleet.now)
    async with app.run_test(size=(120, 36)) as pilot:
        await replayed(app, fleet, pilot)
        # Exactly the doctor's line: the failed job it explains is not said twice.
        assert banner_texts(app) == [line]
        host = line.split()[1].rstrip(":")
        row = next(r for r in app.query_one(HostsTable).hosts if r.name == host)
        assert row.findings == ("1!!" if line.startswith("CRITICAL") else "1!")


async def test_a_job_death_stays_said_until_cleared() -> None:
    records = load_recording(DOCTOR / "cgroup_oom.jsonl")
    last = records[-1]
    # Two more identical polls after the death: the transition is no longer visible in
    # (prev, snapshot), yet the banner must keep saying it.
    later = [type(last)(**{**last.__dict__, "t": last.t + 5 * k}) for k in (1, 2)]
    fleet = ReplayFleet(records + later, speed=0)
    app = GpuroomApp(fleet, clock=fleet.now)
    async with app.run_test(size=(120, 36)) as pilot:
        await replayed(app, fleet, pilot)
        assert any("[U9]" in t for t in banner_texts(app))
        await pilot.press("d")
        assert isinstance(app.screen, FindingsScreen)
        assert [f.id for f in app.screen.findings] == ["U9"]
        await pilot.press("c")
        await pilot.pause()
        assert not isinstance(app.screen, FindingsScreen)
        # Cleared: the death is acknowledged as `gpuroom doctor --ack` records it, so the
        # failed job is not said again in fewer words, here or by doctor and watch.
        assert banner_texts(app) == []
        view = fleet.hosts()[0].view
        assert view is not None
        (job,) = [j for j in view.jobs if j.state == "failed"]
        attempt = job.last_attempt.attempt if job.last_attempt else None
        assert Acks().acked("h100-a", job.id, attempt)


async def test_idle_box_banner_and_billed_column() -> None:
    records = load_recording(DOCTOR / "idle_3h.jsonl")
    records = [type(r)(**{**r.__dict__, "price_per_hour": 2.49}) for r in records]
    fleet = ReplayFleet(records, speed=0)
    app = GpuroomApp(fleet, clock=fleet.now)
    async with app.run_test(size=(120, 36)) as pilot:
        await replayed(app, fleet, pilot)
        assert banner_texts(app) == [
            "CRITICAL idle-box: idle 3.0 h while billing: $7.47 burnt (no job running, GPU "
            "at idle power)"]
        row = app.query_one(HostsTable).hosts[0]
        # Billed since boot: the box's uptime at its last poll, at $2.49/h.
        hours = records[-1].snapshot["host"]["uptime_s"] / 3600  # type: ignore[index]
        assert row.billed == f"${hours * 2.49:.2f} {hours:.1f}h"


async def test_notify_command_and_bell_once_per_new_critical(tmp_path: Path) -> None:
    out = tmp_path / "notes"
    script = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')"
    records = load_recording(DOCTOR / "inode_full.jsonl")
    again = [type(records[-1])(**{**records[-1].__dict__, "t": records[-1].t + 5 * k})
             for k in (1, 2, 3)]
    fleet = ReplayFleet(records + again, speed=0)
    app = GpuroomApp(fleet, clock=fleet.now, bell=True,
                     notify_command=[sys.executable, "-c", script, str(out)])
    rings: list[int] = []
    app.bell = lambda: rings.append(1)  # type: ignore[method-assign]
    async with app.run_test(size=(120, 36)) as pilot:
        await replayed(app, fleet, pilot)
        await finish(app, "notify")
    assert out.read_text().splitlines() == ["CRITICAL h100-a: /data: inodes 100 % used [U7]"]
    assert rings == [1]


# ------------------------------------------------------------------------- P and T, screens

class OpsFleet(ReplayFleet):
    """A replay whose pull and gate answer like a box would; the teardown is a real argv."""

    def __init__(self, *args: Any, teardown: list[str] | None, safe: bool, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.teardown = teardown
        self.safe = safe
        self.pulls: list[tuple[str, str | None]] = []

    async def pull(self, host: str, job: str | None, on_progress: Any
                   ) -> list[tuple[str, PullResult]]:
        self.pulls.append((host, job))
        on_progress(job or "j1", Progress(done=5 << 20, total=10 << 20, rate_bps=1 << 20,
                                          eta_s=5.0, path="w.bin"))
        result = PullResult(host=host, job=job or "j1", remote_dir="/x", local_dir="/y",
                            files=[FileResult("w.bin", 10, status="verified",
                                              verified_by="hash")])
        return [(job or "j1", result)]

    async def gate(self, host: str) -> GateResult:
        return GateResult(host, self.safe, [GateItem("queue finished or stopped", True, "1 job"),
                                            GateItem("every job's outputs pulled", self.safe,
                                                     "ok" if self.safe else "not pulled: j1")])

    def teardown_argv(self, host: str) -> list[str] | None:
        return self.teardown


def ops_app(tmp_path: Path, *, safe: bool) -> tuple[GpuroomApp, OpsFleet, Path]:
    marker = tmp_path / "torn-down"
    fleet = OpsFleet(load_recording(DOCTOR / "cgroup_oom.jsonl"), speed=0, safe=safe,
                     teardown=[sys.executable, "-c",
                               f"open({str(marker)!r}, 'w').write('x'); print('stopped')"])
    return GpuroomApp(fleet, clock=fleet.now), fleet, marker


async def test_P_pulls_the_selected_job(tmp_path: Path) -> None:
    app, fleet, _ = ops_app(tmp_path, safe=True)
    async with app.run_test(size=(120, 36)) as pilot:
        await replayed(app, fleet, pilot)
        assert app.query_one(QueueTable).selected_job_id == "j1"
        await pilot.press("P")
        await finish(app, "pull")
        await pilot.pause()
        assert fleet.pulls == [("h100-a", "j1")]
        assert any("pulled 1 file(s) of 1 job(s) from h100-a" in str(n.message)
                   for n in app._notifications)


async def type_host_name(app: GpuroomApp, pilot: Any, name: str) -> None:
    """Type ``name`` into the gate's confirmation and press enter; wait for any teardown."""
    app.screen.query_one("#confirm", Input).value = name
    await pilot.press("enter")
    await pilot.pause()
    await finish(app, "teardown")


async def test_T_runs_teardown_only_when_safe_and_the_name_is_typed(tmp_path: Path) -> None:
    app, fleet, marker = ops_app(tmp_path, safe=True)
    async with app.run_test(size=(120, 36)) as pilot:
        await replayed(app, fleet, pilot)
        await open_gate(app, pilot)
        await type_host_name(app, pilot, "h100-b")
        assert isinstance(app.screen, GateScreen) and not marker.exists()
        await type_host_name(app, pilot, "h100-a")
        assert marker.read_text() == "x"
        assert any(str(n.message) == "teardown_command for h100-a finished (exit 0): stopped"
                   for n in app._notifications)


@pytest.mark.parametrize("prints", ["", "\x1b[0m\n\n"], ids=["nothing", "only-escapes"])
async def test_a_silent_teardown_says_it_printed_nothing(tmp_path: Path, prints: str) -> None:
    # Issue 17: "teardown_command ... finished:" ended in nothing and read as cut off; output
    # that is only escape sequences is nothing too once they are stripped.
    app, fleet, marker = ops_app(tmp_path, safe=True)
    fleet.teardown = [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('x'); "
                      f"print({prints!r}, end='')"]
    async with app.run_test(size=(120, 36)) as pilot:
        await replayed(app, fleet, pilot)
        await open_gate(app, pilot)
        await type_host_name(app, pilot, "h100-a")
        assert any(str(n.message) == "teardown_command for h100-a finished (exit 0): no output"
                   for n in app._notifications)


async def test_T_offers_no_teardown_when_not_safe(tmp_path: Path) -> None:
    app, fleet, marker = ops_app(tmp_path, safe=False)
    async with app.run_test(size=(120, 36)) as pilot:
        await replayed(app, fleet, pilot)
        await open_gate(app, pilot)
        assert not app.screen.query("#confirm")
        await pilot.press("escape")
        assert not isinstance(app.screen, GateScreen) and not marker.exists()


# ------------------------------------------------------------------------- P and T, real box

async def test_slurm_queue_pane_shows_ids_states_and_reasons() -> None:
    """The recorded real-Slurm session: the queue pane grows a slurm column while jobs are
    pending with their reason, and the doctor explains the walltime kill."""
    records = load_recording(DATA / "slurm" / "session.jsonl")
    pending_at = next(i for i, r in enumerate(records) if any(
        j.get("reason") == "Resources"
        for j in (r.snapshot or {}).get("queue", {}).get("queues", {}).get("default", {})
        .get("jobs", [])))
    fleet = ReplayFleet(records[: pending_at + 1], speed=0)
    app = GpuroomApp(fleet, clock=fleet.now)
    async with app.run_test(size=(160, 40)) as pilot:
        await replayed(app, fleet, pilot)
        table = app.query_one(QueueTable)
        assert "slurm" in [str(c.label) for c in table.columns.values()]
        cells = {j.id: j.slurm for j in table.jobs}
        assert any("Resources" in c for c in cells.values()), cells
        assert all(c for c in cells.values()), cells  # every job shows its Slurm id
    fleet = ReplayFleet(records, speed=0)
    app = GpuroomApp(fleet, clock=fleet.now)
    async with app.run_test(size=(160, 40)) as pilot:
        await replayed(app, fleet, pilot)
        ids = {f.id for f in app.findings_watch.findings("login")}
        assert "SLURM2" in ids, ids  # the TIMEOUT job
