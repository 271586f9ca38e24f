"""``--listen HOST:PORT`` of ``gpuroom export`` and ``gpuroom web``: loopback unless the user
says otherwise with ``--allow-remote``, and then it is said on start (the fleet's state, and
in ``web`` the room's keys, are for whoever can reach the address)."""

from __future__ import annotations

import argparse
import ipaddress
from typing import ClassVar

from gpuroom.tui.errors import GpuroomError


class ListenError(GpuroomError):
    exit_code: ClassVar[int] = 2  # a usage error


def parse_listen(text: str, *, allow_remote: bool, flag: str = "--listen") -> tuple[str, int]:
    """(host, port) of ``127.0.0.1:9108``, ``[::1]:9108`` or ``localhost:9108``."""
    host, sep, port_text = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ListenError(f"{flag} {text!r} is not HOST:PORT",
                          f"e.g. {flag} 127.0.0.1:9108 (port 0 picks a free one)")
    if host == "localhost":
        return host, int(port_text)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ListenError(f"{flag} {host!r} is not an IP address",
                          f"give an address of this machine, e.g. {flag} 127.0.0.1:"
                          f"{port_text}") from None
    if not address.is_loopback and not allow_remote:
        raise ListenError(f"{flag} {host} is not a loopback address: anyone who can reach "
                          "it would see the fleet", "keep 127.0.0.1, or add --allow-remote "
                          "if that is what you want")
    return host, int(port_text)


def remote_notice(host: str, guard: str = "there is no authentication") -> str | None:
    """The line said on start when the address is reachable from other machines; ``guard``
    says what still stands between them and what is served."""
    if host == "localhost" or ipaddress.ip_address(host).is_loopback:
        return None
    return (f"warning: listening on {host}, reachable from other machines (--allow-remote); "
            f"{guard}")


def add_listen_args(parser: argparse.ArgumentParser, default: str, what: str,
                    guard: str = "no authentication") -> None:
    parser.add_argument("--listen", default=default, metavar="HOST:PORT",
                        help=f"address to serve {what} on (default {default}, loopback)")
    parser.add_argument("--allow-remote", action="store_true",
                        help=f"allow a non-loopback --listen address ({guard})")
