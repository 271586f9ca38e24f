"""The room's own messages. A pane's messages live with the pane (``HostsTable.Selected``,
``QueueTable.Selected``), so widgets import nothing of the room."""

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
