"""Label sets of the exporter (tui/present/metrics.py) stay unique whatever the box names, so
the exposition parses (Prometheus text and OpenMetrics): duplicates are dropped and counted,
disks are one series per filesystem, and a label value is valid UTF-8."""

from __future__ import annotations

from typing import Any

from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.present.metrics import fleet_families
from gpuroom.tui.transport.metrics_http import to_metrics

NOW = 1_790_000_000.0


def _host(snapshot: dict[str, Any]) -> HostState:
    h = HostState(name="b", profile="generic-ssh")
    h.snapshot, h.state, h.last_ok, h.last_try = snapshot, LinkState.UP, NOW, NOW
    return h


def _expositions(h: HostState) -> tuple[str, str]:
    families = fleet_families([h], [], [], NOW, idle_for={}, kernel={})

    class Fixed:
        def collect(self):  # type: ignore[no-untyped-def]
            return to_metrics(families)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())  # type: ignore[arg-type]
    return generate_latest(registry).decode(), generate_openmetrics(registry).decode()


def _disk(path: str, device: int) -> dict[str, Any]:
    return {"path": path, "device": device, "total_bytes": 100, "free_bytes": 40,
            "bfree_bytes": 50, "total_inodes": 10, "free_inodes": 5, "ffree_inodes": 5}


def test_a_surrogate_in_a_gpu_name_and_duplicate_indexes_still_parse() -> None:
    gpu = {"index": 0, "name": "bad \ud800 name", "temp_c": 40}
    h = _host({"schema": 1, "host": {"uptime_s": 10, "time": NOW},
               "gpus": [gpu, {**gpu, "name": "other", "temp_c": 99}],
               "disks": [_disk("~", 1), _disk("/home/u", 1), _disk("/", 1),
                         _disk("/x\x1b[2J", 2), _disk("/x", 3)]})
    text, om = _expositions(h)
    samples = [(s.name, s.labels, s.value)
               for f in text_string_to_metric_families(text) for s in f.samples]
    assert [(s.name, s.labels) for f in om_parse(om) for s in f.samples]
    temps = [v for n, _, v in samples if n == "gpuroom_gpu_temperature_celsius"]
    assert temps == [40.0]  # the first GPU "0" is kept, the second dropped
    paths = [lab["path"] for n, lab, _ in samples if n == "gpuroom_disk_size_bytes"]
    assert paths == ["~", "/x"]
    dropped = {lab["reason"]: v for n, lab, v in samples if n == "gpuroom_dropped_series"}
    assert dropped["duplicate_gpu"] >= 2 and dropped["duplicate_path"] == 5
    assert dropped["duplicate_labels"] == 0


def test_a_host_name_with_escapes_is_an_inert_label() -> None:
    h = _host({"schema": 1, "host": {"uptime_s": 10, "time": NOW}})
    h.name = "b\x1b]52;c;ZXZpbA==\x07"
    text, om = _expositions(h)
    assert "\x1b" not in text + om and "\x07" not in text + om
    assert [s.labels["host"] for f in om_parse(om) for s in f.samples
            if s.name == "gpuroom_host_up"] == ["b"]
