"""`gpuroom record` against the real sshd, then the recording loads back.

Loading and pacing without a box are in tests/unit/tui/test_replay.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from gpuroom.tui.cli.main import main
from gpuroom.tui.fleet.replay import load_recording


@pytest.mark.sshd
def test_record_against_the_real_box_then_load_it(sshd_box: Any, tmp_path: Path) -> None:
    config = tmp_path / "hosts.toml"
    config.write_bytes(tomli_w.dumps({
        "settings": {"ssh_config": str(sshd_box.ssh_config)},
        "hosts": {"box": {"ssh": sshd_box.alias, "price_per_hour": 1.5}}}).encode())
    out = tmp_path / "rec.jsonl"
    assert main(["--config", str(config), "record", str(out), "--interval", "0.2",
                 "--polls", "3", "--duration", "60"]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) >= 3
    assert {x["host"] for x in lines} == {"box"} and all(x["state"] == "up" for x in lines)
    assert lines[0]["price_per_hour"] == 1.5
    records = load_recording(out)
    boot = sshd_box.run("cat", "/proc/sys/kernel/random/boot_id").stdout.strip()
    assert records[-1].snapshot is not None
    assert records[-1].snapshot["host"]["boot_id"] == boot
    # Appends: a second session adds to the same file.
    assert main(["--config", str(config), "record", str(out), "--interval", "0.2",
                 "--polls", "1", "--duration", "60"]) == 0
    assert len(load_recording(out)) >= len(records) + 1
