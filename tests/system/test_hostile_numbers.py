"""Numbers a box forges, over the real sshd: the helper's answer is a real snapshot of the GPU
box (the nvidia-smi replay of real captures) with a few values changed, served by a stand-in
interpreter as anything running as the box's user could serve it.

/metrics must parse whatever the box says (Prometheus text and OpenMetrics), with one series
per GPU and per filesystem; an uptime or clock that cannot be true is a finding about the box
and never money or a negative uptime.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import gpubox
from harness.hostile import TERMINAL_CONTROLS
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from gpuroom.tui.cli.main import main
from gpuroom.tui.config import HostConfig
from gpuroom.tui.transport.link import HostLink

pytestmark = pytest.mark.sshd

WAIT_S = 60.0
# The stand-in: the `serve` channel answers each request with ~/answer; every other call (the
# link's hash check, helper subcommands) runs the GPU box's real interpreter ($REAL).
SERVE_ANSWER = """#!/bin/sh
if [ "$3" = serve ]; then  # $1 is -I, $2 the helper
  while IFS= read -r request; do cat "$HOME/answer"; printf '\\n'; done
  exit 0
fi
exec {real} "$@"
"""


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


class ForgedBox:
    def __init__(self, box: Any, real: Path, fake: Path) -> None:
        self.box, self.real, self.fake = box, real, fake

    async def snapshot(self) -> dict[str, Any]:
        """A real snapshot of the GPU box, through its real helper."""
        link = HostLink(HostConfig(name="box", ssh=self.box.alias, python=str(self.real)),
                        ssh_config=self.box.ssh_config)
        try:
            return await link.poll({})
        finally:
            await link.close()

    def serve(self, snapshot: dict[str, Any]) -> None:
        (self.box.home / "answer").write_text(json.dumps({"ok": True, "snapshot": snapshot}))

    def config(self, tmp_path: Path, price_per_hour: float = 2.5) -> Path:
        import tomli_w

        path = tmp_path / "hosts.toml"
        path.write_bytes(tomli_w.dumps({
            "settings": {"ssh_config": str(self.box.ssh_config), "poll_interval_s": 0.5},
            "hosts": {"box": {"ssh": self.box.alias, "python": str(self.fake),
                              "price_per_hour": price_per_hour}}}).encode())
        path.chmod(0o600)
        return path


@pytest.fixture
def forged(sshd_box: Any, fixtures: Path) -> Iterator[ForgedBox]:
    with gpubox.gpu_python(sshd_box, fixtures, "gpuroom-forged-test") as real:
        fake = sshd_box.home / "python-forged"
        fake.write_text(SERVE_ANSWER.format(real=real))
        fake.chmod(0o755)
        os.chown(fake, sshd_box.identity.user.uid, sshd_box.identity.user.gid)
        yield ForgedBox(sshd_box, real, fake)


# ----------------------------------------------------------------------------- /metrics

def _scrape(url: str, openmetrics: bool) -> str:
    headers = {"Accept": "application/openmetrics-text; version=1.0.0"} if openmetrics else {}
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(response.read().decode())


def _exposition(config: Path, tmp_path: Path) -> tuple[str, str]:
    """The endpoint's text and OpenMetrics expositions once the box's GPUs are in them."""
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuroom.tui.cli.main", "--config", str(config), "export",
         "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
        stderr=(tmp_path / "export.err").open("w"), text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("gpuroom export: serving http://"), (
            line, (tmp_path / "export.err").read_text())
        url = line.split()[3]
        deadline = time.monotonic() + WAIT_S
        while 'gpuroom_gpu_temperature_celsius{' not in (text := _scrape(url, False)):
            assert time.monotonic() < deadline, text[-2000:]
            time.sleep(0.3)
        return text, _scrape(url, True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _samples(families: Any) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, dict(s.labels), s.value) for fam in families for s in fam.samples]


@pytest.mark.attack("bad answers", "/metrics from a box that reports two GPUs with index 0, two "
                    "mount paths one control character apart and one disk under three paths: "
                    "both parsers read the exposition, one series per GPU and per filesystem, "
                    "the drops counted")
async def test_metrics_parse_with_duplicate_gpus_and_paths(forged: ForgedBox,
                                                           tmp_path: Path) -> None:
    real = await forged.snapshot()
    assert [g["index"] for g in real["gpus"]] == [0, 1], real["gpus"]
    snap = copy.deepcopy(real)
    snap["gpus"][1]["index"] = 0  # two GPUs "0"
    disks = [d for d in snap["disks"] if not d.get("error")]
    assert disks, snap["disks"]
    home = disks[0]
    # One filesystem under three names, as ~, the home path and / often are.
    snap["disks"] = [{**home, "path": p} for p in ("~", "/home/u", "/")] + [
        # Two filesystems whose names differ only by a control character.
        {**home, "path": "/data\x01", "device": 900001},
        {**home, "path": "/data\x02", "device": 900002}]
    forged.serve(snap)
    text, om = _exposition(forged.config(tmp_path), tmp_path)

    plain = _samples(text_string_to_metric_families(text))
    strict = _samples(openmetrics_families(om))  # raises on a repeated label set
    for said in (text, om):
        for c in (*TERMINAL_CONTROLS, "\x01", "\x02"):
            assert c not in said, repr(c)

    def series(samples: list[tuple[str, dict[str, str], float]], name: str) -> list[Any]:
        return [(labels, value) for n, labels, value in samples if n == name]

    for samples in (plain, strict):
        temps = series(samples, "gpuroom_gpu_temperature_celsius")
        assert [labels["gpu"] for labels, _ in temps] == ["0"], temps
        assert len(series(samples, "gpuroom_gpu_info")) == 1
        sizes = series(samples, "gpuroom_disk_size_bytes")
        # ~ and its two aliases are one filesystem; /data\x01 and /data\x02 are two, but
        # read alike once sanitized: the second is dropped, not exported twice.
        assert sorted(labels["path"] for labels, _ in sizes) == ["/data", "~"], sizes
        dropped = {labels["reason"]: value
                   for labels, value in series(samples, "gpuroom_dropped_series")}
        assert dropped["duplicate_gpu"] > 0 and dropped["duplicate_path"] > 0, dropped


# ---------------------------------------------------------------------- box numbers

DAY = 86400.0
YEAR = 365 * DAY


def _forge_clock(snap: dict[str, Any], case: str) -> dict[str, Any]:
    host = snap["host"]
    if case == "negative uptime":
        host["uptime_s"] = -1e9
    elif case == "uptime of a century":
        host["uptime_s"] = 100 * YEAR
    else:  # the box's clock years behind the jump host's
        host["time"] = host["time"] - 5 * YEAR
    return snap


def _verbs(config: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, tuple[int, str]]:
    said = {}
    for verb in (["status"], ["doctor"], ["doctor", "--json"]):
        rc = main(["--config", str(config), *verb])
        out, err = capsys.readouterr()
        assert rc != 70 and "Traceback" not in out + err and "internal error" not in err, (
            verb, out, err)
        said[" ".join(verb)] = (rc, out + err)
    return said


@pytest.mark.attack("bad answers", "a box whose uptime is -1e9 s or a century, or whose clock is "
                    "years behind: a finding about the box's clock in the "
                    "doctor, no negative uptime, billed time or money anywhere")
@pytest.mark.parametrize("case", ["negative uptime", "uptime of a century", "clock years behind"])
async def test_impossible_uptime_or_clock_is_a_finding_never_money(
        forged: ForgedBox, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        case: str) -> None:
    import asyncio

    forged.serve(_forge_clock(await forged.snapshot(), case))
    config = forged.config(tmp_path)
    said = await asyncio.to_thread(_verbs, config, capsys)
    status, doctor = said["status"][1], said["doctor"][1]
    # No hours of uptime that cannot be, no money from them.
    assert not re.search(r"-\d+(\.\d+)?h", status) and "-277777" not in status, status
    assert "implausible" in doctor and "rented_at" in doctor, doctor
    assert "$-" not in doctor and "billed over" not in doctor, doctor
    report = json.loads(said["doctor --json"][1][said["doctor --json"][1].index("{"):])
    assert not [c for c in report["clocks"] if c["kind"] == "spend"], report["clocks"]
    titles = [f["title"] for f in report["findings"] if f["host"] == "box"]
    assert any(t.startswith("the box's clock/uptime is implausible") for t in titles), titles


