"""Two gpuroom processes (the room and `gpuroom watch`) mirroring the same job at once over
the test sshd: one brings the checkpoint home, the other steps aside; neither reports a sha256
mismatch, and the copy home is the box's.

Real processes, real queue, real pulls (rsync --bwlimit, so the two transfers overlap).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from test_mirror_ssh import _add, dirs, queue_id, running_job, save_ckpt, write_config

from gpuroom.tui import config as cfg
from gpuroom.tui.fleet.live import Fleet
from gpuroom.tui.fleet.mirror import mirror_dir

pytestmark = pytest.mark.sshd
__all__ = ["dirs"]  # the fixture, shared with test_mirror_ssh

JOB = ["sh", "-c", 'mkdir -p "$GPUROOM_CKPT_DIR" && sleep 300']

# One process's mirror cycle of one job, started when the go file appears (both processes
# connect first, so their transfers begin together).
MIRROR_ONE = """
import asyncio, json, os, sys, time
from pathlib import Path
from gpuroom.tui import config as cfg
from gpuroom.tui.fleet.mirror import MirrorState, mirror_job
from gpuroom.tui.transport.link import HostLink

async def main() -> None:
    config = cfg.load(Path(sys.argv[1]))
    host = config.hosts["box"]
    link = HostLink(host, ssh_config=config.ssh_config_path())
    try:
        await link.helper("queue", "ls", timeout_s=60.0)
        go = Path(sys.argv[4])
        while not go.exists():
            time.sleep(0.01)
        out = await mirror_job(link, host, sys.argv[2], sys.argv[3], sys.argv[5],
                               settings=config.settings, state=MirrorState())
    finally:
        await link.close()
    print(json.dumps({"status": out.status, "step": out.step, "detail": out.detail}))

asyncio.run(main())
"""


@pytest.mark.attack("faults", "the room and gpuroom watch pull the same checkpoint into one "
                    ".part at once")
def test_two_processes_mirroring_one_job_at_once_report_no_mismatch(
        sshd_box: Any, dirs: Path) -> None:
    path = write_config(sshd_box, dirs, {"mirror": True}, mirror_bwlimit_kbps=8000)

    async def start() -> tuple[str, Path, str]:
        fleet = Fleet(cfg.load(path))
        try:
            jid, ckpt_dir = await running_job(fleet, await _add(fleet, JOB))
            return jid, ckpt_dir, queue_id(fleet, jid)
        finally:
            await fleet.close()

    jid, ckpt_dir, qid = asyncio.run(start())
    ckpt = save_ckpt(sshd_box, ckpt_dir, 5, numel=3_000_000)  # 12 MB: 1.5 s at the cap
    go = dirs / "go"
    procs = [subprocess.Popen([sys.executable, "-c", MIRROR_ONE, str(path), jid,
                               str(ckpt_dir), str(go), qid], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=dict(os.environ))
             for _ in range(2)]
    time.sleep(3)  # both connected
    go.touch()
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    statuses = sorted(o["status"] for o in outs)
    assert "failed" not in statuses, outs
    assert statuses in (["busy", "home"], ["current", "home"]), outs
    busy = [o for o in outs if o["status"] == "busy"]
    assert all("already being pulled by another gpuroom" in o["detail"] for o in busy)
    home = mirror_dir(cfg.load(path).hosts["box"], jid, qid) / ckpt.name
    assert home.read_bytes() == ckpt.read_bytes()
