"""``gpuroom web``'s server: textual-serve, which starts ``command`` (the room) once per
browser tab and relays its screen over a websocket. Like the transport's other servers and
processes, it lives here; tui/cli/web.py decides what to serve and where."""

from __future__ import annotations


def serve_room(command: str, host: str, port: int, public_url: str) -> None:
    """Serve until interrupted. ``command`` goes to a shell: the caller quotes it once."""
    from textual_serve.server import Server  # aiohttp and friends: only for this verb

    Server(command, host=host, port=port, title="gpuroom", public_url=public_url).serve()
