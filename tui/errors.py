"""One error base, and the one way a bug reaches the user.

A ``GpuroomError`` is a problem the user can act on: it carries what went wrong and, when
known, what to do about it. The room and the CLI show exactly those two things. Any other
exception is a bug in gpuroom: its traceback goes to ``internal-errors.log`` under the user's
state dir and the user sees one line, ``internal error: <what>; details in <path>``, never the
traceback itself.

This module imports nothing from the rest of gpuroom but ``sanitize`` (itself stdlib-only), so
every layer (transport, fleet, config, profiles/) can subclass ``GpuroomError`` without a
cycle.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

import platformdirs

from gpuroom.tui.sanitize import sanitize_line

INTERNAL_LOG_NAME = "internal-errors.log"
# Two files at most (the log and one rotated predecessor), each this big, so a bug that fires
# on every tick for a week cannot fill the disk.
MAX_LOG_BYTES = 1 << 20  # 1 MiB
# One report's traceback is kept to this many characters (its tail, where the raise is):
# an exception quoting a huge answer would otherwise push every other report out.
MAX_REPORT_CHARS = 64 << 10  # 64 KiB
# The one line a user sees is this short; the full text is in the log.
MAX_LINE_CHARS = 300
EXIT_INTERNAL = 70  # sysexits.h EX_SOFTWARE: the CLI's status when gpuroom itself failed


FIX_CLAUSE = ". Fix: "


def with_fix(message: str, fix: str | None) -> str:
    """``message`` and, when there is one, its fix as one clause: "message. Fix: fix".

    The only place the "Fix:" clause is written. A message built from an earlier text (a
    host's config problem, another error's ``str()``) may already end in its own clause; that
    one is the more specific and stays, so no text ever carries two.
    """
    if not fix or FIX_CLAUSE in message:
        return message
    return f"{message.rstrip().rstrip('.')}{FIX_CLAUSE}{fix}"


class GpuroomError(Exception):
    """A problem the user can act on: ``message`` says what happened, ``fix`` what to do.

    ``str()`` is both as one text (``with_fix``). ``exit_code`` is the CLI's status for it
    (tui/cli/main.py: 1 an action failed, 2 usage or config).
    """

    exit_code: ClassVar[int] = 1

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix or None

    def __str__(self) -> str:
        return with_fix(self.message, self.fix)


def _flat(text: str) -> str:
    """``text`` as one inert line: each line sanitized, blank ones dropped, joined by " | "."""
    lines = (sanitize_line(x).strip() for x in text.splitlines())
    return " | ".join(x for x in lines if x)


def one_line(exc: BaseException) -> str:
    """``Type: message`` of any exception as one short line a terminal cannot be driven by:
    the message may quote a box (a job name, a stderr tail) or be many lines long."""
    try:
        text = str(exc)
    except Exception:  # a broken __str__ must not hide the bug it belongs to
        text = "(its message could not be read)"
    words = _flat(text)
    head = type(exc).__name__
    line = f"{head}: {words}" if words else head
    if len(line) > MAX_LINE_CHARS:
        line = line[:MAX_LINE_CHARS] + "…"
    return line


def internal_log_path() -> Path:
    """Where bug reports go: ``platformdirs.user_state_dir("gpuroom")/internal-errors.log``."""
    return Path(platformdirs.user_state_dir("gpuroom")) / INTERNAL_LOG_NAME


def _report(exc: BaseException, context: str) -> str:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if len(tb) > MAX_REPORT_CHARS:
        tb = f"[first {len(tb) - MAX_REPORT_CHARS} characters cut]\n" + tb[-MAX_REPORT_CHARS:]
    # The log is read with cat or less: a message quoting a box must not drive that terminal
    # either, so every line is made inert the same way as on screen.
    body = "\n".join(sanitize_line(line) for line in tb.splitlines())
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return f"=== {stamp} pid {os.getpid()} {sanitize_line(context)}\n{body}\n\n"


def log_internal_error(exc: BaseException, context: str = "", path: Path | None = None) -> Path:
    """Append ``exc``'s traceback to the bug log (mode 0600, dir 0700) and return its path.

    When the log has grown past MAX_LOG_BYTES it becomes ``<name>.1`` (replacing the older
    one) and a new log starts. Raises OSError when the report cannot be written.
    """
    path = path or internal_log_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    report = _report(exc, context).encode("utf-8", errors="replace")
    try:
        if path.stat().st_size + len(report) > MAX_LOG_BYTES:
            os.replace(path, path.with_name(path.name + ".1"))
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.fchmod(fd, 0o600)  # a log made by hand or by an older gpuroom may be wider
        os.write(fd, report)
    finally:
        os.close(fd)
    return path


def report_bug(exc: BaseException, context: str = "") -> str:
    """Log ``exc`` as a bug and return the one line the user sees instead of its traceback:
    ``internal error: <Type: message>; details in <path>``."""
    path = internal_log_path()
    try:
        log_internal_error(exc, context, path)
    except OSError as err:
        return (f"internal error: {one_line(exc)}; its details could not be written to "
                f"{_flat(str(path))} ({_flat(err.strerror or type(err).__name__)})")
    return f"internal error: {one_line(exc)}; details in {_flat(str(path))}"


def describe(exc: BaseException, context: str = "") -> str:
    """What the user sees for ``exc``: a GpuroomError's message and fix, else the bug line
    (after logging the traceback). One line, safe for any terminal."""
    if isinstance(exc, GpuroomError):
        return _flat(str(exc))
    return report_bug(exc, context)


class _BugLogHandler(logging.Handler):
    """A logged exception (asyncio's "Task exception was never retrieved", a library's
    ``logger.exception``) goes to the bug log, with one line on stderr. Logging's last resort
    would print its traceback; other records print as one inert line, as it would."""

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        try:
            text = record.getMessage()
        except (TypeError, ValueError) as err:  # a log call whose arguments miss its format
            text = f"{record.msg!r} ({err})"
        line = report_bug(exc, context=text) if exc is not None else _flat(text)
        print(f"gpuroom: {line}", file=sys.stderr)


@contextmanager
def bugs_reported() -> Iterator[None]:
    """While the CLI runs: an exception no code catches outside the main thread (a thread's,
    a logged task's, one raised in ``__del__``) is logged as a bug and shown as one line,
    where Python would print its traceback to the terminal."""

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None and not isinstance(args.exc_value, SystemExit):
            name = args.thread.name if args.thread is not None else "?"
            line = report_bug(args.exc_value, context=f"thread {name}")
            print(f"gpuroom: {line}", file=sys.stderr)

    def unraisable_hook(args: sys.UnraisableHookArgs) -> None:
        if args.exc_value is not None:
            # Named by type, not repr(): a repr that raises here would print a traceback.
            what = getattr(args.object, "__qualname__", type(args.object).__name__)
            where = f"{args.err_msg or 'Exception ignored in'}: {what}"
            print(f"gpuroom: {report_bug(args.exc_value, context=where)}", file=sys.stderr)

    handler = _BugLogHandler(logging.WARNING)
    root = logging.getLogger()
    saved = threading.excepthook, sys.unraisablehook
    threading.excepthook, sys.unraisablehook = thread_hook, unraisable_hook
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        threading.excepthook, sys.unraisablehook = saved
