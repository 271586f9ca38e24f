"""``[settings] notify_url``: one critical item POSTed as JSON to an ntfy topic or a webhook.

Bounded: each attempt has a timeout, a failed attempt is retried a few times with a growing
pause, a refused request (4xx but 429) is not retried, and ``UrlNotifier`` keeps at most
``MAX_IN_FLIGHT`` alerts in flight. The URL may carry a token (ntfy
topics and webhooks often do), so errors name only its scheme, host and port, never its path.
A redirect is an error: urllib would turn the POST into a GET and drop the alert silently.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.webhook_url import UrlRefused, request_url, where

ATTEMPT_TIMEOUT_S = 10.0
ATTEMPTS = 3
FIRST_PAUSE_S = 1.0
MAX_IN_FLIGHT = 20
FIX = "check [settings] notify_url in hosts.toml and that the server answers a POST there"


class NotifyError(GpuroomError):
    """The alert did not reach ``notify_url``."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises HTTPError for the 3xx


_OPENER = urllib.request.build_opener(_NoRedirect)


def _post_once(url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> int:
    request = urllib.request.Request(url, data=body, method="POST", headers=dict(headers))
    with _OPENER.open(request, timeout=timeout_s) as response:
        response.read(4096)
        return int(response.status)


def _header(text: str) -> str:
    # HTTP header values are latin-1 with no control characters: keep printable ASCII only.
    return "".join(c if " " <= c <= "~" else "?" for c in text)[:200]


async def post_alert(url: str, alert: Mapping[str, str], *, attempts: int = ATTEMPTS,
                     timeout_s: float = ATTEMPT_TIMEOUT_S, first_pause_s: float = FIRST_PAUSE_S,
                     sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> int:
    """POST ``alert`` (host, id, severity, text, fix) as JSON; the number of attempts it
    took. Raises NotifyError after ``attempts`` failures or on a refusal."""
    try:
        target = request_url(url)
    except UrlRefused as exc:
        raise NotifyError(f"notify_url {where(url)} {exc.reason}; the alert was not sent",
                          exc.fix) from None
    body = json.dumps(dict(alert)).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "gpuroom",
               # ntfy shows these as the notification's title and priority; webhooks ignore them.
               "Title": _header(f"gpuroom {alert.get('severity', '')}: {alert.get('host', '')}"),
               "Priority": "urgent"}
    why = ""
    for n in range(1, attempts + 1):
        try:
            await asyncio.to_thread(_post_once, target, body, headers, timeout_s)
            return n
        except urllib.error.HTTPError as exc:
            why = f"HTTP {exc.code}"
            if 300 <= exc.code < 400:
                raise NotifyError(f"notify_url {where(url)} redirected ({why}); the alert was "
                                  "not delivered", "give the final URL in notify_url") from None
            if 400 <= exc.code < 500 and exc.code != 429:
                raise NotifyError(f"notify_url {where(url)} refused the alert ({why})",
                                  FIX) from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            why = sanitize_line(str(reason))[:200] or type(reason).__name__
        except (http.client.HTTPException, ValueError) as exc:
            # A server that answers no HTTP (BadStatusLine), or a URL urllib will not send:
            # named by class only, since either message may quote the URL or the server.
            why = type(exc).__name__
        if n < attempts:
            await sleep(first_pause_s * 2 ** (n - 1))
    raise NotifyError(f"notify_url {where(url)}: the alert was not delivered after {attempts} "
                      f"attempt(s) ({why})", FIX)


class UrlNotifier:
    """The alerts of one ``notify_url``, bounded: at most ``max_in_flight`` waiting or being
    sent; one more is dropped and said, so a fleet-wide outage with a dead server cannot pile
    up posts (each takes up to ``ATTEMPTS`` x ``ATTEMPT_TIMEOUT_S`` plus pauses)."""

    def __init__(self, url: str, *, max_in_flight: int = MAX_IN_FLIGHT, **post: Any) -> None:
        self.url = url
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self._post = post

    async def send(self, alert: Mapping[str, str]) -> None:
        """POST ``alert``; raises NotifyError when it was not delivered or was dropped."""
        if self.in_flight >= self.max_in_flight:
            raise NotifyError(f"notify_url {where(self.url)}: {self.in_flight} alert(s) still "
                              f"being sent; the one for {alert.get('host')} "
                              f"{alert.get('id')} was dropped", FIX)
        self.in_flight += 1
        try:
            await post_alert(self.url, alert, **self._post)
        finally:
            self.in_flight -= 1
