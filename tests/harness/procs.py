"""Process-tree control through /proc: freeze, thaw and kill an sshd with every session under it.

sshd puts each connection in its own session (setsid), so process groups do not cover the tree;
the only complete view is the parent-pid links in /proc.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

TREE_ROUNDS = 50  # a tree that still grows after this many stop rounds is a fork bomb, not sshd
STATE_TIMEOUT_S = 5.0
_POLL_S = 0.01
_GONE_STATES = frozenset({"Z", "X", "x"})
_STOPPED_STATES = frozenset({"T", "t"}) | _GONE_STATES


def _read_stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of pid, or None when it has vanished (a normal race while walking /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[0], int(fields[1])


def process_state(pid: int) -> str | None:
    """The one-letter state of pid (R, S, T, Z...), None when it no longer exists."""
    stat = _read_stat(pid)
    return None if stat is None else stat[0]


def descendants(root_pid: int) -> list[int]:
    """Every live process below root_pid, parents before children."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        stat = _read_stat(int(entry.name))
        if stat is None or stat[0] in _GONE_STATES:
            continue
        children.setdefault(stat[1], []).append(int(entry.name))
    found: list[int] = []
    queue = [root_pid]
    while queue:
        kids = children.get(queue.pop(0), [])
        found.extend(kids)
        queue.extend(kids)
    return found


def _signal(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            continue  # exited (or was reaped) between the walk and the signal


def _wait_states(pids: Iterable[int], states: frozenset[str], what: str) -> None:
    pending = list(pids)
    deadline = time.monotonic() + STATE_TIMEOUT_S
    while pending:
        pending = [p for p in pending if (process_state(p) or "X") not in states]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"processes {pending} not {what} after {STATE_TIMEOUT_S} s")
        time.sleep(_POLL_S)


def stop_tree(root_pid: int) -> list[int]:
    """SIGSTOP root_pid and all its descendants; returns them, root first.

    A process may fork between the walk and its SIGSTOP, so each round waits until the processes
    it signalled are really stopped (a stopped process cannot fork) and walks again, until a walk
    finds nobody new.
    """
    stopped: list[int] = []
    for _ in range(TREE_ROUNDS):
        fresh = [p for p in (root_pid, *descendants(root_pid)) if p not in stopped]
        if not fresh:
            return stopped
        _signal(fresh, signal.SIGSTOP)
        _wait_states(fresh, _STOPPED_STATES, "stopped")
        stopped.extend(fresh)
    raise RuntimeError(f"process tree of {root_pid} still growing after {TREE_ROUNDS} rounds")


def continue_pids(pids: Iterable[int]) -> None:
    """SIGCONT each pid (thaw a tree frozen with stop_tree)."""
    _signal(pids, signal.SIGCONT)


def kill_pids(pids: Iterable[int]) -> None:
    """SIGKILL each pid and wait (bounded) until each has exited."""
    pids = list(pids)
    _signal(pids, signal.SIGKILL)
    _wait_states(pids, _GONE_STATES, "gone")


def terminate_pids(pids: Iterable[int], timeout_s: float) -> list[int]:
    """SIGTERM (and SIGCONT, in case they are stopped); returns those alive after timeout_s."""
    pids = list(pids)
    _signal(pids, signal.SIGTERM)
    _signal(pids, signal.SIGCONT)
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [p for p in pids if (process_state(p) or "X") not in _GONE_STATES]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(_POLL_S)
