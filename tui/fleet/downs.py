"""When each host went DOWN after being UP: ``downs.json`` in the jump host's state dir.

A stopped box does not answer, and a platform releases a stopped box after a while (AutoDL:
15 days, its data disk with it). The countdown needs when it went down, which no box can say
once it is off: the jump host remembers the last time each host answered, and a host DOWN
after that is counted from it. The record is a file, so a room opened days later, or
`gpuroom doctor` from cron, counts from the same moment. A host that answers again is up.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import platformdirs

from gpuroom.tui.model import HostState, LinkState

# The last-answered time is written at most this often while a host stays up: a countdown
# of days does not need the seconds, and a poll every 5 s must not rewrite a file each time.
WRITE_EVERY_S = 300.0


def state_file(path: Path | None = None) -> Path:
    return path or Path(platformdirs.user_state_dir("gpuroom")) / "downs.json"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


class HostDowns:
    """Each host's last answer and, while it is DOWN, since when (its last answer)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = state_file(path)
        self._hosts: dict[str, dict[str, float | None]] = self._read()
        self._written: dict[str, float | None] = {
            h: r.get("last_up") for h, r in self._hosts.items()}

    def _read(self) -> dict[str, dict[str, float | None]]:
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}  # none yet, or damaged: no countdown until a host is seen up again
        hosts = doc.get("hosts") if isinstance(doc, dict) else None
        if not isinstance(hosts, dict):
            return {}
        return {str(h): {"last_up": _number(r.get("last_up")),
                         "down_since": _number(r.get("down_since"))}
                for h, r in hosts.items() if isinstance(r, dict)}

    def _write(self) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # private
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"hosts": self._hosts}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._written = {h: r.get("last_up") for h, r in self._hosts.items()}

    def observe(self, h: HostState) -> None:
        """One poll outcome. UP: it answered (down no more); DOWN: down since its last
        answer, if it ever answered; STALE says nothing yet."""
        record = self._hosts.setdefault(h.name, {"last_up": None, "down_since": None})
        if h.state is LinkState.UP and h.last_ok is not None:
            was_down = record["down_since"] is not None
            record["last_up"], record["down_since"] = h.last_ok, None
            written = self._written.get(h.name)
            if was_down or written is None or h.last_ok - written >= WRITE_EVERY_S:
                self._write()
        elif h.state is LinkState.DOWN and record["down_since"] is None \
                and record["last_up"] is not None:
            record["down_since"] = record["last_up"]
            self._write()

    def down_since(self, host: str) -> float | None:
        record = self._hosts.get(host)
        return record.get("down_since") if record is not None else None

    def all_down(self) -> dict[str, float]:
        return {h: t for h, r in self._hosts.items()
                if (t := r.get("down_since")) is not None}
