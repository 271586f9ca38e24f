"""The hardware boundary this machine lacks (no GPU), replayed from real captures.

``FIXTURES`` is the repository's capture folder, tests/fixtures (``$GPUROOM_FIXTURES`` points a
fake run on a test box at the harness's copy); each capture is
``# source/what/note`` lines, a ``---`` line, then the verbatim command output.
"""

from __future__ import annotations

from pathlib import Path

from paths import FIXTURES

FAKES = Path(__file__).resolve().parent
NVIDIA_SMI = FAKES / "nvidia-smi"


def split_capture(text: str) -> tuple[dict[str, str], str]:
    """(header fields, verbatim output) of one capture file."""
    head, sep, body = text.partition("\n---\n")
    if not sep:
        raise ValueError("capture has no '---' line between its header and the output")
    meta: dict[str, str] = {}
    for line in head.splitlines():
        key, _, value = line.lstrip("# ").partition(":")
        if value:
            meta[key.strip()] = value.strip()
    return meta, body


def capture(rel: str) -> str:
    """The verbatim output of ``FIXTURES/rel``."""
    return split_capture((FIXTURES / rel).read_text(encoding="utf-8"))[1]


def capture_what(rel: str) -> str:
    """The ``# what:`` line of ``FIXTURES/rel``: the command that produced it."""
    return split_capture((FIXTURES / rel).read_text(encoding="utf-8"))[0]["what"]
