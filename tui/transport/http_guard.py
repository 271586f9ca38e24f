"""Who may talk to gpuroom's own HTTP servers (``gpuroom web`` and ``gpuroom export``).

Binding to loopback keeps other machines out, not other web sites: any page the user opens
can make the browser send requests to 127.0.0.1. Two rules close that door.

- Host (DNS rebinding): a page of evil.example whose name the attacker then points at
  127.0.0.1 is, to the browser, the same origin as evil.example, so it may read our answers.
  Only the Host header it sends (``evil.example:PORT``) tells us, so a request is served only
  when its Host names this server: the bound address and port, for a loopback bind also
  127.0.0.1, localhost and ::1, for a wildcard bind (``--allow-remote``) any IP literal or
  this machine's host name (no attacker's page can have an IP literal of ours as its origin).
- Origin (cross-site requests): browsers let any page open a websocket to any address and
  only say who asks in ``Origin``. A request that carries one is served only when it is this
  very server's origin, ``http://`` + its Host; clients that are not browsers send none.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
WILDCARDS = frozenset({"0.0.0.0", "::"})
# A host name, or an IPv6 literal in brackets, then an optional port: nothing else (no
# userinfo, path or spaces) may hide a second name in the header.
_HOST_HEADER = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(?::([0-9]{1,5}))?")
HTTP_DEFAULT_PORT = 80


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class HostRule:
    """The Host names and the port under which a server bound to one address is reached."""

    names: frozenset[str]  # lower case, IPv6 without brackets
    port: int
    any_ip_literal: bool = False

    @classmethod
    def for_bind(cls, host: str, port: int) -> HostRule:
        host = host.lower()
        if host in WILDCARDS:
            return cls(LOOPBACK_NAMES | {socket.gethostname().lower()}, port, any_ip_literal=True)
        if host == "localhost" or (_is_ip(host) and ipaddress.ip_address(host).is_loopback):
            return cls(LOOPBACK_NAMES | {host}, port)
        return cls(frozenset({host}), port)

    def allows_host(self, header: str | None) -> bool:
        """Whether a Host header names this server (the browser omits port 80)."""
        match = _HOST_HEADER.fullmatch((header or "").lower())
        if match is None:
            return False
        name, port = match.group(1).strip("[]"), match.group(2)
        if int(port or HTTP_DEFAULT_PORT) != self.port:
            return False
        return name in self.names or (self.any_ip_literal and _is_ip(name))

    def refusal(self, host: str | None, origin: str | None) -> str | None:
        """Why a request with these Host and Origin headers is refused, or None to serve it."""
        if not self.allows_host(host):
            return "this server answers only under its own address (Host header refused)"
        if origin is not None and origin.lower() != f"http://{(host or '').lower()}":
            return "this server answers only pages it served itself (Origin header refused)"
        return None
