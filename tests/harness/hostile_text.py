"""Box text that tries to be markup or drive the terminal, put into every string of a real
document: the room and the readers must show it literally and pass no escape on.

``hostile_copy`` takes a document the real helper wrote (tests/data/scenario-*.json, a
recording line) and replaces every string value, at any depth, with one of ``PAYLOADS`` (a
log chunk's base64 carries one too, so the log pane gets it as bytes); dict keys that are
names the box chose (a queue's name, an env variable) are replaced as well.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Iterator
from typing import Any

# Each one starts with what must show literally, so a cut cell still shows it.
MARKUP = ("python train.py [/]", "[reverse]x[/reverse]", "[link=file:///etc/passwd]x[/link]",
          "[@click=app.quit]x[/]", "[bold red]loud", "[/bold]")
ESCAPES = ("\x1b]52;c;aGVsbG8=\x07", "\x1b[2J\x1b[31m", "\x1b]8;;file:///etc/passwd\x1b\\",
           "\x9b31m", "\x9d0;title\x9c", "\x1bP+q\x1b\\")
OTHER = ("\u202egnp.exe", "nul\x00byte", "bell\x07", "tab\there", "del\x7f", "\u2066iso")
LONG = "L" * 5000  # a 5 KB line

PAYLOADS: tuple[str, ...] = (
    *(f"{m} {e} {o}" for m, e, o in zip(MARKUP, itertools.cycle(ESCAPES),
                                           itertools.cycle(OTHER))),
    f"{MARKUP[0]} {ESCAPES[0]} {LONG}",
    f"hidden\r{MARKUP[1]} over a carriage return",
)
# The literal texts a screen must show somewhere (each payload's head).
LITERALS = ("[/]", "[reverse]x[/reverse]")
# Keys whose dict's keys are names the box chose, not the schema's.
NAMED = ("queues", "env", "counts")


def hostile_copy(doc: Any, payloads: Iterator[str] | None = None) -> Any:
    """``doc`` with every string (and every box-chosen name) replaced by a hostile one."""
    source = payloads if payloads is not None else itertools.cycle(PAYLOADS)
    return _walk(doc, source, named=False)


def _walk(doc: Any, source: Iterator[str], *, named: bool) -> Any:
    if isinstance(doc, str):
        return next(source)
    if isinstance(doc, list):
        return [_walk(v, source, named=False) for v in doc]
    if not isinstance(doc, dict):
        return doc
    out: dict[str, Any] = {}
    for k, v in doc.items():
        if k == "data_b64" and isinstance(v, str):
            out[k] = base64.b64encode("\n".join(PAYLOADS).encode()).decode()
            continue
        name = next(source) if named else k
        out[name] = _walk(v, source, named=k in NAMED)
    return out


def terminal_controls(text: str) -> list[str]:
    """The characters in ``text`` that drive a terminal or reorder what the user reads: ESC,
    every other C0 but tab and newline, DEL, C1, and the bidi overrides and isolates."""
    return sorted({c for c in text if (ord(c) < 0x20 and c not in "\t\n") or 0x7f <= ord(c) <= 0x9f
                   or 0x202a <= ord(c) <= 0x202e or 0x2066 <= ord(c) <= 0x2069})
