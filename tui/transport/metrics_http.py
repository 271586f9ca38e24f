"""``gpuroom export``'s HTTP endpoint: prometheus-client's own server and exposition.

The server answers in its own thread; each scrape asks the event loop that owns the fleet
for the metrics (``compute`` runs there), so a scrape never reads a host while a poll
writes it, and the poll age is the scrape's.

A scrape whose Host header is not this server's address gets 403 (``http_guard``): a web
page re-pointed at 127.0.0.1 by DNS rebinding would otherwise read the fleet (host names,
prices, what runs where). There is no token: the metrics only read the fleet, they change
nothing, and a Prometheus scrape config carries no secret; another machine reaching the
address at all is what ``--allow-remote`` asks for, and says on start.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app
from prometheus_client.registry import Collector, CollectorRegistry

from gpuroom.tui.present.metrics import Family
from gpuroom.tui.transport.http_guard import HostRule

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

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


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """A scrape every few seconds is not news."""


def host_guarded(app: WSGIApplication, rule: HostRule) -> WSGIApplication:
    """``app``, answering 403 to a request whose Host is not this server's."""

    def guarded(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        reason = rule.refusal(environ.get("HTTP_HOST"), None)
        if reason is not None:
            start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8")])
            return [f"{reason}\n".encode()]
        return app(environ, start_response)

    return guarded


class MetricsServer:
    """prometheus-client's exposition on ``host:port`` (0: a free one) for ``collector``,
    in its threading WSGI server, behind the Host check (prometheus-client's own
    ``start_http_server`` takes no wrapped app)."""

    def __init__(self, host: str, port: int, collector: Collector) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)

        class Server(ThreadingWSGIServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        exposition = make_wsgi_app(registry)
        self._server = make_server(host, port, exposition, Server, handler_class=_QuietHandler)
        self.host = host
        self.port = int(self._server.server_port)
        # The rule needs the port a port of 0 was given; nothing is served before the thread
        # below starts, so no request ever meets the unguarded app.
        self._server.set_app(host_guarded(exposition, HostRule.for_bind(host, self.port)))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="gpuroom-metrics")
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
