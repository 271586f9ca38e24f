"""A real HTTP server on 127.0.0.1 that records what is POSTed to it (the notify_url tests).

``answers`` scripts the status of each request in turn (then 200 for the rest), so a test
can make the first attempts fail and see the retry arrive.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from harness.httpserve import serving


@dataclass
class Hook:
    url: str
    answers: list[int] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)  # each delivered request's path, as sent
    statuses: list[int] = field(default_factory=list)
    got: threading.Event = field(default_factory=threading.Event)


@contextmanager
def webhook(path: str = "/hook/secret-token", answers: list[int] | None = None
            ) -> Iterator[Hook]:
    hook = Hook(url="", answers=list(answers or []))
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            with lock:
                status = hook.answers.pop(0) if hook.answers else 200
                hook.statuses.append(status)
                if status == 200:
                    hook.bodies.append(json.loads(raw))
                    hook.headers.append(dict(self.headers))
                    hook.paths.append(self.path)
                    hook.got.set()
            self.send_response(status)
            if 300 <= status < 400:
                self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as base:
        hook.url = base + path
        yield hook
