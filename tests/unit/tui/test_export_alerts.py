"""`gpuroom export` alerts too: a poll outcome with a new critical item reaches notify_url
(a real HTTP server on 127.0.0.1) once, through the same AlertGate as the room."""

from __future__ import annotations

import asyncio
from pathlib import Path

from harness.webhook import webhook
from paths import DATA

from gpuroom.tui import config as cfg
from gpuroom.tui.cli.export import Exporter
from gpuroom.tui.fleet.replay import load_recording
from gpuroom.tui.model import LinkState


async def test_each_new_critical_item_is_posted_once(tmp_path: Path) -> None:
    records = load_recording(DATA / "doctor" / "inode_full.jsonl")
    host = records[0].host
    with webhook() as hook:
        path = tmp_path / "hosts.toml"
        path.write_text(f'[settings]\nnotify_url = "{hook.url}"\n\n[hosts.{host}]\nssh = "x"\n')
        exporter = Exporter(cfg.load(path), clock=lambda: records[-1].t + 10)
        state = exporter.fleet.state(host)
        # The fleet's poll outcomes, as Fleet.poll_host leaves them, one after another.
        for t in [r.t for r in records] + [records[-1].t + 5, records[-1].t + 10]:
            r = next(x for x in reversed(records) if x.t <= t)
            state.snapshot, state.state = r.snapshot, LinkState(r.state)
            state.last_ok = state.last_try = t
            exporter.changed(host)
        await asyncio.wait_for(exporter.drain(), 60)
        await exporter.fleet.close()
    assert [(b["host"], b["id"], b["severity"]) for b in hook.bodies] == [
        (host, "U7", "critical")]
