"""`gpuroom export` against the test sshd's box (GPU rows from the nvidia-smi replay of real
captures): the real endpoint scraped over HTTP and parsed with prometheus-client's parser."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import gpubox
from prometheus_client.parser import text_string_to_metric_families

WAIT_S = 60.0


@pytest.fixture
def box_config(sshd_box: Any, fixtures: Path, tmp_path: Path) -> Iterator[Path]:
    with gpubox.gpu_box_config(sshd_box, fixtures, tmp_path, "box") as path:
        yield path


def _start(config: Path, tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    return subprocess.Popen(
        [sys.executable, "-m", "gpuroom.tui.cli.main", "--config", str(config), "export",
         *args], stdout=subprocess.PIPE, stderr=(tmp_path / "export.err").open("w"), text=True,
        env=env)


def _samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.mark.sshd
def test_the_scraped_endpoint_carries_the_box_and_its_gpus(box_config: Path,
                                                           tmp_path: Path) -> None:
    proc = _start(box_config, tmp_path, "--listen", "127.0.0.1:0")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("gpuroom export: serving http://127.0.0.1:"), line
        url = line.split()[3]
        deadline = time.monotonic() + WAIT_S
        while True:
            got = _samples(url)
            if ("gpuroom_gpu_temperature_celsius", (("gpu", "1"), ("host", "box"))) in got:
                break
            assert time.monotonic() < deadline, sorted(got)[:20]
            time.sleep(0.3)
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    def one(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted({"host": "box", **labels}.items())))]

    assert one("gpuroom_host_up") == 1.0
    assert one("gpuroom_host_state", state="up") == 1.0
    assert one("gpuroom_host_state", state="down") == 0.0
    assert 0 <= one("gpuroom_host_poll_age_seconds") < WAIT_S
    # The capture: "0, NVIDIA GeForce RTX 3090, 515.65.01, 42, 1 %, 13 %, 24576 MiB, 963 MiB"
    assert one("gpuroom_gpu_temperature_celsius", gpu="0") == 42.0
    assert one("gpuroom_gpu_temperature_celsius", gpu="1") == 37.0
    assert one("gpuroom_gpu_utilization_ratio", gpu="0") == pytest.approx(0.01)
    assert one("gpuroom_gpu_memory_utilization_ratio", gpu="0") == pytest.approx(0.13)
    assert one("gpuroom_gpu_memory_used_bytes", gpu="0") == 963 * 2**20
    assert one("gpuroom_gpu_memory_total_bytes", gpu="1") == 24576 * 2**20
    assert one("gpuroom_gpu_info", gpu="0", model="NVIDIA GeForce RTX 3090") == 1.0
    assert one("gpuroom_gpu_clock_event_reason_active", gpu="0", reason="hw_slowdown") == 0.0
    # Counters carry _total in the exposition, and the queue every state of the vocabulary.
    assert one("gpuroom_kernel_events_total", kind="xid") == 0.0
    assert one("gpuroom_host_polls_total", outcome="ok") >= 1.0
    assert one("gpuroom_queue_jobs", state="running") == 0.0
    mounts = {dict(k[1]).get("path") for k in got if k[0] == "gpuroom_disk_size_bytes"}
    assert mounts and all(one("gpuroom_disk_size_bytes", path=p) > 0 for p in mounts)
    billed = one("gpuroom_billed_seconds")
    assert one("gpuroom_cost_dollars") == pytest.approx(2.5 * billed / 3600, rel=0.05)


@pytest.mark.attack("bad configuration", "export --listen on a public address without saying so")
def test_a_non_loopback_listen_needs_allow_remote(tmp_path: Path) -> None:
    config = tmp_path / "hosts.toml"
    config.write_text("")
    proc = _start(config, tmp_path, "--listen", "0.0.0.0:0")
    out, _ = proc.communicate(timeout=60)
    err = (tmp_path / "export.err").read_text()
    assert proc.returncode == 2, (out, err)
    assert "not a loopback address" in err and "--allow-remote" in err
