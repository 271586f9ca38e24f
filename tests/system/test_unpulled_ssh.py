"""Issue 17 item 7 over the test sshd: after a real, verified pull the danger clock no longer
says "checkpoints not pulled", it never names a job that wrote no checkpoint, and it agrees
with the teardown gate, which reads the same pull records.

Real queue on the box (the helper's runner), real pull (SFTP over the link, sha256-checked),
real pulls.json under this test's XDG_STATE_HOME.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from gpuroom.tui.config import HostConfig
from gpuroom.tui.fleet.outputs import PullRecords, check_gate, pull_jobs
from gpuroom.tui.rules.clock import ClockItem, host_clocks
from gpuroom.tui.snapshot import read_snapshot
from gpuroom.tui.transport.link import HostLink

WAIT_S = 60.0


async def _queue(link: HostLink, *args: str) -> dict[str, Any]:
    result = await link.helper("queue", *args, timeout_s=60.0)
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


async def _all_succeeded(link: HostLink, jobs: list[str]) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        states = {j["id"]: j["state"] for j in (await _queue(link, "ls"))["jobs"]}
        if all(states.get(j) == "succeeded" for j in jobs):
            return
        assert time.monotonic() < deadline, states
        await asyncio.sleep(0.3)


def _unpulled(link: HostLink, raw: dict[str, Any], records: list[dict[str, Any]]
              ) -> list[ClockItem]:
    return [c for c in host_clocks(link.name, read_snapshot(raw), None, time.time(),
                                   records=records) if c.kind == "unpulled"]


@pytest.mark.sshd
async def test_a_verified_pull_clears_the_clock_and_the_gate_agrees(
        sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    records = PullRecords()
    assert records.path.is_relative_to(tmp_path)
    link = HostLink(HostConfig(name="box", ssh=sshd_box.alias), ssh_config=sshd_box.ssh_config)
    try:
        wrote = (await _queue(link, "add", "--name", "wrote", "--", "sh", "-c",
                              'echo step > "$GPUROOM_CKPT_DIR/state.json"'))["job"]
        empty = (await _queue(link, "add", "--name", "empty", "--", "true"))["job"]
        await _all_succeeded(link, [wrote, empty])

        before = _unpulled(link, await link.poll({}), records.current())
        assert len(before) == 1
        assert wrote in before[0].text and empty not in before[0].text  # "empty" wrote nothing

        results = dict(await pull_jobs(link, tmp_path / "pulls"))
        assert [f.status for f in results[wrote].files] == ["verified"]
        assert (tmp_path / "pulls" / "box" / wrote / "state.json").read_text() == "step\n"

        after = _unpulled(link, await link.poll({}), records.current())
        gate = await check_gate(link)
    finally:
        sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")
        await link.close()
    assert after == []
    pulled = next(i for i in gate.items if i.name == "every job's outputs pulled")
    assert pulled.ok, gate.to_json()
