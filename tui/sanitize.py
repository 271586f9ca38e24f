"""Turn untrusted job output into inert display text.

A job's log is written by arbitrary code on a rented box. Anything that reaches the terminal
could drive it (OSC 52 writes the clipboard, OSC 8 forges links, DCS/APC reach terminal
extensions, cursor moves repaint other panes), so every control and escape sequence is removed
here, before a widget sees the text. Pure functions; the widget only displays what this returns.
"""

from __future__ import annotations

import re

# Display cap per line: a single 1 MB line must not cost a 1 MB render (DESIGN: bounded panes).
MAX_DISPLAY_CHARS = 4096
# Bytes held while waiting for a newline; a longer unterminated run is emitted as a line.
MAX_PENDING_BYTES = 1 << 20  # 1 MiB

# One alternation, longest forms first. String sequences (OSC, DCS, SOS, PM, APC) end at BEL or
# ST (ESC \ or 8-bit 0x9c); an unterminated one swallows the rest of the line, because a
# terminal would also keep consuming it and showing its payload would be wrong either way.
_ESCAPES = re.compile(
    r"""
      \x1b\[ [\x30-\x3f]* [\x20-\x2f]* [\x40-\x7e]?      # CSI (7-bit), final byte may be cut off
    | \x9b   [\x30-\x3f]* [\x20-\x2f]* [\x40-\x7e]?      # CSI (8-bit C1)
    | (?:\x1b[\]PX^_]|[\x9d\x90\x98\x9e\x9f])            # OSC, DCS, SOS, PM, APC
      .*? (?:\x07|\x1b\\|\x9c|$)                         # ... to BEL / ST / end of line
    | \x1b [\x20-\x2f]* [\x30-\x7e]?                     # nF / Fp / Fe / Fs escapes, lone ESC
    """,
    re.VERBOSE | re.DOTALL,
)
# Every C0 except tab, DEL, every C1, and the bidi overrides/isolates that reorder what the
# user reads (a "Trojan Source" line can make `rm -rf` look like something else).
_CONTROLS = re.compile("[\x00-\x08\x0a-\x1f\x7f\x80-\x9f\u202a-\u202e\u2066-\u2069]")
# Every character either pattern above can start a match with, newline aside (lines are split
# on it first). A line with none of them is already what sanitize_line would return, which is
# what lets a flood of plain log lines skip the per-line regex work.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def strip_escapes(text: str) -> str:
    """Remove CSI, OSC, DCS/SOS/PM/APC strings and single-character escapes."""
    return _ESCAPES.sub("", text)


def sanitize_line(text: str) -> str:
    """One log line as a terminal would finally show it, with nothing that drives the terminal.

    ``\\r`` is a line reset (progress bars redraw with it): what follows the last carriage
    return is what the user saw. A trailing ``\\r`` (CRLF endings) resets nothing.
    Every other field the box wrote (a job name, a mount point, an error) is shown through
    this too, its newlines dropped.
    """
    if _UNSAFE.search(text) is None and "\n" not in text:
        return text  # the common case: nothing in it that a step below would change
    text = strip_escapes(text).rstrip("\r\n")
    if "\r" in text:
        text = text.rsplit("\r", 1)[1]
    return _CONTROLS.sub("", text)


def last_words(raw: bytes, limit: int = 400) -> str:
    """A child process's stderr as one safe line for an error message: its last ``limit``
    characters, each line stripped, blank ones dropped, joined with " | "."""
    lines = (sanitize_line(x).strip() for x in raw.decode(errors="replace").splitlines())
    return " | ".join(x for x in lines if x)[-limit:]


def truncate_display(text: str, limit: int = MAX_DISPLAY_CHARS) -> str:
    """Cap one line for display, saying how much was cut so nobody mistakes it for the whole."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} … [+{len(text) - limit} chars]"


def display_line(raw: bytes) -> str:
    """Bytes of one line (no newline) -> safe, bounded display text. Invalid UTF-8 -> U+FFFD."""
    return truncate_display(sanitize_line(raw.decode("utf-8", errors="replace")))


def display_lines(raw: bytes) -> list[str]:
    """``raw`` cut at every ``\\n``, each piece exactly as ``display_line`` shows it.

    One decode and one scan for the whole batch: a megabyte of plain lines costs a split, not
    ten thousand regex passes. Decoding before splitting gives the same text as decoding each
    line, because 0x0a never occurs inside a UTF-8 sequence and ends any broken one.
    """
    text = raw.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if _UNSAFE.search(text) is None:
        if max(map(len, lines)) <= MAX_DISPLAY_CHARS:
            return lines
        return [truncate_display(line) for line in lines]
    unsafe = _UNSAFE.search
    return [
        truncate_display(sanitize_line(line) if unsafe(line) else line) for line in lines
    ]


class LineSplitter:
    """Cuts a byte stream into display lines across arbitrary chunk boundaries.

    Splitting on ``\\n`` before decoding is safe: no UTF-8 multibyte sequence contains 0x0a,
    so a character cut between two chunks is rejoined before it is decoded.
    """

    def __init__(self, max_pending: int = MAX_PENDING_BYTES) -> None:
        self._pending = bytearray()
        self._max_pending = max_pending

    def feed(self, data: bytes, keep: int | None = None) -> list[str]:
        """Append bytes; return the display lines they completed, only the last ``keep`` of
        them when given (a pane that holds ``keep`` lines would drop the others unseen)."""
        if b"\n" not in data:
            # Newline-free chunk (a progress bar, a flood): no re-split of what is held.
            self._pending += data
            self._drop_overwritten()
            lines = self.flush() if len(self._pending) > self._max_pending else []
            return lines if keep is None or keep else []
        buf = bytes(self._pending) + data
        end = buf.rfind(b"\n")
        self._pending = bytearray(buf[end + 1 :])
        self._drop_overwritten()
        start = 0
        if keep is not None:
            # Only the tail is decoded and sanitized: find where its first line starts.
            start = end
            for _ in range(keep):
                start = buf.rfind(b"\n", 0, start)
                if start < 0:
                    break
            start += 1
        lines = display_lines(buf[start:end]) if keep != 0 else []
        if len(self._pending) > self._max_pending:
            # Show an over-long unterminated run now rather than hold memory without bound.
            lines += self.flush()
        return lines if keep is None else lines[-keep:] if keep else []

    def _drop_overwritten(self) -> None:
        # A progress bar rewrites its line with "\r" for hours without a newline: only what
        # follows the last "\r" is ever shown (sanitize_line), so the rest need not be held.
        held = self._pending.rstrip(b"\r")
        cut = held.rfind(b"\r")
        if cut > 0:
            del self._pending[:cut]

    def partial(self) -> str | None:
        """The line the job is still writing (no newline yet), as it looks now: a progress
        bar's latest state. None when nothing is held or it shows as nothing."""
        if not self._pending:
            return None
        line = display_line(bytes(self._pending))
        return line or None

    def flush(self) -> list[str]:
        """The unterminated tail as a line (the job is still writing it)."""
        if not self._pending:
            return []
        line = display_line(bytes(self._pending))
        self._pending.clear()
        return [line]

    def reset(self) -> None:
        """Forget the partial line (the log was truncated or rotated under us)."""
        self._pending.clear()
