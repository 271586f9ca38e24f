"""A box lost while the mirror is pulling a checkpoint from it fails over in time: within
failover_after_s plus one poll of its loss, with the fleet's own poll loop (as `gpuroom watch`
runs it) and the default down_after_s, not minutes later.

Two real OpenSSH sshd in their own network namespaces (tests/harness/netns.py); the job is a
plain command on box a whose checkpoints the test commits as the box's user; the mirror's
pull of a big one is cut mid-file (rsync --bwlimit keeps it in flight).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import tomllib

torch = pytest.importorskip("torch")
from harness import failover as scenario  # noqa: E402
from harness import netns  # noqa: E402
from harness.sshd import ClientIdentity  # noqa: E402

from gpuroom.tui import config as cfg  # noqa: E402
from gpuroom.tui.fleet.live import Fleet  # noqa: E402
from gpuroom.tui.fleet.mirror import MirrorOutcome, mirror_dir  # noqa: E402

pytestmark = pytest.mark.sshd

FAILOVER_AFTER_S = 6.0
POLL_S = 1.0
# One poll of a box that stopped answering: the request's own deadline
# (tui/transport/link.py REQUEST_TIMEOUT_S), then the failover's move to b.
ONE_POLL_S = 10.0
JOB = ["sh", "-c", 'mkdir -p "$GPUROOM_CKPT_DIR" && sleep 300']


@pytest.fixture
def two_boxes(ssh_identity: ClientIdentity) -> Iterator[netns.TwoBoxTopology]:
    with netns.built_or_skip(netns.two_box_topology, ssh_identity) as topo:
        yield topo


def _config(topo: netns.TwoBoxTopology, work: Path) -> Path:
    """The scenario's hosts.toml with the default down_after_s (120 s), a 1 s poll and a
    bandwidth cap that keeps the big checkpoint's pull in flight for seconds."""
    path = scenario.box_config(topo, work, FAILOVER_AFTER_S)
    doc = tomllib.loads(path.read_text())
    del doc["settings"]["down_after_s"]
    doc["settings"].update(poll_interval_s=POLL_S, mirror_bwlimit_kbps=2000)
    path.write_bytes(tomli_w.dumps(doc).encode())
    return path


def _save(topo: netns.TwoBoxTopology, ckpt_dir: Path, step: int, numel: int) -> Path:
    user = topo.identity.user
    tmp = ckpt_dir / f".ckpt-{step:012d}.pt.tmp-test"
    torch.save({"step": step, "w": torch.rand(numel, generator=torch.Generator().manual_seed(
        step))}, tmp)
    os.lchown(tmp, user.uid, user.gid)
    final = ckpt_dir / f"ckpt-{step:012d}.pt"
    os.replace(tmp, final)
    return final


async def _until(what: str, done: Any, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.05)


@pytest.mark.attack("faults", "the box dies while the mirror is pulling a checkpoint from it: "
                    "failover waits for minutes")
def test_a_box_lost_mid_mirror_transfer_fails_over_within_failover_after_s_plus_a_poll(
        two_boxes: netns.TwoBoxTopology, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    config = _config(two_boxes, tmp_path)
    job = str(scenario.cli_json("--config", str(config), "queue", "add", "--json",
                                "--failover", "boxb", "boxa", "--", *JOB)["job"])
    ckpt_dir = Path(scenario.wait_state(config, "boxa", job, ("running",))["ckpt_dir"])
    deadline = time.monotonic() + 60
    while not ckpt_dir.is_dir():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    _save(two_boxes, ckpt_dir, 1, 1000)

    async def body() -> tuple[float, list[MirrorOutcome]]:
        heard: list[MirrorOutcome] = []
        fleet = Fleet(cfg.load(config), mirror=True, on_mirror=heard.append)
        loop = asyncio.ensure_future(fleet.run(lambda _name: None))
        frozen: list[int] = []
        try:
            await _until("step 1 home", lambda: any(o.status == "home" for o in heard), 60)
            view = fleet.state("boxa").view
            qid = next(j.queue_id for j in view.jobs if j.id == job) if view else None
            assert qid is not None
            big = _save(two_boxes, ckpt_dir, 2, 6 << 20)  # 24 MiB: ~12 s at the cap
            part = mirror_dir(cfg.load(config).hosts["boxa"], job, qid) / (big.name + ".part")
            await _until("the big pull in flight",
                         lambda: part.exists() and part.stat().st_size > (1 << 20), 60)
            two_boxes.cut("a")
            frozen = two_boxes.pids("a")
            scenario.signal_all(frozen, signal.SIGSTOP)
            lost = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await _until("failover", lambda: any(o.status == "failover" for o in heard),
                             60)
            return time.monotonic() - lost, heard
        finally:
            scenario.signal_all(frozen, signal.SIGCONT)
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop
            await fleet.close()

    try:
        took, heard = asyncio.run(body())
    finally:
        two_boxes.restore("a")
    print(f"failover {took:.1f} s after the loss")  # the measurement, with pytest -s
    failovers = [o for o in heard if o.status == "failover"]
    assert failovers, f"no failover within 60 s of the loss: {[o.line for o in heard]}"
    assert took <= FAILOVER_AFTER_S + POLL_S + ONE_POLL_S, (took, [o.line for o in heard])
    assert failovers[0].step == 1  # the half-pulled step 2 never counted
