"""``gpuroom web``'s server: textual-serve, which starts ``command`` (the room) once per
browser tab and relays its screen over a websocket. Like the transport's other servers and
processes, it lives here; tui/cli/web.py decides what to serve and where.

Whoever drives that websocket has the room's keys (a job added on the ``local`` host runs
on this machine), and any page the user visits can make the browser open it. So every
request, for the page, its assets, downloads and the websocket, passes ``_guard`` first:

- Host and Origin (``http_guard.HostRule``): no DNS-rebound name, no page of another site;
- a secret made at each start (``secrets.token_urlsafe``), never on a command line nor in a
  log: in the URL printed on start (``?token=``, as Jupyter does), then in an HttpOnly,
  SameSite=Strict cookie the page's response sets, which the page's own asset and
  websocket requests carry (textual-serve's page builds the websocket URL itself);
- and before textual-serve starts a room, a bound on the rooms alive at once.

A refused request gets 403 (429 past the bound) and no room process.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import signal
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, TypeAlias
from urllib.parse import urlsplit

from gpuroom.tui.transport.http_guard import HostRule

if TYPE_CHECKING:
    from aiohttp import web

    WebSocket: TypeAlias = web.WebSocketResponse[Literal[True]]  # textual-serve's answer

DEFAULT_MAX_ROOMS = 4
SHUTDOWN_S = 5.0  # what a room has to quit in when the server stops
TOKEN_BYTES = 32
TOKEN_PARAM = "token"

Handler = Callable[["web.Request"], Awaitable["web.StreamResponse"]]


def serve_room(command: str, host: str, port: int, *, max_rooms: int,
               ready: Callable[[str], None]) -> None:
    """Serve until SIGINT or SIGTERM. ``command`` goes to a shell: the caller quotes it once.
    ``ready`` gets the URL to open, token included, once the port is bound."""
    asyncio.run(PrivateServer(command, host, port, max_rooms).run(ready))


def _token_matches(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


class PrivateServer:
    """textual-serve's Server (its routes, page and rooms), guarded as the module says."""

    def __init__(self, command: str, host: str, port: int, max_rooms: int) -> None:
        from aiohttp import web
        from textual_serve.server import Server  # aiohttp and friends: only for this verb

        server = self

        @web.middleware
        async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
            return await server._guard(request, handler)

        class Guarded(Server):
            async def _make_app(self) -> web.Application:
                app: web.Application = await super()._make_app()
                app.middlewares.append(guard)
                return app

            async def on_startup(self, app: web.Application) -> None:
                """Quiet: textual-serve's banner names the URL without its token."""

            async def handle_websocket(self, request: web.Request) -> WebSocket:
                return await server._bounded_room(request, super().handle_websocket)

        self._textual = Guarded(command, host=host, port=port, title="gpuroom")
        self.host = host
        self.port = port
        self.max_rooms = max_rooms
        self.rooms = 0
        self._token = secrets.token_urlsafe(TOKEN_BYTES)
        self._rule = HostRule.for_bind(host, port)

    @property
    def _cookie(self) -> str:
        return f"gpuroom_web_{self.port}"  # two servers on one host name keep apart

    @property
    def public_url(self) -> str:
        """The origin the page names its assets and websocket under."""
        url_host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{url_host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.public_url}/?{TOKEN_PARAM}={self._token}"

    async def run(self, ready: Callable[[str], None]) -> None:
        from aiohttp import web

        self._textual.initialize_logging()
        # No access log: the first request's line carries the token.
        runner = web.AppRunner(await self._textual._make_app(), access_log=None,
                               handle_signals=False, shutdown_timeout=SHUTDOWN_S)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port)
            await site.start()
            # The port picked for a port of 0; no request is read before the next await,
            # so none meets the rule of port 0 (which would refuse it anyway).
            self.port = int(runner.addresses[0][1])
            self._rule = HostRule.for_bind(self.host, self.port)
            self._textual.public_url = self.public_url
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, stop.set)
            ready(self.url)
            await stop.wait()
        finally:
            await runner.cleanup()

    def refusal(self, request: web.Request) -> str | None:
        """Why ``request`` is refused, or None to serve it."""
        from aiohttp import hdrs

        reason = self._rule.refusal(request.headers.get(hdrs.HOST),
                                    request.headers.get(hdrs.ORIGIN))
        if reason is not None:
            return reason
        if not (_token_matches(request.query.get(TOKEN_PARAM), self._token)
                or _token_matches(request.cookies.get(self._cookie), self._token)):
            return "open the URL gpuroom web printed when it started (its token is missing here)"
        return None

    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        from aiohttp import hdrs, web

        reason = self.refusal(request)
        if reason is not None:
            raise web.HTTPForbidden(text=f"gpuroom web: {reason}\n")
        public = urlsplit(self.public_url).netloc
        if (request.path == "/" and not self._rule.any_ip_literal
                and request.headers.get(hdrs.HOST, "").lower() != public):
            # The page names its assets and socket under the printed address, and the cookie
            # belongs to one host name: localhost:PORT goes to 127.0.0.1:PORT first.
            raise web.HTTPTemporaryRedirect(f"{self.public_url}/?{request.query_string}")
        response = await handler(request)
        if not response.prepared:  # the websocket's answer is on its way already
            if TOKEN_PARAM in request.query:
                response.set_cookie(self._cookie, self._token, httponly=True,
                                    samesite="Strict", path="/")
            response.headers[hdrs.REFERRER_POLICY] = "no-referrer"
        return response

    async def _bounded_room(self, request: web.Request,
                            start_room: Callable[[web.Request], Awaitable[WebSocket]]) -> WebSocket:
        from aiohttp import web

        # No await between the test and the count: two sockets cannot both take the last place.
        if self.rooms >= self.max_rooms:
            raise web.HTTPTooManyRequests(
                text=f"gpuroom web: {self.max_rooms} room(s) open already; close a tab, or "
                     "start gpuroom web with a larger --max-rooms\n")
        self.rooms += 1
        try:
            return await start_room(request)
        finally:
            self.rooms -= 1
