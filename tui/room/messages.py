"""Messages between the fleet, the panes and the app. Small dataclasses, one per event."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message


@dataclass
class HostChanged(Message):
    """The fleet updated one host (a poll answered or failed)."""

    host: str

    def can_replace(self, message: Message) -> bool:
        # Per tick: a slow screen keeps only the newest notice per host; the state it points
        # at is read when handled, so nothing is lost by merging.
        return isinstance(message, HostChanged) and message.host == self.host


@dataclass
class HostSelected(Message):
    """The user picked a host in the hosts table."""

    host: str


@dataclass
class JobSelected(Message):
    """The user moved to a job in the queue table."""

    host: str
    job_id: str
