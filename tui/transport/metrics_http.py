"""``gpuroom export``'s HTTP endpoint: prometheus-client's own server and exposition.

The server answers in its own thread; each scrape asks the event loop that owns the fleet
for the metrics (``compute`` runs there), so a scrape never reads a host while a poll
writes it, and the poll age is the scrape's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector, CollectorRegistry

from gpuroom.tui.present.metrics import Family

SCRAPE_TIMEOUT_S = 10.0


class FleetCollector(Collector):
    def __init__(self, loop: asyncio.AbstractEventLoop,
                 compute: Callable[[], list[Family]]) -> None:
        self._loop = loop
        self._compute = compute

    async def _families(self) -> list[Family]:
        return self._compute()

    def collect(self) -> Iterator[Metric]:
        families = asyncio.run_coroutine_threadsafe(self._families(), self._loop).result(
            SCRAPE_TIMEOUT_S)
        yield from to_metrics(families)


def to_metrics(families: Iterable[Family]) -> Iterator[Metric]:
    for fam in families:
        metric: GaugeMetricFamily | CounterMetricFamily
        if fam.kind == "counter":
            metric = CounterMetricFamily(fam.name, fam.help, labels=fam.labels)
        else:
            metric = GaugeMetricFamily(fam.name, fam.help, labels=fam.labels)
        for labels, value in fam.samples:
            metric.add_metric(list(labels), value)
        yield metric


class MetricsServer:
    """prometheus-client's HTTP server on ``host:port`` (0: a free one) for ``collector``."""

    def __init__(self, host: str, port: int, collector: Collector) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        self._server: Any
        self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        self.host = host
        self.port = int(self._server.server_port)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
