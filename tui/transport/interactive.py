"""Key ``s``: the user's own interactive ``ssh`` to a host, on the terminal the room hands over.

The argv comes from HostLink.ssh_argv (the user's alias and ssh_config, never a shell string);
this is the one place the room starts ssh itself.
"""

from __future__ import annotations

import os
import subprocess
import threading
from dataclasses import dataclass

from gpuroom.tui.sanitize import last_words

STDERR_KEEP_BYTES = 4096  # the tail of ssh's own stderr kept to quote once the room is back
_CHUNK = 1024
STDERR_FD = 2


@dataclass(frozen=True)
class SshExit:
    """How the user's ssh ended: its status and the last words of its own stderr (inert)."""

    rc: int
    stderr_tail: str


def _tee(src: int, dst: int, kept: bytearray) -> None:
    """Copy ``src`` to ``dst`` as it comes (the user reads ssh's messages live) and keep its
    tail: the room redraws over the terminal once ssh exits, erasing what ssh said."""
    show = True
    while chunk := os.read(src, _CHUNK):
        if show:
            try:
                os.write(dst, chunk)
            except OSError:
                show = False  # the terminal went away: keep draining, or ssh blocks on it
        kept += chunk
        del kept[:-STDERR_KEEP_BYTES]


def run_interactive_ssh(argv: list[str]) -> SshExit:
    """Run ``argv`` attached to the terminal until the user leaves. A session's own output goes
    through the pty to ssh's stdout; ssh's stderr carries only ssh's diagnostics ("Connection
    refused", "Permission denied"), kept here to be said again in the room."""
    kept = bytearray()
    with subprocess.Popen(argv, stderr=subprocess.PIPE) as proc:
        assert proc.stderr is not None
        # fd 2 itself, the terminal: while the app runs, sys.stderr may be its capture.
        reader = threading.Thread(target=_tee, args=(proc.stderr.fileno(), STDERR_FD, kept),
                                  daemon=True)
        reader.start()
        rc = proc.wait()
        reader.join()
    return SshExit(rc, last_words(bytes(kept)))
