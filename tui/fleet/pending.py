"""Pending actions, kept by the fleet: the one writer of ``HostState.pending``.

The room asks the fleet to mark an action when it sends it and to drop the mark when the box
refused it; the fleet retires a mark itself when a snapshot shows the action took effect.
Decided from what the box reports, never from timing, so a snapshot taken before the action
reached the box can never confirm it.
"""

from __future__ import annotations

from gpuroom.tui.model import HostState, PendingAction
from gpuroom.tui.present.jobs import still_pending


class PendingLedger:
    """The pending-action half of a fleet; ``_pending_host`` finds a host's state."""

    def _pending_host(self, host: str) -> HostState | None:
        raise NotImplementedError

    def mark_pending(self, host: str, action: PendingAction) -> None:
        """``action`` was sent to ``host``: show it until a snapshot confirms it."""
        state = self._pending_host(host)
        if state is not None:
            state.pending.append(action)

    def drop_pending(self, host: str, action: PendingAction) -> None:
        """The box refused ``action`` (or it never left): nothing will confirm it."""
        state = self._pending_host(host)
        if state is not None and action in state.pending:
            state.pending.remove(action)

    @staticmethod
    def retire_confirmed(state: HostState) -> None:
        """After a good snapshot: drop every action it shows took effect."""
        state.pending[:] = [a for a in state.pending if still_pending(a, state.snapshot)]
