"""``serve``: one request line in, one JSON line out, for as long as the channel lives.

The jump host owns the deadline: it tears the channel down when an answer is late or
malformed. Here a bad request gets an error document, never a crash, so one typo does not
cost the box a new interpreter start.
"""

from __future__ import annotations

import json
import sys
from typing import IO, Any, Dict, Optional

from . import selfexit
from .probe import ProbeSession

# A request is a small JSON object; anything larger is a bug or an attack on the helper.
MAX_REQUEST_BYTES = 1 << 20  # 1 MiB
# One answer that takes this long is stuck on the box (a job's FIFO, a dead mount): the jump
# side stopped waiting after seconds, so the helper leaves instead of piling up.
REQUEST_DEADLINE_S = 60.0


def handle(session: ProbeSession, line: str) -> Dict[str, Any]:
    try:
        request = json.loads(line)
    except ValueError as exc:
        return {"ok": False, "error": f"request is not JSON: {exc}"}
    if not isinstance(request, dict):
        return {"ok": False, "error": "request must be a JSON object"}
    op = request.get("op", "probe")
    if op == "probe":
        return {"ok": True, "snapshot": session.snapshot(request.get("args") or {})}
    if op == "ping":
        return {"ok": True}
    return {"ok": False, "error": f"unknown op {op!r} (known: probe, ping)"}


def serve(stdin: Optional[IO[str]] = None, stdout: Optional[IO[str]] = None) -> int:
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    session = ProbeSession()
    try:
        while True:
            line = stdin.readline(MAX_REQUEST_BYTES + 1)
            if not line:
                return 0  # the jump host closed the channel: leave quietly
            if len(line) > MAX_REQUEST_BYTES:
                answer = {"ok": False, "error": f"request over {MAX_REQUEST_BYTES} bytes"}
                # Drain the rest of the oversized line so the next request starts clean.
                while line and not line.endswith("\n"):
                    line = stdin.readline(MAX_REQUEST_BYTES)
            elif not line.strip():
                continue
            else:
                selfexit.exit_after(REQUEST_DEADLINE_S)
                answer = handle(session, line)
                selfexit.exit_after(0)
            stdout.write(json.dumps(answer, separators=(",", ":")) + "\n")
            stdout.flush()
    finally:
        session.close()
