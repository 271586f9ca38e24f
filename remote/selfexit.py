"""A helper's own deadline: it exits however stuck it is in the kernel, once the time is up.

The jump side gives up on an answer after its own deadline and tears the channel down, but a
helper blocked in open(2) of a job's FIFO, or on a dead network mount, never reads that its
channel is gone: without a deadline of its own it stays on the box for ever, one more per
poll. SIGALRM interrupts such a wait (EINTR), and the handler leaves at once. Standard
library only (py3.8+).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

EXIT_DEADLINE = 124  # as timeout(1) says it
# Armed only in a helper started as a program (cli.main reading sys.argv): a process that calls
# the helper's functions in-process (the jump host's local host, the tests) must never be
# ended by a deadline meant for a helper stuck on a box.
_enabled = False


def enable() -> None:
    """Let exit_after arm deadlines in this process: it is a helper started as a program."""
    global _enabled
    _enabled = True


def _expired(signum: int, frame: Any) -> None:
    try:
        sys.stderr.write("gpuroom-remote: over its own deadline (stuck on a file or a mount?); "
                         "exiting\n")
        sys.stderr.flush()
    finally:
        os._exit(EXIT_DEADLINE)


def exit_after(seconds: float) -> None:
    """Exit with EXIT_DEADLINE after ``seconds`` (0: cancel). One deadline per process;
    nothing unless ``enable`` was called."""
    if not _enabled or not hasattr(signal, "SIGALRM"):
        return
    signal.signal(signal.SIGALRM, _expired)
    signal.alarm(max(0, int(seconds + 0.999)) if seconds > 0 else 0)
