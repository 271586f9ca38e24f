"""`gpuroom export`'s endpoint answers only under its own address: the real server
(tui/transport/metrics_http.py) on 127.0.0.1, asked over a raw HTTP connection."""

from __future__ import annotations

import http.client
from collections.abc import Iterator

import pytest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuroom.tui.transport.metrics_http import MetricsServer


class OneGauge(Collector):
    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("gpuroom_host_up", "whether the host answers", value=1.0)


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    server = MetricsServer("127.0.0.1", 0, OneGauge())
    try:
        yield server
    finally:
        server.close()


def get(server: MetricsServer, host: str, path: str = "/metrics") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": host})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.mark.attack("trust", "DNS rebinding: a page of evil.example re-pointed at 127.0.0.1 "
                             "scrapes gpuroom export's /metrics with Host: evil.example:PORT")
def test_a_rebinding_host_gets_403_and_no_metrics(server: MetricsServer) -> None:
    port = server.port
    for host in (f"evil.example:{port}", f"evil.example.:{port}", f"evil@127.0.0.1:{port}",
                 f"127.0.0.1:{port + 1}", "evil.example", ""):
        for path in ("/metrics", "/", "/favicon.ico"):
            status, body = get(server, host, path)
            assert status == 403, (host, path)
            assert b"gpuroom_host_up" not in body


def test_its_own_addresses_get_the_metrics(server: MetricsServer) -> None:
    for host in (f"127.0.0.1:{server.port}", f"localhost:{server.port}",
                 f"LOCALHOST:{server.port}", f"[::1]:{server.port}"):
        status, body = get(server, host)
        assert status == 200, host
        assert b"gpuroom_host_up 1.0" in body
