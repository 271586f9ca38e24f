"""``[settings] notify_url``: what makes one sendable, checked when hosts.toml loads, and the
exact URL the POST goes to.

The URL often carries a token (an ntfy topic, a webhook's secret path), so nothing here ever
puts the URL itself in a message: a refusal says what is wrong and where to look, and
``where`` is the only form of it a message may show (scheme, host and port).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

EXAMPLE = 'e.g. notify_url = "https://ntfy.sh/my-gpuroom-topic"'
# Printable ASCII but the space: what may stay as it is in a path, query or fragment (a
# "%" already there is the user's own escape and is kept).
_KEEP = "".join(chr(c) for c in range(0x21, 0x7f))


class UrlRefused(ValueError):
    """Why a notify_url cannot be sent to, and the fix; neither quotes the URL."""

    def __init__(self, reason: str, fix: str = EXAMPLE) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fix = fix


def _ascii_host(host: str) -> str:
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        raise UrlRefused("its host name is not a valid internationalised domain name",
                         "write the host in its xn-- (punycode) form") from None


def request_url(url: Any) -> str:
    """``url`` as the ASCII URL a POST can go to, or UrlRefused.

    Refused: not a string; a space, a line break or any control character (urllib would
    refuse it only at send time, quoting the path); a scheme other than http(s); no host; a
    bad port; ``user:password@`` (urllib sends no credentials from a URL, so the alert would
    never be delivered). A non-ASCII path, query or fragment is percent-encoded as UTF-8 and
    a non-ASCII host written in IDNA, as a browser would send them.
    """
    if not isinstance(url, str):
        raise UrlRefused("must be a URL string")
    bad = next((i for i, c in enumerate(url) if c.isspace() or ord(c) < 0x20
                or 0x7f <= ord(c) <= 0x9f), None)
    if bad is not None:
        raise UrlRefused(f"has a space, line break or control character (character {bad + 1})",
                         "write a space as %20 and remove line breaks and tabs")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UrlRefused(f"is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UrlRefused("must be an http:// or https:// URL with a host")
    if "@" in parts.netloc:
        raise UrlRefused("carries a user name or password (user:password@host), which is "
                         "never sent, so no alert would be delivered",
                         "remove the user:password@ part; a webhook that needs a secret takes "
                         "it in its path or query (ntfy: an access token as ?auth=...)")
    host = _ascii_host(parts.hostname) if not parts.hostname.isascii() else parts.hostname
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{port}" if port is not None else "")
    return urlunsplit((parts.scheme, netloc, quote(parts.path, safe=_KEEP),
                       quote(parts.query, safe=_KEEP), quote(parts.fragment, safe=_KEEP)))


def where(url: str) -> str:
    """The URL without its path, query or credentials: the only form a message shows."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "notify_url"
    host = parts.hostname or "?"
    if not host.isascii() or not host.isprintable():
        host = "?"
    return f"{parts.scheme}://{host}{port}"
