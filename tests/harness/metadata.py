"""A real HTTP server on 127.0.0.1 that answers like a cloud's instance metadata endpoint
(remote/preempt.py's docstring has each cloud's documented path, headers and bodies).

It refuses what the real one refuses (AWS: no IMDSv2 token; GCP: no Metadata-Flavor; Azure:
no Metadata header), so a check that forgets a header fails here as it would on the cloud.
``notice`` switches a preemption on, ``garbage`` garbles AWS's answer, ``asked`` lists the
requests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from harness.httpserve import serving

TOKEN = "AQAEAFakeTokenForTests=="
AWS_NOTICE = {"action": "terminate", "time": "2030-01-01T00:02:00Z"}
AZURE_NOTICE = {"EventId": "A123BC45-1234-5678-AB90-ABCDEF123456", "EventStatus": "Scheduled",
                "EventType": "Preempt", "ResourceType": "VirtualMachine",
                "Resources": ["myspotvm"], "NotBefore": "Tue, 01 Jan 2030 00:00:30 GMT",
                "Description": "", "EventSource": "Platform", "DurationInSeconds": -1}
AZURE_REBOOT = {**AZURE_NOTICE, "EventType": "Reboot", "EventId": "B1"}


@dataclass
class Metadata:
    cloud: str
    url: str = ""
    notice: bool = False
    garbage: bytes | None = None  # when set, the notice's 200 carries these bytes instead
    aws_time: str = AWS_NOTICE["time"]  # when AWS says it takes the box
    asked: list[str] = field(default_factory=list)


def _handler(meta: Metadata) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, code: int, body: bytes = b"", kind: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_PUT(self) -> None:
            meta.asked.append("PUT " + self.path)
            if meta.cloud == "aws" and self.path == "/latest/api/token" and \
                    self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                self._send(200, TOKEN.encode())
            else:
                self._send(400)

        def do_GET(self) -> None:
            meta.asked.append("GET " + self.path)
            h = self.headers
            if meta.cloud == "aws" and self.path == "/latest/meta-data/spot/instance-action":
                if h.get("X-aws-ec2-metadata-token") != TOKEN:
                    self._send(401)  # IMDSv2 only: a request without the token is refused
                elif meta.notice:
                    doc = {**AWS_NOTICE, "time": meta.aws_time}
                    self._send(200, meta.garbage or json.dumps(doc).encode(),
                               "application/json")
                else:
                    self._send(404, b"<?xml ...>Not Found")
            elif meta.cloud == "gcp" and self.path == "/computeMetadata/v1/instance/preempted":
                if h.get("Metadata-Flavor") != "Google":
                    self._send(403)
                else:
                    self._send(200, b"TRUE" if meta.notice else b"FALSE")
            elif meta.cloud == "azure" and \
                    self.path == "/metadata/scheduledevents?api-version=2020-07-01":
                if h.get("Metadata") != "true":
                    self._send(400)
                else:
                    events = [AZURE_REBOOT] + ([AZURE_NOTICE] if meta.notice else [])
                    doc = {"DocumentIncarnation": 2 if meta.notice else 1, "Events": events}
                    self._send(200, json.dumps(doc).encode(), "application/json")
            else:
                self._send(404)

    return Handler


@contextmanager
def metadata_server(cloud: str) -> Iterator[Metadata]:
    meta = Metadata(cloud)
    with serving(_handler(meta)) as meta.url:
        yield meta
