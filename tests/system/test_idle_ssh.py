"""The idle clock from the box's own records over the real sshd: a fresh Fleet's first poll
of a box whose last real job ended already counts from that end, on the box's clock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.monitorbox import FOREIGN_GPUS, add_job, queue_box, wait_job

from gpuroom.remote.queue_events import FINAL_STATES
from gpuroom.tui.config import load
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.model import HostState
from gpuroom.tui.rules.watch import FleetWatch


@pytest.fixture
def box(sshd_box: Any, fixtures: Path, tmp_path: Path) -> Iterator[Path]:
    with queue_box(sshd_box, fixtures, tmp_path) as config:
        yield config


async def _first_poll(config: Path) -> tuple[HostState, FleetWatch]:
    fleet = Fleet(load(config))
    watch = FleetWatch()
    try:
        state = await fleet.poll_host("box")
        watch.observe(state, time.time())
        return state, watch
    finally:
        await fleet.close()


@pytest.mark.sshd
def test_a_fresh_fleet_counts_idle_from_the_last_real_jobs_end(box: Path) -> None:
    job = add_job(box, "sh", "-c", "echo done")
    ended = wait_job(box, job, lambda j: j.state in FINAL_STATES)
    attempt = ended.last_attempt
    assert attempt is not None and attempt.end is not None
    time.sleep(2.5)  # a clock started by the poll would say about zero
    state, watch = asyncio.run(_first_poll(box))
    view = state.view
    assert view is not None and view.idle is not None
    assert view.idle.basis == "job_end" and view.idle.idle_since == attempt.end
    now = time.time()
    idle = watch.tracker.idle_for("box", now)
    assert idle is not None and abs(idle - (now - attempt.end)) < 1.0
    assert idle > 2.0


@pytest.mark.sshd
def test_a_box_whose_gpus_run_someone_elses_process_is_not_idle(
        sshd_box: Any, fixtures: Path, tmp_path: Path) -> None:
    with queue_box(sshd_box, fixtures, tmp_path, captures=FOREIGN_GPUS) as config:
        state, watch = asyncio.run(_first_poll(config))
    view = state.view
    assert view is not None and view.idle is not None
    assert view.idle.busy == "foreign" and view.idle.idle_since is None
    assert watch.tracker.idle_for("box", time.time()) is None
