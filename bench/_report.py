"""Write one benchmark's section of docs/PERFORMANCE.md between its markers."""

from __future__ import annotations

import platform
import re
from pathlib import Path

PERF = Path(__file__).resolve().parent.parent / "docs" / "PERFORMANCE.md"


def machine() -> str:
    import os

    return f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}"


def write_section(name: str, body: str) -> None:
    """Replace the text between <!-- bench:NAME --> and <!-- /bench:NAME -->, or append it."""
    text = PERF.read_text() if PERF.exists() else "# Performance\n"
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n{body.rstrip()}\n{end}"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _m: block, text)
    else:
        text = text + "\n" + block + "\n"
    PERF.write_text(text)
