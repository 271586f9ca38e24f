"""`gpuroom web` is private to the user who started it: the real server on 127.0.0.1 (the CLI
as a process, as the user runs it) refuses a page of another site, a client without the
token it printed and a DNS-rebound Host with 403, and more sockets than its bound of rooms
with 429, and none of them starts a room process (counted in /proc as the server's
children). The right token from the same origin still gets a room."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest

WAIT_S = 60.0
SETTLE_S = 1.5  # long enough for a room that was wrongly started to show up in /proc
SAMPLE_S = 0.02  # a room lives far longer than this, even one whose socket closed at once
ROOM_TEXT = "deadbox"  # the configured host's name, which the room's hosts table draws


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (the rooms textual-serve started)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # it ended while we looked
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


@dataclass
class Web:
    proc: subprocess.Popen[str]
    url: str  # as printed, with the token

    @property
    def port(self) -> int:
        return int(urlsplit(self.url).port or 0)

    @property
    def token(self) -> str:
        return parse_qs(urlsplit(self.url).query)["token"][0]

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ws(self, query: str = "") -> str:
        return f"ws://127.0.0.1:{self.port}/ws?width=80&height=24{query}"

    def rooms(self) -> int:
        return len(children(self.proc.pid))

    @contextmanager
    def most_rooms(self) -> Iterator[list[int]]:
        """The most rooms alive at once while the block ran (and SETTLE_S after), sampled
        from /proc all along: a room started and ended between two looks is still seen."""
        most = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(SAMPLE_S):
                most[0] = max(most[0], self.rooms())

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            yield most
            time.sleep(SETTLE_S)
        finally:
            done.set()
            sampler.join()


@pytest.fixture
def room_config(tmp_path: Path) -> Path:
    """One host whose ssh goes nowhere (a closed port): the room starts, draws it STALE and
    costs no box."""
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text("Host deadbox\n  HostName 127.0.0.1\n  Port 1\n")
    config = tmp_path / "hosts.toml"
    config.write_text(f'[settings]\nssh_config = "{ssh_config}"\n\n'
                      '[hosts.deadbox]\nssh = "deadbox"\n')
    config.chmod(0o600)
    return config


@pytest.fixture
def web(room_config: Path, tmp_path: Path) -> Iterator[Web]:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    said = tmp_path / "web.out"
    # Its own session, so the rooms it starts end with it.
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuroom.tui.cli.main", "--config", str(room_config), "web",
         "--listen", "127.0.0.1:0", "--max-rooms", "1"], stdout=said.open("w"),
        stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + WAIT_S
        while not said.read_text().endswith("\n"):
            assert time.monotonic() < deadline and proc.poll() is None, said.read_text()
            time.sleep(0.1)
        line = said.read_text().splitlines()[0]
        assert line.startswith("gpuroom web: serving the room at http://127.0.0.1:"), line
        server = Web(proc, line.split()[6])
        yield server
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    # Said once, to the user who started it; never logged with the requests that carried it.
    assert said.read_text().count(server.token) == 1, said.read_text()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    # unsafe=True: the jar keeps cookies of an IP address, as a browser does.
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as s:
        yield s


async def refused_ws(session: aiohttp.ClientSession, url: str, **kwargs: object) -> int:
    """The HTTP status a websocket handshake was refused with (fails if it was accepted)."""
    with pytest.raises(aiohttp.WSServerHandshakeError) as err:
        async with session.ws_connect(url, **kwargs):  # type: ignore[arg-type]
            pass
    return err.value.status


async def room_screen(ws: aiohttp.ClientWebSocketResponse) -> str:
    """What the room drew, until it shows the configured host."""
    screen = ""
    deadline = time.monotonic() + WAIT_S
    while ROOM_TEXT not in screen:
        msg = await ws.receive(timeout=max(0.1, deadline - time.monotonic()))
        if msg.type == aiohttp.WSMsgType.BINARY:
            screen += msg.data.decode(errors="replace")
        assert msg.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT), msg
    return screen


@pytest.mark.slow
@pytest.mark.attack("trust", "a page of another site opens the web room's websocket "
                             "(Origin: http://evil.example), with the token even")
async def test_a_foreign_origin_gets_403_and_no_room(web: Web,
                                                     session: aiohttp.ClientSession) -> None:
    with web.most_rooms() as most:
        for origin in ("http://evil.example", f"http://127.0.0.1:{web.port + 1}", "null",
                       f"https://127.0.0.1:{web.port}"):
            assert await refused_ws(session, web.ws(f"&token={web.token}"),
                                    origin=origin) == 403
            async with session.get(f"{web.url}", headers={"Origin": origin}) as page:
                assert page.status == 403
    assert most == [0]


@pytest.mark.slow
@pytest.mark.attack("trust", "a client without the printed token, or with a wrong one, asks "
                             "for the web room's page, its assets and its websocket")
async def test_no_token_or_a_wrong_one_gets_403_and_no_room(
        web: Web, session: aiohttp.ClientSession) -> None:
    base = f"http://127.0.0.1:{web.port}"
    wrong = web.token[:-1] + ("A" if web.token[-1] != "A" else "B")
    with web.most_rooms() as most:
        for query in ("", f"?token={wrong}", "?token="):
            for path in ("/", "/static/js/textual.js", "/download/x"):
                async with session.get(f"{base}{path}{query}") as response:
                    assert response.status == 403, (path, query)
            assert await refused_ws(session, web.ws(query.replace("?", "&")),
                                    origin=web.origin) == 403
        async with session.get(base, cookies={f"gpuroom_web_{web.port}": wrong}) as page:
            assert page.status == 403
    assert most == [0]


@pytest.mark.slow
@pytest.mark.attack("trust", "DNS rebinding: a page of evil.example re-pointed at 127.0.0.1 "
                             "asks the web room with Host: evil.example:PORT and the token")
async def test_a_rebinding_host_gets_403_and_no_room(web: Web,
                                                     session: aiohttp.ClientSession) -> None:
    with web.most_rooms() as most:
        for host in (f"evil.example:{web.port}", f"127.0.0.1.evil.example:{web.port}",
                     f"evil@127.0.0.1:{web.port}", f"127.0.0.1:{web.port + 1}", ""):
            headers = {"Host": host}
            async with session.get(web.url, headers=headers) as page:
                assert page.status == 403, host
            async with session.get(f"http://127.0.0.1:{web.port}/static/js/textual.js"
                                   f"?token={web.token}", headers=headers) as asset:
                assert asset.status == 403, host
            # The page of the rebound name is, to the browser, of that name's origin.
            assert await refused_ws(session, web.ws(f"&token={web.token}"), headers=headers,
                                    origin=f"http://{host}") == 403, host
    assert most == [0]


@pytest.mark.slow
@pytest.mark.attack("trust", "more websockets than the bound of rooms, each with the token: "
                             "every one would start a whole room process")
async def test_sockets_past_the_bound_get_429_and_start_nothing(
        web: Web, session: aiohttp.ClientSession) -> None:
    url = web.ws(f"&token={web.token}")
    async with session.ws_connect(url, origin=web.origin) as first:
        await room_screen(first)
        with web.most_rooms() as most:
            for _ in range(4):
                assert await refused_ws(session, url, origin=web.origin) == 429
        assert most == [1]
    # The room ends with its socket, and its place is free again.
    deadline = time.monotonic() + WAIT_S
    while web.rooms():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    async with session.ws_connect(url, origin=web.origin) as again:
        await room_screen(again)


@pytest.mark.slow
async def test_the_printed_url_serves_the_page_and_its_room_as_a_browser_loads_them(
        web: Web, session: aiohttp.ClientSession) -> None:
    async with session.get(web.url, headers={"Origin": web.origin}) as page:
        assert page.status == 200
        html = await page.text()
    assert f'data-session-websocket-url="ws://127.0.0.1:{web.port}/ws"' in html
    assert web.token not in html
    # The page set its cookie: the assets and the socket go without the token in the URL.
    async with session.get(f"{web.origin}/static/js/textual.js") as asset:
        assert asset.status == 200
    async with session.ws_connect(web.ws(), origin=web.origin) as ws:
        assert ROOM_TEXT in await room_screen(ws)
        assert web.rooms() == 1


@pytest.mark.slow
async def test_localhost_is_sent_to_the_address_the_page_was_served_for(
        web: Web, session: aiohttp.ClientSession) -> None:
    """The page names its assets and socket under the printed address, so a visit under
    another loopback name goes there first (the cookie is per host name)."""
    url = web.url.replace("127.0.0.1", "localhost")
    async with session.get(url, allow_redirects=False) as page:
        assert page.status == 307
        assert page.headers["Location"] == web.url
