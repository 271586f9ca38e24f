"""Which critical items to alert on now: the one decision behind the bell, ``notify_command``
and ``notify_url``, in the room and in ``gpuroom export`` alike.

Pure: this moment's findings and clocks and an injected ``now`` in, the ``Alert``s to send out.
An item is sent once when it becomes critical, again when it changes (a finding's title or
fix; a clock's text counts up every poll, so a clock changes only by its kind), and again
after ``renotify_s`` while it stays critical; an item that clears and comes back is new.
Alerting never tears anything down (principle 9).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuroom.tui.rules.clock import ClockItem, banner_lines
from gpuroom.tui.rules.doctor import Finding

# What a person can do about a critical clock (a finding carries its own fix).
CLOCK_FIX = {
    "idle": "start a job on the box or stop it: it bills while its GPUs idle",
    "walltime": "make sure the job checkpoints before the walltime ends, or extend it",
    "session_cap": "checkpoint and pull now: the session ends at its cap",
    "idle_timeout": "keep the session busy or checkpoint now: it disconnects when idle",
}
DEFAULT_RENOTIFY_S = 3600.0


@dataclass(frozen=True)
class Alert:
    """One critical item as it is sent: the JSON body of ``notify_url`` and a banner line."""

    host: str
    id: str  # a finding's gotcha id, or "clock:<kind>"
    severity: str
    text: str
    fix: str
    line: str  # as the banner writes it (already inert)

    def to_json(self) -> dict[str, str]:
        return {"host": self.host, "id": self.id, "severity": self.severity,
                "text": self.text, "fix": self.fix}


def _alert(item: Finding | ClockItem) -> Alert:
    if isinstance(item, Finding):
        return Alert(item.host, item.id, item.severity, item.title, item.fix,
                     banner_lines([item], [])[0])
    return Alert(item.host, f"clock:{item.kind}", item.severity, item.text,
                 CLOCK_FIX.get(item.kind, "open gpuroom and look at the danger banner"),
                 banner_lines([], [item])[0])


def _identity(item: Finding | ClockItem) -> tuple[str, str, str]:
    """What makes an item "the same" across polls: the idle line's text changes every poll
    ($ burnt grows), its host and kind do not."""
    if isinstance(item, Finding):
        return (item.host, item.id, item.title)
    return (item.host, item.kind, "")


def _signature(item: Finding | ClockItem) -> tuple[str, ...]:
    """What counts as a change of a known item: re-sent at once."""
    if isinstance(item, Finding):
        return (item.severity, item.fix)
    return (item.severity,)


class AlertGate:
    """Remembers what was sent and when; ``due`` says what to send now."""

    def __init__(self, renotify_s: float = DEFAULT_RENOTIFY_S) -> None:
        self.renotify_s = renotify_s
        self._sent: dict[tuple[str, str, str], tuple[tuple[str, ...], float]] = {}

    def due(self, findings: Iterable[Finding], clocks: Iterable[ClockItem], now: float
            ) -> list[Alert]:
        """The critical items of this moment that are new, changed or due again, once each."""
        items: list[Finding | ClockItem] = [f for f in findings if f.severity == "critical"]
        items += [c for c in clocks if c.severity == "critical"]
        live = {_identity(i) for i in items}
        for gone in set(self._sent) - live:  # cleared: its return is new
            del self._sent[gone]
        out = []
        for item in items:
            key, sig = _identity(item), _signature(item)
            before = self._sent.get(key)
            if before is not None and before[0] == sig and now - before[1] < self.renotify_s:
                continue
            self._sent[key] = (sig, now)
            out.append(_alert(item))
        return out
